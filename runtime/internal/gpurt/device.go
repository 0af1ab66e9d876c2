package gpurt

import (
	"errors"
	"fmt"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/gumbel-go/gumbel/runtime"
)

// Binding is how a device is made current on the calling OS thread: one C call with one
// word, cuCtxSetCurrent(context) or hipSetDevice(ordinal). Call names it in errors.
type Binding struct {
	Fn, Arg uintptr
	Call    string
}

// Device is the part of a backend's device that the shared code reads: its names, its
// launch limits, whether it is closed, and how to make it current.
type Device struct {
	*Backend
	Ordinal int
	// Info is what the device reports; Info() hands out copies.
	Info runtime.DeviceInfo
	// MaxBlock and MaxGrid are the device's limits per dimension.
	MaxBlock, MaxGrid [3]int
	// MaxWorkItems, when not 0, bounds blocks·threads in each dimension of a launch.
	MaxWorkItems uint64
	Closed       atomic.Bool
	// Bind is read at every call rather than once, so that the entry point the backend
	// holds is the one called.
	Bind func() Binding
	// AsBuffer and AsEvent return the shared part of the backend's own buffers and
	// events, and nil for anything else (another backend's, a nil one).
	AsBuffer func(runtime.Buffer) *Buffer
	AsEvent  func(runtime.Event) *Event
}

// InfoCopy returns the device's description with its own copy of the library list.
func (d *Device) InfoCopy() runtime.DeviceInfo {
	info := d.Info
	info.Libraries = append([]string(nil), d.Info.Libraries...)
	return info
}

// ClosedError is the error of a call on the closed device.
func (d *Device) ClosedError() error {
	return fmt.Errorf("%s device %d: %w", d.Pkg, d.Ordinal, runtime.ErrClosed)
}

// WithDevice runs f with the goroutine locked to its OS thread and the device current
// on that thread, for set-up calls; it refuses a closed device.
func (d *Device) WithDevice(f func() error) error {
	if d.Closed.Load() {
		return d.ClosedError()
	}
	return d.OnThread(f)
}

// OnThread is WithDevice without the closed check, for releasing what the device made.
// The device is current per OS thread while a goroutine may run on any thread between
// two calls, hence the lock.
func (d *Device) OnThread(f func() error) error {
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	b := d.Bind()
	if r := int32(CallN(b.Fn, b.Arg)); r != 0 {
		return d.Failed(b.Call, r)
	}
	return f()
}

// CheckSize refuses a negative allocation size; for size 0, which needs no C call, it
// still refuses a closed device.
func (d *Device) CheckSize(op string, size int) error {
	switch {
	case size < 0:
		return fmt.Errorf("%w: %s: %s(%d): negative size", runtime.ErrInvalidArgument, d.Pkg, op, size)
	case size == 0 && d.Closed.Load():
		return d.ClosedError()
	}
	return nil
}

// Buffer is device memory: allocated by the device, or wrapped caller-owned memory.
type Buffer struct {
	Dev   *Device
	Ptr   uintptr
	Len   int
	Owned bool
	Freed atomic.Bool
}

// CheckBuffer checks that b, which the caller passed as a runtime.Buffer, is live memory
// of this device; mem is its shared part when it is memory of this backend, else nil.
func (d *Device) CheckBuffer(op string, b runtime.Buffer, mem *Buffer) error {
	switch {
	case mem == nil:
		return fmt.Errorf("%w: %s: %s: %T is not %s device memory", runtime.ErrInvalidArgument, d.Pkg, op, b, d.Brand)
	case mem.Dev != d:
		return fmt.Errorf("%w: %s: %s: buffer belongs to %s device %d, not %d", runtime.ErrInvalidArgument, d.Pkg, op, d.Brand, mem.Dev.Ordinal, d.Ordinal)
	case mem.Freed.Load():
		return fmt.Errorf("%s: %s: buffer was freed: %w", d.Pkg, op, runtime.ErrClosed)
	}
	return nil
}

// HostMemory is pinned host memory the driver allocated.
type HostMemory struct {
	P     unsafe.Pointer
	Len   int
	Freed atomic.Bool
}

// Bytes is the memory as a Go slice; nil after Free.
func (h *HostMemory) Bytes() []byte {
	if h.Freed.Load() || h.P == nil {
		return nil
	}
	return unsafe.Slice((*byte)(h.P), h.Len)
}

// Module is the shared part of a loaded module: its kernels, found once each.
type Module struct {
	Dev    *Device
	Name   string
	Handle uintptr
	Closed atomic.Bool
	// mu orders kernel lookups with Release.
	mu      sync.Mutex
	kernels map[string]runtime.Kernel
}

// Lookup returns the kernel of that name, from the module's own table or from find,
// which runs with the device current and makes the backend's kernel.
func (m *Module) Lookup(name string, find func() (runtime.Kernel, error)) (runtime.Kernel, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.Closed.Load() {
		return nil, fmt.Errorf("%s module %s: %w", m.Dev.Pkg, m.Name, runtime.ErrClosed)
	}
	if k, ok := m.kernels[name]; ok {
		return k, nil
	}
	var k runtime.Kernel
	err := m.Dev.WithDevice(func() (err error) {
		k, err = find()
		return err
	})
	if err != nil {
		return nil, err
	}
	if m.kernels == nil {
		m.kernels = map[string]runtime.Kernel{}
	}
	m.kernels[name] = k
	return k, nil
}

// NoKernel wraps the failed lookup of a kernel the module does not have.
func (m *Module) NoKernel(name string, err error) error {
	return fmt.Errorf("%w: %q in module %s: %w", runtime.ErrNoKernel, name, m.Name, err)
}

// Release marks the module closed and runs unload, once; later lookups fail with
// runtime.ErrClosed.
func (m *Module) Release(unload func() error) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.Closed.Swap(true) {
		return nil
	}
	return unload()
}

// Kernel is the shared part of one kernel of a module: what a launch checks and passes.
type Kernel struct {
	Module     *Module
	Name       string
	Fn         uintptr
	MaxThreads int
	// ParamSizes are the byte sizes of the kernel's parameters, for checking launch
	// arguments; nil when the driver cannot say.
	ParamSizes []int
}

// ProbeDevices adds the description of every device the driver counts to res, and an
// error wrapping runtime.ErrUnavailable when there is none and nothing else went wrong.
func ProbeDevices(res *runtime.ProbeResult, count func() (int, error), describe func(ordinal int) (runtime.DeviceInfo, error), none string) {
	n, err := count()
	if err != nil {
		res.Err = errors.Join(res.Err, err)
		return
	}
	for i := 0; i < n; i++ {
		info, err := describe(i)
		if err != nil {
			res.Err = errors.Join(res.Err, err)
			continue
		}
		res.Devices = append(res.Devices, info)
	}
	if len(res.Devices) == 0 && res.Err == nil {
		res.Err = fmt.Errorf("%w: %s", runtime.ErrUnavailable, none)
	}
}

// Attribute is one integer device attribute to read: the driver's number for it, and
// where it goes.
type Attribute struct {
	ID  int
	Dst *int
}

// ReadAttributes reads each attribute of a device through get, which takes
// cuDeviceGetAttribute's words (result, attribute, device), hipDeviceGetAttribute's too.
// It needs no context.
func (b *Backend) ReadAttributes(get Entry, device uintptr, ordinal int, attrs []Attribute) error {
	for _, a := range attrs {
		var v int32
		if r := int32(CallN(get.Fn, uintptr(unsafe.Pointer(&v)), uintptr(a.ID), device)); r != 0 {
			return b.Failed(fmt.Sprintf("%s(%d, device %d)", get.Name, a.ID, ordinal), r)
		}
		*a.Dst = int(v)
	}
	return nil
}
