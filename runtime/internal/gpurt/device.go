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

// Props is what a driver tells about a device without making it current.
type Props struct {
	// Handle is the driver's device handle (CUdevice, hipDevice_t).
	Handle          int32
	Name            string
	Multiprocessors int
	MaxThreads      int
	WarpSize        int
	MaxBlock        [3]int
	MaxGrid         [3]int
	TotalMemory     uint64
}

// Info is the runtime's description of a device with these properties.
func (p *Props) Info(backend runtime.Backend, arch string, libraries []string) runtime.DeviceInfo {
	return runtime.DeviceInfo{
		Backend:            backend,
		Name:               p.Name,
		Arch:               arch,
		Multiprocessors:    p.Multiprocessors,
		MaxThreadsPerBlock: p.MaxThreads,
		WarpSize:           p.WarpSize,
		TotalMemory:        p.TotalMemory,
		Libraries:          libraries,
	}
}

// Attribute is one more integer device attribute to read: the driver's number for it,
// and where it goes.
type Attribute struct {
	ID  int
	Dst *int
}

// DeviceCount returns the number of devices the driver reports.
func (be *Backend) DeviceCount(api *API) (int, error) {
	var n int32
	if r := int32(CallN(api.DeviceCount.Fn, uintptr(unsafe.Pointer(&n)))); r != 0 {
		return 0, be.Failed(api.DeviceCount.Name, r)
	}
	return int(n), nil
}

// CheckOrdinal refuses, wrapping runtime.ErrUnavailable, a device number the driver does
// not have.
func (be *Backend) CheckOrdinal(api *API, ordinal int) error {
	count, err := be.DeviceCount(api)
	if err != nil {
		return err
	}
	if ordinal < 0 || ordinal >= count {
		return fmt.Errorf("%w: no %s device %d (%d present)", runtime.ErrUnavailable, be.Brand, ordinal, count)
	}
	return nil
}

// ReadProps asks the driver about device ordinal: its handle, name, the attributes of
// Props, then extra ones, and its memory when the driver can tell. It needs no current
// device.
func (be *Backend) ReadProps(api *API, ordinal int, extra ...Attribute) (Props, error) {
	var p Props
	if r := int32(CallN(api.DeviceGet.Fn, uintptr(unsafe.Pointer(&p.Handle)), uintptr(ordinal))); r != 0 {
		return p, be.Failed(fmt.Sprintf("%s(%d)", api.DeviceGet.Name, ordinal), r)
	}
	var name [256]byte
	if r := int32(CallN(api.DeviceName.Fn, uintptr(unsafe.Pointer(&name[0])), uintptr(len(name)), uintptr(p.Handle))); r != 0 {
		return p, be.Failed(api.DeviceName.Name, r)
	}
	p.Name = string(TrimNUL(name[:]))
	ids := api.Attrs
	attrs := append([]Attribute{
		{ID: ids.Multiprocessors, Dst: &p.Multiprocessors},
		{ID: ids.MaxThreads, Dst: &p.MaxThreads},
		{ID: ids.WarpSize, Dst: &p.WarpSize},
		{ID: ids.MaxBlockX, Dst: &p.MaxBlock[0]},
		{ID: ids.MaxBlockX + 1, Dst: &p.MaxBlock[1]},
		{ID: ids.MaxBlockX + 2, Dst: &p.MaxBlock[2]},
		{ID: ids.MaxGridX, Dst: &p.MaxGrid[0]},
		{ID: ids.MaxGridX + 1, Dst: &p.MaxGrid[1]},
		{ID: ids.MaxGridX + 2, Dst: &p.MaxGrid[2]},
	}, extra...)
	for _, a := range attrs {
		var v int32
		if r := int32(CallN(api.DeviceAttribute.Fn, uintptr(unsafe.Pointer(&v)), uintptr(a.ID), uintptr(p.Handle))); r != 0 {
			return p, be.Failed(fmt.Sprintf("%s(%d, device %d)", api.DeviceAttribute.Name, a.ID, ordinal), r)
		}
		*a.Dst = int(v)
	}
	if api.DeviceTotalMem.Fn != 0 {
		var total uintptr
		if r := int32(CallN(api.DeviceTotalMem.Fn, uintptr(unsafe.Pointer(&total)), uintptr(p.Handle))); r != 0 {
			return p, be.Failed(api.DeviceTotalMem.Name, r)
		}
		p.TotalMemory = uint64(total)
	}
	return p, nil
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

// Device is the part of a device that both backends share: its names, driver calls and
// limits, the objects it made, and how it is made current. The backend fills in the
// exported fields, then calls Start.
type Device struct {
	*Backend
	// API is read at every call rather than kept per object, so that a test can point
	// one device at other entry points.
	API     *API
	Ordinal int
	Props   Props
	// Info is what the device reports; Info() hands out copies.
	Info runtime.DeviceInfo
	// MaxWorkItems, when not 0, bounds blocks·threads in each dimension of a launch.
	MaxWorkItems uint64
	// Current is the word API.SetCurrent takes to make the device current (a context,
	// an ordinal), which is also what API.StreamOwner answers for the device's streams.
	Current uintptr
	// CurrentCall names the SetCurrent call in errors, e.g. "hipSetDevice(0)".
	CurrentCall string
	// Extend, when set, gives the runtime.Stream the device hands out for each stream
	// it makes or wraps: the backend's own type, with more methods (CUDA's graph
	// capture). Otherwise the *Stream itself is handed out.
	Extend func(*Stream) runtime.Stream
	Closed atomic.Bool

	defaultStream runtime.Stream
	// resMu serialises making and releasing driver objects with Close, which releases
	// every object still in resources.
	resMu     sync.Mutex
	resources map[Resource]struct{}
	pinned    pinnedSet
}

// Resource is a driver object a device made: memory, a stream, an event, a module, or a
// backend's own (a CUDA graph).
type Resource interface {
	// Release frees the driver object and marks the Go value closed. The device is
	// current; the device calls it at most once.
	Release() error
}

// Start makes the device's default stream: a non-blocking stream, so it does not
// serialise with the legacy NULL stream.
func (d *Device) Start() error {
	s, err := d.newStream()
	if err != nil {
		return err
	}
	s.isDefault = true
	d.defaultStream = d.extend(s)
	return nil
}

// DefaultStream returns the stream Start made. Its Close does nothing; the device
// closes it.
func (d *Device) DefaultStream() runtime.Stream { return d.defaultStream }

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
	return d.onThread(f)
}

// onThread is WithDevice without the closed check, for releasing what the device made.
// The device is current per OS thread while a goroutine may run on any thread between
// two calls, hence the lock.
func (d *Device) onThread(f func() error) error {
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	if r := int32(CallN(d.API.SetCurrent.Fn, d.Current)); r != 0 {
		return d.Failed(d.CurrentCall, r)
	}
	return f()
}

// checkSize refuses a negative allocation size; for size 0, which needs no C call, it
// still refuses a closed device.
func (d *Device) checkSize(op string, size int) error {
	switch {
	case size < 0:
		return fmt.Errorf("%w: %s: %s(%d): negative size", runtime.ErrInvalidArgument, d.Pkg, op, size)
	case size == 0 && d.Closed.Load():
		return d.ClosedError()
	}
	return nil
}

// Own runs create with the device current and records the object it makes, so that
// Close releases it if its owner does not.
func (d *Device) Own(create func() (Resource, error)) error {
	d.resMu.Lock()
	defer d.resMu.Unlock()
	var r Resource
	err := d.WithDevice(func() (err error) {
		r, err = create()
		return err
	})
	if err != nil {
		return err
	}
	if d.resources == nil {
		d.resources = map[Resource]struct{}{}
	}
	d.resources[r] = struct{}{}
	return nil
}

// Disown releases an object its owner closes. It does nothing for an object released
// before (by an earlier call or by Close) or never recorded (wrapped memory).
func (d *Device) Disown(r Resource) error {
	d.resMu.Lock()
	defer d.resMu.Unlock()
	if _, ok := d.resources[r]; !ok {
		return nil
	}
	delete(d.resources, r)
	return d.WithDevice(r.Release)
}

// Close releases every object of the device still open (memory, streams, events,
// modules) and then, through release when it is not nil, what the backend holds of the
// device (CUDA's primary context). Later Free and Close calls on the objects do nothing,
// and other calls fail with runtime.ErrClosed. A second Close does nothing.
func (d *Device) Close(release func() error) error {
	d.resMu.Lock()
	defer d.resMu.Unlock()
	if d.Closed.Load() {
		return nil
	}
	var errs []error
	err := d.onThread(func() error {
		for r := range d.resources {
			errs = append(errs, r.Release())
		}
		return nil
	})
	errs = append(errs, err)
	clear(d.resources)
	d.Closed.Store(true)
	if release != nil {
		errs = append(errs, release())
	}
	return errors.Join(errs...)
}

// refuse is the error for v, a buffer or an event (what) handed to op, unless it is a
// live one of this device: owner is the device that made it, nil when it is not one of
// this package's, and gone says it was freed or closed. Nothing is formatted, or
// allocated, unless v is refused.
func (d *Device) refuse(op, what string, v any, owner *Device, gone bool) error {
	switch {
	case owner == nil || owner.Backend != d.Backend:
		return fmt.Errorf("%w: %s: %s: %s is not a %s %s", runtime.ErrInvalidArgument, d.Pkg, op, d.foreign(v, owner, what), d.Brand, what)
	case owner != d:
		return fmt.Errorf("%w: %s: %s: the %s belongs to %s device %d, not %d", runtime.ErrInvalidArgument, d.Pkg, op, what, d.Brand, owner.Ordinal, d.Ordinal)
	case gone:
		return fmt.Errorf("%s: %s: the %s was freed or closed: %w", d.Pkg, op, what, runtime.ErrClosed)
	}
	return nil
}

// foreign describes v, a value of another backend or none, for a message: "a HIP
// buffer", or its Go type.
func (d *Device) foreign(v any, owner *Device, noun string) string {
	if owner != nil && owner.Backend != d.Backend {
		return "a " + owner.Brand + " " + noun
	}
	return fmt.Sprintf("%T", v)
}

// AsDevice returns dev as the backend's device type D, or an error naming the backend's
// function op that wraps runtime.ErrInvalidArgument.
func AsDevice[D interface {
	comparable
	runtime.Device
}](be *Backend, op string, dev runtime.Device) (D, error) {
	d, ok := dev.(D)
	var none D
	if !ok || d == none {
		return none, fmt.Errorf("%w: %s.%s: %T is not a %s device", runtime.ErrInvalidArgument, be.Pkg, op, dev, be.Brand)
	}
	return d, nil
}
