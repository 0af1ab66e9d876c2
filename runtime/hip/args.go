package hip

import (
	"fmt"
	"unsafe"

	"github.com/gumbel-go/gumbel/runtime"
)

// paramBlock is the layout of the pinned memory hipModuleLaunchKernel reads kernel
// arguments from: kernelParams, a table of pointers, each to its own 8-byte value slot.
// The table is written once, when the stream is made; a launch writes only the values.
// hipModuleLaunchKernel copies the values into the dispatch's kernarg segment before it
// returns, so one block per stream serves every launch.
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

// pack copies the argument words into the value slots and zeroes the rest, so a kernel
// that takes more parameters than it was given reads zeros, not the previous launch's
// pointers. A word holds a scalar in its low bytes and HIP reads only the parameter's
// own size from its slot, so on these little-endian targets one 8-byte copy serves every
// kind.
func (p *paramBlock) pack(args *runtime.Args) {
	n := args.Len()
	for i := 0; i < n; i++ {
		p.slots[i] = *args.Word(i)
	}
	clear(p.slots[n:])
}

// checkArgs validates a launch's arguments: the list built without error and every
// buffer live device memory of dev. HIP cannot describe a kernel's parameters, so their
// number and sizes are the caller's to get right (the kernel ABI fixes them).
func checkArgs(dev *Device, kernel string, args *runtime.Args) error {
	if args == nil {
		return fmt.Errorf("%w: hip: launch %s: nil arguments", runtime.ErrInvalidArgument, kernel)
	}
	if err := args.Err(); err != nil {
		return fmt.Errorf("hip: launch %s: %w", kernel, err)
	}
	for i := 0; i < args.Len(); i++ {
		if args.Kind(i) != runtime.ArgBuffer {
			continue
		}
		b, _ := args.BufferArg(i)
		// The kernel's name joins the message only on failure: building it for
		// every argument would allocate on each launch.
		if _, err := dev.ownBuffer("Launch", b); err != nil {
			return fmt.Errorf("hip: launch %s: argument %d: %w", kernel, i, err)
		}
	}
	return nil
}

// launchShape checks a grid or block shape against the device's limits (zero reads as 1,
// as in runtime.Dim3.Count) and returns it as HIP's unsigned dimensions.
func launchShape(what string, d runtime.Dim3, limit [3]int) ([3]uintptr, error) {
	dims := [3]int{d.X, d.Y, d.Z}
	var out [3]uintptr
	for i, v := range dims {
		if v == 0 {
			v = 1
		}
		if v < 0 || v > limit[i] {
			return out, fmt.Errorf("%w: hip: %s %v: dimension %d is %d, outside [1, %d]", runtime.ErrInvalidArgument, what, d, i, dims[i], limit[i])
		}
		out[i] = uintptr(v)
	}
	return out, nil
}

// maxGridThreads is the most work-items an AMD dispatch packet holds in one dimension:
// its grid size is a 32-bit count of work-items, not of blocks.
const maxGridThreads = 1<<32 - 1

// checkDispatch checks that blocks·threads fits the dispatch packet in every dimension.
func checkDispatch(kernel string, g, b [3]uintptr) error {
	for i := range g {
		if uint64(g[i])*uint64(b[i]) > maxGridThreads {
			return fmt.Errorf("%w: hip: launch %s: %d blocks of %d threads in dimension %d exceed 2^32-1 work-items", runtime.ErrInvalidArgument, kernel, g[i], b[i], i)
		}
	}
	return nil
}
