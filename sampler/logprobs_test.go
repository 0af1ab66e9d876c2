package sampler

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// logprobTolerance is how far a record may sit from the float64 reference: the ABI lets
// editions differ by about 1e-5 relative; the Go edition is the accurate one.
func logprobTolerance(want float32) float64 {
	return 2e-5*max(1, math.Abs(float64(want))) + 1e-6
}

// assertRecord checks a log-probability record against the reference.
func assertRecord(t *testing.T, want, got Logprob, what string) {
	t.Helper()
	for _, f := range []struct {
		name      string
		want, got float32
	}{
		{"raw", want.Raw, got.Raw},
		{"processed", want.Processed, got.Processed},
		{"raw LSE", want.RawLSE, got.RawLSE},
		{"processed LSE", want.ProcessedLSE, got.ProcessedLSE},
	} {
		assert.InDelta(t, f.want, f.got, logprobTolerance(f.want), "%s: %s", what, f.name)
	}
}

func isNaNRecord(l Logprob) bool {
	return math.IsNaN(float64(l.Raw)) && math.IsNaN(float64(l.Processed)) &&
		math.IsNaN(float64(l.RawLSE)) && math.IsNaN(float64(l.ProcessedLSE))
}

func TestLogprobsMatchLogSoftmax(t *testing.T) {
	dev := openCPU(t)
	tests := []struct {
		vocab, rows int
		opts        Options
	}{
		{1, 4, Options{Seed: 1}},
		{1000, 20, Options{Seed: 2}},
		{1000, 10, Options{Seed: 3, Policy: &forcedSplit, Split: On}},
		{1000, 10, Options{Seed: 4, Gumbel: Off}},
		{bigVocab, 4, Options{Seed: 5}},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("V=%d seed=%d", tc.vocab, tc.opts.Seed), func(t *testing.T) {
			s := newSampler(t, dev, tc.opts)
			rng := rand.New(rand.NewPCG(uint64(tc.vocab), 7))
			logits := randomLogits(rng, tc.rows, tc.vocab, 2)
			params := mixedParams(tc.rows, 11)
			var plain Result
			require.NoError(t, s.SampleFloat32(logits, tc.vocab, params, &plain))
			assert.Empty(t, plain.Logprobs, "no row asked for log-probabilities")
			assert.Empty(t, plain.Top, "no row asked for top log-probabilities")
			for i := range params {
				params[i].Logprobs = i%5 != 2
				params[i].TopLogprobs = i % 4 * 3
			}
			var res Result
			require.NoError(t, s.SampleFloat32(logits, tc.vocab, params, &res))
			assert.Equal(t, plain.Tokens, res.Tokens, "log-probabilities change no token")
			require.Len(t, res.Logprobs, tc.rows)
			require.Len(t, res.Top, tc.rows)
			for i, p := range params {
				require.NoError(t, res.Errs[i])
				row := logits[i*tc.vocab : (i+1)*tc.vocab]
				what := fmt.Sprintf("row %d (%s)", i, res.Routes[i])
				if p.Logprobs {
					want := refRecord(row, row, res.Tokens[i], res.Routes[i], p)
					assertRecord(t, want, res.Logprobs[i], what)
				} else {
					assert.True(t, isNaNRecord(res.Logprobs[i]), "%s did not ask: NaN", what)
				}
				wantTokens, wantValues := refTop(row, p.TopLogprobs)
				top := res.Top[i]
				require.Equal(t, len(wantTokens), top.Count, what)
				assert.Equal(t, wantTokens, top.Tokens[:top.Count], what)
				for j := range top.Count {
					assert.InDelta(t, wantValues[j], top.Logprobs[j], logprobTolerance(wantValues[j]), "%s entry %d", what, j)
				}
			}
		})
	}
}

func TestTopLogprobsShortRowsAndFailures(t *testing.T) {
	dev := openCPU(t)
	s := newSampler(t, dev, Options{Seed: 8})
	const vocab = 64
	inf := float32(math.Inf(-1))
	logits := make([]float32, 3*vocab)
	for i := range logits {
		logits[i] = inf
	}
	// Row 0: three finite logits; row 1: NaN; row 2: a tie at the top.
	logits[5], logits[9], logits[40] = 1, 3, 2
	logits[vocab+3] = float32(math.NaN())
	logits[2*vocab+7], logits[2*vocab+2] = 4, 4
	params := []Params{
		{Temperature: 1, TopLogprobs: 20, Logprobs: true},
		{Temperature: 1, TopLogprobs: 5, Logprobs: true},
		{TopLogprobs: 2, Logprobs: true},
	}
	var res Result
	require.NoError(t, s.SampleFloat32(logits, vocab, params, &res))
	require.NoError(t, res.Errs[0])
	assert.Equal(t, 3, res.Top[0].Count, "slots past the finite logits are empty")
	assert.Equal(t, []int32{9, 40, 5}, res.Top[0].Tokens[:3])
	assert.ErrorIs(t, res.Errs[1], ErrNonFiniteLogit)
	assert.Zero(t, res.Top[1].Count)
	assert.True(t, isNaNRecord(res.Logprobs[1]))
	assert.Equal(t, int32(-1), res.Tokens[1])
	require.NoError(t, res.Errs[2])
	assert.Equal(t, []int32{2, 7}, res.Top[2].Tokens[:2], "ties to the lowest index")
	assert.InDelta(t, -math.Ln2, res.Top[2].Logprobs[0], 1e-6)
	assert.Equal(t, int32(2), res.Tokens[2])
	assert.InDelta(t, -math.Ln2, res.Logprobs[2].Raw, 1e-6)
}
