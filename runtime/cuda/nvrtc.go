package cuda

import (
	"fmt"
	"unsafe"

	"github.com/gumbel-go/gumbel/internal/dynlib"
	"github.com/gumbel-go/gumbel/runtime"
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

// nvrtcResults describes NVRTCResult; the loaded NVRTC names its codes through
// nvrtcGetErrorString.
var nvrtcResults = gpurt.RTCCodes[NVRTCResult]("nvrtcResult")

// Error returns NVRTC's description of r, e.g. "NVRTC_ERROR_COMPILATION", or the bare
// number when no NVRTC can name it.
func (r NVRTCResult) Error() string { return nvrtcResults.Error(r) }

// Is maps NVRTC statuses onto the runtime's sentinel errors.
func (r NVRTCResult) Is(target error) bool { return nvrtcResults.Is(r, target) }

// nvrtc is libnvrtc: the functions it shares with hiprtc, those for CUBIN and PTX, and
// the architectures it supports.
type nvrtc struct {
	gpurt.RTC
	// archs lists the SM numbers this NVRTC can compile for (e.g. 75, 80, ..., 120);
	// nil when it cannot say (before CUDA 11.2).
	archs []int

	nvrtcGetPTXSize, nvrtcGetPTX, nvrtcGetCUBINSize, nvrtcGetCUBIN uintptr
	nvrtcGetNumSupportedArchs, nvrtcGetSupportedArchs              uintptr
}

// extra lists the functions NVRTC has beside those it shares with hiprtc.
func (n *nvrtc) extra() []dynlib.Func {
	req, opt := dynlib.Required, dynlib.Optional
	return []dynlib.Func{
		req(&n.nvrtcGetPTXSize, "nvrtcGetPTXSize"),
		req(&n.nvrtcGetPTX, "nvrtcGetPTX"),
		opt(&n.nvrtcGetCUBINSize, "nvrtcGetCUBINSize"),
		opt(&n.nvrtcGetCUBIN, "nvrtcGetCUBIN"),
		opt(&n.nvrtcGetNumSupportedArchs, "nvrtcGetNumSupportedArchs"),
		opt(&n.nvrtcGetSupportedArchs, "nvrtcGetSupportedArchs"),
	}
}

// loadNVRTC finds libnvrtc and binds it.
func loadNVRTC(s runtime.LibrarySearch) (*nvrtc, error) {
	h, path, err := openFound(s, "nvrtcVersion")
	if err != nil {
		return nil, err
	}
	return newNVRTC(path, func(name string) uintptr { return dynlib.Symbol(h, name) })
}

// newNVRTC binds the NVRTC at path through lookup, makes NVRTCResult.Error ask it for
// descriptions and asks its version and architectures.
func newNVRTC(path string, lookup func(name string) uintptr) (*nvrtc, error) {
	n := &nvrtc{RTC: gpurt.RTC{Prefix: "nvrtc", Path: path, Status: gpurt.ErrorOf[NVRTCResult]}}
	if err := n.Bind(lookup, nvrtcResults.Use, n.extra()...); err != nil {
		return nil, err
	}
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

// compile compiles CUDA C++ source with its headers (by include name) and returns the
// CUBIN (cubin true) or the NUL-terminated PTX, with the compiler's log. A failed
// compilation returns an error wrapping the NVRTC status; the caller wraps it in a
// runtime.CompileError with the log.
func (n *nvrtc) compile(name, source string, headers map[string]string, options []string, cubin bool) (image []byte, log string, err error) {
	out := gpurt.Output{Size: n.nvrtcGetPTXSize, Get: n.nvrtcGetPTX, What: "PTX"}
	if cubin {
		if n.nvrtcGetCUBINSize == 0 || n.nvrtcGetCUBIN == 0 {
			return nil, "", fmt.Errorf("%w: NVRTC %s cannot emit CUBIN", runtime.ErrUnavailable, n.VersionString())
		}
		out = gpurt.Output{Size: n.nvrtcGetCUBINSize, Get: n.nvrtcGetCUBIN, What: "CUBIN"}
	}
	return n.Program(name+".cu", source, headers, options, out)
}
