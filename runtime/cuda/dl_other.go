//go:build !linux && !windows

package cuda

import (
	"errors"
	"fmt"
	goruntime "runtime"

	"github.com/gumbel-go/gumbel/runtime"
)

// platformErr says why CUDA cannot run here: NVIDIA ships no CUDA driver for this OS.
var platformErr = fmt.Errorf("%w: CUDA has no driver on %s", runtime.ErrUnavailable, goruntime.GOOS)

// openLibrary never loads anything here.
func openLibrary(string) (uintptr, error) { return 0, errors.New("not supported") }

// lookupSymbol never finds anything here.
func lookupSymbol(uintptr, string) uintptr { return 0 }

// loadedPath is unknown here.
func loadedPath(uintptr) string { return "" }
