package sampler

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// procRow is one row of the processor tests: its params and the processors the test
// gives it.
type procRow struct {
	name    string
	p       Params
	bias    map[int32]float32
	allowed []int32
	banned  []int32
	prompt  []int32 // tracked when not nil
}

// install gives row i its processors on s and returns the reference's view of them.
func (r procRow) install(t *testing.T, s *Sampler, i, vocab int) refProcessors {
	t.Helper()
	var pr refProcessors
	if r.bias != nil {
		pr.bias = make([]float32, vocab)
		var tokens []int32
		var values []float32
		for tok, b := range r.bias {
			tokens, values = append(tokens, tok), append(values, b)
			pr.bias[tok] = b
		}
		require.NoError(t, s.SetLogitBias(i, vocab, tokens, values))
	}
	if r.allowed != nil || r.banned != nil {
		pr.allowed = make([]bool, vocab)
		for j := range pr.allowed {
			pr.allowed[j] = r.allowed == nil
		}
		for _, tok := range r.allowed {
			pr.allowed[tok] = true
		}
		for _, tok := range r.banned {
			pr.allowed[tok] = false
		}
		if r.allowed != nil {
			require.NoError(t, s.SetAllowedTokens(i, vocab, r.allowed))
		}
		if r.banned != nil {
			require.NoError(t, s.SetBannedTokens(i, vocab, r.banned))
		}
	}
	if r.prompt != nil {
		pr.counts = make([]uint32, vocab)
		for _, tok := range r.prompt {
			pr.counts[tok] = countSeen
		}
		require.NoError(t, s.TrackTokens(i, vocab, r.prompt))
	}
	return pr
}

// topTokens returns the indices of the n largest values of row.
func topTokens(row []float32, n int) []int32 {
	tokens, _ := refTop(row, n)
	return tokens
}

const numProcessorRows = 8

// processorRows is the table of TestProcessorsMatchReference: every processor on the
// greedy, Gumbel and filtered paths (the categorical path with the Gumbel switch off),
// alone and together.
func processorRows(logits []float32, vocab int) []procRow {
	row := func(i int) []float32 { return logits[i*vocab : (i+1)*vocab] }
	evens := make([]int32, 0, vocab/2)
	for tok := 0; tok < vocab; tok += 2 {
		evens = append(evens, int32(tok))
	}
	gumbel := Params{Temperature: 0.9, Seed: 11, HasSeed: true}
	filtered := Params{Temperature: 1.1, TopK: 40, Seed: 12, HasSeed: true}
	nucleus := Params{Temperature: 0.8, TopP: 0.9, Seed: 13, HasSeed: true}
	penalties := func(p Params) Params {
		p.RepetitionPenalty, p.FrequencyPenalty, p.PresencePenalty = 1.4, 0.6, 0.3
		return p
	}
	return []procRow{
		{name: "gumbel bias", p: gumbel, bias: map[int32]float32{3: 6, 17: -40, int32(vocab - 1): 2.5}},
		{name: "filtered allowed", p: filtered, allowed: evens},
		{name: "greedy banned top", p: Params{}, banned: topTokens(row(2), 3)},
		{name: "gumbel penalties", p: penalties(gumbel), prompt: append(topTokens(row(3), 4), 1, 2, 3)},
		{name: "nucleus everything", p: penalties(nucleus), bias: map[int32]float32{0: 1, 5: -3}, allowed: evens[:100], banned: []int32{0, 2}, prompt: []int32{4, 6, 8}},
		{name: "greedy penalties", p: Params{RepetitionPenalty: 2, FrequencyPenalty: 1}, prompt: topTokens(row(5), 1)},
		{name: "no processors", p: gumbel},
		{name: "penalties untracked", p: penalties(filtered)},
	}
}

func TestProcessorsMatchReference(t *testing.T) {
	dev := openCPU(t)
	for _, opts := range []Options{{Seed: 21}, {Seed: 22, Policy: &forcedSplit, Split: On}, {Seed: 23, Gumbel: Off}} {
		t.Run(fmt.Sprintf("seed=%d", opts.Seed), func(t *testing.T) {
			const vocab, steps = 600, 6
			rng := rand.New(rand.NewPCG(31, opts.Seed))
			logits := randomLogits(rng, numProcessorRows, vocab, 3)
			table := processorRows(logits, vocab)
			require.Len(t, table, numProcessorRows)
			s := newSampler(t, dev, opts)
			procs := make([]refProcessors, len(table))
			params := make([]Params, len(table))
			for i, r := range table {
				procs[i] = r.install(t, s, i, vocab)
				params[i] = r.p
				params[i].Logprobs = true
			}
			counts := make([]uint32, vocab)
			var res Result
			for step := range uint64(steps) {
				for i := range params {
					params[i].Step = step
				}
				require.NoError(t, s.SampleFloat32(logits, vocab, params, &res))
				for i, r := range table {
					raw := logits[i*vocab : (i+1)*vocab]
					proc := refProcess(raw, procs[i], params[i])
					want, status := refSample(proc, params[i], res.Routes[i], opts.Seed)
					require.Zero(t, status)
					require.NoError(t, res.Errs[i], r.name)
					require.Equal(t, s.RouteFor(params[i], vocab), res.Routes[i], r.name)
					require.Equal(t, want, res.Tokens[i], "%s step %d (%s)", r.name, step, res.Routes[i])
					rec := refRecord(raw, proc, want, res.Routes[i], params[i])
					assertRecord(t, rec, res.Logprobs[i], fmt.Sprintf("%s step %d", r.name, step))
					if procs[i].allowed != nil {
						assert.True(t, procs[i].allowed[want], "%s: token %d is masked", r.name, want)
					}
					if procs[i].counts != nil {
						procs[i].counts[want]++
					}
				}
			}
			// The device's counts match a host recount of every sampled token.
			for i := range table {
				require.NoError(t, s.TokenCounts(i, counts))
				if procs[i].counts == nil {
					assert.Equal(t, make([]uint32, vocab), counts, "%s is not tracked", table[i].name)
					continue
				}
				assert.Equal(t, procs[i].counts, counts, table[i].name)
			}
		})
	}
}

func TestProcessorsChangeTheDistribution(t *testing.T) {
	// A strong bias moves greedy; the mask forbids; the penalties push repeats down.
	dev := openCPU(t)
	s := newSampler(t, dev, Options{Seed: 3})
	const vocab = 50
	logits := make([]float32, vocab)
	for i := range logits {
		logits[i] = float32(i) / 10 // token 49 is greedy
	}
	var res Result
	greedy := []Params{{}}
	sample := func() int32 {
		require.NoError(t, s.SampleFloat32(logits, vocab, greedy, &res))
		require.NoError(t, res.Errs[0])
		return res.Tokens[0]
	}
	assert.Equal(t, int32(49), sample())
	require.NoError(t, s.SetLogitBias(0, vocab, []int32{7}, []float32{10}))
	assert.Equal(t, int32(7), sample())
	require.NoError(t, s.SetBannedTokens(0, vocab, []int32{7, 49}))
	assert.Equal(t, int32(48), sample())
	require.NoError(t, s.SetAllowedTokens(0, vocab, []int32{1, 2, 49}))
	assert.Equal(t, int32(2), sample(), "49 is allowed but banned")
	require.NoError(t, s.SetAllowedTokens(0, vocab, []int32{}))
	require.NoError(t, s.SampleFloat32(logits, vocab, greedy, &res))
	assert.ErrorIs(t, res.Errs[0], ErrNoFiniteLogit, "nothing allowed")
	require.NoError(t, s.ClearProcessors(0))
	assert.Equal(t, int32(49), sample())

	// Frequency penalty 0.25 per use: greedy walks down as each top token is used.
	require.NoError(t, s.TrackTokens(0, vocab, nil))
	greedy[0].FrequencyPenalty = 0.25
	seen := map[int32]int{}
	for range 6 {
		seen[sample()]++
	}
	assert.Greater(t, len(seen), 1, "the penalty moved greedy off its token: %v", seen)
	require.NoError(t, s.UntrackTokens(0))
	assert.Equal(t, int32(49), sample(), "untracked: counts are zero again")
}

func TestProcessorBadInput(t *testing.T) {
	dev := openCPU(t)
	s := newSampler(t, dev, Options{})
	const vocab = 100
	nan := float32(math.NaN())
	tests := []struct {
		name string
		call func() error
		want error
	}{
		{"bias row negative", func() error { return s.SetLogitBias(-1, vocab, []int32{1}, []float32{1}) }, ErrRow},
		{"bias row too large", func() error { return s.SetLogitBias(MaxProcessorRows, vocab, []int32{1}, []float32{1}) }, ErrRow},
		{"bias token past vocab", func() error { return s.SetLogitBias(0, vocab, []int32{vocab}, []float32{1}) }, ErrToken},
		{"bias token negative", func() error { return s.SetLogitBias(0, vocab, []int32{-1}, []float32{1}) }, ErrToken},
		{"bias token twice", func() error { return s.SetLogitBias(0, vocab, []int32{4, 4}, []float32{1, 2}) }, ErrToken},
		{"bias NaN", func() error { return s.SetLogitBias(0, vocab, []int32{4}, []float32{nan}) }, ErrBias},
		{"bias infinite", func() error { return s.SetLogitBias(0, vocab, []int32{4}, []float32{negInf}) }, ErrBias},
		{"bias length", func() error { return s.SetLogitBias(0, vocab, []int32{4, 5}, []float32{1}) }, ErrBias},
		{"bias vocab zero", func() error { return s.SetLogitBias(0, 0, []int32{}, []float32{}) }, ErrShape},
		{"allowed token past vocab", func() error { return s.SetAllowedTokens(0, vocab, []int32{0, 100}) }, ErrToken},
		{"banned token negative", func() error { return s.SetBannedTokens(0, vocab, []int32{-5}) }, ErrToken},
		{"prompt token past vocab", func() error { return s.TrackTokens(0, vocab, []int32{1 << 20}) }, ErrToken},
		{"counts row negative", func() error { return s.TokenCounts(-1, make([]uint32, vocab)) }, ErrRow},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.ErrorIs(t, tc.call(), tc.want)
		})
	}
	// Nothing above left state behind: the vocabulary is still free to change.
	require.NoError(t, s.SetLogitBias(3, 2*vocab, []int32{1}, []float32{1}))
	// Now row 3 holds state for 2*vocab: another vocabulary is a shape error, in
	// setters and in calls that reach row 3.
	assert.ErrorIs(t, s.SetBannedTokens(0, vocab, []int32{1}), ErrShape)
	assert.ErrorIs(t, s.TokenCounts(3, make([]uint32, vocab)), nil, "row 3 is not tracked: zeros")
	require.NoError(t, s.TrackTokens(3, 2*vocab, nil))
	assert.ErrorIs(t, s.TokenCounts(3, make([]uint32, vocab)), ErrShape)
	var res Result
	logits := make([]float32, 4*vocab)
	assert.ErrorIs(t, s.SampleFloat32(logits, vocab, make([]Params, 4), &res), ErrShape)
	require.NoError(t, s.SampleFloat32(logits[:3*vocab], vocab, make([]Params, 3), &res), "rows 0-2 hold no state")
	require.NoError(t, s.ClearProcessors(3))
	require.NoError(t, s.SampleFloat32(logits, vocab, make([]Params, 4), &res))
	require.NoError(t, s.Close())
	assert.ErrorIs(t, s.SetLogitBias(0, vocab, nil, nil), ErrClosed)
	assert.ErrorIs(t, s.TrackTokens(0, vocab, nil), ErrClosed)
	assert.ErrorIs(t, s.ClearProcessors(0), ErrClosed)
}
