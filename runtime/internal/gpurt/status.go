package gpurt

import (
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"unsafe"

	"github.com/gumbel-go/gumbel/runtime"
)

// Namer turns a C library's status codes into words. The loaded library installs a
// lookup (Store) backed by its own name and string functions; until then, and for codes
// it cannot name, a status reads as its C type and number.
type Namer[R ~int32] struct {
	atomic.Pointer[func(R) (name, text string)]
}

// Describe returns "name: text", or whichever of the two the library gave, or
// "cType(number)" with the text when there is no name. A text that only repeats the name
// is dropped (HIP's hipGetErrorString does that for some codes).
func (n *Namer[R]) Describe(r R, cType string) string {
	var name, text string
	if f := n.Load(); f != nil {
		name, text = (*f)(r)
	}
	number := cType + "(" + strconv.Itoa(int(r)) + ")"
	switch {
	case name != "" && text != "" && text != name:
		return name + ": " + text
	case name != "":
		return name
	case text != "":
		return number + ": " + text
	}
	return number
}

// Codes describes one C library's status type: its C name, the library's own words for
// its codes (the embedded Namer), and which codes mean which of the runtime's sentinel
// errors. A backend's typed status (cuda.Result, hip.RTCResult, ...) implements error and
// errors.Is through it, so the mapping is a table rather than code.
type Codes[R ~int32] struct {
	Namer[R]
	// CType names the status when the library cannot, as in "CUresult(2)".
	CType string
	// Sentinels lists, for each runtime sentinel, the codes errors.Is matches to it.
	Sentinels map[error][]R
}

// Error describes r (see Namer.Describe).
func (c *Codes[R]) Error(r R) string { return c.Describe(r, c.CType) }

// Is reports whether r means target.
func (c *Codes[R]) Is(r R, target error) bool { return slices.Contains(c.Sentinels[target], r) }

// Use makes words, the loaded library's name and description of a code, the words of
// Error.
func (c *Codes[R]) Use(words func(code int32) (name, text string)) {
	f := func(r R) (string, string) { return words(int32(r)) }
	c.Store(&f)
}

// RTCCodes describes the status type of a run-time compiler of NVRTC's interface:
// hiprtc numbers its statuses as NVRTC does (1 out of memory, 6 compilation failed).
func RTCCodes[R ~int32](cType string) *Codes[R] {
	return &Codes[R]{CType: cType, Sentinels: map[error][]R{runtime.ErrOutOfMemory: {1}, runtime.ErrCompile: {6}}}
}

// ErrorOf returns a call's status word as the typed status R, or nil for 0, which is
// success in every library here.
func ErrorOf[R interface {
	~int32
	error
}](code int32) error {
	if code == 0 {
		return nil
	}
	return R(code)
}

// StringOut asks fn(code, &s) for a static C string, as cuGetErrorName does; "" when fn
// is missing or fails.
func StringOut(fn uintptr, code int32) string {
	if fn == 0 {
		return ""
	}
	var p uintptr
	if CallN(fn, uintptr(code), uintptr(unsafe.Pointer(&p))) != 0 {
		return ""
	}
	return GoString(p, 512)
}

// StringOf returns the static C string fn(code) returns, as hipGetErrorName and
// nvrtcGetErrorString do; "" when fn is missing.
func StringOf(fn uintptr, code int32) string {
	if fn == 0 {
		return ""
	}
	return GoString(CallN(fn, uintptr(code)), 512)
}

// Backend is what the shared code needs to know of one backend: its names, for messages,
// its status type, for errors, and the few ways its driver behaves differently.
type Backend struct {
	// Pkg starts messages, e.g. "cuda" in "cuda: Alloc(-1): negative size".
	Pkg string
	// Brand names the backend's objects, e.g. "CUDA" in "is not a CUDA buffer".
	Brand string
	// Status turns a non-zero C status code into the backend's typed status (its
	// Result), which names itself and maps onto the runtime's sentinel errors.
	Status func(code int32) error
	// KernelNotFound lists the codes with which API.GetFunction says that a module has no
	// kernel of the name asked.
	KernelNotFound []int32
	// SyncPageable is set when the driver may still read or write Go (pageable) memory
	// after an asynchronous copy returns (HIP): such a copy waits for its stream before
	// it returns, since the GC must be free to reuse the memory once the call does. CUDA
	// stages a copy from Go memory before returning and finishes one into it.
	SyncPageable bool
	// Owner names, in messages, what API.StreamOwner answers and Device.Current holds:
	// a context or a device number.
	Owner func(word uintptr) string
}

// Failed wraps a non-success status with the call that returned it, e.g.
// "cuMemsetD8Async(0x1000, 0, 64): CUDA_ERROR_INVALID_VALUE: invalid argument".
func (b *Backend) Failed(call string, code int32) error {
	return fmt.Errorf("%s: %w", call, b.Status(code))
}
