package hip

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/runtime/internal/gpurt"
)

// buffer is device memory: allocated by the device, or wrapped caller-owned memory.
type buffer struct {
	mem gpurt.Buffer // Ptr is the hipDeviceptr_t
	dev *Device
}

// asBuffer returns the shared part of a buffer of this package, nil for anything else.
func asBuffer(b runtime.Buffer) *gpurt.Buffer {
	if hb, ok := b.(*buffer); ok && hb != nil {
		return &hb.mem
	}
	return nil
}

// Size is the buffer's length in bytes.
func (b *buffer) Size() int { return b.mem.Len }

// DevicePtr is the buffer's device address.
func (b *buffer) DevicePtr() uintptr { return b.mem.Ptr }

// Free releases the memory, unless the buffer wraps memory the caller owns. A second
// Free does nothing. Unlike CUDA's, the device keeps no list of what it allocated: HIP
// memory outlives the device's Close, so Free releases it directly, then or later.
func (b *buffer) Free() error {
	if b.mem.Freed.Swap(true) || !b.mem.Owned || b.mem.Ptr == 0 {
		return nil
	}
	return b.dev.core.OnThread(func() error {
		if r := Result(gpurt.CallN(b.dev.drv.hipFree, b.mem.Ptr)); r != Success {
			return failed(fmt.Sprintf("hipFree(%#x)", b.mem.Ptr), r)
		}
		return nil
	})
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
	err := d.core.WithDevice(func() error {
		if r := Result(gpurt.CallN(d.drv.hipMalloc, uintptr(unsafe.Pointer(&b.mem.Ptr)), uintptr(size))); r != Success {
			return failed(fmt.Sprintf("hipMalloc(%d)", size), r)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return b, nil
}

// WrapDevicePointer makes a runtime.Buffer of bytes bytes of device memory at ptr that
// the caller owns (an engine's logits, say); Free does not release it. dev must be a
// device of this package, and [ptr, ptr+bytes) must lie inside one allocation the HIP
// runtime knows (hipMalloc, hipMallocAsync, managed memory).
func WrapDevicePointer(dev runtime.Device, ptr uintptr, bytes int) (runtime.Buffer, error) {
	d, ok := dev.(*Device)
	if !ok || d == nil {
		return nil, fmt.Errorf("%w: hip.WrapDevicePointer: %T is not a HIP device", runtime.ErrInvalidArgument, dev)
	}
	if bytes < 0 {
		return nil, fmt.Errorf("%w: hip.WrapDevicePointer(%#x, %d): negative size", runtime.ErrInvalidArgument, ptr, bytes)
	}
	if bytes == 0 {
		return d.newBuffer(ptr, 0, false), nil
	}
	if ptr == 0 {
		return nil, fmt.Errorf("%w: hip.WrapDevicePointer: null pointer for %d bytes", runtime.ErrInvalidArgument, bytes)
	}
	err := d.core.WithDevice(func() error {
		var base, size uintptr
		if r := Result(gpurt.CallN(d.drv.hipMemGetAddressRange, uintptr(unsafe.Pointer(&base)), uintptr(unsafe.Pointer(&size)), ptr)); r != Success {
			return fmt.Errorf("%w: hip.WrapDevicePointer: %#x is not device memory the HIP runtime knows: %w",
				runtime.ErrInvalidArgument, ptr, failed(fmt.Sprintf("hipMemGetAddressRange(%#x)", ptr), r))
		}
		if !gpurt.Fits(uint64(ptr-base), uint64(bytes), uint64(size)) {
			return fmt.Errorf("%w: hip.WrapDevicePointer: %d bytes at %#x overrun the allocation [%#x, %#x)",
				runtime.ErrInvalidArgument, bytes, ptr, base, base+size)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return d.newBuffer(ptr, bytes, false), nil
}

// hostBuffer is pinned host memory (hipHostMalloc).
type hostBuffer struct {
	mem gpurt.HostMemory
	dev *Device
}

// Bytes is the memory as a Go slice; nil after Free.
func (h *hostBuffer) Bytes() []byte { return h.mem.Bytes() }

// Free releases the memory. A second Free does nothing.
func (h *hostBuffer) Free() error {
	if h.mem.Freed.Swap(true) || h.mem.P == nil {
		return nil
	}
	h.dev.pinned.remove(uintptr(h.mem.P))
	return h.dev.core.OnThread(func() error {
		if r := Result(gpurt.CallN(h.dev.drv.hipHostFree, uintptr(h.mem.P))); r != Success {
			return failed("hipHostFree", r)
		}
		return nil
	})
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
	err := d.core.WithDevice(func() error { return d.hostAllocLocked(&h.mem.P, size) })
	if err != nil {
		return nil, err
	}
	d.pinned.add(uintptr(h.mem.P), size)
	return h, nil
}

// hostAllocLocked allocates pinned host memory on a thread where the device is current.
func (d *Device) hostAllocLocked(p *unsafe.Pointer, size int) error {
	if r := Result(gpurt.CallN(d.drv.hipHostMalloc, uintptr(unsafe.Pointer(p)), uintptr(size), hostMallocDefault)); r != Success {
		return failed(fmt.Sprintf("hipHostMalloc(%d)", size), r)
	}
	return nil
}

// pinnedSet records the device's HostBuffers, so a copy can tell pinned host memory,
// which HIP copies asynchronously, from Go memory, which must stay put until the copy is
// done. CUDA needs no such record: its driver finishes with pageable memory before the
// copy call returns.
type pinnedSet struct {
	mu    sync.RWMutex
	spans []span
}

// span is [start, start+size).
type span struct {
	start uintptr
	size  int
}

func (s *pinnedSet) add(start uintptr, size int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.spans = append(s.spans, span{start, size})
}

func (s *pinnedSet) remove(start uintptr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, sp := range s.spans {
		if sp.start == start {
			s.spans = append(s.spans[:i], s.spans[i+1:]...)
			return
		}
	}
}

// contains reports whether [p, p+n) lies inside one recorded span.
func (s *pinnedSet) contains(p uintptr, n int) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, sp := range s.spans {
		if p >= sp.start && gpurt.Fits(uint64(p-sp.start), uint64(n), uint64(sp.size)) {
			return true
		}
	}
	return false
}
