//go:build gpu

package nccl

// The real libnccl on a real NVIDIA GPU. Run on the GPU host:
//
//	go test -tags gpu -count=1 -v -run GPU ./collective/nccl/
//
// or build here and copy the static binary over:
//
//	CGO_ENABLED=0 go test -c -tags gpu -o nccl-gpu.test ./collective/nccl/
//	./nccl-gpu.test -test.v -test.run GPU

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/collective"
	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/runtime/cuda"
)

// openGPU opens CUDA device 0 and libnccl; a missing library fails the test, saying
// where it was looked for.
func openGPU(t *testing.T) (runtime.Device, *Library) {
	t.Helper()
	t.Setenv(cuda.EnvCacheDir, t.TempDir())
	dev, err := cuda.Open(0)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, dev.Close()) })
	lib, err := Open()
	require.NoError(t, err)
	v, err := lib.Version()
	require.NoError(t, err)
	t.Logf("device %s, NCCL version code %d", dev.Info().Name, v)
	return dev, lib
}

// identity checks, on a one-rank communicator, that AllReduce max of uint64 keys (above
// 2^63 among them) and sum of float32 leave the buffer as it was, on a stream of the
// device, at an offset.
func identity(t *testing.T, dev runtime.Device, c collective.Comm) {
	t.Helper()
	s, err := dev.NewStream()
	require.NoError(t, err)
	defer s.Close()
	buf, err := dev.Alloc(4096)
	require.NoError(t, err)
	defer buf.Free()

	keys := []uint64{1 << 63, math.MaxUint64, 0, 0xBF80000000000000 | 12345, 7}
	f32 := []float32{1.5, -2.25, 1e-30, 3e38, 0}
	cases := []struct {
		name string
		dt   collective.DType
		op   collective.Op
		off  int
		data []byte
	}{
		{"max uint64", collective.Uint64, collective.OpMax, 0, runtime.BytesOf(keys)},
		{"max uint64 at an offset", collective.Uint64, collective.OpMax, 256, runtime.BytesOf(keys)},
		{"sum float32", collective.Float32, collective.OpSum, 0, runtime.BytesOf(f32)},
		{"sum float32 at an offset", collective.Float32, collective.OpSum, 1028, runtime.BytesOf(f32)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, s.Zero(buf, 0, buf.Size()))
			require.NoError(t, s.CopyToDevice(buf, tc.off, tc.data))
			require.NoError(t, c.AllReduce(buf, tc.off, len(tc.data)/tc.dt.Size(), tc.dt, tc.op, s))
			got := make([]byte, buf.Size())
			require.NoError(t, s.CopyToHost(got, buf, 0))
			require.NoError(t, s.Synchronize())
			assert.Equal(t, tc.data, got[tc.off:tc.off+len(tc.data)], "one rank: the identity")
			assert.Equal(t, make([]byte, tc.off), got[:tc.off], "nothing before the offset changed")
			if tc.dt == collective.Uint64 {
				assert.Equal(t, uint64(math.MaxUint64), binary.LittleEndian.Uint64(got[tc.off+8:]))
			}
		})
	}
}

func TestGPUInitAllOneRank(t *testing.T) {
	dev, lib := openGPU(t)
	comms, err := lib.InitAll([]runtime.Device{dev})
	require.NoError(t, err)
	require.Len(t, comms, 1)
	c := comms[0]
	assert.Equal(t, [2]int{0, 1}, [2]int{c.Rank(), c.Size()})
	identity(t, dev, c)
	require.NoError(t, c.Close())
	assert.NoError(t, c.Close(), "a second Close does nothing")
}

// TestGPUInitRankOneRank passes a unique id by value to the real ncclCommInitRank: a
// garbled id would not find its own bootstrap root.
func TestGPUInitRankOneRank(t *testing.T) {
	dev, lib := openGPU(t)
	id, err := lib.UniqueID()
	require.NoError(t, err)
	c, err := lib.InitRank(dev, id, 1, 0)
	require.NoError(t, err)
	identity(t, dev, c)
	require.NoError(t, c.Close())
}

// TestGPUAllReduceAllocatesNothing: the per-step call, context switch included, allocates
// nothing on the Go heap.
func TestGPUAllReduceAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector")
	}
	dev, lib := openGPU(t)
	comms, err := lib.InitAll([]runtime.Device{dev})
	require.NoError(t, err)
	defer comms[0].Close()
	buf, err := dev.Alloc(8 * 64)
	require.NoError(t, err)
	defer buf.Free()
	s := dev.DefaultStream()
	allocs := testing.AllocsPerRun(200, func() {
		if err := comms[0].AllReduce(buf, 0, 64, collective.Uint64, collective.OpMax, s); err != nil {
			panic(err)
		}
	})
	require.NoError(t, s.Synchronize())
	assert.Zero(t, allocs)
}
