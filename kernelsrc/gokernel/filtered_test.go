package gokernel

import (
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/gumbel-go/gumbel/philox"
	"github.com/gumbel-go/gumbel/runtime"
)

// The filtered route's draw at any temperature (ABI.md, "filtered"): Gumbel-max over the
// categorical kernel's kept set, each element valued as in "Exact scores".

func filteredKernel(d abi.DType) runtime.GoKernel {
	return func(b *runtime.BlockContext) { filtered(b, d) }
}

// refFiltered is the filtered route's token: over the kept set of refCategoricalKept, the
// element of largest value in arbitrary precision (refExactValue), ties to the lowest
// index.
func refFiltered(row []float32, p abi.RowParams) (int32, abi.Status) {
	tok, status, kept := refCategoricalKept(row, p)
	if kept == nil {
		return tok, status
	}
	invT := float32(1 / p.Temperature)
	best, bestValue := -1, new(big.Float)
	for i, x := range row {
		if !kept[i] {
			continue
		}
		if v := refExactValue(x, invT, philox.ElementGumbel(p.Seed, p.Step, uint32(i))); best < 0 || v.Cmp(bestValue) > 0 {
			best, bestValue = i, v
		}
	}
	return int32(best), abi.StatusOK
}

// extremeFilteredRows are rows whose scores reach ExactLimit at the temperatures of
// TestFilteredExactMatchesReference: constant rows of huge values (the noise alone
// decides among them), a tie of two logits above small ones, values near ±MaxFloat32,
// and an LLM row huge in one part only.
var extremeFilteredRows = []struct {
	name string
	make func(*rand.Rand, int) []float32
}{
	{"flat", func(r *rand.Rand, v int) []float32 {
		return slices.Repeat([]float32{pick[float32](r, 1e7, -1e9, 6e4, math.MaxFloat32, -math.MaxFloat32)}, v)
	}},
	{"tie25", func(r *rand.Rand, v int) []float32 {
		row := make([]float32, v)
		for i := range row {
			row[i] = float32(r.IntN(4))
		}
		row[r.IntN(v)], row[r.IntN(v)] = 25, 25
		return row
	}},
	{"max", func(r *rand.Rand, v int) []float32 {
		row := make([]float32, v)
		sign := pick[float32](r, 1, -1)
		for i := range row {
			row[i] = sign * math.MaxFloat32 * float32(1-float64(r.IntN(3))*0x1p-23)
		}
		return row
	}},
	{"part", func(r *rand.Rand, v int) []float32 {
		row := llmRow(r, v)
		for i := range v / 3 {
			row[i] = 6e4 - float32(r.IntN(3))
		}
		return row
	}},
}

// TestFilteredExactMatchesReference runs the filtered kernel on rows whose float32 scores
// lose the noise, with every filter path of the Go edition (keepFew's top-k and min-p
// alone, keepRow for top-p without top-k and for top-k above fewKeys), and requires the
// token of the arbitrary-precision reference, in every dtype.
func TestFilteredExactMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 3))
	filters := []abi.RowParams{
		{TopK: 2}, {TopK: 3, TopP: 0.9}, {TopP: 0.9}, {TopP: 0.5}, {MinP: 0.5}, {MinP: 0.05},
		{TopK: 3, MinP: 0.5}, {TopK: 1100, TopP: 0.95}, {TopK: 1100},
	}
	exact := 0
	for _, d := range dtypes {
		for _, shape := range extremeFilteredRows {
			for _, v := range []int{4, 37, 1500} {
				t.Run(fmt.Sprintf("%s/%s/V=%d", dtypeName(d), shape.name, v), func(t *testing.T) {
					for range 6 {
						p := randomProblem(r, d, v, shape.make, func(r *rand.Rand) abi.RowParams {
							rp := filters[r.IntN(len(filters))]
							rp.Temperature = pick[float32](r, 1, 0.3, 1e-3, 1e-7, 1e-30)
							rp.Seed, rp.Step = r.Uint64(), r.Uint64()
							return rp
						})
						b := p.run(t, filteredKernel(d), 1, launchOrder(r.IntN(3)), r)
						p.check(t, b, refFiltered, "filtered")
						for _, rp := range p.params {
							if float32Winner(p.rows[rp.Row][:v], rp) != b.tokens[rp.Row] {
								exact++
							}
						}
					}
				})
			}
		}
	}
	t.Logf("%d draws whose float32 winner was wrong", exact)
	require.Greater(t, exact, 150, "too few draws need the exact comparison")
}

// float32Winner is the token the float32 scores alone would draw (-1 off the sampled
// path): the kept element of largest packed score.
func float32Winner(row []float32, p abi.RowParams) int32 {
	_, _, kept := refCategoricalKept(row, p)
	if kept == nil {
		return -1
	}
	var best uint64
	for i, x := range row {
		if kept[i] {
			best = max(best, pack(philox.Score(x, float32(1/p.Temperature), philox.ElementGumbel(p.Seed, p.Step, uint32(i))), i))
		}
	}
	return int32(^uint32(best))
}

// TestFilteredExactLaws draws from rows whose law is known by hand and where float32
// scores always gave the lowest index: equal huge logits (all kept, since top-k keeps
// ties at the k-th value and top-p and min-p keep a flat row whole) share the mass
// equally, and [25, 25, 3, 1] at a tiny temperature keeps and halves the two 25s. Each
// path of the Go edition is taken: keepFew's top-k (and top-k with top-p), its min-p
// alone, and keepRow for top-p alone.
func TestFilteredExactLaws(t *testing.T) {
	const n = 2000
	flat := func(c float32) []float32 { return []float32{c, c, c, c} }
	tie := []float32{25, 25, 3, 1}
	for _, c := range []struct {
		d    abi.DType
		row  []float32
		p    abi.RowParams
		want []float64
	}{
		{abi.F32, flat(1e7), abi.RowParams{Temperature: 1, TopK: 2}, []float64{0.25, 0.25, 0.25, 0.25}},
		{abi.F32, flat(-1e9), abi.RowParams{Temperature: 1, TopP: 0.9}, []float64{0.25, 0.25, 0.25, 0.25}},
		{abi.F32, flat(math.MaxFloat32), abi.RowParams{Temperature: 1, MinP: 0.5}, []float64{0.25, 0.25, 0.25, 0.25}},
		// x'/T overflows: every score is +Inf, the values x'/T + g differ by the noise.
		{abi.F32, flat(math.MaxFloat32), abi.RowParams{Temperature: 0.5, TopK: 3, TopP: 0.9}, []float64{0.25, 0.25, 0.25, 0.25}},
		{abi.F32, flat(-math.MaxFloat32), abi.RowParams{Temperature: 1e-30, MinP: 0.05}, []float64{0.25, 0.25, 0.25, 0.25}},
		{abi.F32, tie, abi.RowParams{Temperature: 1e-7, TopP: 0.9}, []float64{0.5, 0.5, 0, 0}},
		{abi.F32, tie, abi.RowParams{Temperature: 1e-30, TopP: 0.9}, []float64{0.5, 0.5, 0, 0}},
		{abi.F32, tie, abi.RowParams{Temperature: 1e-7, TopK: 3, TopP: 0.9}, []float64{0.5, 0.5, 0, 0}},
		{abi.F32, tie, abi.RowParams{Temperature: 1e-5, MinP: 0.05}, []float64{0.5, 0.5, 0, 0}},
		{abi.BF16, flat(1e7), abi.RowParams{Temperature: 1, TopK: 2}, []float64{0.25, 0.25, 0.25, 0.25}},
		{abi.F16, flat(6e4), abi.RowParams{Temperature: 1e-3, TopP: 0.5}, []float64{0.25, 0.25, 0.25, 0.25}},
		{abi.BF16, tie, abi.RowParams{Temperature: 1e-30, MinP: 0.5}, []float64{0.5, 0.5, 0, 0}},
	} {
		name := fmt.Sprintf("%s/%v/T=%g/k=%d/p=%g/minp=%g", dtypeName(c.d), c.row, c.p.Temperature, c.p.TopK, c.p.TopP, c.p.MinP)
		t.Run(name, func(t *testing.T) {
			counts := make([]int, len(c.row))
			const draws = 50 // per launch: the filtered route's partials grow with the draws
			for step := 0; step < n; step += draws {
				p := &problem{d: c.d, vocab: len(c.row), stride: len(c.row), rows: [][]float32{slices.Clone(c.row)}, draws: draws}
				rp := c.p
				rp.Seed, rp.Step = 77, uint64(step)
				p.params = []abi.RowParams{rp}
				b := p.run(t, filteredKernel(c.d), 1, reversed, nil)
				for z := range draws {
					require.Equal(t, abi.StatusOK, b.status[z])
					counts[b.tokens[z]]++
				}
			}
			for i, w := range c.want {
				// Five standard deviations of a binomial count.
				sd := math.Sqrt(n * w * (1 - w))
				require.InDelta(t, n*w, float64(counts[i]), 5*sd+0.5, "token %d: counts %v", i, counts)
			}
		})
	}
}
