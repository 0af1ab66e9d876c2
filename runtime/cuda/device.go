package cuda

import (
	"errors"
	"fmt"
	goruntime "runtime"
	"strconv"
	"sync"
	"unsafe"

	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/runtime/internal/gpurt"
)

func init() {
	runtime.Register(runtime.CUDA, 10, func(ordinal int) (runtime.Device, error) { return Open(ordinal) }, probe)
}

// Device is one CUDA device, working in its primary context. [Open] returns it as a
// runtime.Device; assert it to *Device for the CUDA-specific getters.
type Device struct {
	drv *driver
	rtc *nvrtc

	// core is what the code shared with the HIP backend reads: the ordinal, the
	// description, the launch limits, whether the device is closed.
	core          gpurt.Device
	handle        int32   // CUdevice
	ctx           uintptr // CUcontext: the device's primary context
	props         deviceProps
	target        compileTarget
	defaultStream *stream
	statsMu       sync.Mutex
	lastLoad      LoadStats

	// resMu serialises creating and releasing driver objects with Close, which releases
	// every object still in resources.
	resMu     sync.Mutex
	resources map[resource]struct{}
}

// resource is a driver object the device made: memory, a stream, an event, a module.
type resource interface {
	// release frees the driver object and marks the Go value closed. The context must be
	// current; the device calls it at most once.
	release() error
}

// deviceProps is what the driver tells about a device without a context.
type deviceProps struct {
	handle           int32
	name             string
	ccMajor, ccMinor int
	multiprocessors  int
	maxThreads       int
	warpSize         int
	maxBlock         [3]int
	maxGrid          [3]int
	totalMemory      uint64
}

// info is the runtime's description of the device.
func (p deviceProps) info(libraries []string) runtime.DeviceInfo {
	return runtime.DeviceInfo{
		Backend:            runtime.CUDA,
		Name:               p.name,
		Arch:               "sm_" + strconv.Itoa(p.ccMajor*10+p.ccMinor),
		Multiprocessors:    p.multiprocessors,
		MaxThreadsPerBlock: p.maxThreads,
		WarpSize:           p.warpSize,
		TotalMemory:        p.totalMemory,
		Libraries:          libraries,
	}
}

// Open opens CUDA device number ordinal. It returns an error wrapping
// runtime.ErrUnavailable when there is no usable driver, NVRTC or device of that number.
func Open(ordinal int) (runtime.Device, error) {
	drv, rtc, err := libraries()
	if err != nil {
		return nil, err
	}
	d, err := open(drv, rtc, ordinal)
	if err != nil {
		return nil, err
	}
	return d, nil
}

func open(drv *driver, rtc *nvrtc, ordinal int) (*Device, error) {
	count, err := drv.deviceCount()
	if err != nil {
		return nil, err
	}
	if ordinal < 0 || ordinal >= count {
		return nil, fmt.Errorf("%w: no CUDA device %d (%d present)", runtime.ErrUnavailable, ordinal, count)
	}
	props, err := drv.deviceProps(ordinal)
	if err != nil {
		return nil, err
	}
	target, err := chooseTarget(props.ccMajor, props.ccMinor, rtc.archs, rtc.nvrtcGetCUBIN != 0)
	if err != nil {
		return nil, fmt.Errorf("%w: NVRTC %s: %w", runtime.ErrUnavailable, rtc.version(), err)
	}
	d := &Device{drv: drv, rtc: rtc, handle: props.handle, props: props, target: target,
		resources: map[resource]struct{}{}}
	d.core = gpurt.Device{Backend: backend, Ordinal: ordinal, Info: props.info([]string{drv.path, rtc.path}),
		MaxBlock: props.maxBlock, MaxGrid: props.maxGrid, Bind: d.binding, AsBuffer: asBuffer, AsEvent: asEvent}

	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	if r := Result(gpurt.CallN(drv.cuDevicePrimaryCtxRetain, uintptr(unsafe.Pointer(&d.ctx)), uintptr(props.handle))); r != Success {
		return nil, failed(fmt.Sprintf("cuDevicePrimaryCtxRetain(device %d)", ordinal), r)
	}
	if r := Result(gpurt.CallN(drv.cuCtxSetCurrent, d.ctx)); r != Success {
		gpurt.CallN(drv.cuDevicePrimaryCtxRelease, uintptr(props.handle))
		return nil, failed("cuCtxSetCurrent", r)
	}
	var h uintptr
	if r := Result(gpurt.CallN(drv.cuStreamCreate, uintptr(unsafe.Pointer(&h)), streamNonBlocking)); r != Success {
		gpurt.CallN(drv.cuDevicePrimaryCtxRelease, uintptr(props.handle))
		return nil, failed("cuStreamCreate(CU_STREAM_NON_BLOCKING)", r)
	}
	s, err := d.newStreamLocked(h, true)
	if err != nil {
		gpurt.CallN(drv.cuStreamDestroy, h)
		gpurt.CallN(drv.cuDevicePrimaryCtxRelease, uintptr(props.handle))
		return nil, err
	}
	s.core.IsDefault = true
	d.defaultStream = s
	d.resources[s] = struct{}{}
	return d, nil
}

// deviceCount returns the number of CUDA devices.
func (drv *driver) deviceCount() (int, error) {
	var n int32
	if r := Result(gpurt.CallN(drv.cuDeviceGetCount, uintptr(unsafe.Pointer(&n)))); r != Success {
		return 0, failed("cuDeviceGetCount", r)
	}
	return int(n), nil
}

// deviceProps asks the driver about device ordinal; it needs no context.
func (drv *driver) deviceProps(ordinal int) (deviceProps, error) {
	var p deviceProps
	if r := Result(gpurt.CallN(drv.cuDeviceGet, uintptr(unsafe.Pointer(&p.handle)), uintptr(ordinal))); r != Success {
		return p, failed(fmt.Sprintf("cuDeviceGet(%d)", ordinal), r)
	}
	var name [256]byte
	if r := Result(gpurt.CallN(drv.cuDeviceGetName, uintptr(unsafe.Pointer(&name[0])), uintptr(len(name)), uintptr(p.handle))); r != Success {
		return p, failed("cuDeviceGetName", r)
	}
	p.name = string(gpurt.TrimNUL(name[:]))
	attrs := []gpurt.Attribute{
		{ID: devAttrCCMajor, Dst: &p.ccMajor},
		{ID: devAttrCCMinor, Dst: &p.ccMinor},
		{ID: devAttrMultiprocessors, Dst: &p.multiprocessors},
		{ID: devAttrMaxThreadsPerBlock, Dst: &p.maxThreads},
		{ID: devAttrWarpSize, Dst: &p.warpSize},
		{ID: devAttrMaxBlockDimX, Dst: &p.maxBlock[0]},
		{ID: devAttrMaxBlockDimX + 1, Dst: &p.maxBlock[1]},
		{ID: devAttrMaxBlockDimX + 2, Dst: &p.maxBlock[2]},
		{ID: devAttrMaxGridDimX, Dst: &p.maxGrid[0]},
		{ID: devAttrMaxGridDimX + 1, Dst: &p.maxGrid[1]},
		{ID: devAttrMaxGridDimX + 2, Dst: &p.maxGrid[2]},
	}
	if err := backend.ReadAttributes(gpurt.Entry{Fn: drv.cuDeviceGetAttribute, Name: "cuDeviceGetAttribute"}, uintptr(p.handle), ordinal, attrs); err != nil {
		return p, err
	}
	var total uintptr
	if r := Result(gpurt.CallN(drv.cuDeviceTotalMem, uintptr(unsafe.Pointer(&total)), uintptr(p.handle))); r != Success {
		return p, failed("cuDeviceTotalMem_v2", r)
	}
	p.totalMemory = uint64(total)
	return p, nil
}

// probe reports the devices and libraries without keeping anything open.
func probe() runtime.ProbeResult {
	res := runtime.ProbeResult{Backend: runtime.CUDA}
	drv, rtc, err := libraries()
	res.Err = err
	if drv == nil {
		return res
	}
	res.Libraries = append(res.Libraries, drv.path+" (driver "+versionString(drv.version)+")")
	if rtc != nil {
		res.Libraries = append(res.Libraries, rtc.path+" (NVRTC "+rtc.version()+")")
	}
	gpurt.ProbeDevices(&res, drv.deviceCount, func(ordinal int) (runtime.DeviceInfo, error) {
		p, err := drv.deviceProps(ordinal)
		return p.info([]string{drv.path}), err
	}, "the CUDA driver reports no device")
	return res
}

// binding makes the device's primary context current on a thread, for the shared code.
func (d *Device) binding() gpurt.Binding {
	return gpurt.Binding{Fn: d.drv.cuCtxSetCurrent, Arg: d.ctx, Call: "cuCtxSetCurrent"}
}

// Info describes the device.
func (d *Device) Info() runtime.DeviceInfo { return d.core.InfoCopy() }

// ComputeCapability returns the device's compute capability, e.g. 9, 0 for an H100 or
// H200.
func (d *Device) ComputeCapability() (major, minor int) { return d.props.ccMajor, d.props.ccMinor }

// Ordinal returns the device number Open was given.
func (d *Device) Ordinal() int { return d.core.Ordinal }

// Context returns the device's primary context (a CUcontext), for interoperation.
func (d *Device) Context() uintptr { return d.ctx }

// Target returns what programs are compiled for: "sm_XY" (CUBIN) when NVRTC knows the
// device, otherwise "compute_XY" (PTX that the driver compiles at load time).
func (d *Device) Target() string { return d.target.arch }

// DriverVersion returns the CUDA version the driver supports, e.g. "13.0".
func (d *Device) DriverVersion() string { return versionString(d.drv.version) }

// NVRTCVersion returns the version of the loaded NVRTC, e.g. "13.0".
func (d *Device) NVRTCVersion() string { return d.rtc.version() }

// DefaultStream returns the device's own stream: a non-blocking stream the device
// created, so it does not serialise with the legacy NULL stream. Its Close does nothing;
// the device closes it.
func (d *Device) DefaultStream() runtime.Stream { return d.defaultStream }

// own runs create with the context current and records the object it makes, so that
// Close releases it if its owner does not.
func (d *Device) own(create func() (resource, error)) error {
	d.resMu.Lock()
	defer d.resMu.Unlock()
	var r resource
	err := d.core.WithDevice(func() (err error) {
		r, err = create()
		return err
	})
	if err != nil {
		return err
	}
	d.resources[r] = struct{}{}
	return nil
}

// disown releases an object its owner closes. It does nothing for an object released
// before (by an earlier call or by Close) or never recorded (wrapped memory).
func (d *Device) disown(r resource) error {
	d.resMu.Lock()
	defer d.resMu.Unlock()
	if _, ok := d.resources[r]; !ok {
		return nil
	}
	delete(d.resources, r)
	return d.core.WithDevice(r.release)
}

// Close releases every object of the device still open (memory, streams, events,
// modules) and the device's hold on its primary context; later Free and Close calls on
// them do nothing, and other calls fail with runtime.ErrClosed. A second Close does
// nothing.
func (d *Device) Close() error {
	d.resMu.Lock()
	defer d.resMu.Unlock()
	if d.core.Closed.Load() {
		return nil
	}
	var errs []error
	err := d.core.WithDevice(func() error {
		for r := range d.resources {
			errs = append(errs, r.release())
		}
		return nil
	})
	errs = append(errs, err)
	clear(d.resources)
	d.core.Closed.Store(true)
	if r := Result(gpurt.CallN(d.drv.cuDevicePrimaryCtxRelease, uintptr(d.handle))); r != Success {
		errs = append(errs, failed("cuDevicePrimaryCtxRelease_v2", r))
	}
	return errors.Join(errs...)
}
