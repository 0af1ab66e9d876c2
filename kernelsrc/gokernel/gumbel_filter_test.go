package gokernel

import (
	"math"
	"math/bits"
	"math/rand/v2"
	"testing"
)

// TestWordBoundAboveGumbelBound: the filter's bound is never below the scan's, at both
// ends of every bit length, where the conversion to float32 would round up, and on
// random words.
func TestWordBoundAboveGumbelBound(t *testing.T) {
	check := func(w uint32) {
		if wordBound(w) < gumbelBound(w) {
			t.Fatalf("w %#x: wordBound %v below gumbelBound %v", w, wordBound(w), gumbelBound(w))
		}
	}
	for l := range 33 {
		lo := uint32(1) << l >> 1 // 0 for l = 0
		hi := uint32(1<<l - 1)
		for d := range uint32(300) {
			check(lo + min(d, hi-lo))
			check(hi - min(d, hi-lo))
		}
		if bits.Len32(hi) != l {
			t.Fatalf("l %d", l)
		}
	}
	r := rand.New(rand.NewPCG(5, 5))
	for range 1_000_000 {
		check(r.Uint32())
		check(r.Uint32() >> (r.Uint32() % 32))
	}
}

// filterRow is a chunk for the filter tests: LLM-shaped logits, with NaN, infinities
// and masked runs where the case asks.
func filterRow(r *rand.Rand, n, kind int) []float32 {
	xs := llmLogits(r, n)
	switch kind {
	case 1: // a few odd values
		for range 4 {
			xs[r.IntN(n)] = []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), -float32(math.NaN())}[r.IntN(4)]
		}
	case 2: // mostly masked
		for i := range xs {
			if r.IntN(20) != 0 {
				xs[i] = float32(math.Inf(-1))
			}
		}
	case 3: // all NaN or +Inf
		for i := range xs {
			xs[i] = float32(math.Inf(1))
			if i%2 == 0 {
				xs[i] = float32(math.NaN())
			}
		}
	}
	return xs
}

// checkFilter runs filter and gumbelFilterGo on the same inputs and fails on any
// difference in what they return or in the words of the candidates.
func checkFilter(t *testing.T, filter func([]float32, *filterArgs, *[convertChunk]uint32, *[convertChunk]uint16) (int, int, bool, bool)) {
	r := rand.New(rand.NewPCG(6, 6))
	total := 0
	for it := range 3000 {
		n := []int{32, 64, 96, 100, 480, 511, 512}[r.IntN(7)]
		xs := filterRow(r, n, it%4)
		a := filterArgs{
			invT: []float32{1, 1.25, 10, 0.5}[r.IntN(4)],
			ctr:  [4]uint32{r.Uint32(), r.Uint32(), r.Uint32(), 1},
			key:  [2]uint32{r.Uint32(), r.Uint32()},
		}
		if it%11 == 0 {
			a.ctr[0] = 0xFFFFFFFF - uint32(r.IntN(200)) // the counter wraps inside
		}
		// The limit: none, about the row's best score, above every score.
		a.limit = []float32{float32(math.Inf(-1)), 20 * a.invT, 30 * a.invT, 200 * a.invT, float32(r.NormFloat64()) * 10}[r.IntN(5)]
		var wg, wa [convertChunk]uint32
		var cg, ca [convertChunk]uint16
		n0, nc0, f0, b0 := gumbelFilterGo(xs, &a, &wg, &cg)
		n1, nc1, f1, b1 := filter(xs, &a, &wa, &ca)
		if n0 != n1 || nc0 != nc1 || f0 != f1 || b0 != b1 {
			t.Fatalf("case %d: (n %d, candidates %d, finite %v, bad %v), want (%d, %d, %v, %v)", it, n1, nc1, f1, b1, n0, nc0, f0, b0)
		}
		total += nc0
		for k, c := range cg[:nc0] {
			if ca[k] != c || wa[c] != wg[c] {
				t.Fatalf("case %d: candidate %d: element %d word %#x, want %d %#x", it, k, ca[k], wa[ca[k]], c, wg[c])
			}
		}
	}
	if total < 100_000 {
		t.Fatalf("only %d candidates in all: the cases test too little", total)
	}
}
