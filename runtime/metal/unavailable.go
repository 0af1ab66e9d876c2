//go:build !darwin

package metal

import (
	"fmt"
	goruntime "runtime"

	"github.com/gumbel-go/gumbel/runtime"
)

func open(int) (runtime.Device, error) {
	return nil, fmt.Errorf("%w: metal: Metal runs on macOS only (this is %s)", runtime.ErrUnavailable, goruntime.GOOS)
}

func probe() runtime.ProbeResult {
	_, err := open(0)
	return runtime.ProbeResult{Backend: runtime.Metal, Err: err}
}
