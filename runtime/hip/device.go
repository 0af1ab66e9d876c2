package hip

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"unsafe"

	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/runtime/internal/gpurt"
)

func init() {
	runtime.Register(runtime.HIP, 20, func(ordinal int) (runtime.Device, error) { return Open(ordinal) }, probe)
}

// Device is one HIP device. [Open] returns it as a runtime.Device; assert it to *Device
// for the HIP-specific getters.
type Device struct {
	drv *driver
	rtc *compiler

	// core is what the code shared with the CUDA backend reads: the ordinal, the
	// description, the launch limits, whether the device is closed.
	core          gpurt.Device
	props         deviceProps
	setDevice     string // "hipSetDevice(ordinal)", for errors
	defaultStream *stream
	pinned        pinnedSet
	closing       atomic.Bool
}

// deviceProps is what the runtime tells about a device.
type deviceProps struct {
	name string
	// archName is gcnArchName, the processor with its feature settings, e.g.
	// "gfx90a:sramecc+:xnack-".
	archName        string
	multiprocessors int
	maxThreads      int
	warpSize        int
	maxBlock        [3]int
	maxGrid         [3]int
	totalMemory     uint64
}

// target is the processor code is compiled for: gcnArchName without its feature
// settings, so the code object says "any" for xnack and sramecc and loads whichever
// mode the device runs in.
func (p deviceProps) target() string { return processorOf(p.archName) }

// processorOf returns the processor of a target id: "gfx90a" for
// "gfx90a:sramecc+:xnack-".
func processorOf(target string) string {
	p, _, _ := strings.Cut(target, ":")
	return p
}

// info is the runtime.DeviceInfo of a device with these properties.
func (p deviceProps) info(libraries []string) runtime.DeviceInfo {
	return runtime.DeviceInfo{
		Backend:            runtime.HIP,
		Name:               p.name,
		Arch:               p.target(),
		Multiprocessors:    p.multiprocessors,
		MaxThreadsPerBlock: p.maxThreads,
		WarpSize:           p.warpSize,
		TotalMemory:        p.totalMemory,
		Libraries:          libraries,
	}
}

// Open opens HIP device number ordinal. It returns an error wrapping
// runtime.ErrUnavailable when there is no usable HIP runtime, hiprtc or device of that
// number.
func Open(ordinal int) (runtime.Device, error) {
	drv, err := initialized()
	if err != nil {
		return nil, err
	}
	rtc, err := loadedCompiler()
	if err != nil {
		return nil, fmt.Errorf("%w: hip: kernels cannot be compiled without hiprtc: %w", runtime.ErrUnavailable, err)
	}
	d, err := open(drv, rtc, ordinal)
	if err != nil {
		return nil, err
	}
	return d, nil
}

func open(drv *driver, rtc *compiler, ordinal int) (*Device, error) {
	count, err := drv.deviceCount()
	if err != nil {
		return nil, err
	}
	if ordinal < 0 || ordinal >= count {
		return nil, fmt.Errorf("%w: no HIP device %d (%d present)", runtime.ErrUnavailable, ordinal, count)
	}
	props, err := drv.deviceProps(ordinal)
	if err != nil {
		return nil, err
	}
	d := &Device{drv: drv, rtc: rtc, props: props, setDevice: fmt.Sprintf("hipSetDevice(%d)", ordinal)}
	d.core = gpurt.Device{Backend: backend, Ordinal: ordinal, Info: props.info([]string{drv.path, rtc.path}),
		MaxBlock: props.maxBlock, MaxGrid: props.maxGrid, MaxWorkItems: maxGridWorkItems,
		Bind: d.binding, AsBuffer: asBuffer, AsEvent: asEvent}
	err = d.core.WithDevice(func() error {
		s, err := d.newStreamLocked()
		if err != nil {
			return err
		}
		s.core.IsDefault = true
		d.defaultStream = s
		return nil
	})
	if err != nil {
		return nil, err
	}
	return d, nil
}

// deviceCount returns the number of HIP devices.
func (drv *driver) deviceCount() (int, error) {
	var n int32
	if r := Result(gpurt.CallN(drv.hipGetDeviceCount, uintptr(unsafe.Pointer(&n)))); r != Success {
		err := failed("hipGetDeviceCount", r)
		if r == ErrorNoDevice {
			err = fmt.Errorf("%w: %w", runtime.ErrUnavailable, err)
		}
		return 0, err
	}
	return int(n), nil
}

// deviceProps asks the runtime about device ordinal.
func (drv *driver) deviceProps(ordinal int) (deviceProps, error) {
	var p deviceProps
	var dev int32 // hipDevice_t
	if r := Result(gpurt.CallN(drv.hipDeviceGet, uintptr(unsafe.Pointer(&dev)), uintptr(ordinal))); r != Success {
		return p, failed(fmt.Sprintf("hipDeviceGet(%d)", ordinal), r)
	}
	var name [256]byte
	if r := Result(gpurt.CallN(drv.hipDeviceGetName, uintptr(unsafe.Pointer(&name[0])), uintptr(len(name)), uintptr(dev))); r != Success {
		return p, failed("hipDeviceGetName", r)
	}
	p.name = string(gpurt.TrimNUL(name[:]))
	attrs := []gpurt.Attribute{
		{ID: attrMultiprocessorCount, Dst: &p.multiprocessors},
		{ID: attrMaxThreadsPerBlock, Dst: &p.maxThreads},
		{ID: attrWarpSize, Dst: &p.warpSize},
		{ID: attrMaxBlockDimX, Dst: &p.maxBlock[0]},
		{ID: attrMaxBlockDimX + 1, Dst: &p.maxBlock[1]},
		{ID: attrMaxBlockDimX + 2, Dst: &p.maxBlock[2]},
		{ID: attrMaxGridDimX, Dst: &p.maxGrid[0]},
		{ID: attrMaxGridDimX + 1, Dst: &p.maxGrid[1]},
		{ID: attrMaxGridDimX + 2, Dst: &p.maxGrid[2]},
	}
	if err := backend.ReadAttributes(gpurt.Entry{Fn: drv.hipDeviceGetAttribute, Name: "hipDeviceGetAttribute"}, uintptr(ordinal), ordinal, attrs); err != nil {
		return p, err
	}
	if drv.hipDeviceTotalMem != 0 {
		var total uintptr
		if r := Result(gpurt.CallN(drv.hipDeviceTotalMem, uintptr(unsafe.Pointer(&total)), uintptr(dev))); r != Success {
			return p, failed("hipDeviceTotalMem", r)
		}
		p.totalMemory = uint64(total)
	}
	arch, err := drv.archName(ordinal)
	if err != nil {
		return p, err
	}
	p.archName = arch
	return p, nil
}

// archName reads gcnArchName from the device properties. hipDeviceGetAttribute cannot
// return it, and the properties struct has two layouts, so the call goes to the edition
// whose layout is known and the name is checked before it is believed.
func (drv *driver) archName(ordinal int) (string, error) {
	buf := make([]byte, devicePropBufferSize)
	call, fn, off := "hipGetDevicePropertiesR0600", drv.hipGetDevicePropertiesR0600, gcnArchNameOffsetR0600
	if fn == 0 {
		call, fn, off = "hipGetDeviceProperties", drv.hipGetDeviceProperties, gcnArchNameOffsetR0000
	}
	if r := Result(gpurt.CallN(fn, uintptr(unsafe.Pointer(&buf[0])), uintptr(ordinal))); r != Success {
		return "", failed(fmt.Sprintf("%s(device %d)", call, ordinal), r)
	}
	name := string(gpurt.TrimNUL(buf[off : off+gcnArchNameSize]))
	if !targetPattern.MatchString(name) {
		return "", fmt.Errorf("%w: hip: %s(device %d) gave gcnArchName %q, not a gfx target (HIP runtime %s, an unknown struct layout?)",
			runtime.ErrUnavailable, call, ordinal, name, versionString(drv.version))
	}
	return name, nil
}

// probe reports the devices and libraries without keeping anything open.
func probe() runtime.ProbeResult {
	res := runtime.ProbeResult{Backend: runtime.HIP}
	drv, err := loadedDriver()
	if err != nil {
		res.Err = err
		return res
	}
	res.Libraries = append(res.Libraries, drv.path+" (HIP "+versionString(drv.version)+")")
	if rtc, err := loadedCompiler(); err == nil {
		res.Libraries = append(res.Libraries, rtc.path+" (hiprtc "+rtc.version()+")")
	} else {
		res.Err = err
	}
	if _, err := initialized(); err != nil {
		res.Err = errors.Join(res.Err, err)
		return res
	}
	gpurt.ProbeDevices(&res, drv.deviceCount, func(ordinal int) (runtime.DeviceInfo, error) {
		p, err := drv.deviceProps(ordinal)
		return p.info([]string{drv.path}), err
	}, "the HIP runtime reports no device")
	return res
}

// maxGridWorkItems is the most work-items an AMD dispatch packet holds in one dimension:
// its grid size is a 32-bit count of work-items, not of blocks. CUDA counts blocks and
// has no such limit.
const maxGridWorkItems = 1<<32 - 1

// binding makes the device current on a thread, for the shared code. HIP has no
// context to hand around: hipSetDevice takes the ordinal.
func (d *Device) binding() gpurt.Binding {
	return gpurt.Binding{Fn: d.drv.hipSetDevice, Arg: uintptr(d.core.Ordinal), Call: d.setDevice}
}

// Info describes the device.
func (d *Device) Info() runtime.DeviceInfo { return d.core.InfoCopy() }

// Ordinal returns the device number Open was given.
func (d *Device) Ordinal() int { return d.core.Ordinal }

// Target returns the processor programs are compiled for, e.g. "gfx90a".
func (d *Device) Target() string { return d.props.target() }

// ArchName returns the device's gcnArchName: the processor with its feature settings,
// e.g. "gfx90a:sramecc+:xnack-".
func (d *Device) ArchName() string { return d.props.archName }

// RuntimeVersion returns the HIP runtime's version, e.g. "6.2.41133".
func (d *Device) RuntimeVersion() string { return versionString(d.drv.version) }

// HIPRTCVersion returns the version hiprtc reports, e.g. "6.2".
func (d *Device) HIPRTCVersion() string { return d.rtc.version() }

// DefaultStream returns the device's own stream: a non-blocking stream the device
// created, so it does not serialise with the NULL stream. Its Close does nothing; the
// device closes it.
func (d *Device) DefaultStream() runtime.Stream { return d.defaultStream }

// Close releases the default stream. Buffers, streams, events and modules must not be
// used after it, but their Free and Close still release them. A second Close does
// nothing.
func (d *Device) Close() error {
	if !d.closing.CompareAndSwap(false, true) {
		return nil
	}
	err := d.core.OnThread(d.defaultStream.release)
	d.core.Closed.Store(true)
	return err
}
