//go:build windows

package dynlib

import "syscall"

// Open loads a DLL by name or path.
func Open(path string) (uintptr, error) {
	h, err := syscall.LoadLibrary(path)
	return uintptr(h), err
}

// Symbol returns the address of an exported function, or 0 when it is missing.
func Symbol(lib uintptr, name string) uintptr {
	p, err := syscall.GetProcAddress(syscall.Handle(lib), name)
	if err != nil {
		return 0
	}
	return p
}

// LoadedPath is unknown on Windows: empty.
func LoadedPath(uintptr) string { return "" }
