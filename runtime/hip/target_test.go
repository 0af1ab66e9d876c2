package hip

import (
	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/runtime/internal/gputest"
)

// target describes a device of this package to the cases the backends share. HIP cannot
// describe kernels' parameters; another device made current is what a call that escaped
// its thread would find.
func target(dev runtime.Device) gputest.Target {
	d := dev.(*Device)
	return gputest.Target{Dev: d, Core: &d.core, WrapStream: WrapStream, WrapDevicePointer: WrapDevicePointer,
		Elsewhere: uintptr(d.Ordinal() + 1)}
}
