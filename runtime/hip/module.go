package hip

import (
	"github.com/gumbel-go/gumbel/runtime"
)

// Load compiles the program's HIP edition for this device with hiprtc, or takes it from
// the in-process cache, and loads it onto the device. HIP cannot describe a kernel's
// parameters, so launches check only the buffers among the arguments.
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
	return d.core.LoadModule(p.Name, d.Target(), code, nil)
}
