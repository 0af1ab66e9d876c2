package collective

import (
	"fmt"
	"strconv"

	"github.com/gumbel-go/gumbel/runtime"
)

// Op is an element-wise reduction over the ranks. The zero value is no operation and is
// refused, so a forgotten field cannot pass for one.
type Op uint8

// The reductions.
const (
	// OpMax keeps the largest element: unsigned order for Uint64, and for floats the
	// larger value, NaN when any rank holds NaN, +0 over -0.
	OpMax Op = iota + 1
	// OpSum adds the elements: modulo 2^64 for Uint64; for floats in rank order (rank 0
	// first) where the implementation chooses the order, so the sum does not depend on
	// timing.
	OpSum
)

// String returns "max", "sum", or "Op(n)" for a value that is none.
func (o Op) String() string {
	switch o {
	case OpMax:
		return "max"
	case OpSum:
		return "sum"
	}
	return "Op(" + strconv.Itoa(int(o)) + ")"
}

// valid reports whether o is one of the reductions.
func (o Op) valid() bool { return o == OpMax || o == OpSum }

// DType is the element type of a reduction. The zero value is no type and is refused.
type DType uint8

// The element types.
const (
	// Uint64 is what vocabulary-parallel sampling reduces: one packed (score, index)
	// key per row.
	Uint64 DType = iota + 1
	Float32
	Float64
)

// Size returns the size of one element in bytes, 0 for a value that is no type.
func (t DType) Size() int {
	switch t {
	case Uint64, Float64:
		return 8
	case Float32:
		return 4
	}
	return 0
}

// String returns "uint64", "float32", "float64", or "DType(n)" for a value that is none.
func (t DType) String() string {
	switch t {
	case Uint64:
		return "uint64"
	case Float32:
		return "float32"
	case Float64:
		return "float64"
	}
	return "DType(" + strconv.Itoa(int(t)) + ")"
}

// Comm is one rank's handle on a group of ranks that reduce together. A rank's calls are
// made one at a time (from one goroutine, or one after the other); the ranks of a group
// call from different goroutines, threads or processes.
type Comm interface {
	// Rank is this handle's rank, from 0 to Size()-1.
	Rank() int
	// Size is the number of ranks in the group.
	Size() int
	// AllReduce replaces count elements of dt at byte offset off of buf, on every rank,
	// by their element-wise reduction op over the ranks, ordered on stream after the
	// work already queued there. Every rank of the group must make the call, with the
	// same count, dt and op (off, buf and stream are each rank's own). An
	// implementation may return before the result is in buf; work queued on stream
	// after the call sees it.
	AllReduce(buf runtime.Buffer, off, count int, dt DType, op Op, stream runtime.Stream) error
	// Close releases the rank's handle. A second Close is harmless and returns nil, as
	// for every handle of the project.
	Close() error
}

// HostReducer is implemented by communicators whose ranks share the host's memory (the
// group of NewLocal). AllReduceHost is AllReduce over count elements of dt that are in
// host memory already (data, every rank its own): no copy to or from a device and no
// stream to wait for. It takes its place in the rank's sequence of rounds as an
// AllReduce call would, and a round may mix the two.
type HostReducer interface {
	AllReduceHost(data []byte, count int, dt DType, op Op) error
}

// Sentinel errors, for errors.Is; the errors of the implementations wrap them and name
// the call that failed. ErrClosed and ErrArgument also match the runtime's sentinels
// (runtime.ErrClosed, runtime.ErrInvalidArgument), so a caller that tests those sees
// the same failures the same way whatever the package.
var (
	// ErrClosed: the rank, or its group, was closed.
	ErrClosed error = &sentinel{"collective: closed", runtime.ErrClosed}
	// ErrMismatch: the ranks of one round asked for different reductions (count,
	// element type or operation).
	ErrMismatch error = &sentinel{"collective: mismatched calls", nil}
	// ErrArgument: an argument is out of range (a nil buffer or stream, a range beyond
	// the buffer, an unknown element type or operation, a bad rank count).
	ErrArgument error = &sentinel{"collective: invalid argument", runtime.ErrInvalidArgument}
)

// sentinel is an error of its own that also matches a runtime sentinel, without
// repeating that one's words.
type sentinel struct {
	msg  string
	also error
}

func (s *sentinel) Error() string { return s.msg }
func (s *sentinel) Unwrap() error { return s.also }

// check validates the arguments of an AllReduce of buf: a buffer and a stream, count
// elements of dt from byte offset off inside buf, and a known dt and op. The error
// wraps ErrArgument and says what is wrong. It allocates nothing when the arguments are
// valid.
func check(buf runtime.Buffer, off, count int, dt DType, op Op, stream runtime.Stream) error {
	switch {
	case buf == nil:
		return fmt.Errorf("%w: nil buffer", ErrArgument)
	case stream == nil:
		return fmt.Errorf("%w: nil stream", ErrArgument)
	case dt.Size() == 0:
		return fmt.Errorf("%w: unknown element type %v", ErrArgument, dt)
	case !op.valid():
		return fmt.Errorf("%w: unknown operation %v", ErrArgument, op)
	case off < 0 || count < 0:
		return fmt.Errorf("%w: negative offset or count", ErrArgument)
	case off > buf.Size() || count > (buf.Size()-off)/dt.Size():
		return fmt.Errorf("%w: %d elements of %v at byte %d pass the end of a %d-byte buffer", ErrArgument, count, dt, off, buf.Size())
	}
	return nil
}
