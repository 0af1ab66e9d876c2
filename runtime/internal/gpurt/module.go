package gpurt

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/gumbel-go/gumbel/runtime"
)

// Module is a loaded module: its kernels, found once each.
type Module struct {
	Dev  *Device
	Name string
	// Image is the code the module was loaded from, kept for the module's life: the
	// driver may read it lazily, and CUDA reads kernels' parameters from a CUBIN.
	Image  []byte
	handle uintptr
	params func(k *Kernel) []int
	closed atomic.Bool
	// mu orders kernel lookups with Release.
	mu      sync.Mutex
	kernels map[string]*Kernel
}

// LoadModule loads image, code compiled from program name for target (both named in
// errors), onto the device. params, when not nil, describes a kernel's parameters for
// checking launches: their sizes, or nil when the driver cannot tell.
func (d *Device) LoadModule(name, target string, image []byte, params func(k *Kernel) []int) (runtime.Module, error) {
	m := &Module{Dev: d, Name: name, Image: image, params: params}
	err := d.Own(func() (Resource, error) {
		load := d.API.ModuleLoad
		if r := int32(CallN(load.Fn, uintptr(unsafe.Pointer(&m.handle)), uintptr(unsafe.Pointer(&image[0])))); r != 0 {
			return nil, d.Failed(fmt.Sprintf("%s(%s, %s)", load.Name, name, target), r)
		}
		return m, nil
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// Kernel returns the kernel of that name (an extern "C" __global__ function), or an
// error wrapping runtime.ErrNoKernel.
func (m *Module) Kernel(name string) (runtime.Kernel, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed.Load() {
		return nil, fmt.Errorf("%s module %s: %w", m.Dev.Pkg, m.Name, runtime.ErrClosed)
	}
	if k, ok := m.kernels[name]; ok {
		return k, nil
	}
	k := &Kernel{Module: m, name: name, maxThreads: m.Dev.Props.MaxThreads}
	if err := m.Dev.WithDevice(func() error { return m.find(k) }); err != nil {
		return nil, err
	}
	if m.kernels == nil {
		m.kernels = map[string]*Kernel{}
	}
	m.kernels[name] = k
	return k, nil
}

// find looks k up in the module and reads its limits; the device is current.
func (m *Module) find(k *Kernel) error {
	d, api := m.Dev, m.Dev.API
	cname := CString(k.name)
	if r := int32(CallN(api.GetFunction.Fn, uintptr(unsafe.Pointer(&k.Fn)), m.handle, uintptr(unsafe.Pointer(&cname[0])))); r != 0 {
		err := d.Failed(fmt.Sprintf("%s(%s)", api.GetFunction.Name, k.name), r)
		if slices.Contains(d.KernelNotFound, r) {
			return fmt.Errorf("%w: %q in module %s: %w", runtime.ErrNoKernel, k.name, m.Name, err)
		}
		return err
	}
	// Register and shared-memory use can make the kernel's limit smaller than the
	// device's; a driver without the attribute leaves the device's.
	if attr := api.FuncAttribute; attr.Fn != 0 {
		var v int32
		if r := int32(CallN(attr.Fn, uintptr(unsafe.Pointer(&v)), api.FuncMaxThreads.Value, k.Fn)); r != 0 {
			return d.Failed(fmt.Sprintf("%s(%s, %s)", attr.Name, api.FuncMaxThreads.Name, k.name), r)
		}
		if v > 0 && int(v) < k.maxThreads {
			k.maxThreads = int(v)
		}
	}
	if m.params != nil {
		k.ParamSizes = m.params(k)
	}
	return nil
}

// Close unloads the module; its kernels can no longer be launched. A second Close does
// nothing.
func (m *Module) Close() error { return m.Dev.Disown(m) }

// Release marks the module closed and unloads it; later lookups fail with
// runtime.ErrClosed. The device is current.
func (m *Module) Release() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed.Swap(true) {
		return nil
	}
	unload := m.Dev.API.ModuleUnload
	if r := int32(CallN(unload.Fn, m.handle)); r != 0 {
		return m.Dev.Failed(unload.Name, r)
	}
	return nil
}

// Kernel is one kernel of a module: what a launch checks and passes.
type Kernel struct {
	Module *Module
	name   string
	// Fn is the driver's function (CUfunction, hipFunction_t).
	Fn         uintptr
	maxThreads int
	// ParamSizes are the byte sizes of the kernel's parameters, for checking launch
	// arguments; nil when the driver cannot say.
	ParamSizes []int
}

// Name returns the kernel's name.
func (k *Kernel) Name() string { return k.name }

// MaxThreadsPerBlock is the largest block this kernel can run with.
func (k *Kernel) MaxThreadsPerBlock() int { return k.maxThreads }
