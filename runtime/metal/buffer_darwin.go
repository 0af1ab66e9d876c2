//go:build darwin

package metal

import (
	"fmt"
	goruntime "runtime"
	"sync/atomic"
	"unsafe"

	"github.com/gumbel-go/gumbel/runtime"
)

// pageSize is the VM page size of Apple silicon (16 KiB; Intel Macs use 4 KiB, which
// divides it): newBufferWithBytesNoCopy needs memory aligned to and sized in pages.
const pageSize = 16384

// buffer is an MTLBuffer in shared storage.
type buffer struct {
	dev  *Device
	obj  uintptr
	mem  []byte // the contents, as the host sees them
	size int
	// owner keeps caller memory that the buffer wraps alive and in place.
	owner  []byte
	pinner goruntime.Pinner
	freed  atomic.Bool
}

func newBuffer(d *Device, obj uintptr, size int, owner []byte) *buffer {
	b := &buffer{dev: d, obj: obj, size: size, owner: owner}
	if owner != nil {
		b.mem = owner[:size:size]
	} else {
		b.mem = unsafe.Slice((*byte)(cMemory(d.c.send0(obj, mContents))), size)
	}
	return b
}

// Size is the buffer's length in bytes.
func (b *buffer) Size() int { return b.size }

// DevicePtr returns the MTLBuffer object.
func (b *buffer) DevicePtr() uintptr { return b.obj }

// HostBytes returns the shared contents.
func (b *buffer) HostBytes() []byte { return b.mem }

// Free releases the MTLBuffer (also after the device is closed: the buffer holds its own
// reference to the device); memory the buffer wraps stays the caller's.
func (b *buffer) Free() error {
	if b.freed.Swap(true) {
		return nil
	}
	d := b.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	pool := d.c.enter()
	d.c.release(b.obj)
	d.c.leave(pool)
	b.pinner.Unpin()
	b.mem, b.owner, b.obj = nil, nil, 0
	return nil
}

// WrapBytes returns a Buffer over host memory. When mem starts on a page boundary and
// its length is a whole number of pages, the GPU uses mem in place
// (newBufferWithBytesNoCopy) and aliased is true: kernels see the caller's writes and
// the caller sees the kernels'. Otherwise the bytes are copied into a new shared buffer
// and aliased is false. An aliased mem must stay unused by anything else while queued
// work reads or writes it; Free releases the wrapper, not mem.
func (d *Device) WrapBytes(mem []byte) (buf runtime.Buffer, aliased bool, err error) {
	if len(mem) == 0 {
		return nil, false, fmt.Errorf("%w: metal: WrapBytes of no bytes", runtime.ErrInvalidArgument)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.check("WrapBytes"); err != nil {
		return nil, false, err
	}
	pool := d.c.enter()
	defer d.c.leave(pool)
	p := unsafe.Pointer(unsafe.SliceData(mem))
	if uintptr(p)%pageSize == 0 && len(mem)%pageSize == 0 {
		obj := d.c.send4(d.dev, mNewBufferWithBytesNoCopy, uintptr(p), uintptr(len(mem)), resourceStorageModeShared, 0)
		if obj != 0 {
			b := newBuffer(d, obj, len(mem), mem)
			// Metal keeps the address after this call returns.
			b.pinner.Pin(p)
			return b, true, nil
		}
	}
	obj := d.c.send2(d.dev, mNewBufferWithLength, uintptr(len(mem)), resourceStorageModeShared)
	if obj == 0 {
		return nil, false, fmt.Errorf("%w: metal: newBufferWithLength:%d", runtime.ErrOutOfMemory, len(mem))
	}
	b := newBuffer(d, obj, len(mem), nil)
	copy(b.mem, mem)
	return b, false, nil
}

// hostBuffer is page-aligned Go memory.
type hostBuffer struct {
	mem []byte
}

// Bytes returns the memory.
func (h *hostBuffer) Bytes() []byte { return h.mem }

// Free drops the memory (the garbage collector reclaims it).
func (h *hostBuffer) Free() error {
	h.mem = nil
	return nil
}

// pageAligned returns n bytes starting on a page boundary, whose whole pages are also
// usable by WrapBytes without a copy.
func pageAligned(n int) []byte {
	pages := (n + pageSize - 1) / pageSize
	raw := make([]byte, (pages+1)*pageSize)
	off := int((pageSize - uintptr(unsafe.Pointer(unsafe.SliceData(raw)))%pageSize) % pageSize)
	return raw[off : off+n : off+pages*pageSize]
}

// bufferOf returns the Metal buffer behind b, checking that it belongs to d and is live.
func (d *Device) bufferOf(b runtime.Buffer, what string) (*buffer, error) {
	mb, ok := b.(*buffer)
	if !ok || mb == nil {
		return nil, fmt.Errorf("%w: metal: %s: not a Metal buffer (%T)", runtime.ErrInvalidArgument, what, b)
	}
	if mb.dev != d {
		return nil, fmt.Errorf("%w: metal: %s: a buffer of another device", runtime.ErrInvalidArgument, what)
	}
	if mb.freed.Load() {
		return nil, fmt.Errorf("metal: %s: buffer: %w", what, runtime.ErrClosed)
	}
	return mb, nil
}
