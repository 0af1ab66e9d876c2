package sampler

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSampleNEqualsSeparateSamples(t *testing.T) {
	dev := openCPU(t)
	tests := []struct {
		vocab, rows, n int
		opts           Options
	}{
		{1, 3, 2, Options{Seed: 1}},
		{1000, 12, 4, Options{Seed: 2}},
		{1000, 10, 3, Options{Seed: 3, Policy: &forcedSplit, Split: On}},
		{1000, 6, 5, Options{Seed: 4, Gumbel: Off}},
		{bigVocab, 3, 2, Options{Seed: 5}},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("V=%d n=%d seed=%d", tc.vocab, tc.n, tc.opts.Seed), func(t *testing.T) {
			s := newSampler(t, dev, tc.opts)
			rng := rand.New(rand.NewPCG(uint64(tc.vocab), 17))
			logits := randomLogits(rng, tc.rows, tc.vocab, 1.5)
			params := mixedParams(tc.rows, math.MaxUint64-1) // the steps wrap around
			for i := range params {
				params[i].Logprobs = i%3 == 0
			}
			var many Result
			require.NoError(t, s.SampleNFloat32(logits, tc.vocab, params, tc.n, &many))
			require.Equal(t, tc.n, many.Draws)
			require.Len(t, many.Tokens, tc.rows*tc.n)
			var one Result
			one1 := make([]Params, len(params))
			for z := range tc.n {
				copy(one1, params)
				for i := range one1 {
					one1[i].Step += uint64(z)
				}
				require.NoError(t, s.SampleFloat32(logits, tc.vocab, one1, &one))
				for i := range params {
					require.NoError(t, many.Errs[i])
					o := i*tc.n + z
					assert.Equal(t, one.Tokens[i], many.Tokens[o], "row %d draw %d (%s)", i, z, many.Routes[i])
					if params[i].Logprobs {
						assertRecord(t, one.Logprobs[i], many.Logprobs[o], fmt.Sprintf("row %d draw %d", i, z))
					}
				}
			}
		})
	}
}

func TestSampleNRecordsEveryDraw(t *testing.T) {
	dev := openCPU(t)
	s := newSampler(t, dev, Options{Seed: 9})
	const vocab, n = 20, 7
	logits := make([]float32, 2*vocab)
	for i := range logits {
		logits[i] = float32(i%vocab) / 8
	}
	require.NoError(t, s.TrackTokens(1, vocab, []int32{3}))
	params := []Params{{Temperature: 1, Seed: 1, HasSeed: true}, {Temperature: 1, Seed: 2, HasSeed: true, FrequencyPenalty: 0.5}}
	var res Result
	require.NoError(t, s.SampleNFloat32(logits, vocab, params, n, &res))
	want := make([]uint32, vocab)
	want[3] = countSeen
	for z := range n {
		want[res.Tokens[n+z]]++
	}
	got := make([]uint32, vocab)
	require.NoError(t, s.TokenCounts(1, got))
	assert.Equal(t, want, got, "every draw counted once, prompt mark kept")
	// The draws of one call see the counts from before it: with the same step they
	// equal an untracked row's draws.
	require.NoError(t, s.UntrackTokens(1))
	var plain Result
	require.NoError(t, s.SampleNFloat32(logits, vocab, params, n, &plain))
	assert.Equal(t, plain.Tokens, res.Tokens)
}

func TestSampleDistinct(t *testing.T) {
	dev := openCPU(t)
	const vocab = 500
	for _, opts := range []Options{{Seed: 5}, {Seed: 6, Policy: &forcedSplit, Split: On}, {Seed: 7, Gumbel: Off}} {
		t.Run(fmt.Sprintf("seed=%d", opts.Seed), func(t *testing.T) {
			s := newSampler(t, dev, opts)
			rng := rand.New(rand.NewPCG(3, opts.Seed))
			logits := randomLogits(rng, 5, vocab, 2)
			require.NoError(t, s.SetLogitBias(2, vocab, []int32{10, 11}, []float32{8, -8}))
			require.NoError(t, s.SetBannedTokens(2, vocab, topTokens(logits[2*vocab:3*vocab], 2)))
			require.NoError(t, s.TrackTokens(3, vocab, topTokens(logits[3*vocab:4*vocab], 3)))
			params := []Params{
				{Temperature: 0.8, Seed: 1, HasSeed: true, Step: 4, Logprobs: true},
				{Step: 4, Logprobs: true}, // greedy: the top n in order
				{Temperature: 1.2, RequestID: 9, Step: 5, Logprobs: true},
				{Temperature: 1, Seed: 3, HasSeed: true, RepetitionPenalty: 3, Step: 6},
				{Temperature: 0.5, Seed: 4, HasSeed: true, Step: 7, TopLogprobs: 4},
			}
			const n = 6
			var res Result
			require.NoError(t, s.SampleDistinctFloat32(logits, vocab, params, n, &res))
			require.Equal(t, n, res.Draws)
			counts := make([]uint32, vocab)
			require.NoError(t, s.TokenCounts(3, counts))
			for j, c := range counts {
				assert.Equal(t, slices.Contains(topTokens(logits[3*vocab:4*vocab], 3), int32(j)), c == countSeen, "token %d: distinct draws are not counted", j)
			}
			var single Result
			require.NoError(t, s.SampleFloat32(logits, vocab, params, &single))
			for i, p := range params {
				require.NoError(t, res.Errs[i], "row %d", i)
				raw := logits[i*vocab : (i+1)*vocab]
				pr := refProcessors{}
				if i == 2 {
					pr.bias = make([]float32, vocab)
					pr.bias[10], pr.bias[11] = 8, -8
					pr.allowed = make([]bool, vocab)
					for j := range pr.allowed {
						pr.allowed[j] = true
					}
					for _, tok := range topTokens(raw, 2) {
						pr.allowed[tok] = false
					}
				}
				if i == 3 {
					pr.counts = counts
				}
				proc := refProcess(raw, pr, p)
				tokens := res.Tokens[i*n : (i+1)*n]
				temperature := p.Temperature
				assert.Equal(t, refGumbelTopK(proc, temperature, rowSeed(opts.Seed, p), p.Step, n), tokens, "row %d", i)
				if single.Routes[i] != RouteCategorical { // the Gumbel switch is off: Sample does not take Gumbel-max
					assert.Equal(t, single.Tokens[i], tokens[0], "row %d: the first draw is Sample's token", i)
				}
				seen := map[int32]bool{}
				for _, tok := range tokens {
					assert.False(t, seen[tok], "row %d: token %d twice", i, tok)
					seen[tok] = true
				}
				if p.Logprobs {
					invT := float32(1)
					if temperature != 0 {
						invT = 1 / temperature
					}
					lse := refLSE(widen(proc, invT, true))
					for j, tok := range tokens {
						rec := res.Logprobs[i*n+j]
						want := float32(float64(float32(proc[tok]*invT)) - lse)
						assert.InDelta(t, want, rec.Processed, logprobTolerance(want), "row %d draw %d", i, j)
						assert.True(t, math.IsNaN(float64(rec.Raw)) && math.IsNaN(float64(rec.RawLSE)), "row %d: raw fields unset", i)
					}
				}
			}
			assert.Equal(t, 4, res.Top[4].Count, "top log-probabilities beside distinct draws")
			assert.Equal(t, topTokens(logits[4*vocab:], 4), res.Top[4].Tokens[:4])
		})
	}
}

// TestSampleDistinctExactScores: rows whose |x/T| lies beyond what a float32 score
// resolves (kernelsrc/ABI.md, "topn") draw without replacement exactly. A flat row of 1e7
// shows every order of its four tokens and begins with Sample's token; a tie of two
// logits at T = 1e-30 draws the tied pair first in both orders; ±MaxFloat32 at a
// temperature where x/T overflows draws the positive pair first, its log-probabilities
// NaN as in Sample's record, not an error.
func TestSampleDistinctExactScores(t *testing.T) {
	dev := openCPU(t)
	const vocab, steps = 4, 300
	maxF := float32(math.MaxFloat32)
	for _, c := range []struct {
		name   string
		row    []float32
		temp   float32
		first  []int32 // the tokens the first two draws take, in either order
		orders int     // distinct lists over the steps
	}{
		{"flat 1e7", []float32{1e7, 1e7, 1e7, 1e7}, 1, nil, 24},
		{"tie at T = 1e-30", []float32{25, 3, 25, 1}, 1e-30, []int32{0, 2}, 2},
		{"±MaxFloat32 at T = 0.5", []float32{-maxF, maxF, -maxF, maxF}, 0.5, []int32{1, 3}, 4},
	} {
		for _, opts := range []Options{{Seed: 5}, {Seed: 6, Policy: &forcedSplit, Split: On}} {
			t.Run(fmt.Sprintf("%s/seed=%d", c.name, opts.Seed), func(t *testing.T) {
				s := newSampler(t, dev, opts)
				params := []Params{{Temperature: c.temp, Seed: 3, HasSeed: true, Logprobs: true}}
				orders := map[string]bool{}
				var res, single Result
				for k := range steps {
					params[0].Step = uint64(k)
					require.NoError(t, s.SampleDistinctFloat32(c.row, vocab, params, vocab, &res))
					require.NoError(t, res.Errs[0], "step %d", k)
					require.NoError(t, s.SampleFloat32(c.row, vocab, params, &single))
					require.NoError(t, single.Errs[0], "step %d", k)
					require.Equal(t, single.Tokens[0], res.Tokens[0], "step %d: the first draw is Sample's token", k)
					require.ElementsMatch(t, []int32{0, 1, 2, 3}, res.Tokens, "step %d", k)
					if c.first != nil {
						require.ElementsMatch(t, c.first, res.Tokens[:2], "step %d", k)
					}
					orders[fmt.Sprint(res.Tokens)] = true
				}
				assert.Len(t, orders, c.orders, "lists seen: %v", orders)
			})
		}
	}
}

func TestSampleDistinctRowErrors(t *testing.T) {
	dev := openCPU(t)
	s := newSampler(t, dev, Options{Seed: 1})
	const vocab = 30
	logits := make([]float32, 4*vocab)
	for i := range vocab {
		logits[i] = float32(math.Inf(-1))
		logits[3*vocab+i] = float32(math.Inf(-1))
	}
	logits[2], logits[7], logits[9] = 1, 2, 3 // row 0: three finite logits
	logits[2*vocab+5] = float32(math.NaN())   // row 2: NaN
	params := []Params{
		{Temperature: 1},
		{Temperature: 1, TopK: 5}, // filtered
		{Temperature: 1},
		{Temperature: 1}, // every logit -Inf
	}
	var res Result
	require.NoError(t, s.SampleDistinctFloat32(logits, vocab, params, 4, &res))
	assert.ErrorIs(t, res.Errs[0], ErrTooFewTokens)
	assert.ErrorIs(t, res.Errs[1], ErrDistinctFiltered)
	assert.ErrorIs(t, res.Errs[2], ErrNonFiniteLogit)
	assert.ErrorIs(t, res.Errs[3], ErrNoFiniteLogit)
	assert.Equal(t, []int32{-1, -1, -1, -1}, res.Tokens[:4])
	require.NoError(t, s.SampleDistinctFloat32(logits[:vocab], vocab, params[:1], 3, &res))
	require.NoError(t, res.Errs[0])
	assert.ElementsMatch(t, []int32{2, 7, 9}, res.Tokens, "three finite logits: three distinct draws")
}

func TestDrawCountBounds(t *testing.T) {
	dev := openCPU(t)
	s := newSampler(t, dev, Options{})
	logits := make([]float32, 10)
	params := []Params{{Temperature: 1}}
	var res Result
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"SampleN 0", func() error { return s.SampleNFloat32(logits, 10, params, 0, &res) }},
		{"SampleN past MaxDraws", func() error { return s.SampleNFloat32(logits, 10, params, MaxDraws+1, &res) }},
		{"SampleDistinct 0", func() error { return s.SampleDistinctFloat32(logits, 10, params, 0, &res) }},
		{"SampleDistinct 21", func() error { return s.SampleDistinctFloat32(logits, 10, params, MaxTopLogprobs+1, &res) }},
		{"NewBatch 0 draws", func() error { _, err := s.NewBatch(1, 10, Float32, 0); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) { assert.ErrorIs(t, tc.call(), ErrDraws) })
	}
}

func TestRelaunchRepeatsServingLaunches(t *testing.T) {
	dev := openCPU(t)
	rec := &recordingStream{Stream: dev.DefaultStream()}
	s := newSampler(t, dev, Options{Stream: rec, Seed: 4})
	const vocab = 2000
	rng := rand.New(rand.NewPCG(1, 1))
	logits := randomLogits(rng, 4, vocab, 2)
	params := []Params{
		{Temperature: 0.9, TopLogprobs: 4, Logprobs: true, RequestID: 1},
		{Temperature: 1, TopK: 10, Logprobs: true, RequestID: 2},
		{},
		{Temperature: 1.2, TopP: 0.9, Logprobs: true, RequestID: 4}, // needs the row maximum: filter_max
	}
	tests := []struct {
		name string
		call func(*Result) error
		want []string
	}{
		{"SampleN with top log-probabilities", func(res *Result) error { return s.SampleNFloat32(logits, vocab, params, 3, res) },
			[]string{"gumbel_argmax_f32", "filter_max_f32", "filtered_f32", "topn_f32"}},
		{"SampleDistinct", func(res *Result) error { return s.SampleDistinctFloat32(logits[:vocab], vocab, params[:1], 5, res) },
			[]string{"topn_f32", "topn_f32"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var res Result
			*rec = recordingStream{Stream: rec.Stream}
			require.NoError(t, tc.call(&res))
			assert.Equal(t, tc.want, rec.launches)
			first := *rec
			want := slices.Clone(res.Tokens)
			*rec = recordingStream{Stream: rec.Stream}
			require.NoError(t, s.Relaunch())
			assert.Equal(t, first.launches, rec.launches, "Relaunch queues every kernel of the call")
			assert.Equal(t, first.blocksPerRow, rec.blocksPerRow)
			assert.Equal(t, first.ys, rec.ys)
			assert.Zero(t, rec.uploads+rec.downs+rec.syncs, "Relaunch only launches")
			// The outputs on the device are the call's: read them back.
			require.NoError(t, tc.call(&res))
			assert.Equal(t, want, res.Tokens, "no ADVANCE: the same steps draw the same tokens")
		})
	}
}
