package gokernel

import (
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/gumbel-go/gumbel/philox"
)

func TestGumbelArgmaxMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	for _, d := range dtypes {
		for _, shape := range rowShapes {
			for _, v := range []int{1, 3, 5, 64, 257, 1500} {
				t.Run(fmt.Sprintf("%s/%s/V=%d", dtypeName(d), shape.name, v), func(t *testing.T) {
					for _, s := range []int{1, 2, 3, 7, 64, v + 5} {
						order := launchOrder(r.IntN(3))
						p := randomProblem(r, d, v, shape.make, gumbelParams)
						b := p.run(t, gumbelArgmaxKernel(d, true), s, order, r)
						p.check(t, b, refGumbelArgmax, fmt.Sprintf("S=%d %s", s, order))
					}
				})
			}
		}
	}
}

// TestSkipIsExact compares gumbel_argmax with and without the skipped noise, on rows
// where skipping is frequent and elements sit near both bounds.
func TestSkipIsExact(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	full := 0
	for _, d := range dtypes {
		for _, shape := range rowShapes {
			for range 3 {
				const v = 3000
				p := randomProblem(r, d, v, shape.make, func(r *rand.Rand) abi.RowParams {
					return abi.RowParams{Temperature: pick[float32](r, 0.3, 1, 2.5), Seed: r.Uint64(), Step: r.Uint64()}
				})
				for _, s := range []int{1, 7} {
					with := p.run(t, gumbelArgmaxKernel(d, true), s, onDevice, r)
					without := p.run(t, gumbelArgmaxKernel(d, false), s, onDevice, r)
					require.Equal(t, without.tokens, with.tokens, "%s %s S=%d", dtypeName(d), shape.name, s)
					require.Equal(t, without.status, with.status, "%s %s S=%d", dtypeName(d), shape.name, s)
					full++
				}
			}
		}
	}
	// The comparison means something only if the skip really skips: on a row with a
	// dominant logit, nearly every element's noise is skipped; without the skip none is.
	assert.Positive(t, full)
	for _, shape := range rowShapes {
		row := shape.make(r, 3000)
		with := gumbelScan{bestScore: negInf, invT: 1, key: philox.Key(5), skip: true}
		with.scanAll(row)
		without := gumbelScan{bestScore: negInf, invT: 1, key: philox.Key(5)}
		without.scanAll(row)
		assert.Equal(t, without.best, with.best, shape.name)
		finite := 0
		for _, x := range row {
			if x-x == 0 {
				finite++
			}
		}
		assert.Equal(t, finite, without.noised, shape.name)
		if finite > 100 {
			assert.Less(t, with.noised, finite/10, "%s: the skip must skip most noise", shape.name)
		}
		t.Logf("%s: noise computed for %d of %d finite elements", shape.name, with.noised, finite)
	}
}

// scanAll runs the block scan over a whole row, chunk by chunk as gumbelArgmax does.
func (sc *gumbelScan) scanAll(row []float32) {
	for i := 0; i < len(row); i += convertChunk {
		sc.scanGumbel(row[i:min(i+convertChunk, len(row))], i)
	}
}

// TestGumbelBound: gumbelBound(w) bounds the noise of every word of each bit length,
// whatever its tail word.
func TestGumbelBound(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 4))
	check := func(w, tail uint32) {
		g := philox.Gumbel(w, tail)
		require.LessOrEqual(t, g, gumbelBound(w), "Gumbel(%#x, %#x)", w, tail)
	}
	for l := 0; l <= 32; l++ {
		lo := uint32(0)
		if l > 0 {
			lo = 1 << (l - 1)
		}
		// The smallest words of each length give the largest noise.
		for dw := uint32(0); dw < 64 && (l == 0 || bits.Len32(lo+dw) == l); dw++ {
			for _, tail := range []uint32{0, 1, 1 << 31, math.MaxUint32} {
				check(lo+dw, tail)
			}
		}
		for range 2000 {
			w := lo
			if l > 1 {
				w |= r.Uint32() & (lo - 1)
			}
			check(w, r.Uint32())
		}
	}
	assert.Equal(t, abi.MaxGumbel, gumbelBound(0))
	assert.Less(t, gumbelBound(math.MaxUint32), float32(1), "a large word must bound the noise tightly")
}

// tieWith returns x such that philox.Score(x, 1, g) == target, searching around
// target - g (float32 addition is monotonic in x).
func tieWith(target, g float32) (float32, bool) {
	x := float32(target - g)
	for range 64 {
		s := philox.Score(x, 1, g)
		switch {
		case s == target:
			return x, true
		case s < target:
			x = math.Nextafter32(x, float32(math.Inf(1)))
		default:
			x = math.Nextafter32(x, float32(math.Inf(-1)))
		}
	}
	return 0, false
}

// TestNoiseIsExact pins each element's noise to the last bit: two finite elements whose
// scores tie exactly (the lower index must win) or differ by one ulp (the higher score
// must win). Any change in the noise, however small, moves one of the two cases. The
// later element of each pair draws a main word below 2^12, where the tail word decides
// the noise in its 12th bit.
func TestNoiseIsExact(t *testing.T) {
	type pair struct {
		seed, step uint64
		i          uint32 // the later element, with a small main word
	}
	var pairs []pair
	for seed := uint64(0); len(pairs) < 4; seed++ {
		step := seed * 7919
		words := philox.Block(philox.Counter(4, step, philox.PurposeGumbel), philox.Key(seed))
		for k, w := range words {
			if w < 1<<12 {
				pairs = append(pairs, pair{seed, step, uint32(4 + k)})
			}
		}
	}
	r := rand.New(rand.NewPCG(6, 6))
	for range 8 {
		pairs = append(pairs, pair{r.Uint64(), r.Uint64(), 4 + uint32(r.IntN(4))})
	}
	negInf := float32(math.Inf(-1))
	for _, pr := range pairs {
		gi := philox.ElementGumbel(pr.seed, pr.step, pr.i)
		for j := uint32(0); j < 4; j++ {
			gj := philox.ElementGumbel(pr.seed, pr.step, j)
			xi := float32(1.25)
			si := philox.Score(xi, 1, gi)
			for _, c := range []struct {
				name   string
				target float32
				want   int32
			}{
				{"tie", si, int32(j)},
				{"one ulp below", math.Nextafter32(si, negInf), int32(pr.i)},
				{"one ulp above", math.Nextafter32(si, -negInf), int32(j)},
			} {
				xj, ok := tieWith(c.target, gj)
				if !ok {
					continue
				}
				row := []float32{negInf, negInf, negInf, negInf, negInf, negInf, negInf, negInf}
				row[pr.i], row[j] = xi, xj
				p := &problem{d: abi.F32, vocab: 8, stride: 8, rows: [][]float32{row},
					params: []abi.RowParams{{Temperature: 1, Seed: pr.seed, Step: pr.step}}}
				for _, skip := range []bool{true, false} {
					b := p.run(t, gumbelArgmaxKernel(abi.F32, skip), 1+int(j%2), onDevice, nil)
					require.Equal(t, c.want, b.tokens[0], "%s: seed %d step %d, elements %d and %d, skip %v", c.name, pr.seed, pr.step, j, pr.i, skip)
				}
				// topn ranks the same scores: its first entry must agree.
				p.params[0].Flags, p.params[0].TopN = abi.FlagPerturbed, 2
				top := p.runTopN(t, abi.F32, 1+int(j%2), 1024, onDevice, nil)
				require.Equal(t, c.want, top.outTokens[0], "topn %s: seed %d step %d, elements %d and %d", c.name, pr.seed, pr.step, j, pr.i)
			}
		}
	}
}
