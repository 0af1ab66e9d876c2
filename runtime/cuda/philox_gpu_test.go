//go:build gpu

package cuda

import (
	"math"
	"testing"

	"github.com/gumbel-go/gumbel/kernelsrc"
	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/gumbel-go/gumbel/philox"
	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/runtime/internal/gpurt"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// philoxProbe is appended to the CUDA edition: it exposes the edition's own gb_philox and
// gb_gumbel (the device functions the sampling kernels call) for millions of counters.
const philoxProbe = `
extern "C" __global__ void probe_philox(gb_u32* blocks, float* noise, gb_u32 n, gb_u32 seed_lo,
                                        gb_u32 seed_hi, gb_u32 step_lo, gb_u32 step_hi) {
    gb_u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    gb_u32 w[4], t[4];
    gb_philox(i, step_lo, step_hi, GB_PURPOSE_GUMBEL, seed_lo, seed_hi, w);
    gb_philox(i, step_lo, step_hi, GB_PURPOSE_GUMBEL_TAIL, seed_lo, seed_hi, t);
    for (int j = 0; j < 4; ++j) {
        blocks[4 * i + j] = w[j];
        noise[4 * i + j] = gb_gumbel(w[j], w[j] < 16777216u ? t[j] : 0u);
    }
}
`

// noiseTolerance is how far the CUDA edition's noise may lie from the reference: g =
// -log(E) inherits E's relative error (log1pf or logf, 1-2 ulp: an absolute error of a few
// 2^-24 in g, however small g is) plus logf's own last-place error in g.
func noiseTolerance(g float32) float64 {
	a := math.Abs(float64(g))
	ulp := float64(math.Nextafter32(float32(a), float32(math.Inf(1)))) - a
	return 4*0x1p-24 + 2*ulp
}

// TestGPUPhiloxMatchesGo checks the CUDA edition's Philox words against philox.Block for
// 4M counters (16M words) over several keys and steps, and its Gumbel noise against
// philox.Gumbel: words must be identical; noise may differ only where CUDA's logf and
// log1pf round differently from the correctly rounded reference, by a few ulps at most.
func TestGPUPhiloxMatchesGo(t *testing.T) {
	d := openGPU(t)
	mod, err := d.Load(&runtime.Program{Name: "philox-probe", CUDA: kernelsrc.CUDA + philoxProbe, CUDAHeaders: kernelsrc.CUDAHeaders})
	require.NoError(t, err)
	k, err := mod.Kernel("probe_philox")
	require.NoError(t, err)
	const n = 1 << 20 // counters per launch; 4 words each
	blocks, err := d.Alloc(16 * n)
	require.NoError(t, err)
	noise, err := d.Alloc(16 * n)
	require.NoError(t, err)
	st := d.DefaultStream()
	gotW := make([]uint32, 4*n)
	gotG := make([]float32, 4*n)
	var args runtime.Args
	var words, noiseIdentical, noiseTotal int
	var maxDiff, worstRatio float64
	for _, c := range []struct{ seed, step uint64 }{{0, 0}, {0xdeadbeefcafef00d, 7}, {42, 1 << 40}, {math.MaxUint64, math.MaxUint64}} {
		args.Reset().Buffer(blocks).Buffer(noise).U32(n).
			U32(uint32(c.seed)).U32(uint32(c.seed >> 32)).U32(uint32(c.step)).U32(uint32(c.step >> 32))
		require.NoError(t, st.Launch(k, runtime.Dim3{X: n / 256, Y: 1, Z: 1}, runtime.Dim3{X: 256, Y: 1, Z: 1}, &args))
		require.NoError(t, st.CopyToHost(runtime.BytesOf(gotW), blocks, 0))
		require.NoError(t, st.CopyToHost(runtime.BytesOf(gotG), noise, 0))
		require.NoError(t, st.Synchronize())
		key := philox.Key(c.seed)
		for i := uint32(0); i < n; i++ {
			want := philox.Block(philox.Counter(4*i, c.step, philox.PurposeGumbel), key)
			for j := range 4 {
				if gotW[4*i+uint32(j)] != want[j] {
					require.Failf(t, "philox word differs", "seed %#x step %d counter %d word %d: got %#x want %#x",
						c.seed, c.step, i, j, gotW[4*i+uint32(j)], want[j])
				}
				words++
			}
			// Noise: every 61st counter (the reference costs two float64 logs).
			if i%61 != 0 {
				continue
			}
			for j := range 4 {
				idx := 4*i + uint32(j)
				g := philox.ElementGumbel(c.seed, c.step, idx)
				noiseTotal++
				if g == gotG[idx] {
					noiseIdentical++
				}
				d := math.Abs(float64(g) - float64(gotG[idx]))
				maxDiff = max(maxDiff, d)
				worstRatio = max(worstRatio, d/noiseTolerance(g))
			}
		}
	}
	t.Logf("philox: %d words identical to philox.Block; gumbel noise: %d of %d identical (%.3f%%), largest difference %.3g (%.2f of the tolerance)",
		words, noiseIdentical, noiseTotal, 100*float64(noiseIdentical)/float64(noiseTotal), maxDiff, worstRatio)
	assert.LessOrEqual(t, worstRatio, 1.0, "CUDA noise farther from philox.Gumbel than last-place rounding explains")
}

// TestGPUCubinParamCounts checks the parameter counts read from the CUBIN against the
// driver's own answer (probing cuFuncGetParamInfo past the end), for every sampling
// kernel: ABI.md gives each eight parameters.
func TestGPUCubinParamCounts(t *testing.T) {
	d := openGPU(t)
	mod, err := d.Load(kernelsrc.Sampling())
	require.NoError(t, err)
	m := mod.(*gpurt.Module)
	require.True(t, d.target.cubin, "the H200 target compiles to a CUBIN")
	for _, base := range []string{abi.GumbelArgmax, abi.Categorical, abi.TopN} {
		for _, suffix := range abi.Suffixes {
			name := base + suffix
			kk, err := mod.Kernel(name)
			require.NoError(t, err)
			k := kk.(*gpurt.Kernel)
			n, ok := cubinParamCount(m.Image, name)
			require.True(t, ok, name)
			assert.Equal(t, len(abiParamSizes), n, name)
			var probed []int
			require.NoError(t, d.core.WithDevice(func() error {
				probed = paramSizes(d.drv, k.Fn, -1)
				return nil
			}))
			assert.Equal(t, probed, k.ParamSizes, name)
			assert.Equal(t, abiParamSizes, k.ParamSizes, name)
		}
	}
}
