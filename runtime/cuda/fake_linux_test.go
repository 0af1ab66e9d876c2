//go:build linux && (amd64 || arm64)

package cuda

// The package's tests on the fake driver of runtime/internal/fakegpu: the cases every
// backend shares (gputest.Fake), then CUDA's own.

import (
	"testing"

	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/runtime/internal/fakegpu"
	"github.com/gumbel-go/gumbel/runtime/internal/gpurt"
	"github.com/gumbel-go/gumbel/runtime/internal/gputest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// openFake binds the fake's libcuda and NVRTC as loadDriver and loadNVRTC bind the real
// ones, then opens device ordinal of g, with the disk cache in a temporary folder.
func openFake(t testing.TB, g *fakegpu.GPU, ordinal int) (runtime.Device, error) {
	t.Helper()
	t.Setenv(EnvCacheDir, t.TempDir())
	gputest.KeepWords(t, results)
	gputest.KeepWords(t, nvrtcResults)
	drv, err := newDriver("/fake/libcuda.so.1", g.Lookup)
	require.NoError(t, err)
	rtc, err := newNVRTC("/fake/libnvrtc.so.13", g.Lookup)
	require.NoError(t, err)
	d, err := open(drv, rtc, ordinal)
	if err != nil {
		return nil, err
	}
	return d, nil
}

// fakeBackend is this package to the shared cases.
var fakeBackend = gputest.Backend{Device: fakegpu.H200(), Open: openFake, Target: target, Code: gputest.CodeOf[Result]}

// fakeDevice opens device 0 of g.
func fakeDevice(t *testing.T, g *fakegpu.GPU) *Device {
	return gputest.OpenFake(t, fakeBackend, g, 0).(*Device)
}

func TestFake(t *testing.T) { gputest.Fake(t, fakeBackend) }

func BenchmarkFakeLaunch(b *testing.B) { gputest.FakeLaunchBenchmark(b, fakeBackend) }

func TestFakeDeviceInfo(t *testing.T) {
	g := fakegpu.New(fakegpu.H200())
	d := fakeDevice(t, g)
	info := d.Info()
	assert.Equal(t, runtime.DeviceInfo{
		Backend: runtime.CUDA, Name: "Fake H200", Arch: "sm_90", Multiprocessors: 132,
		MaxThreadsPerBlock: 1024, WarpSize: 32, TotalMemory: 141 << 30, L2CacheBytes: 50 << 20,
		Libraries: []string{"/fake/libcuda.so.1", "/fake/libnvrtc.so.13"},
	}, info)
	info.Libraries[0] = "changed"
	assert.Equal(t, "/fake/libcuda.so.1", d.Info().Libraries[0], "Info returns a copy")
	major, minor := d.ComputeCapability()
	assert.Equal(t, [2]int{9, 0}, [2]int{major, minor})
	assert.Equal(t, "sm_90", d.Target())
	assert.Equal(t, "13.0", d.DriverVersion())
	assert.Equal(t, "99.0", d.NVRTCVersion())
	assert.Equal(t, 0, d.Ordinal())
	assert.Equal(t, fakegpu.Context(0), d.Context())
	assert.Equal(t, 1, g.Retained(0), "the primary context is held")
	assert.NotZero(t, d.DefaultStream().Handle())
	assert.NoError(t, d.DefaultStream().Close(), "closing the default stream does nothing")
	assert.NoError(t, d.DefaultStream().Synchronize())
	_, ok := d.DefaultStream().(runtime.GraphCapturer)
	assert.True(t, ok, "CUDA streams capture graphs")

	require.NoError(t, d.Close())
	assert.Zero(t, g.Retained(0), "Close released the primary context")
	assert.NoError(t, d.Close(), "a second Close does nothing")
	assert.Zero(t, g.Retained(0))
}

func TestFakeCompileError(t *testing.T) {
	d := fakeDevice(t, fakegpu.New(fakegpu.H200()))
	t.Setenv(EnvCacheDir, "off")
	_, err := d.Load(&runtime.Program{Name: "broken", CUDA: "#error gumbel wants this to fail\n"})
	var ce *runtime.CompileError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "broken", ce.Program)
	var nr NVRTCResult
	require.ErrorAs(t, err, &nr)
	assert.Equal(t, NVRTCErrorCompilation, nr)
	assert.ErrorContains(t, err, "NVRTC_ERROR_COMPILATION", "NVRTC's words for it")
}

func TestFakeLoadCache(t *testing.T) {
	g := fakegpu.New(fakegpu.H200())
	caseLoadCache(t, fakeDevice(t, g))
	assert.Equal(t, 2, g.Compiles, "compiled cold and after the corruption only")
}

func TestFakeLoadCacheOff(t *testing.T) {
	g := fakegpu.New(fakegpu.H200())
	d := fakeDevice(t, g)
	t.Setenv(EnvCacheDir, "off")
	memoryCache.forget()
	for _, want := range []LoadSource{Compiled, MemoryCache} {
		m, err := d.Load(gputest.Program())
		require.NoError(t, err)
		require.NoError(t, m.Close())
		assert.Equal(t, want, d.LastLoad().Source)
		assert.NoError(t, d.LastLoad().CacheErr)
	}
	assert.Equal(t, 1, g.Compiles)
}

func TestFakeCompileOptions(t *testing.T) {
	g := fakegpu.New(fakegpu.H200())
	d := fakeDevice(t, g)
	t.Setenv(EnvCacheDir, "off")
	memoryCache.forget()
	_, err := d.Load(gputest.Program())
	require.NoError(t, err)
	assert.Equal(t, fakegpu.Source, g.Source)
	assert.Equal(t, compileOptions(d.target), g.Options)
	// The fake's code object records the options NVRTC was given.
	img, ok := memoryCache.get(newCacheKey(fakegpu.Source, nil, compileOptions(d.target), "sm_90", d.NVRTCVersion()))
	require.True(t, ok)
	assert.Equal(t, fakegpu.Code("--gpu-architecture=sm_90", "--fmad=false", "-default-device", "--std=c++17"), img.data)
	assert.Zero(t, g.Programs(), "every NVRTC program destroyed")
}

func TestFakeLaunchDependent(t *testing.T) {
	for _, c := range []struct {
		name  string
		cc    [2]int
		attrs map[uint32]uint32
	}{
		{"sm_90 launches through cuLaunchKernelEx", [2]int{9, 0}, map[uint32]uint32{6: 1}},
		{"sm_80 launches as usual", [2]int{8, 0}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			dev := fakegpu.H200()
			dev.CC = c.cc
			g := fakegpu.New(dev)
			d := fakeDevice(t, g)
			m, err := d.Load(gputest.Program())
			require.NoError(t, err)
			k, err := m.Kernel("add_one")
			require.NoError(t, err)
			x := gputest.Alloc(t, d, 16)
			s := d.DefaultStream()
			dl, ok := s.(runtime.DependentLauncher)
			require.True(t, ok, "CUDA streams launch dependent kernels")
			assert.Equal(t, c.attrs != nil, dl.Overlaps(), "they overlap from sm_90")

			var args runtime.Args
			args.Reset().Buffer(x).U32(4)
			require.NoError(t, dl.LaunchDependent(k, runtime.Dim3{X: 1}, runtime.Dim3{X: 4}, &args))
			require.NoError(t, s.Launch(k, runtime.Dim3{X: 1}, runtime.Dim3{X: 4}, &args))
			require.Len(t, g.Launches, 2)
			assert.Equal(t, c.attrs, g.Launches[0].Attrs)
			assert.Nil(t, g.Launches[1].Attrs, "Launch takes cuLaunchKernel")
			assert.Equal(t, g.Launches[1].Slots, g.Launches[0].Slots)
			assert.Equal(t, [3]uintptr{4, 1, 1}, g.Launches[0].Block)

			got := make([]byte, 16)
			require.NoError(t, s.CopyToHost(got, x, 0))
			assert.Equal(t, []float32{2, 2, 2, 2}, gputest.Floats(got), "both launches ran")

			args.Reset().Buffer(x)
			assert.ErrorIs(t, dl.LaunchDependent(k, runtime.Dim3{X: 1}, runtime.Dim3{X: 4}, &args), runtime.ErrInvalidArgument,
				"the launch is checked as Launch checks it")
			assert.Len(t, g.Launches, 2)
			args.Reset().Buffer(x).U32(4)
			assert.ErrorIs(t, s.(*stream).LaunchWith(k, runtime.Dim3{X: 1}, runtime.Dim3{X: 4}, &args, gpurt.LaunchAttr{}),
				runtime.ErrUnavailable, "an extended launch needs an attribute")
			assert.Len(t, g.Launches, 2)
			require.NoError(t, m.Close())
		})
	}
}
