//go:build !linux && !windows

package hip

import (
	"fmt"
	goruntime "runtime"

	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/runtime/internal/dynlib"
)

// platformErr says why HIP cannot run here: AMD ships the HIP runtime for Linux and
// Windows only.
var platformErr = fmt.Errorf("%w: HIP has no runtime on %s", runtime.ErrUnavailable, goruntime.GOOS)

// The loader of this platform (runtime/internal/dynlib): it loads nothing.
var (
	openLibrary  = dynlib.Open
	lookupSymbol = dynlib.Symbol
)
