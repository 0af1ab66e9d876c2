//go:build !linux && !windows

package dynlib

import (
	"errors"
	"fmt"
	goruntime "runtime"

	"github.com/gumbel-go/gumbel/runtime"
)

// Open never loads anything here.
func Open(string) (uintptr, error) {
	return 0, errors.New("dynlib: no CUDA or HIP libraries on " + goruntime.GOOS)
}

// Symbol never finds anything here.
func Symbol(uintptr, string) uintptr { return 0 }

// LoadedPath is empty here.
func LoadedPath(uintptr) string { return "" }

// Unsupported says why the vendor's libraries cannot run here: neither NVIDIA nor AMD
// ships a driver for this OS.
func Unsupported(vendor string) error {
	return fmt.Errorf("%w: %s does not run on %s", runtime.ErrUnavailable, vendor, goruntime.GOOS)
}
