package gpurt

import (
	"fmt"
	"unsafe"

	"github.com/gumbel-go/gumbel/runtime"
)

// ParamBlock is the layout of the pinned memory a launch reads kernel arguments from
// (cuLaunchKernel's and hipModuleLaunchKernel's kernelParams): a table of pointers, each
// to its own 8-byte value slot. The table is written once, when the stream is made; a
// launch writes only the values. Both drivers copy the values before the launch call
// returns, so one block per stream serves every launch.
type ParamBlock struct {
	table [runtime.MaxArgs]uintptr
	slots [runtime.MaxArgs]uint64
}

// ParamBlockBytes is the size of a ParamBlock.
const ParamBlockBytes = int(unsafe.Sizeof(ParamBlock{}))

// InitParamBlock points every table entry of the block at p (pinned memory of
// ParamBlockBytes bytes) at its value slot, and returns the block.
func InitParamBlock(p unsafe.Pointer) *ParamBlock {
	b := (*ParamBlock)(p)
	for i := range b.table {
		b.table[i] = uintptr(p) + unsafe.Offsetof(b.slots) + uintptr(i)*8
	}
	return b
}

// Pack copies the argument words into the value slots and zeroes the rest, so a kernel
// that takes more parameters than it was given reads zeros, not the previous launch's
// pointers. A word holds a scalar in its low bytes and the driver reads only the
// parameter's own size from its slot, so on these little-endian targets one 8-byte copy
// serves every kind.
func (b *ParamBlock) Pack(args *runtime.Args) {
	n := args.Len()
	for i := 0; i < n; i++ {
		b.slots[i] = *args.Word(i)
	}
	clear(b.slots[n:])
}

// Slot returns the value slot of argument i, as the driver reads it.
func (b *ParamBlock) Slot(i int) uint64 { return b.slots[i] }

// Entry returns table entry i: the address the driver reads argument i from.
func (b *ParamBlock) Entry(i int) uintptr { return b.table[i] }

// LaunchShape checks a grid or block shape against the device's limits (zero reads as
// 1, as in runtime.Dim3.Count) and returns it as the driver's unsigned dimensions.
func (be *Backend) LaunchShape(what string, d runtime.Dim3, limit [3]int) ([3]uintptr, error) {
	dims := [3]int{d.X, d.Y, d.Z}
	var out [3]uintptr
	for i, v := range dims {
		if v == 0 {
			v = 1
		}
		if v < 0 || v > limit[i] {
			return out, fmt.Errorf("%w: %s: %s %v: dimension %d is %d, outside [1, %d]", runtime.ErrInvalidArgument, be.Pkg, what, d, i, dims[i], limit[i])
		}
		out[i] = uintptr(v)
	}
	return out, nil
}

// Fits reports whether n bytes from offset off lie inside size bytes, without overflow.
func Fits(off, n, size uint64) bool { return off <= size && n <= size-off }

// CheckRange validates a byte range [off, off+n) of a buffer of size bytes.
func (be *Backend) CheckRange(op string, off, n, size int) error {
	if off < 0 || n < 0 || !Fits(uint64(off), uint64(n), uint64(size)) {
		return fmt.Errorf("%w: %s: %s: %d bytes at offset %d out of range of a %d-byte buffer", runtime.ErrInvalidArgument, be.Pkg, op, n, off, size)
	}
	return nil
}
