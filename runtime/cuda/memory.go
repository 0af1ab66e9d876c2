package cuda

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/gumbel-go/gumbel/runtime"
)

// buffer is device memory: allocated by the device, or wrapped caller-owned memory.
type buffer struct {
	dev   *Device
	ptr   uintptr // CUdeviceptr
	size  int
	owned bool
	freed atomic.Bool
}

// Size is the buffer's length in bytes.
func (b *buffer) Size() int { return b.size }

// DevicePtr is the buffer's device address (a CUdeviceptr).
func (b *buffer) DevicePtr() uintptr { return b.ptr }

// Free releases the memory, unless the buffer wraps memory the caller owns. A second
// Free does nothing.
func (b *buffer) Free() error {
	b.freed.Store(true)
	return b.dev.disown(b)
}

func (b *buffer) release() error {
	b.freed.Store(true)
	if r := Result(callN(b.dev.drv.cuMemFree, b.ptr)); r != Success {
		return failed(fmt.Sprintf("cuMemFree_v2(%#x)", b.ptr), r)
	}
	return nil
}

// Alloc returns size bytes of uninitialised device memory. Alloc(0) returns an empty
// buffer whose DevicePtr is 0.
func (d *Device) Alloc(size int) (runtime.Buffer, error) {
	if size < 0 {
		return nil, fmt.Errorf("%w: cuda: Alloc(%d): negative size", runtime.ErrInvalidArgument, size)
	}
	b := &buffer{dev: d, size: size, owned: true}
	if size == 0 {
		if d.closed.Load() {
			return nil, fmt.Errorf("cuda device %d: %w", d.ordinal, runtime.ErrClosed)
		}
		return b, nil
	}
	err := d.own(func() (resource, error) {
		if r := Result(callN(d.drv.cuMemAlloc, uintptr(unsafe.Pointer(&b.ptr)), uintptr(size))); r != Success {
			return nil, failed(fmt.Sprintf("cuMemAlloc_v2(%d)", size), r)
		}
		return b, nil
	})
	if err != nil {
		return nil, err
	}
	return b, nil
}

// WrapDevicePointer makes a runtime.Buffer of bytes bytes of device memory at ptr that
// the caller owns (an engine's logits, say); Free does not release it. dev must be a
// device of this package, and the first and the last byte must be device memory the
// driver knows (cuMemAlloc, cudaMalloc, memory pools, managed and VMM memory). Only the
// two ends are checked: for VMM memory the driver describes each physical segment
// separately, so one tensor may span several.
func WrapDevicePointer(dev runtime.Device, ptr uintptr, bytes int) (runtime.Buffer, error) {
	d, ok := dev.(*Device)
	if !ok || d == nil {
		return nil, fmt.Errorf("%w: cuda.WrapDevicePointer: %T is not a CUDA device", runtime.ErrInvalidArgument, dev)
	}
	if bytes < 0 {
		return nil, fmt.Errorf("%w: cuda.WrapDevicePointer(%#x, %d): negative size", runtime.ErrInvalidArgument, ptr, bytes)
	}
	if bytes == 0 {
		return &buffer{dev: d, ptr: ptr}, nil
	}
	last := ptr + uintptr(bytes-1)
	if ptr == 0 || last < ptr {
		return nil, fmt.Errorf("%w: cuda.WrapDevicePointer(%#x, %d): not an address range", runtime.ErrInvalidArgument, ptr, bytes)
	}
	err := d.withContext(func() error {
		for _, p := range [2]uintptr{ptr, last} {
			var base, size uintptr
			if r := Result(callN(d.drv.cuMemGetAddressRange, uintptr(unsafe.Pointer(&base)), uintptr(unsafe.Pointer(&size)), p)); r != Success {
				return fmt.Errorf("%w: cuda.WrapDevicePointer(%#x, %d): %#x is not device memory the driver knows: %w",
					runtime.ErrInvalidArgument, ptr, bytes, p, failed(fmt.Sprintf("cuMemGetAddressRange_v2(%#x)", p), r))
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &buffer{dev: d, ptr: ptr, size: bytes}, nil
}

// fits reports whether n bytes from offset off lie inside size bytes, without overflow.
func fits(off, n, size uint64) bool { return off <= size && n <= size-off }

// checkRange validates a byte range [off, off+n) of a buffer of size bytes.
func checkRange(op string, off, n, size int) error {
	if off < 0 || n < 0 || !fits(uint64(off), uint64(n), uint64(size)) {
		return fmt.Errorf("%w: cuda: %s: %d bytes at offset %d out of range of a %d-byte buffer", runtime.ErrInvalidArgument, op, n, off, size)
	}
	return nil
}

// ownBuffer returns b as a live buffer of this device.
func (d *Device) ownBuffer(op string, b runtime.Buffer) (*buffer, error) {
	cb, ok := b.(*buffer)
	if !ok || cb == nil {
		return nil, fmt.Errorf("%w: cuda: %s: %T is not CUDA device memory", runtime.ErrInvalidArgument, op, b)
	}
	if cb.dev != d {
		return nil, fmt.Errorf("%w: cuda: %s: buffer belongs to CUDA device %d, not %d", runtime.ErrInvalidArgument, op, cb.dev.ordinal, d.ordinal)
	}
	if cb.freed.Load() {
		return nil, fmt.Errorf("cuda: %s: buffer was freed: %w", op, runtime.ErrClosed)
	}
	return cb, nil
}

// hostBuffer is pinned host memory (cuMemHostAlloc), portable across contexts.
type hostBuffer struct {
	dev   *Device
	p     unsafe.Pointer
	size  int
	freed atomic.Bool
}

// Bytes is the memory as a Go slice; nil after Free.
func (h *hostBuffer) Bytes() []byte {
	if h.freed.Load() || h.p == nil {
		return nil
	}
	return unsafe.Slice((*byte)(h.p), h.size)
}

// Free releases the memory. A second Free does nothing.
func (h *hostBuffer) Free() error {
	h.freed.Store(true)
	return h.dev.disown(h)
}

func (h *hostBuffer) release() error {
	h.freed.Store(true)
	if r := Result(callN(h.dev.drv.cuMemFreeHost, uintptr(h.p))); r != Success {
		return failed("cuMemFreeHost", r)
	}
	return nil
}

// AllocHost returns size bytes of pinned host memory, which streams copy to and from
// asynchronously.
func (d *Device) AllocHost(size int) (runtime.HostBuffer, error) {
	if size < 0 {
		return nil, fmt.Errorf("%w: cuda: AllocHost(%d): negative size", runtime.ErrInvalidArgument, size)
	}
	h := &hostBuffer{dev: d, size: size}
	if size == 0 {
		if d.closed.Load() {
			return nil, fmt.Errorf("cuda device %d: %w", d.ordinal, runtime.ErrClosed)
		}
		return h, nil
	}
	err := d.own(func() (resource, error) { return h, d.hostAllocLocked(&h.p, size) })
	if err != nil {
		return nil, err
	}
	return h, nil
}

// hostAllocLocked is hostAlloc on a thread where the context is already current.
func (d *Device) hostAllocLocked(p *unsafe.Pointer, size int) error {
	if r := Result(callN(d.drv.cuMemHostAlloc, uintptr(unsafe.Pointer(p)), uintptr(size), memHostAllocPortable)); r != Success {
		return failed(fmt.Sprintf("cuMemHostAlloc(%d, CU_MEMHOSTALLOC_PORTABLE)", size), r)
	}
	return nil
}
