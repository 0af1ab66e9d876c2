package gokernel

import (
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/philox"
	"github.com/gumbel-go/gumbel/runtime"
)

var dtypes = []dtype{f32, f16, bf16}

func (d dtype) String() string { return suffixes[d][1:] }

func TestKernelsNames(t *testing.T) {
	k := Kernels()
	var names []string
	for n, fn := range k {
		require.NotNil(t, fn, n)
		names = append(names, n)
	}
	slices.Sort(names)
	assert.Equal(t, []string{
		"categorical_bf16", "categorical_f16", "categorical_f32",
		"gumbel_argmax_bf16", "gumbel_argmax_f16", "gumbel_argmax_f32",
		"topn_bf16", "topn_f16", "topn_f32",
	}, names)
}

// randomProblem builds nRows rows of one shape (some rows replaced by error rows) and
// launch rows that name a random subset of them in a random order.
func randomProblem(r *rand.Rand, d dtype, v int, shape func(*rand.Rand, int) []float32, params func(*rand.Rand) refParams) *problem {
	const nRows = 6
	p := &problem{d: d, vocab: v, stride: v + r.IntN(3)}
	for range nRows {
		row := shape(r, v)
		switch r.IntN(12) {
		case 0:
			row[r.IntN(v)] = float32(math.NaN())
		case 1:
			row[r.IntN(v)] = float32(math.Inf(1))
		case 2:
			for i := range row {
				row[i] = float32(math.Inf(-1))
			}
		}
		// The padding between rows holds values that must never be read.
		row = append(row, make([]float32, p.stride-v)...)
		for i := v; i < p.stride; i++ {
			row[i] = float32(math.NaN())
		}
		p.rows = append(p.rows, row)
	}
	perm := r.Perm(nRows)
	for _, row := range perm[:1+r.IntN(nRows)] {
		rp := params(r)
		rp.row = uint32(row)
		p.params = append(p.params, rp)
	}
	return p
}

func pick[T any](r *rand.Rand, v ...T) T { return v[r.IntN(len(v))] }

func randomTemperature(r *rand.Rand) float32 {
	switch r.IntN(20) {
	case 0:
		return pick(r, -1, float32(math.NaN()), float32(math.Inf(1)), 1e-40)
	case 1, 2, 3:
		return 0
	}
	return pick[float32](r, 0.05, 0.3, 0.7, 1, 1.7, 4)
}

func gumbelParams(r *rand.Rand) refParams {
	return refParams{temperature: randomTemperature(r), seed: r.Uint64(), step: r.Uint64() >> r.IntN(64)}
}

func categoricalParams(v int) func(*rand.Rand) refParams {
	return func(r *rand.Rand) refParams {
		p := gumbelParams(r)
		p.topK = uint32(pick(r, 0, 0, 1, 2, 5, 50, v-1, v, v+3, math.MaxUint32))
		p.topP = pick[float32](r, 0, 0, 0.01, 0.5, 0.9, 0.999, 1, 1.5, -0.5, float32(math.NaN()))
		p.minP = pick[float32](r, 0, 0, 0.001, 0.05, 0.5, 1, 2, -1)
		return p
	}
}

func TestGumbelArgmaxMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	for _, d := range dtypes {
		for _, shape := range rowShapes {
			for _, v := range []int{1, 3, 5, 64, 257, 1500} {
				t.Run(fmt.Sprintf("%s/%s/V=%d", d, shape.name, v), func(t *testing.T) {
					for _, s := range []int{1, 2, 3, 7, 64, v + 5} {
						order := launchOrder(r.IntN(3))
						p := randomProblem(r, d, v, shape.make, gumbelParams)
						b := p.run(t, gumbelKernel(d, true), s, order, r)
						p.check(t, b, refGumbelArgmax, fmt.Sprintf("S=%d %s", s, order))
					}
				})
			}
		}
	}
}

func TestCategoricalMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(2, 2))
	for _, d := range dtypes {
		for _, shape := range rowShapes {
			for _, v := range []int{1, 3, 5, 64, 257, 1500} {
				t.Run(fmt.Sprintf("%s/%s/V=%d", d, shape.name, v), func(t *testing.T) {
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
	p := &problem{d: f32, vocab: len(row), stride: len(row), rows: [][]float32{row}}
	for step := range 400 {
		p.params = append(p.params, refParams{temperature: 1, topK: 4, seed: 9, step: uint64(step)})
	}
	seen := map[int32]int{}
	for y := range p.params {
		one := &problem{d: f32, vocab: p.vocab, stride: p.stride, rows: [][]float32{slices.Clone(row)}, params: p.params[y : y+1]}
		b := one.run(t, categoricalKernel(f32), 1, onDevice, nil)
		require.Equal(t, StatusOK, b.status[0])
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

// TestSkipIsExact compares gumbel_argmax with and without the skipped noise, on rows
// where skipping is frequent and elements sit near both bounds.
func TestSkipIsExact(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	full := 0
	for _, d := range dtypes {
		for _, shape := range rowShapes {
			for range 3 {
				const v = 3000
				p := randomProblem(r, d, v, shape.make, func(r *rand.Rand) refParams {
					return refParams{temperature: pick[float32](r, 0.3, 1, 2.5), seed: r.Uint64(), step: r.Uint64()}
				})
				for _, s := range []int{1, 7} {
					with := p.run(t, gumbelKernel(d, true), s, onDevice, r)
					without := p.run(t, gumbelKernel(d, false), s, onDevice, r)
					require.Equal(t, without.tokens, with.tokens, "%s %s S=%d", d, shape.name, s)
					require.Equal(t, without.status, with.status, "%s %s S=%d", d, shape.name, s)
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

// scanAll runs the block scan over a whole row, chunk by chunk as gumbelBlock does.
func (sc *gumbelScan) scanAll(row []float32) {
	for i := 0; i < len(row); i += convertChunk {
		sc.noisy(row[i:min(i+convertChunk, len(row))], i)
	}
}

func TestWordBound(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 4))
	check := func(w, tail uint32) {
		g := philox.Gumbel(w, tail)
		require.LessOrEqual(t, g, wordBound[bits.Len32(w)], "Gumbel(%#x, %#x)", w, tail)
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
	assert.Equal(t, philox.MaxGumbel, wordBound[0])
	assert.Less(t, wordBound[32], float32(1), "a large word must bound the noise tightly")
}

func TestRadixSelect(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	for trial := range 300 {
		n := 1 + r.IntN(300)
		keys := make([]uint32, n)
		weights := make([]uint64, n)
		spread := pick(r, uint32(4), 1000, math.MaxUint32)
		for i := range keys {
			keys[i] = r.Uint32() % spread
			if r.IntN(3) == 0 {
				keys[i] <<= 24 // share low digits, differ in the top one
			}
			weights[i] = uint64(r.IntN(5)) // zero weights too
		}
		var total uint64
		for _, w := range weights {
			total += w
		}
		tmpK, tmpW := make([]uint32, n), make([]uint64, n)
		for _, weighted := range []bool{false, true} {
			ws := weights
			max := total
			if !weighted {
				ws, max = nil, uint64(n)
			}
			target := uint64(r.IntN(int(max) + 1))
			// Brute force: the largest present key whose mass at or above it reaches target.
			var want uint32
			found := false
			for _, t := range keys {
				var m uint64
				for i, k := range keys {
					if k >= t {
						if ws == nil {
							m++
						} else {
							m += ws[i]
						}
					}
				}
				if m >= target && (!found || t > want) {
					want, found = t, true
				}
			}
			require.True(t, found)
			got := radixSelect(keys, ws, target, tmpK, tmpW)
			require.Equal(t, want, got, "trial %d weighted=%v target=%d", trial, weighted, target)
		}
	}
}

// TestStatusCases pins each status code with a hand-written case.
func TestStatusCases(t *testing.T) {
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	cases := []struct {
		name       string
		row        []float32
		p          refParams
		tok, stats int32
	}{
		{"greedy", []float32{1, 3, 2, 3}, refParams{}, 1, StatusOK},
		{"greedy ignores -Inf", []float32{-inf, -5, -inf}, refParams{}, 1, StatusOK},
		{"NaN", []float32{1, nan, 2}, refParams{temperature: 1}, -1, StatusNonFinite},
		{"+Inf", []float32{1, inf, 2}, refParams{temperature: 1}, -1, StatusNonFinite},
		{"+Inf greedy", []float32{1, inf, 2}, refParams{}, -1, StatusNonFinite},
		{"all -Inf", []float32{-inf, -inf}, refParams{temperature: 1}, -1, StatusNoFinite},
		{"negative temperature", []float32{1, 2}, refParams{temperature: -1}, -1, StatusBadParams},
		{"NaN temperature", []float32{1, 2}, refParams{temperature: nan}, -1, StatusBadParams},
		{"infinite temperature", []float32{1, 2}, refParams{temperature: inf}, -1, StatusBadParams},
		{"temperature whose inverse overflows", []float32{1, 2}, refParams{temperature: 1e-40}, -1, StatusBadParams},
		{"sole finite logit", []float32{-inf, -inf, 7, -inf}, refParams{temperature: 1, seed: 3}, 2, StatusOK},
	}
	for _, c := range cases {
		for _, d := range dtypes {
			for _, kernel := range []struct {
				name string
				fn   runtime.GoKernel
			}{{"gumbel_argmax", gumbelKernel(d, true)}, {"categorical", categoricalKernel(d)}} {
				t.Run(c.name+"/"+kernel.name+"/"+d.String(), func(t *testing.T) {
					p := &problem{d: d, vocab: len(c.row), stride: len(c.row), rows: [][]float32{slices.Clone(c.row)}, params: []refParams{c.p}}
					for _, s := range []int{1, 3} {
						b := p.run(t, kernel.fn, s, onDevice, nil)
						assert.Equal(t, c.stats, b.status[0], "status, S=%d", s)
						assert.Equal(t, c.tok, b.tokens[0], "token, S=%d", s)
					}
				})
			}
		}
	}
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
				p := &problem{d: f32, vocab: 8, stride: 8, rows: [][]float32{row},
					params: []refParams{{temperature: 1, seed: pr.seed, step: pr.step}}}
				for _, skip := range []bool{true, false} {
					b := p.run(t, gumbelKernel(f32, skip), 1+int(j%2), onDevice, nil)
					require.Equal(t, c.want, b.tokens[0], "%s: seed %d step %d, elements %d and %d, skip %v", c.name, pr.seed, pr.step, j, pr.i, skip)
				}
				// topn ranks the same scores: its first entry must agree.
				p.params[0].flags, p.params[0].topN = FlagPerturbed, 2
				top := p.runTopN(t, f32, 1+int(j%2), 1024, onDevice, nil)
				require.Equal(t, c.want, top.outTokens[0], "topn %s: seed %d step %d, elements %d and %d", c.name, pr.seed, pr.step, j, pr.i)
			}
		}
	}
}
