package hip

import (
	"errors"
	"fmt"
	"strings"
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

	// core is the device as the code shared with the CUDA backend sees it: its limits,
	// runtime calls, streams and the objects it made.
	core gpurt.Device
	// archName is gcnArchName, the processor with its feature settings, e.g.
	// "gfx90a:sramecc+:xnack-".
	archName string
}

// processorOf returns the processor of a target id: "gfx90a" for
// "gfx90a:sramecc+:xnack-". Code is compiled for the processor alone, so the code object
// says "any" for xnack and sramecc and loads whichever mode the device runs in.
func processorOf(target string) string {
	p, _, _ := strings.Cut(target, ":")
	return p
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
	if err := backend.CheckOrdinal(&drv.api, ordinal); err != nil {
		return nil, err
	}
	props, err := backend.ReadProps(&drv.api, ordinal)
	if err != nil {
		return nil, err
	}
	arch, err := drv.archName(ordinal)
	if err != nil {
		return nil, err
	}
	d := &Device{drv: drv, rtc: rtc, archName: arch}
	d.core = gpurt.Device{Backend: backend, API: &drv.api, Ordinal: ordinal, Props: props,
		Info: props.Info(runtime.HIP, processorOf(arch), []string{drv.path, rtc.Path}), MaxWorkItems: maxGridWorkItems,
		Current: uintptr(ordinal), CurrentCall: fmt.Sprintf("hipSetDevice(%d)", ordinal)}
	if err := d.core.Start(); err != nil {
		return nil, err
	}
	return d, nil
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
		res.Libraries = append(res.Libraries, rtc.Path+" (hiprtc "+rtc.VersionString()+")")
	} else {
		res.Err = err
	}
	if _, err := initialized(); err != nil {
		res.Err = errors.Join(res.Err, err)
		return res
	}
	gpurt.ProbeDevices(&res, func() (int, error) { return backend.DeviceCount(&drv.api) }, func(ordinal int) (runtime.DeviceInfo, error) {
		p, err := backend.ReadProps(&drv.api, ordinal)
		if err != nil {
			return runtime.DeviceInfo{}, err
		}
		arch, err := drv.archName(ordinal)
		return p.Info(runtime.HIP, processorOf(arch), []string{drv.path}), err
	}, "the HIP runtime reports no device")
	return res
}

// maxGridWorkItems is the most work-items an AMD dispatch packet holds in one dimension:
// its grid size is a 32-bit count of work-items, not of blocks. CUDA counts blocks and
// has no such limit.
const maxGridWorkItems = 1<<32 - 1

// Info describes the device.
func (d *Device) Info() runtime.DeviceInfo { return d.core.InfoCopy() }

// Ordinal returns the device number Open was given.
func (d *Device) Ordinal() int { return d.core.Ordinal }

// Target returns the processor programs are compiled for, e.g. "gfx90a".
func (d *Device) Target() string { return processorOf(d.archName) }

// ArchName returns the device's gcnArchName: the processor with its feature settings,
// e.g. "gfx90a:sramecc+:xnack-".
func (d *Device) ArchName() string { return d.archName }

// RuntimeVersion returns the HIP runtime's version, e.g. "6.2.41133".
func (d *Device) RuntimeVersion() string { return versionString(d.drv.version) }

// HIPRTCVersion returns the version hiprtc reports, e.g. "6.2".
func (d *Device) HIPRTCVersion() string { return d.rtc.VersionString() }

// Alloc returns size bytes of uninitialised device memory. Alloc(0) returns an empty
// buffer whose DevicePtr is 0.
func (d *Device) Alloc(size int) (runtime.Buffer, error) { return d.core.Alloc(size) }

// AllocHost returns size bytes of pinned host memory (hipHostMalloc), which streams copy
// to and from asynchronously.
func (d *Device) AllocHost(size int) (runtime.HostBuffer, error) { return d.core.AllocHost(size) }

// NewStream returns a new non-blocking stream (it does not serialise with the NULL
// stream). A copy with a HostBuffer is asynchronous; one with other memory (Go memory,
// which HIP may still be reading or writing after hipMemcpy*Async returns) is complete
// when the copy call returns.
func (d *Device) NewStream() (runtime.Stream, error) { return d.core.NewStream() }

// DefaultStream returns the device's own stream: a non-blocking stream the device
// created, so it does not serialise with the NULL stream. Its Close does nothing; the
// device closes it.
func (d *Device) DefaultStream() runtime.Stream { return d.core.DefaultStream() }

// NewEvent returns an event that can be recorded on a stream and timed.
func (d *Device) NewEvent() (runtime.Event, error) { return d.core.NewEvent() }

// Close releases every object of the device still open (memory, streams, events,
// modules); later Free and Close calls on them do nothing, and other calls fail with
// runtime.ErrClosed. A second Close does nothing and returns nil.
func (d *Device) Close() error { return d.core.Close(nil) }

// WrapDevicePointer makes a runtime.Buffer of bytes bytes of device memory at ptr that
// the caller owns (an engine's logits, say); Free does not release it. dev must be a
// device of this package, and the first and the last byte must be device memory the HIP
// runtime knows (hipMalloc, hipMallocAsync, managed and virtual memory). Only the two
// ends are checked: the runtime describes each physical segment of virtual memory
// separately, so one tensor may span several.
func WrapDevicePointer(dev runtime.Device, ptr uintptr, bytes int) (runtime.Buffer, error) {
	d, err := gpurt.AsDevice[*Device](backend, "WrapDevicePointer", dev)
	if err != nil {
		return nil, err
	}
	return d.core.WrapPointer(ptr, bytes)
}

// WrapStream makes a runtime.Stream of a hipStream_t the caller owns (an engine's
// stream), so sampling is ordered with the engine's work without a synchronisation;
// Close does not destroy it. The stream must belong to dev; where the runtime can tell
// (hipStreamGetDevice, ROCm 6 and later) that is checked.
func WrapStream(dev runtime.Device, handle uintptr) (runtime.Stream, error) {
	d, err := gpurt.AsDevice[*Device](backend, "WrapStream", dev)
	if err != nil {
		return nil, err
	}
	return d.core.WrapStream(handle)
}
