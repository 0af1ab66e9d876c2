package sampler_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/runtime/cpu"
	"github.com/gumbel-go/gumbel/sampler"
	"github.com/gumbel-go/gumbel/tests/statistical"
)

// verifyLawCase is one target/draft pair of the verification law: the target's logits at
// the K+1 positions, the draft tokens, the temperature, its filters and an optional
// bitmask for position 0.
type verifyLawCase struct {
	name   string
	rows   [][]float32
	draft  []int32
	t      float32
	f      statistical.Filter
	mask0  []int32 // allowed tokens at position 0, nil for all
	vocab  int
	seed   uint64
	reject bool // position 0's draft is impossible: never accepted
}

func verifyLawCases() []verifyLawCase {
	row := func(xs ...float32) []float32 { return xs }
	return []verifyLawCase{
		{name: "likely drafts", vocab: 6, t: 1, draft: []int32{0, 2},
			rows: [][]float32{row(2, 1, 0, -1, 0.5, -2), row(0, 0.5, 2.5, 1, -1, 0), row(1, 1, 1, 0, 0, 0)}},
		{name: "unlikely first draft", vocab: 6, t: 0.7, draft: []int32{5, 1},
			rows: [][]float32{row(2, 1, 0, -1, 0.5, -2), row(0, 0.5, 2.5, 1, -1, 0), row(1, 1, 1, 0, 0, 0)}},
		{name: "masked-out draft", vocab: 6, t: 1.3, draft: []int32{0, 1}, mask0: []int32{1, 2, 3, 4}, reject: true,
			rows: [][]float32{row(3, 1, 0, -1, 0.5, -2), row(0, 0.5, 2.5, 1, -1, 0), row(1, 1, 1, 0, 0, 0)}},
		{name: "no draft", vocab: 6, t: 1, draft: nil,
			rows: [][]float32{row(2, 1, 0, -1, 0.5, -2)}},
		{name: "top-k 3, first draft outside the kept set", vocab: 6, t: 1, draft: []int32{3, 1},
			f: statistical.Filter{TopK: 3}, reject: true,
			rows: [][]float32{row(2, 1, 0, -1, 0.5, -2), row(0, 0.5, 2.5, 1, -1, 0), row(1, 1, 1, 0, 0, 0)}},
		{name: "top-p 0.8", vocab: 6, t: 1, draft: []int32{1, 2},
			f:    statistical.Filter{TopP: 0.8},
			rows: [][]float32{row(2, 1, 0, -1, 0.5, -2), row(0, 0.5, 2.5, 1, -1, 0), row(1, 1, 1, 0, 0, 0)}},
		{name: "top-k 4, min-p 0.2", vocab: 6, t: 0.8, draft: []int32{0, 3},
			f:    statistical.Filter{TopK: 4, MinP: 0.2},
			rows: [][]float32{row(2, 1, 0, -1, 0.5, -2), row(0, 0.5, 2.5, 1.8, -1, 0), row(1, 1, 1, 0, 0, 0)}},
	}
}

// law is the target's law at position j of case lc, with only the tokens allowed listed
// (nil: all).
func (lc verifyLawCase) law(t *testing.T, j int, allowed []int32) []float64 {
	if lc.f == (statistical.Filter{}) {
		return softmaxMasked(lc.rows[j], lc.t, allowed)
	}
	require.Nil(t, allowed, "a case has filters or a mask")
	p, err := statistical.Probabilities(lc.rows[j], lc.t, lc.f)
	require.NoError(t, err, lc.name)
	return p
}

// softmaxMasked is softmax(x/t) over the allowed tokens (nil: all).
func softmaxMasked(x []float32, t float32, allowed []int32) []float64 {
	keep := make([]bool, len(x))
	for i := range keep {
		keep[i] = allowed == nil
	}
	for _, a := range allowed {
		keep[a] = true
	}
	p := make([]float64, len(x))
	m, sum := math.Inf(-1), 0.0
	for i, v := range x {
		if keep[i] {
			m = math.Max(m, float64(v)/float64(t))
		}
	}
	for i, v := range x {
		if keep[i] {
			p[i] = math.Exp(float64(v)/float64(t) - m)
			sum += p[i]
		}
	}
	for i := range p {
		p[i] /= sum
	}
	return p
}

// checkVerifyLaw draws the case's verification n times (requests of one call each with
// its own seed) and tests, with the suite's chi-square: the first emitted token follows
// the target at position 0; the number of accepted drafts follows its exact law,
// Π a_j (1 - a_k) with a_j the target's probability of draft j; and after an accepted
// first draft the second token follows the target at position 1.
func checkVerifyLaw(t *testing.T, dev runtime.Device, lc verifyLawCase, gumbel sampler.Switch, n int) {
	s, err := sampler.New(dev, sampler.Options{Seed: 5, Gumbel: gumbel})
	require.NoError(t, err)
	defer s.Close()
	k := len(lc.draft)
	const perCall = 500
	rows := perCall * (k + 1)
	lg := upload(t, dev, repeatRows(lc.rows, perCall), rows, lc.vocab)
	mask := firstMask(lc.vocab, k, lc.mask0)
	p0 := lc.law(t, 0, lc.mask0)
	a := make([]float64, k)
	for j := range k {
		allowed := []int32(nil)
		if j == 0 {
			allowed = lc.mask0
		}
		a[j] = lc.law(t, j, allowed)[lc.draft[j]]
	}

	first := make([]int64, lc.vocab)
	lengths := make([]int64, k+1)
	second := make([]int64, lc.vocab)
	params := make([]sampler.Params, perCall)
	drafts := make([]sampler.Draft, perCall)
	var res sampler.Verified
	for call := 0; call*perCall < n; call++ {
		for b := range params {
			params[b] = sampler.Params{Temperature: lc.t, TopK: lc.f.TopK, TopP: lc.f.TopP, MinP: lc.f.MinP,
				Seed: uint64(1 + call*perCall + b), Step: 40}
			drafts[b] = sampler.Draft{Tokens: lc.draft, Row: b * (k + 1), Bitmasks: mask}
		}
		require.NoError(t, s.VerifyChain(lg, params, drafts, &res))
		for b := range params {
			require.NoError(t, res.Errs[b])
			require.Len(t, res.Tokens[b], res.Accepted[b]+1)
			first[res.Tokens[b][0]]++
			lengths[res.Accepted[b]]++
			if res.Accepted[b] >= 1 && k >= 2 {
				second[res.Tokens[b][1]]++
			}
		}
	}
	assertLaws(t, lc.name, []lawCheck{
		{"first token", p0, first},
		{"accepted drafts", lengthLaw(a), lengths},
		{"second token", lc.law(t, min(1, len(lc.rows)-1), nil), second},
	})
	if lc.reject {
		assert.Equal(t, int64(n), lengths[0], "an impossible draft is never accepted")
	}
}

// repeatRows lays out rows times times, back to back.
func repeatRows(rows [][]float32, times int) []float32 {
	var out []float32
	for range times {
		for _, r := range rows {
			out = append(out, r...)
		}
	}
	return out
}

// firstMask is the per-position bitmasks of a chain of k drafts whose position 0 allows
// only the tokens listed (nil when allowed is nil: no mask anywhere).
func firstMask(vocab, k int, allowed []int32) [][]int32 {
	if allowed == nil {
		return nil
	}
	m := make([]int32, (vocab+31)/32)
	for _, a := range allowed {
		m[a/32] |= 1 << (a % 32)
	}
	mask := make([][]int32, k+1)
	mask[0] = m
	return mask
}

// lengthLaw is the law of the number of accepted drafts when draft j is accepted with
// probability accept[j] once reached: Π accept[i<j] · (1 - accept[j]), and Π accept for
// all of them.
func lengthLaw(accept []float64) []float64 {
	law := make([]float64, len(accept)+1)
	run := 1.0
	for j, a := range accept {
		law[j] = run * (1 - a)
		run *= a
	}
	law[len(accept)] = run
	return law
}

// lawCheck is one law a verification test draws against: its name, the exact law and
// the counts drawn.
type lawCheck struct {
	what   string
	law    []float64
	counts []int64
}

// assertLaws runs the suite's chi-square on each check that drew at least 1000 times.
func assertLaws(t *testing.T, name string, checks []lawCheck) {
	t.Helper()
	for _, c := range checks {
		total := int64(0)
		for _, x := range c.counts {
			total += x
		}
		if total < 1000 {
			continue
		}
		v, err := statistical.ChiSquareTest(c.law, c.counts, statistical.BinTokens)
		require.NoError(t, err, c.what)
		assert.True(t, v.Pass(statistical.Alpha), "%s: %s: chi-square %.2f, df %d, p %.3g, impossible drawn %d",
			name, c.what, v.ChiSquare, v.DF, v.PValue, v.ZeroDrawn)
	}
}

// TestVerifyChainLaw is the verification law on the CPU device; the sampled cases also
// with the Gumbel switch off, which draws their nodes on the categorical route.
func TestVerifyChainLaw(t *testing.T) {
	dev, err := cpu.Open()
	require.NoError(t, err)
	defer dev.Close()
	n := 20_000
	if testing.Short() {
		n = 5_000
	}
	for _, lc := range verifyLawCases() {
		t.Run(lc.name, func(t *testing.T) { checkVerifyLaw(t, dev, lc, sampler.On, n) })
		t.Run(lc.name+"/categorical", func(t *testing.T) { checkVerifyLaw(t, dev, lc, sampler.Off, n) })
	}
}

// TestVerifyChainGreedyIsGreedyDecoding: greedy verification accepts exactly the drafts
// that equal the arg-max (with a logit bias on one row) and emits the arg-max where it
// stops, whatever the batch around a request.
func TestVerifyChainGreedyIsGreedyDecoding(t *testing.T) {
	const vocab, k, requests = 50, 4, 6
	rows := requests * (k + 1)
	logits := normalLogits(4, rows*vocab, 1)
	s, lg := verifySetup(t, logits, rows, vocab)
	require.NoError(t, s.SetLogitBias(2, vocab, []int32{7}, []float32{100}))
	argmax := func(r int) int32 {
		best := int32(0)
		for i := range int32(vocab) {
			x := logits[r*vocab+int(i)]
			if r == 2 && i == 7 {
				x += 100
			}
			bx := logits[r*vocab+int(best)]
			if r == 2 && best == 7 {
				bx += 100
			}
			if x > bx {
				best = i
			}
		}
		return best
	}
	params := make([]sampler.Params, requests)
	drafts := make([]sampler.Draft, requests)
	want := make([][]int32, requests)
	for b := range requests {
		good := b % (k + 1) // drafts that match the arg-max before the first miss
		d := make([]int32, k)
		for j := range k {
			d[j] = argmax(b*(k+1) + j)
			if j == good {
				d[j] = (d[j] + 1) % vocab
			}
		}
		drafts[b] = sampler.Draft{Tokens: d, Row: b * (k + 1)}
		params[b] = sampler.Params{Temperature: 0}
		for j := 0; j <= k; j++ {
			tok := argmax(b*(k+1) + j)
			want[b] = append(want[b], tok)
			if j < k && d[j] != tok {
				break
			}
		}
	}
	var res sampler.Verified
	require.NoError(t, s.VerifyChain(lg, params, drafts, &res))
	for b := range requests {
		require.NoError(t, res.Errs[b])
		assert.Equal(t, want[b], res.Tokens[b], "request %d", b)
		assert.Equal(t, len(want[b])-1, res.Accepted[b], "request %d", b)
	}
	// A request alone gives what it gave in the batch.
	for b := range requests {
		var one sampler.Verified
		require.NoError(t, s.VerifyChain(lg, params[b:b+1], drafts[b:b+1], &one))
		assert.Equal(t, res.Tokens[b], one.Tokens[0], "request %d alone", b)
	}
}

// TestVerifyChainBatchInvariant: a sampled request's outcome depends on its seed and
// step only, not on the requests around it or their order.
func TestVerifyChainBatchInvariant(t *testing.T) {
	const vocab, k, requests = 40, 3, 8
	rows := requests * (k + 1)
	logits := normalLogits(6, rows*vocab, 2)
	s, lg := verifySetup(t, logits, rows, vocab)
	params := make([]sampler.Params, requests)
	drafts := make([]sampler.Draft, requests)
	for b := range requests {
		params[b] = sampler.Params{Temperature: 0.9, Seed: uint64(100 + b), Step: 7}
		drafts[b] = sampler.Draft{Tokens: []int32{int32(b), int32(2 * b), 1}, Row: b * (k + 1)}
	}
	var all sampler.Verified
	require.NoError(t, s.VerifyChain(lg, params, drafts, &all))
	got := make([][]int32, requests)
	for b := range requests {
		require.NoError(t, all.Errs[b])
		got[b] = append([]int32(nil), all.Tokens[b]...)
	}
	// Reversed order.
	rp, rd := make([]sampler.Params, requests), make([]sampler.Draft, requests)
	for b := range requests {
		rp[b], rd[b] = params[requests-1-b], drafts[requests-1-b]
	}
	var rev sampler.Verified
	require.NoError(t, s.VerifyChain(lg, rp, rd, &rev))
	for b := range requests {
		assert.Equal(t, got[requests-1-b], rev.Tokens[b], "request %d reversed", b)
	}
}

// TestVerifyChainErrors: bad requests fail alone.
func TestVerifyChainErrors(t *testing.T) {
	const vocab = 10
	s, lg := verifySetup(t, make([]float32, 12*vocab), 12, vocab)
	params := []sampler.Params{{Temperature: 1}, {Temperature: 1, TopP: 0.5, TopK: -1}, {Temperature: 1}, {Temperature: 1}, {Temperature: 1}, {Temperature: 1}}
	drafts := []sampler.Draft{
		{Tokens: []int32{1}, Row: 0},
		{Tokens: []int32{1}, Row: 2},
		{Tokens: []int32{vocab}, Row: 4},
		{Tokens: []int32{1}, Row: 11},                              // past the last row
		{Tokens: []int32{1}, Row: 1},                               // shares row 1 with request 0
		{Tokens: []int32{1}, Row: 6, Bitmasks: [][]int32{{1}, {}}}, // a bitmask of the wrong width
	}
	var res sampler.Verified
	require.NoError(t, s.VerifyChain(lg, params, drafts, &res))
	assert.NoError(t, res.Errs[0])
	assert.ErrorIs(t, res.Errs[1], sampler.ErrTopK)
	assert.ErrorIs(t, res.Errs[2], sampler.ErrDraft)
	assert.ErrorIs(t, res.Errs[3], sampler.ErrDraft)
	assert.ErrorIs(t, res.Errs[4], sampler.ErrDraft)
	assert.ErrorIs(t, res.Errs[5], sampler.ErrBitmask)
	assert.ErrorIs(t, s.VerifyChain(lg, params[:1], drafts, &res), sampler.ErrShape)
}

// verifySetup opens the CPU device and a sampler, and puts rows x vocab logits on it.
func verifySetup(t *testing.T, logits []float32, rows, vocab int) (*sampler.Sampler, sampler.Logits) {
	t.Helper()
	dev, err := cpu.Open()
	require.NoError(t, err)
	t.Cleanup(func() { _ = dev.Close() })
	s, err := sampler.New(dev, sampler.Options{Seed: 3})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	buf, err := dev.Alloc(4 * max(len(logits), 1))
	require.NoError(t, err)
	t.Cleanup(func() { _ = buf.Free() })
	require.NoError(t, dev.DefaultStream().CopyToDevice(buf, 0, runtime.BytesOf(logits)))
	return s, sampler.Logits{Data: buf, DType: sampler.Float32, Rows: rows, Vocab: vocab}
}

// TestVerifyTreeLaw: a root with three children (two of them the same token) and a
// grandchild. The first emitted token follows the target at the root exactly; the
// second, after an accepted child, follows the target at that child; the emitted tokens
// are the accepted nodes' tokens; a repeated sibling is never accepted.
func TestVerifyTreeLaw(t *testing.T) {
	const vocab, requests, calls = 6, 500, 40
	root := []float32{2, 1, 0.5, -1, 0, -2}
	child0 := []float32{0, 2, 1, 0, -1, 0.5}
	tree := sampler.DraftTree{Tokens: []int32{0, 2, 0, 3}, Parents: []int32{-1, -1, -1, 0}}
	nodes := len(tree.Tokens) + 1
	logits := make([]float32, 0, requests*nodes*vocab)
	for range requests {
		logits = append(logits, root...)
		logits = append(logits, child0...)
		for range nodes - 2 {
			logits = append(logits, root...)
		}
	}
	s, lg := verifySetup(t, logits, requests*nodes, vocab)
	params := make([]sampler.Params, requests)
	trees := make([]sampler.DraftTree, requests)
	first := make([]int64, vocab)
	second := make([]int64, vocab)
	var res sampler.Verified
	for call := range calls {
		for b := range requests {
			params[b] = sampler.Params{Temperature: 0.9, Seed: uint64(1 + call*requests + b), Step: 3}
			tr := tree
			tr.Row = b * nodes
			trees[b] = tr
		}
		require.NoError(t, s.VerifyTree(lg, params, trees, &res))
		for b := range requests {
			require.NoError(t, res.Errs[b])
			require.Len(t, res.Tokens[b], res.Accepted[b]+1)
			for i, n := range res.Nodes[b] {
				require.Equal(t, tree.Tokens[n], res.Tokens[b][i])
				require.NotEqual(t, int32(2), n, "the repeated sibling is never accepted")
			}
			first[res.Tokens[b][0]]++
			if res.Accepted[b] >= 1 && res.Nodes[b][0] == 0 {
				second[res.Tokens[b][1]]++
			}
		}
	}
	for _, c := range []struct {
		what   string
		law    []float64
		counts []int64
	}{
		{"first token", softmaxMasked(root, 0.9, nil), first},
		{"second token after node 0", softmaxMasked(child0, 0.9, nil), second},
	} {
		v, err := statistical.ChiSquareTest(c.law, c.counts, statistical.BinTokens)
		require.NoError(t, err, c.what)
		assert.True(t, v.Pass(statistical.Alpha), "%s: chi-square %.2f, df %d, p %.3g", c.what, v.ChiSquare, v.DF, v.PValue)
	}
}

// TestVerifyTreeGreedy: a greedy request follows the branch of arg-max tokens, whichever
// sibling holds it, and emits the arg-max where no child does.
func TestVerifyTreeGreedy(t *testing.T) {
	const vocab = 8
	rows := [][]float32{
		{0, 0, 5, 0, 0, 0, 0, 0}, // root: arg-max 2
		{0, 0, 0, 0, 0, 0, 0, 0}, // node 0 (token 1, not followed)
		{0, 0, 0, 0, 0, 0, 7, 0}, // node 1 (token 2): arg-max 6
		{0, 0, 0, 0, 0, 0, 0, 0}, // node 2 (token 5 under node 1, not followed)
		{3, 0, 0, 0, 0, 0, 0, 0}, // node 3 (token 6 under node 1): arg-max 0, no child
	}
	var logits []float32
	for _, r := range rows {
		logits = append(logits, r...)
	}
	s, lg := verifySetup(t, logits, len(rows), vocab)
	tree := sampler.DraftTree{Tokens: []int32{1, 2, 5, 6}, Parents: []int32{-1, -1, 1, 1}}
	var res sampler.Verified
	require.NoError(t, s.VerifyTree(lg, []sampler.Params{{}}, []sampler.DraftTree{tree}, &res))
	require.NoError(t, res.Errs[0])
	assert.Equal(t, []int32{1, 3}, res.Nodes[0])
	assert.Equal(t, []int32{2, 6, 0}, res.Tokens[0])
	assert.Equal(t, 2, res.Accepted[0])
}

// TestVerifyTreeErrors: trees that do not fit fail alone; a wide tree (more children
// than the vocabulary, duplicates among them) is fine.
func TestVerifyTreeErrors(t *testing.T) {
	const vocab = 10
	s, lg := verifySetup(t, make([]float32, 40*vocab), 40, vocab)
	wide := sampler.DraftTree{Row: 10}
	for i := range 25 {
		wide.Tokens = append(wide.Tokens, int32(i%vocab))
		wide.Parents = append(wide.Parents, -1)
	}
	trees := []sampler.DraftTree{
		wide,
		{Tokens: []int32{1, 2}, Parents: []int32{-1, 1}, Row: 0},  // a node its own parent
		{Tokens: []int32{1, 2}, Parents: []int32{-1}, Row: 3},     // parents missing
		{Tokens: []int32{1, 12}, Parents: []int32{-1, 0}, Row: 6}, // a token outside the vocabulary
	}
	params := make([]sampler.Params, len(trees))
	for i := range params {
		params[i] = sampler.Params{Temperature: 1}
	}
	var res sampler.Verified
	require.NoError(t, s.VerifyTree(lg, params, trees, &res))
	require.NoError(t, res.Errs[0])
	// Every token has a child: the root's draw is accepted, and the child is a leaf.
	assert.Equal(t, 1, res.Accepted[0])
	assert.Len(t, res.Tokens[0], 2)
	for b := 1; b < len(trees); b++ {
		assert.ErrorIs(t, res.Errs[b], sampler.ErrDraft, "tree %d", b)
	}
}

// TestVerifyLogprobs: with Params.Logprobs each emitted token comes with the record
// Score gives it at its position's row; without, none.
func TestVerifyLogprobs(t *testing.T) {
	const vocab, k, requests = 30, 3, 4
	rows := requests * (k + 1)
	logits := normalLogits(7, rows*vocab, 2)
	s, lg := verifySetup(t, logits, rows, vocab)
	params := make([]sampler.Params, requests)
	drafts := make([]sampler.Draft, requests)
	for b := range requests {
		params[b] = sampler.Params{Temperature: []float32{0, 0.8}[b%2], Seed: uint64(b + 1), Logprobs: b != 3}
		drafts[b] = sampler.Draft{Tokens: []int32{int32(b), 2, 3}, Row: b * (k + 1)}
	}
	var res sampler.Verified
	require.NoError(t, s.VerifyChain(lg, params, drafts, &res))
	for b := range requests {
		require.NoError(t, res.Errs[b])
		if !params[b].Logprobs {
			assert.Nil(t, res.Logprobs[b])
			continue
		}
		require.Len(t, res.Logprobs[b], len(res.Tokens[b]))
		for i, tok := range res.Tokens[b] {
			row := drafts[b].Row + i
			one := sampler.Logits{Data: lg.Data, Offset: 4 * row * vocab, DType: sampler.Float32, Rows: 1, Vocab: vocab}
			var sc sampler.Scores
			require.NoError(t, s.Score(one, []sampler.Params{{Temperature: params[b].Temperature}}, []int32{tok}, &sc))
			require.NoError(t, sc.Errs[0])
			assert.Equal(t, sc.Logprobs[0], res.Logprobs[b][i], "request %d token %d", b, i)
		}
	}
}

// normalLogits returns n normal logits of the given spread from seed.
func normalLogits(seed uint64, n int, spread float64) []float32 {
	rng := rand.New(rand.NewPCG(seed, seed))
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(rng.NormFloat64() * spread)
	}
	return out
}

// TestVerifyIsSampling: verification emits, token for token and record for record, what
// Sample draws step by step at the positions of its path, and accepts exactly the drafts
// that equal those draws; for filtered, unfiltered and greedy requests, in chains and
// trees, with the Gumbel switch on and off.
func TestVerifyIsSampling(t *testing.T) {
	const vocab, k, requests = 48, 4, 8
	rows := requests * (k + 1)
	logits := normalLogits(11, rows*vocab, 1.5)
	filters := []sampler.Params{
		{TopK: 5}, {TopP: 0.7}, {MinP: 0.3}, {TopK: 12, TopP: 0.9, MinP: 0.05}, {TopP: 0.8, MinP: 0.1},
	}
	for _, gumbel := range []sampler.Switch{sampler.On, sampler.Off} {
		dev, err := cpu.Open()
		require.NoError(t, err)
		t.Cleanup(func() { _ = dev.Close() })
		s, err := sampler.New(dev, sampler.Options{Seed: 9, Gumbel: gumbel})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		lg := upload(t, dev, logits, rows, vocab)
		// sampleAt is Sample's token and record for request p at logits row r, step offset d.
		sampleAt := func(p sampler.Params, r, d int) (int32, sampler.Logprob) {
			one := sampler.Logits{Data: lg.Data, Offset: 4 * r * vocab, DType: sampler.Float32, Rows: 1, Vocab: vocab}
			p.Step += uint64(d)
			var out sampler.Result
			require.NoError(t, s.Sample(one, []sampler.Params{p}, &out))
			require.NoError(t, out.Errs[0])
			if !p.Logprobs {
				return out.Tokens[0], sampler.Logprob{}
			}
			return out.Tokens[0], out.Logprobs[0]
		}
		params := make([]sampler.Params, requests)
		drafts := make([]sampler.Draft, requests)
		for b := range requests {
			p := filters[b%len(filters)]
			p.Temperature, p.Seed, p.Step, p.Logprobs = 0.9, uint64(30+b), 12, true
			switch b {
			case 6:
				p = sampler.Params{Temperature: 0.9, Seed: 36, Step: 12, Logprobs: true} // unfiltered
			case 7:
				p = sampler.Params{TopP: 0.5, Logprobs: true} // greedy, filters ignored
			}
			params[b] = p
			// Drafts that follow Sample's draws for b%4 positions, then one that differs.
			d := make([]int32, k)
			for j := range k {
				tok, _ := sampleAt(p, b*(k+1)+j, j)
				d[j] = tok
				if j == b%4 {
					d[j] = (tok + 1) % vocab
				}
			}
			drafts[b] = sampler.Draft{Tokens: d, Row: b * (k + 1)}
		}
		var res sampler.Verified
		require.NoError(t, s.VerifyChain(lg, params, drafts, &res))
		for b := range requests {
			require.NoError(t, res.Errs[b])
			assert.Equal(t, b%4, res.Accepted[b], "request %d accepts the drafts equal to the draws", b)
			require.Len(t, res.Tokens[b], res.Accepted[b]+1)
			for i, tok := range res.Tokens[b] {
				want, rec := sampleAt(params[b], b*(k+1)+i, i)
				assert.Equal(t, want, tok, "request %d token %d (switch %v)", b, i, gumbel)
				assert.Equal(t, rec, res.Logprobs[b][i], "request %d record %d", b, i)
			}
		}

		// The same request as a tree: node 0 has two children, the second holding the
		// token drawn at node 0, which is followed; node 2's row draws the last token.
		b := 2
		p := params[b]
		first, _ := sampleAt(p, b*(k+1), 0)
		second, _ := sampleAt(p, b*(k+1)+1, 1) // node 0's row: its children's position
		tree := sampler.DraftTree{Tokens: []int32{first, (second + 1) % vocab, second},
			Parents: []int32{-1, 0, 0}, Row: b * (k + 1)}
		var tr sampler.Verified
		require.NoError(t, s.VerifyTree(lg, []sampler.Params{p}, []sampler.DraftTree{tree}, &tr))
		require.NoError(t, tr.Errs[0])
		assert.Equal(t, []int32{0, 2}, tr.Nodes[0], "the tree follows the drawn sibling")
		third, _ := sampleAt(p, b*(k+1)+3, 2)
		assert.Equal(t, []int32{first, second, third}, tr.Tokens[0])
	}
}
