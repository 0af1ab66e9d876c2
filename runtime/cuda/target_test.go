package cuda

import (
	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/runtime/internal/gputest"
)

// target describes a device of this package to the cases the backends share. CUDA
// describes kernels' parameters (the fake does, as CUDA 12.4 and later do); context 0
// makes no device current.
func target(dev runtime.Device) gputest.Target {
	d := dev.(*Device)
	return gputest.Target{Dev: d, Core: &d.core, DescribesParams: true, WrapStream: WrapStream, WrapDevicePointer: WrapDevicePointer}
}
