package gpurt

import (
	"errors"
	"fmt"
	goruntime "runtime"
	"sync/atomic"
	"unsafe"

	"github.com/gumbel-go/gumbel/runtime"
)

// Entry is one C entry point of a backend and its name, for errors.
type Entry struct {
	Fn   uintptr
	Name string
}

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
	b := d.Bind()
	if r := f.Call(b.Fn, b.Arg); r != 0 {
		goruntime.UnlockOSThread()
		f.mu.Unlock()
		return d.Failed(b.Call, r)
	}
	return nil
}

func (f *Frame) end() {
	goruntime.UnlockOSThread()
	f.mu.Unlock()
}

// Stream is the shared part of a stream: its handle, its pinned block of launch
// arguments, and the frame its per-step calls go through.
type Stream struct {
	Frame
	Dev    *Device
	Handle uintptr
	Params *ParamBlock
	// Owned streams are destroyed by Release; wrapped ones are the caller's.
	Owned bool
	// IsDefault marks the device's default stream, which only the device closes.
	IsDefault bool
	Closed    atomic.Bool
}

// Init sets the stream up on handle with params, pinned memory of ParamBlockBytes.
func (s *Stream) Init(dev *Device, handle uintptr, params unsafe.Pointer, owned bool) {
	s.Dev, s.Handle, s.Owned = dev, handle, owned
	s.Params = InitParamBlock(params)
}

// OpErr names the operation that found the stream closed or could not make the device
// current.
func (s *Stream) OpErr(op string, err error) error {
	return fmt.Errorf("%s stream %#x: %s: %w", s.Dev.Pkg, s.Handle, op, err)
}

// Launch checks a launch of k over grid blocks of block threads with args, and queues
// it through launch, which takes cuLaunchKernel's eleven words (hipModuleLaunchKernel
// takes the same). The arguments go in the kernelParams form, through the stream's
// pinned block; the trailing "extra" word, HIP's other way of passing them, stays 0.
func (s *Stream) Launch(launch Entry, k *Kernel, grid, block runtime.Dim3, args *runtime.Args) error {
	d := s.Dev
	if k.Module.Dev != d {
		return fmt.Errorf("%w: %s: Launch %s: the kernel belongs to %s device %d, the stream to %d", runtime.ErrInvalidArgument, d.Pkg, k.Name, d.Brand, k.Module.Dev.Ordinal, d.Ordinal)
	}
	if k.Module.Closed.Load() {
		return fmt.Errorf("%s: Launch %s: module closed: %w", d.Pkg, k.Name, runtime.ErrClosed)
	}
	g, err := d.LaunchShape("grid", grid, d.MaxGrid)
	if err != nil {
		return err
	}
	b, err := d.LaunchShape("block", block, d.MaxBlock)
	if err != nil {
		return err
	}
	if threads := b[0] * b[1] * b[2]; threads > uintptr(k.MaxThreads) {
		return fmt.Errorf("%w: %s: Launch %s: block %v has %d threads, the kernel allows %d", runtime.ErrInvalidArgument, d.Pkg, k.Name, block, threads, k.MaxThreads)
	}
	if d.MaxWorkItems != 0 {
		for i := range g {
			if uint64(g[i])*uint64(b[i]) > d.MaxWorkItems {
				return fmt.Errorf("%w: %s: launch %s: %d blocks of %d threads in dimension %d exceed %d work-items", runtime.ErrInvalidArgument, d.Pkg, k.Name, g[i], b[i], i, d.MaxWorkItems)
			}
		}
	}
	if err := d.CheckArgs(k, args); err != nil {
		return err
	}
	if err := s.begin(d, &s.Closed); err != nil {
		return s.OpErr("Launch", err)
	}
	defer s.end()
	s.Params.Pack(args)
	if r := s.Call(launch.Fn, k.Fn, g[0], g[1], g[2], b[0], b[1], b[2], 0, s.Handle, uintptr(unsafe.Pointer(s.Params)), 0); r != 0 {
		return d.Failed(fmt.Sprintf("%s(%s, grid %v, block %v)", launch.Name, k.Name, grid, block), r)
	}
	return nil
}

// CheckArgs validates a launch's arguments: the list built without error, every buffer
// live device memory of d, and, where the driver describes the kernel's parameters, as
// many arguments as parameters with matching sizes.
func (d *Device) CheckArgs(k *Kernel, args *runtime.Args) error {
	if args == nil {
		return fmt.Errorf("%w: %s: launch %s: nil arguments", runtime.ErrInvalidArgument, d.Pkg, k.Name)
	}
	if err := args.Err(); err != nil {
		return fmt.Errorf("%s: launch %s: %w", d.Pkg, k.Name, err)
	}
	n, sizes := args.Len(), k.ParamSizes
	if sizes != nil && n != len(sizes) {
		return fmt.Errorf("%w: %s: launch %s: %d arguments for %d parameters", runtime.ErrInvalidArgument, d.Pkg, k.Name, n, len(sizes))
	}
	for i := 0; i < n; i++ {
		kind := args.Kind(i)
		if sizes != nil && kind.Size() != sizes[i] {
			return fmt.Errorf("%w: %s: launch %s: argument %d is %d bytes, the parameter %d", runtime.ErrInvalidArgument, d.Pkg, k.Name, i, kind.Size(), sizes[i])
		}
		if kind != runtime.ArgBuffer {
			continue
		}
		b, _ := args.BufferArg(i)
		// The kernel's name joins the message only on failure: building it for every
		// argument would allocate on each launch.
		if _, err := d.OwnBuffer("Launch", b); err != nil {
			return fmt.Errorf("%s: launch %s: argument %d: %w", d.Pkg, k.Name, i, err)
		}
	}
	return nil
}

// OwnBuffer returns the shared part of b when b is live memory of this device.
func (d *Device) OwnBuffer(op string, b runtime.Buffer) (*Buffer, error) {
	mem := d.AsBuffer(b)
	if err := d.CheckBuffer(op, b, mem); err != nil {
		return nil, err
	}
	return mem, nil
}

// Upload copies src to dst at byte offset off through copy, which takes
// cuMemcpyHtoDAsync's words (to, from, bytes, stream). When wait names an entry point
// (Fn not 0), the stream is synchronised through it before Upload returns.
func (s *Stream) Upload(copy Entry, dst runtime.Buffer, off int, src []byte, wait Entry) error {
	b, err := s.Dev.OwnBuffer("CopyToDevice", dst)
	if err != nil {
		return err
	}
	if err := s.Dev.CheckRange("CopyToDevice", off, len(src), b.Len); err != nil {
		return err
	}
	if len(src) == 0 {
		return nil
	}
	return s.copy(copy, b.Ptr+uintptr(off), uintptr(unsafe.Pointer(&src[0])), len(src), wait)
}

// Download copies len(dst) bytes of src from byte offset off into dst through copy,
// which takes cuMemcpyDtoHAsync's words; wait as for Upload.
func (s *Stream) Download(copy Entry, dst []byte, src runtime.Buffer, off int, wait Entry) error {
	b, err := s.Dev.OwnBuffer("CopyToHost", src)
	if err != nil {
		return err
	}
	if err := s.Dev.CheckRange("CopyToHost", off, len(dst), b.Len); err != nil {
		return err
	}
	if len(dst) == 0 {
		return nil
	}
	return s.copy(copy, uintptr(unsafe.Pointer(&dst[0])), b.Ptr+uintptr(off), len(dst), wait)
}

// copy queues one copy of n bytes. The host side is Go or pinned host memory: the
// uintptrescapes rule keeps Go memory alive and in place for the call, and wait, when
// given, keeps the copy from outliving it.
//
//go:uintptrescapes
func (s *Stream) copy(copy Entry, to, from uintptr, n int, wait Entry) error {
	if err := s.begin(s.Dev, &s.Closed); err != nil {
		return s.OpErr(copy.Name, err)
	}
	defer s.end()
	if r := s.Call(copy.Fn, to, from, uintptr(n), s.Handle); r != 0 {
		return s.Dev.Failed(fmt.Sprintf("%s(%#x, %#x, %d)", copy.Name, to, from, n), r)
	}
	if wait.Fn == 0 {
		return nil
	}
	if r := s.Call(wait.Fn, s.Handle); r != 0 {
		return s.Dev.Failed(fmt.Sprintf("%s (after %s with Go memory)", wait.Name, copy.Name), r)
	}
	return nil
}

// Zero sets n bytes of dst at byte offset off to zero through memset, which takes
// cuMemsetD8Async's words (pointer, byte value, count, stream).
func (s *Stream) Zero(memset Entry, dst runtime.Buffer, off, n int) error {
	b, err := s.Dev.OwnBuffer("Zero", dst)
	if err != nil {
		return err
	}
	if err := s.Dev.CheckRange("Zero", off, n, b.Len); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	if err := s.begin(s.Dev, &s.Closed); err != nil {
		return s.OpErr("Zero", err)
	}
	defer s.end()
	if r := s.Call(memset.Fn, b.Ptr+uintptr(off), 0, uintptr(n), s.Handle); r != 0 {
		return s.Dev.Failed(fmt.Sprintf("%s(%#x, 0, %d)", memset.Name, b.Ptr+uintptr(off), n), r)
	}
	return nil
}

// Record marks event e at the current point of the stream through record
// (cuEventRecord's words: event, stream).
func (s *Stream) Record(record Entry, e runtime.Event) error {
	ev, err := s.Dev.OwnEvent("Record", e)
	if err != nil {
		return err
	}
	return s.CallOn("Record", record, ev.Handle, s.Handle)
}

// Synchronize waits through sync (cuStreamSynchronize's word: the stream) until
// everything queued so far is done.
func (s *Stream) Synchronize(sync Entry) error {
	return s.CallOn("Synchronize", sync, s.Handle)
}

// CallOn makes one call for operation op of the stream, which it takes for the call.
func (s *Stream) CallOn(op string, e Entry, words ...uintptr) error {
	if err := s.begin(s.Dev, &s.Closed); err != nil {
		return s.OpErr(op, err)
	}
	defer s.end()
	if r := s.Call(e.Fn, words...); r != 0 {
		return s.Dev.Failed(e.Name, r)
	}
	return nil
}

// Release destroys the stream through destroy when it owns it and frees its argument
// block through free, once; the device must be current.
func (s *Stream) Release(destroy, free Entry) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.Closed.Swap(true) {
		return nil
	}
	var err error
	if s.Owned {
		if r := int32(CallN(destroy.Fn, s.Handle)); r != 0 {
			err = s.Dev.Failed(destroy.Name, r)
		}
	}
	if r := int32(CallN(free.Fn, uintptr(unsafe.Pointer(s.Params)))); r != 0 {
		err = errors.Join(err, s.Dev.Failed(free.Name, r))
	}
	return err
}

// Event is the shared part of an event, created with timing.
type Event struct {
	Frame
	Dev    *Device
	Handle uintptr
	Closed atomic.Bool
	ms     float32 // the elapsed-time call's result, here so that timing does not allocate
}

// OwnEvent returns the shared part of e when e is a live event of this device.
func (d *Device) OwnEvent(op string, e runtime.Event) (*Event, error) {
	ev := d.AsEvent(e)
	switch {
	case ev == nil:
		return nil, fmt.Errorf("%w: %s: %s: %T is not a %s event", runtime.ErrInvalidArgument, d.Pkg, op, e, d.Brand)
	case ev.Dev != d:
		return nil, fmt.Errorf("%w: %s: %s: event belongs to %s device %d, not %d", runtime.ErrInvalidArgument, d.Pkg, op, d.Brand, ev.Dev.Ordinal, d.Ordinal)
	case ev.Closed.Load():
		return nil, fmt.Errorf("%s: %s: event closed: %w", d.Pkg, op, runtime.ErrClosed)
	}
	return ev, nil
}

func (e *Event) begin() error {
	if err := e.Frame.begin(e.Dev, &e.Closed); err != nil {
		if errors.Is(err, runtime.ErrClosed) {
			return fmt.Errorf("%s event: %w", e.Dev.Pkg, err)
		}
		return err
	}
	return nil
}

// Synchronize waits through sync (cuEventSynchronize's word: the event) until the event
// has been reached.
func (e *Event) Synchronize(sync Entry) error {
	if err := e.begin(); err != nil {
		return err
	}
	defer e.end()
	if r := e.Call(sync.Fn, e.Handle); r != 0 {
		return e.Dev.Failed(sync.Name, r)
	}
	return nil
}

// ElapsedSince returns the milliseconds from start to this event, both recorded and
// reached, through elapsed (cuEventElapsedTime's words: result, start, end).
func (e *Event) ElapsedSince(elapsed Entry, start runtime.Event) (float32, error) {
	st, err := e.Dev.OwnEvent("ElapsedSince", start)
	if err != nil {
		return 0, err
	}
	if err := e.begin(); err != nil {
		return 0, err
	}
	defer e.end()
	if r := e.Call(elapsed.Fn, uintptr(unsafe.Pointer(&e.ms)), st.Handle, e.Handle); r != 0 {
		return 0, e.Dev.Failed(elapsed.Name, r)
	}
	return e.ms, nil
}

// Release destroys the event through destroy, once; the device must be current.
func (e *Event) Release(destroy Entry) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.Closed.Swap(true) {
		return nil
	}
	if r := int32(CallN(destroy.Fn, e.Handle)); r != 0 {
		return e.Dev.Failed(destroy.Name, r)
	}
	return nil
}
