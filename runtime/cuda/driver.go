package cuda

import (
	"fmt"
	"strconv"
	"unsafe"

	"github.com/gumbel-go/gumbel/internal/dynlib"
	"github.com/gumbel-go/gumbel/runtime"
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

// results describes Result: its C name, the driver's words for it (installed by the
// loaded driver from cuGetErrorName and cuGetErrorString) and the codes behind each of
// the runtime's sentinel errors.
var results = &gpurt.Codes[Result]{CType: "CUresult", Sentinels: map[error][]Result{
	runtime.ErrOutOfMemory:     {ErrorOutOfMemory},
	runtime.ErrInvalidArgument: {ErrorInvalidValue},
	runtime.ErrClosed:          {ErrorContextIsDestroyed, ErrorDeinitialized},
	runtime.ErrUnavailable: {ErrorNoDevice, ErrorInvalidDevice, ErrorStubLibrary, ErrorInsufficientDriver,
		ErrorDeviceUnavailable, ErrorNotInitialized, ErrorSystemDriverMismatch, ErrorCompatNotSupported},
}}

// Error returns the driver's name and description of r, e.g.
// "CUDA_ERROR_OUT_OF_MEMORY: out of memory", or the bare number when no driver can name
// it.
func (r Result) Error() string { return results.Error(r) }

// Is maps driver statuses onto the runtime's sentinel errors, so callers can test
// errors.Is(err, runtime.ErrOutOfMemory) whatever the backend.
func (r Result) Is(target error) bool { return results.Is(r, target) }

// failed wraps a non-success status with the call that returned it, e.g.
// "cuMemAlloc_v2(1048576): CUDA_ERROR_OUT_OF_MEMORY: out of memory".
func failed(call string, r Result) error { return backend.Failed(call, int32(r)) }

// backend names the package to the code it shares with the HIP backend, and says how
// the CUDA driver differs from HIP's.
var backend = &gpurt.Backend{Pkg: "cuda", Brand: "CUDA", Status: gpurt.ErrorOf[Result],
	KernelNotFound: []int32{int32(ErrorNotFound)},
	Owner:          func(ctx uintptr) string { return fmt.Sprintf("context %#x", ctx) }}

// The constants of the calls gumbel makes (cuda.h).
const (
	devAttrCCMajor = 75
	devAttrCCMinor = 76
	devAttrL2Size  = 38 // CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE

	// captureModeRelaxed is CU_STREAM_CAPTURE_MODE_RELAXED: the capture does not
	// forbid other threads' unsafe calls, which the per-call thread locking of this
	// package could otherwise trip over (a goroutine's calls may come from different
	// OS threads).
	captureModeRelaxed = 2
)

// apiConstants are the numbers the shared calls take (cuda.h).
var apiConstants = gpurt.API{
	HostAllocFlags: gpurt.Flag{Value: 0x1, Name: "CU_MEMHOSTALLOC_PORTABLE"},
	StreamFlags:    gpurt.Flag{Value: 0x1, Name: "CU_STREAM_NON_BLOCKING"},
	EventFlags:     gpurt.Flag{Value: 0x0, Name: "CU_EVENT_DEFAULT"},
	FuncMaxThreads: gpurt.Flag{Value: 0, Name: "CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK"},
	Attrs:          gpurt.DeviceAttrs{MaxThreads: 1, MaxBlockX: 2, MaxGridX: 5, WarpSize: 10, Multiprocessors: 16},
}

// driver is libcuda: its path, version and the function pointers gumbel calls, those of
// the code shared with HIP in api.
type driver struct {
	path    string
	version int
	api     gpurt.API

	cuInit, cuDriverGetVersion, cuGetErrorName, cuGetErrorString uintptr
	cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRelease          uintptr
	cuFuncGetParamInfo, cuFuncGetParamCount                      uintptr
	cuStreamBeginCapture, cuStreamEndCapture, cuGraphInstantiate uintptr
	cuGraphLaunch, cuGraphExecDestroy, cuGraphDestroy            uintptr
}

// symbols lists the driver functions gumbel binds. The _v2 names are the ones cuda.h
// maps the plain names to since CUDA 3.2/4.0/11.0; optional ones only refine errors and
// checks.
func (d *driver) symbols() []dynlib.Func {
	req, opt, a := dynlib.Required, dynlib.Optional, &d.api
	return []dynlib.Func{
		req(&d.cuInit, "cuInit"),
		req(&d.cuDriverGetVersion, "cuDriverGetVersion"),
		opt(&d.cuGetErrorName, "cuGetErrorName"),
		opt(&d.cuGetErrorString, "cuGetErrorString"),
		a.DeviceCount.Required("cuDeviceGetCount"),
		a.DeviceGet.Required("cuDeviceGet"),
		a.DeviceName.Required("cuDeviceGetName"),
		a.DeviceAttribute.Required("cuDeviceGetAttribute"),
		a.DeviceTotalMem.Required("cuDeviceTotalMem_v2"),
		req(&d.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"),
		req(&d.cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"),
		a.SetCurrent.Required("cuCtxSetCurrent"),
		a.MemAlloc.Required("cuMemAlloc_v2"),
		a.MemFree.Required("cuMemFree_v2"),
		a.HostAlloc.Required("cuMemHostAlloc"),
		a.HostFree.Required("cuMemFreeHost"),
		a.AddressRange.Required("cuMemGetAddressRange_v2"),
		a.CopyHtoD.Required("cuMemcpyHtoDAsync_v2"),
		a.CopyDtoH.Required("cuMemcpyDtoHAsync_v2"),
		a.Memset.Required("cuMemsetD8Async"),
		a.StreamCreate.Required("cuStreamCreate"),
		a.StreamDestroy.Required("cuStreamDestroy_v2"),
		a.StreamSync.Required("cuStreamSynchronize"),
		a.StreamOwner.Optional("cuStreamGetCtx"),
		a.EventCreate.Required("cuEventCreate"),
		a.EventDestroy.Required("cuEventDestroy_v2"),
		a.EventRecord.Required("cuEventRecord"),
		a.EventSync.Required("cuEventSynchronize"),
		a.EventElapsed.Required("cuEventElapsedTime_v2", "cuEventElapsedTime"),
		a.ModuleLoad.Required("cuModuleLoadData"),
		a.ModuleUnload.Required("cuModuleUnload"),
		a.GetFunction.Required("cuModuleGetFunction"),
		a.FuncAttribute.Required("cuFuncGetAttribute"),
		opt(&d.cuFuncGetParamInfo, "cuFuncGetParamInfo"),
		opt(&d.cuFuncGetParamCount, "cuFuncGetParamCount"),
		opt(&d.cuStreamBeginCapture, "cuStreamBeginCapture_v2"),
		opt(&d.cuStreamEndCapture, "cuStreamEndCapture"),
		opt(&d.cuGraphInstantiate, "cuGraphInstantiateWithFlags"),
		opt(&d.cuGraphLaunch, "cuGraphLaunch"),
		opt(&d.cuGraphExecDestroy, "cuGraphExecDestroy"),
		opt(&d.cuGraphDestroy, "cuGraphDestroy"),
		a.Launch.Required("cuLaunchKernel"),
		a.LaunchEx.Optional("cuLaunchKernelEx"),
	}
}

// loadDriver finds libcuda, binds its functions and initialises it.
func loadDriver(s runtime.LibrarySearch) (*driver, error) {
	h, path, err := openFound(s, "cuInit")
	if err != nil {
		return nil, err
	}
	return newDriver(path, func(name string) uintptr { return dynlib.Symbol(h, name) })
}

// newDriver binds the driver at path through lookup, makes Result.Error ask it for names
// and initialises it.
func newDriver(path string, lookup func(name string) uintptr) (*driver, error) {
	d := &driver{path: path, api: apiConstants}
	if err := dynlib.Bind(path, lookup, d.symbols()); err != nil {
		return nil, err
	}
	results.Use(func(code int32) (string, string) {
		return gpurt.StringOut(d.cuGetErrorName, code), gpurt.StringOut(d.cuGetErrorString, code)
	})
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

// versionString formats a CUDA version number (1000·major + 10·minor), e.g. "13.0".
func versionString(v int) string {
	return strconv.Itoa(v/1000) + "." + strconv.Itoa(v%1000/10)
}
