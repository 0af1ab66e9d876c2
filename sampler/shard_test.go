package sampler

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/gumbel-go/gumbel/collective"
	"github.com/gumbel-go/gumbel/runtime"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// shardRun is one call of SampleShard on every rank, each on its own sampler, in
// goroutines as ranks run; bounds[r] is rank r's first token (bounds[len-1] = V).
type shardRun struct {
	samplers []*Sampler
	comms    []collective.Comm
	bounds   []int
}

func newShardRun(t *testing.T, dev runtime.Device, bounds []int, opts Options) *shardRun {
	t.Helper()
	comms, err := collective.NewLocal(len(bounds) - 1)
	require.NoError(t, err)
	run := &shardRun{comms: comms, bounds: bounds}
	for range comms {
		run.samplers = append(run.samplers, newSampler(t, dev, opts))
	}
	t.Cleanup(func() {
		for _, c := range comms {
			_ = c.Close()
		}
	})
	return run
}

// deviceMerge hides the in-process group's host merge, so that the sampler merges through
// the device buffers as it does with NCCL.
type deviceMerge struct{ collective.Comm }

// onDevice makes the run's ranks merge through the device (deviceMerge).
func (run *shardRun) onDevice() *shardRun {
	for i, c := range run.comms {
		run.comms[i] = deviceMerge{c}
	}
	return run
}

// sample runs one SampleShard on every rank over the rows of logits (rows x V, host)
// and returns each rank's result and error; params(r) gives rank r's params.
func (run *shardRun) sample(t *testing.T, dev runtime.Device, logits []float32, vocab int, params func(r int) []Params) ([]Result, []error) {
	t.Helper()
	ranks := len(run.comms)
	rows := len(logits) / vocab
	res, errs := make([]Result, ranks), make([]error, ranks)
	bufs := make([]runtime.Buffer, ranks)
	for r := range ranks {
		lo, hi := run.bounds[r], run.bounds[r+1]
		part := make([]float32, 0, rows*(hi-lo))
		for i := range rows {
			part = append(part, logits[i*vocab+lo:i*vocab+hi]...)
		}
		bufs[r] = upload(t, dev, runtime.BytesOf(part))
	}
	var wg sync.WaitGroup
	for r := range ranks {
		wg.Go(func() {
			lo, hi := run.bounds[r], run.bounds[r+1]
			lg := Logits{Data: bufs[r], DType: Float32, Rows: rows, Vocab: hi - lo}
			errs[r] = run.samplers[r].SampleShard(lg, params(r), Shard{Offset: lo, Global: vocab, Comm: run.comms[r]}, &res[r])
		})
	}
	wg.Wait()
	return res, errs
}

// TestSampleShardMatchesWholeVocabulary: greedy and Gumbel-max rows sampled shard by
// shard and merged give, on every rank, the tokens of the whole vocabulary, for one to
// four shards, even and uneven splits, several blocks per row, grammar bitmasks and rows
// whose finite logits all sit in one shard.
func TestSampleShardMatchesWholeVocabulary(t *testing.T) {
	dev := openCPU(t)
	const vocab, rows = 4099, 9
	tests := shardSplits(vocab)
	rng := rand.New(rand.NewPCG(41, 41))
	logits := randomLogits(rng, rows, vocab, 3)
	// Row 7 has finite logits only in the last 100 tokens; row 8 is flat (ties across
	// shards go to the lowest index, as in one piece).
	for i := range vocab - 100 {
		logits[7*vocab+i] = float32(math.Inf(-1))
	}
	for i := range vocab {
		logits[8*vocab+i] = 1
	}
	params := make([]Params, rows)
	for i := range params {
		params[i] = Params{Temperature: []float32{0, 0.7, 1, 1.5}[i%4], Seed: uint64(100 + i), HasSeed: true, Step: uint64(i)}
	}
	params[8].Temperature = 0
	// A grammar's bitmask on row 3 (every fifth token allowed).
	mask := make([]int32, (vocab+31)/32)
	for j := 0; j < vocab; j += 5 {
		mask[j/32] |= 1 << (j % 32)
	}
	whole := newSampler(t, dev, Options{})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for step := range uint64(3) {
				want := make([]Params, rows)
				copy(want, params)
				for i := range want {
					want[i].Step += step * 10
				}
				want[3].Bitmask = mask
				var ref Result
				require.NoError(t, whole.SampleFloat32(logits, vocab, want, &ref))
				run := newShardRun(t, dev, tc.bounds, tc.opts)
				if tc.onDevice {
					run.onDevice()
				}
				res, errs := run.sample(t, dev, logits, vocab, func(r int) []Params {
					ps := make([]Params, rows)
					copy(ps, want)
					ps[3].Bitmask = shardMask(mask, tc.bounds[r], tc.bounds[r+1])
					return ps
				})
				for r := range res {
					require.NoError(t, errs[r], "rank %d", r)
					assert.Equal(t, ref.Tokens, res[r].Tokens, "rank %d, step %d", r, step)
					for i, err := range res[r].Errs {
						assert.NoError(t, err, "rank %d row %d", r, i)
					}
				}
			}
		})
	}
}

// shardSplit is one way to split a vocabulary across ranks in the shard tests.
type shardSplit struct {
	name     string
	bounds   []int // rank r holds tokens [bounds[r], bounds[r+1])
	opts     Options
	onDevice bool // merged through the device buffers, as with NCCL
}

// shardSplits are the splits the shard tests try for a vocabulary of vocab tokens: one
// shard, uneven halves, three with a 4-token shard, quarters with several blocks per
// row, and halves merged through the device.
func shardSplits(vocab int) []shardSplit {
	at := func(num, den int) int { return vocab * num / den &^ 3 }
	return []shardSplit{
		{"one shard", []int{0, vocab}, Options{}, false},
		{"two uneven", []int{0, at(2, 5), vocab}, Options{}, false},
		{"three, a tiny one", []int{0, 4, at(4, 7), vocab}, Options{}, false},
		{"four, split blocks", []int{0, at(1, 4), at(2, 4), at(3, 4), vocab}, Options{Policy: &forcedSplit}, false},
		{"two, merged on the device", []int{0, at(1, 2), vocab}, Options{}, true},
	}
}

// shardMask is the bitmask of tokens [lo, hi) of a whole-vocabulary bitmask, as a
// shard's own (ceil((hi-lo)/32) words).
func shardMask(mask []int32, lo, hi int) []int32 {
	out := make([]int32, (hi-lo+31)/32)
	for j := lo; j < hi; j++ {
		if mask[j/32]>>(j%32)&1 != 0 {
			out[(j-lo)/32] |= 1 << ((j - lo) % 32)
		}
	}
	return out
}

// TestSampleShardRowErrors: what a shard cannot serve is a row error on every rank,
// the other rows are served, and a row whose NaN sits in one shard fails on every rank.
func TestSampleShardRowErrors(t *testing.T) {
	dev := openCPU(t)
	const vocab = 1000
	rng := rand.New(rand.NewPCG(42, 42))
	params := []Params{
		{Temperature: 0.8, Seed: 1, HasSeed: true},                 // served
		{Temperature: 0.8, TopK: 50, Seed: 2, HasSeed: true},       // filtered: served
		{Temperature: 0.8, Seed: 3, HasSeed: true, TopLogprobs: 2}, // served, with top log-probabilities
		{Temperature: 0.8},                         // no seed, no request id
		{Temperature: 0.8, RequestID: 9},           // served: keyed by request id
		{Temperature: 0, TopLogprobs: 3},           // served, with top log-probabilities
		{Temperature: 0.8, Seed: 4, HasSeed: true}, // NaN in shard 1
		{Temperature: -1, Seed: 5, HasSeed: true},  // bad temperature
		{Temperature: 0.8, Seed: 6, HasSeed: true}, // a mask of the wrong width on rank 0 only
	}
	logits := randomLogits(rng, len(params), vocab, 2)
	logits[6*vocab+700] = float32(math.NaN())
	run := newShardRun(t, dev, []int{0, 500, vocab}, Options{Seed: 77})
	res, errs := run.sample(t, dev, logits, vocab, func(r int) []Params {
		ps := append([]Params(nil), params...)
		if r == 0 {
			ps[8].Bitmask = []int32{1}
		}
		return ps
	})
	whole := newSampler(t, dev, Options{Seed: 77})
	var ref Result
	require.NoError(t, whole.SampleFloat32(logits[:2*vocab], vocab, params[:2], &ref))
	for r := range res {
		require.NoError(t, errs[r])
		e := res[r].Errs
		assert.NoError(t, e[0])
		assert.Equal(t, ref.Tokens[0], res[r].Tokens[0], "rank %d: the served row", r)
		assert.NoError(t, e[4])
		assert.NoError(t, e[2])
		assert.NoError(t, e[5])
		assert.NoError(t, e[1])
		assert.Equal(t, ref.Tokens[1], res[r].Tokens[1], "rank %d: the filtered row", r)
		assert.ErrorIs(t, e[3], ErrShard, "rank %d row 3", r)
		assert.Equal(t, int32(-1), res[r].Tokens[3])
		assert.ErrorIs(t, e[6], ErrNonFiniteLogit, "rank %d", r)
		assert.ErrorIs(t, e[7], ErrTemperature, "rank %d", r)
		assert.Equal(t, int32(-1), res[r].Tokens[8])
	}
	assert.ErrorIs(t, res[0].Errs[8], ErrBitmask, "the rank whose mask does not fit")
	assert.ErrorIs(t, res[1].Errs[8], ErrKernelRejected, "the other rank: the row failed elsewhere")
	assert.Equal(t, res[0].Tokens[4], res[1].Tokens[4], "every rank gets the same token")
}

// TestSampleShardCallErrors: a Shard that does not fit is refused before any merge.
func TestSampleShardCallErrors(t *testing.T) {
	dev := openCPU(t)
	s := newSampler(t, dev, Options{})
	comms, err := collective.NewLocal(1)
	require.NoError(t, err)
	defer comms[0].Close()
	lg := Logits{Data: upload(t, dev, make([]byte, 4*100)), DType: Float32, Rows: 1, Vocab: 100}
	params := []Params{{Temperature: 1, Seed: 1, HasSeed: true}}
	for _, sh := range []Shard{
		{Offset: 0, Global: 100},                 // no communicator
		{Offset: 2, Global: 200, Comm: comms[0]}, // not a multiple of 4
		{Offset: -4, Global: 200, Comm: comms[0]},
		{Offset: 4, Global: 100, Comm: comms[0]}, // past the vocabulary
		{Offset: 0, Global: 1 << 31, Comm: comms[0]},
	} {
		var res Result
		assert.ErrorIs(t, s.SampleShard(lg, params, sh, &res), ErrShard, "%+v", sh)
	}
}

// TestSampleShardAllocatesNothing: a steady-state shard call, log-probabilities and a
// filtered row's rounds included, allocates nothing (nor does the in-process merge).
func TestSampleShardAllocatesNothing(t *testing.T) {
	dev := openCPU(t)
	s := newSampler(t, dev, Options{})
	comms, err := collective.NewLocal(1)
	require.NoError(t, err)
	defer comms[0].Close()
	const vocab = 4096
	lg := Logits{Data: upload(t, dev, runtime.BytesOf(randomLogits(rand.New(rand.NewPCG(1, 2)), 4, vocab, 2))),
		DType: Float32, Rows: 4, Vocab: vocab}
	params := []Params{{Temperature: 1, Seed: 1, HasSeed: true, Logprobs: true}, {Temperature: 0, TopLogprobs: 5},
		{Temperature: 0.5, RequestID: 3}, {Temperature: 2, Seed: 4, HasSeed: true, TopK: 40, TopP: 0.9, Logprobs: true}}
	sh := Shard{Offset: 0, Global: vocab, Comm: comms[0]}
	var res Result
	require.NoError(t, s.SampleShard(lg, params, sh, &res))
	assert.Zero(t, testing.AllocsPerRun(20, func() { _ = s.SampleShard(lg, params, sh, &res) }))
}

// TestSampleShardLogprobs: the log-probability records of shard rows, merged across
// ranks, agree with the whole vocabulary's to float32 rounding, on greedy and Gumbel
// rows, with a bitmask row and a row whose finite logits sit in one shard.
func TestSampleShardLogprobs(t *testing.T) {
	dev := openCPU(t)
	const vocab, rows = 3001, 6
	logits := randomLogits(rand.New(rand.NewPCG(44, 44)), rows, vocab, 3)
	for i := range vocab - 50 {
		logits[5*vocab+i] = float32(math.Inf(-1))
	}
	params := make([]Params, rows)
	for i := range params {
		params[i] = Params{Temperature: []float32{0, 0.7, 1, 1.4}[i%4], Seed: uint64(7 + i), HasSeed: true, Logprobs: i != 4}
	}
	mask := make([]int32, (vocab+31)/32)
	for j := 0; j < vocab; j += 3 {
		mask[j/32] |= 1 << (j % 32)
	}
	params[2].Bitmask = mask
	whole := newSampler(t, dev, Options{})
	var ref Result
	require.NoError(t, whole.SampleFloat32(logits, vocab, params, &ref))
	for k, bounds := range [][]int{{0, vocab}, {0, 1500, vocab}, {0, 8, 2000, vocab}, {0, 1500, vocab}} {
		run := newShardRun(t, dev, bounds, Options{})
		if k == 3 {
			run.onDevice() // the same split, merged through the device
		}
		res, errs := run.sample(t, dev, logits, vocab, func(r int) []Params {
			ps := append([]Params(nil), params...)
			ps[2].Bitmask = shardMask(mask, bounds[r], bounds[r+1])
			return ps
		})
		for r := range res {
			require.NoError(t, errs[r])
			require.Equal(t, ref.Tokens, res[r].Tokens, "%d shards, rank %d", len(bounds)-1, r)
			for i, p := range params {
				require.NoError(t, res[r].Errs[i])
				if !p.Logprobs {
					continue
				}
				want, got := ref.Logprobs[i], res[r].Logprobs[i]
				for _, pair := range [][2]float32{{want.Raw, got.Raw}, {want.Processed, got.Processed},
					{want.RawLSE, got.RawLSE}, {want.ProcessedLSE, got.ProcessedLSE}} {
					assert.InDelta(t, pair[0], pair[1], 1e-5*math.Max(1, math.Abs(float64(pair[0]))),
						"%d shards, rank %d, row %d: %+v against %+v", len(bounds)-1, r, i, got, want)
				}
			}
		}
	}
}

// TestSampleShardExactRows: a row whose scores need the exact comparison (a constant row
// of 1e7 at T = 1), Gumbel-max or filtered, has no token on shards, on any rank, and says
// why; the other rows are served.
func TestSampleShardExactRows(t *testing.T) {
	dev := openCPU(t)
	const vocab = 512
	logits := randomLogits(rand.New(rand.NewPCG(43, 43)), 2, vocab, 2)
	for i := range vocab {
		logits[vocab+i] = 1e7
	}
	params := []Params{{Temperature: 1, Seed: 1, HasSeed: true}, {Temperature: 1, Seed: 2, HasSeed: true},
		{Temperature: 1, Seed: 3, HasSeed: true, TopK: 5}} // filtered: every tie is kept
	logits = append(logits, logits[vocab:]...)
	run := newShardRun(t, dev, []int{0, 256, vocab}, Options{})
	res, errs := run.sample(t, dev, logits, vocab, func(int) []Params { return params })
	for r := range res {
		require.NoError(t, errs[r])
		assert.NoError(t, res[r].Errs[0], "rank %d", r)
		for _, i := range []int{1, 2} {
			assert.ErrorIs(t, res[r].Errs[i], ErrShard, "rank %d row %d", r, i)
			assert.ErrorContains(t, res[r].Errs[i], "exact comparison", "rank %d row %d", r, i)
		}
	}
	assert.Equal(t, res[0].Tokens[0], res[1].Tokens[0])
}

// TestSampleShardTopLogprobs: the merged top lists are the whole vocabulary's: the same
// tokens in the same order (ties across shards in index order), values to float32
// rounding, fewer entries where the row has fewer finite logits, for two to four shards,
// merged on the host and through the device.
func TestSampleShardTopLogprobs(t *testing.T) {
	dev := openCPU(t)
	const vocab, rows = 3001, 4
	rng := rand.New(rand.NewPCG(47, 47))
	logits := randomLogits(rng, rows, vocab, 3)
	for i := range vocab {
		logits[vocab+i] = 2                   // row 1: every logit tied
		if i != 5 && i != 2000 && i != 2999 { // row 2: three finite logits, in two shards
			logits[2*vocab+i] = float32(math.Inf(-1))
		}
	}
	params := []Params{
		{Temperature: 0.8, Seed: 1, HasSeed: true, TopLogprobs: 20, Logprobs: true},
		{Temperature: 0, TopLogprobs: 7},
		{Temperature: 1, Seed: 3, HasSeed: true, TopLogprobs: 5},
		{Temperature: 0},
	}
	var want Result
	require.NoError(t, newSampler(t, dev, Options{}).SampleFloat32(logits, vocab, params, &want))
	for _, tc := range []struct {
		bounds   []int
		onDevice bool
	}{{[]int{0, 1500, vocab}, false}, {[]int{0, 4, 1000, 2004, vocab}, false}, {[]int{0, 1500, vocab}, true}} {
		run := newShardRun(t, dev, tc.bounds, Options{})
		if tc.onDevice {
			run.onDevice()
		}
		res, errs := run.sample(t, dev, logits, vocab, func(int) []Params { return params })
		for r := range res {
			require.NoError(t, errs[r])
			assert.Equal(t, want.Tokens, res[r].Tokens, "bounds %v rank %d", tc.bounds, r)
			for i, p := range params {
				require.NoError(t, res[r].Errs[i], "bounds %v rank %d row %d", tc.bounds, r, i)
				got, w := res[r].Top[i], want.Top[i]
				require.Equal(t, w.Count, got.Count, "bounds %v rank %d row %d", tc.bounds, r, i)
				assert.Equal(t, w.Tokens[:w.Count], got.Tokens[:got.Count], "bounds %v rank %d row %d", tc.bounds, r, i)
				for j := range w.Count {
					assert.InDelta(t, w.Logprobs[j], got.Logprobs[j], 2e-5*max(1, math.Abs(float64(w.Logprobs[j]))),
						"bounds %v rank %d row %d entry %d", tc.bounds, r, i, j)
				}
				if p.TopLogprobs == 0 {
					assert.Zero(t, got.Count)
				}
			}
		}
	}
	assert.Equal(t, 3, want.Top[2].Count, "row 2 has three finite logits")
}

// TestSampleShardFilteredMatchesWholeVocabulary: top-k, top-p and min-p rows, alone and
// together, sampled shard by shard (the selection rounds of shard_select) give on every
// rank the tokens of the whole vocabulary, and log-probability records that agree with
// its own to float32 rounding: for one to four shards, even and uneven splits, a top-k
// above a shard's size, ties at the k-th value across shards, min-p at 1 and below the
// weights' cut-off, bitmasks, and several steps.
func TestSampleShardFilteredMatchesWholeVocabulary(t *testing.T) {
	dev := openCPU(t)
	const vocab = 3001
	tiny := float32(1e-30)
	params := []Params{
		{Temperature: 0.7, TopK: 50},
		{Temperature: 1, TopP: 0.9},
		{Temperature: 0.6, MinP: 0.05},
		{Temperature: 0.7, TopK: 20, TopP: 0.8},
		{Temperature: 1, TopK: 40, TopP: 0.95, MinP: 0.02},
		{Temperature: 1.3, TopK: 2000},     // more than one shard holds
		{Temperature: 1, TopK: 7},          // row 6: flat, ties at the k-th value everywhere
		{Temperature: 1, TopP: 0.3},        // row 7: a few finite logits in two shards
		{Temperature: 0.9, MinP: 1},        // only the largest logits
		{Temperature: 1, MinP: tiny},       // below the fixed-point cut-off
		{Temperature: 0.5, TopP: 0.999},    // a bitmask row
		{Temperature: 2, TopK: 3000},       // top-k just below V
		{Temperature: 0.05, TopP: 0.5},     // sharp
		{Temperature: 0, TopK: 50},         // greedy with a filter
		{Temperature: 1, TopK: 5, MinP: 1}, // row 14: flat, min-p at 1 keeps every tie
	}
	rows := len(params)
	rng := rand.New(rand.NewPCG(48, 48))
	logits := randomLogits(rng, rows, vocab, 3)
	for i := range vocab {
		logits[6*vocab+i] = float32(i % 3) // ties: 1000 elements at the top value
		logits[14*vocab+i] = 1
		if i != 3 && i != 1700 && i != 1701 && i != 2999 {
			logits[7*vocab+i] = float32(math.Inf(-1))
		}
	}
	mask := make([]int32, (vocab+31)/32)
	for j := 1; j < vocab; j += 7 {
		mask[j/32] |= 1 << (j % 32)
	}
	for i := range params {
		params[i].Seed, params[i].HasSeed, params[i].Logprobs = uint64(300+i), true, i%2 == 0
	}
	whole := newSampler(t, dev, Options{})
	tests := shardSplits(vocab)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			run := newShardRun(t, dev, tc.bounds, tc.opts)
			if tc.onDevice {
				run.onDevice()
			}
			for step := range uint64(3) {
				want := append([]Params(nil), params...)
				for i := range want {
					want[i].Step = step*7 + uint64(i)
				}
				want[10].Bitmask = mask
				var ref Result
				require.NoError(t, whole.SampleFloat32(logits, vocab, want, &ref))
				res, errs := run.sample(t, dev, logits, vocab, func(r int) []Params {
					ps := append([]Params(nil), want...)
					ps[10].Bitmask = shardMask(mask, tc.bounds[r], tc.bounds[r+1])
					return ps
				})
				for r := range res {
					require.NoError(t, errs[r], "rank %d", r)
					for i, p := range want {
						require.NoError(t, res[r].Errs[i], "rank %d row %d", r, i)
						require.Equal(t, ref.Tokens[i], res[r].Tokens[i], "rank %d row %d step %d", r, i, step)
						if !p.Logprobs {
							continue
						}
						w, g := ref.Logprobs[i], res[r].Logprobs[i]
						for _, pair := range [][2]float32{{w.Raw, g.Raw}, {w.Processed, g.Processed},
							{w.RawLSE, g.RawLSE}, {w.ProcessedLSE, g.ProcessedLSE}} {
							assert.InDelta(t, pair[0], pair[1], 2e-5*math.Max(1, math.Abs(float64(w.ProcessedLSE))),
								"rank %d row %d: %+v against %+v", r, i, g, w)
						}
					}
				}
			}
		})
	}
}

// TestSampleShardFilteredSteps: a top-k + top-p row drawn over two shards for many steps
// lands only on its kept set, with the whole vocabulary's tokens at every step: the
// rounds serve a decode loop, not one lucky step.
func TestSampleShardFilteredSteps(t *testing.T) {
	dev := openCPU(t)
	const vocab = 1000
	logits := randomLogits(rand.New(rand.NewPCG(49, 49)), 1, vocab, 2)
	p := Params{Temperature: 1, TopK: 30, TopP: 0.9, Seed: 11, HasSeed: true}
	whole := newSampler(t, dev, Options{})
	run := newShardRun(t, dev, []int{0, 500, vocab}, Options{})
	order := make([]int, vocab)
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(logits[b], logits[a]) })
	top := map[int32]bool{}
	for _, i := range order[:30] {
		top[int32(i)] = true
	}
	seen := map[int32]bool{}
	for step := range uint64(200) {
		p.Step = step
		var ref Result
		require.NoError(t, whole.SampleFloat32(logits, vocab, []Params{p}, &ref))
		res, errs := run.sample(t, dev, logits, vocab, func(int) []Params { return []Params{p} })
		for r := range res {
			require.NoError(t, errs[r])
			require.NoError(t, res[r].Errs[0])
			require.Equal(t, ref.Tokens[0], res[r].Tokens[0], "step %d rank %d", step, r)
		}
		require.True(t, top[ref.Tokens[0]], "step %d: token %d is not among the top 30", step, ref.Tokens[0])
		seen[ref.Tokens[0]] = true
	}
	assert.Greater(t, len(seen), 5, "the draws vary over the kept set")
}
