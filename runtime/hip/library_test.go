package hip

import (
	"errors"
	"fmt"
	goruntime "runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/runtime"
)

func TestSearchesTryExplicitPathsOnly(t *testing.T) {
	tests := []struct {
		name   string
		env    string
		search func() runtime.LibrarySearch
	}{
		{"HIP runtime", EnvHIPLibrary, hipSearch},
		{"hiprtc", EnvHIPRTCLibrary, hiprtcSearch},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(tc.env, "/nowhere/libexplicit.so")
			assert.Equal(t, []string{"/nowhere/libexplicit.so"}, tc.search().Candidates())
		})
	}
}

func TestSearchesListVersionedNamesNewestFirst(t *testing.T) {
	t.Setenv(EnvHIPLibrary, "")
	t.Setenv(EnvHIPRTCLibrary, "")
	t.Setenv("ROCM_PATH", "/custom/rocm")
	hip, rtc := hipSearch().Candidates(), hiprtcSearch().Candidates()
	switch goruntime.GOOS {
	case "linux":
		assert.Equal(t, []string{"libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5", "libamdhip64.so"}, hip[:4])
		assert.Equal(t, []string{"libhiprtc.so.7", "libhiprtc.so.6", "libhiprtc.so.5", "libhiprtc.so"}, rtc[:4])
		assert.Contains(t, hip, "/custom/rocm/lib/libamdhip64.so.6")
		assert.Contains(t, hip, "/opt/rocm/lib/libamdhip64.so.6")
		assert.Contains(t, rtc, "/opt/rocm/lib/libhiprtc.so.7")
	case "windows":
		assert.Equal(t, []string{"amdhip64_7.dll", "amdhip64_6.dll", "amdhip64.dll"}, hip[:3])
		assert.Contains(t, rtc, "hiprtc0605.dll")
		assert.Contains(t, rtc, "hiprtc0701.dll")
	default:
		assert.Empty(t, hip, "no HIP library names on %s", goruntime.GOOS)
	}
}

func TestMissingLibrariesAreUnavailable(t *testing.T) {
	t.Setenv(EnvHIPLibrary, "/nowhere/libamdhip64.so")
	t.Setenv(EnvHIPRTCLibrary, "/nowhere/libhiprtc.so")
	_, err := loadDriver(hipSearch())
	assert.ErrorIs(t, err, runtime.ErrUnavailable)
	assert.ErrorContains(t, err, EnvHIPLibrary)

	runtimeAsked := false
	_, err = loadCompiler(hiprtcSearch(), func() (*driver, error) { runtimeAsked = true; return nil, errors.New("unused") })
	assert.ErrorIs(t, err, runtime.ErrUnavailable)
	assert.False(t, runtimeAsked, "an explicit hiprtc path that fails is not second-guessed")
}

func TestCompilerFallsBackToTheRuntimeLibrary(t *testing.T) {
	none := runtime.LibrarySearch{What: "libhiprtc", Names: []string{"/nowhere/libhiprtc.so.6"}}
	_, err := loadCompiler(none, func() (*driver, error) {
		return nil, runtime.ErrUnavailable
	})
	assert.ErrorIs(t, err, runtime.ErrUnavailable)
	assert.ErrorContains(t, err, "nor is there a HIP runtime")

	drv, derr := loadedDriver()
	if derr != nil {
		t.Skipf("no HIP runtime here to take hiprtc from: %v", derr)
	}
	c, err := loadCompiler(none, func() (*driver, error) { return drv, nil })
	if drv.path != "" && err != nil {
		// ROCm 5.3 and later keep hiprtc out of libamdhip64.
		assert.ErrorContains(t, err, "hiprtcCompileProgram")
		return
	}
	require.NoError(t, err)
	assert.Equal(t, drv.path, c.Path, "hiprtc taken from the HIP runtime")
}

func TestResultErrors(t *testing.T) {
	tests := []struct {
		name string
		err  error
		is   error
		not  error
	}{
		{"out of memory", failed("hipMalloc(8)", ErrorOutOfMemory), runtime.ErrOutOfMemory, runtime.ErrUnavailable},
		{"invalid value", failed("hipMemsetD8Async", ErrorInvalidValue), runtime.ErrInvalidArgument, runtime.ErrOutOfMemory},
		{"no device", failed("hipGetDeviceCount", ErrorNoDevice), runtime.ErrUnavailable, runtime.ErrInvalidArgument},
		{"invalid device", failed("hipInit(0)", ErrorInvalidDevice), runtime.ErrUnavailable, runtime.ErrClosed},
		{"old driver", failed("hipInit(0)", ErrorInsufficientDriver), runtime.ErrUnavailable, runtime.ErrClosed},
		{"context destroyed", failed("hipStreamSynchronize", ErrorContextIsDestroyed), runtime.ErrClosed, runtime.ErrUnavailable},
		{"not found", failed("hipModuleGetFunction(k)", ErrorNotFound), ErrorNotFound, runtime.ErrNoKernel},
		{"compile error", fmt.Errorf("hiprtcCompileProgram: %w", RTCErrorCompilation), runtime.ErrCompile, runtime.ErrOutOfMemory},
		{"compiler out of memory", fmt.Errorf("hiprtcCreateProgram: %w", RTCErrorOutOfMemory), runtime.ErrOutOfMemory, runtime.ErrCompile},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.ErrorIs(t, tc.err, tc.is)
			assert.NotErrorIs(t, tc.err, tc.not)
		})
	}
	assert.Equal(t, "hipMalloc(8): "+ErrorOutOfMemory.Error(), failed("hipMalloc(8)", ErrorOutOfMemory).Error())
}

func TestResultNamesFallBackToNumbers(t *testing.T) {
	saved, savedRTC := results.Load(), rtcResults.Load()
	defer func() { results.Store(saved); rtcResults.Store(savedRTC) }()

	results.Store(nil)
	rtcResults.Store(nil)
	assert.Equal(t, "hipError_t(2)", ErrorOutOfMemory.Error())
	assert.Equal(t, "hiprtcResult(6)", RTCErrorCompilation.Error())

	named := func(r Result) (string, string) { return "hipErrorOutOfMemory", "out of memory" }
	results.Store(&named)
	assert.Equal(t, "hipErrorOutOfMemory: out of memory", ErrorOutOfMemory.Error())
	onlyText := func(r Result) (string, string) { return "", "something odd" }
	results.Store(&onlyText)
	assert.Equal(t, "hipError_t(999): something odd", Result(999).Error())
	rtcName := func(r RTCResult) (string, string) { return "HIPRTC_ERROR_COMPILATION", "" }
	rtcResults.Store(&rtcName)
	assert.Equal(t, "HIPRTC_ERROR_COMPILATION", RTCErrorCompilation.Error())
}

func TestRealRuntimeNamesItsErrors(t *testing.T) {
	if _, err := loadedDriver(); err != nil {
		t.Skipf("no HIP runtime here: %v", err)
	}
	// ROCm 5 describes some codes by their name alone; then the name is said once.
	assert.Regexp(t, `^hipErrorOutOfMemory(: .*out of memory.*)?$`, ErrorOutOfMemory.Error())
	assert.Regexp(t, `^hipErrorInvalidValue`, ErrorInvalidValue.Error())
}

// TestOpenWithoutAGPU checks what a machine without an AMD GPU (CI, or a laptop) sees:
// Open and the registry's "hip" backend are unavailable, and the probe says why.
func TestOpenWithoutAGPU(t *testing.T) {
	d, err := Open(0)
	if err == nil {
		d.Close()
		t.Skip("this machine has a HIP device; the gpu-tagged tests cover it")
	}
	assert.ErrorIs(t, err, runtime.ErrUnavailable)

	_, err = runtime.Open(runtime.OpenOptions{Backend: "hip"})
	assert.ErrorIs(t, err, runtime.ErrUnavailable)
	assert.Contains(t, runtime.Backends(), runtime.HIP)

	res := probe()
	assert.Equal(t, runtime.HIP, res.Backend)
	assert.Empty(t, res.Devices)
	assert.ErrorIs(t, res.Err, runtime.ErrUnavailable)
	if _, derr := loadedDriver(); derr == nil {
		require.NotEmpty(t, res.Libraries)
		assert.Contains(t, res.Libraries[0], "libamdhip64")
	}
}
