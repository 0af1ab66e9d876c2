package sampler_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/gumbel-go/gumbel/philox"
	"github.com/gumbel-go/gumbel/runtime/cpu"
	"github.com/gumbel-go/gumbel/sampler"
	"github.com/gumbel-go/gumbel/tests/statistical"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// filteredLawDraws is the draw count of each case of TestFilteredLaw: each case's bug
// (below) is caught with probability at least 0.99, and a relative error of 7% in a
// token that holds 5% of the mass half the time.
const filteredLawDraws = 100_000

// lawCase is one case of TestFilteredLaw: a row, a temperature and filters, and a law a
// sampler with a plausible bug of that filter would follow instead (nil: none worth
// naming), which the case must be able to tell from the right one.
type lawCase struct {
	name   string
	logits []float32
	t      float32
	f      statistical.Filter
	bug    string
	bugLaw func(x []float32, t float32) ([]float64, error)
}

// softmaxOver is softmax(x/t) restricted to the tokens keep names: the law of a sampler
// that keeps that set.
func softmaxOver(x []float32, t float32, keep ...int) []float64 {
	p := make([]float64, len(x))
	m := math.Inf(-1)
	for _, i := range keep {
		m = max(m, float64(x[i]))
	}
	sum := 0.0
	for _, i := range keep {
		p[i] = math.Exp((float64(x[i]) - m) / float64(t))
		sum += p[i]
	}
	for i := range p {
		p[i] /= sum
	}
	return p
}

// withFilter is the law under another filter.
func withFilter(f statistical.Filter) func(x []float32, t float32) ([]float64, error) {
	return func(x []float32, t float32) ([]float64, error) { return statistical.Probabilities(x, t, f) }
}

// keeping is the law of a sampler that keeps exactly the given tokens.
func keeping(keep ...int) func(x []float32, t float32) ([]float64, error) {
	return func(x []float32, t float32) ([]float64, error) { return softmaxOver(x, t, keep...), nil }
}

// massAbove returns the softmax(x/t) mass of the tokens whose logit is at least v.
func massAbove(x []float32, t float32, v float32) float64 {
	m := math.Inf(-1)
	for _, y := range x {
		m = max(m, float64(y))
	}
	in, all := 0.0, 0.0
	for _, y := range x {
		w := math.Exp((float64(y) - m) / float64(t))
		all += w
		if y >= v {
			in += w
		}
	}
	return in / all
}

// lawCases are the cases of TestFilteredLaw: top-k with ties at the k-th value, top-k at
// and past the vocabulary (off), top-p just either side of a group's mass and near 1,
// min-p near and at 1, and combinations.
func lawCases() []lawCase {
	neg := float32(math.Inf(-1))
	// Ties: 2 three times (ranks 2 to 4), 1.5 twice (ranks 5 and 6), 1 three times.
	tied := []float32{3, 2, 2, 2, 1.5, 1, 1, 1, 0.5, 0, 0, -0.5, -1, -1, -1.5, -2, -2.5, -3, -4, -5, neg, -6, neg, 1.5}
	// Min-p near 1: two tokens tied at the top; 0.0004 below it (weight 0.9996 at T = 1,
	// 0.9992 at T = 0.5), 0.0007 below (0.9993, 0.9986) and 0.003 below (0.997); then a
	// body.
	near := []float32{5, 5 - 0.0004, 5, 5 - 0.003, 4, 3.5, 3, neg, 2, 5 - 0.0007, 0, -1}
	under, over := massAbove(tied, 1, 2), massAbove(tied, 1, 1.5)
	return []lawCase{
		{name: "top-k 3, tied at the k-th", logits: tied, t: 1, f: statistical.Filter{TopK: 3},
			bug: "ties at the k-th value dropped", bugLaw: keeping(0, 1, 2)},
		{name: "top-k 2, tied at the k-th", logits: tied, t: 0.7, f: statistical.Filter{TopK: 2},
			bug: "exactly k kept", bugLaw: keeping(0, 1)},
		{name: "top-k 5, tied across the k-th", logits: tied, t: 1.5, f: statistical.Filter{TopK: 5},
			bug: "the lowest-index tie kept", bugLaw: keeping(0, 1, 2, 3, 4)},
		{name: "top-k = V is off", logits: tied, t: 1, f: statistical.Filter{TopK: len(tied)}},
		{name: "top-k 2V is off, top-p 0.7", logits: tied, t: 1, f: statistical.Filter{TopK: 2 * len(tied), TopP: 0.7},
			bug: "top-p ignored", bugLaw: withFilter(statistical.Filter{})},
		{name: "top-p just under a tie group's mass", logits: tied, t: 1, f: statistical.Filter{TopP: float32(under - 0.01)},
			bug: "the cut one group late", bugLaw: withFilter(statistical.Filter{TopP: float32(under + 0.01)})},
		{name: "top-p just over a tie group's mass", logits: tied, t: 1, f: statistical.Filter{TopP: float32(under + 0.01)},
			bug: "the cut one group early", bugLaw: withFilter(statistical.Filter{TopP: float32(under - 0.01)})},
		{name: "top-p cutting inside a tie group", logits: tied, t: 1, f: statistical.Filter{TopP: float32(over - 0.02)},
			bug: "ties at the threshold cut by index", bugLaw: keeping(0, 1, 2, 3, 4)},
		{name: "top-p 0.999", logits: tied, t: 1, f: statistical.Filter{TopP: 0.999},
			bug: "top-p ignored near 1", bugLaw: withFilter(statistical.Filter{})},
		{name: "min-p 0.999", logits: near, t: 1, f: statistical.Filter{MinP: 0.999},
			bug: "the cut one token late", bugLaw: keeping(0, 1, 2, 3, 9)},
		{name: "min-p 1", logits: near, t: 1, f: statistical.Filter{MinP: 1},
			bug: "one of the tied top tokens kept", bugLaw: keeping(0)},
		{name: "min-p 0.999 at T 0.5", logits: near, t: 0.5, f: statistical.Filter{MinP: 0.999},
			bug: "min-p judged before the temperature", bugLaw: keeping(0, 1, 2, 9)},
		{name: "top-k 6, top-p 0.9, min-p 0.2", logits: tied, t: 0.7, f: statistical.Filter{TopK: 6, TopP: 0.9, MinP: 0.2},
			bug: "min-p ignored", bugLaw: withFilter(statistical.Filter{TopK: 6, TopP: 0.9})},
		{name: "top-k 5 tied, top-p 0.75", logits: tied, t: 1, f: statistical.Filter{TopK: 5, TopP: 0.75},
			bug: "top-p over the whole row, not the top-k set", bugLaw: withFilter(statistical.Filter{TopP: 0.75})},
		{name: "top-p 0.95, min-p 0.02 at T 2", logits: tied, t: 2, f: statistical.Filter{TopP: 0.95, MinP: 0.02},
			bug: "top-p ignored", bugLaw: withFilter(statistical.Filter{MinP: 0.02})},
		{name: "top-k 12, min-p 0.3 on a near-tied top", logits: near, t: 1, f: statistical.Filter{TopK: 12, MinP: 0.3},
			bug: "min-p ignored", bugLaw: withFilter(statistical.Filter{TopK: 12})},
	}
}

// TestFilteredLaw draws every law case through Sample on the CPU device and tests the
// counts against the exact float64 law (statistical.Probabilities: softmax(x/T) over the
// kept set) with the statistical suite's chi-square: on the filtered route with the
// Gumbel switch on and on the categorical route with it off. A token outside the kept
// set fails a case outright.
func TestFilteredLaw(t *testing.T) {
	dev, err := cpu.Open()
	require.NoError(t, err)
	t.Cleanup(func() { _ = dev.Close() })
	draws := filteredLawDraws
	if testing.Short() {
		draws /= 10
	}
	for _, lc := range lawCases() {
		want, err := statistical.Probabilities(lc.logits, lc.t, lc.f)
		require.NoError(t, err, "%s: the case's boundaries must be clear of float32 rounding", lc.name)
		kept := 0
		for _, p := range want {
			if p > 0 {
				kept++
			}
		}
		require.GreaterOrEqual(t, kept, 2, "%s: the case must leave a choice", lc.name)
		if lc.bugLaw != nil {
			bug, err := lc.bugLaw(lc.logits, lc.t)
			require.NoError(t, err, lc.name)
			assertCatches(t, want, bug, kept, lc.name+": "+lc.bug)
		}
		for _, gumbel := range []bool{true, false} {
			route := sampler.RouteFiltered
			if gumbel {
				if lc.f.TopK >= len(lc.logits) && lc.f.TopP == 0 && lc.f.MinP == 0 {
					route = sampler.RouteGumbel // top-k >= V alone is no filter
				}
			} else {
				route = sampler.RouteCategorical
			}
			name := fmt.Sprintf("%s/T%v/%v", lc.name, lc.t, route)
			t.Run(name, func(t *testing.T) {
				c := statistical.Case{
					Name: name, Route: route, Gumbel: gumbel, Temperature: lc.t,
					TopK: lc.f.TopK, TopP: lc.f.TopP, MinP: lc.f.MinP,
					Binning: statistical.BinTokens, Draws: draws, Logits: lc.logits,
					Seed: philox.SplitMix64(uint64(len(name)) ^ fnv(name)), Alpha: statistical.Alpha,
				}
				out := statistical.Run(dev, c, nil)
				require.Equal(t, c.Draws, out.Draws, out.Message)
				assert.True(t, out.Pass, "%s: %s", name, out.Message)
				t.Logf("%d draws, %d bins: %s", out.Draws, out.Bins, out.Message)
			})
		}
	}
}

// assertCatches asserts that filteredLawDraws draws of a sampler following law bug fail a
// case whose law is want (kept possible tokens) with probability at least 0.99: by
// drawing a token of probability zero (bug's mass m there is drawn at least once with
// probability 1 - (1-m)^n >= 1 - e^(-n·m)), or else by the chi-square, whose
// non-centrality over the possible tokens must reach what p < Alpha needs at 99% power.
func assertCatches(t *testing.T, want, bug []float64, kept int, what string) {
	t.Helper()
	n := float64(filteredLawDraws)
	forbidden := 0.0
	allowed := make([]float64, len(bug))
	for i, q := range bug {
		if want[i] == 0 {
			forbidden += q
		} else {
			allowed[i] = q
		}
	}
	if n*forbidden >= math.Log(100) {
		t.Logf("%s: draws a token of probability zero %.3g of the time", what, forbidden)
		return
	}
	lambda := n * statistical.Noncentrality(want, allowed)
	need := statistical.DetectableNoncentrality(kept-1, statistical.Alpha, 0.99)
	assert.Greater(t, lambda, need, "%s: %d draws must catch it", what, filteredLawDraws)
	t.Logf("%s: non-centrality %.3g (%.0f is caught with probability 0.99)", what, lambda, need)
}

// fnv is FNV-1a of a string: a seed per case name.
func fnv(s string) uint64 {
	h := uint64(0xcbf29ce484222325)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 0x100000001b3
	}
	return h
}
