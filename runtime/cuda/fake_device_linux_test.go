//go:build linux

package cuda

import (
	"errors"
	goruntime "runtime"
	"testing"

	"github.com/ebitengine/purego"
	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/runtime/internal/gpurt"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFakeDeviceInfo(t *testing.T) {
	d := openFake(t)
	info := d.Info()
	assert.Equal(t, runtime.DeviceInfo{
		Backend: runtime.CUDA, Name: "Fake H200", Arch: "sm_90", Multiprocessors: 132,
		MaxThreadsPerBlock: 1024, WarpSize: 32, TotalMemory: 141 << 30,
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
	assert.Equal(t, uintptr(fakeCtx), d.Context())
	assert.NotZero(t, d.DefaultStream().Handle())
	assert.NoError(t, d.DefaultStream().Close(), "closing the default stream does nothing")
	assert.NoError(t, d.DefaultStream().Synchronize())
}

func TestFakeOpenChecksOrdinal(t *testing.T) {
	d := openFake(t)
	for _, ordinal := range []int{-1, 1, 7} {
		_, err := open(d.drv, d.rtc, ordinal)
		assert.ErrorIs(t, err, runtime.ErrUnavailable, "ordinal %d", ordinal)
	}
}

func TestFakeAllocCopyZero(t *testing.T) { caseAllocCopyZero(t, openFake(t)) }
func TestFakeLaunch(t *testing.T)        { caseLaunch(t, openFake(t)) }
func TestFakeLaunchErrors(t *testing.T)  { caseLaunchErrors(t, openFake(t)) }
func TestFakeCompileError(t *testing.T)  { caseCompileError(t, openFake(t)) }
func TestFakeWrap(t *testing.T)          { caseWrap(t, openFake(t)) }

func TestFakeWrapForeignStream(t *testing.T) {
	d := openFake(t)
	_, err := WrapStream(d, fakeForeignStream)
	assert.ErrorIs(t, err, runtime.ErrInvalidArgument)
	_, err = WrapStream(d, 0xBAD)
	assert.ErrorIs(t, err, runtime.ErrInvalidArgument)
	_, err = WrapDevicePointer(d, 0xBAD0000, 16)
	assert.ErrorIs(t, err, runtime.ErrInvalidArgument, "memory the driver does not know")
}

func TestFakeEvents(t *testing.T) {
	// The fake clock ticks once per record, half a millisecond a tick.
	assert.Equal(t, float32(0.5), caseEvents(t, openFake(t)))
}

func TestFakeLoadCache(t *testing.T) {
	d := openFake(t)
	caseLoadCache(t, d)
	assert.Equal(t, 2, fake.compiles, "compiled cold and after the corruption only")
}

func TestFakeLoadCacheOff(t *testing.T) {
	d := openFake(t)
	t.Setenv(EnvCacheDir, "off")
	memoryCache.forget()
	m, err := d.Load(testProgram())
	require.NoError(t, err)
	require.NoError(t, m.Close())
	assert.Equal(t, Compiled, d.LastLoad().Source)
	assert.NoError(t, d.LastLoad().CacheErr)
	m, err = d.Load(testProgram())
	require.NoError(t, err)
	require.NoError(t, m.Close())
	assert.Equal(t, MemoryCache, d.LastLoad().Source)
	assert.Equal(t, 1, fake.compiles)
}

func TestFakeCompileOptions(t *testing.T) {
	d := openFake(t)
	t.Setenv(EnvCacheDir, "off")
	memoryCache.forget()
	_, err := d.Load(testProgram())
	require.NoError(t, err)
	// The fake's "CUBIN" records the options NVRTC was given.
	img, ok := memoryCache.get(newCacheKey(testSource, nil, compileOptions(d.target), "sm_90", d.NVRTCVersion()))
	require.True(t, ok)
	assert.Equal(t, "FAKECUBIN --gpu-architecture=sm_90 --fmad=false -default-device --std=c++17", string(img.data))
}

func TestFakeGoroutineHopping(t *testing.T) {
	d := openFake(t)
	m, _, _ := loadKernels(t, d)
	caseGoroutineHopping(t, d, m, 8, 100)
}

// TestFakeDetectsEscapedCalls shows that the fake, like the driver, refuses a call made
// on a thread where the context is not current: the hopping test can fail.
func TestFakeDetectsEscapedCalls(t *testing.T) {
	d := openFake(t)
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	gpurt.CallN(d.drv.cuCtxSetCurrent, 0)
	r := Result(gpurt.CallN(d.drv.cuStreamSynchronize, d.DefaultStream().Handle()))
	assert.Equal(t, ErrorInvalidContext, r)
	assert.Equal(t, "CUDA_ERROR_INVALID_CONTEXT: invalid device context", r.Error())
	assert.NoError(t, d.DefaultStream().Synchronize(), "the stream makes its context current itself")
}

// nopDriver returns a copy of d's driver whose per-step functions are libm's fegetround:
// a C function that ignores its arguments, has no side effects and returns 0
// (FE_TONEAREST, and CUDA_SUCCESS), and allocates nothing, unlike the fake's Go
// callbacks. Measures the package's own cost of a step.
func nopDriver(t testing.TB, d *Device) *driver {
	libm, err := purego.Dlopen("libm.so.6", purego.RTLD_NOW|purego.RTLD_LOCAL)
	require.NoError(t, err)
	nop, err := purego.Dlsym(libm, "fegetround")
	require.NoError(t, err)
	require.Zero(t, gpurt.CallN(nop), "fegetround must return 0 to stand in for the driver")
	y := *d.drv
	for _, p := range []*uintptr{&y.cuCtxSetCurrent, &y.cuLaunchKernel, &y.cuMemcpyHtoDAsync, &y.cuMemcpyDtoHAsync,
		&y.cuMemsetD8Async, &y.cuEventRecord, &y.cuStreamSynchronize, &y.cuEventSynchronize} {
		*p = nop
	}
	return &y
}

func TestFakeHotPathAllocs(t *testing.T) {
	d := openFake(t)
	m, _, _ := loadKernels(t, d)
	real := d.drv
	d.drv = nopDriver(t, d)
	defer func() { d.drv = real }()
	caseHotPathAllocs(t, d, m)
}

// BenchmarkFakeLaunch measures the package's own cost of a Launch: checks, argument
// packing, the thread lock and two C calls (cuCtxSetCurrent, cuLaunchKernel) to a
// function that does nothing.
func BenchmarkFakeLaunch(b *testing.B) {
	d := openFakeB(b)
	m, err := d.Load(testProgram())
	require.NoError(b, err)
	k, err := m.Kernel("add_one")
	require.NoError(b, err)
	buf, err := d.Alloc(4096)
	require.NoError(b, err)
	s, err := d.NewStream()
	require.NoError(b, err)
	real := d.drv
	d.drv = nopDriver(b, d)
	var args runtime.Args
	b.ReportAllocs()
	for b.Loop() {
		args.Reset().Buffer(buf).U32(1024)
		if err := s.Launch(k, runtime.Dim3{X: 1}, runtime.Dim3{X: 1024}, &args); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	d.drv = real
	require.NoError(b, s.Close())
	require.NoError(b, buf.Free())
	require.NoError(b, m.Close())
	require.NoError(b, d.Close())
}

func TestFakeClosedDevice(t *testing.T) {
	d := openFake(t)
	s := newStream(t, d)
	b, err := d.Alloc(64)
	require.NoError(t, err)
	h, err := d.AllocHost(64)
	require.NoError(t, err)
	ev, err := d.NewEvent()
	require.NoError(t, err)
	m, _, _ := loadKernels(t, d)
	require.NoError(t, d.Close())
	assert.Nil(t, h.Bytes(), "pinned memory is gone with the device")
	require.NoError(t, d.Close(), "a second Close does nothing")
	assert.Equal(t, 0, fake.retained, "the primary context is released")

	for name, err := range map[string]error{
		"Alloc":       func() error { _, err := d.Alloc(16); return err }(),
		"Alloc(0)":    func() error { _, err := d.Alloc(0); return err }(),
		"AllocHost":   func() error { _, err := d.AllocHost(16); return err }(),
		"NewStream":   func() error { _, err := d.NewStream(); return err }(),
		"NewEvent":    func() error { _, err := d.NewEvent(); return err }(),
		"Load":        func() error { _, err := d.Load(testProgram()); return err }(),
		"Kernel":      func() error { _, err := m.Kernel("scale"); return err }(),
		"Synchronize": s.Synchronize(),
		"Zero":        s.Zero(b, 0, 4),
		"Record":      s.Record(ev),
		"Event":       ev.Synchronize(),
	} {
		assert.ErrorIs(t, err, runtime.ErrClosed, name)
	}
	// Close released everything still open, so a later Free or Close has nothing to do.
	assert.Empty(t, fake.mem, "device memory, pinned memory and argument blocks freed")
	assert.Equal(t, map[uintptr]bool{fakeForeignStream: true}, fake.streams, "streams destroyed")
	assert.Empty(t, fake.events)
	assert.Empty(t, fake.modules)
	assert.NoError(t, b.Free())
	assert.NoError(t, ev.Close())
	assert.NoError(t, m.Close())
}

// openFakeB is openFake for benchmarks.
func openFakeB(b *testing.B) *Device {
	b.Setenv(EnvCacheDir, "off")
	drv, rtc, restore := newFake(b)
	d, err := open(drv, rtc, 0)
	require.NoError(b, err)
	b.Cleanup(restore)
	return d
}

func TestFakeOutOfMemory(t *testing.T) {
	d := openFake(t)
	_, err := d.Alloc(2 << 30)
	require.Error(t, err)
	assert.ErrorIs(t, err, runtime.ErrOutOfMemory)
	assert.Equal(t, "cuMemAlloc_v2(2147483648): CUDA_ERROR_OUT_OF_MEMORY: out of memory", err.Error())
	var r Result
	require.True(t, errors.As(err, &r))
	assert.Equal(t, ErrorOutOfMemory, r)
}
