package gpurt

import (
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// CallN calls a C function for set-up work and returns its raw result word. Arguments
// written as uintptr(unsafe.Pointer(p)) in the call expression keep p alive and in place
// until the call returns (the uintptrescapes rule); the variadic slice makes this
// allocate, so the per-step paths use a [Frame] instead.
//
//go:uintptrescapes
func CallN(fn uintptr, args ...uintptr) uintptr {
	r, _, _ := purego.SyscallN(fn, args...)
	return r
}

// Frame makes per-step C calls without allocating: the argument slice handed to purego
// lives in the frame (on the heap with its owner), where a variadic call would allocate
// one each time. Hold the frame (Begin) while a call is made through it.
type Frame struct {
	mu  sync.Mutex
	sys [11]uintptr
}

// Call calls fn with words (at most 11, the most any driver call gumbel makes takes) and
// returns its status. The words are copied into the frame, so the caller's argument list
// stays on its stack.
func (f *Frame) Call(fn uintptr, words ...uintptr) int32 {
	n := copy(f.sys[:], words)
	r, _, _ := purego.SyscallN(fn, f.sys[:n]...)
	return int32(r)
}

// CString returns s as NUL-terminated bytes.
func CString(s string) []byte {
	b := make([]byte, len(s)+1)
	copy(b, s)
	return b
}

// GoString copies a NUL-terminated C string at p of at most max bytes; NULL gives "".
func GoString(p uintptr, max int) string {
	if p == 0 {
		return ""
	}
	base := CPointer(p)
	n := 0
	for n < max && *(*byte)(unsafe.Add(base, n)) != 0 {
		n++
	}
	return string(unsafe.Slice((*byte)(base), n))
}

// CPointer turns the address of C memory into a pointer. The detour through memory
// avoids the uintptr-to-pointer conversion that vet rightly distrusts for Go memory; C
// memory is not the GC's concern.
func CPointer(p uintptr) unsafe.Pointer {
	return *(*unsafe.Pointer)(unsafe.Pointer(&p))
}

// TrimNUL cuts b at its first NUL byte, as C reads a char array.
func TrimNUL(b []byte) []byte {
	for i, c := range b {
		if c == 0 {
			return b[:i]
		}
	}
	return b
}
