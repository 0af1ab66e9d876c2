package hip

import (
	"fmt"
	"unsafe"

	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/runtime/internal/gpurt"
)

// Load compiles the program's HIP edition for this device with hiprtc, or takes it from
// the in-process cache, and loads it onto the device.
func (d *Device) Load(p *runtime.Program) (runtime.Module, error) {
	if err := checkProgram(p, d.Target()); err != nil {
		return nil, err
	}
	if d.core.Closed.Load() {
		return nil, d.core.ClosedError()
	}
	code, err := d.rtc.compileCached(p, d.Target())
	if err != nil {
		return nil, err
	}
	m := &module{core: gpurt.Module{Dev: &d.core, Name: p.Name}, dev: d, code: code}
	err = d.core.WithDevice(func() error {
		if r := Result(gpurt.CallN(d.drv.hipModuleLoadData, uintptr(unsafe.Pointer(&m.core.Handle)), uintptr(unsafe.Pointer(&code[0])))); r != Success {
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
	core gpurt.Module // Handle is the hipModule_t
	dev  *Device
	// code is the code object the module was loaded from, kept for the module's life
	// in case the runtime reads the image lazily.
	code []byte
}

// kernel is one hipFunction_t of a module. Its ParamSizes stay nil: HIP cannot describe
// a kernel's parameters.
type kernel struct {
	core gpurt.Kernel // Fn is the hipFunction_t
}

// Name returns the kernel's name.
func (k *kernel) Name() string { return k.core.Name }

// MaxThreadsPerBlock is the largest block this kernel can run with.
func (k *kernel) MaxThreadsPerBlock() int { return k.core.MaxThreads }

// Kernel returns the kernel of that name (an extern "C" __global__ function), or an
// error wrapping runtime.ErrNoKernel.
func (m *module) Kernel(name string) (runtime.Kernel, error) {
	return m.core.Lookup(name, func() (runtime.Kernel, error) {
		k := &kernel{core: gpurt.Kernel{Module: &m.core, Name: name, MaxThreads: m.dev.props.maxThreads}}
		drv := m.dev.drv
		cname := gpurt.CString(name)
		if r := Result(gpurt.CallN(drv.hipModuleGetFunction, uintptr(unsafe.Pointer(&k.core.Fn)), m.core.Handle, uintptr(unsafe.Pointer(&cname[0])))); r != Success {
			err := failed(fmt.Sprintf("hipModuleGetFunction(%s)", name), r)
			if r == ErrorNotFound || r == ErrorInvalidDeviceFunction {
				return nil, m.core.NoKernel(name, err)
			}
			return nil, err
		}
		// Register and LDS use can make the limit smaller than the device's; a
		// runtime without the attribute leaves the device's limit.
		if drv.hipFuncGetAttribute != 0 {
			var v int32
			if r := Result(gpurt.CallN(drv.hipFuncGetAttribute, uintptr(unsafe.Pointer(&v)), funcAttrMaxThreadsPerBlk, k.core.Fn)); r != Success {
				return nil, failed(fmt.Sprintf("hipFuncGetAttribute(HIP_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, %s)", name), r)
			}
			if v > 0 && int(v) < k.core.MaxThreads {
				k.core.MaxThreads = int(v)
			}
		}
		return k, nil
	})
}

// Close unloads the module; its kernels can no longer be launched. A second Close does
// nothing. It works after the device's Close too: HIP keeps modules loaded until
// unloaded.
func (m *module) Close() error {
	return m.core.Release(func() error {
		return m.dev.core.OnThread(func() error {
			if r := Result(gpurt.CallN(m.dev.drv.hipModuleUnload, m.core.Handle)); r != Success {
				return failed("hipModuleUnload", r)
			}
			return nil
		})
	})
}
