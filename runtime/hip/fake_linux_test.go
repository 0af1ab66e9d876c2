//go:build linux && (amd64 || arm64)

package hip

// The package's tests on the fake driver of runtime/internal/fakegpu: the cases every
// backend shares (gputest.Fake), then HIP's own.

import (
	"math"
	"testing"

	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/runtime/internal/fakegpu"
	"github.com/gumbel-go/gumbel/runtime/internal/gputest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// openFake binds the fake's HIP runtime and hiprtc as loadDriver and loadCompiler bind
// the real ones, then opens device ordinal of g, with an empty code-object cache.
func openFake(t testing.TB, g *fakegpu.GPU, ordinal int) (runtime.Device, error) {
	t.Helper()
	forgetCode()
	gputest.KeepWords(t, results)
	gputest.KeepWords(t, rtcResults)
	drv, err := newDriver("libamdhip64.fake", g.Lookup)
	require.NoError(t, err)
	rtc, err := newCompiler("libhiprtc.fake", g.Lookup)
	require.NoError(t, err)
	d, err := open(drv, rtc, ordinal)
	if err != nil {
		return nil, err
	}
	return d, nil
}

// forgetCode empties the code-object cache, so that a test compiles afresh.
func forgetCode() {
	codeCache.Lock()
	clear(codeCache.m)
	codeCache.Unlock()
}

// fakeBackend is this package to the shared cases.
var fakeBackend = gputest.Backend{Device: fakegpu.MI210(), Open: openFake, Target: target, Code: gputest.CodeOf[Result]}

// fakeDevice opens device 0 of g.
func fakeDevice(t *testing.T, g *fakegpu.GPU) *Device {
	return gputest.OpenFake(t, fakeBackend, g, 0).(*Device)
}

func TestFake(t *testing.T) { gputest.Fake(t, fakeBackend) }

func BenchmarkFakeLaunch(b *testing.B) { gputest.FakeLaunchBenchmark(b, fakeBackend) }

func TestFakeOpenReadsDeviceInfo(t *testing.T) {
	tests := []struct {
		name       string
		r0600      bool
		archName   string
		warp       int
		wantTarget string
	}{
		{"ROCm 6 layout, CDNA", true, "gfx90a:sramecc+:xnack-", 64, "gfx90a"},
		{"ROCm 5 layout, CDNA", false, "gfx90a:sramecc+:xnack-", 64, "gfx90a"},
		{"ROCm 6 layout, RDNA", true, "gfx1100", 32, "gfx1100"},
		{"ROCm 5 layout, RDNA", false, "gfx1030", 32, "gfx1030"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dev := fakegpu.MI210()
			dev.ArchName, dev.WarpSize = tc.archName, tc.warp
			g := fakegpu.New(dev)
			if !tc.r0600 {
				g.Hide("hipGetDevicePropertiesR0600")
			}
			d := fakeDevice(t, g)
			assert.Equal(t, runtime.DeviceInfo{
				Backend: runtime.HIP, Name: "Fake Instinct MI210", Arch: tc.wantTarget, Multiprocessors: 104,
				MaxThreadsPerBlock: 1024, WarpSize: tc.warp, TotalMemory: 64 << 30,
				Libraries: []string{"libamdhip64.fake", "libhiprtc.fake"},
			}, d.Info())
			assert.Equal(t, tc.wantTarget, d.Target())
			assert.Equal(t, tc.archName, d.ArchName())
			assert.Equal(t, "6.2.41134", d.RuntimeVersion())
			assert.Equal(t, "99.0", d.HIPRTCVersion())
			assert.Equal(t, 0, d.Ordinal())
			_, ok := d.DefaultStream().(runtime.GraphCapturer)
			assert.False(t, ok, "HIP streams capture no graphs")
		})
	}
}

// TestFakeOpenRefusesWhatHIPCannotUse: the refusals of gputest's
// OpenRefusesWhatItCannotUse that only HIP has.
func TestFakeOpenRefusesWhatHIPCannotUse(t *testing.T) {
	garbled := fakegpu.MI210()
	garbled.ArchName = "\x01garbage"
	for name, devices := range map[string][]fakegpu.Device{
		"no devices":             nil,
		"unreadable gcnArchName": {garbled},
	} {
		t.Run(name, func(t *testing.T) {
			g := fakegpu.New(devices...)
			_, err := openFake(t, g, 0)
			assert.ErrorIs(t, err, runtime.ErrUnavailable)
			assert.Zero(t, g.Live().Streams, "a failed Open leaves no stream behind")
		})
	}
}

// fakeProgram has the kernels the fake runs, behind a HIP prelude.
var fakeProgram = &runtime.Program{Name: "fake", HIPPrelude: "// prelude", CUDA: fakegpu.Source}

func TestFakeLoadCompilesOnce(t *testing.T) {
	g := fakegpu.New(fakegpu.MI210())
	d := fakeDevice(t, g)
	m1, err := d.Load(fakeProgram)
	require.NoError(t, err)
	m2, err := d.Load(fakeProgram)
	require.NoError(t, err)
	assert.Equal(t, 1, g.Compiles, "the second Load takes the cached code object")
	assert.Zero(t, g.Programs(), "every hiprtc program destroyed")
	assert.Equal(t, fakeProgram.HIPPrelude+"\n"+fakeProgram.CUDA, g.Source)
	options := []string{"--offload-arch=gfx90a", "-O3", "-std=c++17", "-ffp-contract=off"}
	assert.Equal(t, options, g.Options)
	assert.Equal(t, [][]byte{fakegpu.Code(options...), fakegpu.Code(options...)}, g.Modules(), "hipModuleLoadData got the compiled code object")
	require.NoError(t, m1.Close())
	require.NoError(t, m2.Close())
	assert.Empty(t, g.Modules(), "both modules unloaded")
}

func TestFakeLoadReportsCompileErrorsWithTheLog(t *testing.T) {
	g := fakegpu.New(fakegpu.MI210())
	d := fakeDevice(t, g)
	g.CompileFails, g.CompileLog = true, "fake.hip:3:7: error: use of undeclared identifier 'x'"
	_, err := d.Load(fakeProgram)
	var ce *runtime.CompileError
	require.ErrorAs(t, err, &ce)
	assert.ErrorIs(t, err, runtime.ErrCompile)
	assert.Equal(t, g.CompileLog, ce.Log)
	assert.Equal(t, "fake for gfx90a (hiprtc 99.0)", ce.Program)
	var rr RTCResult
	require.ErrorAs(t, err, &rr)
	assert.Equal(t, RTCErrorCompilation, rr)
	assert.ErrorContains(t, err, "HIPRTC_ERROR_COMPILATION", "hiprtc's words for it")
	assert.Zero(t, g.Programs())

	g.CompileFails = false
	_, err = d.Load(fakeProgram)
	require.NoError(t, err, "a failure is not cached")
	assert.Equal(t, 2, g.Compiles)
}

// TestFakeWorkItemLimit: an AMD dispatch packet counts work-items, not blocks, in 32
// bits per dimension.
func TestFakeWorkItemLimit(t *testing.T) {
	g := fakegpu.New(fakegpu.MI210())
	d := fakeDevice(t, g)
	m, err := d.Load(fakeProgram)
	require.NoError(t, err)
	k, err := m.Kernel("probe")
	require.NoError(t, err)
	s := d.DefaultStream()
	var args runtime.Args
	err = s.Launch(k, runtime.Dim3{X: math.MaxInt32}, runtime.Dim3{X: 4}, &args)
	assert.ErrorIs(t, err, runtime.ErrInvalidArgument)
	assert.ErrorContains(t, err, "work-items")
	require.NoError(t, s.Launch(k, runtime.Dim3{X: math.MaxInt32}, runtime.Dim3{X: 1}, &args), "2^31-1 work-items fit")
	assert.Len(t, g.Launches, 1)
}
