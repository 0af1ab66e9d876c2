package runtime

import (
	"fmt"
	"math"
)

// MaxArgs is the most arguments a kernel launch takes.
const MaxArgs = 16

// ArgKind says how one launch argument is passed.
type ArgKind uint8

// Argument kinds. Pointer arguments carry their buffer; scalars carry their value in the
// low bytes of an 8-byte little-endian slot.
const (
	ArgBuffer ArgKind = iota + 1
	ArgU32
	ArgU64
	ArgF32
)

// Size returns the size in bytes the kernel sees for an argument of this kind.
func (k ArgKind) Size() int {
	switch k {
	case ArgU32, ArgF32:
		return 4
	default:
		return 8
	}
}

// Args is a reusable list of kernel launch arguments. Build it once per call site, Reset
// it before each launch and append the arguments in the kernel's order; appending does
// not allocate.
type Args struct {
	n     int
	kinds [MaxArgs]ArgKind
	// Words holds each argument's value: the device address (plus offset) of a
	// buffer argument, or a scalar's bits in the low bytes.
	words   [MaxArgs]uint64
	bufs    [MaxArgs]Buffer
	offsets [MaxArgs]int
	err     error
}

// Reset empties the list.
func (a *Args) Reset() *Args {
	for i := 0; i < a.n; i++ {
		a.bufs[i] = nil
	}
	a.n, a.err = 0, nil
	return a
}

func (a *Args) push(k ArgKind, w uint64, b Buffer, off int) *Args {
	if a.n == MaxArgs {
		if a.err == nil {
			a.err = fmt.Errorf("%w: more than %d kernel arguments", ErrInvalidArgument, MaxArgs)
		}
		return a
	}
	a.kinds[a.n], a.words[a.n], a.bufs[a.n], a.offsets[a.n] = k, w, b, off
	a.n++
	return a
}

// Buffer appends a pointer to the start of b.
func (a *Args) Buffer(b Buffer) *Args { return a.BufferAt(b, 0) }

// BufferAt appends a pointer to byte offset off of b.
func (a *Args) BufferAt(b Buffer, off int) *Args {
	if b == nil || off < 0 || off > b.Size() {
		if a.err == nil {
			a.err = fmt.Errorf("%w: kernel argument %d: nil buffer or offset %d out of range", ErrInvalidArgument, a.n, off)
		}
		return a.push(ArgBuffer, 0, nil, 0)
	}
	return a.push(ArgBuffer, uint64(b.DevicePtr())+uint64(off), b, off)
}

// U32 appends a 32-bit unsigned integer.
func (a *Args) U32(v uint32) *Args { return a.push(ArgU32, uint64(v), nil, 0) }

// U64 appends a 64-bit unsigned integer.
func (a *Args) U64(v uint64) *Args { return a.push(ArgU64, v, nil, 0) }

// F32 appends a 32-bit float.
func (a *Args) F32(v float32) *Args { return a.push(ArgF32, uint64(math.Float32bits(v)), nil, 0) }

// Len returns the number of arguments.
func (a *Args) Len() int { return a.n }

// Err returns the first error met while building the list (too many arguments, a nil
// buffer); Launch reports it.
func (a *Args) Err() error { return a.err }

// Kind returns the kind of argument i.
func (a *Args) Kind(i int) ArgKind { return a.kinds[i] }

// Word returns a pointer to the 8-byte slot of argument i (what CUDA's kernelParams
// entries point to). The pointer is valid while a is.
func (a *Args) Word(i int) *uint64 { return &a.words[i] }

// BufferArg returns the buffer and byte offset of pointer argument i.
func (a *Args) BufferArg(i int) (Buffer, int) { return a.bufs[i], a.offsets[i] }

// HostBytesArg returns the host memory of pointer argument i from its offset on, for the
// Go edition; nil when the buffer has no host memory.
func (a *Args) HostBytesArg(i int) []byte {
	b := HostBytes(a.bufs[i])
	if b == nil || a.offsets[i] > len(b) {
		return nil
	}
	return b[a.offsets[i]:]
}

// U32Arg returns scalar argument i as a uint32.
func (a *Args) U32Arg(i int) uint32 { return uint32(a.words[i]) }

// U64Arg returns scalar argument i as a uint64.
func (a *Args) U64Arg(i int) uint64 { return a.words[i] }

// F32Arg returns scalar argument i as a float32.
func (a *Args) F32Arg(i int) float32 { return math.Float32frombits(uint32(a.words[i])) }
