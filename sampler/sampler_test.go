package sampler

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gumbel-go/gumbel/half"
	"github.com/gumbel-go/gumbel/philox"
	"github.com/gumbel-go/gumbel/runtime"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var (
	negInf = float32(math.Inf(-1))
	posInf = float32(math.Inf(1))
	nan    = float32(math.NaN())
)

func TestSampleMatchesReference(t *testing.T) {
	dev := openCPU(t)
	tests := []struct {
		vocab, rows int
		opts        Options
	}{
		{1, 10, Options{Seed: 1}},
		{2, 10, Options{Seed: 2}},
		{1000, 40, Options{Seed: 3}},
		{1000, 20, Options{Seed: 4, Policy: &forcedSplit, Split: On}},
		{bigVocab, 10, Options{Seed: 5}},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("V=%d", tc.vocab), func(t *testing.T) {
			s := newSampler(t, dev, tc.opts)
			rng := rand.New(rand.NewPCG(uint64(tc.vocab), 1))
			logits := randomLogits(rng, tc.rows, tc.vocab, 2)
			params := mixedParams(tc.rows, 3)
			var res Result
			require.NoError(t, s.SampleFloat32(logits, tc.vocab, params, &res))
			require.Len(t, res.Tokens, tc.rows)
			for i, p := range params {
				r := s.RouteFor(p, tc.vocab)
				want, status := refSample(logits[i*tc.vocab:(i+1)*tc.vocab], p, r, tc.opts.Seed)
				require.Zero(t, status)
				assert.NoError(t, res.Errs[i], "row %d", i)
				assert.Equal(t, r, res.Routes[i], "row %d", i)
				assert.Equal(t, want, res.Tokens[i], "row %d (%+v, %s)", i, p, r)
			}
		})
	}
}

func TestGreedyIsLowestIndexArgmax(t *testing.T) {
	dev := openCPU(t)
	far := make([]float32, bigVocab)
	for i := range far {
		far[i] = float32(i%1000) / 1000
	}
	far[100_000], far[150_000] = 7, 7
	tests := []struct {
		name string
		row  []float32
		want int32
	}{
		{"single", []float32{3}, 0},
		{"tie", []float32{1, 5, 5, 2}, 1},
		{"all equal", []float32{4, 4, 4, 4, 4, 4, 4}, 0},
		{"last", []float32{-1, -2, -3, 9}, 3},
		{"negative", []float32{-5, -3, -4, -3}, 1},
		{"-Inf around", []float32{negInf, negInf, 3, 3, negInf}, 2},
		{"largest finite", []float32{math.MaxFloat32, 0, math.MaxFloat32}, 0},
		{"far tie in a big row", far, 100_000},
	}
	type config struct {
		gumbel, split Switch
		policy        *SplitPolicy
		block         int
	}
	configs := []config{
		{On, On, nil, 0}, {Off, On, nil, 0}, {On, Off, nil, 0}, {Off, Off, nil, 0},
		{On, On, &forcedSplit, 0}, {Off, On, &forcedSplit, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			vocab := len(tc.row)
			var logits []float32
			params := []Params{
				{Temperature: 0},
				{Temperature: 0.8, TopK: 1, Seed: 3, HasSeed: true},
				{Temperature: 0, TopK: 5, TopP: 0.5, MinP: 0.5, Step: 4},
			}
			for range params {
				logits = append(logits, tc.row...)
			}
			for _, c := range configs {
				s := newSampler(t, dev, Options{Gumbel: c.gumbel, Split: c.split, Policy: c.policy, BlockSize: c.block})
				var res Result
				require.NoError(t, s.SampleFloat32(logits, vocab, params, &res))
				for i := range params {
					assert.NoError(t, res.Errs[i])
					assert.Equal(t, RouteGreedy, res.Routes[i])
					assert.Equal(t, tc.want, res.Tokens[i], "row %d, config %+v", i, c)
				}
			}
		})
	}
}

func TestSameSeedAndStepSameTokens(t *testing.T) {
	dev := openCPU(t)
	const vocab, rows = 1000, 40
	rng := rand.New(rand.NewPCG(7, 7))
	logits := randomLogits(rng, rows, vocab, 1)
	params := mixedParams(rows, 11)

	sample := func(s *Sampler, params []Params) []int32 {
		var res Result
		require.NoError(t, s.SampleFloat32(logits, vocab, params, &res))
		for _, err := range res.Errs {
			require.NoError(t, err)
		}
		return slices.Clone(res.Tokens)
	}
	s := newSampler(t, dev, Options{Seed: 9})
	first := sample(s, params)
	assert.Equal(t, first, sample(s, params), "same sampler, again")
	assert.Equal(t, first, sample(newSampler(t, dev, Options{Seed: 9}), params), "fresh sampler")

	next := slices.Clone(params)
	for i := range next {
		next[i].Step++
	}
	other := sample(s, next)
	changed := 0
	for i := range params {
		if s.RouteFor(params[i], vocab) == RouteGreedy {
			assert.Equal(t, first[i], other[i], "greedy row %d depends on the step", i)
		} else if first[i] != other[i] {
			changed++
		}
	}
	// 32 sampled rows over ~1000 live tokens: the chance that no token moves is nil.
	assert.Positive(t, changed, "no sampled row changed with the step")
}

func TestTokenIgnoresBatchAndLaunchShape(t *testing.T) {
	dev := openCPU(t)
	tests := []struct {
		vocab, rows int
	}{
		{bigVocab, 10},
		{3000, 60},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("V=%d", tc.vocab), func(t *testing.T) {
			v := tc.vocab
			rng := rand.New(rand.NewPCG(uint64(v), 3))
			logits := randomLogits(rng, tc.rows, v, 1.5)
			params := mixedParams(tc.rows, 5)
			want := sampleOne(t, newSampler(t, dev, Options{Seed: 77}), logits, v, params)

			// The batch reversed, and the batch twice over behind an unrelated row.
			reversed := make([]float32, len(logits))
			revParams := slices.Clone(params)
			slices.Reverse(revParams)
			for i := range tc.rows {
				copy(reversed[i*v:], logits[(tc.rows-1-i)*v:(tc.rows-i)*v])
			}
			doubled := append(randomLogits(rng, 1, v, 3), logits...)
			doubled = append(doubled, logits...)
			dParams := append([]Params{{Temperature: 1, Seed: 1, HasSeed: true}}, params...)
			dParams = append(dParams, params...)

			configs := []struct {
				name      string
				opts      Options
				positions bool // also check reversed and doubled batches
			}{
				{"default", Options{}, true},
				{"zero policy", Options{Policy: &SplitPolicy{}}, true},
				{"forced split", Options{Policy: &forcedSplit, Split: On}, true},
				{"odd split", Options{Policy: &SplitPolicy{TargetBlocks: 7, MinElementsPerBlock: 333}, Split: On}, true},
				{"capped split", Options{Policy: &SplitPolicy{TargetBlocks: 100, MinElementsPerBlock: 1, MaxBlocksPerRow: 3}, Split: On}, true},
				{"split off", Options{Policy: &forcedSplit, Split: Off}, true},
				{"block 1", Options{BlockSize: 1}, false},
				{"forced split, block 33", Options{Policy: &forcedSplit, Split: On, BlockSize: 33}, false},
			}
			for _, c := range configs {
				c.opts.Seed = 77
				s := newSampler(t, dev, c.opts)
				var res Result
				require.NoError(t, s.SampleFloat32(logits, v, params, &res))
				assert.Equal(t, want, res.Tokens, "batch, %s", c.name)
				if !c.positions {
					continue
				}
				require.NoError(t, s.SampleFloat32(reversed, v, revParams, &res))
				got := slices.Clone(res.Tokens)
				slices.Reverse(got)
				assert.Equal(t, want, got, "reversed, %s", c.name)
				require.NoError(t, s.SampleFloat32(doubled, v, dParams, &res))
				assert.Equal(t, want, res.Tokens[1:1+tc.rows], "doubled, first copy, %s", c.name)
				assert.Equal(t, want, res.Tokens[1+tc.rows:], "doubled, second copy, %s", c.name)
			}
		})
	}
}

func TestGumbelKillSwitch(t *testing.T) {
	dev := openCPU(t)
	const vocab, rows, seed = 500, 42, 21
	rng := rand.New(rand.NewPCG(5, 5))
	logits := randomLogits(rng, rows, vocab, 1)
	params := make([]Params, rows)
	for i := range params {
		params[i] = Params{Temperature: 0.5 + float32(i%4)/4, Seed: uint64(i), HasSeed: i%2 == 0, RequestID: uint64(i), Step: 2}
		if i%3 == 0 {
			params[i].TopK = vocab // off: still an unfiltered row
		}
		switch i % 7 {
		case 1:
			params[i].TopK = 30
		case 2:
			params[i].TopP = 0.8
		case 3:
			params[i].MinP = 0.1
		case 4:
			params[i].TopK, params[i].TopP, params[i].MinP = 60, 0.9, 0.05
		}
		if i%5 == 0 {
			params[i].Temperature = 0 // greedy rows stay greedy
		}
	}

	on := newSampler(t, dev, Options{Seed: seed, Gumbel: On})
	t.Setenv(EnvGumbel, "0")
	off := newSampler(t, dev, Options{Seed: seed})
	require.False(t, off.Settings().Gumbel, "MLXCEL_SAMPLING_GUMBEL=0 must turn Gumbel-max off")
	require.True(t, on.Settings().Gumbel)

	var resOn, resOff Result
	require.NoError(t, on.SampleFloat32(logits, vocab, params, &resOn))
	require.NoError(t, off.SampleFloat32(logits, vocab, params, &resOff))
	differ, filteredRows := 0, 0
	for i, p := range params {
		row := logits[i*vocab : (i+1)*vocab]
		require.NoError(t, resOn.Errs[i])
		require.NoError(t, resOff.Errs[i])
		if p.Temperature == 0 {
			assert.Equal(t, RouteGreedy, resOn.Routes[i])
			assert.Equal(t, RouteGreedy, resOff.Routes[i])
			assert.Equal(t, resOn.Tokens[i], resOff.Tokens[i], "greedy row %d", i)
			continue
		}
		s := rowSeed(seed, p)
		topK := refTopK(p, vocab)
		if topK != 0 || p.TopP != 0 || p.MinP != 0 {
			filteredRows++
			assert.Equal(t, RouteFiltered, resOn.Routes[i], "row %d", i)
			want, _ := refFiltered(row, p.Temperature, topK, p.TopP, p.MinP, s, p.Step)
			assert.Equal(t, want, resOn.Tokens[i], "row %d: Gumbel-max over the kept set", i)
		} else {
			assert.Equal(t, RouteGumbel, resOn.Routes[i], "row %d", i)
		}
		assert.Equal(t, RouteCategorical, resOff.Routes[i], "row %d", i)
		want, _ := refCategorical(row, p.Temperature, topK, p.TopP, p.MinP, s, p.Step)
		assert.Equal(t, want, resOff.Tokens[i], "row %d: the categorical stream with the row's filters", i)
		if resOn.Tokens[i] != resOff.Tokens[i] {
			differ++
		}
	}
	assert.GreaterOrEqual(t, filteredRows, 15)
	assert.Positive(t, differ, "the switch changed no stream: it did nothing")
}

func TestSplitSwitchFromEnv(t *testing.T) {
	dev := openCPU(t)
	t.Setenv(EnvSplit, "0")
	assert.False(t, newSampler(t, dev, Options{}).Settings().Split)
	assert.True(t, newSampler(t, dev, Options{Split: On}).Settings().Split)
	t.Setenv(EnvSplit, "1")
	assert.True(t, newSampler(t, dev, Options{}).Settings().Split)
	_, err := New(dev, Options{Split: Switch(5)})
	assert.Error(t, err)
	_, err = New(dev, Options{BlockSize: -1})
	assert.Error(t, err)
}

func TestSeedDerivedFromRequestID(t *testing.T) {
	dev := openCPU(t)
	const vocab, rows, samplerSeed = 800, 24, 0xC0FFEE
	rng := rand.New(rand.NewPCG(8, 8))
	logits := randomLogits(rng, rows, vocab, 1)
	derived := make([]Params, rows)
	explicit := make([]Params, rows)
	for i := range derived {
		p := Params{Temperature: 1, RequestID: uint64(1000 + i), Step: 6}
		if i%2 == 1 {
			p.TopP = 0.8
		}
		derived[i] = p
		p.Seed, p.HasSeed = philox.RowSeed(samplerSeed, p.RequestID), true
		explicit[i] = p
	}
	s := newSampler(t, dev, Options{Seed: samplerSeed})
	var a, b, c Result
	require.NoError(t, s.SampleFloat32(logits, vocab, derived, &a))
	require.NoError(t, s.SampleFloat32(logits, vocab, explicit, &b))
	assert.Equal(t, b.Tokens, a.Tokens, "RequestID without a seed must sample with RowSeed(sampler seed, id)")

	require.NoError(t, newSampler(t, dev, Options{Seed: samplerSeed + 1}).SampleFloat32(logits, vocab, derived, &c))
	assert.NotEqual(t, a.Tokens, c.Tokens, "the sampler seed had no effect")
	require.NoError(t, newSampler(t, dev, Options{Seed: samplerSeed + 1}).SampleFloat32(logits, vocab, explicit, &c))
	assert.Equal(t, b.Tokens, c.Tokens, "a row's own seed must not depend on the sampler seed")
}

func TestHalfPrecisionLogits(t *testing.T) {
	dev := openCPU(t)
	const vocab, rows = 2000, 20
	rng := rand.New(rand.NewPCG(9, 9))
	logits := randomLogits(rng, rows, vocab, 3)
	logits[5] = negInf
	params := mixedParams(rows, 1)
	s := newSampler(t, dev, Options{Seed: 3, Policy: &forcedSplit})
	tests := []struct {
		dtype  DType
		narrow func(float32) uint16
		widen  func(uint16) float32
	}{
		{Float16, half.Float16, half.Float16ToFloat32},
		{BFloat16, half.BFloat16, half.BFloat16ToFloat32},
	}
	for _, tc := range tests {
		t.Run(tc.dtype.String(), func(t *testing.T) {
			bits := make([]uint16, len(logits))
			wide := make([]float32, len(logits))
			for i, x := range logits {
				bits[i] = tc.narrow(x)
				wide[i] = tc.widen(bits[i])
			}
			var want, got Result
			require.NoError(t, s.SampleFloat32(wide, vocab, params, &want))
			require.NoError(t, s.SampleBits(bits, tc.dtype, vocab, params, &got))
			assert.Equal(t, want.Tokens, got.Tokens)
			assert.Equal(t, want.Errs, got.Errs)
			for i, p := range params {
				ref, _ := refSample(wide[i*vocab:(i+1)*vocab], p, s.RouteFor(p, vocab), 3)
				assert.Equal(t, ref, got.Tokens[i], "row %d against the reference", i)
			}
		})
	}
}

func TestLogitsOffsetAndStride(t *testing.T) {
	dev := openCPU(t)
	const vocab, rows, stride, lead = 1500, 12, 1511, 9
	rng := rand.New(rand.NewPCG(10, 10))
	logits := randomLogits(rng, rows, vocab, 2)
	params := mixedParams(rows, 4)
	s := newSampler(t, dev, Options{Seed: 8, Policy: &forcedSplit})
	var want Result
	require.NoError(t, s.SampleFloat32(logits, vocab, params, &want))

	for _, dt := range []DType{Float32, Float16, BFloat16} {
		t.Run(dt.String(), func(t *testing.T) {
			// NaN everywhere outside the matrix: a kernel that reads past a row, or
			// before the offset, reports the row as non-finite.
			n := lead + (rows-1)*stride + vocab + 5
			host := make([]float32, n)
			for i := range host {
				host[i] = nan
			}
			wide := make([]float32, len(logits))
			for r := range rows {
				for j := range vocab {
					x := logits[r*vocab+j]
					switch dt {
					case Float16:
						x = half.Float16ToFloat32(half.Float16(x))
					case BFloat16:
						x = half.BFloat16ToFloat32(half.BFloat16(x))
					}
					host[lead+r*stride+j], wide[r*vocab+j] = x, x
				}
			}
			var raw []byte
			switch dt {
			case Float32:
				raw = runtime.BytesOf(host)
			case Float16, BFloat16:
				b := make([]uint16, n)
				for i, x := range host {
					b[i] = half.Float16(x)
					if dt == BFloat16 {
						b[i] = half.BFloat16(x)
					}
				}
				raw = runtime.BytesOf(b)
			}
			buf := upload(t, dev, raw)
			var expect, got Result
			require.NoError(t, s.SampleFloat32(wide, vocab, params, &expect))
			lg := Logits{Data: buf, Offset: lead * dt.Size(), DType: dt, Rows: rows, Vocab: vocab, RowStride: stride}
			require.NoError(t, s.Sample(lg, params, &got))
			for i := range rows {
				assert.NoError(t, got.Errs[i], "row %d", i)
			}
			assert.Equal(t, expect.Tokens, got.Tokens)
			if dt == Float32 {
				assert.Equal(t, want.Tokens, got.Tokens)
			}
		})
	}
}

func TestBadLogitRows(t *testing.T) {
	dev := openCPU(t)
	const vocab = 3000
	rng := rand.New(rand.NewPCG(11, 11))
	type row struct {
		name    string
		poison  func([]float32)
		params  Params
		wantErr error
	}
	allNegInf := func(r []float32) {
		for i := range r {
			r[i] = negInf
		}
	}
	rowsSpec := []row{
		{"fine gumbel", nil, Params{Temperature: 1, Seed: 1, HasSeed: true}, nil},
		{"NaN gumbel", func(r []float32) { r[1234] = nan }, Params{Temperature: 1}, ErrNonFiniteLogit},
		{"+Inf greedy", func(r []float32) { r[vocab-1] = posInf }, Params{}, ErrNonFiniteLogit},
		{"all -Inf gumbel", allNegInf, Params{Temperature: 1}, ErrNoFiniteLogit},
		{"fine filtered", nil, Params{Temperature: 1, TopK: 20}, nil},
		{"NaN filtered", func(r []float32) { r[0] = nan }, Params{Temperature: 1, TopP: 0.5}, ErrNonFiniteLogit},
		{"+Inf filtered", func(r []float32) { r[10] = posInf }, Params{Temperature: 1, MinP: 0.5}, ErrNonFiniteLogit},
		{"all -Inf filtered", allNegInf, Params{Temperature: 1, TopK: 5}, ErrNoFiniteLogit},
		{"all -Inf but one, top-p", func(r []float32) { allNegInf(r); r[1500] = 3 }, Params{Temperature: 1, TopP: 0.3}, nil},
		{"all -Inf greedy", allNegInf, Params{}, ErrNoFiniteLogit},
		{"NaN and -Inf", func(r []float32) { allNegInf(r); r[7] = nan }, Params{Temperature: 1}, ErrNonFiniteLogit},
		{"one finite among -Inf", func(r []float32) { allNegInf(r); r[2999] = -1e30 }, Params{Temperature: 2}, nil},
		{"fine greedy", nil, Params{}, nil},
	}
	logits := randomLogits(rng, len(rowsSpec), vocab, 1)
	params := make([]Params, len(rowsSpec))
	for i, r := range rowsSpec {
		if r.poison != nil {
			r.poison(logits[i*vocab : (i+1)*vocab])
		}
		params[i] = r.params
		params[i].RequestID = uint64(i) + 1 // a stream the reference can reproduce
	}
	for _, opts := range []Options{{Seed: 4}, {Seed: 4, Policy: &forcedSplit}, {Seed: 4, Gumbel: Off}} {
		s := newSampler(t, dev, opts)
		var res Result
		require.NoError(t, s.SampleFloat32(logits, vocab, params, &res))
		for i, r := range rowsSpec {
			if r.wantErr != nil {
				assert.ErrorIs(t, res.Errs[i], r.wantErr, r.name)
				assert.Equal(t, int32(-1), res.Tokens[i], r.name)
				continue
			}
			require.NoError(t, res.Errs[i], r.name)
			assert.Equal(t, s.RouteFor(r.params, vocab), res.Routes[i], r.name)
			want, _ := refSample(logits[i*vocab:(i+1)*vocab], params[i], res.Routes[i], 4)
			assert.Equal(t, want, res.Tokens[i], r.name)
		}
		assert.Equal(t, int32(2999), res.Tokens[11], "the only finite logit must be drawn")
		assert.Equal(t, int32(1500), res.Tokens[8], "the only finite logit must be drawn, filters or not")
	}
}

func TestBadParamsAreRowErrors(t *testing.T) {
	dev := openCPU(t)
	const vocab = 400
	rng := rand.New(rand.NewPCG(12, 12))
	params := []Params{
		{Temperature: 1, Seed: 1, HasSeed: true},
		{Temperature: -1},
		{Temperature: nan},
		{Temperature: posInf},
		{Temperature: 1, TopK: -2},
		{Temperature: 1, TopK: 10, RequestID: 5},
		{Temperature: 1, TopP: 1.5},
		{Temperature: 1, TopP: nan},
		{Temperature: 1, MinP: -0.1},
		{Temperature: 1, MinP: 1.1},
		{Temperature: 0, TopP: 2},
		{},
	}
	wantErr := []error{nil, ErrTemperature, ErrTemperature, ErrTemperature, ErrTopK, nil, ErrTopP, ErrTopP, ErrMinP, ErrMinP, ErrTopP, nil}
	logits := randomLogits(rng, len(params), vocab, 1)
	s := newSampler(t, dev, Options{Seed: 1})
	res := Result{Tokens: make([]int32, 1), Errs: make([]error, 1)}
	require.NoError(t, s.SampleFloat32(logits, vocab, params, &res))
	require.Len(t, res.Tokens, len(params))
	for i, p := range params {
		if wantErr[i] != nil {
			assert.ErrorIs(t, res.Errs[i], wantErr[i], "row %d", i)
			assert.Equal(t, int32(-1), res.Tokens[i], "row %d", i)
			continue
		}
		require.NoError(t, res.Errs[i], "row %d", i)
		want, _ := refSample(logits[i*vocab:(i+1)*vocab], p, res.Routes[i], 1)
		assert.Equal(t, want, res.Tokens[i], "row %d", i)
	}

	// A batch with no good row launches nothing and still reports every row.
	var none Result
	require.NoError(t, s.SampleFloat32(logits[:2*vocab], vocab, params[1:3], &none))
	assert.Equal(t, []int32{-1, -1}, none.Tokens)
	assert.ErrorIs(t, none.Errs[0], ErrTemperature)
}

func TestCallErrors(t *testing.T) {
	dev := openCPU(t)
	s := newSampler(t, dev, Options{})
	buf := upload(t, dev, make([]byte, 4*100))
	one := []Params{{}}
	two := []Params{{}, {}}
	tests := []struct {
		name string
		call func(*Result) error
	}{
		{"rows against params", func(r *Result) error {
			return s.Sample(Logits{Data: buf, Rows: 2, Vocab: 10}, one, r)
		}},
		{"vocab 0", func(r *Result) error { return s.Sample(Logits{Data: buf, Rows: 1}, one, r) }},
		{"vocab 2^31", func(r *Result) error { return s.Sample(Logits{Data: buf, Rows: 1, Vocab: 1 << 31}, one, r) }},
		{"stride below vocab", func(r *Result) error {
			return s.Sample(Logits{Data: buf, Rows: 2, Vocab: 10, RowStride: 5}, two, r)
		}},
		{"buffer too small", func(r *Result) error { return s.Sample(Logits{Data: buf, Rows: 2, Vocab: 60}, two, r) }},
		{"stride overruns the buffer", func(r *Result) error {
			return s.Sample(Logits{Data: buf, Rows: 2, Vocab: 10, RowStride: 91}, two, r)
		}},
		{"nil buffer", func(r *Result) error { return s.Sample(Logits{Rows: 1, Vocab: 10}, one, r) }},
		{"nil result", func(*Result) error { return s.Sample(Logits{Data: buf, Rows: 1, Vocab: 10}, one, nil) }},
		{"host logits short", func(r *Result) error { return s.SampleFloat32(make([]float32, 19), 10, two, r) }},
		{"host logits long", func(r *Result) error { return s.SampleFloat32(make([]float32, 21), 10, two, r) }},
		{"host vocab 0", func(r *Result) error { return s.SampleFloat32(nil, 0, nil, r) }},
		{"host nil result", func(*Result) error { return s.SampleFloat32(make([]float32, 10), 10, one, nil) }},
		{"bits of float32", func(r *Result) error { return s.SampleBits(make([]uint16, 10), Float32, 10, one, r) }},
		{"bits short", func(r *Result) error { return s.SampleBits(make([]uint16, 9), Float16, 10, one, r) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := Result{Tokens: []int32{42}}
			err := tc.call(&res)
			assert.ErrorIs(t, err, ErrShape)
			assert.Equal(t, []int32{42}, res.Tokens, "a refused call must not touch the result")
		})
	}

	var res Result
	require.NoError(t, s.SampleFloat32(nil, 10, nil, &res), "an empty batch is no error")
	assert.Empty(t, res.Tokens)
}

func TestClosedSampler(t *testing.T) {
	dev := openCPU(t)
	s, err := New(dev, Options{})
	require.NoError(t, err)
	assert.Equal(t, dev, s.Device())
	buf := upload(t, dev, make([]byte, 40))
	var res Result
	require.NoError(t, s.SampleFloat32(make([]float32, 10), 10, []Params{{}}, &res))
	require.NoError(t, s.Close())
	assert.ErrorIs(t, s.Sample(Logits{Data: buf, Rows: 1, Vocab: 10}, []Params{{}}, &res), ErrClosed)
	assert.ErrorIs(t, s.SampleFloat32(make([]float32, 10), 10, []Params{{}}, &res), ErrClosed)
	assert.ErrorIs(t, s.SampleBits(make([]uint16, 10), Float16, 10, []Params{{}}, &res), ErrClosed)
	assert.NoError(t, s.Close(), "closing twice")
	_, err = New(nil, Options{})
	assert.Error(t, err)
}

func TestScratchGrowsAndIsReused(t *testing.T) {
	dev := openCPU(t)
	s := newSampler(t, dev, Options{Seed: 2, Policy: &forcedSplit})
	const vocab = 700
	rng := rand.New(rand.NewPCG(13, 13))
	big := randomLogits(rng, 64, vocab, 1)
	params := mixedParams(64, 0)
	want := sampleOne(t, newSampler(t, dev, Options{Seed: 2}), big, vocab, params)

	var res Result
	for _, n := range []int{1, 5, 64, 3, 64, 20} {
		require.NoError(t, s.SampleFloat32(big[:n*vocab], vocab, params[:n], &res))
		assert.Equal(t, want[:n], res.Tokens, "batch of %d", n)
		counters := runtime.HostBytes(s.scratch.counters.buf)
		require.NotNil(t, counters, "CPU device buffers have host memory")
		assert.Equal(t, make([]byte, len(counters)), counters, "kernels must leave the counters zero (batch of %d)", n)
	}
	before := [...]runtime.Buffer{s.scratch.params.buf, s.scratch.results.buf, s.scratch.partials.buf, s.scratch.counters.buf, s.scratch.logits.buf}
	tokens := &res.Tokens[0]
	for _, n := range []int{1, 64, 30} {
		require.NoError(t, s.SampleFloat32(big[:n*vocab], vocab, params[:n], &res))
		assert.Equal(t, want[:n], res.Tokens)
	}
	after := [...]runtime.Buffer{s.scratch.params.buf, s.scratch.results.buf, s.scratch.partials.buf, s.scratch.counters.buf, s.scratch.logits.buf}
	assert.Equal(t, before, after, "scratch reallocated for batches it already fitted")
	assert.Same(t, tokens, &res.Tokens[0], "result slices reallocated")
}

// recordingStream passes work to a stream and records what was queued.
type recordingStream struct {
	runtime.Stream
	launches          []string
	uploads, downs    int
	zeroes, syncs     int
	blocksPerRow, ys  []int
	blockThreadCounts []int
}

func (r *recordingStream) Launch(k runtime.Kernel, grid, block runtime.Dim3, a *runtime.Args) error {
	r.launches = append(r.launches, k.Name())
	r.blocksPerRow = append(r.blocksPerRow, grid.X)
	r.ys = append(r.ys, grid.Y)
	r.blockThreadCounts = append(r.blockThreadCounts, block.X)
	return r.Stream.Launch(k, grid, block, a)
}

func (r *recordingStream) CopyToDevice(dst runtime.Buffer, off int, src []byte) error {
	r.uploads++
	return r.Stream.CopyToDevice(dst, off, src)
}

func (r *recordingStream) CopyToHost(dst []byte, src runtime.Buffer, off int) error {
	r.downs++
	return r.Stream.CopyToHost(dst, src, off)
}

func (r *recordingStream) Zero(dst runtime.Buffer, off, n int) error {
	r.zeroes++
	return r.Stream.Zero(dst, off, n)
}

func (r *recordingStream) Synchronize() error {
	r.syncs++
	return r.Stream.Synchronize()
}

func TestLaunchPlan(t *testing.T) {
	dev := openCPU(t)
	const vocab = 40000
	policy := SplitPolicy{TargetBlocks: 12, MinElementsPerBlock: 5000}
	// Request ids give the rows streams the reference can reproduce.
	greedy, gumbel, topK := Params{}, Params{Temperature: 1, RequestID: 1}, Params{Temperature: 1, TopK: 9, RequestID: 2}
	topP, minP := Params{Temperature: 1, TopP: 0.5, RequestID: 3}, Params{Temperature: 0.7, MinP: 0.2, RequestID: 4}
	topKP := Params{Temperature: 1, TopK: 9, TopP: 0.5, RequestID: 5}
	tests := []struct {
		name       string
		params     []Params
		split      Switch
		gumbel     Switch
		wantLaunch []string
		wantX      []int
		wantY      []int
	}{
		{"greedy only", []Params{greedy, greedy, greedy}, On, On, []string{"gumbel_argmax_f32"}, []int{4}, []int{3}},
		{"gumbel and greedy share a launch", []Params{gumbel, greedy, gumbel, greedy}, On, On, []string{"gumbel_argmax_f32"}, []int{3}, []int{4}},
		// Top-k needs no row maximum: filtered alone, split like gumbel_argmax.
		{"filtered only", []Params{topK, topK}, On, On, []string{"filtered_f32"}, []int{6}, []int{2}},
		{"top-k and top-p: no filter_max", []Params{topKP, topKP, topK}, On, On, []string{"filtered_f32"}, []int{4}, []int{3}},
		// Top-p or min-p without top-k: filter_max first, over the filtered rows.
		{"top-p alone: filter_max first", []Params{topP, topP}, On, On, []string{"filter_max_f32", "filtered_f32"}, []int{6, 6}, []int{2, 2}},
		{"min-p alone: filter_max first", []Params{minP}, On, On, []string{"filter_max_f32", "filtered_f32"}, []int{8, 8}, []int{1, 1}},
		{"one row needs the maximum: filter_max spans the filtered rows", []Params{topK, gumbel, topP, topKP}, On, On,
			[]string{"gumbel_argmax_f32", "filter_max_f32", "filtered_f32"}, []int{8, 4, 4}, []int{1, 3, 3}},
		{"mixed: one launch per kernel", []Params{topK, gumbel, greedy, topK, gumbel, topK}, On, On,
			[]string{"gumbel_argmax_f32", "filtered_f32"}, []int{4, 4}, []int{3, 3}},
		{"split off", []Params{gumbel}, Off, On, []string{"gumbel_argmax_f32"}, []int{1}, []int{1}},
		{"split off, filtered", []Params{topP, topK}, Off, On, []string{"filter_max_f32", "filtered_f32"}, []int{1, 1}, []int{2, 2}},
		{"one row: capped by elements per block", []Params{gumbel}, On, On, []string{"gumbel_argmax_f32"}, []int{8}, []int{1}},
		// The kill switch: every sampled row, filtered or not, is categorical (one block
		// per row); filter_max and filtered are never launched.
		{"gumbel off: filtered rows are categorical", []Params{topK, topP, topKP, minP}, On, Off,
			[]string{"categorical_f32"}, []int{1}, []int{4}},
		{"gumbel off: mixed", []Params{topK, gumbel, greedy, topP, gumbel, minP}, On, Off,
			[]string{"gumbel_argmax_f32", "categorical_f32"}, []int{8, 1}, []int{1, 5}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recordingStream{Stream: dev.DefaultStream()}
			s := newSampler(t, dev, Options{Stream: rec, Policy: &policy, Split: tc.split, Gumbel: tc.gumbel, BlockSize: 64})
			logits := make([]float32, len(tc.params)*vocab)
			var res Result
			require.NoError(t, s.SampleFloat32(logits, vocab, tc.params, &res))
			*rec = recordingStream{Stream: rec.Stream}
			require.NoError(t, s.SampleFloat32(logits, vocab, tc.params, &res))
			assert.Equal(t, tc.wantLaunch, rec.launches)
			assert.Equal(t, tc.wantX, rec.blocksPerRow, "blocks per row")
			assert.Equal(t, tc.wantY, rec.ys, "rows per launch")
			for _, b := range rec.blockThreadCounts {
				assert.Equal(t, 64, b)
			}
			assert.Equal(t, 2, rec.uploads, "one logits upload and one parameter upload")
			assert.Equal(t, 1, rec.downs, "one copy of tokens and status")
			assert.Equal(t, 1, rec.syncs, "one wait")
			assert.Zero(t, rec.zeroes, "counters are zeroed only when allocated")
			for i, p := range tc.params {
				require.NoError(t, res.Errs[i])
				if p.Temperature == 0 {
					assert.Zero(t, res.Tokens[i], "all-zero logits: lowest index for greedy")
				}
				want, _ := refSample(logits[i*vocab:(i+1)*vocab], p, res.Routes[i], s.Settings().Seed)
				assert.Equal(t, want, res.Tokens[i], "row %d (%s)", i, res.Routes[i])
			}
		})
	}
}

func TestBatchLargerThanOneGrid(t *testing.T) {
	dev := openCPU(t)
	const vocab, rows = 3, maxRowsPerLaunch + 2000
	logits := make([]float32, rows*vocab)
	params := make([]Params, rows)
	filtered, sampled := 0, 0
	for i := range params {
		logits[i*vocab+i%vocab] = 1 // greedy token i%3
		params[i] = Params{Temperature: float32(i % 2), Seed: uint64(i), HasSeed: true}
		switch {
		case i%97 == 1:
			params[i].TopK = 2
		case i%89 == 3:
			params[i].TopP = 0.4 // needs the row maximum: filter_max runs
		}
		if i%2 == 1 { // greedy rows stay greedy
			sampled++
			if params[i].TopK != 0 || params[i].TopP != 0 {
				filtered++
			}
		}
	}
	for _, tc := range []struct {
		name   string
		gumbel Switch
		want   []string
		ys     []int
	}{
		{"gumbel on", On, []string{"gumbel_argmax_f32", "gumbel_argmax_f32", "filter_max_f32", "filtered_f32"},
			[]int{maxRowsPerLaunch, rows - filtered - maxRowsPerLaunch, filtered, filtered}},
		// Every sampled row is categorical: the greedy rows alone are gumbel_argmax's.
		{"gumbel off", Off, []string{"gumbel_argmax_f32", "categorical_f32"}, []int{rows - sampled, sampled}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recordingStream{Stream: dev.DefaultStream()}
			s := newSampler(t, dev, Options{Stream: rec, Seed: 6, Gumbel: tc.gumbel})
			var res Result
			require.NoError(t, s.SampleFloat32(logits, vocab, params, &res))
			assert.Equal(t, tc.want, rec.launches)
			assert.Equal(t, tc.ys, rec.ys)
			for i := range rows {
				require.NoError(t, res.Errs[i])
				if params[i].Temperature == 0 {
					require.Equal(t, int32(i%vocab), res.Tokens[i], "row %d", i)
				}
			}
			for _, i := range []int{1, 3, 7, 9, 98, 181, 65534, 65535, 65536, 65573, 65685, 66000, rows - 1} {
				want, _ := refSample(logits[i*vocab:(i+1)*vocab], params[i], res.Routes[i], 6)
				assert.Equal(t, want, res.Tokens[i], "row %d (%s)", i, res.Routes[i])
			}
		})
	}
}

func TestRelaunchRepeatsLastCall(t *testing.T) {
	dev := openCPU(t)
	s, err := New(dev, Options{Seed: 3})
	require.NoError(t, err)
	require.Error(t, s.Relaunch(), "nothing to repeat yet")

	const vocab = 5000
	logits := make([]float32, 2*vocab)
	for i := range logits {
		logits[i] = float32(i%97) / 10
	}
	params := []Params{{Temperature: 1, Seed: 1, HasSeed: true}, {Temperature: 0.8, TopK: 20, Seed: 2, HasSeed: true}}
	var res Result
	require.NoError(t, s.SampleFloat32(logits, vocab, params, &res))
	want := append([]int32(nil), res.Tokens...)
	for range 3 {
		require.NoError(t, s.Relaunch())
	}
	require.NoError(t, s.Stream().Synchronize())
	// The next call with the same inputs still gives the same tokens: Relaunch left the
	// counters at zero.
	require.NoError(t, s.SampleFloat32(logits, vocab, params, &res))
	assert.Equal(t, want, res.Tokens)
	require.NoError(t, s.Close())
	assert.ErrorIs(t, s.Relaunch(), ErrClosed)
}

// TestSampleExactScoreRows: rows whose winning scores reach ±4032 (kernelsrc/ABI.md,
// "Exact scores") come back finished, on every route that reaches gumbel_exact: a greedy
// row of huge logits keeps its arg-max, a huge flat Gumbel row draws every token, and a
// tracked row counts each token once.
func TestSampleExactScoreRows(t *testing.T) {
	dev := openCPU(t)
	const vocab = 64
	s := newSampler(t, dev, Options{Seed: 9})
	logits := make([]float32, 2*vocab)
	for i := range vocab {
		logits[i] = -1e9 + float32(i%7)*128 // greedy: the last index of the largest value's first run
		logits[vocab+i] = 1e7               // Gumbel: the noise alone decides
	}
	require.NoError(t, s.TrackTokens(0, vocab, nil))
	require.NoError(t, s.TrackTokens(1, vocab, nil))
	params := []Params{{Temperature: 0}, {Temperature: 1, Seed: 1, HasSeed: true}}
	seen := map[int32]bool{}
	const steps = 400
	var res Result
	for k := range steps {
		params[1].Step = uint64(k)
		require.NoError(t, s.SampleFloat32(logits, vocab, params, &res))
		require.NoError(t, res.Errs[0])
		require.NoError(t, res.Errs[1])
		require.Equal(t, int32(6), res.Tokens[0], "step %d: greedy picks the first largest logit", k)
		seen[res.Tokens[1]] = true
	}
	assert.Len(t, seen, vocab, "a flat row of 1e7 draws every token in %d steps", steps)
	counts := make([]uint32, vocab)
	for row, want := range []uint32{steps, steps} {
		require.NoError(t, s.TokenCounts(row, counts))
		var total uint32
		for _, c := range counts {
			total += c
		}
		assert.Equal(t, want, total, "row %d counts every step's token once", row)
	}
}
