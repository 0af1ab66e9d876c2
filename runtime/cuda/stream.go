package cuda

import (
	"fmt"
	"unsafe"

	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/runtime/internal/gpurt"
)

// stream is a CUstream with its own pinned block of launch arguments.
type stream struct {
	core gpurt.Stream
	dev  *Device
}

// NewStream returns a new non-blocking stream (it does not serialise with the legacy
// NULL stream).
func (d *Device) NewStream() (runtime.Stream, error) {
	var s *stream
	err := d.own(func() (resource, error) {
		var h uintptr
		if r := Result(gpurt.CallN(d.drv.cuStreamCreate, uintptr(unsafe.Pointer(&h)), streamNonBlocking)); r != Success {
			return nil, failed("cuStreamCreate(CU_STREAM_NON_BLOCKING)", r)
		}
		var err error
		if s, err = d.newStreamLocked(h, true); err != nil {
			gpurt.CallN(d.drv.cuStreamDestroy, h)
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
			if r := Result(gpurt.CallN(d.drv.cuStreamGetCtx, handle, uintptr(unsafe.Pointer(&ctx)))); r != Success {
				return nil, fmt.Errorf("%w: cuda.WrapStream(%#x): %w", runtime.ErrInvalidArgument, handle, failed("cuStreamGetCtx", r))
			}
			if ctx != d.ctx {
				return nil, fmt.Errorf("%w: cuda.WrapStream(%#x): the stream belongs to context %#x, not device %d's primary context %#x",
					runtime.ErrInvalidArgument, handle, ctx, d.core.Ordinal, d.ctx)
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
	var params unsafe.Pointer
	if err := d.hostAllocLocked(&params, gpurt.ParamBlockBytes); err != nil {
		return nil, err
	}
	s := &stream{dev: d}
	s.core.Init(&d.core, handle, params, owned)
	return s, nil
}

// Handle is the CUstream.
func (s *stream) Handle() uintptr { return s.core.Handle }

// Launch queues kernel k over grid blocks of block threads with args.
func (s *stream) Launch(k runtime.Kernel, grid, block runtime.Dim3, args *runtime.Args) error {
	kern, ok := k.(*kernel)
	if !ok || kern == nil {
		return fmt.Errorf("%w: cuda: Launch: %T is not a CUDA kernel", runtime.ErrInvalidArgument, k)
	}
	return s.core.Launch(gpurt.Entry{Fn: s.dev.drv.cuLaunchKernel, Name: "cuLaunchKernel"}, &kern.core, grid, block, args)
}

// noWait: the driver has staged a copy from Go memory (pageable) before
// cuMemcpyHtoDAsync returns, and completes one into Go memory before cuMemcpyDtoHAsync
// does, so no copy needs to wait for its stream.
var noWait gpurt.Entry

// CopyToDevice copies src to dst at byte offset off. A copy from Go memory (pageable)
// has been staged by the driver when this returns; a copy from a HostBuffer is
// asynchronous.
func (s *stream) CopyToDevice(dst runtime.Buffer, off int, src []byte) error {
	return s.core.Upload(gpurt.Entry{Fn: s.dev.drv.cuMemcpyHtoDAsync, Name: "cuMemcpyHtoDAsync_v2"}, dst, off, src, noWait)
}

// CopyToHost copies len(dst) bytes of src from byte offset off into dst. A copy into Go
// memory (pageable) is complete when this returns; into a HostBuffer it is complete after
// Synchronize.
func (s *stream) CopyToHost(dst []byte, src runtime.Buffer, off int) error {
	return s.core.Download(gpurt.Entry{Fn: s.dev.drv.cuMemcpyDtoHAsync, Name: "cuMemcpyDtoHAsync_v2"}, dst, src, off, noWait)
}

// Zero sets n bytes of dst at byte offset off to zero.
func (s *stream) Zero(dst runtime.Buffer, off, n int) error {
	return s.core.Zero(gpurt.Entry{Fn: s.dev.drv.cuMemsetD8Async, Name: "cuMemsetD8Async"}, dst, off, n)
}

// Record marks event e at the current point of the stream.
func (s *stream) Record(e runtime.Event) error {
	return s.core.Record(gpurt.Entry{Fn: s.dev.drv.cuEventRecord, Name: "cuEventRecord"}, e)
}

// Synchronize waits until everything queued on the stream so far is done.
func (s *stream) Synchronize() error {
	return s.core.Synchronize(gpurt.Entry{Fn: s.dev.drv.cuStreamSynchronize, Name: "cuStreamSynchronize"})
}

// Close destroys the stream, unless the caller owns it (WrapStream) or the device does
// (DefaultStream). A second Close does nothing.
func (s *stream) Close() error {
	if s.core.IsDefault {
		return nil
	}
	return s.dev.disown(s)
}

func (s *stream) release() error {
	return s.core.Release(gpurt.Entry{Fn: s.dev.drv.cuStreamDestroy, Name: "cuStreamDestroy_v2"},
		gpurt.Entry{Fn: s.dev.drv.cuMemFreeHost, Name: "cuMemFreeHost"})
}

// event is a CUevent, created with timing.
type event struct {
	core gpurt.Event // Handle is the CUevent
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
	err := d.own(func() (resource, error) {
		if r := Result(gpurt.CallN(d.drv.cuEventCreate, uintptr(unsafe.Pointer(&e.core.Handle)), eventDefault)); r != Success {
			return nil, failed("cuEventCreate(CU_EVENT_DEFAULT)", r)
		}
		return e, nil
	})
	if err != nil {
		return nil, err
	}
	return e, nil
}

// Synchronize waits until the event has been reached.
func (e *event) Synchronize() error {
	return e.core.Synchronize(gpurt.Entry{Fn: e.dev.drv.cuEventSynchronize, Name: "cuEventSynchronize"})
}

// ElapsedSince returns the milliseconds from start to this event, both recorded and
// reached.
func (e *event) ElapsedSince(start runtime.Event) (float32, error) {
	return e.core.ElapsedSince(gpurt.Entry{Fn: e.dev.drv.cuEventElapsedTime, Name: "cuEventElapsedTime"}, start)
}

// Close destroys the event. A second Close does nothing.
func (e *event) Close() error { return e.dev.disown(e) }

func (e *event) release() error {
	return e.core.Release(gpurt.Entry{Fn: e.dev.drv.cuEventDestroy, Name: "cuEventDestroy_v2"})
}
