package hip

import (
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/gumbel-go/gumbel/internal/dynlib"
	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/runtime/internal/gpurt"
)

// RTCResult is a hiprtc status (hiprtcResult).
type RTCResult int32

// hiprtc statuses the package acts on (hiprtc.h).
const (
	RTCSuccess          RTCResult = 0
	RTCErrorOutOfMemory RTCResult = 1
	RTCErrorCompilation RTCResult = 6
)

// rtcResults describes RTCResult; the loaded hiprtc names its codes through
// hiprtcGetErrorString.
var rtcResults = gpurt.RTCCodes[RTCResult]("hiprtcResult")

// Error returns hiprtc's description of r, e.g. "HIPRTC_ERROR_COMPILATION", or the bare
// number when no hiprtc can name it.
func (r RTCResult) Error() string { return rtcResults.Error(r) }

// Is maps hiprtc statuses onto the runtime's sentinel errors.
func (r RTCResult) Is(target error) bool { return rtcResults.Is(r, target) }

// compiler is hiprtc: the functions it shares with NVRTC, and the one for its code.
// Path is the library the functions came from: libhiprtc, or libamdhip64 on ROCm before
// 5.3, which had no libhiprtc.
type compiler struct {
	gpurt.RTC
	hiprtcGetCodeSize, hiprtcGetCode uintptr
}

// loadCompiler finds hiprtc and binds its functions. When s finds no libhiprtc (and names
// no explicit path), the functions are looked up in the HIP runtime that hipRuntime
// loads, where ROCm kept them before 5.3.
func loadCompiler(s runtime.LibrarySearch, hipRuntime func() (*driver, error)) (*compiler, error) {
	lib, path, err := s.Find(dynlib.Open)
	if err != nil {
		if s.EnvVar != "" && strings.TrimSpace(os.Getenv(s.EnvVar)) != "" {
			return nil, err
		}
		drv, derr := hipRuntime()
		if derr != nil {
			return nil, fmt.Errorf("%w; nor is there a HIP runtime to take it from: %w", err, derr)
		}
		lib, path = drv.lib, drv.path
	}
	c, berr := newCompiler(path, func(name string) uintptr { return dynlib.Symbol(lib, name) })
	if berr != nil {
		if err != nil {
			return nil, fmt.Errorf("%w; %w", err, berr)
		}
		return nil, berr
	}
	return c, nil
}

// newCompiler binds the hiprtc at path through lookup, makes RTCResult.Error ask it for
// descriptions and asks its version.
func newCompiler(path string, lookup func(name string) uintptr) (*compiler, error) {
	c := &compiler{RTC: gpurt.RTC{Prefix: "hiprtc", Path: path, Status: gpurt.ErrorOf[RTCResult]}}
	err := c.Bind(lookup, rtcResults.Use,
		dynlib.Required(&c.hiprtcGetCodeSize, "hiprtcGetCodeSize"),
		dynlib.Required(&c.hiprtcGetCode, "hiprtcGetCode"))
	if err != nil {
		return nil, err
	}
	return c, nil
}

// hiprtc is loaded once per process, apart from the HIP runtime: compiling needs no
// device, and CI compiles on machines without one.
var hiprtc struct {
	once sync.Once
	c    *compiler
	err  error
	// mu serialises compilations: older hiprtc releases share LLVM state between
	// programs.
	mu sync.Mutex
}

// loadedCompiler loads hiprtc once.
func loadedCompiler() (*compiler, error) {
	hiprtc.once.Do(func() {
		if err := dynlib.Unsupported("HIP"); err != nil {
			hiprtc.err = err
			return
		}
		hiprtc.c, hiprtc.err = loadCompiler(hiprtcSearch(), loadedDriver)
	})
	return hiprtc.c, hiprtc.err
}

// HIPRTCVersion returns the version of the hiprtc this process uses and the library it
// came from; the error wraps runtime.ErrUnavailable when there is none.
func HIPRTCVersion() (version, library string, err error) {
	c, err := loadedCompiler()
	if err != nil {
		return "", "", err
	}
	return c.VersionString(), c.Path, nil
}

// compile compiles HIP C++ source with its headers (by include name) and the given
// options and returns the code object and the compiler's log. A failed compilation
// returns an error wrapping the hiprtc status; the caller wraps it in a
// runtime.CompileError with the log.
func (c *compiler) compile(name, source string, headers map[string]string, options []string) (image []byte, log string, err error) {
	hiprtc.mu.Lock()
	defer hiprtc.mu.Unlock()
	return c.Program(name+".hip", source, headers, options, gpurt.Output{Size: c.hiprtcGetCodeSize, Get: c.hiprtcGetCode, What: "Code"})
}
