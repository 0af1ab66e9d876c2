package gputest

import (
	"math"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/runtime/internal/gpurt"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// engineCall makes one driver call with the device current, as an engine sharing the
// device would, outside the backend's bookkeeping.
func engineCall(t testing.TB, core *gpurt.Device, e gpurt.Entry, words ...uintptr) {
	t.Helper()
	require.NoError(t, core.WithDevice(func() error {
		if r := int32(gpurt.CallN(e.Fn, words...)); r != 0 {
			return core.Failed(e.Name+" (the engine's)", r)
		}
		return nil
	}))
}

// Wrap checks that a stream and memory an engine owns work through WrapStream and
// WrapDevicePointer, stay the engine's, and that what is not the device's is refused.
func Wrap(t *testing.T, tg Target) {
	d, api := tg.Dev, tg.Core.API
	var raw, h uintptr
	engineCall(t, tg.Core, api.MemAlloc, uintptr(unsafe.Pointer(&raw)), 1024)
	engineCall(t, tg.Core, api.StreamCreate, uintptr(unsafe.Pointer(&h)), api.StreamFlags.Value)

	ws, err := tg.WrapStream(d, h)
	require.NoError(t, err)
	assert.Equal(t, h, ws.Handle())
	wb, err := tg.WrapDevicePointer(d, raw+256, 512)
	require.NoError(t, err)
	assert.Equal(t, 512, wb.Size())
	assert.Equal(t, raw+256, wb.DevicePtr())

	require.NoError(t, ws.CopyToDevice(wb, 0, FloatBytes([]float32{1, 2, 3, 4})))
	_, addOne, _ := Kernels(t, d)
	var args runtime.Args
	args.Buffer(wb).U32(4)
	require.NoError(t, ws.Launch(addOne, runtime.Dim3{X: 1}, runtime.Dim3{X: 32}, &args))
	out := make([]byte, 16)
	require.NoError(t, ws.CopyToHost(out, wb, 0))
	require.NoError(t, ws.Synchronize())
	assert.Equal(t, []float32{2, 3, 4, 5}, Floats(out))

	require.NoError(t, wb.Free())
	require.NoError(t, ws.Close())
	// Both still belong to the engine: releasing them succeeds exactly once, there.
	engineCall(t, tg.Core, api.StreamDestroy, h)
	engineCall(t, tg.Core, api.MemFree, raw)

	owned := Alloc(t, d, 256)
	bad := []struct {
		name string
		ptr  uintptr
		n    int
	}{
		{"runs a terabyte past its allocation", owned.DevicePtr() + 128, 1 << 40},
		{"larger than the address space", owned.DevicePtr(), math.MaxInt},
		{"negative size", owned.DevicePtr(), -1},
		{"null pointer", 0, 16},
	}
	for _, c := range bad {
		_, err := tg.WrapDevicePointer(d, c.ptr, c.n)
		assert.ErrorIs(t, err, runtime.ErrInvalidArgument, c.name)
	}
	_, err = tg.WrapDevicePointer(nil, owned.DevicePtr(), 16)
	assert.ErrorIs(t, err, runtime.ErrInvalidArgument)
	_, err = tg.WrapStream(nil, 0)
	assert.ErrorIs(t, err, runtime.ErrInvalidArgument)
	whole, err := tg.WrapDevicePointer(d, owned.DevicePtr(), 256)
	require.NoError(t, err)
	assert.NoError(t, whole.Free(), "a wrapped buffer's Free leaves the memory alone")
	view, err := tg.WrapDevicePointer(d, owned.DevicePtr(), 0)
	require.NoError(t, err)
	assert.Zero(t, view.Size())
}

// HotPathAllocs checks that a sampling step's calls allocate nothing on the Go heap.
func HotPathAllocs(t *testing.T, tg Target) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own; run without -race")
	}
	d := tg.Dev
	_, addOne, _ := Kernels(t, d)
	s := Stream(t, d)
	const n = 1024
	b := Alloc(t, d, 4*n)
	host := make([]byte, 4*n)
	pinned, err := d.AllocHost(4 * n)
	require.NoError(t, err)
	defer func() { assert.NoError(t, pinned.Free()) }()
	pin := pinned.Bytes()
	ev, err := d.NewEvent()
	require.NoError(t, err)
	defer func() { assert.NoError(t, ev.Close()) }()
	var args runtime.Args
	grid, block := runtime.Dim3{X: 1}, runtime.Dim3{X: 1024}
	steps := []struct {
		name string
		op   func() error
	}{
		{"CopyToDevice from Go memory", func() error { return s.CopyToDevice(b, 0, host) }},
		{"CopyToDevice from a HostBuffer", func() error { return s.CopyToDevice(b, 0, pin) }},
		{"Launch", func() error { return s.Launch(addOne, grid, block, args.Reset().Buffer(b).U32(n)) }},
		{"Zero", func() error { return s.Zero(b, 0, 64) }},
		{"CopyToHost into Go memory", func() error { return s.CopyToHost(host, b, 0) }},
		{"CopyToHost into a HostBuffer", func() error { return s.CopyToHost(pin, b, 0) }},
		{"Record", func() error { return s.Record(ev) }},
		{"Synchronize", s.Synchronize},
		{"event Synchronize", ev.Synchronize},
	}
	if tg.Nop != 0 {
		defer PerStepCalls(tg.Core, tg.Nop)()
	}
	for _, step := range steps {
		t.Run(step.name, func(t *testing.T) {
			require.NoError(t, step.op(), "the first call may set up lazily")
			var failure atomic.Pointer[error]
			check := func(err error) {
				if err != nil {
					e := err // declared here, so that only a failure allocates
					failure.CompareAndSwap(nil, &e)
				}
			}
			allocs := testing.AllocsPerRun(200, func() { check(step.op()) })
			if e := failure.Load(); e != nil {
				t.Fatal(*e)
			}
			assert.Zero(t, allocs)
		})
	}
}

// PerStepCalls points the device's per-step driver calls (making it current, launches,
// copies, Zero, Record, synchronisation) at fn, a C function that returns 0; the
// function it returns puts them back.
func PerStepCalls(core *gpurt.Device, fn uintptr) (restore func()) {
	saved := core.API
	api := *saved
	for _, e := range []*gpurt.Entry{&api.SetCurrent, &api.Launch, &api.CopyHtoD, &api.CopyDtoH, &api.Memset,
		&api.EventRecord, &api.StreamSync, &api.EventSync} {
		e.Fn = fn
	}
	core.API = &api
	return func() { core.API = saved }
}

// GoroutineHopping runs launches on many goroutines while others make another device,
// or none, current on whatever threads they land on: a driver call that ran without the
// device made current on its own locked thread fails (a CUDA context error) or, on HIP,
// runs on the wrong device.
func GoroutineHopping(t *testing.T, tg Target, workers, iterations int) {
	d := tg.Dev
	_, addOne, _ := Kernels(t, d)
	const n = 256
	done := make(chan struct{})
	var scrambles atomic.Int64
	var scramblers sync.WaitGroup
	for i := 0; i < 4; i++ {
		scramblers.Add(1)
		go func() {
			defer scramblers.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				goruntime.LockOSThread()
				gpurt.CallN(tg.Core.API.SetCurrent.Fn, tg.Elsewhere)
				goruntime.UnlockOSThread()
				scrambles.Add(1)
				goruntime.Gosched()
			}
		}()
	}
	errs := make(chan error, workers)
	results := make([][]float32, workers)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			errs <- func() error {
				s, err := d.NewStream()
				if err != nil {
					return err
				}
				defer s.Close()
				b, err := d.Alloc(4 * n)
				if err != nil {
					return err
				}
				defer b.Free()
				if err := s.Zero(b, 0, 4*n); err != nil {
					return err
				}
				var args runtime.Args
				for i := 0; i < iterations; i++ {
					args.Reset().Buffer(b).U32(n)
					if err := s.Launch(addOne, runtime.Dim3{X: 1}, runtime.Dim3{X: n}, &args); err != nil {
						return err
					}
					if err := s.Synchronize(); err != nil {
						return err
					}
					goruntime.Gosched()
				}
				out := make([]byte, 4*n)
				if err := s.CopyToHost(out, b, 0); err != nil {
					return err
				}
				results[w] = Floats(out)
				return s.Synchronize()
			}()
		}(w)
	}
	wg.Wait()
	close(done)
	scramblers.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	assert.Positive(t, scrambles.Load(), "the scramblers ran")
	for w, r := range results {
		for i, v := range r {
			if v != float32(iterations) {
				t.Fatalf("worker %d element %d: %v after %d launches", w, i, v, iterations)
			}
		}
	}
	t.Logf("%d workers x %d launches, %d scrambles", workers, iterations, scrambles.Load())
}

// Closed checks that a closed device and everything it made refuse work with
// runtime.ErrClosed, and that Free and Close of what it made still succeed (doing
// nothing: the device released it).
func Closed(t *testing.T, tg Target) {
	d := tg.Dev
	s, err := d.NewStream()
	require.NoError(t, err)
	b, err := d.Alloc(64)
	require.NoError(t, err)
	h, err := d.AllocHost(64)
	require.NoError(t, err)
	ev, err := d.NewEvent()
	require.NoError(t, err)
	m, err := d.Load(Program())
	require.NoError(t, err)
	k, err := m.Kernel("add_one")
	require.NoError(t, err)
	def := d.DefaultStream()
	require.NoError(t, def.Close(), "the default stream is the device's to close")
	require.NoError(t, def.Synchronize())

	require.NoError(t, d.Close())
	require.NoError(t, d.Close(), "a second Close does nothing")
	assert.Nil(t, h.Bytes(), "pinned memory is gone with the device")
	var args runtime.Args
	for name, err := range map[string]error{
		"Alloc":       func() error { _, err := d.Alloc(16); return err }(),
		"Alloc(0)":    func() error { _, err := d.Alloc(0); return err }(),
		"AllocHost":   func() error { _, err := d.AllocHost(16); return err }(),
		"NewStream":   func() error { _, err := d.NewStream(); return err }(),
		"NewEvent":    func() error { _, err := d.NewEvent(); return err }(),
		"Load":        func() error { _, err := d.Load(Program()); return err }(),
		"Kernel":      func() error { _, err := m.Kernel("scale"); return err }(),
		"Launch":      s.Launch(k, runtime.Dim3{X: 1}, runtime.Dim3{X: 1}, args.Buffer(b).U32(1)),
		"Synchronize": s.Synchronize(),
		"default":     def.Synchronize(),
		"Zero":        s.Zero(b, 0, 4),
		"CopyToHost":  def.CopyToHost(make([]byte, 4), b, 0),
		"Record":      s.Record(ev),
		"Event":       ev.Synchronize(),
	} {
		assert.ErrorIs(t, err, runtime.ErrClosed, name)
	}
	assert.NoError(t, b.Free())
	assert.NoError(t, h.Free())
	assert.NoError(t, s.Close())
	assert.NoError(t, ev.Close())
	assert.NoError(t, m.Close())
}
