//go:build windows

package cuda

import "syscall"

// platformErr is nil where CUDA can run.
var platformErr error

// openLibrary loads a DLL by name or path.
func openLibrary(path string) (uintptr, error) {
	h, err := syscall.LoadLibrary(path)
	return uintptr(h), err
}

// lookupSymbol returns the address of an exported function, or 0 when it is missing.
func lookupSymbol(lib uintptr, name string) uintptr {
	p, err := syscall.GetProcAddress(syscall.Handle(lib), name)
	if err != nil {
		return 0
	}
	return p
}

// loadedPath is unknown on Windows; the candidate's own name is reported instead.
func loadedPath(uintptr) string { return "" }
