package hip

import (
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/gumbel-go/gumbel/runtime"
)

// buffer is device memory: allocated by the device, or wrapped caller-owned memory.
type buffer struct {
	dev   *Device
	ptr   uintptr // hipDeviceptr_t
	size  int
	owned bool
	freed atomic.Bool
}

// Size is the buffer's length in bytes.
func (b *buffer) Size() int { return b.size }

// DevicePtr is the buffer's device address.
func (b *buffer) DevicePtr() uintptr { return b.ptr }

// Free releases the memory, unless the buffer wraps memory the caller owns. A second
// Free does nothing.
func (b *buffer) Free() error {
	if b.freed.Swap(true) || !b.owned || b.ptr == 0 {
		return nil
	}
	return b.dev.onThread(func() error {
		if r := Result(callN(b.dev.drv.hipFree, b.ptr)); r != Success {
			return failed(fmt.Sprintf("hipFree(%#x)", b.ptr), r)
		}
		return nil
	})
}

// Alloc returns size bytes of uninitialised device memory. Alloc(0) returns an empty
// buffer whose DevicePtr is 0.
func (d *Device) Alloc(size int) (runtime.Buffer, error) {
	if size < 0 {
		return nil, fmt.Errorf("%w: hip: Alloc(%d): negative size", runtime.ErrInvalidArgument, size)
	}
	b := &buffer{dev: d, size: size, owned: true}
	if size == 0 {
		if d.closed.Load() {
			return nil, fmt.Errorf("hip device %d: %w", d.ordinal, runtime.ErrClosed)
		}
		return b, nil
	}
	err := d.withDevice(func() error {
		if r := Result(callN(d.drv.hipMalloc, uintptr(unsafe.Pointer(&b.ptr)), uintptr(size))); r != Success {
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
		return &buffer{dev: d, ptr: ptr}, nil
	}
	if ptr == 0 {
		return nil, fmt.Errorf("%w: hip.WrapDevicePointer: null pointer for %d bytes", runtime.ErrInvalidArgument, bytes)
	}
	err := d.withDevice(func() error {
		var base, size uintptr
		if r := Result(callN(d.drv.hipMemGetAddressRange, uintptr(unsafe.Pointer(&base)), uintptr(unsafe.Pointer(&size)), ptr)); r != Success {
			return fmt.Errorf("%w: hip.WrapDevicePointer: %#x is not device memory the HIP runtime knows: %w",
				runtime.ErrInvalidArgument, ptr, failed(fmt.Sprintf("hipMemGetAddressRange(%#x)", ptr), r))
		}
		if !fits(uint64(ptr-base), uint64(bytes), uint64(size)) {
			return fmt.Errorf("%w: hip.WrapDevicePointer: %d bytes at %#x overrun the allocation [%#x, %#x)",
				runtime.ErrInvalidArgument, bytes, ptr, base, base+size)
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
		return fmt.Errorf("%w: hip: %s: %d bytes at offset %d out of range of a %d-byte buffer", runtime.ErrInvalidArgument, op, n, off, size)
	}
	return nil
}

// ownBuffer returns b as a live buffer of this device.
func (d *Device) ownBuffer(op string, b runtime.Buffer) (*buffer, error) {
	hb, ok := b.(*buffer)
	if !ok || hb == nil {
		return nil, fmt.Errorf("%w: hip: %s: %T is not HIP device memory", runtime.ErrInvalidArgument, op, b)
	}
	if hb.dev != d {
		return nil, fmt.Errorf("%w: hip: %s: buffer belongs to HIP device %d, not %d", runtime.ErrInvalidArgument, op, hb.dev.ordinal, d.ordinal)
	}
	if hb.freed.Load() {
		return nil, fmt.Errorf("hip: %s: buffer was freed: %w", op, runtime.ErrClosed)
	}
	return hb, nil
}

// hostBuffer is pinned host memory (hipHostMalloc).
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
	if h.freed.Swap(true) || h.p == nil {
		return nil
	}
	h.dev.pinned.remove(uintptr(h.p))
	return h.dev.onThread(func() error {
		if r := Result(callN(h.dev.drv.hipHostFree, uintptr(h.p))); r != Success {
			return failed("hipHostFree", r)
		}
		return nil
	})
}

// AllocHost returns size bytes of pinned host memory, which streams copy to and from
// asynchronously.
func (d *Device) AllocHost(size int) (runtime.HostBuffer, error) {
	if size < 0 {
		return nil, fmt.Errorf("%w: hip: AllocHost(%d): negative size", runtime.ErrInvalidArgument, size)
	}
	h := &hostBuffer{dev: d, size: size}
	if size == 0 {
		return h, nil
	}
	err := d.withDevice(func() error { return d.hostAllocLocked(&h.p, size) })
	if err != nil {
		return nil, err
	}
	d.pinned.add(uintptr(h.p), size)
	return h, nil
}

// hostAllocLocked allocates pinned host memory on a thread where the device is current.
func (d *Device) hostAllocLocked(p *unsafe.Pointer, size int) error {
	if r := Result(callN(d.drv.hipHostMalloc, uintptr(unsafe.Pointer(p)), uintptr(size), hostMallocDefault)); r != Success {
		return failed(fmt.Sprintf("hipHostMalloc(%d)", size), r)
	}
	return nil
}

// pinnedSet records the device's HostBuffers, so a copy can tell pinned host memory,
// which HIP copies asynchronously, from Go memory, which must stay put until the copy is
// done.
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
		if p >= sp.start && fits(uint64(p-sp.start), uint64(n), uint64(sp.size)) {
			return true
		}
	}
	return false
}
