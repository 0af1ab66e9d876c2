//go:build linux && (amd64 || arm64)

package fakegpu

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/gumbel-go/gumbel/runtime/internal/gpurt"
)

// call is one fake C function: its name, whether it needs a device current on the
// calling thread, and what it does (a function of the GPU and 1 to 11 words).
type call struct {
	name   string
	device bool
	fn     any
}

// enter runs f for c: with the fake locked, unless the test made c fail, and, for a call
// that needs one, only with a device current on the thread.
func (c call) enter(f func(g *GPU) int32) uintptr {
	g := active.Load()
	g.mu.Lock()
	defer g.mu.Unlock()
	if r := g.Fail[c.name]; r != 0 {
		return uintptr(r)
	}
	if c.device && !g.onDevice() {
		return InvalidContext
	}
	return uintptr(uint32(f(g)))
}

// callback makes c a C function pointer of as many words as its function takes.
func (c call) callback() uintptr {
	type w = uintptr
	var cb any
	switch f := c.fn.(type) {
	case func(*GPU, w) int32:
		cb = func(a w) w { return c.enter(func(g *GPU) int32 { return f(g, a) }) }
	case func(*GPU, w, w) int32:
		cb = func(a, b w) w { return c.enter(func(g *GPU) int32 { return f(g, a, b) }) }
	case func(*GPU, w, w, w) int32:
		cb = func(a, b, x w) w { return c.enter(func(g *GPU) int32 { return f(g, a, b, x) }) }
	case func(*GPU, w, w, w, w) int32:
		cb = func(a, b, x, y w) w { return c.enter(func(g *GPU) int32 { return f(g, a, b, x, y) }) }
	case func(*GPU, w, w, w, w, w, w) int32:
		cb = func(a, b, x, y, z, v w) w { return c.enter(func(g *GPU) int32 { return f(g, a, b, x, y, z, v) }) }
	case func(*GPU, w, w, w, w, w, w, w, w, w, w, w) int32:
		cb = func(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10 w) w {
			return c.enter(func(g *GPU) int32 { return f(g, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10) })
		}
	default:
		panic(fmt.Sprintf("fakegpu: %s: unsupported function %T", c.name, c.fn))
	}
	return purego.NewCallback(cb)
}

// attributes answers the device attributes, numbered as a dialect numbers them; the Y
// and Z limits follow the X limit's number.
func attributes(maxThreads, blockX, gridX, warp, multiprocessors uintptr) map[uintptr]func(Device) int {
	m := map[uintptr]func(Device) int{
		maxThreads:      func(d Device) int { return d.MaxThreads },
		warp:            func(d Device) int { return d.WarpSize },
		multiprocessors: func(d Device) int { return d.Multiprocessors },
	}
	for i := range uintptr(3) {
		m[blockX+i] = func(d Device) int { return d.MaxBlock[i] }
		m[gridX+i] = func(d Device) int { return d.MaxGrid[i] }
	}
	return m
}

// The attribute numbers of cuda.h, with the compute capability, and of
// hip_runtime_api.h.
var (
	cudaAttrs = func() map[uintptr]func(Device) int {
		m := attributes(1, 2, 5, 10, 16)
		m[75] = func(d Device) int { return d.CC[0] }
		m[76] = func(d Device) int { return d.CC[1] }
		m[38] = func(d Device) int { return d.L2 }
		return m
	}()
	hipAttrs = attributes(56, 26, 29, 87, 63)
)

// statusNames are the drivers' names for the fake's codes, and their description.
var statusNames = map[int32]struct{ cuda, hip, text string }{
	InvalidValue:   {"CUDA_ERROR_INVALID_VALUE", "hipErrorInvalidValue", "invalid argument"},
	OutOfMemory:    {"CUDA_ERROR_OUT_OF_MEMORY", "hipErrorOutOfMemory", "out of memory"},
	NoDevice:       {"CUDA_ERROR_NO_DEVICE", "hipErrorNoDevice", "no device is detected"},
	InvalidDevice:  {"CUDA_ERROR_INVALID_DEVICE", "hipErrorInvalidDevice", "invalid device ordinal"},
	InvalidImage:   {"CUDA_ERROR_INVALID_IMAGE", "hipErrorInvalidImage", "device kernel image is invalid"},
	InvalidContext: {"CUDA_ERROR_INVALID_CONTEXT", "hipErrorInvalidContext", "invalid device context"},
	InvalidHandle:  {"CUDA_ERROR_INVALID_HANDLE", "hipErrorInvalidHandle", "invalid resource handle"},
	NotFound:       {"CUDA_ERROR_NOT_FOUND", "hipErrorNotFound", "named symbol not found"},
	IllegalAddress: {"CUDA_ERROR_ILLEGAL_ADDRESS", "hipErrorIllegalAddress", "an illegal memory access was encountered"},
	NotSupported:   {"CUDA_ERROR_NOT_SUPPORTED", "hipErrorNotSupported", "operation not supported"},
}

// rtcNames are the compilers' names for their codes, after their prefix.
var rtcNames = map[int32]string{0: "SUCCESS", 1: "ERROR_OUT_OF_MEMORY", 5: "ERROR_INVALID_OPTION", CompilationFailed: "ERROR_COMPILATION"}

// cStrings keeps the C strings the fake hands out alive and in place.
var cStrings sync.Map

// staticString returns a NUL-terminated copy of s that lives as long as the process;
// "" gives NULL.
func staticString(s string) uintptr {
	if s == "" {
		return 0
	}
	if b, ok := cStrings.Load(s); ok {
		return uintptr(unsafe.Pointer(&b.([]byte)[0]))
	}
	b, _ := cStrings.LoadOrStore(s, gpurt.CString(s))
	return uintptr(unsafe.Pointer(&b.([]byte)[0]))
}

// cudaString answers cuGetErrorName or cuGetErrorString: the string through pp, or
// CUDA_ERROR_INVALID_VALUE for a code it does not know.
func cudaString(which func(code int32) string) func(code, pp uintptr) uintptr {
	return func(code, pp uintptr) uintptr {
		s := which(int32(code))
		if s == "" {
			return InvalidValue
		}
		putWord(pp, staticString(s))
		return 0
	}
}

// returnedString answers hipGetErrorName and the like: the string itself, NULL for a
// code it does not know.
func returnedString(which func(code int32) string) func(code uintptr) uintptr {
	return func(code uintptr) uintptr { return staticString(which(int32(code))) }
}

// calls lists the fake functions under both dialects' names.
func calls() []call {
	dev := func(name string, fn any) call { return call{name: name, device: true, fn: fn} }
	host := func(name string, fn any) call { return call{name: name, fn: fn} }
	version := func(v int) func(*GPU, uintptr) int32 {
		return func(_ *GPU, p uintptr) int32 { putI32(p, v); return 0 }
	}
	flags := func(*GPU, uintptr) int32 { return 0 }
	putContext := func(p uintptr, device int) { putWord(p, Context(device)) }
	putOrdinal := func(p uintptr, device int) { putI32(p, device) }
	cs := []call{
		host("cuInit", flags),
		host("cuDriverGetVersion", version(13000)),
		host("cuDeviceGetCount", (*GPU).deviceCount),
		host("cuDeviceGet", (*GPU).deviceGet),
		host("cuDeviceGetName", (*GPU).deviceName),
		host("cuDeviceGetAttribute", func(g *GPU, p, attr, d uintptr) int32 { return g.attribute(cudaAttrs, p, attr, d) }),
		host("cuDeviceTotalMem_v2", (*GPU).totalMem),
		host("cuDevicePrimaryCtxRetain", (*GPU).retain),
		host("cuDevicePrimaryCtxRelease_v2", (*GPU).release),
		host("cuCtxSetCurrent", (*GPU).setContext),
		dev("cuStreamGetCtx", func(g *GPU, s, p uintptr) int32 { return g.streamOwner(s, p, putContext) }),
		dev("cuFuncGetParamInfo", (*GPU).paramInfo),
		dev("cuLaunchKernelEx", (*GPU).launchEx),

		host("hipInit", flags),
		host("hipRuntimeGetVersion", version(60241134)),
		host("hipGetDeviceCount", (*GPU).deviceCount),
		host("hipDeviceGet", (*GPU).deviceGet),
		host("hipDeviceGetName", (*GPU).deviceName),
		host("hipDeviceGetAttribute", func(g *GPU, p, attr, d uintptr) int32 { return g.attribute(hipAttrs, p, attr, d) }),
		host("hipDeviceTotalMem", (*GPU).totalMem),
		host("hipGetDevicePropertiesR0600", func(g *GPU, p, d uintptr) int32 { return g.properties(p, d, 1160, 1472) }),
		host("hipGetDeviceProperties", func(g *GPU, p, d uintptr) int32 { return g.properties(p, d, 396, 792) }),
		host("hipSetDevice", (*GPU).setDevice),
		dev("hipStreamGetDevice", func(g *GPU, s, p uintptr) int32 { return g.streamOwner(s, p, putOrdinal) }),
	}
	// The calls both drivers make alike, by CUDA's name and HIP's.
	for _, c := range []struct {
		cuda, hip string
		fn        any
	}{
		{"cuMemAlloc_v2", "hipMalloc", (*GPU).memAlloc},
		{"cuMemFree_v2", "hipFree", (*GPU).memFree},
		{"cuMemHostAlloc", "hipHostMalloc", (*GPU).hostAlloc},
		{"cuMemFreeHost", "hipHostFree", (*GPU).hostFree},
		{"cuMemGetAddressRange_v2", "hipMemGetAddressRange", (*GPU).addressRange},
		{"cuMemsetD8Async", "hipMemsetD8Async", (*GPU).memset},
		{"cuStreamCreate", "hipStreamCreateWithFlags", (*GPU).streamCreate},
		{"cuStreamDestroy_v2", "hipStreamDestroy", (*GPU).streamDestroy},
		{"cuStreamSynchronize", "hipStreamSynchronize", (*GPU).streamSync},
		{"cuEventCreate", "hipEventCreateWithFlags", (*GPU).eventCreate},
		{"cuEventDestroy_v2", "hipEventDestroy", (*GPU).eventDestroy},
		{"cuEventRecord", "hipEventRecord", (*GPU).eventRecord},
		{"cuEventSynchronize", "hipEventSynchronize", (*GPU).eventSync},
		{"cuEventElapsedTime_v2", "hipEventElapsedTime", (*GPU).eventElapsed},
		{"cuModuleLoadData", "hipModuleLoadData", (*GPU).moduleLoad},
		{"cuModuleUnload", "hipModuleUnload", (*GPU).moduleUnload},
		{"cuModuleGetFunction", "hipModuleGetFunction", (*GPU).getFunction},
		{"cuFuncGetAttribute", "hipFuncGetAttribute", (*GPU).funcAttribute},
		{"cuLaunchKernel", "hipModuleLaunchKernel", (*GPU).launch},
	} {
		cs = append(cs, dev(c.cuda, c.fn), dev(c.hip, c.fn))
	}
	for _, c := range []struct{ cuda, hip string }{{"cuMemcpyHtoDAsync_v2", "hipMemcpyHtoDAsync"}, {"cuMemcpyDtoHAsync_v2", "hipMemcpyDtoHAsync"}} {
		toDevice := c.cuda == "cuMemcpyHtoDAsync_v2"
		for _, name := range []string{c.cuda, c.hip} {
			cs = append(cs, dev(name, func(g *GPU, to, from, n, s uintptr) int32 { return g.copyAsync(name, toDevice, to, from, n, s) }))
		}
	}
	// The compilers: NVRTC and hiprtc share their names after the prefix.
	for _, rtc := range []string{"nvrtc", "hiprtc"} {
		cs = append(cs,
			host(rtc+"Version", (*GPU).rtcVersion),
			host(rtc+"CreateProgram", (*GPU).createProgram),
			host(rtc+"DestroyProgram", (*GPU).destroyProgram),
			host(rtc+"CompileProgram", (*GPU).compileProgram),
			host(rtc+"GetProgramLogSize", func(g *GPU, prog, p uintptr) int32 { return g.programText(prog, p, true, true) }),
			host(rtc+"GetProgramLog", func(g *GPU, prog, p uintptr) int32 { return g.programText(prog, p, true, false) }))
	}
	code := func(g *GPU, prog, p uintptr) int32 { return g.programText(prog, p, false, false) }
	codeSize := func(g *GPU, prog, p uintptr) int32 { return g.programText(prog, p, false, true) }
	return append(cs,
		host("nvrtcGetPTXSize", codeSize), host("nvrtcGetPTX", code),
		host("nvrtcGetCUBINSize", codeSize), host("nvrtcGetCUBIN", code),
		host("nvrtcGetNumSupportedArchs", (*GPU).archCount), host("nvrtcGetSupportedArchs", (*GPU).archs),
		host("hiprtcGetCodeSize", codeSize), host("hiprtcGetCode", code))
}

var (
	callbacksOnce sync.Once
	callbackMap   map[string]uintptr
)

// callbacks makes the C function pointers once per process: purego has room for a
// limited number of callbacks, and the GPU they serve is whichever is active.
func callbacks() map[string]uintptr {
	callbacksOnce.Do(func() {
		callbackMap = map[string]uintptr{}
		for _, c := range calls() {
			callbackMap[c.name] = c.callback()
		}
		cb := purego.NewCallback
		callbackMap["cuGetErrorName"] = cb(cudaString(func(r int32) string { return statusNames[r].cuda }))
		callbackMap["cuGetErrorString"] = cb(cudaString(func(r int32) string { return statusNames[r].text }))
		callbackMap["hipGetErrorName"] = cb(returnedString(func(r int32) string { return statusNames[r].hip }))
		callbackMap["hipGetErrorString"] = cb(returnedString(func(r int32) string { return statusNames[r].text }))
		rtcName := func(prefix string) func(int32) string {
			return func(r int32) string {
				if n, ok := rtcNames[r]; ok {
					return prefix + n
				}
				return ""
			}
		}
		callbackMap["nvrtcGetErrorString"] = cb(returnedString(rtcName("NVRTC_")))
		callbackMap["hiprtcGetErrorString"] = cb(returnedString(rtcName("HIPRTC_")))
	})
	return callbackMap
}
