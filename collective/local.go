package collective

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/gumbel-go/gumbel/runtime"
)

// NewLocal returns the n ranks of a group that reduces inside this process: shards on
// the CPU device, several shards on one GPU, or shards on devices of different kinds.
// Each AllReduce copies the rank's elements to the host and waits there for the call of
// every other rank in the same round (the k-th call of each rank makes round k), the
// rank whose call completes the round reduces on the host (floats summed in rank
// order, so the result never depends on timing), and each rank copies the result back
// into its buffer before it returns. Steady-state calls allocate nothing.
//
// A round fails on every rank, rather than leaving the others waiting, when a rank
// joins it with arguments that Comm.AllReduce refuses or that it could not copy to the
// host (each rank's error then wraps that rank's, ErrArgument for a bad argument), or
// when the ranks disagree on count, element type or operation (ErrMismatch). Closing any
// rank closes the group: the ranks waiting in a round, and every later call, fail with
// ErrClosed.
func NewLocal(n int) ([]Comm, error) {
	if n < 1 {
		return nil, fmt.Errorf("collective: NewLocal(%d): %w: a group has at least one rank", n, ErrArgument)
	}
	g := &group{n: n, closedBy: -1, calls: make([]call, n), bufs: make([][]uint64, n), errs: make([]error, n)}
	g.cond.L = &g.mu
	comms := make([]Comm, n)
	for r := range comms {
		comms[r] = &local{g: g, rank: r}
	}
	return comms, nil
}

// call is what one rank asked of a round.
type call struct {
	count int
	dt    DType
	op    Op
	// err, when set, is why the rank joined without a contribution.
	err error
}

func (c call) String() string { return fmt.Sprintf("count %d %v %v", c.count, c.dt, c.op) }

// group is the state the ranks of one NewLocal share.
type group struct {
	n        int
	mu       sync.Mutex
	cond     sync.Cond // signalled when a round completes or the group closes
	closed   bool
	closedBy int
	// arrived counts the ranks in the round being gathered; done counts the completed
	// rounds, so the round being gathered is done+1.
	arrived int
	done    uint64
	calls   []call
	// bufs hold each rank's elements while its round gathers, and the result once it
	// completes; each is the rank's own staging memory.
	bufs [][]uint64
	// errs are each rank's outcome of the last completed round. A rank reads its own
	// before the next round can complete, since that round needs it.
	errs []error
}

// local is one rank of a group.
type local struct {
	g    *group
	rank int
	// mu makes a rank's calls one at a time, whoever makes them, so rounds stay matched.
	mu sync.Mutex
	// host is the rank's staging memory, grown on demand and then reused; 64-bit words
	// keep every element type aligned.
	host   []uint64
	closed atomic.Bool
}

func (c *local) Rank() int { return c.rank }
func (c *local) Size() int { return c.g.n }

// AllReduce joins the rank's next round; see NewLocal.
func (c *local) AllReduce(buf runtime.Buffer, off, count int, dt DType, op Op, stream runtime.Stream) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var bytes []byte
	err := check(buf, off, count, dt, op, stream)
	if err == nil {
		bytes, err = c.stage(buf, off, count*dt.Size(), stream)
	}
	if err = c.g.join(c.rank, call{count: count, dt: dt, op: op, err: err}, c.host); err != nil {
		return c.failed(off, count, dt, op, err)
	}
	if len(bytes) > 0 {
		// The source is Go memory: it must not change before the copy is done.
		if err := stream.CopyToDevice(buf, off, bytes); err != nil {
			return c.failed(off, count, dt, op, err)
		}
		if err := stream.Synchronize(); err != nil {
			return c.failed(off, count, dt, op, err)
		}
	}
	return nil
}

// AllReduceHost is AllReduce for elements already in host memory (HostReducer).
func (c *local) AllReduceHost(data []byte, count int, dt DType, op Op) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var err error
	n := count * dt.Size()
	switch {
	case dt.Size() == 0 || !op.valid():
		err = fmt.Errorf("%w: element type %v, operation %v", ErrArgument, dt, op)
	case count < 0 || n > len(data):
		err = fmt.Errorf("%w: %d elements of %v in %d bytes", ErrArgument, count, dt, len(data))
	default:
		if words := (n + 7) / 8; words > len(c.host) {
			c.host = make([]uint64, words)
		}
		copy(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(c.host))), n), data)
	}
	if err = c.g.join(c.rank, call{count: count, dt: dt, op: op, err: err}, c.host); err != nil {
		return fmt.Errorf("collective: local rank %d of %d: AllReduceHost(count %d, %v, %v): %w", c.rank, c.g.n,
			count, dt, op, err)
	}
	copy(data[:n], unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(c.host))), n))
	return nil
}

// stage copies n bytes of buf from off into the rank's host memory, after the work
// queued on stream, and returns them.
func (c *local) stage(buf runtime.Buffer, off, n int, stream runtime.Stream) ([]byte, error) {
	if words := (n + 7) / 8; words > len(c.host) {
		c.host = make([]uint64, words)
	}
	if n == 0 {
		return nil, nil
	}
	bytes := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(c.host))), n)
	if err := stream.CopyToHost(bytes, buf, off); err != nil {
		return nil, err
	}
	return bytes, stream.Synchronize()
}

// failed names the call, and the rank, in err.
func (c *local) failed(off, count int, dt DType, op Op, err error) error {
	return fmt.Errorf("collective: local rank %d of %d: AllReduce(off %d, count %d, %v, %v): %w", c.rank, c.g.n, off, count, dt, op, err)
}

// Close closes the whole group: the ranks waiting in a round, and every later call of
// any rank, fail with ErrClosed. A second Close does nothing and returns nil.
func (c *local) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	g := c.g
	g.mu.Lock()
	if !g.closed {
		g.closed, g.closedBy = true, c.rank
		g.cond.Broadcast()
	}
	g.mu.Unlock()
	return nil
}

// join enters rank's call, with its staging memory host, into the round being gathered
// and waits for the round to complete; the last rank to arrive completes it. It returns
// the rank's outcome; on success host holds the result.
func (g *group) join(rank int, c call, host []uint64) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return g.closedError()
	}
	g.calls[rank], g.bufs[rank] = c, host
	g.arrived++
	round := g.done + 1
	if g.arrived == g.n {
		g.complete(round)
		g.arrived = 0
		g.done = round
		g.cond.Broadcast()
	}
	for g.done < round && !g.closed {
		g.cond.Wait()
	}
	if g.done < round {
		return g.closedError()
	}
	return g.errs[rank]
}

func (g *group) closedError() error {
	return fmt.Errorf("rank %d closed the group: %w", g.closedBy, ErrClosed)
}

// complete decides every rank's outcome of a round whose calls have all arrived and, when
// they agree, reduces them into every rank's staging memory.
func (g *group) complete(round uint64) {
	clear(g.errs)
	if bad := g.refused(); bad >= 0 {
		for r, c := range g.calls {
			if c.err != nil {
				g.errs[r] = c.err
			} else {
				g.errs[r] = fmt.Errorf("rank %d could not take part: %w", bad, g.calls[bad].err)
			}
		}
		return
	}
	first := g.calls[0]
	for _, c := range g.calls[1:] {
		if c.count != first.count || c.dt != first.dt || c.op != first.op {
			err := g.mismatch(round)
			for r := range g.errs {
				g.errs[r] = err
			}
			return
		}
	}
	words := (first.count*first.dt.Size() + 7) / 8
	acc := g.bufs[0][:words]
	for _, b := range g.bufs[1:] {
		reduce(acc, b[:words], first.count, first.dt, first.op)
	}
	for _, b := range g.bufs[1:] {
		copy(b, acc)
	}
}

// refused returns the first rank that joined without a contribution, or -1.
func (g *group) refused() int {
	for r, c := range g.calls {
		if c.err != nil {
			return r
		}
	}
	return -1
}

// mismatch describes a round whose ranks disagree.
func (g *group) mismatch(round uint64) error {
	var b strings.Builder
	for r, c := range g.calls {
		if r > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "rank %d %v", r, c)
	}
	return fmt.Errorf("%w: round %d: %s", ErrMismatch, round, b.String())
}

// reduce folds the count elements of src into acc, element by element.
func reduce(acc, src []uint64, count int, dt DType, op Op) {
	if count == 0 {
		return
	}
	switch dt {
	case Uint64:
		fold(acc[:count], src[:count], op)
	case Float64:
		fold(view[float64](acc, count), view[float64](src, count), op)
	case Float32:
		fold(view[float32](acc, count), view[float32](src, count), op)
	}
}

// view reads the first n elements of T in words.
func view[T float32 | float64](words []uint64, n int) []T {
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(words))), n)
}

// fold applies op to acc and src, element by element, into acc. The builtin max orders
// unsigned integers as such, and for floats gives NaN when either is NaN and +0 over -0.
func fold[T uint64 | float32 | float64](acc, src []T, op Op) {
	switch op {
	case OpMax:
		for i, v := range src {
			acc[i] = max(acc[i], v)
		}
	case OpSum:
		for i, v := range src {
			acc[i] += v
		}
	}
}
