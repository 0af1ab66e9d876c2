package hip

import (
	"errors"
	"fmt"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/gumbel-go/gumbel/runtime"
)

// hotCall makes the per-step HIP calls without allocating: the argument slice handed to
// purego lives in this struct (on the heap with its owner), where a variadic call would
// allocate one each time. Hold mu while sys is in use.
type hotCall struct {
	mu  sync.Mutex
	sys [11]uintptr
}

// enter locks the goroutine to its OS thread and makes d current there: the current
// device is per thread, and a goroutine may run on any thread between two calls. Leave
// with goruntime.UnlockOSThread.
func (h *hotCall) enter(d *Device) error {
	goruntime.LockOSThread()
	h.sys[0] = uintptr(d.ordinal)
	if r := h.call(d.drv.hipSetDevice, 1); r != Success {
		goruntime.UnlockOSThread()
		return failed(fmt.Sprintf("hipSetDevice(%d)", d.ordinal), r)
	}
	return nil
}

// call calls fn with the first n words of sys.
func (h *hotCall) call(fn uintptr, n int) Result {
	return callFrame(fn, h.sys[:n])
}

// stream is a hipStream_t with its own pinned block of launch arguments.
type stream struct {
	hotCall
	dev    *Device
	handle uintptr // hipStream_t
	params unsafe.Pointer
	// owned streams are destroyed by Close; wrapped ones are the caller's.
	owned bool
	// isDefault marks the device's default stream, which only the device closes.
	isDefault bool
	closed    atomic.Bool
}

// NewStream returns a new non-blocking stream (it does not serialise with the NULL
// stream).
func (d *Device) NewStream() (runtime.Stream, error) {
	var s *stream
	err := d.withDevice(func() error {
		var err error
		s, err = d.newStreamLocked()
		return err
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// newStreamLocked creates an owned non-blocking stream; the device must be current.
func (d *Device) newStreamLocked() (*stream, error) {
	var h uintptr
	if r := Result(callN(d.drv.hipStreamCreateWithFlags, uintptr(unsafe.Pointer(&h)), streamNonBlocking)); r != Success {
		return nil, failed("hipStreamCreateWithFlags(hipStreamNonBlocking)", r)
	}
	s, err := d.wrapStreamLocked(h, true)
	if err != nil {
		callN(d.drv.hipStreamDestroy, h)
		return nil, err
	}
	return s, nil
}

// WrapStream makes a runtime.Stream of a hipStream_t the caller owns (an engine's
// stream), so sampling is ordered with the engine's work without a synchronisation;
// Close does not destroy it. The stream must belong to dev; where the runtime can tell
// (hipStreamGetDevice, ROCm 6 and later) that is checked.
func WrapStream(dev runtime.Device, handle uintptr) (runtime.Stream, error) {
	d, ok := dev.(*Device)
	if !ok || d == nil {
		return nil, fmt.Errorf("%w: hip.WrapStream: %T is not a HIP device", runtime.ErrInvalidArgument, dev)
	}
	var s *stream
	err := d.withDevice(func() error {
		if d.drv.hipStreamGetDevice != 0 {
			var owner int32
			if r := Result(callN(d.drv.hipStreamGetDevice, handle, uintptr(unsafe.Pointer(&owner)))); r != Success {
				return fmt.Errorf("%w: hip.WrapStream(%#x): %w", runtime.ErrInvalidArgument, handle, failed("hipStreamGetDevice", r))
			}
			// The NULL stream answers with the current device, which is d here.
			if int(owner) != d.ordinal {
				return fmt.Errorf("%w: hip.WrapStream(%#x): the stream belongs to HIP device %d, not %d", runtime.ErrInvalidArgument, handle, owner, d.ordinal)
			}
		}
		var err error
		s, err = d.wrapStreamLocked(handle, false)
		return err
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// wrapStreamLocked wraps a stream handle with a fresh argument block; the device must be
// current.
func (d *Device) wrapStreamLocked(handle uintptr, owned bool) (*stream, error) {
	s := &stream{dev: d, handle: handle, owned: owned}
	if err := d.hostAllocLocked(&s.params, paramBlockBytes); err != nil {
		return nil, err
	}
	(*paramBlock)(s.params).initTable(uintptr(s.params))
	return s, nil
}

// Handle is the hipStream_t.
func (s *stream) Handle() uintptr { return s.handle }

// begin takes the stream for one operation: the lock, then the locked thread with the
// device current. Undo with s.end.
func (s *stream) begin() error {
	s.mu.Lock()
	if s.closed.Load() || s.dev.closed.Load() {
		s.mu.Unlock()
		return runtime.ErrClosed
	}
	if err := s.enter(s.dev); err != nil {
		s.mu.Unlock()
		return err
	}
	return nil
}

func (s *stream) end() {
	goruntime.UnlockOSThread()
	s.mu.Unlock()
}

// Launch queues kernel k over grid blocks of block threads with args.
func (s *stream) Launch(k runtime.Kernel, grid, block runtime.Dim3, args *runtime.Args) error {
	kern, ok := k.(*kernel)
	if !ok || kern == nil {
		return fmt.Errorf("%w: hip: Launch: %T is not a HIP kernel", runtime.ErrInvalidArgument, k)
	}
	if kern.mod.dev != s.dev {
		return fmt.Errorf("%w: hip: Launch %s: the kernel belongs to HIP device %d, the stream to %d", runtime.ErrInvalidArgument, kern.name, kern.mod.dev.ordinal, s.dev.ordinal)
	}
	if kern.mod.closed.Load() {
		return fmt.Errorf("hip: Launch %s: module closed: %w", kern.name, runtime.ErrClosed)
	}
	g, err := launchShape("grid", grid, s.dev.props.maxGrid)
	if err != nil {
		return err
	}
	b, err := launchShape("block", block, s.dev.props.maxBlock)
	if err != nil {
		return err
	}
	if threads := b[0] * b[1] * b[2]; threads > uintptr(kern.maxThreads) {
		return fmt.Errorf("%w: hip: Launch %s: block %v has %d threads, the kernel allows %d", runtime.ErrInvalidArgument, kern.name, block, threads, kern.maxThreads)
	}
	if err := checkDispatch(kern.name, g, b); err != nil {
		return err
	}
	if err := checkArgs(s.dev, kern.name, args); err != nil {
		return err
	}
	if err := s.begin(); err != nil {
		return s.opErr("Launch", err)
	}
	defer s.end()
	(*paramBlock)(s.params).pack(args)
	s.sys = [11]uintptr{kern.fn, g[0], g[1], g[2], b[0], b[1], b[2], 0, s.handle, uintptr(s.params), 0}
	if r := s.call(s.dev.drv.hipModuleLaunchKernel, 11); r != Success {
		return failed(fmt.Sprintf("hipModuleLaunchKernel(%s, grid %v, block %v)", kern.name, grid, block), r)
	}
	return nil
}

// CopyToDevice copies src to dst at byte offset off. A copy from a HostBuffer is
// asynchronous; a copy from other memory (Go memory, which the GC must be free to reuse
// once the call returns) is complete when this returns.
func (s *stream) CopyToDevice(dst runtime.Buffer, off int, src []byte) error {
	b, err := s.dev.ownBuffer("CopyToDevice", dst)
	if err != nil {
		return err
	}
	if err := checkRange("CopyToDevice", off, len(src), b.size); err != nil {
		return err
	}
	if len(src) == 0 {
		return nil
	}
	return s.copy(s.dev.drv.hipMemcpyHtoDAsync, "hipMemcpyHtoDAsync", b.ptr+uintptr(off), uintptr(unsafe.Pointer(&src[0])), len(src), false)
}

// CopyToHost copies len(dst) bytes of src from byte offset off into dst. A copy into a
// HostBuffer is complete after Synchronize; into other memory it is complete when this
// returns.
func (s *stream) CopyToHost(dst []byte, src runtime.Buffer, off int) error {
	b, err := s.dev.ownBuffer("CopyToHost", src)
	if err != nil {
		return err
	}
	if err := checkRange("CopyToHost", off, len(dst), b.size); err != nil {
		return err
	}
	if len(dst) == 0 {
		return nil
	}
	return s.copy(s.dev.drv.hipMemcpyDtoHAsync, "hipMemcpyDtoHAsync", uintptr(unsafe.Pointer(&dst[0])), b.ptr+uintptr(off), len(dst), true)
}

// copy queues one copy of n bytes. The host side (from for an upload, to for a download)
// is pinned memory or Go memory: the uintptrescapes rule keeps Go memory alive and in
// place for the call, and for Go memory the copy waits for the stream before returning,
// since HIP may still be reading or writing it after hipMemcpy*Async returns.
//
//go:uintptrescapes
func (s *stream) copy(fn uintptr, name string, to, from uintptr, n int, toHost bool) error {
	host := from
	if toHost {
		host = to
	}
	pinned := s.dev.pinned.contains(host, n)
	if err := s.begin(); err != nil {
		return s.opErr(name, err)
	}
	defer s.end()
	s.sys[0], s.sys[1], s.sys[2], s.sys[3] = to, from, uintptr(n), s.handle
	if r := s.call(fn, 4); r != Success {
		return failed(fmt.Sprintf("%s(%#x, %#x, %d)", name, to, from, n), r)
	}
	if pinned {
		return nil
	}
	s.sys[0] = s.handle
	if r := s.call(s.dev.drv.hipStreamSynchronize, 1); r != Success {
		return failed(fmt.Sprintf("hipStreamSynchronize (after %s from Go memory)", name), r)
	}
	return nil
}

// Zero sets n bytes of dst at byte offset off to zero.
func (s *stream) Zero(dst runtime.Buffer, off, n int) error {
	b, err := s.dev.ownBuffer("Zero", dst)
	if err != nil {
		return err
	}
	if err := checkRange("Zero", off, n, b.size); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	if err := s.begin(); err != nil {
		return s.opErr("Zero", err)
	}
	defer s.end()
	s.sys[0], s.sys[1], s.sys[2], s.sys[3] = b.ptr+uintptr(off), 0, uintptr(n), s.handle
	if r := s.call(s.dev.drv.hipMemsetD8Async, 4); r != Success {
		return failed(fmt.Sprintf("hipMemsetD8Async(%#x, 0, %d)", b.ptr+uintptr(off), n), r)
	}
	return nil
}

// Record marks event e at the current point of the stream.
func (s *stream) Record(e runtime.Event) error {
	ev, err := s.dev.ownEvent("Record", e)
	if err != nil {
		return err
	}
	if err := s.begin(); err != nil {
		return s.opErr("Record", err)
	}
	defer s.end()
	s.sys[0], s.sys[1] = ev.handle, s.handle
	if r := s.call(s.dev.drv.hipEventRecord, 2); r != Success {
		return failed("hipEventRecord", r)
	}
	return nil
}

// Synchronize waits until everything queued on the stream so far is done.
func (s *stream) Synchronize() error {
	if err := s.begin(); err != nil {
		return s.opErr("Synchronize", err)
	}
	defer s.end()
	s.sys[0] = s.handle
	if r := s.call(s.dev.drv.hipStreamSynchronize, 1); r != Success {
		return failed("hipStreamSynchronize", r)
	}
	return nil
}

// opErr names the operation that found the stream closed or could not make the device
// current.
func (s *stream) opErr(op string, err error) error {
	return fmt.Errorf("hip stream %#x: %s: %w", s.handle, op, err)
}

// Close destroys the stream, unless the caller owns it (WrapStream) or the device does
// (DefaultStream). A second Close does nothing.
func (s *stream) Close() error {
	if s.isDefault || s.closed.Load() {
		return nil
	}
	return s.dev.onThread(s.release)
}

// release frees the stream's resources; the device must be current.
func (s *stream) release() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Swap(true) {
		return nil
	}
	var err error
	if s.owned {
		if r := Result(callN(s.dev.drv.hipStreamDestroy, s.handle)); r != Success {
			err = failed("hipStreamDestroy", r)
		}
	}
	if r := Result(callN(s.dev.drv.hipHostFree, uintptr(s.params))); r != Success {
		err = errors.Join(err, failed("hipHostFree", r))
	}
	return err
}

// event is a hipEvent_t, created with timing.
type event struct {
	hotCall
	dev    *Device
	handle uintptr // hipEvent_t
	closed atomic.Bool
	ms     float32 // hipEventElapsedTime's result, here so that timing does not allocate
}

// NewEvent returns an event that can be recorded on a stream and timed.
func (d *Device) NewEvent() (runtime.Event, error) {
	e := &event{dev: d}
	err := d.withDevice(func() error {
		if r := Result(callN(d.drv.hipEventCreate, uintptr(unsafe.Pointer(&e.handle)))); r != Success {
			return failed("hipEventCreate", r)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return e, nil
}

// ownEvent returns e as a live event of this device.
func (d *Device) ownEvent(op string, e runtime.Event) (*event, error) {
	ev, ok := e.(*event)
	if !ok || ev == nil {
		return nil, fmt.Errorf("%w: hip: %s: %T is not a HIP event", runtime.ErrInvalidArgument, op, e)
	}
	if ev.dev != d {
		return nil, fmt.Errorf("%w: hip: %s: event belongs to HIP device %d, not %d", runtime.ErrInvalidArgument, op, ev.dev.ordinal, d.ordinal)
	}
	if ev.closed.Load() {
		return nil, fmt.Errorf("hip: %s: event closed: %w", op, runtime.ErrClosed)
	}
	return ev, nil
}

// begin takes the event for one operation; undo with e.end.
func (e *event) begin() error {
	e.mu.Lock()
	if e.closed.Load() || e.dev.closed.Load() {
		e.mu.Unlock()
		return fmt.Errorf("hip event: %w", runtime.ErrClosed)
	}
	if err := e.enter(e.dev); err != nil {
		e.mu.Unlock()
		return err
	}
	return nil
}

func (e *event) end() {
	goruntime.UnlockOSThread()
	e.mu.Unlock()
}

// Synchronize waits until the event has been reached.
func (e *event) Synchronize() error {
	if err := e.begin(); err != nil {
		return err
	}
	defer e.end()
	e.sys[0] = e.handle
	if r := e.call(e.dev.drv.hipEventSynchronize, 1); r != Success {
		return failed("hipEventSynchronize", r)
	}
	return nil
}

// ElapsedSince returns the milliseconds from start to this event, both recorded and
// reached.
func (e *event) ElapsedSince(start runtime.Event) (float32, error) {
	st, err := e.dev.ownEvent("ElapsedSince", start)
	if err != nil {
		return 0, err
	}
	if err := e.begin(); err != nil {
		return 0, err
	}
	defer e.end()
	e.sys[0], e.sys[1], e.sys[2] = uintptr(unsafe.Pointer(&e.ms)), st.handle, e.handle
	if r := e.call(e.dev.drv.hipEventElapsedTime, 3); r != Success {
		return 0, failed("hipEventElapsedTime", r)
	}
	return e.ms, nil
}

// Close destroys the event. A second Close does nothing.
func (e *event) Close() error {
	if e.closed.Load() {
		return nil
	}
	return e.dev.onThread(func() error {
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.closed.Swap(true) {
			return nil
		}
		if r := Result(callN(e.dev.drv.hipEventDestroy, e.handle)); r != Success {
			return failed("hipEventDestroy", r)
		}
		return nil
	})
}
