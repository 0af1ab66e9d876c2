package gokernel

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
)

func TestCategoricalMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(2, 2))
	for _, d := range dtypes {
		for _, shape := range rowShapes {
			for _, v := range []int{1, 3, 5, 64, 257, 1500} {
				t.Run(fmt.Sprintf("%s/%s/V=%d", dtypeName(d), shape.name, v), func(t *testing.T) {
					for _, s := range []int{1, 1, 1, 2} {
						order := launchOrder(r.IntN(3))
						p := randomProblem(r, d, v, shape.make, categoricalParams(v))
						b := p.run(t, categoricalKernel(d), s, order, r)
						p.check(t, b, refCategorical, fmt.Sprintf("S=%d %s", s, order))
					}
				})
			}
		}
	}
}

// TestCategoricalDrawsEveryKeptToken checks the inverse CDF end to end: over many steps
// of one row, every token drawn is in the kept set and every kept token of real mass is
// drawn.
func TestCategoricalDrawsEveryKeptToken(t *testing.T) {
	row := []float32{2, 1, 1, 0.5, 3, -1, float32(math.Inf(-1)), 3, 0}
	p := &problem{d: abi.F32, vocab: len(row), stride: len(row), rows: [][]float32{row}}
	for step := range 400 {
		p.params = append(p.params, abi.RowParams{Temperature: 1, TopK: 4, Seed: 9, Step: uint64(step)})
	}
	seen := map[int32]int{}
	for y := range p.params {
		one := &problem{d: abi.F32, vocab: p.vocab, stride: p.stride, rows: [][]float32{slices.Clone(row)}, params: p.params[y : y+1]}
		b := one.run(t, categoricalKernel(abi.F32), 1, onDevice, nil)
		require.Equal(t, abi.StatusOK, b.status[0])
		seen[b.tokens[0]]++
	}
	// top-k 4 keeps 3, 3, 2 and both 1s (ties at the 4th value are kept).
	assert.ElementsMatch(t, []int32{0, 1, 2, 4, 7}, mapsKeys(seen))
	assert.Greater(t, seen[4]+seen[7], seen[1]+seen[2], "the two largest logits carry most mass")
}

func mapsKeys(m map[int32]int) []int32 {
	var k []int32
	for key := range m {
		k = append(k, key)
	}
	return k
}

// TestRowMaxMatchesExactLoop: rowMax (its vector scan included) gives the exact loop's
// maximum, signed zero included, and observations on rows holding NaN, ±Inf and signed
// zeros anywhere, at every length mod 4.
func TestRowMaxMatchesExactLoop(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 41))
	exact := func(row []float32) (float32, abi.Seen) { return rowMaxExact(row, 0) }
	specials := []float32{negInf, float32(math.Inf(1)), float32(math.NaN()), 0, float32(math.Copysign(0, -1))}
	for trial := range 3000 {
		n := r.IntN(40)
		row := make([]float32, n)
		for i := range row {
			switch r.IntN(4) {
			case 0:
				row[i] = specials[r.IntN(len(specials))]
			case 1:
				row[i] = specials[r.IntN(2)] // -Inf and +Inf more often
			default:
				row[i] = float32(r.NormFloat64())
				if trial%3 == 0 {
					row[i] = -float32(math.Abs(float64(row[i]))) // at most 0, so a zero can win
				}
			}
		}
		if trial%2 == 0 {
			for i := range row { // NaN and +Inf only in some rows
				if !(row[i] < float32(math.Inf(1))) {
					row[i] = negInf
				}
			}
		}
		wantM, wantS := exact(row)
		m, s := rowMax(row, 0)
		require.Equal(t, math.Float32bits(wantM), math.Float32bits(m), "row %v", row)
		require.Equal(t, wantS, s, "row %v", row)
	}
}
