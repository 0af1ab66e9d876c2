package hip

import (
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/gumbel-go/gumbel/runtime"
)

// Load compiles the program's HIP edition for this device with hiprtc, or takes it from
// the in-process cache, and loads it onto the device.
func (d *Device) Load(p *runtime.Program) (runtime.Module, error) {
	if err := checkProgram(p, d.Target()); err != nil {
		return nil, err
	}
	if d.closed.Load() {
		return nil, fmt.Errorf("hip device %d: %w", d.ordinal, runtime.ErrClosed)
	}
	code, err := d.rtc.compileCached(p, d.Target())
	if err != nil {
		return nil, err
	}
	m := &module{dev: d, name: p.Name, code: code, kernels: map[string]*kernel{}}
	err = d.withDevice(func() error {
		if r := Result(callN(d.drv.hipModuleLoadData, uintptr(unsafe.Pointer(&m.handle)), uintptr(unsafe.Pointer(&code[0])))); r != Success {
			return failed(fmt.Sprintf("hipModuleLoadData(%s, %s)", p.Name, d.Target()), r)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// module is a loaded hipModule_t.
type module struct {
	dev    *Device
	name   string
	handle uintptr // hipModule_t
	// code is the code object the module was loaded from, kept for the module's life
	// in case the runtime reads the image lazily.
	code    []byte
	closed  atomic.Bool
	mu      sync.Mutex
	kernels map[string]*kernel
}

// kernel is one hipFunction_t of a module.
type kernel struct {
	mod        *module
	name       string
	fn         uintptr // hipFunction_t
	maxThreads int
}

// Name returns the kernel's name.
func (k *kernel) Name() string { return k.name }

// MaxThreadsPerBlock is the largest block this kernel can run with.
func (k *kernel) MaxThreadsPerBlock() int { return k.maxThreads }

// Kernel returns the kernel of that name (an extern "C" __global__ function), or an
// error wrapping runtime.ErrNoKernel.
func (m *module) Kernel(name string) (runtime.Kernel, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed.Load() {
		return nil, fmt.Errorf("hip module %s: %w", m.name, runtime.ErrClosed)
	}
	if k, ok := m.kernels[name]; ok {
		return k, nil
	}
	k := &kernel{mod: m, name: name, maxThreads: m.dev.props.maxThreads}
	drv := m.dev.drv
	err := m.dev.withDevice(func() error {
		cname := cBytes(name)
		if r := Result(callN(drv.hipModuleGetFunction, uintptr(unsafe.Pointer(&k.fn)), m.handle, uintptr(unsafe.Pointer(&cname[0])))); r != Success {
			err := failed(fmt.Sprintf("hipModuleGetFunction(%s)", name), r)
			if r == ErrorNotFound || r == ErrorInvalidDeviceFunction {
				return fmt.Errorf("%w: %q in module %s: %w", runtime.ErrNoKernel, name, m.name, err)
			}
			return err
		}
		// Register and LDS use can make the limit smaller than the device's; a
		// runtime without the attribute leaves the device's limit.
		if drv.hipFuncGetAttribute != 0 {
			var v int32
			if r := Result(callN(drv.hipFuncGetAttribute, uintptr(unsafe.Pointer(&v)), funcAttrMaxThreadsPerBlk, k.fn)); r != Success {
				return failed(fmt.Sprintf("hipFuncGetAttribute(HIP_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, %s)", name), r)
			}
			if v > 0 && int(v) < k.maxThreads {
				k.maxThreads = int(v)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	m.kernels[name] = k
	return k, nil
}

// Close unloads the module; its kernels can no longer be launched. A second Close does
// nothing.
func (m *module) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed.Swap(true) {
		return nil
	}
	return m.dev.onThread(func() error {
		if r := Result(callN(m.dev.drv.hipModuleUnload, m.handle)); r != Success {
			return failed("hipModuleUnload", r)
		}
		return nil
	})
}
