package cuda

import (
	"fmt"
	"unsafe"

	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/runtime/internal/gpurt"
)

// buffer is device memory: allocated by the device, or wrapped caller-owned memory.
type buffer struct {
	mem gpurt.Buffer // Ptr is the CUdeviceptr
	dev *Device
}

// asBuffer returns the shared part of a buffer of this package, nil for anything else.
func asBuffer(b runtime.Buffer) *gpurt.Buffer {
	if cb, ok := b.(*buffer); ok && cb != nil {
		return &cb.mem
	}
	return nil
}

// Size is the buffer's length in bytes.
func (b *buffer) Size() int { return b.mem.Len }

// DevicePtr is the buffer's device address (a CUdeviceptr).
func (b *buffer) DevicePtr() uintptr { return b.mem.Ptr }

// Free releases the memory, unless the buffer wraps memory the caller owns. A second
// Free does nothing.
func (b *buffer) Free() error {
	b.mem.Freed.Store(true)
	return b.dev.disown(b)
}

func (b *buffer) release() error {
	b.mem.Freed.Store(true)
	if r := Result(gpurt.CallN(b.dev.drv.cuMemFree, b.mem.Ptr)); r != Success {
		return failed(fmt.Sprintf("cuMemFree_v2(%#x)", b.mem.Ptr), r)
	}
	return nil
}

// newBuffer makes the Go value of size bytes at ptr.
func (d *Device) newBuffer(ptr uintptr, size int, owned bool) *buffer {
	return &buffer{mem: gpurt.Buffer{Dev: &d.core, Ptr: ptr, Len: size, Owned: owned}, dev: d}
}

// Alloc returns size bytes of uninitialised device memory. Alloc(0) returns an empty
// buffer whose DevicePtr is 0.
func (d *Device) Alloc(size int) (runtime.Buffer, error) {
	if err := d.core.CheckSize("Alloc", size); err != nil {
		return nil, err
	}
	b := d.newBuffer(0, size, true)
	if size == 0 {
		return b, nil
	}
	err := d.own(func() (resource, error) {
		if r := Result(gpurt.CallN(d.drv.cuMemAlloc, uintptr(unsafe.Pointer(&b.mem.Ptr)), uintptr(size))); r != Success {
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
		return d.newBuffer(ptr, 0, false), nil
	}
	last := ptr + uintptr(bytes-1)
	if ptr == 0 || last < ptr {
		return nil, fmt.Errorf("%w: cuda.WrapDevicePointer(%#x, %d): not an address range", runtime.ErrInvalidArgument, ptr, bytes)
	}
	err := d.core.WithDevice(func() error {
		for _, p := range [2]uintptr{ptr, last} {
			var base, size uintptr
			if r := Result(gpurt.CallN(d.drv.cuMemGetAddressRange, uintptr(unsafe.Pointer(&base)), uintptr(unsafe.Pointer(&size)), p)); r != Success {
				return fmt.Errorf("%w: cuda.WrapDevicePointer(%#x, %d): %#x is not device memory the driver knows: %w",
					runtime.ErrInvalidArgument, ptr, bytes, p, failed(fmt.Sprintf("cuMemGetAddressRange_v2(%#x)", p), r))
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return d.newBuffer(ptr, bytes, false), nil
}

// hostBuffer is pinned host memory (cuMemHostAlloc), portable across contexts.
type hostBuffer struct {
	mem gpurt.HostMemory
	dev *Device
}

// Bytes is the memory as a Go slice; nil after Free.
func (h *hostBuffer) Bytes() []byte { return h.mem.Bytes() }

// Free releases the memory. A second Free does nothing.
func (h *hostBuffer) Free() error {
	h.mem.Freed.Store(true)
	return h.dev.disown(h)
}

func (h *hostBuffer) release() error {
	h.mem.Freed.Store(true)
	if r := Result(gpurt.CallN(h.dev.drv.cuMemFreeHost, uintptr(h.mem.P))); r != Success {
		return failed("cuMemFreeHost", r)
	}
	return nil
}

// AllocHost returns size bytes of pinned host memory, which streams copy to and from
// asynchronously.
func (d *Device) AllocHost(size int) (runtime.HostBuffer, error) {
	if err := d.core.CheckSize("AllocHost", size); err != nil {
		return nil, err
	}
	h := &hostBuffer{mem: gpurt.HostMemory{Len: size}, dev: d}
	if size == 0 {
		return h, nil
	}
	err := d.own(func() (resource, error) { return h, d.hostAllocLocked(&h.mem.P, size) })
	if err != nil {
		return nil, err
	}
	return h, nil
}

// hostAllocLocked is hostAlloc on a thread where the context is already current.
func (d *Device) hostAllocLocked(p *unsafe.Pointer, size int) error {
	if r := Result(gpurt.CallN(d.drv.cuMemHostAlloc, uintptr(unsafe.Pointer(p)), uintptr(size), memHostAllocPortable)); r != Success {
		return failed(fmt.Sprintf("cuMemHostAlloc(%d, CU_MEMHOSTALLOC_PORTABLE)", size), r)
	}
	return nil
}
