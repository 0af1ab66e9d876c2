package cuda

import (
	"fmt"
	"strconv"
	"unsafe"

	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/runtime/internal/dynlib"
	"github.com/gumbel-go/gumbel/runtime/internal/gpurt"
)

// Result is a CUDA driver API status (CUresult).
type Result int32

// Driver statuses the package acts on (cuda.h).
const (
	Success                   Result = 0
	ErrorInvalidValue         Result = 1
	ErrorOutOfMemory          Result = 2
	ErrorNotInitialized       Result = 3
	ErrorDeinitialized        Result = 4
	ErrorStubLibrary          Result = 34
	ErrorInsufficientDriver   Result = 35
	ErrorDeviceUnavailable    Result = 46
	ErrorNoDevice             Result = 100
	ErrorInvalidDevice        Result = 101
	ErrorInvalidContext       Result = 201
	ErrorNoBinaryForGPU       Result = 209
	ErrorUnsupportedPTX       Result = 222
	ErrorNotFound             Result = 500
	ErrorContextIsDestroyed   Result = 709
	ErrorSystemDriverMismatch Result = 803
	ErrorCompatNotSupported   Result = 804
)

// resultNamer turns a Result into its name and description; the loaded driver installs
// one backed by cuGetErrorName and cuGetErrorString.
var resultNamer gpurt.Namer[Result]

// Error returns the driver's name and description of r, e.g.
// "CUDA_ERROR_OUT_OF_MEMORY: out of memory", or the bare number when no driver can name
// it.
func (r Result) Error() string { return resultNamer.Describe(r, "CUresult") }

// Is maps driver statuses onto the runtime's sentinel errors, so callers can test
// errors.Is(err, runtime.ErrOutOfMemory) whatever the backend.
func (r Result) Is(target error) bool {
	switch target {
	case runtime.ErrOutOfMemory:
		return r == ErrorOutOfMemory
	case runtime.ErrInvalidArgument:
		return r == ErrorInvalidValue
	case runtime.ErrClosed:
		return r == ErrorContextIsDestroyed || r == ErrorDeinitialized
	case runtime.ErrUnavailable:
		switch r {
		case ErrorNoDevice, ErrorInvalidDevice, ErrorStubLibrary, ErrorInsufficientDriver, ErrorDeviceUnavailable,
			ErrorNotInitialized, ErrorSystemDriverMismatch, ErrorCompatNotSupported:
			return true
		}
	}
	return false
}

// failed wraps a non-success status with the call that returned it, e.g.
// "cuMemAlloc_v2(1048576): CUDA_ERROR_OUT_OF_MEMORY: out of memory".
func failed(call string, r Result) error { return backend.Failed(call, int32(r)) }

// backend names the package to the code it shares with the HIP backend.
var backend = &gpurt.Backend{Pkg: "cuda", Brand: "CUDA", Status: func(code int32) error { return Result(code) }}

// CUDA driver constants (cuda.h).
const (
	devAttrMaxThreadsPerBlock = 1
	devAttrMaxBlockDimX       = 2
	devAttrMaxGridDimX        = 5
	devAttrWarpSize           = 10
	devAttrMultiprocessors    = 16
	devAttrCCMajor            = 75
	devAttrCCMinor            = 76

	funcAttrMaxThreadsPerBlock = 0

	streamNonBlocking    = 0x1
	eventDefault         = 0x0
	memHostAllocPortable = 0x1
)

// driver is libcuda: its path, version and the function pointers gumbel calls.
type driver struct {
	path    string
	version int

	cuInit, cuDriverGetVersion, cuGetErrorName, cuGetErrorString                uintptr
	cuDeviceGetCount, cuDeviceGet, cuDeviceGetName, cuDeviceGetAttribute        uintptr
	cuDeviceTotalMem, cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRelease       uintptr
	cuCtxSetCurrent                                                             uintptr
	cuMemAlloc, cuMemFree, cuMemHostAlloc, cuMemFreeHost, cuMemGetAddressRange  uintptr
	cuMemcpyHtoDAsync, cuMemcpyDtoHAsync, cuMemsetD8Async                       uintptr
	cuStreamCreate, cuStreamDestroy, cuStreamSynchronize, cuStreamGetCtx        uintptr
	cuEventCreate, cuEventDestroy, cuEventRecord, cuEventSynchronize            uintptr
	cuEventElapsedTime                                                          uintptr
	cuModuleLoadData, cuModuleUnload, cuModuleGetFunction, cuFuncGetAttribute   uintptr
	cuFuncGetParamInfo, cuFuncGetParamCount, cuLaunchKernel                     uintptr
	cuStreamBeginCapture, cuStreamEndCapture, cuGraphInstantiate, cuGraphLaunch uintptr
	cuGraphExecDestroy, cuGraphDestroy                                          uintptr
}

// symbols lists the driver functions gumbel binds. The _v2 names are the ones cuda.h
// maps the plain names to since CUDA 3.2/4.0/11.0; optional ones only refine errors and
// checks.
func (d *driver) symbols() []dynlib.Func {
	req, opt := dynlib.Required, dynlib.Optional
	return []dynlib.Func{
		req(&d.cuInit, "cuInit"),
		req(&d.cuDriverGetVersion, "cuDriverGetVersion"),
		opt(&d.cuGetErrorName, "cuGetErrorName"),
		opt(&d.cuGetErrorString, "cuGetErrorString"),
		req(&d.cuDeviceGetCount, "cuDeviceGetCount"),
		req(&d.cuDeviceGet, "cuDeviceGet"),
		req(&d.cuDeviceGetName, "cuDeviceGetName"),
		req(&d.cuDeviceGetAttribute, "cuDeviceGetAttribute"),
		req(&d.cuDeviceTotalMem, "cuDeviceTotalMem_v2"),
		req(&d.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"),
		req(&d.cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"),
		req(&d.cuCtxSetCurrent, "cuCtxSetCurrent"),
		req(&d.cuMemAlloc, "cuMemAlloc_v2"),
		req(&d.cuMemFree, "cuMemFree_v2"),
		req(&d.cuMemHostAlloc, "cuMemHostAlloc"),
		req(&d.cuMemFreeHost, "cuMemFreeHost"),
		req(&d.cuMemGetAddressRange, "cuMemGetAddressRange_v2"),
		req(&d.cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2"),
		req(&d.cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2"),
		req(&d.cuMemsetD8Async, "cuMemsetD8Async"),
		req(&d.cuStreamCreate, "cuStreamCreate"),
		req(&d.cuStreamDestroy, "cuStreamDestroy_v2"),
		req(&d.cuStreamSynchronize, "cuStreamSynchronize"),
		opt(&d.cuStreamGetCtx, "cuStreamGetCtx"),
		req(&d.cuEventCreate, "cuEventCreate"),
		req(&d.cuEventDestroy, "cuEventDestroy_v2"),
		req(&d.cuEventRecord, "cuEventRecord"),
		req(&d.cuEventSynchronize, "cuEventSynchronize"),
		req(&d.cuEventElapsedTime, "cuEventElapsedTime_v2", "cuEventElapsedTime"),
		req(&d.cuModuleLoadData, "cuModuleLoadData"),
		req(&d.cuModuleUnload, "cuModuleUnload"),
		req(&d.cuModuleGetFunction, "cuModuleGetFunction"),
		req(&d.cuFuncGetAttribute, "cuFuncGetAttribute"),
		opt(&d.cuFuncGetParamInfo, "cuFuncGetParamInfo"),
		opt(&d.cuFuncGetParamCount, "cuFuncGetParamCount"),
		opt(&d.cuStreamBeginCapture, "cuStreamBeginCapture_v2"),
		opt(&d.cuStreamEndCapture, "cuStreamEndCapture"),
		opt(&d.cuGraphInstantiate, "cuGraphInstantiateWithFlags"),
		opt(&d.cuGraphLaunch, "cuGraphLaunch"),
		opt(&d.cuGraphExecDestroy, "cuGraphExecDestroy"),
		opt(&d.cuGraphDestroy, "cuGraphDestroy"),
		req(&d.cuLaunchKernel, "cuLaunchKernel"),
	}
}

// loadDriver finds libcuda, binds its functions and initialises it.
func loadDriver(s runtime.LibrarySearch) (*driver, error) {
	h, path, err := openFound(s, "cuInit")
	if err != nil {
		return nil, err
	}
	d := &driver{path: path}
	if err := dynlib.Bind(path, func(n string) uintptr { return lookupSymbol(h, n) }, d.symbols()); err != nil {
		return nil, err
	}
	d.installNamer()
	if r := Result(gpurt.CallN(d.cuInit, 0)); r != Success {
		err := failed("cuInit(0)", r)
		if r == ErrorStubLibrary {
			err = fmt.Errorf("%w: %s is the toolkit's stub library: %w", runtime.ErrUnavailable, path, err)
		}
		return nil, err
	}
	var v int32
	if r := Result(gpurt.CallN(d.cuDriverGetVersion, uintptr(unsafe.Pointer(&v)))); r != Success {
		return nil, failed("cuDriverGetVersion", r)
	}
	d.version = int(v)
	return d, nil
}

// installNamer makes Result.Error ask this driver for names and descriptions.
func (d *driver) installNamer() {
	f := func(r Result) (name, text string) {
		ask := func(fn uintptr) string {
			if fn == 0 {
				return ""
			}
			var p uintptr // a static C string
			if Result(gpurt.CallN(fn, uintptr(r), uintptr(unsafe.Pointer(&p)))) != Success {
				return ""
			}
			return gpurt.GoString(p, 512)
		}
		return ask(d.cuGetErrorName), ask(d.cuGetErrorString)
	}
	resultNamer.Store(&f)
}

// versionString formats a CUDA version number (1000·major + 10·minor), e.g. "13.0".
func versionString(v int) string {
	return strconv.Itoa(v/1000) + "." + strconv.Itoa(v%1000/10)
}
