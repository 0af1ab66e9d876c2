//go:build linux || windows

package hip

import "github.com/gumbel-go/gumbel/runtime/internal/dynlib"

// platformErr is nil where HIP can run.
var platformErr error

// The loader of this platform (runtime/internal/dynlib).
var (
	openLibrary  = dynlib.Open
	lookupSymbol = dynlib.Symbol
)
