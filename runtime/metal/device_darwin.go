//go:build darwin

package metal

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/gumbel-go/gumbel/runtime"
)

// simdWidth is the SIMD-group width of every Apple GPU (each pipeline also reports it as
// threadExecutionWidth). The kernels read the width at run time, so it only informs
// launch policies.
const simdWidth = 32

// maxThreadsPerThreadgroup is the threadgroup limit of every Metal 3 GPU; each pipeline
// reports its own maxTotalThreadsPerThreadgroup, which Kernel.MaxThreadsPerBlock returns.
const maxThreadsPerThreadgroup = 1024

// Device is one Metal GPU.
type Device struct {
	b    *bindings
	info runtime.DeviceInfo
	// msl is the Metal Shading Language version programs are compiled for.
	msl int

	mu     sync.Mutex
	c      caller // set-up calls, under mu
	dev    uintptr
	def    *stream
	cache  map[moduleKey]*module
	closed bool
	// gone is closed for the streams and buffers, which check it without the lock.
	gone atomic.Bool
}

// open opens GPU number ordinal: 0 is the system default device, others follow
// MTLCopyAllDevices.
func open(ordinal int) (runtime.Device, error) {
	b, err := load()
	if err != nil {
		return nil, err
	}
	d := &Device{b: b, cache: map[moduleKey]*module{}}
	d.c.b = b
	pool := d.c.enter()
	defer d.c.leave(pool)
	if d.dev, err = d.pick(ordinal); err != nil {
		return nil, err
	}
	d.msl = d.languageIndex()
	d.info = d.describe()
	s, err := d.newStream()
	if err != nil {
		d.c.release(d.dev)
		return nil, err
	}
	d.def = s
	return d, nil
}

// pick returns an owned reference to device number ordinal.
func (d *Device) pick(ordinal int) (uintptr, error) {
	if ordinal < 0 {
		return 0, fmt.Errorf("%w: metal: device %d", runtime.ErrInvalidArgument, ordinal)
	}
	if ordinal == 0 {
		if dev := d.c.callFn0(fnCreateSystemDefaultDevice); dev != 0 {
			return dev, nil
		}
	}
	all := d.c.callFn0(fnCopyAllDevices)
	if all == 0 {
		return 0, fmt.Errorf("%w: metal: no Metal device", runtime.ErrUnavailable)
	}
	defer d.c.release(all)
	n := int(d.c.send0(all, mCount))
	if ordinal >= n {
		return 0, fmt.Errorf("%w: metal: device %d of %d", runtime.ErrUnavailable, ordinal, n)
	}
	return d.c.retain(d.c.send1(all, mObjectAtIndex, uintptr(ordinal))), nil
}

// languageIndex picks the newest MSL version this macOS compiles (an index into
// languageVersions).
func (d *Device) languageIndex() int {
	info := d.c.send0(uintptr(d.b.classProcessInfo), mProcessInfo)
	for i, v := range languageVersions {
		if d.c.sendTripleBool1(info, mIsOperatingSystemAtLeastVersion, [3]uint64{uint64(v.macOS), 0, 0}) {
			return i
		}
	}
	return len(languageVersions) - 1
}

func (d *Device) describe() runtime.DeviceInfo {
	info := runtime.DeviceInfo{
		Backend:            runtime.Metal,
		Name:               d.c.goString(d.c.send0(d.dev, mDeviceName)),
		Arch:               "metal",
		Multiprocessors:    d.gpuCores(),
		MaxThreadsPerBlock: maxThreadsPerThreadgroup,
		WarpSize:           simdWidth,
		TotalMemory:        uint64(d.c.send0(d.dev, mRecommendedMaxWorkingSetSize)),
		UnifiedMemory:      d.c.sendBool0(d.dev, mHasUnifiedMemory),
		Libraries:          append([]string(nil), d.b.libraries...),
	}
	for _, f := range gpuFamilies {
		if d.c.sendBool1(d.dev, mSupportsFamily, uintptr(f.value)) {
			info.Arch = f.name
			break
		}
	}
	return info
}

// Info describes the device.
func (d *Device) Info() runtime.DeviceInfo {
	info := d.info
	info.Libraries = append([]string(nil), d.info.Libraries...)
	return info
}

// LanguageVersion returns the Metal Shading Language version programs are compiled
// for, e.g. "3.1".
func (d *Device) LanguageVersion() string { return languageVersions[d.msl].name }

// Handle returns the MTLDevice object.
func (d *Device) Handle() uintptr { return d.dev }

func (d *Device) check(call string) error {
	if d.closed {
		return fmt.Errorf("metal: %s: %w", call, runtime.ErrClosed)
	}
	return nil
}

// Alloc returns shared-storage memory: the GPU and the host address the same bytes.
func (d *Device) Alloc(bytes int) (runtime.Buffer, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.check("Alloc"); err != nil {
		return nil, err
	}
	if bytes <= 0 {
		return nil, fmt.Errorf("%w: metal: Alloc of %d bytes", runtime.ErrInvalidArgument, bytes)
	}
	pool := d.c.enter()
	defer d.c.leave(pool)
	obj := d.c.send2(d.dev, mNewBufferWithLength, uintptr(bytes), resourceStorageModeShared)
	if obj == 0 {
		return nil, fmt.Errorf("%w: metal: newBufferWithLength:%d", runtime.ErrOutOfMemory, bytes)
	}
	return newBuffer(d, obj, bytes, nil), nil
}

// AllocHost returns page-aligned host memory. Apple GPUs share memory with the host,
// so copies from and to it are plain copies.
func (d *Device) AllocHost(bytes int) (runtime.HostBuffer, error) {
	if err := d.checkLocked("AllocHost"); err != nil {
		return nil, err
	}
	if bytes <= 0 {
		return nil, fmt.Errorf("%w: metal: AllocHost of %d bytes", runtime.ErrInvalidArgument, bytes)
	}
	return &hostBuffer{mem: pageAligned(bytes)}, nil
}

func (d *Device) checkLocked(call string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.check(call)
}

// NewStream returns a new command queue.
func (d *Device) NewStream() (runtime.Stream, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.check("NewStream"); err != nil {
		return nil, err
	}
	pool := d.c.enter()
	defer d.c.leave(pool)
	return d.newStream()
}

// DefaultStream returns the device's own command queue.
func (d *Device) DefaultStream() runtime.Stream { return d.def }

// NewEvent returns an event timed by the GPU's command buffer timestamps.
func (d *Device) NewEvent() (runtime.Event, error) {
	if err := d.checkLocked("NewEvent"); err != nil {
		return nil, err
	}
	return &event{dev: d, c: caller{b: d.b}}, nil
}

// Close waits for the default stream and releases it, the compiled modules and the
// device. Buffers, other streams and modules must not be used after. A second Close
// does nothing and returns nil.
func (d *Device) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	d.gone.Store(true)
	err := d.def.close()
	pool := d.c.enter()
	defer d.c.leave(pool)
	for _, m := range d.cache {
		m.release()
	}
	clear(d.cache)
	d.c.release(d.dev)
	d.dev = 0
	return err
}

func probe() runtime.ProbeResult {
	d, err := open(0)
	if err != nil {
		return runtime.ProbeResult{Backend: runtime.Metal, Err: err}
	}
	defer d.Close()
	info := d.Info()
	return runtime.ProbeResult{Backend: runtime.Metal, Devices: []runtime.DeviceInfo{info}, Libraries: info.Libraries}
}
