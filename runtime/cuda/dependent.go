package cuda

import (
	"strconv"
	"strings"

	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/runtime/internal/gpurt"
)

var _ runtime.DependentLauncher = (*stream)(nil)

// programmaticSerialization is CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
// allowed (value 1): the launch may overlap the kernel before it on the stream when that
// kernel releases it (griddepcontrol.launch_dependents).
var programmaticSerialization = gpurt.LaunchAttr{ID: 6, Name: "CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION", Value: 1}

// canLaunchDependent reports whether kernels compiled for target can be launched
// dependent through drv: cuLaunchKernelEx, a driver that captures such launches into
// graphs as programmatic edges (CUDA 12.3), and code for sm_90 or later, where the
// kernels' griddepcontrol instructions are compiled in (kernelsrc's gb_grid_wait).
func canLaunchDependent(drv *driver, target compileTarget) bool {
	if drv.api.LaunchEx.Fn == 0 || drv.version < 12030 {
		return false
	}
	_, num, ok := strings.Cut(target.arch, "_")
	sm, err := strconv.Atoi(num)
	return ok && err == nil && sm >= 90
}

// LaunchDependent queues k so that it may start before the kernel queued before it ends
// (see runtime.DependentLauncher); without the driver's or the target's support it is
// Launch.
func (s *stream) LaunchDependent(k runtime.Kernel, grid, block runtime.Dim3, args *runtime.Args) error {
	if !s.dev.dependent {
		return s.Launch(k, grid, block, args)
	}
	return s.LaunchWith(k, grid, block, args, programmaticSerialization)
}

// Overlaps reports whether LaunchDependent can overlap kernels on this device (see
// canLaunchDependent).
func (s *stream) Overlaps() bool { return s.dev.dependent }
