//go:build !linux && !windows

package cuda

import (
	"fmt"
	goruntime "runtime"

	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/runtime/internal/dynlib"
)

// platformErr says why CUDA cannot run here: NVIDIA ships no CUDA driver for this OS.
var platformErr = fmt.Errorf("%w: CUDA has no driver on %s", runtime.ErrUnavailable, goruntime.GOOS)

// The loader of this platform (runtime/internal/dynlib): it loads nothing.
var (
	openLibrary  = dynlib.Open
	lookupSymbol = dynlib.Symbol
	loadedPath   = dynlib.LoadedPath
)
