package cuda

import (
	"errors"
	"fmt"
	"testing"

	"github.com/gumbel-go/gumbel/runtime"
	"github.com/stretchr/testify/assert"
)

// withResultNamer installs a namer for the test's duration.
func withResultNamer(t *testing.T, f func(Result) (string, string)) {
	prev := results.Load()
	if f == nil {
		results.Store(nil)
	} else {
		results.Store(&f)
	}
	t.Cleanup(func() { results.Store(prev) })
}

func TestResultError(t *testing.T) {
	withResultNamer(t, func(r Result) (string, string) {
		switch r {
		case 2:
			return "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"
		case 3:
			return "CUDA_ERROR_NOT_INITIALIZED", ""
		case 4:
			return "", "driver shutting down"
		}
		return "", ""
	})
	cases := []struct {
		r    Result
		want string
	}{
		{2, "CUDA_ERROR_OUT_OF_MEMORY: out of memory"},
		{3, "CUDA_ERROR_NOT_INITIALIZED"},
		{4, "CUresult(4): driver shutting down"},
		{12345, "CUresult(12345)"},
		{-1, "CUresult(-1)"},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, c.r.Error())
	}
	err := failed("cuMemAlloc_v2(1048576)", ErrorOutOfMemory)
	assert.Equal(t, "cuMemAlloc_v2(1048576): CUDA_ERROR_OUT_OF_MEMORY: out of memory", err.Error())
}

func TestResultErrorWithoutDriver(t *testing.T) {
	withResultNamer(t, nil)
	assert.Equal(t, "CUresult(2)", ErrorOutOfMemory.Error())
	assert.Equal(t, "cuInit(0): CUresult(100)", failed("cuInit(0)", ErrorNoDevice).Error())
}

func TestResultIs(t *testing.T) {
	cases := []struct {
		r    Result
		want error
	}{
		{ErrorOutOfMemory, runtime.ErrOutOfMemory},
		{ErrorInvalidValue, runtime.ErrInvalidArgument},
		{ErrorNoDevice, runtime.ErrUnavailable},
		{ErrorStubLibrary, runtime.ErrUnavailable},
		{ErrorInsufficientDriver, runtime.ErrUnavailable},
		{ErrorSystemDriverMismatch, runtime.ErrUnavailable},
		{ErrorContextIsDestroyed, runtime.ErrClosed},
		{ErrorDeinitialized, runtime.ErrClosed},
	}
	sentinels := []error{runtime.ErrOutOfMemory, runtime.ErrInvalidArgument, runtime.ErrUnavailable, runtime.ErrClosed, runtime.ErrCompile, runtime.ErrNoKernel}
	for _, c := range cases {
		err := fmt.Errorf("call: %w", c.r)
		for _, s := range sentinels {
			assert.Equal(t, s == c.want, errors.Is(err, s), "%d is %v", c.r, s)
		}
	}
	assert.False(t, errors.Is(ErrorInvalidContext, runtime.ErrUnavailable))
	var r Result
	assert.True(t, errors.As(failed("cuLaunchKernel", ErrorInvalidContext), &r))
	assert.Equal(t, ErrorInvalidContext, r)
}

func TestNVRTCResult(t *testing.T) {
	prev := nvrtcResults.Load()
	t.Cleanup(func() { nvrtcResults.Store(prev) })

	nvrtcResults.Store(nil)
	assert.Equal(t, "nvrtcResult(6)", NVRTCErrorCompilation.Error())

	f := func(r NVRTCResult) (string, string) {
		if r == 6 {
			return "NVRTC_ERROR_COMPILATION", ""
		}
		return "", ""
	}
	nvrtcResults.Store(&f)
	assert.Equal(t, "NVRTC_ERROR_COMPILATION", NVRTCErrorCompilation.Error())
	assert.Equal(t, "nvrtcResult(42)", NVRTCResult(42).Error())
	assert.ErrorIs(t, fmt.Errorf("x: %w", NVRTCErrorCompilation), runtime.ErrCompile)
	assert.ErrorIs(t, NVRTCErrorOutOfMemory, runtime.ErrOutOfMemory)
	assert.NotErrorIs(t, NVRTCResult(5), runtime.ErrCompile)
}

func TestVersionString(t *testing.T) {
	assert.Equal(t, "13.0", versionString(13000))
	assert.Equal(t, "12.8", versionString(12080))
	assert.Equal(t, "11.2", versionString(11020))
}
