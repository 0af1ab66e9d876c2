package hip

import (
	"errors"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/kernelsrc"
	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/runtime/internal/gputest"
)

// EnvRequireHIPRTC set to 1 turns a missing hiprtc from a skip into a failure; CI sets it
// after installing ROCm's packages, so the compile check cannot pass by not running.
const envRequireHIPRTC = "GUMBEL_REQUIRE_HIPRTC"

// needHIPRTC skips the test when hiprtc cannot be loaded, or fails it when
// GUMBEL_REQUIRE_HIPRTC=1. With -short it skips unless GUMBEL_REQUIRE_HIPRTC=1: compiling
// the kernel sources takes one to two minutes, which CI spends and the README's test
// command does not.
func needHIPRTC(t *testing.T) {
	t.Helper()
	if testing.Short() && os.Getenv(envRequireHIPRTC) != "1" {
		t.Skipf("-short: the HIP compile check is skipped; set %s=1 to run it", envRequireHIPRTC)
	}
	version, lib, err := HIPRTCVersion()
	if err != nil {
		if os.Getenv(envRequireHIPRTC) == "1" {
			t.Fatalf("%s=1 but hiprtc cannot be loaded: %v", envRequireHIPRTC, err)
		}
		t.Skipf("hiprtc is not installed, so no HIP kernel is compiled (%v); set %s=1 to make this a failure", err, envRequireHIPRTC)
	}
	t.Logf("hiprtc %s from %s", version, lib)
}

// ciTargets are the AMD GPU targets CI compiles for: one wave64 (CDNA) and one wave32
// (RDNA) processor. mach is the processor's EF_AMDGPU_MACH number (LLVM's ELF.h:
// EF_AMDGPU_MACH_AMDGCN_GFX90A = 0x03f, EF_AMDGPU_MACH_AMDGCN_GFX1030 = 0x036).
var ciTargets = []struct {
	target string
	mach   uint32
	wave   int
}{
	{"gfx90a", 0x03f, 64},
	{"gfx1030", 0x036, 32},
}

// compileAndRead compiles p for target and returns the kernels of its AMDGPU ELF, after
// checking the processor and that every kernel runs at the target's wavefront size.
func compileAndRead(t *testing.T, p *runtime.Program, target string, mach uint32, wave int) map[string][]byte {
	t.Helper()
	code, err := Compile(p, target)
	var ce *runtime.CompileError
	if errors.As(err, &ce) {
		t.Fatalf("hiprtc could not compile %s for %s: %v\n--- hiprtc log ---\n%s", p.Name, target, ce.Err, ce.Log)
	}
	require.NoError(t, err)
	image, err := codeObjectELF(code, target)
	require.NoError(t, err, "code object for %s", target)
	obj, err := parseAMDGPU(image)
	require.NoError(t, err, "code object for %s", target)
	assert.Equal(t, mach, obj.mach, "EF_AMDGPU_MACH of the %s code object", target)
	for name, kd := range obj.kernels {
		w, err := waveSize(kd)
		require.NoError(t, err, "kernel %s", name)
		assert.Equal(t, wave, w, "wavefront size of %s on %s", name, target)
	}
	t.Logf("%s: %d-byte code object, kernels %v", target, len(code), sortedKeys(obj.kernels))
	return obj.kernels
}

// probeKernel exercises the binding without the sampling source. The gpu-tagged tests
// run it: probe_axpb's a*b+c must round twice (the options turn FMA contraction off), and
// probe_fill reports the wavefront size the kernel was compiled for.
var probeKernel = &runtime.Program{
	Name: "probe",
	CUDA: `
extern "C" __global__ void probe_axpb(float* y, const float* a, const float* b, float c, unsigned n) {
	unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) y[i] = a[i] * b[i] + c;
}
extern "C" __global__ void probe_fill(unsigned* out, unsigned v, unsigned n) {
	unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) out[i] = v + (unsigned)warpSize;
}
`,
}

func TestCompileProbeKernel(t *testing.T) {
	needHIPRTC(t)
	for _, tc := range ciTargets {
		t.Run(tc.target, func(t *testing.T) {
			kernels := compileAndRead(t, probeKernel, tc.target, tc.mach, tc.wave)
			assert.Contains(t, kernels, "probe_axpb")
			assert.Contains(t, kernels, "probe_fill")
		})
	}
}

// TestCompileSamplingKernels is the CI check: every kernel the sampler launches compiles
// with hiprtc for a wave64 and a wave32 target.
func TestCompileSamplingKernels(t *testing.T) {
	needHIPRTC(t)
	for _, tc := range ciTargets {
		t.Run(tc.target, func(t *testing.T) {
			kernels := compileAndRead(t, kernelsrc.Sampling(), tc.target, tc.mach, tc.wave)
			for _, base := range []string{abi.GumbelArgmax, abi.GumbelExact, abi.Categorical, abi.TopN, abi.FilterMax, abi.Filtered,
				abi.Score, abi.Residual, abi.ShardSelect} {
				for _, suffix := range abi.Suffixes {
					assert.Contains(t, kernels, base+suffix, "kernel %s%s in the %s code object", base, suffix, tc.target)
				}
			}
		})
	}
}

// TestCompileSharedKernels: the kernels of the cases every backend shares
// (runtime/internal/gputest, run on HIP devices by the gpu-tagged tests) compile for HIP.
func TestCompileSharedKernels(t *testing.T) {
	needHIPRTC(t)
	for _, tc := range ciTargets {
		t.Run(tc.target, func(t *testing.T) {
			kernels := compileAndRead(t, gputest.Program(), tc.target, tc.mach, tc.wave)
			assert.Contains(t, kernels, "add_one")
			assert.Contains(t, kernels, "scale")
		})
	}
}

func TestCompileErrorCarriesLog(t *testing.T) {
	needHIPRTC(t)
	bad := &runtime.Program{Name: "broken", CUDA: `extern "C" __global__ void k(float* x) { x[0] = not_declared; }`}
	_, err := Compile(bad, "gfx90a")
	require.Error(t, err)
	var ce *runtime.CompileError
	require.ErrorAs(t, err, &ce)
	assert.ErrorIs(t, err, runtime.ErrCompile)
	assert.Equal(t, runtime.HIP, ce.Backend)
	assert.Contains(t, ce.Log, "not_declared")
	assert.Contains(t, ce.Program, "broken for gfx90a")
	var rr RTCResult
	require.ErrorAs(t, err, &rr)
	assert.Equal(t, RTCErrorCompilation, rr)
}

func TestCompileReturnsPrivateCopies(t *testing.T) {
	needHIPRTC(t)
	first, err := Compile(probeKernel, "gfx90a")
	require.NoError(t, err)
	want := append([]byte(nil), first...)
	for i := range first {
		first[i] = 0
	}
	second, err := Compile(probeKernel, "gfx90a")
	require.NoError(t, err)
	assert.Equal(t, want, second, "changing one result must not change the cached code object")
}

func TestCompileRejectsBadInput(t *testing.T) {
	// These fail before hiprtc is loaded, so they run everywhere.
	tests := []struct {
		name    string
		program *runtime.Program
		target  string
	}{
		{"nil program", nil, "gfx90a"},
		{"no source", &runtime.Program{Name: "empty"}, "gfx90a"},
		{"blank source", &runtime.Program{Name: "blank", CUDA: " \n\t"}, "gfx90a"},
		{"empty target", probeKernel, ""},
		{"not a gfx target", probeKernel, "sm_90"},
		{"option smuggled in", probeKernel, "gfx90a -save-temps"},
		{"option after equals", probeKernel, "gfx90a=1"},
		{"bad feature", probeKernel, "gfx90a:xnack"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Compile(tc.program, tc.target)
			assert.ErrorIs(t, err, runtime.ErrInvalidArgument)
		})
	}
}

func TestTargetPatternAcceptsRealTargets(t *testing.T) {
	for _, target := range []string{"gfx90a", "gfx1030", "gfx942", "gfx1100", "gfx1151", "gfx90a:sramecc+:xnack-", "gfx10-3-generic", "gfx9-4-generic:xnack+"} {
		assert.True(t, targetPattern.MatchString(target), target)
	}
}
