package sampler

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/runtime"
)

// maskOf packs the allowed tokens into a bitmask row of ceil(vocab/32) words.
func maskOf(vocab int, allowed ...int32) []int32 {
	m := make([]int32, maskWords(vocab))
	for _, t := range allowed {
		m[t/32] |= 1 << (t % 32)
	}
	return m
}

// allowedOf lists the tokens below vocab that a bitmask row allows.
func allowedOf(m []int32, vocab int) []int32 {
	out := []int32{}
	for t := range int32(vocab) {
		if m[t/32]>>(t%32)&1 != 0 {
			out = append(out, t)
		}
	}
	return out
}

// grammarMasks are bitmask rows as a grammar fills them: digits only (ten tokens), one
// token, most tokens, every bit (past the vocabulary too), and a mask that keeps only
// the row's least likely tokens.
func grammarMasks(rng *rand.Rand, logits []float32, vocab int) [][]int32 {
	digits := maskOf(vocab, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12)
	one := maskOf(vocab, int32(vocab-1))
	most := make([]int32, maskWords(vocab))
	for i := range most {
		most[i] = int32(rng.Uint32() | rng.Uint32())
	}
	all := make([]int32, maskWords(vocab))
	for i := range all {
		all[i] = -1
	}
	low := []int32{}
	for t, x := range logits[:vocab] {
		if x < -1 {
			low = append(low, int32(t))
		}
	}
	return [][]int32{digits, one, most, all, maskOf(vocab, low...)}
}

// bitmaskParams are the rows of the bitmask tests: every route, with logprobs,
// penalties and filters.
var bitmaskParams = []Params{
	{Temperature: 0, Logprobs: true},
	{Temperature: 0.8, Seed: 11, Logprobs: true},
	{Temperature: 1.2, Seed: 12, TopK: 5},
	{Temperature: 1, Seed: 13, TopP: 0.9, Logprobs: true},
	{Temperature: 0.7, Seed: 14, MinP: 0.1},
	{Temperature: 0.9, Seed: 15, TopK: 40, TopP: 0.95, MinP: 0.02, Logprobs: true, TopLogprobs: 3},
	{Temperature: 1.1, Seed: 16, RepetitionPenalty: 1.3, FrequencyPenalty: 0.5},
}

// TestBitmaskMatchesAllowedTokens: a row with a token bitmask draws exactly what the same
// row draws with SetAllowedTokens listing the tokens the mask allows (the processor the
// mask joins), with the same log-probability records, on every route (the Gumbel
// switch on and off), for host masks, device masks mapped by Index, and SampleN and
// SampleDistinct draws. Top log-probabilities stay raw: the mask does not touch them.
func TestBitmaskMatchesAllowedTokens(t *testing.T) {
	dev := openCPU(t)
	const vocab = 1000 // not a multiple of 32: the last word has bits past the vocabulary
	rng := rand.New(rand.NewPCG(5, 23))
	for _, gumbel := range []Switch{On, Off} {
		// One sampler per form: tracked rows count their tokens, so each sampler must
		// see the same calls.
		opts := Options{Seed: 77, Gumbel: gumbel, Split: On, Policy: &forcedSplit}
		masked, onDevice, listed := newSampler(t, dev, opts), newSampler(t, dev, opts), newSampler(t, dev, opts)
		rows := len(bitmaskParams) * 5
		logits := randomLogits(rng, rows, vocab, 2)
		params := make([]Params, rows)
		plain := make([]Params, rows)
		masks := grammarMasks(rng, logits, vocab)
		var flat []int32
		index := make([]int32, rows)
		for i := range params {
			p := bitmaskParams[i%len(bitmaskParams)]
			p.Step = uint64(i)
			plain[i] = p
			index[i] = -1
			if i%5 != 4 { // every fifth row is free
				m := masks[i%len(masks)]
				p.Bitmask = m
				index[i] = int32(len(flat) / maskWords(vocab))
				flat = append(flat, m...)
				require.NoError(t, listed.SetAllowedTokens(i, vocab, allowedOf(m, vocab)))
			}
			if p.RepetitionPenalty != 0 {
				prompt := []int32{3, 5, 7, int32(vocab - 1)}
				for _, s := range []*Sampler{masked, onDevice, listed} {
					require.NoError(t, s.TrackTokens(i, vocab, prompt))
				}
			}
			params[i] = p
		}
		lg := Logits{Data: upload(t, dev, runtime.BytesOf(logits)), DType: Float32, Rows: rows, Vocab: vocab}
		devMask := lg
		devMask.Bitmask = &Bitmask{Data: upload(t, dev, runtime.BytesOf(flat)), Rows: len(flat) / maskWords(vocab),
			Words: maskWords(vocab), Index: index}

		calls := []struct {
			name string
			run  func(s *Sampler, lg Logits, ps []Params, res *Result) error
		}{
			{"Sample", func(s *Sampler, lg Logits, ps []Params, res *Result) error { return s.Sample(lg, ps, res) }},
			{"SampleN", func(s *Sampler, lg Logits, ps []Params, res *Result) error { return s.SampleN(lg, ps, 3, res) }},
			// Filtered rows fail alike on both sides (ErrDistinctFiltered).
			{"SampleDistinct", func(s *Sampler, lg Logits, ps []Params, res *Result) error { return s.SampleDistinct(lg, ps, 2, res) }},
		}
		for _, c := range calls {
			var want, host, onDev Result
			require.NoError(t, c.run(listed, lg, plain, &want), c.name)
			require.NoError(t, c.run(masked, lg, params, &host), c.name)
			require.NoError(t, c.run(onDevice, devMask, plain, &onDev), c.name)
			for name, got := range map[string]*Result{"host mask": &host, "device mask": &onDev} {
				assert.Equal(t, want.Tokens, got.Tokens, "%v %s %s", gumbel, c.name, name)
				assert.Equal(t, want.Errs, got.Errs, "%v %s %s", gumbel, c.name, name)
				assert.Equal(t, want.Routes, got.Routes, "%v %s %s", gumbel, c.name, name)
				assert.Equal(t, len(want.Logprobs), len(got.Logprobs))
				for o := range want.Logprobs {
					assert.Equal(t, math.Float32bits(want.Logprobs[o].Processed), math.Float32bits(got.Logprobs[o].Processed), "slot %d", o)
					assert.Equal(t, math.Float32bits(want.Logprobs[o].Raw), math.Float32bits(got.Logprobs[o].Raw), "slot %d", o)
				}
				assert.Equal(t, want.Top, got.Top, "%v %s %s: top log-probabilities are raw", gumbel, c.name, name)
			}
		}
	}
}

// TestBitmaskGreedyIsArgmaxOverAllowed: a greedy row with a mask takes the largest
// allowed logit (ties to the lowest index), whatever the masked-out tokens hold.
func TestBitmaskGreedyIsArgmaxOverAllowed(t *testing.T) {
	dev := openCPU(t)
	s := newSampler(t, dev, Options{Seed: 1, Split: On, Policy: &forcedSplit})
	const vocab = 300
	rng := rand.New(rand.NewPCG(8, 8))
	for trial := range 20 {
		logits := randomLogits(rng, 1, vocab, 3)
		var allowed []int32
		for tok := range int32(vocab) {
			if rng.IntN(4) == 0 {
				allowed = append(allowed, tok)
			}
		}
		if len(allowed) == 0 {
			allowed = []int32{0}
		}
		want := allowed[0]
		for _, tok := range allowed {
			if logits[tok] > logits[want] {
				want = tok
			}
		}
		var res Result
		require.NoError(t, s.SampleFloat32(logits, vocab, []Params{{Bitmask: maskOf(vocab, allowed...)}}, &res))
		require.NoError(t, res.Errs[0])
		assert.Equal(t, want, res.Tokens[0], "trial %d", trial)
	}
}

// TestBitmaskBitsPastVocabIgnored: a mask with every bit set, the bits past the
// vocabulary included, samples as a row without a mask.
func TestBitmaskBitsPastVocabIgnored(t *testing.T) {
	dev := openCPU(t)
	s := newSampler(t, dev, Options{Seed: 3})
	for _, vocab := range []int{1, 31, 33, 1000} {
		logits := randomLogits(rand.New(rand.NewPCG(uint64(vocab), 1)), 2, vocab, 2)
		all := make([]int32, maskWords(vocab))
		for i := range all {
			all[i] = -1
		}
		for _, p := range bitmaskParams {
			p.RepetitionPenalty, p.FrequencyPenalty = 0, 0
			var want, got Result
			require.NoError(t, s.SampleFloat32(logits, vocab, []Params{p, p}, &want))
			p.Bitmask = all
			require.NoError(t, s.SampleFloat32(logits, vocab, []Params{p, p}, &got))
			assert.Equal(t, want.Tokens, got.Tokens, "vocab %d %+v", vocab, p)
			assert.Equal(t, want.Logprobs, got.Logprobs, "vocab %d %+v", vocab, p)
		}
	}
}

// TestBitmaskErrors: a mask that does not fit fails its own row (ErrBitmask) or the
// call (ErrShape) with a clear error; a mask that allows no finite logit fails its row
// (ErrNoFiniteLogit); the other rows are served.
func TestBitmaskErrors(t *testing.T) {
	dev := openCPU(t)
	s := newSampler(t, dev, Options{Seed: 9})
	const vocab = 100
	logits := randomLogits(rand.New(rand.NewPCG(1, 2)), 3, vocab, 1)
	logits[2*vocab+7] = float32(math.Inf(-1))
	good := Params{Temperature: 1, Seed: 4}
	data := upload(t, dev, runtime.BytesOf(logits))
	lg := Logits{Data: data, DType: Float32, Rows: 3, Vocab: vocab}

	rowCases := []struct {
		name string
		mask []int32
		want error
	}{
		{"a word short", make([]int32, maskWords(vocab)-1), ErrBitmask},
		{"a word long", make([]int32, maskWords(vocab)+1), ErrBitmask},
		{"nothing allowed", make([]int32, maskWords(vocab)), ErrNoFiniteLogit},
		{"only a -Inf logit allowed", maskOf(vocab, 7), ErrNoFiniteLogit},
	}
	for _, c := range rowCases {
		var res Result
		bad := good
		bad.Bitmask = c.mask
		require.NoError(t, s.Sample(lg, []Params{good, good, bad}, &res), c.name)
		assert.ErrorIs(t, res.Errs[2], c.want, c.name)
		assert.Equal(t, int32(-1), res.Tokens[2], c.name)
		for i := range 2 {
			assert.NoError(t, res.Errs[i], c.name)
			assert.GreaterOrEqual(t, res.Tokens[i], int32(0), c.name)
		}
	}

	words := maskWords(vocab)
	masks := upload(t, dev, runtime.BytesOf(make([]int32, 2*words)))
	dm := func(edit func(m *Bitmask)) Logits {
		m := &Bitmask{Data: masks, Rows: 2, Words: words, Index: []int32{0, -1, 1}}
		edit(m)
		l := lg
		l.Bitmask = m
		return l
	}
	callCases := []struct {
		name string
		lg   Logits
		ps   []Params
	}{
		{"width not ceil(V/32)", dm(func(m *Bitmask) { m.Words = words + 1 }), []Params{good, good, good}},
		{"no buffer", dm(func(m *Bitmask) { m.Data = nil }), []Params{good, good, good}},
		{"buffer too short", dm(func(m *Bitmask) { m.Rows = 3 }), []Params{good, good, good}},
		{"offset past the rows", dm(func(m *Bitmask) { m.Offset = 4 }), []Params{good, good, good}},
		{"misaligned offset", dm(func(m *Bitmask) { m.Offset = 2; m.Rows = 1 }), []Params{good, good, good}},
		{"index too short", dm(func(m *Bitmask) { m.Index = m.Index[:2] }), []Params{good, good, good}},
		{"no index, rows differ", dm(func(m *Bitmask) { m.Index = nil }), []Params{good, good, good}},
		{"host and device masks", dm(func(*Bitmask) {}), []Params{good, {Temperature: 1, Bitmask: maskOf(vocab, 1)}, good}},
	}
	for _, c := range callCases {
		var res Result
		assert.ErrorIs(t, s.Sample(c.lg, c.ps, &res), ErrShape, c.name)
	}

	// An index entry outside the bitmask fails its row only.
	var res Result
	l := dm(func(m *Bitmask) { m.Index = []int32{-1, 2, -2} })
	require.NoError(t, s.Sample(l, []Params{good, good, good}, &res))
	assert.NoError(t, res.Errs[0])
	assert.ErrorIs(t, res.Errs[1], ErrBitmask)
	assert.ErrorIs(t, res.Errs[2], ErrBitmask)
}

// TestBatchBitmask: a Batch with device masks (SetBitmaskRow, Logits.Bitmask at each
// Launch) draws what Sample draws with the same masks, launch after launch, as the masks
// are rewritten in place between launches (a captured graph replays the same address)
// and rows are mapped and unmapped.
func TestBatchBitmask(t *testing.T) {
	dev := openCPU(t)
	const vocab, rows = 500, 4
	rng := rand.New(rand.NewPCG(3, 4))
	logits := randomLogits(rng, rows, vocab, 2)
	lg := Logits{Data: upload(t, dev, runtime.BytesOf(logits)), DType: Float32, Rows: rows, Vocab: vocab}
	words := maskWords(vocab)
	maskBuf, err := dev.Alloc(4 * 2 * words)
	require.NoError(t, err)
	t.Cleanup(func() { _ = maskBuf.Free() })
	st := dev.DefaultStream()

	bs := newSampler(t, dev, Options{Seed: 5, Split: On, Policy: &forcedSplit})
	ref := newSampler(t, dev, Options{Seed: 5, Split: On, Policy: &forcedSplit})
	b, err := bs.NewBatch(rows, vocab, Float32, 1)
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	params := []Params{{Temperature: 0}, {Temperature: 0.9, Seed: 2}, {Temperature: 1, Seed: 3, TopK: 20, TopP: 0.9}, {Temperature: 1.2, Seed: 4, MinP: 0.05}}
	mapping := []int{1, 0, -1, 1}
	for i, p := range params {
		require.NoError(t, b.SetBitmaskRow(i, mapping[i])) // before SetRow: kept for it
		require.NoError(t, b.SetRow(i, p))
	}
	launch := Logits{Data: lg.Data, DType: Float32, Rows: rows, Vocab: vocab,
		Bitmask: &Bitmask{Data: maskBuf, Rows: 2, Words: words}}
	for step := range 6 {
		if step == 3 {
			require.NoError(t, b.SetBitmaskRow(2, 0)) // after SetRow: the step on the device is kept
			require.NoError(t, b.SetBitmaskRow(3, -1))
			mapping[2], mapping[3] = 0, -1
		}
		m := [][]int32{maskOf(vocab, int32(step), int32(step+7), 100, 200), grammarMasks(rng, logits, vocab)[2]}
		require.NoError(t, st.CopyToDevice(maskBuf, 0, runtime.BytesOf(append(append([]int32{}, m[0]...), m[1]...))))
		require.NoError(t, b.Launch(launch))
		var got, want Result
		require.NoError(t, b.Read(&got))
		ps := make([]Params, rows)
		for i, p := range params {
			p.Step = uint64(step)
			if mapping[i] >= 0 {
				p.Bitmask = m[mapping[i]]
			}
			ps[i] = p
		}
		require.NoError(t, ref.Sample(lg, ps, &want))
		assert.Equal(t, want.Tokens, got.Tokens, "step %d", step)
		assert.Equal(t, want.Errs, got.Errs, "step %d", step)
	}

	plain := Logits{Data: lg.Data, DType: Float32, Rows: rows, Vocab: vocab}
	assert.ErrorIs(t, b.Launch(plain), ErrShape, "rows apply mask rows: the launch needs a bitmask")
	short := launch
	short.Bitmask = &Bitmask{Data: maskBuf, Rows: 1, Words: words}
	assert.ErrorIs(t, b.Launch(short), ErrShape, "row 0 applies mask row 1")
	indexed := launch
	indexed.Bitmask = &Bitmask{Data: maskBuf, Rows: 2, Words: words, Index: []int32{0, 0, 0, 0}}
	assert.ErrorIs(t, b.Launch(indexed), ErrShape, "a Batch maps rows with SetBitmaskRow")
	assert.ErrorIs(t, b.SetRow(0, Params{Bitmask: maskOf(vocab, 1)}), ErrBitmask, "a Batch takes no host masks")
	assert.ErrorIs(t, b.SetBitmaskRow(0, -2), ErrBitmask)
	assert.ErrorIs(t, b.SetBitmaskRow(rows, 0), ErrRow)
}
