package hip

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/runtime/internal/dynlib"
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

// rtcNamer turns an RTCResult into its description (as the name, the second word
// unused); the loaded hiprtc installs one backed by hiprtcGetErrorString.
var rtcNamer gpurt.Namer[RTCResult]

// Error returns hiprtc's description of r, e.g. "HIPRTC_ERROR_COMPILATION", or the bare
// number when no hiprtc can name it.
func (r RTCResult) Error() string { return rtcNamer.Describe(r, "hiprtcResult") }

// Is maps hiprtc statuses onto the runtime's sentinel errors.
func (r RTCResult) Is(target error) bool {
	switch target {
	case runtime.ErrOutOfMemory:
		return r == RTCErrorOutOfMemory
	case runtime.ErrCompile:
		return r == RTCErrorCompilation
	}
	return false
}

// compiler is hiprtc: where its functions came from, its version and the function
// pointers.
type compiler struct {
	// path is the library the functions came from: libhiprtc, or libamdhip64 on ROCm
	// before 5.3, which had no libhiprtc.
	path         string
	major, minor int

	hiprtcGetErrorString, hiprtcVersion, hiprtcCreateProgram, hiprtcDestroyProgram uintptr
	hiprtcCompileProgram, hiprtcGetProgramLogSize, hiprtcGetProgramLog             uintptr
	hiprtcGetCodeSize, hiprtcGetCode                                               uintptr
}

func (c *compiler) symbols() []dynlib.Func {
	req := dynlib.Required
	return []dynlib.Func{
		req(&c.hiprtcGetErrorString, "hiprtcGetErrorString"),
		req(&c.hiprtcVersion, "hiprtcVersion"),
		req(&c.hiprtcCreateProgram, "hiprtcCreateProgram"),
		req(&c.hiprtcDestroyProgram, "hiprtcDestroyProgram"),
		req(&c.hiprtcCompileProgram, "hiprtcCompileProgram"),
		req(&c.hiprtcGetProgramLogSize, "hiprtcGetProgramLogSize"),
		req(&c.hiprtcGetProgramLog, "hiprtcGetProgramLog"),
		req(&c.hiprtcGetCodeSize, "hiprtcGetCodeSize"),
		req(&c.hiprtcGetCode, "hiprtcGetCode"),
	}
}

// loadCompiler finds hiprtc and binds its functions. When s finds no libhiprtc (and names
// no explicit path), the functions are looked up in the HIP runtime that hipRuntime
// loads, where ROCm kept them before 5.3.
func loadCompiler(s runtime.LibrarySearch, hipRuntime func() (*driver, error)) (*compiler, error) {
	lib, path, err := s.Find(openLibrary)
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
	c := &compiler{path: path}
	if berr := bindSymbols(lib, path, c.symbols()); berr != nil {
		if err != nil {
			return nil, fmt.Errorf("%w; %w", err, berr)
		}
		return nil, berr
	}
	c.installNamer()
	var major, minor int32
	if r := RTCResult(gpurt.CallN(c.hiprtcVersion, uintptr(unsafe.Pointer(&major)), uintptr(unsafe.Pointer(&minor)))); r != RTCSuccess {
		return nil, fmt.Errorf("%w: hiprtcVersion: %w", runtime.ErrUnavailable, r)
	}
	c.major, c.minor = int(major), int(minor)
	return c, nil
}

func (c *compiler) installNamer() {
	f := func(r RTCResult) (string, string) {
		return gpurt.GoString(gpurt.CallN(c.hiprtcGetErrorString, uintptr(r)), 512), ""
	}
	rtcNamer.Store(&f)
}

// version returns "major.minor" as hiprtc reports it.
func (c *compiler) version() string { return strconv.Itoa(c.major) + "." + strconv.Itoa(c.minor) }

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
		if platformErr != nil {
			hiprtc.err = platformErr
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
	return c.version(), c.path, nil
}

// compile compiles HIP C++ source with its headers (by include name) and the given
// options and returns the code object and the compiler's log. A failed compilation
// returns an error wrapping the hiprtc status; the caller wraps it in a
// runtime.CompileError with the log.
func (c *compiler) compile(name, source string, headers map[string]string, options []string) (image []byte, log string, err error) {
	hiprtc.mu.Lock()
	defer hiprtc.mu.Unlock()
	rtc := gpurt.RTC{Prefix: "hiprtc", Create: c.hiprtcCreateProgram, Destroy: c.hiprtcDestroyProgram,
		Compile: c.hiprtcCompileProgram, LogSize: c.hiprtcGetProgramLogSize, Log: c.hiprtcGetProgramLog,
		Status: func(r uintptr) error {
			if s := RTCResult(r); s != RTCSuccess {
				return s
			}
			return nil
		}}
	return rtc.Program(name+".hip", source, headers, options, gpurt.Output{Size: c.hiprtcGetCodeSize, Get: c.hiprtcGetCode, What: "Code"})
}
