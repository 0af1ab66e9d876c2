package gpurt

import (
	"fmt"
	"strconv"
	"sync/atomic"
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

// Backend is what the shared code needs to know of one backend: its names, for messages,
// and its status type, for errors.
type Backend struct {
	// Pkg starts messages, e.g. "cuda" in "cuda: Alloc(-1): negative size".
	Pkg string
	// Brand names the backend's objects, e.g. "CUDA" in "not CUDA device memory".
	Brand string
	// Status turns a C status code into the backend's typed status (its Result), which
	// names itself and maps onto the runtime's sentinel errors.
	Status func(code int32) error
}

// Failed wraps a non-success status with the call that returned it, e.g.
// "cuMemsetD8Async(0x1000, 0, 64): CUDA_ERROR_INVALID_VALUE: invalid argument".
func (b *Backend) Failed(call string, code int32) error {
	return fmt.Errorf("%s: %w", call, b.Status(code))
}
