//go:build !linux && !windows

package dynlib

import (
	"errors"
	goruntime "runtime"
)

// Open never loads anything here.
func Open(string) (uintptr, error) {
	return 0, errors.New("dynlib: no CUDA or HIP libraries on " + goruntime.GOOS)
}

// Symbol never finds anything here.
func Symbol(uintptr, string) uintptr { return 0 }

// LoadedPath is empty here.
func LoadedPath(uintptr) string { return "" }
