package gpurt

import (
	"errors"
	"fmt"
	goruntime "runtime"
	"sync/atomic"
	"unsafe"

	"github.com/gumbel-go/gumbel/runtime"
)

// begin takes the frame for one call sequence: the lock, then the goroutine locked to
// its OS thread with d current there (a goroutine may run on any thread between two
// calls). It refuses when closed or the device is. Undo with end.
func (f *Frame) begin(d *Device, closed *atomic.Bool) error {
	f.mu.Lock()
	if closed.Load() || d.Closed.Load() {
		f.mu.Unlock()
		return runtime.ErrClosed
	}
	goruntime.LockOSThread()
	if r := f.Call(d.API.SetCurrent.Fn, d.Current); r != 0 {
		goruntime.UnlockOSThread()
		f.mu.Unlock()
		return d.Failed(d.CurrentCall, r)
	}
	return nil
}

func (f *Frame) end() {
	goruntime.UnlockOSThread()
	f.mu.Unlock()
}

// Stream is a driver stream with its own pinned block of launch arguments; its per-step
// calls go through its frame and allocate nothing.
type Stream struct {
	Frame
	Dev    *Device
	handle uintptr
	params *ParamBlock
	// config, after params in the same pinned memory, is API.LaunchEx's configuration.
	config *launchConfig
	// owned streams are destroyed by Release; wrapped ones are the caller's.
	owned bool
	// isDefault marks the device's default stream, which only the device closes.
	isDefault bool
	closed    atomic.Bool
}

// NewStream returns a new non-blocking stream (it does not serialise with the legacy
// NULL stream).
func (d *Device) NewStream() (runtime.Stream, error) {
	s, err := d.newStream()
	if err != nil {
		return nil, err
	}
	return d.extend(s), nil
}

func (d *Device) newStream() (*Stream, error) {
	var s *Stream
	err := d.Own(func() (Resource, error) {
		var h uintptr
		api := d.API
		if r := int32(CallN(api.StreamCreate.Fn, uintptr(unsafe.Pointer(&h)), api.StreamFlags.Value)); r != 0 {
			return nil, d.Failed(fmt.Sprintf("%s(%s)", api.StreamCreate.Name, api.StreamFlags.Name), r)
		}
		var err error
		if s, err = d.wrapStreamLocked(h, true); err != nil {
			CallN(api.StreamDestroy.Fn, h)
		}
		return s, err
	})
	return s, err
}

// WrapStream makes a stream of a driver stream the caller owns (an engine's), so
// sampling is ordered with the caller's work without a synchronisation; Close does not
// destroy it. Where the driver can tell (API.StreamOwner), the stream must belong to
// this device.
func (d *Device) WrapStream(handle uintptr) (runtime.Stream, error) {
	var s *Stream
	err := d.Own(func() (Resource, error) {
		if owner := d.API.StreamOwner; owner.Fn != 0 {
			var got uintptr
			if r := int32(CallN(owner.Fn, handle, uintptr(unsafe.Pointer(&got)))); r != 0 {
				return nil, fmt.Errorf("%w: %s.WrapStream(%#x): %w", runtime.ErrInvalidArgument, d.Pkg, handle, d.Failed(owner.Name, r))
			}
			// A NULL stream answers with the current device or context: this one.
			if got != d.Current {
				return nil, fmt.Errorf("%w: %s.WrapStream(%#x): the stream belongs to %s, not %s",
					runtime.ErrInvalidArgument, d.Pkg, handle, d.Owner(got), d.Owner(d.Current))
			}
		}
		var err error
		s, err = d.wrapStreamLocked(handle, false)
		return s, err
	})
	if err != nil {
		return nil, err
	}
	return d.extend(s), nil
}

// wrapStreamLocked gives a stream handle a fresh argument block; the device is current.
func (d *Device) wrapStreamLocked(handle uintptr, owned bool) (*Stream, error) {
	var params unsafe.Pointer
	if err := d.hostAlloc(&params, ParamBlockBytes+launchConfigBytes); err != nil {
		return nil, err
	}
	cfg := (*launchConfig)(unsafe.Add(params, ParamBlockBytes))
	cfg.attrs = uintptr(unsafe.Pointer(&cfg.attr))
	return &Stream{Dev: d, handle: handle, params: InitParamBlock(params), config: cfg, owned: owned}, nil
}

// extend returns the runtime.Stream the device hands out for s.
func (d *Device) extend(s *Stream) runtime.Stream {
	if d.Extend != nil {
		return d.Extend(s)
	}
	return s
}

// Handle is the driver's stream (CUstream, hipStream_t).
func (s *Stream) Handle() uintptr { return s.handle }

// opErr names the operation that found the stream closed or could not make the device
// current.
func (s *Stream) opErr(op string, err error) error {
	return fmt.Errorf("%s stream %#x: %s: %w", s.Dev.Pkg, s.handle, op, err)
}

// Launch queues kernel k over grid blocks of block threads with args. The arguments go
// in the kernelParams form, through the stream's pinned block; the trailing "extra"
// word, HIP's other way of passing them, stays 0. Where the driver cannot describe the
// kernel's parameters (HIP), their number and sizes are the caller's to get right (the
// kernel ABI fixes them); the block's unused slots read as zeros.
func (s *Stream) Launch(k runtime.Kernel, grid, block runtime.Dim3, args *runtime.Args) error {
	return s.launch(k, grid, block, args, LaunchAttr{})
}

// launch is Launch, through API.LaunchEx with attribute a when a.ID is not 0.
func (s *Stream) launch(k runtime.Kernel, grid, block runtime.Dim3, args *runtime.Args, a LaunchAttr) error {
	d := s.Dev
	kern, _ := k.(*Kernel)
	switch {
	case kern == nil || kern.Module.Dev.Backend != d.Backend:
		var owner *Device
		if kern != nil {
			owner = kern.Module.Dev
		}
		return fmt.Errorf("%w: %s: Launch: %s is not a %s kernel", runtime.ErrInvalidArgument, d.Pkg, d.foreign(k, owner, "kernel"), d.Brand)
	case kern.Module.Dev != d:
		return fmt.Errorf("%w: %s: Launch %s: the kernel belongs to %s device %d, the stream to %d", runtime.ErrInvalidArgument, d.Pkg, kern.name, d.Brand, kern.Module.Dev.Ordinal, d.Ordinal)
	case kern.Module.closed.Load():
		return fmt.Errorf("%s: Launch %s: module closed: %w", d.Pkg, kern.name, runtime.ErrClosed)
	}
	g, err := d.LaunchShape("grid", grid, d.Props.MaxGrid)
	if err != nil {
		return err
	}
	b, err := d.LaunchShape("block", block, d.Props.MaxBlock)
	if err != nil {
		return err
	}
	if threads := b[0] * b[1] * b[2]; threads > uintptr(kern.maxThreads) {
		return fmt.Errorf("%w: %s: Launch %s: block %v has %d threads, the kernel allows %d", runtime.ErrInvalidArgument, d.Pkg, kern.name, block, threads, kern.maxThreads)
	}
	if d.MaxWorkItems != 0 {
		for i := range g {
			if uint64(g[i])*uint64(b[i]) > d.MaxWorkItems {
				return fmt.Errorf("%w: %s: launch %s: %d blocks of %d threads in dimension %d exceed %d work-items", runtime.ErrInvalidArgument, d.Pkg, kern.name, g[i], b[i], i, d.MaxWorkItems)
			}
		}
	}
	if err := d.checkArgs(kern, args); err != nil {
		return err
	}
	if err := s.begin(d, &s.closed); err != nil {
		return s.opErr("Launch", err)
	}
	defer s.end()
	s.params.Pack(args)
	if a.ID != 0 {
		return s.launchEx(kern, g, b, grid, block, a)
	}
	launch := d.API.Launch
	if r := s.Call(launch.Fn, kern.Fn, g[0], g[1], g[2], b[0], b[1], b[2], 0, s.handle, uintptr(unsafe.Pointer(s.params)), 0); r != 0 {
		return d.Failed(fmt.Sprintf("%s(%s, grid %v, block %v)", launch.Name, kern.name, grid, block), r)
	}
	return nil
}

// checkArgs validates a launch's arguments: the list built without error, every buffer
// live device memory of d, and, where the driver describes the kernel's parameters, as
// many arguments as parameters with matching sizes.
func (d *Device) checkArgs(k *Kernel, args *runtime.Args) error {
	if args == nil {
		return fmt.Errorf("%w: %s: launch %s: nil arguments", runtime.ErrInvalidArgument, d.Pkg, k.name)
	}
	if err := args.Err(); err != nil {
		return fmt.Errorf("%s: launch %s: %w", d.Pkg, k.name, err)
	}
	n, sizes := args.Len(), k.ParamSizes
	if sizes != nil && n != len(sizes) {
		return fmt.Errorf("%w: %s: launch %s: %d arguments for %d parameters", runtime.ErrInvalidArgument, d.Pkg, k.name, n, len(sizes))
	}
	for i := 0; i < n; i++ {
		kind := args.Kind(i)
		if sizes != nil && kind.Size() != sizes[i] {
			return fmt.Errorf("%w: %s: launch %s: argument %d is %d bytes, the parameter %d", runtime.ErrInvalidArgument, d.Pkg, k.name, i, kind.Size(), sizes[i])
		}
		if kind != runtime.ArgBuffer {
			continue
		}
		b, _ := args.BufferArg(i)
		// The kernel's name joins the message only on failure: building it for every
		// argument would allocate on each launch.
		if _, err := d.ownBuffer("Launch", b); err != nil {
			return fmt.Errorf("%s: launch %s: argument %d: %w", d.Pkg, k.name, i, err)
		}
	}
	return nil
}

// CopyToDevice copies src to dst at byte offset off. A copy from a HostBuffer is
// asynchronous; a copy from Go memory is staged or done when this returns (see
// Backend.SyncPageable).
func (s *Stream) CopyToDevice(dst runtime.Buffer, off int, src []byte) error {
	b, err := s.Dev.ownBuffer("CopyToDevice", dst)
	if err != nil {
		return err
	}
	if err := s.Dev.CheckRange("CopyToDevice", off, len(src), b.size); err != nil {
		return err
	}
	if len(src) == 0 {
		return nil
	}
	return s.copy(s.Dev.API.CopyHtoD, b.ptr+uintptr(off), uintptr(unsafe.Pointer(&src[0])), len(src), s.waitFor(src))
}

// CopyToHost copies len(dst) bytes of src from byte offset off into dst. A copy into a
// HostBuffer is complete after Synchronize; into Go memory, when this returns.
func (s *Stream) CopyToHost(dst []byte, src runtime.Buffer, off int) error {
	b, err := s.Dev.ownBuffer("CopyToHost", src)
	if err != nil {
		return err
	}
	if err := s.Dev.CheckRange("CopyToHost", off, len(dst), b.size); err != nil {
		return err
	}
	if len(dst) == 0 {
		return nil
	}
	return s.copy(s.Dev.API.CopyDtoH, uintptr(unsafe.Pointer(&dst[0])), b.ptr+uintptr(off), len(dst), s.waitFor(dst))
}

// waitFor returns what a copy with host memory host calls when it is done: nothing
// (Fn 0), or the stream's synchronisation when the driver may still use Go memory after
// the copy returns and host is not a HostBuffer's.
func (s *Stream) waitFor(host []byte) Entry {
	if !s.Dev.SyncPageable || s.Dev.pinned.contains(uintptr(unsafe.Pointer(unsafe.SliceData(host))), len(host)) {
		return Entry{}
	}
	return s.Dev.API.StreamSync
}

// copy queues one copy of n bytes through copy, which takes (to, from, bytes, stream).
// The host side is Go or pinned host memory: the uintptrescapes rule keeps Go memory
// alive and in place for the call, and wait, when given, keeps the copy from outliving
// it.
//
//go:uintptrescapes
func (s *Stream) copy(copy Entry, to, from uintptr, n int, wait Entry) error {
	if err := s.begin(s.Dev, &s.closed); err != nil {
		return s.opErr(copy.Name, err)
	}
	defer s.end()
	if r := s.Call(copy.Fn, to, from, uintptr(n), s.handle); r != 0 {
		return s.Dev.Failed(fmt.Sprintf("%s(%#x, %#x, %d)", copy.Name, to, from, n), r)
	}
	if wait.Fn == 0 {
		return nil
	}
	if r := s.Call(wait.Fn, s.handle); r != 0 {
		return s.Dev.Failed(fmt.Sprintf("%s (after %s with Go memory)", wait.Name, copy.Name), r)
	}
	return nil
}

// Zero sets n bytes of dst at byte offset off to zero.
func (s *Stream) Zero(dst runtime.Buffer, off, n int) error {
	b, err := s.Dev.ownBuffer("Zero", dst)
	if err != nil {
		return err
	}
	if err := s.Dev.CheckRange("Zero", off, n, b.size); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	if err := s.begin(s.Dev, &s.closed); err != nil {
		return s.opErr("Zero", err)
	}
	defer s.end()
	memset := s.Dev.API.Memset
	if r := s.Call(memset.Fn, b.ptr+uintptr(off), 0, uintptr(n), s.handle); r != 0 {
		return s.Dev.Failed(fmt.Sprintf("%s(%#x, 0, %d)", memset.Name, b.ptr+uintptr(off), n), r)
	}
	return nil
}

// Record marks event e at the current point of the stream.
func (s *Stream) Record(e runtime.Event) error {
	ev, err := s.Dev.ownEvent("Record", e)
	if err != nil {
		return err
	}
	return s.CallOn("Record", s.Dev.API.EventRecord, ev.handle, s.handle)
}

// Synchronize waits until everything queued on the stream so far is done.
func (s *Stream) Synchronize() error {
	return s.CallOn("Synchronize", s.Dev.API.StreamSync, s.handle)
}

// CallOn makes one call for operation op of the stream, which it takes for the call.
func (s *Stream) CallOn(op string, e Entry, words ...uintptr) error {
	if err := s.begin(s.Dev, &s.closed); err != nil {
		return s.opErr(op, err)
	}
	defer s.end()
	if r := s.Call(e.Fn, words...); r != 0 {
		return s.Dev.Failed(e.Name, r)
	}
	return nil
}

// Close destroys the stream, unless the caller owns it (WrapStream) or the device does
// (DefaultStream). A second Close does nothing.
func (s *Stream) Close() error {
	if s.isDefault {
		return nil
	}
	return s.Dev.Disown(s)
}

// Release destroys the stream when it owns it and frees its argument block; the device
// is current.
func (s *Stream) Release() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Swap(true) {
		return nil
	}
	api := s.Dev.API
	var err error
	if s.owned {
		if r := int32(CallN(api.StreamDestroy.Fn, s.handle)); r != 0 {
			err = s.Dev.Failed(api.StreamDestroy.Name, r)
		}
	}
	if r := int32(CallN(api.HostFree.Fn, uintptr(unsafe.Pointer(s.params)))); r != 0 {
		err = errors.Join(err, s.Dev.Failed(api.HostFree.Name, r))
	}
	return err
}

// Event is a driver event, created with timing.
type Event struct {
	Frame
	Dev    *Device
	handle uintptr
	closed atomic.Bool
	ms     float32 // the elapsed-time call's result, here so that timing does not allocate
}

// NewEvent returns an event that can be recorded on a stream and timed.
func (d *Device) NewEvent() (runtime.Event, error) {
	e := &Event{Dev: d}
	err := d.Own(func() (Resource, error) {
		api := d.API
		if r := int32(CallN(api.EventCreate.Fn, uintptr(unsafe.Pointer(&e.handle)), api.EventFlags.Value)); r != 0 {
			return nil, d.Failed(fmt.Sprintf("%s(%s)", api.EventCreate.Name, api.EventFlags.Name), r)
		}
		return e, nil
	})
	if err != nil {
		return nil, err
	}
	return e, nil
}

// ownEvent returns e as an Event when it is a live event of this device.
func (d *Device) ownEvent(op string, e runtime.Event) (*Event, error) {
	ev, _ := e.(*Event)
	if ev == nil {
		return nil, d.refuse(op, "event", e, nil, false)
	}
	if err := d.refuse(op, "event", e, ev.Dev, ev.closed.Load()); err != nil {
		return nil, err
	}
	return ev, nil
}

func (e *Event) begin() error {
	if err := e.Frame.begin(e.Dev, &e.closed); err != nil {
		if errors.Is(err, runtime.ErrClosed) {
			return fmt.Errorf("%s event: %w", e.Dev.Pkg, err)
		}
		return err
	}
	return nil
}

// Synchronize waits until the event has been reached.
func (e *Event) Synchronize() error {
	if err := e.begin(); err != nil {
		return err
	}
	defer e.end()
	sync := e.Dev.API.EventSync
	if r := e.Call(sync.Fn, e.handle); r != 0 {
		return e.Dev.Failed(sync.Name, r)
	}
	return nil
}

// ElapsedSince returns the milliseconds from start to this event, both recorded and
// reached.
func (e *Event) ElapsedSince(start runtime.Event) (float32, error) {
	st, err := e.Dev.ownEvent("ElapsedSince", start)
	if err != nil {
		return 0, err
	}
	if err := e.begin(); err != nil {
		return 0, err
	}
	defer e.end()
	elapsed := e.Dev.API.EventElapsed
	if r := e.Call(elapsed.Fn, uintptr(unsafe.Pointer(&e.ms)), st.handle, e.handle); r != 0 {
		return 0, e.Dev.Failed(elapsed.Name, r)
	}
	return e.ms, nil
}

// Close destroys the event. A second Close does nothing.
func (e *Event) Close() error { return e.Dev.Disown(e) }

// Release destroys the event; the device is current.
func (e *Event) Release() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed.Swap(true) {
		return nil
	}
	destroy := e.Dev.API.EventDestroy
	if r := int32(CallN(destroy.Fn, e.handle)); r != 0 {
		return e.Dev.Failed(destroy.Name, r)
	}
	return nil
}
