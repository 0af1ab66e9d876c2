package runtime

import "errors"

// Sentinel errors, for errors.Is. Backend errors wrap these where they apply, beside their
// own typed result codes.
var (
	// ErrUnavailable: the backend cannot run here (no library, no device, wrong OS).
	ErrUnavailable = errors.New("gumbel/runtime: backend unavailable")
	// ErrClosed: the device, stream or module was closed.
	ErrClosed = errors.New("gumbel/runtime: closed")
	// ErrInvalidArgument: a size, offset, shape or argument is out of range.
	ErrInvalidArgument = errors.New("gumbel/runtime: invalid argument")
	// ErrNoKernel: the module has no kernel of that name.
	ErrNoKernel = errors.New("gumbel/runtime: no such kernel")
	// ErrCompile: run-time compilation of a program failed; the error carries the log.
	ErrCompile = errors.New("gumbel/runtime: kernel compilation failed")
	// ErrOutOfMemory: the device could not allocate.
	ErrOutOfMemory = errors.New("gumbel/runtime: out of device memory")
	// ErrUnknownBackend: GUMBEL_BACKEND or an option named no registered backend.
	ErrUnknownBackend = errors.New("gumbel/runtime: unknown backend")
)

// CompileError carries a compiler's log.
type CompileError struct {
	Backend Backend
	Program string
	Log     string
	Err     error
}

func (e *CompileError) Error() string {
	msg := string(e.Backend) + ": compiling " + e.Program
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	if e.Log != "" {
		msg += "\n" + e.Log
	}
	return msg
}

// Unwrap returns ErrCompile and the compiler's own error.
func (e *CompileError) Unwrap() []error { return []error{ErrCompile, e.Err} }
