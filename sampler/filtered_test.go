package sampler

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// filteredRow is one row of TestFilteredTokenInKeptSet: its logits and parameters.
type filteredRow struct {
	name   string
	logits []float32
	p      Params
}

// tiedLogits returns a row of vocab logits on a coarse grid (many ties), about a tenth of
// them -Inf, and one largest logit above the grid.
func tiedLogits(rng *rand.Rand, vocab int) []float32 {
	row := make([]float32, vocab)
	for i := range row {
		row[i] = float32(rng.IntN(9))/2 - 2
		if rng.IntN(10) == 0 {
			row[i] = negInf
		}
	}
	row[rng.IntN(vocab)] = 2.5
	return row
}

// kthLargest returns the k-th largest value of row (k from 1).
func kthLargest(row []float32, k int) float32 {
	sorted := slices.Clone(row)
	sort.Slice(sorted, func(a, b int) bool { return sorted[a] > sorted[b] })
	return sorted[k-1]
}

// groupMassFractions returns, for each distinct finite logit of row from the largest
// down, the float64 fraction of the row's softmax mass (at temperature t) held by the
// logits at or above it: the top-p values at which the top-p cut moves.
func groupMassFractions(row []float32, t float32) []float64 {
	m := float32(math.Inf(-1))
	for _, x := range row {
		m = max(m, x)
	}
	var values []float32
	total := 0.0
	for _, x := range row {
		if !math.IsInf(float64(x), -1) {
			values = append(values, x)
			total += math.Exp(float64(x-m) / float64(t))
		}
	}
	sort.Slice(values, func(a, b int) bool { return values[a] > values[b] })
	var out []float64
	cum := 0.0
	for j := 0; j < len(values); {
		v := values[j]
		for ; j < len(values) && values[j] == v; j++ {
			cum += math.Exp(float64(v-m) / float64(t))
		}
		out = append(out, cum/total)
	}
	return out
}

// filteredRows builds the rows of TestFilteredTokenInKeptSet: top-k with ties at the
// k-th value, top-k at and past the vocabulary, top-p on either side of (and at) the
// mass of a group of tied logits, min-p near and at 1 and at a weight of the row, and
// combinations, at several temperatures.
func filteredRows(rng *rand.Rand, vocab int) []filteredRow {
	var out []filteredRow
	add := func(name string, row []float32, p Params) {
		p.Seed, p.HasSeed, p.Step = rng.Uint64(), true, rng.Uint64()>>1
		out = append(out, filteredRow{name: name, logits: row, p: p})
	}
	for _, t := range []float32{0.5, 1, 1.7} {
		row := tiedLogits(rng, vocab)
		// Top-k whose k-th value is tied with its neighbours: every tie is kept.
		for k := 2; k < vocab; k += 7 {
			kth := kthLargest(row, k)
			if kthLargest(row, k+1) == kth || kthLargest(row, k-1) == kth {
				add(fmt.Sprintf("T%v top-k %d tied", t, k), row, Params{Temperature: t, TopK: k})
			}
		}
		add(fmt.Sprintf("T%v top-k V-1", t), row, Params{Temperature: t, TopK: vocab - 1})
		add(fmt.Sprintf("T%v top-k V, top-p 0.6", t), row, Params{Temperature: t, TopK: vocab, TopP: 0.6})
		add(fmt.Sprintf("T%v top-k 2V, min-p 0.3", t), row, Params{Temperature: t, TopK: 2 * vocab, MinP: 0.3})
		// Top-p at the mass of each of the first groups of ties, and one float32 step
		// either side: the cut keeps or drops the next group exactly as the fixed-point
		// rule says.
		fr := groupMassFractions(row, t)
		for g := 0; g < min(4, len(fr)-1); g++ {
			at := float32(fr[g])
			for _, p := range []float32{math.Nextafter32(at, 0), at, math.Nextafter32(at, 1)} {
				if p > 0 && p < 1 {
					add(fmt.Sprintf("T%v top-p %v (group %d)", t, p, g), row, Params{Temperature: t, TopP: p})
				}
			}
		}
		add(fmt.Sprintf("T%v top-p tiny", t), row, Params{Temperature: t, TopP: 1e-6})
		add(fmt.Sprintf("T%v top-p 0.9999", t), row, Params{Temperature: t, TopP: 0.9999})
		// Min-p near and at 1: the tokens tied at the top, and those within a hair.
		near := slices.Clone(row)
		top := kthLargest(near, 1)
		near[rng.IntN(vocab)] = top - 0.0004*t // weight about 0.9996: kept by 0.999
		near[rng.IntN(vocab)] = top - 0.003*t  // weight about 0.997: dropped by 0.999
		near[rng.IntN(vocab)] = top            // a tie at the top
		add(fmt.Sprintf("T%v min-p 0.999", t), near, Params{Temperature: t, MinP: 0.999})
		add(fmt.Sprintf("T%v min-p 1", t), near, Params{Temperature: t, MinP: 1})
		// Min-p exactly at a token's weight (the ABI's w(x) = exp32(fl(fl(x - m)·invT))):
		// that token and its ties are kept.
		invT := float32(1 / t)
		second := float32(math.Inf(-1))
		for _, x := range row {
			if x < top {
				second = max(second, x)
			}
		}
		w := float32(math.Exp(float64(float32(float32(second-top) * invT))))
		add(fmt.Sprintf("T%v min-p at a weight", t), row, Params{Temperature: t, MinP: w})
		add(fmt.Sprintf("T%v min-p above a weight", t), row, Params{Temperature: t, MinP: math.Nextafter32(w, 1)})
		// Combinations.
		add(fmt.Sprintf("T%v top-k 12, top-p 0.8", t), row, Params{Temperature: t, TopK: 12, TopP: 0.8})
		add(fmt.Sprintf("T%v top-k 20, min-p 0.2", t), row, Params{Temperature: t, TopK: 20, MinP: 0.2})
		add(fmt.Sprintf("T%v top-p 0.7, min-p 0.1", t), row, Params{Temperature: t, TopP: 0.7, MinP: 0.1})
		add(fmt.Sprintf("T%v all filters", t), row, Params{Temperature: t, TopK: 30, TopP: 0.95, MinP: 0.05})
		add(fmt.Sprintf("T%v all filters, top-k tied", t), row, Params{Temperature: t, TopK: 5, TopP: float32(fr[0]), MinP: 0.01})
	}
	return out
}

// TestFilteredTokenInKeptSet: with the Gumbel switch on, a filtered row takes
// RouteFiltered and every draw is a token of the kept set (the reference's steps 1 to 7),
// the one Gumbel-max over that set gives; with the switch off the same row takes
// RouteCategorical and draws the inverse CDF over the same set.
func TestFilteredTokenInKeptSet(t *testing.T) {
	dev := openCPU(t)
	const vocab, draws = 64, 48
	rng := rand.New(rand.NewPCG(23, 5))
	rows := filteredRows(rng, vocab)
	logits := make([]float32, 0, len(rows)*vocab)
	params := make([]Params, len(rows))
	for i, r := range rows {
		logits = append(logits, r.logits...)
		params[i] = r.p
	}
	const samplerSeed = 8
	results := map[Switch]*Result{}
	for _, sw := range []Switch{On, Off} {
		for _, opts := range []Options{{Seed: samplerSeed, Gumbel: sw}, {Seed: samplerSeed, Gumbel: sw, Policy: &forcedSplit, Split: On}} {
			s := newSampler(t, dev, opts)
			var res Result
			require.NoError(t, s.SampleNFloat32(logits, vocab, params, draws, &res))
			if prev := results[sw]; prev != nil {
				assert.Equal(t, prev.Tokens, res.Tokens, "gumbel %v: the split phase changed a token", sw)
				continue
			}
			results[sw] = &res
		}
	}
	on, off := results[On], results[Off]
	keptSizes, differ := 0, 0
	for i, r := range rows {
		p := r.p
		require.NoError(t, on.Errs[i], r.name)
		require.NoError(t, off.Errs[i], r.name)
		assert.Equal(t, RouteFiltered, on.Routes[i], r.name)
		assert.Equal(t, RouteCategorical, off.Routes[i], "%s: the kill switch", r.name)
		topK := refTopK(p, vocab)
		ks := refKeep(r.logits, p.Temperature, topK, p.TopP, p.MinP)
		kept := 0
		for _, k := range ks.kept {
			if k {
				kept++
			}
		}
		require.Positive(t, kept, r.name)
		if kept > 1 {
			keptSizes++
		}
		for z := range draws {
			step := p.Step + uint64(z)
			tok := on.Tokens[i*draws+z]
			require.True(t, tok >= 0 && int(tok) < vocab && ks.kept[tok], "%s draw %d: filtered token %d outside the kept set", r.name, z, tok)
			want, _ := refFiltered(r.logits, p.Temperature, topK, p.TopP, p.MinP, p.Seed, step)
			require.Equal(t, want, tok, "%s draw %d: Gumbel-max over the kept set", r.name, z)
			cat := off.Tokens[i*draws+z]
			require.True(t, cat >= 0 && int(cat) < vocab && ks.kept[cat], "%s draw %d: categorical token %d outside the kept set", r.name, z, cat)
			want, _ = refCategorical(r.logits, p.Temperature, topK, p.TopP, p.MinP, p.Seed, step)
			require.Equal(t, want, cat, "%s draw %d: the categorical inverse CDF", r.name, z)
			if tok != cat {
				differ++
			}
		}
	}
	assert.Greater(t, len(rows), 60)
	assert.Greater(t, keptSizes*3, len(rows)*2, "most rows must keep a choice of tokens")
	assert.Positive(t, differ, "the filtered route drew the categorical stream")
	t.Logf("%d rows, %d with more than one kept token; %d of %d draws differ between the routes", len(rows), keptSizes, differ, len(rows)*draws)
}

// TestFilteredBoundariesCut checks the table of TestFilteredTokenInKeptSet itself: the
// top-p rows on either side of a group's mass keep different sets, and the top-k rows
// keep every tie at the k-th value.
func TestFilteredBoundariesCut(t *testing.T) {
	const vocab = 64
	rows := filteredRows(rand.New(rand.NewPCG(23, 5)), vocab)
	keptOf := func(r filteredRow) []bool {
		return refKeep(r.logits, r.p.Temperature, refTopK(r.p, vocab), r.p.TopP, r.p.MinP).kept
	}
	moved, tiedK := 0, 0
	for i, r := range rows {
		kept := keptOf(r)
		if r.p.TopK > 0 && r.p.TopK < vocab && r.p.TopP == 0 && r.p.MinP == 0 {
			kth := kthLargest(r.logits, r.p.TopK)
			n := 0
			for j, x := range r.logits {
				assert.Equal(t, x >= kth, kept[j], "%s: token %d", r.name, j)
				if kept[j] {
					n++
				}
			}
			if n > r.p.TopK {
				tiedK++
			}
		}
		if i > 0 && rows[i-1].p.TopP != 0 && r.p.TopP == math.Nextafter32(rows[i-1].p.TopP, 1) &&
			!slices.Equal(keptOf(rows[i-1]), kept) {
			moved++
		}
	}
	assert.Positive(t, tiedK, "some top-k row must keep more than k tokens (ties at the k-th value)")
	assert.Positive(t, moved, "some top-p step of one float32 ulp must move the cut")
	t.Logf("%d top-k rows keep ties past k; %d top-p ulp steps move the cut", tiedK, moved)
}
