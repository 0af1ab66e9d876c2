//go:build gpu

package emu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/kernelsrc"
	"github.com/gumbel-go/gumbel/runtime"
	_ "github.com/gumbel-go/gumbel/runtime/cuda" // registers the CUDA backend
)

// The CUDA edition on a real GPU, against the Go edition: the emulation's workload
// (blocks rounded up to the device's warp size) plus full-size launches. Build and run on
// the GPU host, from the repository root:
//
//	CGO_ENABLED=0 go test -tags gpu -c -o .gpu/kernelsrc_emu.test ./kernelsrc/emu
//	(cd kernelsrc/emu && ../../.gpu/kernelsrc_emu.test -test.run GPU -test.v)

// gpuShape uses the real warp size (32) and mostly full-width blocks.
func gpuShape(r *rand.Rand, _ int) (block, warp int) {
	return []int{1024, 1024, 256, 96, 32}[r.IntN(5)], 32
}

// gpuLaunches adds vocabularies of real models, split into as many blocks as a launch
// policy might choose, and a categorical launch with more chunks than the draw has tiles.
func gpuLaunches(r *rand.Rand) []*launch {
	var ls []*launch
	for dt := range 3 {
		for _, s := range []int{1, 4, 37, 132} {
			v := []int{32000, 151936}[r.IntN(2)]
			l := &launch{kernel: kernelGumbel, dtype: dt, gridX: s, block: 1024, vocab: v,
				stride: stride(r, v), slack: r.IntN(16), slots: 9}
			l.name = fmt.Sprintf("gpu gumbel dtype=%d S=%d V=%d stride=%d", dt, s, v, l.stride)
			l.rows(r, nil)
			l.fill(r)
			ls = append(ls, l)
		}
		for _, block := range []int{1024, 128} {
			l := &launch{kernel: kernelCategorical, dtype: dt, gridX: 1, block: block, vocab: 151936,
				stride: 151936 + 3*dt, slack: r.IntN(16), slots: 9}
			l.name = fmt.Sprintf("gpu categorical dtype=%d V=151936 T=%d", dt, block)
			l.rows(r, func(p *rowParams) {
				p.topK = []uint32{0, 0, 1, 50, 1000}[r.IntN(5)]
				p.topP = []float32{0, 0, 0.5, 0.9, 0.95}[r.IntN(5)]
				p.minP = []float32{0, 0, 0, 0.05}[r.IntN(4)]
			})
			l.fill(r)
			ls = append(ls, l)
		}
	}
	return ls
}

// runDevice runs the launch on dev, twice: the second run starts from the counters the
// first left behind (zero, by the ABI) and must give the same answer.
func runDevice(t *testing.T, dev runtime.Device, mod runtime.Module, l *launch) outcome {
	t.Helper()
	k, err := mod.Kernel(kernelNames[l.kernel] + kernelsrc.Suffixes[l.dtype])
	require.NoError(t, err)
	warp := max(dev.Info().WarpSize, 1)
	block := min((l.block+warp-1)/warp*warp, k.MaxThreadsPerBlock())
	n := len(l.params)
	s := dev.DefaultStream()

	var bufs []runtime.Buffer
	defer func() {
		for _, b := range bufs {
			assert.NoError(t, b.Free())
		}
	}()
	alloc := func(bytes int) runtime.Buffer {
		b, err := dev.Alloc(bytes)
		require.NoError(t, err)
		bufs = append(bufs, b)
		return b
	}
	// The logits start slack bytes (rounded to the element size) into their buffer, so
	// that rows meet every alignment of the vector loads.
	off := l.slack &^ (l.elemSize() - 1)
	logits := alloc(len(l.logits) + 16)
	require.NoError(t, s.CopyToDevice(logits, off, l.logits))
	params := alloc(n * paramsBytes)
	require.NoError(t, s.CopyToDevice(params, 0, l.paramBytes()))
	tokens, status := alloc(4*l.slots), alloc(4*l.slots)
	partials := alloc(8 * n * l.gridX)
	counters := alloc(8 * n)
	require.NoError(t, s.Zero(counters, 0, 8*n))

	untouchedSlots := make([]int32, l.slots)
	for i := range untouchedSlots {
		untouchedSlots[i] = untouched
	}
	var a runtime.Args
	var runs [2]outcome
	for i := range runs {
		require.NoError(t, s.CopyToDevice(tokens, 0, runtime.BytesOf(untouchedSlots)))
		require.NoError(t, s.CopyToDevice(status, 0, runtime.BytesOf(untouchedSlots)))
		a.Reset().BufferAt(logits, off).Buffer(params).Buffer(tokens).Buffer(status).
			Buffer(partials).Buffer(counters).U64(uint64(l.stride)).U32(uint32(l.vocab))
		require.NoError(t, s.Launch(k, runtime.Dim3{X: l.gridX, Y: n, Z: 1}, runtime.Dim3{X: block, Y: 1, Z: 1}, &a),
			"%s", l.name)
		o := outcome{tokens: make([]int32, l.slots), status: make([]int32, l.slots), counters: make([]uint32, 2*n)}
		require.NoError(t, s.CopyToHost(runtime.BytesOf(o.tokens), tokens, 0))
		require.NoError(t, s.CopyToHost(runtime.BytesOf(o.status), status, 0))
		require.NoError(t, s.CopyToHost(runtime.BytesOf(o.counters), counters, 0))
		require.NoError(t, s.Synchronize(), "%s", l.name)
		runs[i] = o
	}
	require.Equal(t, runs[0], runs[1], "%s: a second launch gave another answer", l.name)
	return runs[0]
}

func TestGPUCUDAEditionMatchesGoEdition(t *testing.T) {
	opened, err := runtime.Open(runtime.OpenOptions{Backend: string(runtime.CUDA)})
	require.NoError(t, err)
	dev := opened.Device
	defer dev.Close()
	t.Logf("device: %+v", dev.Info())
	mod, err := dev.Load(kernelsrc.Sampling())
	require.NoError(t, err)
	defer mod.Close()

	r := rand.New(rand.NewPCG(20240601, 8))
	ls := append(testLaunches(r, gpuShape), gpuLaunches(r)...)
	got := make([]outcome, len(ls))
	for i, l := range ls {
		got[i] = runDevice(t, dev, mod, l)
	}
	compareWithGo(t, "CUDA edition on "+dev.Info().Name, ls, got)
}
