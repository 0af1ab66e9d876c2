package cuda

import (
	"fmt"
	"unsafe"

	"github.com/gumbel-go/gumbel/runtime"
)

// paramBlock is the layout of the pinned memory cuLaunchKernel reads kernel arguments
// from: kernelParams, a table of pointers, each to its own 8-byte value slot. The table
// is written once, when the stream is made; a launch writes only the values. cuLaunchKernel
// copies the values before it returns, so one block per stream serves every launch.
type paramBlock struct {
	table [runtime.MaxArgs]uintptr
	slots [runtime.MaxArgs]uint64
}

// paramBlockBytes is the size of a paramBlock.
const paramBlockBytes = int(unsafe.Sizeof(paramBlock{}))

// initTable points every table entry of the block at base at its value slot.
func (p *paramBlock) initTable(base uintptr) {
	for i := range p.table {
		p.table[i] = base + unsafe.Offsetof(p.slots) + uintptr(i)*8
	}
}

// pack copies the argument words into the value slots. A word holds a scalar in its low
// bytes and the driver reads only the parameter's own size from its slot, so on these
// little-endian targets one 8-byte copy serves every kind.
func (p *paramBlock) pack(args *runtime.Args) {
	for i := 0; i < args.Len(); i++ {
		p.slots[i] = *args.Word(i)
	}
}

// checkArgs validates a launch's arguments: the list built without error, every buffer
// live device memory of dev, and, where the driver can describe the kernel's parameters
// (sizes), as many arguments as parameters with matching sizes.
func checkArgs(dev *Device, kernel string, args *runtime.Args, sizes []int) error {
	if args == nil {
		return fmt.Errorf("%w: cuda: launch %s: nil arguments", runtime.ErrInvalidArgument, kernel)
	}
	if err := args.Err(); err != nil {
		return fmt.Errorf("cuda: launch %s: %w", kernel, err)
	}
	n := args.Len()
	if sizes != nil && n != len(sizes) {
		return fmt.Errorf("%w: cuda: launch %s: %d arguments for %d parameters", runtime.ErrInvalidArgument, kernel, n, len(sizes))
	}
	for i := 0; i < n; i++ {
		k := args.Kind(i)
		if sizes != nil && k.Size() != sizes[i] {
			return fmt.Errorf("%w: cuda: launch %s: argument %d is %d bytes, the parameter %d", runtime.ErrInvalidArgument, kernel, i, k.Size(), sizes[i])
		}
		if k != runtime.ArgBuffer {
			continue
		}
		b, _ := args.BufferArg(i)
		if _, err := dev.ownBuffer("launch", b); err != nil {
			return fmt.Errorf("kernel %s, argument %d: %w", kernel, i, err)
		}
	}
	return nil
}

// launchShape checks a grid or block shape against the device's limits (zero reads as 1,
// as in runtime.Dim3.Count) and returns it as the driver's unsigned dimensions.
func launchShape(what string, d runtime.Dim3, limit [3]int) ([3]uintptr, error) {
	dims := [3]int{d.X, d.Y, d.Z}
	var out [3]uintptr
	for i, v := range dims {
		if v == 0 {
			v = 1
		}
		if v < 0 || v > limit[i] {
			return out, fmt.Errorf("%w: cuda: %s %v: dimension %d is %d, outside [1, %d]", runtime.ErrInvalidArgument, what, d, i, dims[i], limit[i])
		}
		out[i] = uintptr(v)
	}
	return out, nil
}
