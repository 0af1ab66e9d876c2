//go:build linux

package hip

import "github.com/ebitengine/purego"

// platformErr is nil where HIP can run.
var platformErr error

// openLibrary loads a shared library by name or path. RTLD_LOCAL keeps HIP's symbols
// (and the LLVM inside hiprtc) out of the process's global namespace.
func openLibrary(path string) (uintptr, error) {
	return purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
}

// lookupSymbol returns the address of an exported function, or 0 when it is missing.
func lookupSymbol(lib uintptr, name string) uintptr {
	p, err := purego.Dlsym(lib, name)
	if err != nil {
		return 0
	}
	return p
}
