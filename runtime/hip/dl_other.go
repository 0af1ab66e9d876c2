//go:build !linux && !windows

package hip

import (
	"errors"
	"fmt"
	goruntime "runtime"

	"github.com/gumbel-go/gumbel/runtime"
)

// platformErr says why HIP cannot run here: AMD ships the HIP runtime for Linux and
// Windows only.
var platformErr = fmt.Errorf("%w: HIP has no runtime on %s", runtime.ErrUnavailable, goruntime.GOOS)

// openLibrary never loads anything here.
func openLibrary(string) (uintptr, error) { return 0, errors.New("not supported") }

// lookupSymbol never finds anything here.
func lookupSymbol(uintptr, string) uintptr { return 0 }
