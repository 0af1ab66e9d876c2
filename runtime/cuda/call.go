package cuda

import (
	"unsafe"

	"github.com/ebitengine/purego"
)

// callN calls a C function for set-up work. Arguments written as
// uintptr(unsafe.Pointer(p)) in the call expression keep p alive and in place until the
// call returns (the uintptrescapes rule); the variadic slice makes this allocate, so the
// per-step paths use [hotCall] instead.
//
//go:uintptrescapes
func callN(fn uintptr, args ...uintptr) uintptr {
	r, _, _ := purego.SyscallN(fn, args...)
	return r
}

// cString returns s as NUL-terminated bytes.
func cString(s string) []byte {
	b := make([]byte, len(s)+1)
	copy(b, s)
	return b
}

// goString copies a NUL-terminated C string of at most max bytes.
func goString(p unsafe.Pointer, max int) string {
	if p == nil {
		return ""
	}
	n := 0
	for n < max && *(*byte)(unsafe.Add(p, n)) != 0 {
		n++
	}
	return string(unsafe.Slice((*byte)(p), n))
}

// trimNUL cuts b at its first NUL byte.
func trimNUL(b []byte) []byte {
	for i, c := range b {
		if c == 0 {
			return b[:i]
		}
	}
	return b
}
