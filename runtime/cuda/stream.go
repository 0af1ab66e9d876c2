package cuda

import (
	"errors"
	"fmt"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/gumbel-go/gumbel/runtime"
)

// hotCall makes the per-step driver calls without allocating: the argument slice handed
// to purego lives in this struct (on the heap with its owner), where a variadic call
// would allocate one each time. Hold mu while sys is in use.
type hotCall struct {
	mu  sync.Mutex
	sys [11]uintptr
}

// enter locks the goroutine to its OS thread and makes d's context current there: a
// context is current per thread, and a goroutine may run on any thread between two
// calls. Leave with goruntime.UnlockOSThread.
func (h *hotCall) enter(d *Device) error {
	goruntime.LockOSThread()
	h.sys[0] = d.ctx
	if r := h.call(d.drv.cuCtxSetCurrent, 1); r != Success {
		goruntime.UnlockOSThread()
		return failed("cuCtxSetCurrent", r)
	}
	return nil
}

// call calls fn with the first n words of sys.
func (h *hotCall) call(fn uintptr, n int) Result {
	r, _, _ := purego.SyscallN(fn, h.sys[:n]...)
	return Result(int32(r))
}

// stream is a CUstream with its own pinned block of launch arguments.
type stream struct {
	hotCall
	dev    *Device
	handle uintptr // CUstream
	params unsafe.Pointer
	// owned streams are destroyed by Close; wrapped ones are the caller's.
	owned bool
	// isDefault marks the device's default stream, which only the device closes.
	isDefault bool
	closed    atomic.Bool
}

// NewStream returns a new non-blocking stream (it does not serialise with the legacy
// NULL stream).
func (d *Device) NewStream() (runtime.Stream, error) {
	var s *stream
	err := d.own(func() (resource, error) {
		var h uintptr
		if r := Result(callN(d.drv.cuStreamCreate, uintptr(unsafe.Pointer(&h)), streamNonBlocking)); r != Success {
			return nil, failed("cuStreamCreate(CU_STREAM_NON_BLOCKING)", r)
		}
		var err error
		if s, err = d.newStreamLocked(h, true); err != nil {
			callN(d.drv.cuStreamDestroy, h)
		}
		return s, err
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// WrapStream makes a runtime.Stream of a CUstream the caller owns (an engine's stream),
// so sampling is ordered with the engine's work without a synchronisation; Close does not
// destroy it. The stream must belong to dev's primary context.
func WrapStream(dev runtime.Device, handle uintptr) (runtime.Stream, error) {
	d, ok := dev.(*Device)
	if !ok || d == nil {
		return nil, fmt.Errorf("%w: cuda.WrapStream: %T is not a CUDA device", runtime.ErrInvalidArgument, dev)
	}
	var s *stream
	err := d.own(func() (resource, error) {
		if d.drv.cuStreamGetCtx != 0 {
			var ctx uintptr
			if r := Result(callN(d.drv.cuStreamGetCtx, handle, uintptr(unsafe.Pointer(&ctx)))); r != Success {
				return nil, fmt.Errorf("%w: cuda.WrapStream(%#x): %w", runtime.ErrInvalidArgument, handle, failed("cuStreamGetCtx", r))
			}
			if ctx != d.ctx {
				return nil, fmt.Errorf("%w: cuda.WrapStream(%#x): the stream belongs to context %#x, not device %d's primary context %#x",
					runtime.ErrInvalidArgument, handle, ctx, d.ordinal, d.ctx)
			}
		}
		var err error
		s, err = d.newStreamLocked(handle, false)
		return s, err
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// newStreamLocked wraps a stream handle with a fresh argument block; the context must be
// current.
func (d *Device) newStreamLocked(handle uintptr, owned bool) (*stream, error) {
	s := &stream{dev: d, handle: handle, owned: owned}
	if err := d.hostAllocLocked(&s.params, paramBlockBytes); err != nil {
		return nil, err
	}
	(*paramBlock)(s.params).initTable(uintptr(s.params))
	return s, nil
}

// Handle is the CUstream.
func (s *stream) Handle() uintptr { return s.handle }

// begin takes the stream for one operation: the lock, then the locked thread with the
// context current. Undo with s.end.
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
		return fmt.Errorf("%w: cuda: Launch: %T is not a CUDA kernel", runtime.ErrInvalidArgument, k)
	}
	if kern.mod.dev != s.dev {
		return fmt.Errorf("%w: cuda: Launch %s: the kernel belongs to CUDA device %d, the stream to %d", runtime.ErrInvalidArgument, kern.name, kern.mod.dev.ordinal, s.dev.ordinal)
	}
	if kern.mod.closed.Load() {
		return fmt.Errorf("cuda: Launch %s: module closed: %w", kern.name, runtime.ErrClosed)
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
		return fmt.Errorf("%w: cuda: Launch %s: block %v has %d threads, the kernel allows %d", runtime.ErrInvalidArgument, kern.name, block, threads, kern.maxThreads)
	}
	if err := checkArgs(s.dev, kern.name, args, kern.paramSizes); err != nil {
		return err
	}
	if err := s.begin(); err != nil {
		return s.opErr("Launch", err)
	}
	defer s.end()
	(*paramBlock)(s.params).pack(args)
	s.sys = [11]uintptr{kern.fn, g[0], g[1], g[2], b[0], b[1], b[2], 0, s.handle, uintptr(s.params), 0}
	if r := s.call(s.dev.drv.cuLaunchKernel, 11); r != Success {
		return failed(fmt.Sprintf("cuLaunchKernel(%s, grid %v, block %v)", kern.name, grid, block), r)
	}
	return nil
}

// CopyToDevice copies src to dst at byte offset off. A copy from Go memory (pageable)
// has been staged by the driver when this returns; a copy from a HostBuffer is
// asynchronous.
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
	return s.copy(s.dev.drv.cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", b.ptr+uintptr(off), uintptr(unsafe.Pointer(&src[0])), len(src))
}

// CopyToHost copies len(dst) bytes of src from byte offset off into dst. A copy into Go
// memory (pageable) is complete when this returns; into a HostBuffer it is complete after
// Synchronize.
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
	return s.copy(s.dev.drv.cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", uintptr(unsafe.Pointer(&dst[0])), b.ptr+uintptr(off), len(dst))
}

// copy queues one copy. host, whichever of the first two it is, is Go or pinned host
// memory: the uintptrescapes rule keeps Go memory alive and in place for the call, which
// the driver needs only that long (it stages or completes pageable copies before
// returning).
//
//go:uintptrescapes
func (s *stream) copy(fn uintptr, name string, to, from uintptr, n int) error {
	if err := s.begin(); err != nil {
		return s.opErr(name, err)
	}
	defer s.end()
	s.sys[0], s.sys[1], s.sys[2], s.sys[3] = to, from, uintptr(n), s.handle
	if r := s.call(fn, 4); r != Success {
		return failed(fmt.Sprintf("%s(%#x, %#x, %d)", name, to, from, n), r)
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
	if r := s.call(s.dev.drv.cuMemsetD8Async, 4); r != Success {
		return failed(fmt.Sprintf("cuMemsetD8Async(%#x, 0, %d)", b.ptr+uintptr(off), n), r)
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
	if r := s.call(s.dev.drv.cuEventRecord, 2); r != Success {
		return failed("cuEventRecord", r)
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
	if r := s.call(s.dev.drv.cuStreamSynchronize, 1); r != Success {
		return failed("cuStreamSynchronize", r)
	}
	return nil
}

// opErr names the operation that found the stream closed or could not enter the context.
func (s *stream) opErr(op string, err error) error {
	return fmt.Errorf("cuda stream %#x: %s: %w", s.handle, op, err)
}

// Close destroys the stream, unless the caller owns it (WrapStream) or the device does
// (DefaultStream). A second Close does nothing.
func (s *stream) Close() error {
	if s.isDefault {
		return nil
	}
	return s.dev.disown(s)
}

func (s *stream) release() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed.Store(true)
	var err error
	if s.owned {
		if r := Result(callN(s.dev.drv.cuStreamDestroy, s.handle)); r != Success {
			err = failed("cuStreamDestroy_v2", r)
		}
	}
	if r := Result(callN(s.dev.drv.cuMemFreeHost, uintptr(s.params))); r != Success {
		err = errors.Join(err, failed("cuMemFreeHost", r))
	}
	return err
}

// event is a CUevent, created with timing.
type event struct {
	hotCall
	dev    *Device
	handle uintptr // CUevent
	closed atomic.Bool
	ms     float32 // cuEventElapsedTime's result, here so that timing does not allocate
}

// NewEvent returns an event that can be recorded on a stream and timed.
func (d *Device) NewEvent() (runtime.Event, error) {
	e := &event{dev: d}
	err := d.own(func() (resource, error) {
		if r := Result(callN(d.drv.cuEventCreate, uintptr(unsafe.Pointer(&e.handle)), eventDefault)); r != Success {
			return nil, failed("cuEventCreate(CU_EVENT_DEFAULT)", r)
		}
		return e, nil
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
		return nil, fmt.Errorf("%w: cuda: %s: %T is not a CUDA event", runtime.ErrInvalidArgument, op, e)
	}
	if ev.dev != d {
		return nil, fmt.Errorf("%w: cuda: %s: event belongs to CUDA device %d, not %d", runtime.ErrInvalidArgument, op, ev.dev.ordinal, d.ordinal)
	}
	if ev.closed.Load() {
		return nil, fmt.Errorf("cuda: %s: event closed: %w", op, runtime.ErrClosed)
	}
	return ev, nil
}

// begin takes the event for one operation; undo with e.end.
func (e *event) begin() error {
	e.mu.Lock()
	if e.closed.Load() || e.dev.closed.Load() {
		e.mu.Unlock()
		return fmt.Errorf("cuda event: %w", runtime.ErrClosed)
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
	if r := e.call(e.dev.drv.cuEventSynchronize, 1); r != Success {
		return failed("cuEventSynchronize", r)
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
	if r := e.call(e.dev.drv.cuEventElapsedTime, 3); r != Success {
		return 0, failed("cuEventElapsedTime", r)
	}
	return e.ms, nil
}

// Close destroys the event. A second Close does nothing.
func (e *event) Close() error { return e.dev.disown(e) }

func (e *event) release() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.closed.Store(true)
	if r := Result(callN(e.dev.drv.cuEventDestroy, e.handle)); r != Success {
		return failed("cuEventDestroy_v2", r)
	}
	return nil
}
