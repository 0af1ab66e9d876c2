package mslemu

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/gumbel-go/gumbel/kernelsrc/gokernel"
)

// exactShapes are rows whose scores reach ExactLimit at the temperatures of
// TestExactScoresMatchGoEdition (ABI.md, "Exact scores"): constant rows of huge values,
// where the noise alone decides; two tied large logits above small ones; values near
// ±MaxFloat32; a row huge in one part only; and a few ordinary logits among -3e38, whose
// x'/T underflows to -Inf below T = 1 (a topn list then has empty entries).
var exactShapes = []func(r *rand.Rand, v int) []float32{
	func(r *rand.Rand, v int) []float32 {
		c := pick[float32](r, 1e7, -1e9, 3e38, 6e4)
		return slices.Repeat([]float32{c}, v)
	},
	func(r *rand.Rand, v int) []float32 {
		row := slices.Repeat([]float32{1}, v)
		row[r.IntN(v)], row[r.IntN(v)] = 25, 25
		return row
	},
	func(r *rand.Rand, v int) []float32 {
		row := make([]float32, v)
		for i := range row {
			row[i] = float32(math.MaxFloat32) * float32(1-r.Float64()*1e-6) * pick[float32](r, 1, -1)
		}
		return row
	},
	func(r *rand.Rand, v int) []float32 {
		row := make([]float32, v)
		for i := range row {
			row[i] = float32(r.NormFloat64() * 3)
		}
		for i := range v / 3 {
			row[i] = 6e4 - float32(r.IntN(3))
		}
		return row
	},
	func(r *rand.Rand, v int) []float32 {
		row := slices.Repeat([]float32{-3e38}, v)
		for range 1 + r.IntN(3) {
			row[r.IntN(v)] = float32(r.NormFloat64())
		}
		return row
	},
}

// exactTemperatures are the temperatures of exact rows: ordinary, then small enough
// that |x/T| of ordinary logits reaches ExactScale.
var exactTemperatures = []float32{1, 0.3, 1e-3, 1e-5, 1e-7, 1e-30}

// TestExactScoresMatchGoEdition runs gumbel_argmax (then gumbel_exact, as the sampler
// does) and perturbed topn (SampleDistinct, N from 1 to 20) in the emulator on rows whose
// scores need the exact comparison, with and without the row features (processors,
// records, RECORD over several draws, ADVANCE): tokens, status, counts and params must
// equal the Go edition's, records and topn values agree within recordTolerance.
func TestExactScoresMatchGoEdition(t *testing.T) {
	bin := buildDriver(t)
	r := rand.New(rand.NewPCG(2026, 1202))
	var cases []*launchCase
	topnRows := 0
	for dtype := range abi.Suffixes {
		for _, S := range []int{1, 3, 16, 1, 3, 16} {
			for _, kernel := range []kernelKind{gumbelArgmax, topN} {
				v := pick(r, 37, 257, 1001)
				D := 1 + r.IntN(3)
				if kernel == topN {
					D = 1
				}
				T := pick(r, 32, 256)
				c := newFeatureCase(r, "exact "+featureCaseName(kernel, dtype, T, S, D, v, 0), kernel, dtype, T, S, D, 5, v)
				esize := 4
				if dtype != 0 {
					esize = 2
				}
				for row := range c.outRows {
					if r.IntN(5) != 0 {
						encodeRow(dtype, exactShapes[r.IntN(len(exactShapes))](r, v), c.logits[row*c.stride*esize:])
					}
				}
				for y := range c.launchRows() {
					p := c.rowParams(y)
					if kernel == topN {
						p.Flags |= abi.FlagPerturbed
						p.TopN = pick[uint32](r, 1, 2, 5, 20)
					}
					if p.Temperature > 0 && !math.IsInf(float64(p.Temperature), 0) {
						p.Temperature = pick(r, exactTemperatures...)
						if kernel == topN {
							topnRows++
						}
					}
					c.setRowParams(y, p)
				}
				cases = append(cases, c)
			}
		}
	}
	got := runDriver(t, bin, cases)
	kernels := gokernel.Kernels()
	exact := 0
	for i, c := range cases {
		want := runGoEdition(t, c, kernels, r)
		compareOutputs(t, c, want, got[i])
		if c.kernel != gumbelArgmax {
			continue
		}
		assert.NotContains(t, got[i].status, int32(abi.StatusExact), "%s: a draw left unfinished", c.name)
		// How many slots took the exact path: run again without gumbel_exact.
		only := *c
		only.argmaxOnly = true
		for _, st := range runGoEdition(t, &only, kernels, r).status {
			if st == int32(abi.StatusExact) {
				exact++
			}
		}
	}
	t.Logf("%d launches, %d slots finished by gumbel_exact, %d perturbed topn rows at exact temperatures", len(cases),
		exact, topnRows)
	require.Greater(t, exact, 30, "too few slots need the exact comparison")
	require.Greater(t, topnRows, 40, "too few topn rows at exact temperatures")
}
