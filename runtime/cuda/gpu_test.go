//go:build gpu

package cuda

// Tests on a real NVIDIA GPU. Build and run them with the gpu tag, e.g. on the GPU host:
//
//	bash .gpu/run-tests -test.run 'GPU' -test.v
//	bash .gpu/run-tests -test.run XXX -test.bench 'GPU' -test.benchtime 20000x

import (
	"fmt"
	"testing"
	"time"

	"github.com/gumbel-go/gumbel/kernelsrc"
	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/runtime/internal/gpurt"
	"github.com/gumbel-go/gumbel/runtime/internal/gputest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// openGPU opens device 0, with the disk cache in a temporary folder.
func openGPU(t testing.TB) *Device {
	t.Helper()
	t.Setenv(EnvCacheDir, t.TempDir())
	dev, err := Open(0)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, dev.Close()) })
	return dev.(*Device)
}

func TestGPUDeviceInfo(t *testing.T) {
	d := openGPU(t)
	info := d.Info()
	t.Logf("%+v", info)
	t.Logf("driver %s, NVRTC %s, target %s", d.DriverVersion(), d.NVRTCVersion(), d.Target())
	assert.Equal(t, runtime.CUDA, info.Backend)
	assert.NotEmpty(t, info.Name)
	major, minor := d.ComputeCapability()
	assert.GreaterOrEqual(t, major, 7)
	assert.Equal(t, fmt.Sprintf("sm_%d%d", major, minor), info.Arch)
	assert.Positive(t, info.Multiprocessors)
	assert.Equal(t, 1024, info.MaxThreadsPerBlock)
	assert.Equal(t, 32, info.WarpSize)
	assert.Greater(t, info.TotalMemory, uint64(1<<30))
	assert.Len(t, info.Libraries, 2)
	for _, l := range info.Libraries {
		assert.NotContains(t, l, "/stubs/")
	}
	res := probe()
	require.NoError(t, res.Err)
	require.NotEmpty(t, res.Devices)
	assert.Equal(t, info.Name, res.Devices[0].Name)
	t.Logf("probe: %d devices, libraries %v", len(res.Devices), res.Libraries)
}

// TestGPU runs the cases every backend shares on device 0.
func TestGPU(t *testing.T) {
	gputest.Run(t, func(t testing.TB) gputest.Target { return target(openGPU(t)) })
}

func TestGPULoadCache(t *testing.T) { caseLoadCache(t, openGPU(t)) }

// TestGPUTwoDevicesShareContext: two Opens of one ordinal share the primary context and
// closing one leaves the other working.
func TestGPUTwoDevicesShareContext(t *testing.T) {
	a := openGPU(t)
	dev, err := Open(0)
	require.NoError(t, err)
	b := dev.(*Device)
	assert.Equal(t, a.Context(), b.Context())
	buf, err := b.Alloc(64)
	require.NoError(t, err)
	require.NoError(t, b.Close())
	assert.NoError(t, buf.Free(), "released by Close already")
	gputest.Memory(t, target(a))
}

// TestGPUSamplingProgramCompiles compiles the real kernel set with this package's NVRTC
// options and checks every kernel's launch limits and parameters against the ABI.
func TestGPUSamplingProgramCompiles(t *testing.T) {
	d := openGPU(t)
	t.Setenv(EnvCacheDir, "off")
	memoryCache.forget()
	m, err := d.Load(kernelsrc.Sampling())
	require.NoError(t, err)
	defer m.Close()
	st := d.LastLoad()
	t.Logf("sampling program: %s for %s, NVRTC %v, total %v", st.Source, st.Target, st.Compile.Round(time.Millisecond), st.Total.Round(time.Millisecond))
	if st.Log != "" {
		t.Logf("NVRTC log:\n%s", st.Log)
	}
	for _, base := range []string{abi.GumbelArgmax, abi.Categorical, abi.TopN} {
		for _, suffix := range abi.Suffixes {
			k, err := m.Kernel(base + suffix)
			require.NoError(t, err)
			t.Logf("%s: max %d threads per block", k.Name(), k.MaxThreadsPerBlock())
			assert.Equal(t, 1024, k.MaxThreadsPerBlock(), "%s should allow 1024-thread blocks", k.Name())
			assert.Equal(t, abiParamSizes, k.(*gpurt.Kernel).ParamSizes, "%s parameters (ABI.md)", k.Name())
		}
	}
}

// abiParamSizes are the parameter sizes of every sampling kernel (ABI.md):
// six buffers, row_stride (u64), vocab (u32), four more buffers.
var abiParamSizes = []int{8, 8, 8, 8, 8, 8, 8, 4, 8, 8, 8, 8}

const emptySource = `extern "C" __global__ void empty() {}`

// BenchmarkGPULaunch measures back-to-back launches of an empty kernel: the floor a
// sampling step's launch pays through purego.
func BenchmarkGPULaunch(b *testing.B) {
	d := openGPU(b)
	m, err := d.Load(&runtime.Program{Name: "empty", CUDA: emptySource})
	require.NoError(b, err)
	defer m.Close()
	k, err := m.Kernel("empty")
	require.NoError(b, err)
	s := d.DefaultStream()
	var args runtime.Args
	one := runtime.Dim3{X: 1}
	require.NoError(b, s.Launch(k, one, one, &args))
	require.NoError(b, s.Synchronize())
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := s.Launch(k, one, one, args.Reset()); err != nil {
			b.Fatal(err)
		}
	}
	require.NoError(b, s.Synchronize())
}

// BenchmarkGPUStep measures a small sampling-like step: upload 4 KiB, launch, read 4 KiB
// back, synchronize.
func BenchmarkGPUStep(b *testing.B) {
	d := openGPU(b)
	m, err := d.Load(gputest.Program())
	require.NoError(b, err)
	defer m.Close()
	k, err := m.Kernel("add_one")
	require.NoError(b, err)
	s, err := d.NewStream()
	require.NoError(b, err)
	defer s.Close()
	buf, err := d.Alloc(4096)
	require.NoError(b, err)
	defer buf.Free()
	host, err := d.AllocHost(4096)
	require.NoError(b, err)
	defer host.Free()
	var args runtime.Args
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := s.CopyToDevice(buf, 0, host.Bytes()); err != nil {
			b.Fatal(err)
		}
		if err := s.Launch(k, runtime.Dim3{X: 1}, runtime.Dim3{X: 1024}, args.Reset().Buffer(buf).U32(1024)); err != nil {
			b.Fatal(err)
		}
		if err := s.CopyToHost(host.Bytes(), buf, 0); err != nil {
			b.Fatal(err)
		}
		if err := s.Synchronize(); err != nil {
			b.Fatal(err)
		}
	}
}
