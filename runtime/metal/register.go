package metal

import "github.com/gumbel-go/gumbel/runtime"

// rank orders Metal among the backends for "auto": after CUDA and HIP, before the CPU.
const rank = 30

func init() {
	runtime.Register(runtime.Metal, rank, open, probe)
}

// Open opens Metal device number ordinal (0 is the system default GPU). Outside macOS, or
// without a Metal GPU, the error wraps runtime.ErrUnavailable.
func Open(ordinal int) (runtime.Device, error) { return open(ordinal) }
