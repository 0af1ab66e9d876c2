package philox

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The Random123 known-answer vectors for philox4x32-10 (kat_vectors: counter, key,
// expected output).
func TestBlockKnownAnswers(t *testing.T) {
	cases := []struct {
		name string
		ctr  [4]uint32
		key  [2]uint32
		want [4]uint32
	}{
		{"zeros", [4]uint32{}, [2]uint32{}, [4]uint32{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
		{"ones", [4]uint32{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, [2]uint32{0xffffffff, 0xffffffff},
			[4]uint32{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
		{"pi", [4]uint32{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, [2]uint32{0xa4093822, 0x299f31d0},
			[4]uint32{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.want, Block(c.ctr, c.key))
		})
	}
}

func TestContractLayout(t *testing.T) {
	seed := uint64(0x0123456789abcdef)
	assert.Equal(t, [2]uint32{0x89abcdef, 0x01234567}, Key(seed))
	step := uint64(0xfeedface_00000007)
	assert.Equal(t, [4]uint32{1000 >> 2, 7, 0xfeedface, uint32(PurposeGumbelTail)}, Counter(1000, step, PurposeGumbelTail))
	// Element index uses word index&3 of its block: four consecutive elements share one.
	for i := uint32(0); i < 16; i++ {
		blk := Block(Counter(i, step, PurposeGumbel), Key(seed))
		assert.Equal(t, blk[i&3], Word(seed, step, i, PurposeGumbel), "index %d", i)
	}
	// Purposes, steps and seeds give independent words.
	w := Word(seed, 3, 5, PurposeGumbel)
	assert.NotEqual(t, w, Word(seed, 3, 5, PurposeGumbelTail))
	assert.NotEqual(t, w, Word(seed, 4, 5, PurposeGumbel))
	assert.NotEqual(t, w, Word(seed+1, 3, 5, PurposeGumbel))
	b := Block(Counter(0, 9, PurposeCategorical), Key(seed))
	assert.Equal(t, uint64(b[1])<<32|uint64(b[0]), CategoricalUniform64(seed, 9))
}

func TestRowSeed(t *testing.T) {
	// Deterministic, sensitive to both inputs, and distinct across many request ids.
	assert.Equal(t, RowSeed(1, 2), RowSeed(1, 2))
	assert.NotEqual(t, RowSeed(1, 2), RowSeed(2, 2))
	assert.NotEqual(t, RowSeed(1, 2), RowSeed(1, 3))
	seen := make(map[uint64]bool)
	for id := uint64(0); id < 10000; id++ {
		s := RowSeed(42, id)
		require.False(t, seen[s], "collision at request %d", id)
		seen[s] = true
	}
	// SplitMix64 of 0 is the first output of the reference generator seeded with 0.
	assert.Equal(t, uint64(0xe220a8397b1dcdaf), SplitMix64(0))
}

func TestExponentialEdges(t *testing.T) {
	cases := []struct {
		name    string
		w, tail uint32
		lo, hi  float64 // bounds on E
	}{
		{"smallest u", 0, 0, 0, 1e-19},
		{"w 0 large tail", 0, 0xffffffff, 1e-10, 2.4e-10},
		{"just below tail threshold", TailThreshold - 1, 0, 0.0039, 0.0040},
		{"tail threshold", TailThreshold, 0, 0.0039, 0.0040},
		{"half", 1 << 31, 0, 0.69, 0.70},
		{"largest u", 0xffffffff, 0, 22.8, 22.9},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := float64(Exponential(c.w, c.tail))
			assert.True(t, e > c.lo && e < c.hi, "E=%g not in (%g, %g)", e, c.lo, c.hi)
			g := Gumbel(c.w, c.tail)
			assert.False(t, math.IsInf(float64(g), 0) || math.IsNaN(float64(g)))
			assert.LessOrEqual(t, g, MaxGumbel)
		})
	}
	// The noise reaches past 40 nats: far-below tokens keep their mass.
	assert.Greater(t, Gumbel(0, 0), float32(44))
}

// E is monotone in u: non-decreasing in the main word, and in the tail word below the
// threshold, with no gap at the threshold or at the 1/2 branch.
func TestExponentialMonotone(t *testing.T) {
	prev := float32(0)
	for w := uint32(0); w < 1<<12; w++ {
		for _, tail := range []uint32{0, 1 << 31, 0xffffffff} {
			e := Exponential(w, tail)
			require.GreaterOrEqual(t, e, prev, "w=%d tail=%d", w, tail)
			prev = e
		}
	}
	for _, w := range []uint32{TailThreshold - 2, TailThreshold - 1, TailThreshold, TailThreshold + 1, 1<<31 - 2, 1<<31 - 1, 1 << 31, 1<<31 + 1} {
		e0 := Exponential(w, 0xffffffff)
		e1 := Exponential(w+1, 0)
		assert.LessOrEqual(t, e0, e1, "w=%d", w)
		assert.InDelta(t, float64(e0), float64(e1), 1e-5*float64(e1)+1e-30, "jump at w=%d", w)
	}
}

// E is Exp(1): mean 1, variance 1, P(E > 2) = e^-2, over stream words.
func TestExponentialDistribution(t *testing.T) {
	const n = 1 << 20
	var sum, sumSq float64
	var above2 int
	for i := uint32(0); i < n; i++ {
		e := float64(ElementGumbelExp(7, 11, i))
		sum += e
		sumSq += e * e
		if e > 2 {
			above2++
		}
	}
	mean := sum / n
	variance := sumSq/n - mean*mean
	assert.InDelta(t, 1, mean, 5*1/math.Sqrt(n))
	assert.InDelta(t, 1, variance, 5*math.Sqrt(8.0/n))
	p := math.Exp(-2)
	assert.InDelta(t, p, float64(above2)/n, 5*math.Sqrt(p*(1-p)/n))
}

// ElementGumbelExp is the exponential of ElementGumbel, for the distribution test.
func ElementGumbelExp(seed, step uint64, index uint32) float32 {
	w := Word(seed, step, index, PurposeGumbel)
	var tail uint32
	if w < TailThreshold {
		tail = Word(seed, step, index, PurposeGumbelTail)
	}
	return Exponential(w, tail)
}

func TestElementGumbelUsesTailOnlyWhenNeeded(t *testing.T) {
	// Find an element whose main word is below the threshold, and one above.
	var below, above = -1, -1
	for i := 0; i < 1<<12 && (below < 0 || above < 0); i++ {
		w := Word(5, 6, uint32(i), PurposeGumbel)
		if w < TailThreshold && below < 0 {
			below = i
		}
		if w >= TailThreshold && above < 0 {
			above = i
		}
	}
	require.GreaterOrEqual(t, below, 0)
	require.GreaterOrEqual(t, above, 0)
	wb := Word(5, 6, uint32(below), PurposeGumbel)
	tb := Word(5, 6, uint32(below), PurposeGumbelTail)
	assert.Equal(t, Gumbel(wb, tb), ElementGumbel(5, 6, uint32(below)))
	wa := Word(5, 6, uint32(above), PurposeGumbel)
	assert.Equal(t, Gumbel(wa, 0), ElementGumbel(5, 6, uint32(above)))
	assert.Equal(t, Gumbel(wa, 12345), Gumbel(wa, 0), "tail word ignored above the threshold")
}

func TestScoreIsTwoRoundings(t *testing.T) {
	x, invT, g := float32(1.1), float32(1/0.7), float32(0.3)
	assert.Equal(t, float32(float32(x*invT)+g), Score(x, invT, g))
}

func BenchmarkBlock(b *testing.B) {
	var sink uint32
	key := Key(1)
	for i := 0; i < b.N; i++ {
		sink ^= Block([4]uint32{uint32(i), 1, 0, 1}, key)[0]
	}
	_ = sink
}

// TestDraftUniform: the acceptance uniform is the top 24 bits of word 1 of the
// PurposeSpeculative block at index 0, exact in float32, in [0, 1), uniform in its
// mean, and keyed by the position.
func TestDraftUniform(t *testing.T) {
	for _, seed := range []uint64{0, 0x1234, 1 << 63} {
		sum := 0.0
		const n = 100_000
		for step := range uint64(n) {
			u := DraftUniform(seed, step)
			require.True(t, u >= 0 && u < 1)
			b := Block(Counter(0, step, PurposeSpeculative), Key(seed))
			require.Equal(t, math.Ldexp(float64(b[1]>>8), -24), float64(u), "seed %#x step %d", seed, step)
			sum += float64(u)
		}
		assert.InDelta(t, 0.5, sum/n, 0.005)
		assert.NotEqual(t, DraftUniform(seed, 9), DraftUniform(seed, 10))
	}
}
