package cuda

import (
	"fmt"
	"strconv"
	"unsafe"

	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/runtime/internal/dynlib"
	"github.com/gumbel-go/gumbel/runtime/internal/gpurt"
)

// NVRTCResult is an NVRTC status (nvrtcResult).
type NVRTCResult int32

// NVRTC statuses the package acts on (nvrtc.h).
const (
	NVRTCSuccess          NVRTCResult = 0
	NVRTCErrorOutOfMemory NVRTCResult = 1
	NVRTCErrorCompilation NVRTCResult = 6
)

// nvrtcNamer turns an NVRTCResult into its description (as the name, the second word
// unused); the loaded NVRTC installs one backed by nvrtcGetErrorString.
var nvrtcNamer gpurt.Namer[NVRTCResult]

// Error returns NVRTC's description of r, e.g. "NVRTC_ERROR_COMPILATION", or the bare
// number when no NVRTC can name it.
func (r NVRTCResult) Error() string { return nvrtcNamer.Describe(r, "nvrtcResult") }

// Is maps NVRTC statuses onto the runtime's sentinel errors.
func (r NVRTCResult) Is(target error) bool {
	switch target {
	case runtime.ErrOutOfMemory:
		return r == NVRTCErrorOutOfMemory
	case runtime.ErrCompile:
		return r == NVRTCErrorCompilation
	}
	return false
}

// nvrtc is libnvrtc: its path, version, supported architectures and function pointers.
type nvrtc struct {
	path         string
	major, minor int
	// archs lists the SM numbers this NVRTC can compile for (e.g. 75, 80, ..., 120);
	// nil when it cannot say (before CUDA 11.2).
	archs []int

	nvrtcGetErrorString, nvrtcVersion, nvrtcCreateProgram, nvrtcDestroyProgram uintptr
	nvrtcCompileProgram, nvrtcGetProgramLogSize, nvrtcGetProgramLog            uintptr
	nvrtcGetPTXSize, nvrtcGetPTX, nvrtcGetCUBINSize, nvrtcGetCUBIN             uintptr
	nvrtcGetNumSupportedArchs, nvrtcGetSupportedArchs                          uintptr
}

func (n *nvrtc) symbols() []dynlib.Func {
	req, opt := dynlib.Required, dynlib.Optional
	return []dynlib.Func{
		req(&n.nvrtcGetErrorString, "nvrtcGetErrorString"),
		req(&n.nvrtcVersion, "nvrtcVersion"),
		req(&n.nvrtcCreateProgram, "nvrtcCreateProgram"),
		req(&n.nvrtcDestroyProgram, "nvrtcDestroyProgram"),
		req(&n.nvrtcCompileProgram, "nvrtcCompileProgram"),
		req(&n.nvrtcGetProgramLogSize, "nvrtcGetProgramLogSize"),
		req(&n.nvrtcGetProgramLog, "nvrtcGetProgramLog"),
		req(&n.nvrtcGetPTXSize, "nvrtcGetPTXSize"),
		req(&n.nvrtcGetPTX, "nvrtcGetPTX"),
		opt(&n.nvrtcGetCUBINSize, "nvrtcGetCUBINSize"),
		opt(&n.nvrtcGetCUBIN, "nvrtcGetCUBIN"),
		opt(&n.nvrtcGetNumSupportedArchs, "nvrtcGetNumSupportedArchs"),
		opt(&n.nvrtcGetSupportedArchs, "nvrtcGetSupportedArchs"),
	}
}

// loadNVRTC finds libnvrtc, binds its functions and asks its version and architectures.
func loadNVRTC(s runtime.LibrarySearch) (*nvrtc, error) {
	h, path, err := openFound(s, "nvrtcVersion")
	if err != nil {
		return nil, err
	}
	n := &nvrtc{path: path}
	if err := dynlib.Bind(path, func(name string) uintptr { return lookupSymbol(h, name) }, n.symbols()); err != nil {
		return nil, err
	}
	n.installNamer()
	var major, minor int32
	if r := NVRTCResult(gpurt.CallN(n.nvrtcVersion, uintptr(unsafe.Pointer(&major)), uintptr(unsafe.Pointer(&minor)))); r != NVRTCSuccess {
		return nil, fmt.Errorf("nvrtcVersion: %w", r)
	}
	n.major, n.minor = int(major), int(minor)
	if n.nvrtcGetNumSupportedArchs != 0 && n.nvrtcGetSupportedArchs != 0 {
		var count int32
		if r := NVRTCResult(gpurt.CallN(n.nvrtcGetNumSupportedArchs, uintptr(unsafe.Pointer(&count)))); r == NVRTCSuccess && count > 0 && count < 1024 {
			archs := make([]int32, count)
			if r := NVRTCResult(gpurt.CallN(n.nvrtcGetSupportedArchs, uintptr(unsafe.Pointer(&archs[0])))); r == NVRTCSuccess {
				for _, a := range archs {
					n.archs = append(n.archs, int(a))
				}
			}
		}
	}
	return n, nil
}

func (n *nvrtc) installNamer() {
	f := func(r NVRTCResult) (string, string) {
		return gpurt.GoString(gpurt.CallN(n.nvrtcGetErrorString, uintptr(r)), 512), ""
	}
	nvrtcNamer.Store(&f)
}

// version returns "major.minor".
func (n *nvrtc) version() string { return strconv.Itoa(n.major) + "." + strconv.Itoa(n.minor) }

// compile compiles CUDA C++ source with its headers (by include name) and returns the
// CUBIN (cubin true) or the NUL-terminated PTX, with the compiler's log. A failed
// compilation returns an error wrapping the NVRTC status; the caller wraps it in a
// runtime.CompileError with the log.
func (n *nvrtc) compile(name, source string, headers map[string]string, options []string, cubin bool) (image []byte, log string, err error) {
	out := gpurt.Output{Size: n.nvrtcGetPTXSize, Get: n.nvrtcGetPTX, What: "PTX"}
	if cubin {
		if n.nvrtcGetCUBINSize == 0 || n.nvrtcGetCUBIN == 0 {
			return nil, "", fmt.Errorf("%w: NVRTC %s cannot emit CUBIN", runtime.ErrUnavailable, n.version())
		}
		out = gpurt.Output{Size: n.nvrtcGetCUBINSize, Get: n.nvrtcGetCUBIN, What: "CUBIN"}
	}
	rtc := gpurt.RTC{Prefix: "nvrtc", Create: n.nvrtcCreateProgram, Destroy: n.nvrtcDestroyProgram,
		Compile: n.nvrtcCompileProgram, LogSize: n.nvrtcGetProgramLogSize, Log: n.nvrtcGetProgramLog,
		Status: func(r uintptr) error {
			if s := NVRTCResult(r); s != NVRTCSuccess {
				return s
			}
			return nil
		}}
	return rtc.Program(name+".cu", source, headers, options, out)
}
