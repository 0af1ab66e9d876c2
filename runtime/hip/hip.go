package hip

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/gumbel-go/gumbel/runtime"
)

// Result is a HIP runtime status (hipError_t).
type Result int32

// HIP statuses the package acts on (hip_runtime_api.h).
const (
	Success                    Result = 0
	ErrorInvalidValue          Result = 1
	ErrorOutOfMemory           Result = 2
	ErrorNotInitialized        Result = 3
	ErrorDeinitialized         Result = 4
	ErrorInsufficientDriver    Result = 35
	ErrorInvalidDeviceFunction Result = 98
	ErrorNoDevice              Result = 100
	ErrorInvalidDevice         Result = 101
	ErrorNotFound              Result = 500
	ErrorContextIsDestroyed    Result = 709
)

// resultNamer turns a Result into its name and description; the loaded runtime installs
// one backed by hipGetErrorName and hipGetErrorString.
var resultNamer atomic.Pointer[func(Result) (name, text string)]

// Error returns the runtime's name and description of r, e.g.
// "hipErrorOutOfMemory: out of memory", or the bare number when no runtime can name it.
func (r Result) Error() string {
	var name, text string
	if f := resultNamer.Load(); f != nil {
		name, text = (*f)(r)
	}
	switch {
	case name != "" && text != "" && text != name:
		return name + ": " + text
	case name != "":
		return name
	case text != "":
		return "hipError_t(" + strconv.Itoa(int(r)) + "): " + text
	}
	return "hipError_t(" + strconv.Itoa(int(r)) + ")"
}

// Is maps HIP statuses onto the runtime's sentinel errors, so callers can test
// errors.Is(err, runtime.ErrOutOfMemory) whatever the backend.
func (r Result) Is(target error) bool {
	switch target {
	case runtime.ErrOutOfMemory:
		return r == ErrorOutOfMemory
	case runtime.ErrInvalidArgument:
		return r == ErrorInvalidValue
	case runtime.ErrClosed:
		return r == ErrorDeinitialized || r == ErrorContextIsDestroyed
	case runtime.ErrUnavailable:
		switch r {
		case ErrorNoDevice, ErrorInvalidDevice, ErrorInsufficientDriver, ErrorNotInitialized:
			return true
		}
	}
	return false
}

// failed wraps a non-success status with the call that returned it, e.g.
// "hipMalloc(1048576): hipErrorOutOfMemory: out of memory".
func failed(call string, r Result) error {
	return fmt.Errorf("%s: %w", call, r)
}

// HIP constants (hip_runtime_api.h). The attribute numbers are the same from ROCm 5.0
// through 7.
const (
	attrMaxThreadsPerBlock   = 56
	attrMaxBlockDimX         = 26
	attrMaxGridDimX          = 29
	attrMaxGridDimY          = 30
	attrMaxGridDimZ          = 31
	attrMultiprocessorCount  = 63
	attrWarpSize             = 87
	funcAttrMaxThreadsPerBlk = 0 // HIP_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK
	hostMallocDefault        = 0
	streamNonBlocking        = 1

	// Where gcnArchName (char[256]) sits in hipDeviceProp_t: ROCm 6 and later export
	// hipGetDevicePropertiesR0600 with the 1472-byte R0600 layout; ROCm 5 exports only
	// hipGetDeviceProperties with the 792-byte R0000 layout.
	gcnArchNameOffsetR0600 = 1160
	gcnArchNameOffsetR0000 = 396
	gcnArchNameSize        = 256
	// devicePropBufferSize is more than either layout needs, so a runtime whose struct
	// grew cannot write past the buffer.
	devicePropBufferSize = 8192
)

// driver is libamdhip64: its path, version and the function pointers gumbel calls.
type driver struct {
	path    string
	lib     uintptr
	version int

	hipInit, hipRuntimeGetVersion, hipGetErrorName, hipGetErrorString     uintptr
	hipGetDeviceCount, hipDeviceGet, hipSetDevice, hipDeviceGetName       uintptr
	hipDeviceGetAttribute, hipDeviceTotalMem                              uintptr
	hipGetDevicePropertiesR0600, hipGetDeviceProperties                   uintptr
	hipMalloc, hipFree, hipHostMalloc, hipHostFree, hipMemGetAddressRange uintptr
	hipMemcpyHtoDAsync, hipMemcpyDtoHAsync, hipMemsetD8Async              uintptr
	hipStreamCreateWithFlags, hipStreamDestroy, hipStreamSynchronize      uintptr
	hipEventCreate, hipEventDestroy, hipEventRecord, hipEventSynchronize  uintptr
	hipEventElapsedTime                                                   uintptr
	hipModuleLoadData, hipModuleUnload, hipModuleGetFunction              uintptr
	hipModuleLaunchKernel, hipFuncGetAttribute, hipStreamGetDevice        uintptr
}

// symbols lists the runtime functions gumbel binds; optional ones only refine what a
// device reports.
func (d *driver) symbols() []symbol {
	req := func(dst *uintptr, name string) symbol { return symbol{name: name, dst: dst} }
	opt := func(dst *uintptr, name string) symbol { return symbol{name: name, dst: dst, optional: true} }
	return []symbol{
		req(&d.hipInit, "hipInit"),
		req(&d.hipRuntimeGetVersion, "hipRuntimeGetVersion"),
		req(&d.hipGetErrorName, "hipGetErrorName"),
		req(&d.hipGetErrorString, "hipGetErrorString"),
		req(&d.hipGetDeviceCount, "hipGetDeviceCount"),
		req(&d.hipDeviceGet, "hipDeviceGet"),
		req(&d.hipSetDevice, "hipSetDevice"),
		req(&d.hipDeviceGetName, "hipDeviceGetName"),
		req(&d.hipDeviceGetAttribute, "hipDeviceGetAttribute"),
		opt(&d.hipDeviceTotalMem, "hipDeviceTotalMem"),
		opt(&d.hipGetDevicePropertiesR0600, "hipGetDevicePropertiesR0600"),
		opt(&d.hipGetDeviceProperties, "hipGetDeviceProperties"),
		req(&d.hipMalloc, "hipMalloc"),
		req(&d.hipFree, "hipFree"),
		req(&d.hipHostMalloc, "hipHostMalloc"),
		req(&d.hipHostFree, "hipHostFree"),
		req(&d.hipMemGetAddressRange, "hipMemGetAddressRange"),
		req(&d.hipMemcpyHtoDAsync, "hipMemcpyHtoDAsync"),
		req(&d.hipMemcpyDtoHAsync, "hipMemcpyDtoHAsync"),
		req(&d.hipMemsetD8Async, "hipMemsetD8Async"),
		req(&d.hipStreamCreateWithFlags, "hipStreamCreateWithFlags"),
		req(&d.hipStreamDestroy, "hipStreamDestroy"),
		req(&d.hipStreamSynchronize, "hipStreamSynchronize"),
		req(&d.hipEventCreate, "hipEventCreate"),
		req(&d.hipEventDestroy, "hipEventDestroy"),
		req(&d.hipEventRecord, "hipEventRecord"),
		req(&d.hipEventSynchronize, "hipEventSynchronize"),
		req(&d.hipEventElapsedTime, "hipEventElapsedTime"),
		req(&d.hipModuleLoadData, "hipModuleLoadData"),
		req(&d.hipModuleUnload, "hipModuleUnload"),
		req(&d.hipModuleGetFunction, "hipModuleGetFunction"),
		req(&d.hipModuleLaunchKernel, "hipModuleLaunchKernel"),
		opt(&d.hipFuncGetAttribute, "hipFuncGetAttribute"),
		opt(&d.hipStreamGetDevice, "hipStreamGetDevice"),
	}
}

// loadDriver finds libamdhip64 and binds its functions. It does not initialise HIP, so
// hiprtc can borrow the library on a machine without a GPU.
func loadDriver(s runtime.LibrarySearch) (*driver, error) {
	lib, path, err := s.Find(openLibrary)
	if err != nil {
		return nil, err
	}
	d := &driver{path: path, lib: lib}
	if err := bindSymbols(lib, path, d.symbols()); err != nil {
		return nil, err
	}
	if d.hipGetDevicePropertiesR0600 == 0 && d.hipGetDeviceProperties == 0 {
		return nil, fmt.Errorf("%w: %s lacks hipGetDeviceProperties", runtime.ErrUnavailable, path)
	}
	d.installNamer()
	var v int32
	if r := Result(callN(d.hipRuntimeGetVersion, uintptr(unsafe.Pointer(&v)))); r != Success {
		return nil, failed("hipRuntimeGetVersion", r)
	}
	d.version = int(v)
	return d, nil
}

// installNamer makes Result.Error ask this runtime for names and descriptions.
func (d *driver) installNamer() {
	f := func(r Result) (name, text string) {
		return cString(callN(d.hipGetErrorName, uintptr(r)), 512), cString(callN(d.hipGetErrorString, uintptr(r)), 512)
	}
	resultNamer.Store(&f)
}

// versionString formats a HIP version number (10⁷·major + 10⁵·minor + patch), e.g.
// "5.2.21153".
func versionString(v int) string {
	return strconv.Itoa(v/10000000) + "." + strconv.Itoa(v/100000%100) + "." + strconv.Itoa(v%100000)
}

// process holds the HIP runtime, loaded and initialised once per process; devices of
// every ordinal share it. hiprtc is loaded separately (see loadCompiler), because
// compiling needs no device.
var process struct {
	loadOnce sync.Once
	drv      *driver
	loadErr  error

	initOnce sync.Once
	initErr  error
}

// loadedDriver loads libamdhip64 once, without initialising it.
func loadedDriver() (*driver, error) {
	process.loadOnce.Do(func() {
		if platformErr != nil {
			process.loadErr = platformErr
			return
		}
		process.drv, process.loadErr = loadDriver(hipSearch())
	})
	return process.drv, process.loadErr
}

// initialized loads libamdhip64 and runs hipInit once. A machine with the library but no
// usable GPU fails here (hipInit answers hipErrorInvalidDevice or hipErrorNoDevice).
func initialized() (*driver, error) {
	d, err := loadedDriver()
	if err != nil {
		return nil, err
	}
	process.initOnce.Do(func() {
		if r := Result(callN(d.hipInit, 0)); r != Success {
			process.initErr = fmt.Errorf("%w: %w", runtime.ErrUnavailable, failed("hipInit(0)", r))
		}
	})
	if process.initErr != nil {
		return nil, process.initErr
	}
	return d, nil
}

// callN calls a C function for set-up work and returns its raw result word. Arguments
// written as uintptr(unsafe.Pointer(p)) in the call expression keep p alive and in place
// until the call returns (the uintptrescapes rule); the variadic slice makes this
// allocate, so the per-step paths use callFrame instead.
//
//go:uintptrescapes
func callN(fn uintptr, args ...uintptr) uintptr {
	r, _, _ := purego.SyscallN(fn, args...)
	return r
}

// callFrame calls fn with the words of frame, a slice the caller keeps and reuses, so
// nothing is allocated. Whatever the words point to must be C memory, or Go memory the
// caller keeps alive and in place.
func callFrame(fn uintptr, frame []uintptr) Result {
	r, _, _ := purego.SyscallN(fn, frame...)
	return Result(int32(r))
}

// cString copies a NUL-terminated C string of at most max bytes; NULL gives "".
func cString(p uintptr, max int) string {
	if p == 0 {
		return ""
	}
	base := cPointer(p)
	n := 0
	for n < max && *(*byte)(unsafe.Add(base, n)) != 0 {
		n++
	}
	return string(unsafe.Slice((*byte)(base), n))
}

// cPointer turns the address of C memory into a pointer. The detour through memory
// avoids the uintptr-to-pointer conversion that vet rightly distrusts for Go memory; C
// memory is not the GC's concern.
func cPointer(p uintptr) unsafe.Pointer {
	return *(*unsafe.Pointer)(unsafe.Pointer(&p))
}

// cBytes returns s as NUL-terminated bytes.
func cBytes(s string) []byte {
	b := make([]byte, len(s)+1)
	copy(b, s)
	return b
}
