package nccl

import (
	"errors"
	"fmt"
	"sync"

	"github.com/ebitengine/purego"

	"github.com/gumbel-go/gumbel/collective"
	"github.com/gumbel-go/gumbel/runtime"
)

var _ collective.Comm = (*Comm)(nil)

// Comm is one rank's handle on an NCCL communicator (ncclComm_t), made by
// Library.InitRank or Library.InitAll. Its calls are made one at a time; Close waits
// for a call in progress.
type Comm struct {
	lib        *Library
	handle     uintptr
	rank, size int
	place      placement

	// mu holds the words of the call in progress: the per-step call passes them to C
	// from here, where a variadic call would allocate a slice each time.
	mu     sync.Mutex
	closed bool
	words  [7]uintptr
	status Result
	// allReduce makes the call with words; made once, so that handing it to the
	// device's thread allocates nothing.
	allReduce func() error
}

func newComm(l *Library, h uintptr, rank, size int, p placement) *Comm {
	c := &Comm{lib: l, handle: h, rank: rank, size: size, place: p}
	c.allReduce = c.callAllReduce
	return c
}

// Rank is the rank of this handle in its communicator.
func (c *Comm) Rank() int { return c.rank }

// Size is the number of ranks in the communicator.
func (c *Comm) Size() int { return c.size }

// AllReduce reduces count elements of dt at byte offset off of buf in place over the
// ranks (ncclAllReduce with the same send and receive buffer), queued on stream: buf
// and stream belong to the rank's device. It returns once the reduction is queued and
// allocates nothing. Arguments are checked before NCCL is called (errors wrapping
// collective.ErrArgument): a rank refused here never reaches NCCL, and the other ranks
// of the round wait for it on the device.
func (c *Comm) AllReduce(buf runtime.Buffer, off, count int, dt collective.DType, op collective.Op, stream runtime.Stream) error {
	dtype, dtName := dataType(dt)
	redop, opName := redOp(op)
	switch {
	case buf == nil:
		return c.refuse(off, count, dt, op, "nil buffer")
	case stream == nil:
		return c.refuse(off, count, dt, op, "nil stream")
	case dtName == "":
		return c.refuse(off, count, dt, op, "unknown element type")
	case opName == "":
		return c.refuse(off, count, dt, op, "unknown operation")
	case off < 0 || count < 0:
		return c.refuse(off, count, dt, op, "negative offset or count")
	case off > buf.Size() || count > (buf.Size()-off)/dt.Size():
		return c.refuse(off, count, dt, op, fmt.Sprintf("the elements pass the end of a %d-byte buffer", buf.Size()))
	case count > 0 && buf.DevicePtr() == 0:
		return c.refuse(off, count, dt, op, "the buffer was freed")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return fmt.Errorf("nccl: rank %d of %d: AllReduce: %w", c.rank, c.size, collective.ErrClosed)
	}
	p := buf.DevicePtr() + uintptr(off)
	c.words = [7]uintptr{p, p, uintptr(count), dtype, redop, c.handle, stream.Handle()}
	if err := c.place.run(c.allReduce); err != nil {
		return c.deviceErr("AllReduce", err)
	}
	if c.status != Success {
		return c.lib.failed(fmt.Sprintf("ncclAllReduce(count %d, %s, %s, rank %d of %d)", count, dtName, opName, c.rank, c.size), c.status, c.handle)
	}
	return nil
}

// callAllReduce calls ncclAllReduce with the words AllReduce set; c.mu is held.
func (c *Comm) callAllReduce() error {
	r, _, _ := purego.SyscallN(c.lib.ncclAllReduce, c.words[:]...)
	c.status = result(r)
	return nil
}

// deviceErr is the error of a call that could not reach its device's thread; a closed
// device also reads as collective.ErrClosed.
func (c *Comm) deviceErr(op string, err error) error {
	if errors.Is(err, runtime.ErrClosed) {
		return fmt.Errorf("nccl: rank %d of %d: %s: %w: %w", c.rank, c.size, op, collective.ErrClosed, err)
	}
	return fmt.Errorf("nccl: rank %d of %d: %s: %w", c.rank, c.size, op, err)
}

// refuse is the error of an AllReduce whose arguments are wrong.
func (c *Comm) refuse(off, count int, dt collective.DType, op collective.Op, why string) error {
	return fmt.Errorf("nccl: rank %d of %d: AllReduce(off %d, count %d, %v, %v): %w: %s", c.rank, c.size, off, count, dt, op, collective.ErrArgument, why)
}

// Close destroys the rank's communicator (ncclCommDestroy), on its device's thread. A
// second Close does nothing and returns nil. Close the communicators before their
// devices: destroying one needs the device's context.
func (c *Comm) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	var r Result
	err := c.place.run(func() error {
		r = result(callN(c.lib.ncclCommDestroy, c.handle))
		return nil
	})
	if err != nil {
		return c.deviceErr("Close", err)
	}
	if r != Success {
		return c.lib.failed(fmt.Sprintf("ncclCommDestroy(rank %d of %d)", c.rank, c.size), r, 0)
	}
	return nil
}
