package hip

import (
	"fmt"
	"strconv"
	"sync"
	"unsafe"

	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/runtime/internal/dynlib"
	"github.com/gumbel-go/gumbel/runtime/internal/gpurt"
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
var resultNamer gpurt.Namer[Result]

// Error returns the runtime's name and description of r, e.g.
// "hipErrorOutOfMemory: out of memory", or the bare number when no runtime can name it.
func (r Result) Error() string { return resultNamer.Describe(r, "hipError_t") }

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
func failed(call string, r Result) error { return backend.Failed(call, int32(r)) }

// backend names the package to the code it shares with the CUDA backend.
var backend = &gpurt.Backend{Pkg: "hip", Brand: "HIP", Status: func(code int32) error { return Result(code) }}

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
func (d *driver) symbols() []dynlib.Func {
	req, opt := dynlib.Required, dynlib.Optional
	return []dynlib.Func{
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
	if r := Result(gpurt.CallN(d.hipRuntimeGetVersion, uintptr(unsafe.Pointer(&v)))); r != Success {
		return nil, failed("hipRuntimeGetVersion", r)
	}
	d.version = int(v)
	return d, nil
}

// installNamer makes Result.Error ask this runtime for names and descriptions.
func (d *driver) installNamer() {
	f := func(r Result) (name, text string) {
		return gpurt.GoString(gpurt.CallN(d.hipGetErrorName, uintptr(r)), 512), gpurt.GoString(gpurt.CallN(d.hipGetErrorString, uintptr(r)), 512)
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
		if r := Result(gpurt.CallN(d.hipInit, 0)); r != Success {
			process.initErr = fmt.Errorf("%w: %w", runtime.ErrUnavailable, failed("hipInit(0)", r))
		}
	})
	if process.initErr != nil {
		return nil, process.initErr
	}
	return d, nil
}
