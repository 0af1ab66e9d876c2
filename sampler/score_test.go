package sampler

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/runtime"
)

// refScore is the float64 reference of one scored row: the raw and processed
// log-probabilities of token t and its rank among the raw logits.
func refScore(raw, processed []float32, temperature float32, t int32) (float64, float64, int32) {
	invT := 1.0
	if temperature != 0 {
		invT = float64(float32(1 / temperature))
	}
	lse := func(xs []float32, scale float64) float64 {
		m := math.Inf(-1)
		for _, x := range xs {
			m = math.Max(m, float64(x)*scale)
		}
		sum := 0.0
		for _, x := range xs {
			sum += math.Exp(float64(x)*scale - m)
		}
		return m + math.Log(sum)
	}
	var rank int32
	for _, x := range raw {
		if x >= raw[t] {
			rank++
		}
	}
	return float64(raw[t]) - lse(raw, 1), float64(processed[t])*invT - lse(processed, invT), rank
}

// TestScoreMatchesReference: every row's record and rank against the float64 reference,
// for temperatures 0 (scored at 1) to 2, host bitmasks, a logit bias, ties at the token's
// logit, the most and least likely tokens, with and without the split phase, beside
// top log-probabilities; and a scored token's record is the record Sample writes when it
// draws that token.
func TestScoreMatchesReference(t *testing.T) {
	dev := openCPU(t)
	const vocab, rows = 1000, 12
	rng := rand.New(rand.NewPCG(2, 9))
	logits := randomLogits(rng, rows, vocab, 2)
	for i := range rows {
		logits[i*vocab+17] = logits[i*vocab+18] // a tie
	}
	buf := upload(t, dev, runtime.BytesOf(logits))
	lg := Logits{Data: buf, DType: Float32, Rows: rows, Vocab: vocab}
	for _, split := range []Switch{On, Off} {
		s := newSampler(t, dev, Options{Seed: 1, Split: split, Policy: &forcedSplit})
		require.NoError(t, s.SetLogitBias(3, vocab, []int32{5, 6}, []float32{4, -20}))
		params := make([]Params, rows)
		tokens := make([]int32, rows)
		processed := make([][]float32, rows)
		for i := range rows {
			row := logits[i*vocab : (i+1)*vocab]
			params[i] = Params{Temperature: []float32{0, 0.5, 1, 2}[i%4], TopLogprobs: i % 3 * 5}
			tokens[i] = []int32{0, 17, 18, int32(vocab - 1), int32(rng.IntN(vocab))}[i%5]
			proc := append([]float32(nil), row...)
			if i == 3 {
				proc[5], proc[6] = row[5]+4, row[6]-20
			}
			if i%4 == 1 {
				m := make([]int32, maskWords(vocab))
				for w := range m {
					m[w] = int32(rng.Uint32())
				}
				m[tokens[i]/32] |= 1 << (tokens[i] % 32)
				params[i].Bitmask = m
				for j := range proc {
					if m[j/32]>>(j%32)&1 == 0 {
						proc[j] = float32(math.Inf(-1))
					}
				}
			}
			processed[i] = proc
		}
		var res Scores
		require.NoError(t, s.Score(lg, params, tokens, &res))
		for i := range rows {
			require.NoError(t, res.Errs[i], "row %d", i)
			raw, proc, rank := refScore(logits[i*vocab:(i+1)*vocab], processed[i], params[i].Temperature, tokens[i])
			assert.InDelta(t, raw, res.Logprobs[i].Raw, 2e-5, "row %d raw", i)
			assert.InDelta(t, proc, res.Logprobs[i].Processed, 2e-5, "row %d processed", i)
			assert.Equal(t, rank, res.Ranks[i], "row %d rank", i)
			if params[i].TopLogprobs > 0 {
				assert.Equal(t, params[i].TopLogprobs, res.Top[i].Count, "row %d", i)
				assert.InDelta(t, raw, res.Logprobs[i].Raw, 2e-5)
			}
		}

		// The record of a drawn token equals its score.
		sp := make([]Params, rows)
		for i := range sp {
			sp[i] = params[i]
			sp[i].Logprobs, sp[i].Seed, sp[i].TopLogprobs = true, uint64(i+1), 0
		}
		var drawn Result
		require.NoError(t, s.Sample(lg, sp, &drawn))
		require.NoError(t, s.Score(lg, sp, drawn.Tokens, &res))
		for i := range rows {
			require.NoError(t, res.Errs[i])
			assert.InDelta(t, drawn.Logprobs[i].Raw, res.Logprobs[i].Raw, 2e-5, "row %d", i)
			assert.InDelta(t, drawn.Logprobs[i].Processed, res.Logprobs[i].Processed, 2e-5, "row %d", i)
		}
	}
}

// TestScoreRowErrors: each bad row gets its own error and the others are scored.
func TestScoreRowErrors(t *testing.T) {
	dev := openCPU(t)
	s := newSampler(t, dev, Options{Seed: 1})
	const vocab = 64
	logits := randomLogits(rand.New(rand.NewPCG(1, 1)), 6, vocab, 1)
	logits[3*vocab+9] = float32(math.NaN())
	lg := Logits{Data: upload(t, dev, runtime.BytesOf(logits)), DType: Float32, Rows: 6, Vocab: vocab}
	params := []Params{{Temperature: 1}, {Temperature: 1, TopK: 5}, {Temperature: 1}, {Temperature: 1},
		{Temperature: 1, Bitmask: make([]int32, maskWords(vocab))}, {Temperature: -1}}
	tokens := []int32{3, 3, vocab, 3, 3, 3}
	var res Scores
	require.NoError(t, s.Score(lg, params, tokens, &res))
	assert.NoError(t, res.Errs[0])
	assert.Equal(t, int32(0), res.Ranks[1])
	for i, want := range []error{nil, ErrScoreFiltered, ErrToken, ErrNonFiniteLogit, ErrNoFiniteLogit, ErrTemperature} {
		if want == nil {
			continue
		}
		assert.ErrorIs(t, res.Errs[i], want, "row %d", i)
		assert.True(t, math.IsNaN(float64(res.Logprobs[i].Raw)), "row %d", i)
	}
	assert.ErrorIs(t, s.Score(lg, params, tokens[:2], &res), ErrShape)
	assert.ErrorIs(t, s.Score(lg, params, tokens, nil), ErrShape)
}
