package gpurt

import (
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/gumbel-go/gumbel/runtime"
)

// Buffer is device memory: allocated by a device, or wrapped memory its caller owns.
type Buffer struct {
	Dev   *Device
	ptr   uintptr
	size  int
	Freed atomic.Bool
}

// Size is the buffer's length in bytes.
func (b *Buffer) Size() int { return b.size }

// DevicePtr is the buffer's device address (a CUdeviceptr, a hipDeviceptr_t).
func (b *Buffer) DevicePtr() uintptr { return b.ptr }

// Free releases the memory, unless the buffer wraps memory the caller owns. A second
// Free does nothing.
func (b *Buffer) Free() error {
	b.Freed.Store(true)
	return b.Dev.Disown(b)
}

// Release frees the memory; the device is current.
func (b *Buffer) Release() error {
	b.Freed.Store(true)
	if r := int32(CallN(b.Dev.API.MemFree.Fn, b.ptr)); r != 0 {
		return b.Dev.Failed(fmt.Sprintf("%s(%#x)", b.Dev.API.MemFree.Name, b.ptr), r)
	}
	return nil
}

// Alloc returns size bytes of uninitialised device memory. Alloc(0) returns an empty
// buffer whose DevicePtr is 0.
func (d *Device) Alloc(size int) (runtime.Buffer, error) {
	if err := d.checkSize("Alloc", size); err != nil {
		return nil, err
	}
	b := &Buffer{Dev: d, size: size}
	if size == 0 {
		return b, nil
	}
	err := d.Own(func() (Resource, error) {
		if r := int32(CallN(d.API.MemAlloc.Fn, uintptr(unsafe.Pointer(&b.ptr)), uintptr(size))); r != 0 {
			return nil, d.Failed(fmt.Sprintf("%s(%d)", d.API.MemAlloc.Name, size), r)
		}
		return b, nil
	})
	if err != nil {
		return nil, err
	}
	return b, nil
}

// WrapPointer makes a Buffer of bytes bytes of device memory at ptr that the caller
// owns; Free does not release it. The first and the last byte must be device memory the
// driver knows. Only the two ends are checked: the driver describes each physical
// segment of virtual-memory-managed memory separately, so one tensor may span several.
func (d *Device) WrapPointer(ptr uintptr, bytes int) (runtime.Buffer, error) {
	op := fmt.Sprintf("%s.WrapDevicePointer(%#x, %d)", d.Pkg, ptr, bytes)
	if bytes < 0 {
		return nil, fmt.Errorf("%w: %s: negative size", runtime.ErrInvalidArgument, op)
	}
	if bytes == 0 {
		return &Buffer{Dev: d, ptr: ptr}, nil
	}
	last := ptr + uintptr(bytes-1)
	if ptr == 0 || last < ptr {
		return nil, fmt.Errorf("%w: %s: not an address range", runtime.ErrInvalidArgument, op)
	}
	err := d.WithDevice(func() error {
		for _, p := range [2]uintptr{ptr, last} {
			var base, size uintptr
			if r := int32(CallN(d.API.AddressRange.Fn, uintptr(unsafe.Pointer(&base)), uintptr(unsafe.Pointer(&size)), p)); r != 0 {
				return fmt.Errorf("%w: %s: %#x is not device memory the driver knows: %w",
					runtime.ErrInvalidArgument, op, p, d.Failed(fmt.Sprintf("%s(%#x)", d.API.AddressRange.Name, p), r))
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &Buffer{Dev: d, ptr: ptr, size: bytes}, nil
}

// ownBuffer returns b as a Buffer when it is live memory of this device.
func (d *Device) ownBuffer(op string, b runtime.Buffer) (*Buffer, error) {
	mem, _ := b.(*Buffer)
	if mem == nil {
		return nil, d.refuse(op, "buffer", b, nil, false)
	}
	if err := d.refuse(op, "buffer", b, mem.Dev, mem.Freed.Load()); err != nil {
		return nil, err
	}
	return mem, nil
}

// HostMemory is pinned host memory, which streams copy to and from asynchronously.
type HostMemory struct {
	Dev   *Device
	p     unsafe.Pointer
	size  int
	Freed atomic.Bool
}

// Bytes is the memory as a Go slice; nil after Free.
func (h *HostMemory) Bytes() []byte {
	if h.Freed.Load() || h.p == nil {
		return nil
	}
	return unsafe.Slice((*byte)(h.p), h.size)
}

// Free releases the memory. A second Free does nothing.
func (h *HostMemory) Free() error {
	h.Freed.Store(true)
	return h.Dev.Disown(h)
}

// Release frees the memory; the device is current.
func (h *HostMemory) Release() error {
	h.Freed.Store(true)
	h.Dev.pinned.remove(uintptr(h.p))
	if r := int32(CallN(h.Dev.API.HostFree.Fn, uintptr(h.p))); r != 0 {
		return h.Dev.Failed(h.Dev.API.HostFree.Name, r)
	}
	return nil
}

// AllocHost returns size bytes of pinned host memory.
func (d *Device) AllocHost(size int) (runtime.HostBuffer, error) {
	if err := d.checkSize("AllocHost", size); err != nil {
		return nil, err
	}
	h := &HostMemory{Dev: d, size: size}
	if size == 0 {
		return h, nil
	}
	err := d.Own(func() (Resource, error) { return h, d.hostAlloc(&h.p, size) })
	if err != nil {
		return nil, err
	}
	if d.SyncPageable {
		d.pinned.add(uintptr(h.p), size)
	}
	return h, nil
}

// hostAlloc allocates pinned host memory; the device is current.
func (d *Device) hostAlloc(p *unsafe.Pointer, size int) error {
	api := d.API
	if r := int32(CallN(api.HostAlloc.Fn, uintptr(unsafe.Pointer(p)), uintptr(size), api.HostAllocFlags.Value)); r != 0 {
		return d.Failed(fmt.Sprintf("%s(%d, %s)", api.HostAlloc.Name, size, api.HostAllocFlags.Name), r)
	}
	return nil
}

// pinnedSet records a device's HostBuffers, so a copy can tell pinned host memory, which
// the driver copies asynchronously, from Go memory, which must stay put until the copy
// is done (see Backend.SyncPageable).
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
		if p >= sp.start && Fits(uint64(p-sp.start), uint64(n), uint64(sp.size)) {
			return true
		}
	}
	return false
}
