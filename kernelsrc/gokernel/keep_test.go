package gokernel

import (
	"math"
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
