package cuda

import (
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

	// core is the device as the code shared with the HIP backend sees it: its limits,
	// driver calls, streams and the objects it made.
	core   gpurt.Device
	ctx    uintptr // CUcontext: the device's primary context
	props  deviceProps
	target compileTarget
	// dependent: launches may overlap the kernel before them (LaunchDependent).
	dependent bool
	statsMu   sync.Mutex
	lastLoad  LoadStats

	// current makes the primary context current for WithContext without allocating;
	// currentMu guards its argument words.
	currentMu sync.Mutex
	current   gpurt.Frame
}

// deviceProps is what the driver tells about a device without a context.
type deviceProps struct {
	gpurt.Props
	ccMajor, ccMinor int
	l2               int
}

// readProps asks the driver about device ordinal; it needs no context.
func (drv *driver) readProps(ordinal int) (deviceProps, error) {
	var p deviceProps
	var err error
	p.Props, err = backend.ReadProps(&drv.api, ordinal,
		gpurt.Attribute{ID: devAttrCCMajor, Dst: &p.ccMajor}, gpurt.Attribute{ID: devAttrCCMinor, Dst: &p.ccMinor},
		gpurt.Attribute{ID: devAttrL2Size, Dst: &p.l2})
	return p, err
}

// info is the runtime's description of the device.
func (p *deviceProps) info(libraries []string) runtime.DeviceInfo {
	info := p.Info(runtime.CUDA, "sm_"+strconv.Itoa(p.ccMajor*10+p.ccMinor), libraries)
	info.L2CacheBytes = p.l2
	return info
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
	if err := backend.CheckOrdinal(&drv.api, ordinal); err != nil {
		return nil, err
	}
	props, err := drv.readProps(ordinal)
	if err != nil {
		return nil, err
	}
	target, err := chooseTarget(props.ccMajor, props.ccMinor, rtc.archs, rtc.nvrtcGetCUBIN != 0)
	if err != nil {
		return nil, fmt.Errorf("%w: NVRTC %s: %w", runtime.ErrUnavailable, rtc.VersionString(), err)
	}
	d := &Device{drv: drv, rtc: rtc, props: props, target: target, dependent: canLaunchDependent(drv, target)}
	if r := Result(gpurt.CallN(drv.cuDevicePrimaryCtxRetain, uintptr(unsafe.Pointer(&d.ctx)), uintptr(props.Handle))); r != Success {
		return nil, failed(fmt.Sprintf("cuDevicePrimaryCtxRetain(device %d)", ordinal), r)
	}
	d.core = gpurt.Device{Backend: backend, API: &drv.api, Ordinal: ordinal, Props: props.Props,
		Info: props.info([]string{drv.path, rtc.Path}), Current: d.ctx, CurrentCall: "cuCtxSetCurrent",
		Extend: func(s *gpurt.Stream) runtime.Stream { return &stream{Stream: s, dev: d} }}
	if err := d.core.Start(); err != nil {
		gpurt.CallN(drv.cuDevicePrimaryCtxRelease, uintptr(props.Handle))
		return nil, err
	}
	return d, nil
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
		res.Libraries = append(res.Libraries, rtc.Path+" (NVRTC "+rtc.VersionString()+")")
	}
	gpurt.ProbeDevices(&res, func() (int, error) { return backend.DeviceCount(&drv.api) }, func(ordinal int) (runtime.DeviceInfo, error) {
		p, err := drv.readProps(ordinal)
		return p.info([]string{drv.path}), err
	}, "the CUDA driver reports no device")
	return res
}

// Info describes the device.
func (d *Device) Info() runtime.DeviceInfo { return d.core.InfoCopy() }

// WithContext runs f with the calling goroutine locked to its OS thread and the device's
// primary context current on that thread, for other libraries that work on the current
// context (NCCL). Making the context current allocates nothing, so per-step calls may go
// through it. A closed device is refused with an error wrapping runtime.ErrClosed.
func (d *Device) WithContext(f func() error) error {
	if d.core.Closed.Load() {
		return d.core.ClosedError()
	}
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	d.currentMu.Lock()
	r := Result(d.current.Call(d.core.API.SetCurrent.Fn, d.core.Current))
	d.currentMu.Unlock()
	if r != Success {
		return failed(d.core.CurrentCall, r)
	}
	return f()
}

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
func (d *Device) NVRTCVersion() string { return d.rtc.VersionString() }

// Alloc returns size bytes of uninitialised device memory. Alloc(0) returns an empty
// buffer whose DevicePtr is 0.
func (d *Device) Alloc(size int) (runtime.Buffer, error) { return d.core.Alloc(size) }

// AllocHost returns size bytes of pinned host memory (cuMemHostAlloc, portable across
// contexts), which streams copy to and from asynchronously.
func (d *Device) AllocHost(size int) (runtime.HostBuffer, error) { return d.core.AllocHost(size) }

// NewStream returns a new non-blocking stream (it does not serialise with the legacy
// NULL stream). A copy from Go memory (pageable) has been staged by the driver when the
// copy call returns, and one into Go memory is complete; copies with a HostBuffer are
// asynchronous.
func (d *Device) NewStream() (runtime.Stream, error) { return d.core.NewStream() }

// DefaultStream returns the device's own stream: a non-blocking stream the device
// created, so it does not serialise with the legacy NULL stream. Its Close does nothing;
// the device closes it.
func (d *Device) DefaultStream() runtime.Stream { return d.core.DefaultStream() }

// NewEvent returns an event that can be recorded on a stream and timed.
func (d *Device) NewEvent() (runtime.Event, error) { return d.core.NewEvent() }

// Close releases every object of the device still open (memory, streams, events,
// modules, graphs) and the device's hold on its primary context; later Free and Close
// calls on them do nothing, and other calls fail with runtime.ErrClosed. A second Close
// does nothing and returns nil.
func (d *Device) Close() error {
	return d.core.Close(func() error {
		if r := Result(gpurt.CallN(d.drv.cuDevicePrimaryCtxRelease, uintptr(d.props.Handle))); r != Success {
			return failed("cuDevicePrimaryCtxRelease_v2", r)
		}
		return nil
	})
}

// WrapDevicePointer makes a runtime.Buffer of bytes bytes of device memory at ptr that
// the caller owns (an engine's logits, say); Free does not release it. dev must be a
// device of this package, and the first and the last byte must be device memory the
// driver knows (cuMemAlloc, cudaMalloc, memory pools, managed and VMM memory). Only the
// two ends are checked: for VMM memory the driver describes each physical segment
// separately, so one tensor may span several.
func WrapDevicePointer(dev runtime.Device, ptr uintptr, bytes int) (runtime.Buffer, error) {
	d, err := gpurt.AsDevice[*Device](backend, "WrapDevicePointer", dev)
	if err != nil {
		return nil, err
	}
	return d.core.WrapPointer(ptr, bytes)
}

// WrapStream makes a runtime.Stream of a CUstream the caller owns (an engine's stream),
// so sampling is ordered with the engine's work without a synchronisation; Close does not
// destroy it. The stream must belong to dev's primary context.
func WrapStream(dev runtime.Device, handle uintptr) (runtime.Stream, error) {
	d, err := gpurt.AsDevice[*Device](backend, "WrapStream", dev)
	if err != nil {
		return nil, err
	}
	return d.core.WrapStream(handle)
}
