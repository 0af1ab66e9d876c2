//go:build darwin

package metal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"github.com/gumbel-go/gumbel/runtime"
)

// maxBufferIndex is one past the highest buffer argument index of a compute function.
const maxBufferIndex = 31

// stream is an MTLCommandQueue with the command buffer being encoded. Launch encodes into
// that command buffer (one compute encoder, kept open across launches, so dispatches run
// in order and see each other's writes); Synchronize commits it and waits. Shared storage
// needs no transfers: the copies wait for the stream's queued work and then copy in
// memory.
type stream struct {
	dev *Device

	mu     sync.Mutex
	c      caller
	queue  uintptr
	cb     uintptr // current command buffer (retained), 0 when none
	enc    uintptr // its compute encoder (retained), 0 when none
	closed bool
	// inflight are committed command buffers not yet waited for (retained), oldest
	// first: a Record commits the work before it.
	inflight []uintptr
}

// newStream needs the device locked and an autorelease pool pushed.
func (d *Device) newStream() (*stream, error) {
	q := d.c.send0(d.dev, mNewCommandQueue)
	if q == 0 {
		return nil, &Error{Call: "newCommandQueue", Err: runtime.ErrOutOfMemory}
	}
	s := &stream{dev: d, queue: q, inflight: make([]uintptr, 0, 8)}
	s.c.b = d.b
	return s, nil
}

// Handle returns the MTLCommandQueue.
func (s *stream) Handle() uintptr { return s.queue }

func (s *stream) check(call string) error {
	if s.closed {
		return fmt.Errorf("metal: %s: stream: %w", call, runtime.ErrClosed)
	}
	if s.dev.gone.Load() && s != s.dev.def {
		// The device released its modules: kernels of this stream's launches are gone.
		return fmt.Errorf("metal: %s: device: %w", call, runtime.ErrClosed)
	}
	return nil
}

// Launch encodes a dispatch of grid threadgroups of block threads. Buffers bind with
// setBuffer:offset:atIndex: and scalars with setBytes:length:atIndex:, argument i at
// index i. It allocates nothing.
func (s *stream) Launch(k runtime.Kernel, grid, block runtime.Dim3, args *runtime.Args) error {
	kern, ok := k.(*kernel)
	if !ok || kern == nil || kern.mod.dev != s.dev {
		return fmt.Errorf("%w: metal: Launch: not a kernel of this device (%T)", runtime.ErrInvalidArgument, k)
	}
	if args == nil {
		return fmt.Errorf("%w: metal: Launch %s: nil arguments", runtime.ErrInvalidArgument, kern.name)
	}
	if err := args.Err(); err != nil {
		return fmt.Errorf("metal: Launch %s: %w", kern.name, err)
	}
	if args.Len() > maxBufferIndex {
		return fmt.Errorf("%w: metal: Launch %s: %d arguments, Metal binds at most %d", runtime.ErrInvalidArgument,
			kern.name, args.Len(), maxBufferIndex)
	}
	g, err := metalSize("grid", grid, 1<<31)
	if err != nil {
		return fmt.Errorf("metal: Launch %s: %w", kern.name, err)
	}
	b, err := metalSize("block", block, kern.maxThreads)
	if err != nil {
		return fmt.Errorf("metal: Launch %s: %w", kern.name, err)
	}
	if b[0]*b[1]*b[2] > uint64(kern.maxThreads) {
		return fmt.Errorf("%w: metal: Launch %s: %d threads per threadgroup, the pipeline allows %d",
			runtime.ErrInvalidArgument, kern.name, b[0]*b[1]*b[2], kern.maxThreads)
	}
	for i := range args.Len() {
		if args.Kind(i) != runtime.ArgBuffer {
			continue
		}
		buf, _ := args.BufferArg(i)
		if _, err := s.dev.bufferOf(buf, "Launch"); err != nil {
			return fmt.Errorf("%s, argument %d: %w", kern.name, i, err)
		}
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check("Launch"); err != nil {
		return err
	}
	c := &s.c
	pool := c.enter()
	defer c.leave(pool)
	if err := s.openEncoder(); err != nil {
		return err
	}
	c.send1(s.enc, mSetComputePipelineState, kern.pipeline)
	for i := range args.Len() {
		kind := args.Kind(i)
		if kind == runtime.ArgBuffer {
			buf, off := args.BufferArg(i)
			c.send3(s.enc, mSetBufferOffsetAtIndex, buf.(*buffer).obj, uintptr(off), uintptr(i))
			continue
		}
		// setBytes copies the value while encoding, so one scratch word serves all.
		binary.LittleEndian.PutUint64(c.scalar[:], *args.Word(i))
		c.send3(s.enc, mSetBytesLengthAtIndex, uintptr(unsafe.Pointer(&c.scalar)), uintptr(kind.Size()), uintptr(i))
	}
	c.sendTriples2(s.enc, mDispatchThreadgroups, g, b)
	return nil
}

// metalSize turns a Dim3 into an MTLSize; zero dimensions count as 1.
func metalSize(what string, d runtime.Dim3, limit int) ([3]uint64, error) {
	var out [3]uint64
	for i, v := range [3]int{d.X, d.Y, d.Z} {
		if v == 0 {
			v = 1
		}
		if v < 0 || v > limit {
			return out, fmt.Errorf("%w: %s %+v", runtime.ErrInvalidArgument, what, d)
		}
		out[i] = uint64(v)
	}
	return out, nil
}

// openEncoder makes sure a command buffer and its compute encoder are open (stream
// locked, pool pushed). Both come autoreleased and are retained for their lifetime here.
func (s *stream) openEncoder() error {
	c := &s.c
	if s.cb == 0 {
		cb := c.send0(s.queue, mCommandBuffer)
		if cb == 0 {
			return &Error{Call: "commandBuffer", Err: runtime.ErrOutOfMemory}
		}
		s.cb = c.retain(cb)
	}
	if s.enc == 0 {
		enc := c.send0(s.cb, mComputeCommandEncoder)
		if enc == 0 {
			return &Error{Call: "computeCommandEncoder", Err: runtime.ErrOutOfMemory}
		}
		s.enc = c.retain(enc)
	}
	return nil
}

// commit ends the encoder and commits the current command buffer, creating an empty one
// when there is none and empty is set. It returns the committed buffer (still owned by
// inflight), or 0.
func (s *stream) commit(empty bool) (uintptr, error) {
	c := &s.c
	if s.enc != 0 {
		c.send0(s.enc, mEndEncoding)
		c.release(s.enc)
		s.enc = 0
	}
	if s.cb == 0 {
		if !empty {
			return 0, nil
		}
		cb := c.send0(s.queue, mCommandBuffer)
		if cb == 0 {
			return 0, &Error{Call: "commandBuffer", Err: runtime.ErrOutOfMemory}
		}
		s.cb = c.retain(cb)
	}
	cb := s.cb
	c.send0(cb, mCommit)
	s.inflight = append(s.inflight, cb)
	s.cb = 0
	return cb, nil
}

// drain commits the current work and waits for every committed command buffer, oldest
// first, releasing them; it reports the first that failed (stream locked, pool pushed).
func (s *stream) drain() error {
	_, err := s.commit(false)
	c := &s.c
	for _, cb := range s.inflight {
		c.send0(cb, mWaitUntilCompleted)
		if err == nil && c.send0(cb, mStatus) == commandBufferError {
			err = c.nsError("command buffer", c.send0(cb, mError), nil)
		}
		c.release(cb)
	}
	s.inflight = s.inflight[:0]
	return err
}

// Synchronize commits the queued work and waits for it.
func (s *stream) Synchronize() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check("Synchronize"); err != nil {
		return err
	}
	if s.cb == 0 && len(s.inflight) == 0 {
		return nil
	}
	pool := s.c.enter()
	defer s.c.leave(pool)
	return s.drain()
}

// hostRange checks [off, off+n) of b and waits for the stream's queued work, which may
// touch it. Work queued on other streams is the caller's to order, as with CUDA.
func (s *stream) hostRange(call string, b runtime.Buffer, off, n int) ([]byte, error) {
	mb, err := s.dev.bufferOf(b, call)
	if err != nil {
		return nil, err
	}
	if off < 0 || n < 0 || off > mb.size || n > mb.size-off {
		return nil, fmt.Errorf("%w: metal: %s: %d bytes at offset %d of a %d-byte buffer", runtime.ErrInvalidArgument,
			call, n, off, mb.size)
	}
	if err := s.check(call); err != nil {
		return nil, err
	}
	if s.cb != 0 || len(s.inflight) != 0 {
		pool := s.c.enter()
		err := s.drain()
		s.c.leave(pool)
		if err != nil {
			return nil, err
		}
	}
	return mb.mem[off : off+n], nil
}

// CopyToDevice copies src into dst at off once the stream's queued work is done; src
// may be reused as soon as it returns.
func (s *stream) CopyToDevice(dst runtime.Buffer, off int, src []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	mem, err := s.hostRange("CopyToDevice", dst, off, len(src))
	if err != nil {
		return err
	}
	copy(mem, src)
	return nil
}

// CopyToHost copies from src at off into dst once the stream's queued work is done.
func (s *stream) CopyToHost(dst []byte, src runtime.Buffer, off int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	mem, err := s.hostRange("CopyToHost", src, off, len(dst))
	if err != nil {
		return err
	}
	copy(dst, mem)
	return nil
}

// Zero clears n bytes of dst at off once the stream's queued work is done.
func (s *stream) Zero(dst runtime.Buffer, off, n int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	mem, err := s.hostRange("Zero", dst, off, n)
	if err != nil {
		return err
	}
	clear(mem)
	return nil
}

// Record commits the work queued so far (an empty command buffer when there is none)
// and points the event at that command buffer: the event is reached when the buffer
// completes, and its time is the buffer's GPUEndTime.
func (s *stream) Record(e runtime.Event) error {
	ev, ok := e.(*event)
	if !ok || ev == nil || ev.dev != s.dev {
		return fmt.Errorf("%w: metal: Record: not an event of this device (%T)", runtime.ErrInvalidArgument, e)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check("Record"); err != nil {
		return err
	}
	pool := s.c.enter()
	defer s.c.leave(pool)
	cb, err := s.commit(true)
	if err != nil {
		return err
	}
	ev.set(s.c.retain(cb))
	return nil
}

// Close waits for the queued work and releases the queue. Closing the device's default
// stream only waits: the device releases it.
func (s *stream) Close() error {
	if s == s.dev.def {
		return s.Synchronize()
	}
	return s.close()
}

func (s *stream) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	pool := s.c.enter()
	defer s.c.leave(pool)
	err := s.drain()
	s.closed = true
	s.c.release(s.queue)
	s.queue = 0
	if err != nil {
		return errors.Join(fmt.Errorf("metal: closing a stream"), err)
	}
	return nil
}
