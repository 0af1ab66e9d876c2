package hip

import (
	"fmt"
	"unsafe"

	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/runtime/internal/gpurt"
)

// stream is a hipStream_t with its own pinned block of launch arguments.
type stream struct {
	core gpurt.Stream
	dev  *Device
}

// NewStream returns a new non-blocking stream (it does not serialise with the NULL
// stream).
func (d *Device) NewStream() (runtime.Stream, error) {
	var s *stream
	err := d.core.WithDevice(func() error {
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
	if r := Result(gpurt.CallN(d.drv.hipStreamCreateWithFlags, uintptr(unsafe.Pointer(&h)), streamNonBlocking)); r != Success {
		return nil, failed("hipStreamCreateWithFlags(hipStreamNonBlocking)", r)
	}
	s, err := d.wrapStreamLocked(h, true)
	if err != nil {
		gpurt.CallN(d.drv.hipStreamDestroy, h)
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
	err := d.core.WithDevice(func() error {
		if d.drv.hipStreamGetDevice != 0 {
			var owner int32
			if r := Result(gpurt.CallN(d.drv.hipStreamGetDevice, handle, uintptr(unsafe.Pointer(&owner)))); r != Success {
				return fmt.Errorf("%w: hip.WrapStream(%#x): %w", runtime.ErrInvalidArgument, handle, failed("hipStreamGetDevice", r))
			}
			// The NULL stream answers with the current device, which is d here.
			if int(owner) != d.core.Ordinal {
				return fmt.Errorf("%w: hip.WrapStream(%#x): the stream belongs to HIP device %d, not %d", runtime.ErrInvalidArgument, handle, owner, d.core.Ordinal)
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
	var params unsafe.Pointer
	if err := d.hostAllocLocked(&params, gpurt.ParamBlockBytes); err != nil {
		return nil, err
	}
	s := &stream{dev: d}
	s.core.Init(&d.core, handle, params, owned)
	return s, nil
}

// Handle is the hipStream_t.
func (s *stream) Handle() uintptr { return s.core.Handle }

// Launch queues kernel k over grid blocks of block threads with args. HIP cannot describe
// a kernel's parameters, so their number and sizes are the caller's to get right (the
// kernel ABI fixes them); the argument block's unused slots read as zeros.
func (s *stream) Launch(k runtime.Kernel, grid, block runtime.Dim3, args *runtime.Args) error {
	kern, ok := k.(*kernel)
	if !ok || kern == nil {
		return fmt.Errorf("%w: hip: Launch: %T is not a HIP kernel", runtime.ErrInvalidArgument, k)
	}
	return s.core.Launch(gpurt.Entry{Fn: s.dev.drv.hipModuleLaunchKernel, Name: "hipModuleLaunchKernel"}, &kern.core, grid, block, args)
}

// waitUnlessPinned is how a copy with host memory at p, n bytes long, ends: at once
// when the memory is a HostBuffer's, else after hipStreamSynchronize, since HIP may
// still be reading or writing Go memory after hipMemcpy*Async returns and the GC must be
// free to reuse it once the call does.
func (s *stream) waitUnlessPinned(p unsafe.Pointer, n int) gpurt.Entry {
	if s.dev.pinned.contains(uintptr(p), n) {
		return gpurt.Entry{}
	}
	return gpurt.Entry{Fn: s.dev.drv.hipStreamSynchronize, Name: "hipStreamSynchronize"}
}

// CopyToDevice copies src to dst at byte offset off. A copy from a HostBuffer is
// asynchronous; a copy from other memory (Go memory, which the GC must be free to reuse
// once the call returns) is complete when this returns.
func (s *stream) CopyToDevice(dst runtime.Buffer, off int, src []byte) error {
	return s.core.Upload(gpurt.Entry{Fn: s.dev.drv.hipMemcpyHtoDAsync, Name: "hipMemcpyHtoDAsync"}, dst, off, src,
		s.waitUnlessPinned(unsafe.Pointer(unsafe.SliceData(src)), len(src)))
}

// CopyToHost copies len(dst) bytes of src from byte offset off into dst. A copy into a
// HostBuffer is complete after Synchronize; into other memory it is complete when this
// returns.
func (s *stream) CopyToHost(dst []byte, src runtime.Buffer, off int) error {
	return s.core.Download(gpurt.Entry{Fn: s.dev.drv.hipMemcpyDtoHAsync, Name: "hipMemcpyDtoHAsync"}, dst, src, off,
		s.waitUnlessPinned(unsafe.Pointer(unsafe.SliceData(dst)), len(dst)))
}

// Zero sets n bytes of dst at byte offset off to zero.
func (s *stream) Zero(dst runtime.Buffer, off, n int) error {
	return s.core.Zero(gpurt.Entry{Fn: s.dev.drv.hipMemsetD8Async, Name: "hipMemsetD8Async"}, dst, off, n)
}

// Record marks event e at the current point of the stream.
func (s *stream) Record(e runtime.Event) error {
	return s.core.Record(gpurt.Entry{Fn: s.dev.drv.hipEventRecord, Name: "hipEventRecord"}, e)
}

// Synchronize waits until everything queued on the stream so far is done.
func (s *stream) Synchronize() error {
	return s.core.Synchronize(gpurt.Entry{Fn: s.dev.drv.hipStreamSynchronize, Name: "hipStreamSynchronize"})
}

// Close destroys the stream, unless the caller owns it (WrapStream) or the device does
// (DefaultStream). A second Close does nothing.
func (s *stream) Close() error {
	if s.core.IsDefault || s.core.Closed.Load() {
		return nil
	}
	return s.dev.core.OnThread(s.release)
}

// release frees the stream's resources; the device must be current.
func (s *stream) release() error {
	return s.core.Release(gpurt.Entry{Fn: s.dev.drv.hipStreamDestroy, Name: "hipStreamDestroy"},
		gpurt.Entry{Fn: s.dev.drv.hipHostFree, Name: "hipHostFree"})
}

// event is a hipEvent_t, created with timing.
type event struct {
	core gpurt.Event // Handle is the hipEvent_t
	dev  *Device
}

// asEvent returns the shared part of an event of this package, nil for anything else.
func asEvent(e runtime.Event) *gpurt.Event {
	if ev, ok := e.(*event); ok && ev != nil {
		return &ev.core
	}
	return nil
}

// NewEvent returns an event that can be recorded on a stream and timed.
func (d *Device) NewEvent() (runtime.Event, error) {
	e := &event{core: gpurt.Event{Dev: &d.core}, dev: d}
	err := d.core.WithDevice(func() error {
		// hipEventCreate takes no flags, unlike cuEventCreate: its events time by
		// default.
		if r := Result(gpurt.CallN(d.drv.hipEventCreate, uintptr(unsafe.Pointer(&e.core.Handle)))); r != Success {
			return failed("hipEventCreate", r)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return e, nil
}

// Synchronize waits until the event has been reached.
func (e *event) Synchronize() error {
	return e.core.Synchronize(gpurt.Entry{Fn: e.dev.drv.hipEventSynchronize, Name: "hipEventSynchronize"})
}

// ElapsedSince returns the milliseconds from start to this event, both recorded and
// reached.
func (e *event) ElapsedSince(start runtime.Event) (float32, error) {
	return e.core.ElapsedSince(gpurt.Entry{Fn: e.dev.drv.hipEventElapsedTime, Name: "hipEventElapsedTime"}, start)
}

// Close destroys the event. A second Close does nothing.
func (e *event) Close() error {
	if e.core.Closed.Load() {
		return nil
	}
	return e.dev.core.OnThread(func() error {
		return e.core.Release(gpurt.Entry{Fn: e.dev.drv.hipEventDestroy, Name: "hipEventDestroy"})
	})
}
