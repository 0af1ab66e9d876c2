package gokernel

import (
	"math"
	"math/bits"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
)

// keptOf lists a kept set as (element, weight) pairs in index order, with its S.
func keptOf(ks keptSet) (elems []uint32, ws []float32, total uint64) {
	for j, i := range ks.idx {
		if ks.kept(j) {
			elems = append(elems, i)
			ws = append(ws, ks.w[j])
		}
	}
	return elems, ws, ks.total
}

// TestKeepFewMatchesKeepRow checks the one-scan kept set against the full-row reference
// on rows with ties, -Inf, flat stretches and LLM shapes, for every filter keepFew
// takes; the draws of both routes depend on nothing else.
func TestKeepFewMatchesKeepRow(t *testing.T) {
	r := rand.New(rand.NewPCG(25, 2026))
	shapes := map[string]func(n int) []float32{
		"llm": func(n int) []float32 { return llmLogits(r, n) },
		"ties": func(n int) []float32 {
			row := make([]float32, n)
			for i := range row {
				row[i] = float32(r.IntN(6)) / 2
			}
			return row
		},
		"neg-inf": func(n int) []float32 {
			row := make([]float32, n)
			for i := range row {
				row[i] = float32(math.Inf(-1))
				if r.IntN(8) == 0 {
					row[i] = float32(r.NormFloat64())
				}
			}
			row[r.IntN(n)] = 1
			return row
		},
		"flat": func(n int) []float32 {
			row := make([]float32, n)
			for i := range row {
				row[i] = 3
			}
			return row
		},
		"signed-zeros": func(n int) []float32 {
			row := make([]float32, n)
			for i := range row {
				row[i] = float32(math.Copysign(0, float64(r.IntN(2)*2-1)))
			}
			row[r.IntN(n)] = -1
			return row
		},
	}
	params := []abi.RowParams{
		{Temperature: 1, TopK: 1},
		{Temperature: 0.8, TopK: 40, TopP: 0.9},
		{Temperature: 0.7, TopK: 20, TopP: 0.8},
		{Temperature: 1, TopK: 50},
		{Temperature: 1.3, TopK: 1024, TopP: 0.95, MinP: 0.01},
		{Temperature: 0.5, TopK: 7, MinP: 0.3},
		{Temperature: 1, TopK: 3, TopP: 1e-9},
		{Temperature: 0.8, MinP: 0.05},
		{Temperature: 2, MinP: 1},
		{Temperature: 1e-3, MinP: 0.999},
	}
	var few, ref catScratch
	compared := 0
	for name, shape := range shapes {
		for _, n := range []int{5, 64, 1000, 20000} {
			for k := range params {
				p := params[k]
				row := shape(n)
				m, seen := rowMax(row, 0)
				if seenStatus(seen) != abi.StatusOK {
					continue
				}
				// The fused passes find the same maximum and observations, and leave
				// keepFew its candidates.
				var fm float32
				var fs abi.Seen
				switch {
				case minPAlone(&p, n):
					fm, fs = few.rowMaxMinP(row, 0, &p)
				case fewTopK(&p, n) > 0:
					fm, fs = few.rowMaxTopK(row, 0, fewTopK(&p, n))
				default:
					fm, fs = m, seen
				}
				require.Equal(t, math.Float32bits(m), math.Float32bits(fm), "%s n=%d %+v: maximum", name, n, p)
				require.Equal(t, seen, fs, "%s n=%d %+v: observations", name, n, p)
				got, ok := few.keepFew(&p, row, m)
				if p.TopK >= uint32(n) {
					continue // top-k off: keepFew takes it only with min-p alone
				}
				require.True(t, ok, "%s n=%d %+v: keepFew declined", name, n, p)
				want := ref.keepRow(&p, row, m)
				ge, gw, gt := keptOf(got)
				we, ww, wt := keptOf(want)
				require.Equal(t, we, ge, "%s n=%d %+v: kept elements", name, n, p)
				require.Equal(t, ww, gw, "%s n=%d %+v: weights", name, n, p)
				require.Equal(t, wt, gt, "%s n=%d %+v: S", name, n, p)
				compared++
			}
		}
	}
}

// TestKeepNucleusMatchesKeepRow checks top-p's select among the candidates of a cut
// against the full select of the reference: the threshold Kp, the kept set, its weights
// and S, and the tokens both kept sets give, by inverse CDF and by Gumbel-max. The rows
// put ties at the nucleus's boundary and at the cuts, mass just below the first cut (the
// second cut's case), flat rows and LLM rows without favourites (the full select's),
// -Inf holes and signed zeros, at lengths that are not multiples of four; both routes
// must be taken.
func TestKeepNucleusMatchesKeepRow(t *testing.T) {
	r := rand.New(rand.NewPCG(26, 2026))
	negInf := float32(math.Inf(-1))
	// at puts value v at count random places of row.
	at := func(row []float32, count int, v float32) []float32 {
		for range count {
			row[r.IntN(len(row))] = v
		}
		return row
	}
	fill := func(n int, f func(i int) float32) []float32 {
		row := make([]float32, n)
		for i := range row {
			row[i] = f(i)
		}
		return row
	}
	shapes := []struct {
		name string
		row  func(n int) []float32
	}{
		{"llm", func(n int) []float32 { return llmLogits(r, n) }},
		{"llm-no-favourites", func(n int) []float32 {
			return fill(n, func(int) float32 { return float32(r.NormFloat64() * 2) })
		}},
		{"dominant", func(n int) []float32 {
			return at(fill(n, func(int) float32 { return float32(r.NormFloat64()) }), 1, 60)
		}},
		{"ties", func(n int) []float32 {
			return fill(n, func(int) float32 { return float32(r.IntN(6)) / 2 })
		}},
		{"tied-nucleus", func(n int) []float32 {
			// A few tied leaders, a tied second rank, a tail far below.
			row := fill(n, func(int) float32 { return -30 + float32(r.NormFloat64()) })
			return at(at(row, 3, 0), 1+n/200, -1)
		}},
		{"ties-at-first-cut", func(n int) []float32 {
			// m = 0: d = -8 exactly at T = 1, the first cut's limit.
			row := fill(n, func(int) float32 { return -40 })
			return at(at(row, 1+n/50, -8), 1, 0)
		}},
		{"mass-below-first-cut", func(n int) []float32 {
			// Enough weight just under the first cut that its candidates fall short, over
			// few enough elements for the second.
			row := fill(n, func(int) float32 { return -40 })
			for range n / 30 {
				row[r.IntN(n)] = -8.5 - r.Float32()/2
			}
			return at(row, 1, 0)
		}},
		{"mass-below-first-cut-dense", func(n int) []float32 {
			row := fill(n, func(int) float32 { return -8.5 - r.Float32() })
			return at(row, 1, 0)
		}},
		{"flat", func(n int) []float32 { return fill(n, func(int) float32 { return 3 }) }},
		{"neg-inf", func(n int) []float32 {
			row := fill(n, func(int) float32 {
				if r.IntN(8) == 0 {
					return float32(r.NormFloat64())
				}
				return negInf
			})
			return at(row, 1, 1)
		}},
		{"neg-inf-but-one", func(n int) []float32 {
			return at(fill(n, func(int) float32 { return negInf }), 1, -3)
		}},
		{"signed-zeros", func(n int) []float32 {
			row := fill(n, func(int) float32 { return float32(math.Copysign(0, float64(r.IntN(2)*2-1))) })
			return at(row, 1, -1)
		}},
	}
	params := []abi.RowParams{
		{Temperature: 1, TopP: 0.9},
		{Temperature: 0.8, TopP: 0.95},
		{Temperature: 1, TopP: 1e-9},
		{Temperature: 1, TopP: 0.5},
		{Temperature: 1, TopP: 0.999999},
		{Temperature: 1, TopP: math.Nextafter32(1, 0)},
		{Temperature: 2.5, TopP: 0.9},
		{Temperature: 1e-3, TopP: 0.9},
		{Temperature: 1e-30, TopP: 0.7},
		{Temperature: 1e30, TopP: 0.9},
		{Temperature: 0.7, TopP: 0.9, MinP: 0.05},
		{Temperature: 1, TopP: 0.95, TopK: 1 << 30}, // top-k off: at least the row
	}
	lengths := []int{5, 63, 1001, 20003, benchVocab}
	if testing.Short() {
		lengths = lengths[:4]
	}
	var nuc, ref catScratch
	routes := map[bool]int{}
	for _, sh := range shapes {
		for _, n := range lengths {
			for _, p := range params {
				row := sh.row(n)
				m, seen := rowMax(row, 0)
				if seenStatus(seen) != abi.StatusOK {
					continue
				}
				got, ok := nuc.keepNucleus(&p, row, m)
				require.True(t, ok, "%s n=%d %+v: keepNucleus declined", sh.name, n, p)
				want := ref.keepRow(&p, row, m)
				routes[len(got.idx) < n]++
				require.Equal(t, want.threshold, got.threshold, "%s n=%d %+v: Kp", sh.name, n, p)
				ge, gw, gt := keptOf(got)
				we, ww, wt := keptOf(want)
				require.Equal(t, we, ge, "%s n=%d %+v: kept elements", sh.name, n, p)
				require.Equal(t, ww, gw, "%s n=%d %+v: weights", sh.name, n, p)
				require.Equal(t, wt, gt, "%s n=%d %+v: S", sh.name, n, p)
				for s := range uint64(4) {
					require.Equal(t, gumbelKept(&want, row, 7, s), gumbelKept(&got, row, 7, s),
						"%s n=%d %+v: Gumbel token", sh.name, n, p)
				}
				for _, u := range []uint64{0, 1 << 62, 1 << 63, 3 << 62, math.MaxUint64} {
					require.Equal(t, inverseCDF(&want, u), inverseCDF(&got, u),
						"%s n=%d %+v: inverse-CDF token at u=%#x", sh.name, n, p, u)
				}
			}
		}
	}
	require.Positive(t, routes[true], "no row took the candidates")
	require.Positive(t, routes[false], "no row took the full select")
}

// inverseCDF is drawKept's step 8 for the 64-bit uniform u.
func inverseCDF(ks *keptSet, u uint64) int {
	target, _ := bits.Mul64(u, ks.total)
	var acc uint64
	for j, i := range ks.idx {
		if ks.kept(j) {
			if acc += ks.q[j]; acc > target {
				return int(i)
			}
		}
	}
	return -1
}
