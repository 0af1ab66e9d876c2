//go:build linux && (amd64 || arm64)

package hip

import (
	"math"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/runtime"
)

// These tests drive the whole device path (open, memory, streams, launches, modules,
// events) against the fake runtime of fake_test.go.

// openFake opens device 0 of a fresh fake runtime.
func openFake(t *testing.T, setup func(f *fakeState)) (*Device, *fakeState) {
	t.Helper()
	f := newFake()
	if setup != nil {
		setup(f)
	}
	forgetCode()
	d, err := open(fakeDriver(f), fakeCompiler(), 0)
	require.NoError(t, err)
	t.Cleanup(func() { d.Close() })
	return d, f
}

// forgetCode empties the code-object cache, so each test compiles afresh.
func forgetCode() {
	codeCache.Lock()
	clear(codeCache.m)
	codeCache.Unlock()
}

// fakeProgram has the kernels the fake runtime knows.
var fakeProgram = &runtime.Program{Name: "fake", HIPPrelude: "// prelude", CUDA: "// kernels probe_fill and probe_small"}

func TestOpenReadsDeviceInfo(t *testing.T) {
	tests := []struct {
		name       string
		r0600      bool
		archName   string
		warp       int
		wantTarget string
	}{
		{"ROCm 6 layout, CDNA", true, "gfx90a:sramecc+:xnack-", 64, "gfx90a"},
		{"ROCm 5 layout, CDNA", false, "gfx90a:sramecc+:xnack-", 64, "gfx90a"},
		{"ROCm 6 layout, RDNA", true, "gfx1100", 32, "gfx1100"},
		{"ROCm 5 layout, RDNA", false, "gfx1030", 32, "gfx1030"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, _ := openFake(t, func(f *fakeState) { f.r0600, f.archName, f.warpSize = tc.r0600, tc.archName, tc.warp })
			info := d.Info()
			assert.Equal(t, runtime.HIP, info.Backend)
			assert.Equal(t, "Fake Instinct MI210", info.Name)
			assert.Equal(t, tc.wantTarget, info.Arch)
			assert.Equal(t, tc.wantTarget, d.Target())
			assert.Equal(t, tc.archName, d.ArchName())
			assert.Equal(t, tc.warp, info.WarpSize)
			assert.Equal(t, 104, info.Multiprocessors)
			assert.Equal(t, 1024, info.MaxThreadsPerBlock)
			assert.Equal(t, uint64(64<<30), info.TotalMemory)
			assert.False(t, info.UnifiedMemory)
			assert.Equal(t, []string{"libamdhip64.fake", "libhiprtc.fake"}, info.Libraries)
			assert.Equal(t, "6.2.41134", d.RuntimeVersion())
			assert.Equal(t, "6.4", d.HIPRTCVersion())
		})
	}
}

func TestOpenRefusesWhatItCannotUse(t *testing.T) {
	tests := []struct {
		name    string
		ordinal int
		setup   func(f *fakeState)
		want    error
	}{
		{"negative ordinal", -1, nil, runtime.ErrUnavailable},
		{"ordinal past the last device", 1, nil, runtime.ErrUnavailable},
		{"no devices", 0, func(f *fakeState) { f.devices = 0 }, runtime.ErrUnavailable},
		{"device count fails", 0, func(f *fakeState) { f.fail["hipGetDeviceCount"] = ErrorNoDevice }, runtime.ErrUnavailable},
		{"unreadable gcnArchName", 0, func(f *fakeState) { f.archName = "\x01garbage" }, runtime.ErrUnavailable},
		{"no stream", 0, func(f *fakeState) { f.fail["hipHostMalloc"] = ErrorOutOfMemory }, runtime.ErrOutOfMemory},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake()
			if tc.setup != nil {
				tc.setup(f)
			}
			_, err := open(fakeDriver(f), fakeCompiler(), tc.ordinal)
			assert.ErrorIs(t, err, tc.want)
		})
	}
}

func TestMemoryRoundTrip(t *testing.T) {
	d, f := openFake(t, nil)
	s := d.DefaultStream()
	buf, err := d.Alloc(64)
	require.NoError(t, err)
	host, err := d.AllocHost(64)
	require.NoError(t, err)

	src := host.Bytes()
	for i := range src {
		src[i] = byte(i + 1)
	}
	require.NoError(t, s.CopyToDevice(buf, 0, src))
	require.NoError(t, s.Zero(buf, 8, 16))
	got := make([]byte, 64)
	require.NoError(t, s.CopyToHost(got, buf, 0))

	want := make([]byte, 64)
	for i := range want {
		if i < 8 || i >= 24 {
			want[i] = byte(i + 1)
		}
	}
	assert.Equal(t, want, got)
	assert.Equal(t, want, f.allocs[buf.DevicePtr()], "device memory")
	assert.Equal(t, 1, f.memsets)
	for _, c := range f.copies {
		assert.Equal(t, s.Handle(), c.stream, "%s on the stream", c.call)
	}

	require.NoError(t, buf.Free())
	require.NoError(t, buf.Free(), "a second Free does nothing")
	assert.Equal(t, []uintptr{buf.DevicePtr()}, f.freed)
	assert.ErrorIs(t, s.CopyToHost(got, buf, 0), runtime.ErrClosed)
	p := uintptr(unsafe.Pointer(&src[0]))
	require.NoError(t, host.Free())
	assert.Nil(t, host.Bytes())
	assert.Contains(t, f.hostFreed, p)
}

func TestCopiesFromGoMemoryWaitAndPinnedOnesDoNot(t *testing.T) {
	d, f := openFake(t, nil)
	s := d.DefaultStream()
	buf, err := d.Alloc(32)
	require.NoError(t, err)
	host, err := d.AllocHost(32)
	require.NoError(t, err)
	goMem := make([]byte, 32)

	tests := []struct {
		name      string
		copy      func() error
		wantSyncs int
	}{
		{"upload from a HostBuffer", func() error { return s.CopyToDevice(buf, 0, host.Bytes()) }, 0},
		{"upload from part of a HostBuffer", func() error { return s.CopyToDevice(buf, 4, host.Bytes()[8:20]) }, 0},
		{"download into a HostBuffer", func() error { return s.CopyToHost(host.Bytes()[:16], buf, 16) }, 0},
		{"upload from Go memory", func() error { return s.CopyToDevice(buf, 0, goMem) }, 1},
		{"download into Go memory", func() error { return s.CopyToHost(goMem, buf, 0) }, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := len(f.syncs)
			require.NoError(t, tc.copy())
			assert.Equal(t, tc.wantSyncs, len(f.syncs)-before)
		})
	}
	require.NoError(t, host.Free())
	before := len(f.syncs)
	require.NoError(t, s.CopyToDevice(buf, 0, make([]byte, 8)))
	assert.Equal(t, 1, len(f.syncs)-before, "memory of a freed HostBuffer no longer counts as pinned")
}

func TestCopyAndZeroRejectBadRanges(t *testing.T) {
	d, _ := openFake(t, nil)
	other, _ := openFake(t, nil)
	s := d.DefaultStream()
	buf, err := d.Alloc(16)
	require.NoError(t, err)
	foreign, err := other.Alloc(16)
	require.NoError(t, err)

	tests := []struct {
		name string
		op   func() error
		want error
	}{
		{"upload past the end", func() error { return s.CopyToDevice(buf, 8, make([]byte, 9)) }, runtime.ErrInvalidArgument},
		{"upload at a negative offset", func() error { return s.CopyToDevice(buf, -1, make([]byte, 1)) }, runtime.ErrInvalidArgument},
		{"download past the end", func() error { return s.CopyToHost(make([]byte, 17), buf, 0) }, runtime.ErrInvalidArgument},
		{"zero past the end", func() error { return s.Zero(buf, 15, 2) }, runtime.ErrInvalidArgument},
		{"zero a negative count", func() error { return s.Zero(buf, 0, -1) }, runtime.ErrInvalidArgument},
		{"nil buffer", func() error { return s.Zero(nil, 0, 1) }, runtime.ErrInvalidArgument},
		{"another device's buffer", func() error { return s.Zero(foreign, 0, 1) }, runtime.ErrInvalidArgument},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.ErrorIs(t, tc.op(), tc.want)
		})
	}
	assert.NoError(t, s.CopyToDevice(buf, 16, nil), "an empty copy at the end is fine")
}

func TestLaunchPassesGridAndArguments(t *testing.T) {
	d, f := openFake(t, nil)
	mod, err := d.Load(fakeProgram)
	require.NoError(t, err)
	k, err := mod.Kernel("probe_fill")
	require.NoError(t, err)
	assert.Equal(t, "probe_fill", k.Name())
	assert.Equal(t, 1024, k.MaxThreadsPerBlock())

	logits, err := d.Alloc(1024)
	require.NoError(t, err)
	tokens, err := d.Alloc(64)
	require.NoError(t, err)
	s, err := d.NewStream()
	require.NoError(t, err)
	defer s.Close()

	var args runtime.Args
	args.Reset().Buffer(logits).BufferAt(tokens, 8).U32(7).U64(1 << 40).F32(0.5)
	require.NoError(t, s.Launch(k, runtime.Dim3{X: 3, Y: 5}, runtime.Dim3{X: 256}, &args))

	require.Len(t, f.launches, 1)
	l := f.launches[0]
	assert.Equal(t, "probe_fill", l.kernel)
	assert.Equal(t, [3]uintptr{3, 5, 1}, l.grid, "zero dimensions launch as 1")
	assert.Equal(t, [3]uintptr{256, 1, 1}, l.block)
	assert.Equal(t, s.Handle(), l.stream)
	assert.Zero(t, l.shared)
	assert.True(t, l.extraWasNull)
	assert.Equal(t, 0, l.device, "hipSetDevice(0) came before the launch")
	want := [16]uint64{uint64(logits.DevicePtr()), uint64(tokens.DevicePtr()) + 8, 7, 1 << 40, uint64(math.Float32bits(0.5))}
	assert.Equal(t, want, l.slots)

	// A shorter list leaves no stale argument behind.
	args.Reset().U32(9)
	require.NoError(t, s.Launch(k, runtime.Dim3{X: 1}, runtime.Dim3{X: 64}, &args))
	assert.Equal(t, [16]uint64{9}, f.launches[1].slots)
}

func TestLaunchRejectsBadLaunches(t *testing.T) {
	d, f := openFake(t, nil)
	other, _ := openFake(t, nil)
	mod, err := d.Load(fakeProgram)
	require.NoError(t, err)
	fill, err := mod.Kernel("probe_fill")
	require.NoError(t, err)
	small, err := mod.Kernel("probe_small")
	require.NoError(t, err)
	assert.Equal(t, 256, small.MaxThreadsPerBlock(), "the kernel's own limit, below the device's")
	otherMod, err := other.Load(fakeProgram)
	require.NoError(t, err)
	foreignKernel, err := otherMod.Kernel("probe_fill")
	require.NoError(t, err)
	buf, err := d.Alloc(16)
	require.NoError(t, err)
	freed, err := d.Alloc(16)
	require.NoError(t, err)
	require.NoError(t, freed.Free())
	foreignBuf, err := other.Alloc(16)
	require.NoError(t, err)

	one := runtime.Dim3{X: 1}
	ok := new(runtime.Args).Buffer(buf).U32(1)
	var tooMany runtime.Args
	for range runtime.MaxArgs + 1 {
		tooMany.U32(1)
	}
	s := d.DefaultStream()
	tests := []struct {
		name        string
		k           runtime.Kernel
		grid, block runtime.Dim3
		args        *runtime.Args
		want        error
	}{
		{"nil kernel", nil, one, one, ok, runtime.ErrInvalidArgument},
		{"kernel of another device", foreignKernel, one, one, ok, runtime.ErrInvalidArgument},
		{"block over the kernel's limit", small, one, runtime.Dim3{X: 257}, ok, runtime.ErrInvalidArgument},
		{"block over the device's limit", fill, one, runtime.Dim3{X: 32, Y: 64}, ok, runtime.ErrInvalidArgument},
		{"negative grid", fill, runtime.Dim3{X: -1}, one, ok, runtime.ErrInvalidArgument},
		{"grid over the device's limit", fill, runtime.Dim3{X: 1, Y: 65537}, one, ok, runtime.ErrInvalidArgument},
		{"more work-items than a dispatch holds", fill, runtime.Dim3{X: math.MaxInt32}, runtime.Dim3{X: 4}, ok, runtime.ErrInvalidArgument},
		{"nil arguments", fill, one, one, nil, runtime.ErrInvalidArgument},
		{"too many arguments", fill, one, one, &tooMany, runtime.ErrInvalidArgument},
		{"nil buffer argument", fill, one, one, new(runtime.Args).Buffer(nil), runtime.ErrInvalidArgument},
		{"freed buffer argument", fill, one, one, new(runtime.Args).Buffer(freed), runtime.ErrClosed},
		{"buffer of another device", fill, one, one, new(runtime.Args).Buffer(foreignBuf), runtime.ErrInvalidArgument},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.ErrorIs(t, s.Launch(tc.k, tc.grid, tc.block, tc.args), tc.want)
		})
	}
	assert.Empty(t, f.launches, "no bad launch reached HIP")

	require.NoError(t, s.Launch(fill, runtime.Dim3{X: math.MaxInt32}, one, ok), "2^31-1 work-items fit")
	require.NoError(t, mod.Close())
	require.NoError(t, mod.Close(), "a second Close does nothing")
	assert.ErrorIs(t, s.Launch(fill, one, one, ok), runtime.ErrClosed)
	_, err = mod.Kernel("probe_fill")
	assert.ErrorIs(t, err, runtime.ErrClosed)
}

func TestLaunchReportsHIPErrors(t *testing.T) {
	d, f := openFake(t, nil)
	mod, err := d.Load(fakeProgram)
	require.NoError(t, err)
	k, err := mod.Kernel("probe_fill")
	require.NoError(t, err)
	f.fail["hipModuleLaunchKernel"] = ErrorInvalidValue
	err = d.DefaultStream().Launch(k, runtime.Dim3{X: 1}, runtime.Dim3{X: 1}, new(runtime.Args))
	assert.ErrorIs(t, err, runtime.ErrInvalidArgument)
	var r Result
	require.ErrorAs(t, err, &r)
	assert.Equal(t, ErrorInvalidValue, r)
	assert.Contains(t, err.Error(), "hipModuleLaunchKernel(probe_fill")
}

func TestLoadCompilesOnceAndFindsKernels(t *testing.T) {
	d, f := openFake(t, nil)
	m1, err := d.Load(fakeProgram)
	require.NoError(t, err)
	m2, err := d.Load(fakeProgram)
	require.NoError(t, err)
	assert.Equal(t, 1, f.compiles, "the second Load takes the cached code object")
	assert.Zero(t, f.programsLeft, "every hiprtc program destroyed")
	assert.Equal(t, fakeProgram.HIPPrelude+"\n"+fakeProgram.CUDA, f.lastSource)
	assert.Equal(t, []string{"--offload-arch=gfx90a", "-O3", "-std=c++17", "-ffp-contract=off"}, f.lastOptions)
	assert.Len(t, f.modules, 2)
	for _, image := range f.modules {
		assert.Equal(t, f.code, image, "hipModuleLoadData got the compiled code object")
	}

	_, err = m1.Kernel("no_such_kernel")
	assert.ErrorIs(t, err, runtime.ErrNoKernel)
	k1, err := m1.Kernel("probe_fill")
	require.NoError(t, err)
	again, err := m1.Kernel("probe_fill")
	require.NoError(t, err)
	assert.Same(t, k1, again, "kernels are looked up once")

	require.NoError(t, m1.Close())
	require.NoError(t, m2.Close())
	assert.Empty(t, f.modules, "both modules unloaded")

	_, err = d.Load(nil)
	assert.ErrorIs(t, err, runtime.ErrInvalidArgument)
	_, err = d.Load(&runtime.Program{Name: "metal only", Metal: "kernel void k() {}"})
	assert.ErrorIs(t, err, runtime.ErrInvalidArgument)
}

func TestLoadReportsCompileErrorsWithTheLog(t *testing.T) {
	d, f := openFake(t, func(f *fakeState) {
		f.compileFails = true
		f.compileLog = "fake.hip:3:7: error: use of undeclared identifier 'x'"
	})
	_, err := d.Load(fakeProgram)
	var ce *runtime.CompileError
	require.ErrorAs(t, err, &ce)
	assert.ErrorIs(t, err, runtime.ErrCompile)
	assert.Equal(t, f.compileLog, ce.Log)
	assert.Contains(t, ce.Program, "fake for gfx90a")
	assert.Zero(t, f.programsLeft)

	f.compileFails = false
	_, err = d.Load(fakeProgram)
	require.NoError(t, err, "a failure is not cached")
	assert.Equal(t, 2, f.compiles)
}

func TestEventsTime(t *testing.T) {
	d, f := openFake(t, nil)
	s := d.DefaultStream()
	start, err := d.NewEvent()
	require.NoError(t, err)
	stop, err := d.NewEvent()
	require.NoError(t, err)
	require.NoError(t, s.Record(start))
	require.NoError(t, s.Record(stop))
	require.NoError(t, stop.Synchronize())
	ms, err := stop.ElapsedSince(start)
	require.NoError(t, err)
	startH, stopH := f.records[0][0], f.records[1][0]
	assert.Equal(t, float32(stopH-startH)/16, ms, "the fake's elapsed time came back")
	assert.Equal(t, s.Handle(), f.records[0][1])

	require.NoError(t, start.Close())
	require.NoError(t, start.Close(), "a second Close does nothing")
	assert.ErrorIs(t, s.Record(start), runtime.ErrClosed)
	_, err = stop.ElapsedSince(start)
	assert.ErrorIs(t, err, runtime.ErrClosed)
	assert.ErrorIs(t, s.Record(nil), runtime.ErrInvalidArgument)
}

func TestWrapStreamAndDevicePointer(t *testing.T) {
	d, f := openFake(t, nil)
	engine := uintptr(0xabc0)

	s, err := WrapStream(d, engine)
	require.NoError(t, err)
	assert.Equal(t, engine, s.Handle())
	require.NoError(t, s.Synchronize())
	assert.Equal(t, engine, f.syncs[len(f.syncs)-1])
	require.NoError(t, s.Close())
	assert.NotContains(t, f.destroyed, engine, "a wrapped stream stays the caller's")

	f.streamDevice = 3
	_, err = WrapStream(d, engine)
	assert.ErrorIs(t, err, runtime.ErrInvalidArgument, "a stream of another device")
	_, err = WrapStream(nil, engine)
	assert.ErrorIs(t, err, runtime.ErrInvalidArgument)

	owned, err := d.Alloc(256)
	require.NoError(t, err)
	view, err := WrapDevicePointer(d, owned.DevicePtr()+16, 128)
	require.NoError(t, err)
	assert.Equal(t, owned.DevicePtr()+16, view.DevicePtr())
	assert.Equal(t, 128, view.Size())
	require.NoError(t, view.Free())
	assert.Empty(t, f.freed, "a wrapped pointer stays the caller's")

	tests := []struct {
		name  string
		ptr   uintptr
		bytes int
	}{
		{"overruns the allocation", owned.DevicePtr() + 16, 241},
		{"not device memory", 0xdead0000, 8},
		{"null", 0, 8},
		{"negative size", owned.DevicePtr(), -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := WrapDevicePointer(d, tc.ptr, tc.bytes)
			assert.ErrorIs(t, err, runtime.ErrInvalidArgument)
		})
	}
}

func TestClosedDeviceRefusesWorkButReleases(t *testing.T) {
	d, f := openFake(t, nil)
	buf, err := d.Alloc(16)
	require.NoError(t, err)
	s, err := d.NewStream()
	require.NoError(t, err)
	def := d.DefaultStream()
	require.NoError(t, def.Close(), "the default stream is the device's to close")
	require.NoError(t, def.Synchronize())

	require.NoError(t, d.Close())
	require.NoError(t, d.Close(), "a second Close does nothing")

	_, err = d.Alloc(16)
	assert.ErrorIs(t, err, runtime.ErrClosed)
	_, err = d.NewStream()
	assert.ErrorIs(t, err, runtime.ErrClosed)
	_, err = d.Load(fakeProgram)
	assert.ErrorIs(t, err, runtime.ErrClosed)
	assert.ErrorIs(t, s.Synchronize(), runtime.ErrClosed)
	assert.ErrorIs(t, def.Zero(buf, 0, 1), runtime.ErrClosed)

	require.NoError(t, buf.Free())
	assert.Contains(t, f.freed, buf.DevicePtr(), "Free still releases after Close")
	require.NoError(t, s.Close())
	assert.Contains(t, f.destroyed, s.Handle(), "Close still destroys after Close")
	assert.Contains(t, f.destroyed, def.Handle(), "the device destroyed its default stream")
}

func TestAllocReportsOutOfMemory(t *testing.T) {
	d, f := openFake(t, nil)
	f.fail["hipMalloc"] = ErrorOutOfMemory
	_, err := d.Alloc(1 << 40)
	assert.ErrorIs(t, err, runtime.ErrOutOfMemory)
	assert.Contains(t, err.Error(), "hipMalloc(1099511627776)")
	_, err = d.Alloc(-1)
	assert.ErrorIs(t, err, runtime.ErrInvalidArgument)
	empty, err := d.Alloc(0)
	require.NoError(t, err)
	assert.Zero(t, empty.DevicePtr())
	_, err = d.AllocHost(-1)
	assert.ErrorIs(t, err, runtime.ErrInvalidArgument)
}
