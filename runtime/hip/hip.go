package hip

import (
	"fmt"
	"strconv"
	"sync"
	"unsafe"

	"github.com/gumbel-go/gumbel/internal/dynlib"
	"github.com/gumbel-go/gumbel/runtime"
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

// results describes Result: its C name, the runtime's words for it (installed by the
// loaded runtime from hipGetErrorName and hipGetErrorString) and the codes behind each
// of the runtime's sentinel errors.
var results = &gpurt.Codes[Result]{CType: "hipError_t", Sentinels: map[error][]Result{
	runtime.ErrOutOfMemory:     {ErrorOutOfMemory},
	runtime.ErrInvalidArgument: {ErrorInvalidValue},
	runtime.ErrClosed:          {ErrorDeinitialized, ErrorContextIsDestroyed},
	runtime.ErrUnavailable:     {ErrorNoDevice, ErrorInvalidDevice, ErrorInsufficientDriver, ErrorNotInitialized},
}}

// Error returns the runtime's name and description of r, e.g.
// "hipErrorOutOfMemory: out of memory", or the bare number when no runtime can name it.
func (r Result) Error() string { return results.Error(r) }

// Is maps HIP statuses onto the runtime's sentinel errors, so callers can test
// errors.Is(err, runtime.ErrOutOfMemory) whatever the backend.
func (r Result) Is(target error) bool { return results.Is(r, target) }

// failed wraps a non-success status with the call that returned it, e.g.
// "hipMalloc(1048576): hipErrorOutOfMemory: out of memory".
func failed(call string, r Result) error { return backend.Failed(call, int32(r)) }

// backend names the package to the code it shares with the CUDA backend, and says how
// the HIP runtime differs from CUDA's driver.
var backend = &gpurt.Backend{Pkg: "hip", Brand: "HIP", Status: gpurt.ErrorOf[Result],
	KernelNotFound: []int32{int32(ErrorNotFound), int32(ErrorInvalidDeviceFunction)},
	SyncPageable:   true,
	Owner:          func(device uintptr) string { return fmt.Sprintf("HIP device %d", device) }}

// apiConstants are the numbers the shared calls take (hip_runtime_api.h). The attribute
// numbers are the same from ROCm 5.0 through 7.
var apiConstants = gpurt.API{
	HostAllocFlags: gpurt.Flag{Value: 0, Name: "hipHostMallocDefault"},
	StreamFlags:    gpurt.Flag{Value: 1, Name: "hipStreamNonBlocking"},
	EventFlags:     gpurt.Flag{Value: 0, Name: "hipEventDefault"},
	FuncMaxThreads: gpurt.Flag{Value: 0, Name: "HIP_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK"},
	Attrs:          gpurt.DeviceAttrs{MaxBlockX: 26, MaxGridX: 29, MaxThreads: 56, Multiprocessors: 63, WarpSize: 87},
}

// Where gcnArchName (char[256]) sits in hipDeviceProp_t: ROCm 6 and later export
// hipGetDevicePropertiesR0600 with the 1472-byte R0600 layout; ROCm 5 exports only
// hipGetDeviceProperties with the 792-byte R0000 layout.
const (
	gcnArchNameOffsetR0600 = 1160
	gcnArchNameOffsetR0000 = 396
	gcnArchNameSize        = 256
	// devicePropBufferSize is more than either layout needs, so a runtime whose struct
	// grew cannot write past the buffer.
	devicePropBufferSize = 8192
)

// driver is libamdhip64: its path, version and the function pointers gumbel calls, those
// of the code shared with CUDA in api.
type driver struct {
	path    string
	lib     uintptr
	version int
	api     gpurt.API

	hipInit, hipRuntimeGetVersion, hipGetErrorName, hipGetErrorString uintptr
	hipGetDevicePropertiesR0600, hipGetDeviceProperties               uintptr
}

// symbols lists the runtime functions gumbel binds; optional ones only refine what a
// device reports.
func (d *driver) symbols() []dynlib.Func {
	req, opt, a := dynlib.Required, dynlib.Optional, &d.api
	return []dynlib.Func{
		req(&d.hipInit, "hipInit"),
		req(&d.hipRuntimeGetVersion, "hipRuntimeGetVersion"),
		req(&d.hipGetErrorName, "hipGetErrorName"),
		req(&d.hipGetErrorString, "hipGetErrorString"),
		a.DeviceCount.Required("hipGetDeviceCount"),
		a.DeviceGet.Required("hipDeviceGet"),
		a.SetCurrent.Required("hipSetDevice"),
		a.DeviceName.Required("hipDeviceGetName"),
		a.DeviceAttribute.Required("hipDeviceGetAttribute"),
		a.DeviceTotalMem.Optional("hipDeviceTotalMem"),
		opt(&d.hipGetDevicePropertiesR0600, "hipGetDevicePropertiesR0600"),
		opt(&d.hipGetDeviceProperties, "hipGetDeviceProperties"),
		a.MemAlloc.Required("hipMalloc"),
		a.MemFree.Required("hipFree"),
		a.HostAlloc.Required("hipHostMalloc"),
		a.HostFree.Required("hipHostFree"),
		a.AddressRange.Required("hipMemGetAddressRange"),
		a.CopyHtoD.Required("hipMemcpyHtoDAsync"),
		a.CopyDtoH.Required("hipMemcpyDtoHAsync"),
		a.Memset.Required("hipMemsetD8Async"),
		a.StreamCreate.Required("hipStreamCreateWithFlags"),
		a.StreamDestroy.Required("hipStreamDestroy"),
		a.StreamSync.Required("hipStreamSynchronize"),
		a.StreamOwner.Optional("hipStreamGetDevice"),
		a.EventCreate.Required("hipEventCreateWithFlags"),
		a.EventDestroy.Required("hipEventDestroy"),
		a.EventRecord.Required("hipEventRecord"),
		a.EventSync.Required("hipEventSynchronize"),
		a.EventElapsed.Required("hipEventElapsedTime"),
		a.ModuleLoad.Required("hipModuleLoadData"),
		a.ModuleUnload.Required("hipModuleUnload"),
		a.GetFunction.Required("hipModuleGetFunction"),
		a.FuncAttribute.Optional("hipFuncGetAttribute"),
		a.Launch.Required("hipModuleLaunchKernel"),
	}
}

// loadDriver finds libamdhip64 and binds its functions. It does not initialise HIP, so
// hiprtc can borrow the library on a machine without a GPU.
func loadDriver(s runtime.LibrarySearch) (*driver, error) {
	lib, path, err := s.Find(dynlib.Open)
	if err != nil {
		return nil, err
	}
	d, err := newDriver(path, func(name string) uintptr { return dynlib.Symbol(lib, name) })
	if err != nil {
		return nil, err
	}
	d.lib = lib
	return d, nil
}

// newDriver binds the HIP runtime at path through lookup, makes Result.Error ask it for
// names and descriptions and asks its version.
func newDriver(path string, lookup func(name string) uintptr) (*driver, error) {
	d := &driver{path: path, api: apiConstants}
	if err := dynlib.Bind(path, lookup, d.symbols()); err != nil {
		return nil, err
	}
	if d.hipGetDevicePropertiesR0600 == 0 && d.hipGetDeviceProperties == 0 {
		return nil, fmt.Errorf("%w: %s lacks hipGetDeviceProperties", runtime.ErrUnavailable, path)
	}
	results.Use(func(code int32) (string, string) {
		return gpurt.StringOf(d.hipGetErrorName, code), gpurt.StringOf(d.hipGetErrorString, code)
	})
	var v int32
	if r := Result(gpurt.CallN(d.hipRuntimeGetVersion, uintptr(unsafe.Pointer(&v)))); r != Success {
		return nil, failed("hipRuntimeGetVersion", r)
	}
	d.version = int(v)
	return d, nil
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
		if err := dynlib.Unsupported("HIP"); err != nil {
			process.loadErr = err
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
