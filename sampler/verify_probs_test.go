package sampler_test

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/half"
	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/runtime/cpu"
	"github.com/gumbel-go/gumbel/sampler"
	"github.com/gumbel-go/gumbel/tests/statistical"
)

// probsLawCase is one target/drafter pair of the verification law with draft
// probabilities: the target's logits at K+1 positions, the drafter's distribution at
// the first K (the draft tokens are drawn from it), the temperature and an optional
// bitmask at position 0.
type probsLawCase struct {
	name  string
	rows  [][]float32
	q     [][]float32
	t     float32
	mask0 []int32
	// filter is the request's top-k, top-p and min-p: the target at every position is
	// then the filtered law Sample draws from.
	filter statistical.Filter
}

func probsLawCases() []probsLawCase {
	row := func(xs ...float32) []float32 { return xs }
	inf := float32(math.Inf(-1))
	target := [][]float32{row(2, 1, 0, -1, 0.5, -2), row(0, 0.5, 2.5, 1, -1, 0), row(1, 1, 1, 0, 0, 0)}
	asF32 := func(p []float64) []float32 {
		out := make([]float32, len(p))
		for i, v := range p {
			out[i] = float32(v)
		}
		return out
	}
	return []probsLawCase{
		{name: "draft equals target", t: 0.8, rows: target,
			q: [][]float32{asF32(softmaxMasked(target[0], 0.8, nil)), asF32(softmaxMasked(target[1], 0.8, nil))}},
		{name: "too peaked", t: 1, rows: target,
			q: [][]float32{row(0.02, 0.9, 0.02, 0.02, 0.02, 0.02), row(0.01, 0.01, 0.01, 0.95, 0.01, 0.01)}},
		{name: "too flat", t: 0.6, rows: target,
			q: [][]float32{row(1, 1, 1, 1, 1, 1), row(1, 1, 1, 1, 1, 1)}},
		{name: "disjoint supports", t: 1.2,
			rows: [][]float32{row(2, 1, 0, inf, inf, inf), row(0, 0.5, 2.5, 1, -1, 0), row(1, 1, 1, 0, 0, 0)},
			q:    [][]float32{row(0, 0, 0, 0.5, 0.3, 0.2), row(0.2, 0.2, 0.2, 0.2, 0.1, 0.1)}},
		{name: "masked target", t: 1, rows: target, mask0: []int32{1, 2, 3, 4},
			q: [][]float32{row(0.4, 0.1, 0.1, 0.1, 0.1, 0.2), row(0.2, 0.2, 0.2, 0.2, 0.1, 0.1)}},
		{name: "no draft", t: 1, rows: target[:1]},
		{name: "top-k target, draft of the unfiltered target", t: 0.8, rows: target, filter: statistical.Filter{TopK: 3},
			q: [][]float32{asF32(softmaxMasked(target[0], 0.8, nil)), asF32(softmaxMasked(target[1], 0.8, nil))}},
		{name: "top-p target, draft too flat", t: 0.6, rows: target, filter: statistical.Filter{TopP: 0.7},
			q: [][]float32{row(1, 1, 1, 1, 1, 1), row(1, 1, 1, 1, 1, 1)}},
		{name: "min-p target, draft too peaked", t: 1, rows: target, filter: statistical.Filter{MinP: 0.3},
			q: [][]float32{row(0.02, 0.9, 0.02, 0.02, 0.02, 0.02), row(0.01, 0.01, 0.01, 0.95, 0.01, 0.01)}},
		{name: "every filter", t: 1.2, rows: target, filter: statistical.Filter{TopK: 4, TopP: 0.9, MinP: 0.1},
			q: [][]float32{row(0.3, 0.1, 0.1, 0.2, 0.1, 0.2), row(0.1, 0.1, 0.3, 0.3, 0.1, 0.1)}},
		{name: "top-k with ties at the k-th value", t: 1, filter: statistical.Filter{TopK: 2},
			rows: [][]float32{row(2, 1, 1, 1, 0, -1), row(0, 1, 1, 0.5, 1, -2), row(1, 1, 1, 0, 0, 0)},
			q:    [][]float32{row(0.1, 0.1, 0.1, 0.1, 0.3, 0.3), row(0.2, 0.2, 0.2, 0.2, 0.1, 0.1)}},
	}
}

// normalised returns q scaled to sum to 1 (the cases write some rows unnormalised).
func normalised(q []float32) []float64 {
	sum := 0.0
	for _, v := range q {
		sum += float64(v)
	}
	out := make([]float64, len(q))
	for i, v := range q {
		out[i] = float64(v) / sum
	}
	return out
}

// checkProbsLaw draws the case's verification n times (one request per draw, each with
// its own seed and its own draft tokens drawn from q) and tests with the suite's
// chi-square: the first emitted token follows the target at position 0; the accepted
// length follows Π β_j (1 - β_k), β_j = Σ min(p_j, q_j) the acceptance rate at
// position j; and after an accepted first draft the second token follows the target at
// position 1.
func checkProbsLaw(t *testing.T, dev runtime.Device, lc probsLawCase, dt sampler.DType, n int) {
	s, err := sampler.New(dev, sampler.Options{Seed: 5})
	require.NoError(t, err)
	defer s.Close()
	k, vocab := len(lc.q), len(lc.rows[0])
	const perCall = 500
	rows := perCall * (k + 1)
	lg := uploadAs(t, dev, repeatRows(lc.rows, perCall), rows, vocab, dt)
	var qs []float32
	for _, r := range lc.q {
		qs = append(qs, normalisedF32(r)...)
	}
	qs = append(qs, make([]float32, vocab)...) // one row even without drafts
	draft := upload(t, dev, qs, max(k, 1), vocab)
	mask := firstMask(vocab, k, lc.mask0)
	targets := make([][]float64, k+1)
	for j := range k + 1 {
		allowed := []int32(nil)
		if j == 0 {
			allowed = lc.mask0
		}
		targets[j] = softmaxMasked(lc.rows[j], lc.t, allowed)
		if lc.filter != (statistical.Filter{}) {
			targets[j], err = statistical.Probabilities(lc.rows[j], lc.t, lc.filter)
			require.NoError(t, err)
		}
	}
	// The acceptance rate at each position: a_j = Σ min(p_j, q_j) = E_q[min(1, p_j/q)].
	beta := make([]float64, k)
	for j := range k {
		for i, q := range normalised(lc.q[j]) {
			beta[j] += math.Min(q, targets[j][i])
		}
	}

	rng := rand.New(rand.NewPCG(uint64(len(lc.name)), 77))
	first := make([]int64, vocab)
	lengths := make([]int64, k+1)
	second := make([]int64, vocab)
	params := make([]sampler.Params, perCall)
	drafts := make([]sampler.Draft, perCall)
	tokens := make([]int32, perCall*k)
	var res sampler.Verified
	for call := 0; call*perCall < n; call++ {
		for b := range params {
			params[b] = sampler.Params{Temperature: lc.t, Seed: uint64(1 + call*perCall + b), Step: 40,
				TopK: lc.filter.TopK, TopP: lc.filter.TopP, MinP: lc.filter.MinP}
			toks := tokens[b*k : (b+1)*k]
			for j := range toks {
				toks[j] = drawFrom(rng, normalised(lc.q[j]))
			}
			drafts[b] = sampler.Draft{Tokens: toks, Row: b * (k + 1), Bitmasks: mask}
		}
		require.NoError(t, s.VerifyChainProbs(lg, draft, params, drafts, &res))
		for b := range params {
			require.NoError(t, res.Errs[b])
			require.Len(t, res.Tokens[b], res.Accepted[b]+1)
			require.Equal(t, drafts[b].Tokens[:res.Accepted[b]], res.Tokens[b][:res.Accepted[b]])
			first[res.Tokens[b][0]]++
			lengths[res.Accepted[b]]++
			if res.Accepted[b] >= 1 && k >= 1 {
				second[res.Tokens[b][1]]++
			}
		}
	}
	assertLaws(t, lc.name, []lawCheck{
		{"first token", targets[0], first},
		{"accepted drafts", lengthLaw(beta), lengths},
		{"second token", targets[min(1, k)], second},
	})
}

// normalisedF32 is normalised in float32, as a drafter would hand its probabilities.
func normalisedF32(q []float32) []float32 {
	p := normalised(q)
	out := make([]float32, len(p))
	for i, v := range p {
		out[i] = float32(v)
	}
	return out
}

// drawFrom draws an index from the distribution p.
func drawFrom(rng *rand.Rand, p []float64) int32 {
	u := rng.Float64()
	for i, v := range p {
		if u < v {
			return int32(i)
		}
		u -= v
	}
	return int32(len(p) - 1)
}

// upload copies a rows x vocab float32 matrix to the device.
func upload(t testing.TB, dev runtime.Device, xs []float32, rows, vocab int) sampler.Logits {
	return uploadAs(t, dev, xs, rows, vocab, sampler.Float32)
}

// uploadAs copies a rows x vocab matrix to the device in dtype dt (float32 or bfloat16,
// rounded to nearest).
func uploadAs(t testing.TB, dev runtime.Device, xs []float32, rows, vocab int, dt sampler.DType) sampler.Logits {
	src := runtime.BytesOf(xs)
	if dt == sampler.BFloat16 {
		bits := make([]uint16, len(xs))
		for i, x := range xs {
			bits[i] = half.BFloat16(x)
		}
		src = runtime.BytesOf(bits)
	}
	buf, err := dev.Alloc(len(src))
	require.NoError(t, err)
	t.Cleanup(func() { _ = buf.Free() })
	require.NoError(t, dev.DefaultStream().CopyToDevice(buf, 0, src))
	return sampler.Logits{Data: buf, DType: dt, Rows: rows, Vocab: vocab}
}

// TestVerifyChainProbsLaw is the verification law with draft probabilities on the CPU
// device.
func TestVerifyChainProbsLaw(t *testing.T) {
	dev, err := cpu.Open()
	require.NoError(t, err)
	defer dev.Close()
	n := 20_000
	if testing.Short() {
		n = 5_000
	}
	for _, lc := range probsLawCases() {
		t.Run(lc.name, func(t *testing.T) { checkProbsLaw(t, dev, lc, sampler.Float32, n) })
	}
	lc := probsLawCases()[1]
	t.Run(lc.name+" bfloat16", func(t *testing.T) { checkProbsLaw(t, dev, lc, sampler.BFloat16, n) })
}

// probsFixture is a batch of chains over random logits, with draft probabilities.
type probsFixture struct {
	lg, draft sampler.Logits
	params    []sampler.Params
	drafts    []sampler.Draft
	logits    []float32
}

// newProbsFixture lays out requests chains of k drafts each over vocab tokens: request
// b's positions are logits rows b(k+1) to b(k+1)+k and its draft rows bk to bk+k-1.
func newProbsFixture(t testing.TB, dev runtime.Device, requests, k, vocab int, temp float32) probsFixture {
	rng := rand.New(rand.NewPCG(3, uint64(vocab)))
	rows := requests * (k + 1)
	f := probsFixture{logits: make([]float32, rows*vocab)}
	for i := range f.logits {
		f.logits[i] = float32(rng.NormFloat64() * 2)
	}
	q := make([]float32, max(requests*k, 1)*vocab)
	for i := range q {
		q[i] = float32(rng.ExpFloat64())
	}
	for r := range max(requests*k, 1) {
		copy(q[r*vocab:(r+1)*vocab], normalisedF32(q[r*vocab:(r+1)*vocab]))
	}
	f.lg = upload(t, dev, f.logits, rows, vocab)
	f.draft = upload(t, dev, q, max(requests*k, 1), vocab)
	for b := range requests {
		toks := make([]int32, k)
		for j := range toks {
			toks[j] = int32(rng.IntN(vocab))
		}
		f.params = append(f.params, sampler.Params{Temperature: temp, Seed: uint64(100 + b), Step: 7})
		f.drafts = append(f.drafts, sampler.Draft{Tokens: toks, Row: b * (k + 1), ProbsRow: b * k})
	}
	return f
}

// sampleAt is the token Sample draws for request b at its chain's position pos: the
// draft's row and step there.
func (f probsFixture) sampleAt(t *testing.T, s *sampler.Sampler, b, pos int) int32 {
	t.Helper()
	vocab := f.lg.Vocab
	p := f.params[b]
	p.Step += uint64(pos)
	row := f.drafts[b].Row + pos
	var r sampler.Result
	require.NoError(t, s.SampleFloat32(f.logits[row*vocab:(row+1)*vocab], vocab, []sampler.Params{p}, &r))
	require.NoError(t, r.Errs[0])
	return r.Tokens[0]
}

// cpuVerifier opens the CPU device and a sampler on it for one test.
func cpuVerifier(t *testing.T) (runtime.Device, *sampler.Sampler) {
	dev, err := cpu.Open()
	require.NoError(t, err)
	t.Cleanup(func() { _ = dev.Close() })
	s, err := sampler.New(dev, sampler.Options{Seed: 1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return dev, s
}

// TestVerifyChainProbsBatchInvariant: a request's outcome is the same alone, in its
// batch, and in a batch laid out in another order around it.
func TestVerifyChainProbsBatchInvariant(t *testing.T) {
	dev, s := cpuVerifier(t)
	const requests, k, vocab = 8, 3, 50
	f := newProbsFixture(t, dev, requests, k, vocab, 1)
	for b := 1; b < requests; b += 2 {
		filterFor(b/2, &f.params[b]) // filtered requests among unfiltered ones
	}
	var all sampler.Verified
	require.NoError(t, s.VerifyChainProbs(f.lg, f.draft, f.params, f.drafts, &all))
	accepted := 0
	for b := range requests {
		require.NoError(t, all.Errs[b])
		accepted += all.Accepted[b]
		var one sampler.Verified
		require.NoError(t, s.VerifyChainProbs(f.lg, f.draft, f.params[b:b+1], f.drafts[b:b+1], &one))
		assert.Equal(t, all.Tokens[b], one.Tokens[0], "request %d alone", b)
		assert.Equal(t, all.Accepted[b], one.Accepted[0], "request %d alone", b)
	}
	// Reversed order: the same requests, their rows and draft rows unchanged.
	rp := make([]sampler.Params, requests)
	rd := make([]sampler.Draft, requests)
	for b := range requests {
		rp[b], rd[b] = f.params[requests-1-b], f.drafts[requests-1-b]
	}
	var rev sampler.Verified
	require.NoError(t, s.VerifyChainProbs(f.lg, f.draft, rp, rd, &rev))
	for b := range requests {
		assert.Equal(t, all.Tokens[requests-1-b], rev.Tokens[b], "request %d reversed", b)
	}
	assert.Positive(t, accepted, "some draft accepted, so the chains were walked")
}

// TestVerifyChainProbsEdges: a draft probability of 0 at the draft token is always
// accepted (u·0 < p), and the bonus token after the last draft is Sample's at Step+K; a
// drafter whose probabilities exceed the target's everywhere leaves an empty residual,
// and the rejected position's token is then Sample's there; greedy requests verify by
// arg-max as VerifyChain does.
func TestVerifyChainProbsEdges(t *testing.T) {
	dev, s := cpuVerifier(t)
	const requests, k, vocab = 4, 3, 40
	f := newProbsFixture(t, dev, requests, k, vocab, 0.9)
	sampleAt := func(b, pos int) int32 { return f.sampleAt(t, s, b, pos) }

	zeros := upload(t, dev, make([]float32, requests*k*vocab), requests*k, vocab)
	var res sampler.Verified
	require.NoError(t, s.VerifyChainProbs(f.lg, zeros, f.params, f.drafts, &res))
	for b := range requests {
		require.NoError(t, res.Errs[b])
		assert.Equal(t, k, res.Accepted[b], "request %d: q(t) = 0 accepts", b)
		assert.Equal(t, sampleAt(b, k), res.Tokens[b][k], "request %d: the bonus token is Sample's", b)
	}

	ones := make([]float32, requests*k*vocab)
	for i := range ones {
		ones[i] = 1
	}
	require.NoError(t, s.VerifyChainProbs(f.lg, upload(t, dev, ones, requests*k, vocab), f.params, f.drafts, &res))
	for b := range requests {
		require.NoError(t, res.Errs[b])
		a := res.Accepted[b]
		assert.Equal(t, sampleAt(b, a), res.Tokens[b][a], "request %d: an empty residual draws Sample's token", b)
	}

	greedy := make([]sampler.Params, requests)
	for b := range greedy {
		greedy[b] = f.params[b]
		greedy[b].Temperature = 0
	}
	var want sampler.Verified
	require.NoError(t, s.VerifyChain(f.lg, greedy, f.drafts, &want))
	require.NoError(t, s.VerifyChainProbs(f.lg, f.draft, greedy, f.drafts, &res))
	assert.Equal(t, want.Tokens, res.Tokens)
	assert.Equal(t, want.Accepted, res.Accepted)
}

// filterFor gives request b one of the filters and their combinations.
func filterFor(b int, p *sampler.Params) {
	switch b % 4 {
	case 0:
		p.TopK = 5
	case 1:
		p.TopP = 0.8
	case 2:
		p.MinP = 0.1
	case 3:
		p.TopK, p.TopP, p.MinP = 12, 0.9, 0.05
	}
}

// TestVerifyChainProbsFiltered: with top-k, top-p and min-p the draws from the target are
// Sample's on the filtered route. Drafting Sample's own token at every position with
// q = 0 there accepts every draft, and the bonus token is Sample's at Step+K; with q = 1
// everywhere (q > p_f) a rejected position's residual holds no mass, and its token is
// Sample's there. The log-probability records of the emitted tokens are
// Sample's for the same tokens (within ABI.md's tolerance of records); and a token the
// filters drop (p_f = 0) is never accepted.
func TestVerifyChainProbsFiltered(t *testing.T) {
	dev, s := cpuVerifier(t)
	const requests, k, vocab = 8, 3, 60
	f := newProbsFixture(t, dev, requests, k, vocab, 0.9)
	samples := make([][]sampler.Result, requests) // Sample at each position, with records
	for b := range requests {
		filterFor(b, &f.params[b])
		f.params[b].Logprobs = true
		samples[b] = make([]sampler.Result, k+1)
		for pos := range k + 1 {
			p := f.params[b]
			p.Step += uint64(pos)
			row := f.drafts[b].Row + pos
			r := &samples[b][pos]
			require.NoError(t, s.SampleFloat32(f.logits[row*vocab:(row+1)*vocab], vocab, []sampler.Params{p}, r))
			require.NoError(t, r.Errs[0])
			if pos < k {
				f.drafts[b].Tokens[pos] = r.Tokens[0]
			}
		}
	}
	zeros := upload(t, dev, make([]float32, requests*k*vocab), requests*k, vocab)
	var res sampler.Verified
	require.NoError(t, s.VerifyChainProbs(f.lg, zeros, f.params, f.drafts, &res))
	for b := range requests {
		require.NoError(t, res.Errs[b])
		require.Equal(t, k, res.Accepted[b], "request %d: Sample's tokens with q = 0 are accepted", b)
		for i, tok := range res.Tokens[b] {
			want := samples[b][i]
			require.Equal(t, want.Tokens[0], tok, "request %d: token %d is Sample's", b, i)
			got, lp := res.Logprobs[b][i], want.Logprobs[0]
			for _, w := range [][2]float32{{lp.Raw, got.Raw}, {lp.Processed, got.Processed}, {lp.RawLSE, got.RawLSE},
				{lp.ProcessedLSE, got.ProcessedLSE}} {
				assert.InDelta(t, w[0], w[1], 1e-5*max(1, math.Abs(float64(w[0]))), "request %d token %d: record %+v, Sample's %+v", b, i, got, lp)
			}
		}
	}

	ones := make([]float32, requests*k*vocab)
	for i := range ones {
		ones[i] = 1
	}
	require.NoError(t, s.VerifyChainProbs(f.lg, upload(t, dev, ones, requests*k, vocab), f.params, f.drafts, &res))
	rejected := 0
	for b := range requests {
		require.NoError(t, res.Errs[b])
		a := res.Accepted[b]
		if a < k {
			rejected++
		}
		assert.Equal(t, samples[b][a].Tokens[0], res.Tokens[b][a], "request %d: an empty residual draws Sample's token", b)
	}
	assert.Positive(t, rejected, "q = 1 rejects some draft")

	// Draft tokens the filters drop: never accepted, whatever u (q = 0 at them).
	for b := range requests {
		for pos := range k {
			row := f.drafts[b].Row + pos
			f.drafts[b].Tokens[pos] = int32(slicesMinIndex(f.logits[row*vocab : (row+1)*vocab]))
		}
	}
	require.NoError(t, s.VerifyChainProbs(f.lg, zeros, f.params, f.drafts, &res))
	for b := range requests {
		require.NoError(t, res.Errs[b])
		assert.Zero(t, res.Accepted[b], "request %d: a dropped token is rejected", b)
	}
}

// slicesMinIndex is the index of xs's smallest value.
func slicesMinIndex(xs []float32) int {
	best := 0
	for i, x := range xs {
		if x < xs[best] {
			best = i
		}
	}
	return best
}

// TestVerifyChainProbsExactScores: on rows whose |x/T| lies beyond what a float32 score
// resolves (a flat row of 1e7 at T = 1, where only the noise decides), the draws from
// the target are Sample's, which the exact comparison finishes (kernelsrc/ABI.md,
// "residual"): the bonus token after every draft accepted, and the token of a rejected
// position whose residual holds no mass. The noise, not the lowest index, picks them.
func TestVerifyChainProbsExactScores(t *testing.T) {
	dev, s := cpuVerifier(t)
	const requests, k, vocab = 12, 2, 40
	f := newProbsFixture(t, dev, requests, k, vocab, 1)
	for i := range f.logits {
		f.logits[i] = 1e7
	}
	f.lg = upload(t, dev, f.logits, requests*(k+1), vocab)
	ones := make([]float32, requests*k*vocab)
	for i := range ones {
		ones[i] = 1
	}
	drawn := map[int32]bool{}
	for _, c := range []struct {
		name  string
		draft []float32
	}{{"every draft accepted", make([]float32, requests*k*vocab)}, {"empty residual", ones}} {
		var res sampler.Verified
		require.NoError(t, s.VerifyChainProbs(f.lg, upload(t, dev, c.draft, requests*k, vocab), f.params, f.drafts, &res))
		for b := range requests {
			require.NoError(t, res.Errs[b])
			a := res.Accepted[b]
			tok := res.Tokens[b][a]
			assert.Equal(t, f.sampleAt(t, s, b, a), tok, "%s: request %d: the drawn token is Sample's", c.name, b)
			drawn[tok] = true
		}
	}
	assert.Greater(t, len(drawn), requests, "tokens drawn from flat rows of 1e7")
}

// TestVerifyChainProbsErrors: a draft matrix that does not fit is the call's error; a
// request whose draft rows lie outside it, or that asks for filters, gets its own error
// and the others are verified.
func TestVerifyChainProbsErrors(t *testing.T) {
	dev, s := cpuVerifier(t)
	const requests, k, vocab = 3, 2, 30
	f := newProbsFixture(t, dev, requests, k, vocab, 1)
	var res sampler.Verified
	for _, c := range []struct {
		name  string
		draft func(sampler.Logits) sampler.Logits
	}{
		{"bfloat16", func(d sampler.Logits) sampler.Logits { d.DType = sampler.BFloat16; return d }},
		{"other vocab", func(d sampler.Logits) sampler.Logits { d.Vocab--; return d }},
		{"strided", func(d sampler.Logits) sampler.Logits { d.RowStride = 2 * d.Vocab; return d }},
		{"too many rows", func(d sampler.Logits) sampler.Logits { d.Rows += 5; return d }},
		{"no rows", func(d sampler.Logits) sampler.Logits { d.Rows = 0; return d }},
	} {
		err := s.VerifyChainProbs(f.lg, c.draft(f.draft), f.params, f.drafts, &res)
		assert.ErrorIs(t, err, sampler.ErrShape, c.name)
	}

	drafts := append([]sampler.Draft(nil), f.drafts...)
	drafts[1].ProbsRow = requests*k - 1 // its second draft row is past the matrix
	params := append([]sampler.Params(nil), f.params...)
	params[2].TopK = 5
	require.NoError(t, s.VerifyChainProbs(f.lg, f.draft, params, drafts, &res))
	assert.NoError(t, res.Errs[0])
	assert.ErrorIs(t, res.Errs[1], sampler.ErrDraft)
	assert.NoError(t, res.Errs[2], "a filtered request beside a bad one")
	assert.Nil(t, res.Tokens[1])
	assert.Len(t, res.Tokens[0], res.Accepted[0]+1)
	assert.Len(t, res.Tokens[2], res.Accepted[2]+1)
}

// noTopN is a device whose programs have no topn kernels, as an edition without them.
type noTopN struct{ runtime.Device }

func (d noTopN) Load(p *runtime.Program) (runtime.Module, error) {
	q := *p
	q.Go = make(map[string]runtime.GoKernel, len(p.Go))
	for name, fn := range p.Go {
		if !strings.HasPrefix(name, "topn_") {
			q.Go[name] = fn
		}
	}
	return d.Device.Load(&q)
}

// TestVerifyChainProbsWithoutTopN: neither VerifyChainProbs nor VerifyChain needs a
// topn kernel; both verify as with a full set.
func TestVerifyChainProbsWithoutTopN(t *testing.T) {
	dev, full := cpuVerifier(t)
	s, err := sampler.New(noTopN{dev}, sampler.Options{Seed: 1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	f := newProbsFixture(t, dev, 3, 2, 30, 1)
	var want, got sampler.Verified
	require.NoError(t, full.VerifyChainProbs(f.lg, f.draft, f.params, f.drafts, &want))
	require.NoError(t, s.VerifyChainProbs(f.lg, f.draft, f.params, f.drafts, &got))
	assert.Equal(t, want.Tokens, got.Tokens)
	assert.Equal(t, want.Accepted, got.Accepted)
	require.NoError(t, full.VerifyChain(f.lg, f.params, f.drafts, &want))
	require.NoError(t, s.VerifyChain(f.lg, f.params, f.drafts, &got))
	assert.Equal(t, want.Tokens, got.Tokens)
	assert.Equal(t, want.Accepted, got.Accepted)
}
