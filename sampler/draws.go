package sampler

import "github.com/gumbel-go/gumbel/runtime"

// MaxDraws is the most draws with replacement one SampleN call or Batch makes per row
// (the grid's z dimension).
const MaxDraws = 65535

// SampleN draws n tokens for each row of logits, with replacement, in one launch per
// route (grid.z = n). Draw z of row i uses step params[i].Step+z and is exactly the
// token a separate Sample call with that step would give, so the draws are independent
// samples of the same distribution and may repeat. Tokens land at
// res.Tokens[i*n+z] (res.Draws = n), log-probability records likewise; a row's error
// covers all its draws. A tracked row (TrackTokens) counts every draw, after all n: the
// draws of one call see the same counts. n must be in [1, MaxDraws].
func (s *Sampler) SampleN(logits Logits, params []Params, n int, res *Result) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	return s.sample(logits, params, n, drawReplace, res)
}

// SampleNFloat32 is SampleN for float32 logits in host memory, laid out as
// SampleFloat32 takes them.
func (s *Sampler) SampleNFloat32(logits []float32, vocab int, params []Params, n int, res *Result) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	return s.sampleHost(runtime.BytesOf(logits), len(logits), Float32, vocab, params, n, drawReplace, res)
}

// SampleDistinct draws n distinct tokens for each row, without replacement, in one
// launch of the topn kernel in its perturbed mode (Gumbel-top-k): the n largest Gumbel
// scores of the row at params[i].Step, largest first. They are n successive draws
// without replacement from the row's processed distribution (softmax of the processed
// logits over the temperature): the first is the token Sample gives at that step, the
// second is drawn from the rest renormalised, and so on. A greedy row gets its n largest
// processed logits in order. n must be in [1, MaxTopLogprobs].
//
// Only greedy and unfiltered rows can draw this way: a row with top-k, top-p or min-p
// gets ErrDistinctFiltered (the Gumbel switch does not apply: this is the only way to
// draw without replacement). A row with fewer than n tokens of finite processed logit
// gets ErrTooFewTokens. Tokens land at res.Tokens[i*n+j] (res.Draws = n). With
// Params.Logprobs, res.Logprobs[i*n+j].Processed is each token's processed
// log-probability (NaN where the scaled logits overflow float32, as in Sample's
// record); the other three fields are NaN. Params.TopLogprobs works as in
// Sample. The draws are not counted for penalties: they are candidates, and the caller
// decides which one the row keeps.
func (s *Sampler) SampleDistinct(logits Logits, params []Params, n int, res *Result) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	return s.sample(logits, params, n, drawDistinct, res)
}

// SampleDistinctFloat32 is SampleDistinct for float32 logits in host memory, laid out
// as SampleFloat32 takes them.
func (s *Sampler) SampleDistinctFloat32(logits []float32, vocab int, params []Params, n int, res *Result) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	return s.sampleHost(runtime.BytesOf(logits), len(logits), Float32, vocab, params, n, drawDistinct, res)
}
