//go:build linux && (amd64 || arm64)

package gputest

import (
	"errors"
	goruntime "runtime"
	"testing"
	"unsafe"

	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/runtime/internal/fakegpu"
	"github.com/gumbel-go/gumbel/runtime/internal/gpurt"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Backend is how the fake cases open devices of one backend on the fake driver.
type Backend struct {
	// Device is what each of the fake's devices is like.
	Device fakegpu.Device
	// Open binds the backend to g, as it would bind a loaded library, and opens device
	// ordinal.
	Open func(t testing.TB, g *fakegpu.GPU, ordinal int) (runtime.Device, error)
	// Target describes a device Open opened.
	Target func(d runtime.Device) Target
	// Code returns the backend's typed status (its Result) that err wraps.
	Code func(err error) (code int32, ok bool)
}

// OpenFake opens device ordinal of g through be, which must work; the device is closed
// when the test ends.
func OpenFake(t testing.TB, be Backend, g *fakegpu.GPU, ordinal int) runtime.Device {
	t.Helper()
	d, err := be.Open(t, g, ordinal)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, d.Close()) })
	return d
}

// CodeOf is Backend.Code for a backend whose status type is R.
func CodeOf[R interface {
	~int32
	error
}](err error) (int32, bool) {
	var r R
	ok := errors.As(err, &r)
	return int32(r), ok
}

// KeepWords puts back, when the test ends, the words for codes that binding a fake
// library installs for the whole process.
func KeepWords[R ~int32](t testing.TB, codes *gpurt.Codes[R]) {
	prev := codes.Load()
	t.Cleanup(func() { codes.Store(prev) })
}

// Fake runs the shared cases against be on the fake driver, each on a fresh fake GPU of
// two devices, then the cases that read the fake's record.
func Fake(t *testing.T, be Backend) {
	nop := fakegpu.NoopC(t)
	Run(t, func(t testing.TB) Target {
		g := fakegpu.New(be.Device, be.Device)
		tg := be.Target(OpenFake(t, be, g, 0))
		tg.Other, tg.Nop = OpenFake(t, be, g, 1), nop
		return tg
	})
	for _, c := range []struct {
		name string
		run  func(t *testing.T, tg Target, g *fakegpu.GPU, be Backend)
	}{
		{"MemoryReachesTheDriver", memoryReachesTheDriver},
		{"CopiesOfGoMemory", copiesOfGoMemory},
		{"LaunchArguments", launchArguments},
		{"OnlyGoodLaunchesReachTheDriver", func(t *testing.T, tg Target, g *fakegpu.GPU, be Backend) {
			LaunchErrors(t, tg)
			assert.Len(t, g.Launches, 1, "the one good launch")
		}},
		{"EventsTime", func(t *testing.T, tg Target, g *fakegpu.GPU, be Backend) {
			// The fake's clock ticks once per record, half a millisecond a tick.
			assert.Equal(t, float32(0.5), Events(t, tg))
			require.Len(t, g.Records, 2, "start and end")
			assert.Equal(t, g.Records[0].Stream, g.Records[1].Stream)
			assert.NotEqual(t, g.Records[0].Event, g.Records[1].Event)
		}},
		{"WrapForeign", wrapForeign},
		{"EscapedCallsFail", escapedCallsFail},
		{"DriverErrors", driverErrors},
		{"OpenRefusesWhatItCannotUse", openRefuses},
		{"CloseReleasesEverything", func(t *testing.T, tg Target, g *fakegpu.GPU, be Backend) {
			Closed(t, tg)
			assert.Equal(t, fakegpu.Live{}, g.Live(), "memory, argument blocks, streams, events and modules")
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := fakegpu.New(be.Device, be.Device)
			c.run(t, be.Target(OpenFake(t, be, g, 0)), g, be)
		})
	}
}

// FakeLaunchBenchmark measures the backend's own cost of a Launch: checks, argument
// packing, the thread lock and two C calls (making the device current, the launch) to a
// function that does nothing.
func FakeLaunchBenchmark(b *testing.B, be Backend) {
	g := fakegpu.New(be.Device)
	tg := be.Target(OpenFake(b, be, g, 0))
	_, addOne, _ := Kernels(b, tg.Dev)
	buf := Alloc(b, tg.Dev, 4096)
	s := Stream(b, tg.Dev)
	defer PerStepCalls(tg.Core, fakegpu.NoopC(b))()
	var args runtime.Args
	b.ReportAllocs()
	for b.Loop() {
		if err := s.Launch(addOne, runtime.Dim3{X: 1}, runtime.Dim3{X: 1024}, args.Reset().Buffer(buf).U32(1024)); err != nil {
			b.Fatal(err)
		}
	}
}

// memoryReachesTheDriver checks what the driver saw of a round trip: the memory, the
// stream of every copy, the memset, and the frees.
func memoryReachesTheDriver(t *testing.T, tg Target, g *fakegpu.GPU, be Backend) {
	d := tg.Dev
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
	want := append([]byte(nil), src...)
	clear(want[8:24])
	assert.Equal(t, want, got)
	assert.Equal(t, want, g.Memory(buf.DevicePtr(), 64), "device memory")
	assert.Equal(t, 1, g.Memsets)
	require.Len(t, g.Copies, 2)
	for _, c := range g.Copies {
		assert.Equal(t, s.Handle(), c.Stream, "%s on the stream", c.Call)
	}
	assert.Equal(t, []string{tg.Core.API.CopyHtoD.Name, tg.Core.API.CopyDtoH.Name}, []string{g.Copies[0].Call, g.Copies[1].Call})

	p := uintptr(unsafe.Pointer(&src[0]))
	require.NoError(t, buf.Free())
	require.NoError(t, host.Free())
	assert.Equal(t, []uintptr{buf.DevicePtr()}, g.Freed)
	assert.Equal(t, []uintptr{p}, g.HostFreed)
}

// copiesOfGoMemory checks which copies wait for their stream: none where the driver is
// done with Go memory when a copy returns (CUDA), those with Go memory where it may not
// be (HIP: Backend.SyncPageable); never those with a HostBuffer.
func copiesOfGoMemory(t *testing.T, tg Target, g *fakegpu.GPU, be Backend) {
	d := tg.Dev
	s := d.DefaultStream()
	buf := Alloc(t, d, 32)
	host, err := d.AllocHost(32)
	require.NoError(t, err)
	goMem := make([]byte, 32)
	waits := 0
	if tg.Core.SyncPageable {
		waits = 1
	}
	tests := []struct {
		name  string
		copy  func() error
		syncs int
	}{
		{"upload from a HostBuffer", func() error { return s.CopyToDevice(buf, 0, host.Bytes()) }, 0},
		{"upload from part of a HostBuffer", func() error { return s.CopyToDevice(buf, 4, host.Bytes()[8:20]) }, 0},
		{"download into a HostBuffer", func() error { return s.CopyToHost(host.Bytes()[:16], buf, 16) }, 0},
		{"upload from Go memory", func() error { return s.CopyToDevice(buf, 0, goMem) }, waits},
		{"download into Go memory", func() error { return s.CopyToHost(goMem, buf, 0) }, waits},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := len(g.Syncs)
			require.NoError(t, tc.copy())
			assert.Equal(t, tc.syncs, len(g.Syncs)-before)
		})
	}
	require.NoError(t, host.Free())
	before := len(g.Syncs)
	require.NoError(t, s.CopyToDevice(buf, 0, make([]byte, 8)))
	assert.Equal(t, waits, len(g.Syncs)-before, "memory of a freed HostBuffer no longer counts as pinned")
}

// launchArguments checks what reaches the driver of a launch: the shape, the stream, the
// device made current, and every argument in its slot.
func launchArguments(t *testing.T, tg Target, g *fakegpu.GPU, be Backend) {
	d := tg.Dev
	m, err := d.Load(Program())
	require.NoError(t, err)
	k, err := m.Kernel("probe") // it takes any arguments and does nothing
	require.NoError(t, err)
	logits := Alloc(t, d, 1024)
	tokens := Alloc(t, d, 64)
	s := Stream(t, d)

	var args runtime.Args
	args.Reset().Buffer(logits).BufferAt(tokens, 8).U32(7).U64(1 << 40).F32(0.5)
	require.NoError(t, s.Launch(k, runtime.Dim3{X: 3, Y: 5}, runtime.Dim3{X: 256}, &args))
	require.Len(t, g.Launches, 1)
	l := g.Launches[0]
	assert.Equal(t, "probe", l.Kernel)
	assert.Equal(t, [3]uintptr{3, 5, 1}, l.Grid, "zero dimensions launch as 1")
	assert.Equal(t, [3]uintptr{256, 1, 1}, l.Block)
	assert.Equal(t, s.Handle(), l.Stream)
	assert.Zero(t, l.Shared)
	assert.Equal(t, 0, l.Device, "device 0 was made current for the launch")
	want := [16]uint64{uint64(logits.DevicePtr()), uint64(tokens.DevicePtr()) + 8, 7, 1 << 40, uint64(0x3f000000)}
	assert.Equal(t, want, l.Slots)

	// A shorter list leaves no stale argument behind.
	args.Reset().U32(9)
	require.NoError(t, s.Launch(k, runtime.Dim3{X: 1}, runtime.Dim3{X: 64}, &args))
	assert.Equal(t, [16]uint64{9}, g.Launches[1].Slots)
	require.NoError(t, m.Close())
}

// wrapForeign checks that WrapStream refuses a stream of another device, or one the
// driver does not know, and WrapDevicePointer memory the driver does not know.
func wrapForeign(t *testing.T, tg Target, g *fakegpu.GPU, be Backend) {
	d := tg.Dev
	_, err := tg.WrapStream(d, g.EngineStream(1))
	assert.ErrorIs(t, err, runtime.ErrInvalidArgument, "a stream of device 1")
	assert.ErrorContains(t, err, "the stream belongs to")
	_, err = tg.WrapStream(d, 0xBAD)
	assert.ErrorIs(t, err, runtime.ErrInvalidArgument, "a stream the driver does not know")
	_, err = tg.WrapDevicePointer(d, 0xBAD0000, 16)
	assert.ErrorIs(t, err, runtime.ErrInvalidArgument, "memory the driver does not know")
	owned := Alloc(t, d, 256)
	_, err = tg.WrapDevicePointer(d, owned.DevicePtr()+128, 129)
	assert.ErrorIs(t, err, runtime.ErrInvalidArgument, "one byte past the allocation")

	engine := g.EngineStream(0)
	s, err := tg.WrapStream(d, engine)
	require.NoError(t, err)
	require.NoError(t, s.Synchronize())
	assert.Equal(t, engine, g.Syncs[len(g.Syncs)-1])
	require.NoError(t, s.Close())
	assert.NotContains(t, g.Destroyed, engine, "a wrapped stream stays the caller's")
	b, err := tg.WrapDevicePointer(d, g.EngineAlloc(64), 64)
	require.NoError(t, err)
	require.NoError(t, b.Free())
	assert.Empty(t, g.Freed, "wrapped memory stays the caller's")
}

// escapedCallsFail shows that the fake, like a driver, refuses a call made on a thread
// where another device, or none, is current, so GoroutineHopping can fail.
func escapedCallsFail(t *testing.T, tg Target, g *fakegpu.GPU, be Backend) {
	api := tg.Core.API
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	gpurt.CallN(api.SetCurrent.Fn, tg.Elsewhere)
	r := int32(gpurt.CallN(api.StreamSync.Fn, tg.Dev.DefaultStream().Handle()))
	assert.Equal(t, int32(fakegpu.InvalidContext), r)
	err := tg.Core.Failed(api.StreamSync.Name, r)
	code, ok := be.Code(err)
	assert.True(t, ok && code == fakegpu.InvalidContext, "the backend's status unwraps")
	assert.ErrorContains(t, err, "invalid device context", "the driver's words for it")
	assert.NoError(t, tg.Dev.DefaultStream().Synchronize(), "the stream makes its device current itself")
}

// driverErrors makes driver calls fail and checks that each error names the call, maps
// onto the runtime's sentinel and unwraps to the backend's status.
func driverErrors(t *testing.T, tg Target, g *fakegpu.GPU, be Backend) {
	d, api := tg.Dev, tg.Core.API
	m, err := d.Load(Program())
	require.NoError(t, err)
	addOne, err := m.Kernel("add_one")
	require.NoError(t, err)
	b := Alloc(t, d, 64)
	s := d.DefaultStream()
	var args runtime.Args
	tests := []struct {
		call     gpurt.Entry
		code     int32
		op       func() error
		sentinel error
		says     string
	}{
		{api.MemAlloc, fakegpu.OutOfMemory, func() error { _, err := d.Alloc(64); return err }, runtime.ErrOutOfMemory, api.MemAlloc.Name + "(64): "},
		{api.HostAlloc, fakegpu.OutOfMemory, func() error { _, err := d.AllocHost(64); return err }, runtime.ErrOutOfMemory, api.HostAlloc.Name + "(64, "},
		{api.StreamCreate, fakegpu.InvalidValue, func() error { _, err := d.NewStream(); return err }, runtime.ErrInvalidArgument, api.StreamCreate.Name},
		{api.EventCreate, fakegpu.InvalidValue, func() error { _, err := d.NewEvent(); return err }, runtime.ErrInvalidArgument, api.EventCreate.Name},
		{api.Memset, fakegpu.InvalidValue, func() error { return s.Zero(b, 0, 8) }, runtime.ErrInvalidArgument, api.Memset.Name},
		{api.CopyHtoD, fakegpu.InvalidValue, func() error { return s.CopyToDevice(b, 0, make([]byte, 8)) }, runtime.ErrInvalidArgument, api.CopyHtoD.Name},
		{api.StreamSync, fakegpu.InvalidValue, s.Synchronize, runtime.ErrInvalidArgument, api.StreamSync.Name},
		{api.Launch, fakegpu.InvalidValue, func() error {
			return s.Launch(addOne, runtime.Dim3{X: 1}, runtime.Dim3{X: 1}, args.Reset().Buffer(b).U32(1))
		}, runtime.ErrInvalidArgument, api.Launch.Name + "(add_one, grid"},
		{api.GetFunction, fakegpu.NotFound, func() error { _, err := m.Kernel("scale"); return err }, runtime.ErrNoKernel, api.GetFunction.Name + "(scale)"},
		{api.SetCurrent, fakegpu.InvalidValue, func() error { _, err := d.Alloc(64); return err }, runtime.ErrInvalidArgument, tg.Core.CurrentCall},
		{api.ModuleLoad, fakegpu.InvalidImage, func() error { _, err := d.Load(Program()); return err }, nil, api.ModuleLoad.Name + "(gputest, "},
	}
	for _, tc := range tests {
		t.Run(tc.call.Name, func(t *testing.T) {
			g.Fail[tc.call.Name] = tc.code
			err := tc.op()
			delete(g.Fail, tc.call.Name)
			require.Error(t, err)
			if tc.sentinel != nil {
				assert.ErrorIs(t, err, tc.sentinel)
			}
			assert.ErrorContains(t, err, tc.says)
			code, ok := be.Code(err)
			assert.True(t, ok, "%v unwraps to the backend's status", err)
			assert.Equal(t, tc.code, code)
		})
	}
	// A real shortage, beyond what the fake gives.
	_, err = d.Alloc(2 << 30)
	assert.ErrorIs(t, err, runtime.ErrOutOfMemory)
	assert.ErrorContains(t, err, api.MemAlloc.Name+"(2147483648): ")
	assert.ErrorContains(t, err, ": out of memory")

	// A stream whose argument block cannot be allocated is not left behind.
	g.Fail[api.HostAlloc.Name] = fakegpu.OutOfMemory
	_, err = d.NewStream()
	delete(g.Fail, api.HostAlloc.Name)
	assert.ErrorIs(t, err, runtime.ErrOutOfMemory)
	assert.Equal(t, 1, g.Live().Streams, "only the default stream")
}

// openRefuses checks that Open refuses, with the runtime's sentinel, a device number
// the driver does not have and a device it cannot set up, and leaves nothing behind.
func openRefuses(t *testing.T, tg Target, g *fakegpu.GPU, be Backend) {
	api := tg.Core.API
	tests := []struct {
		name    string
		ordinal int
		fail    string
		code    int32
		want    error
	}{
		{"negative ordinal", -1, "", 0, runtime.ErrUnavailable},
		{"ordinal past the last device", 2, "", 0, runtime.ErrUnavailable},
		{"device count fails", 1, api.DeviceCount.Name, fakegpu.NoDevice, runtime.ErrUnavailable},
		{"device query fails", 1, api.DeviceAttribute.Name, fakegpu.InvalidValue, runtime.ErrInvalidArgument},
		{"no default stream", 1, api.StreamCreate.Name, fakegpu.OutOfMemory, runtime.ErrOutOfMemory},
		{"no argument block", 1, api.HostAlloc.Name, fakegpu.OutOfMemory, runtime.ErrOutOfMemory},
	}
	live, retained := g.Live(), g.Retained(1)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g.Fail[tc.fail] = tc.code
			_, err := be.Open(t, g, tc.ordinal)
			delete(g.Fail, tc.fail)
			assert.ErrorIs(t, err, tc.want)
			assert.Equal(t, live, g.Live(), "a failed Open leaves nothing behind")
			assert.Equal(t, retained, g.Retained(1), "nor a hold on a CUDA primary context")
		})
	}
}
