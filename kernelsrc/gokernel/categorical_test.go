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
