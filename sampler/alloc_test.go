package sampler

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"testing"

	"github.com/gumbel-go/gumbel/half"
	"github.com/gumbel-go/gumbel/runtime"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A steady-state call allocates nothing on the Go heap: every call, every route, with
// and without the split phase.

// steadyAllocs is the heap allocations per call of f in steady state: the fewest of
// three AllocsPerRun windows. A cost that recurs on every call shows in every window;
// a one-off refill (a sync.Pool that a kernel keeps its working memory in, emptied by a
// collection or missed on a busy P) lands in one window and not the others.
func steadyAllocs(f func()) float64 {
	least := math.Inf(1)
	for range 3 {
		least = min(least, testing.AllocsPerRun(10, f))
	}
	return least
}

// allocationBatch is a batch the allocation tests sample, with the Gumbel switch its
// sampler runs with.
type allocationBatch struct {
	params []Params
	gumbel Switch
}

// allocationBatches are the batches the allocation tests sample: every route alone
// (filtered with and without filter_max, categorical behind the kill switch), and mixed.
func allocationBatches(rows, vocab int) map[string]allocationBatch {
	filtered := slices.Repeat([]Params{{Temperature: 0.8, TopK: 40, TopP: 0.9}}, rows)
	return map[string]allocationBatch{
		"greedy":            {slices.Repeat([]Params{{}}, rows), On},
		"gumbel":            {slices.Repeat([]Params{{Temperature: 0.8, Seed: 1, HasSeed: true}}, rows), On},
		"filtered":          {filtered, On},
		"filtered with max": {slices.Repeat([]Params{{Temperature: 0.8, TopP: 0.9, MinP: 0.01}}, rows), On},
		"categorical":       {filtered, Off},
		"mixed":             {mixedParams(rows, 2), On},
		"mixed, gumbel off": {mixedParams(rows, 2), Off},
		"serving":           {batchParams(rows), On},
		"host bitmasks":     {bitmaskRows(rows, vocab), On},
	}
}

func TestSteadyStateAllocatesNothing(t *testing.T) {
	if raceEnabled {
		// TestSamplerItselfNeverAllocates still covers the sampler's own path.
		t.Skip("the race detector's sync.Pool drops items on purpose: the Go kernels' pooled scratch reallocates")
	}
	// Collections are held off: one landing mid-window empties the kernels' pools.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	dev := openCPU(t)
	const vocab, rows = 5000, 6
	rng := rand.New(rand.NewPCG(14, 14))
	logits := randomLogits(rng, rows, vocab, 1)
	buf := upload(t, dev, runtime.BytesOf(logits))
	bits := make([]uint16, len(logits))
	for i, x := range logits {
		bits[i] = half.BFloat16(x)
	}
	for name, batch := range allocationBatches(rows, vocab) {
		params := batch.params
		for _, pol := range []*SplitPolicy{nil, &forcedSplit} {
			t.Run(fmt.Sprintf("%s split=%v", name, pol != nil), func(t *testing.T) {
				s := newSampler(t, dev, Options{Policy: pol, Gumbel: batch.gumbel})
				var res Result
				calls := map[string]func(){
					"Sample": func() {
						_ = s.Sample(Logits{Data: buf, Rows: rows, Vocab: vocab}, params, &res)
					},
					"SampleFloat32": func() { _ = s.SampleFloat32(logits, vocab, params, &res) },
					"SampleBits":    func() { _ = s.SampleBits(bits, BFloat16, vocab, params, &res) },
				}
				for _, f := range calls {
					f()
					for i := range rows {
						require.NoError(t, res.Errs[i])
					}
				}
				for call, f := range calls {
					assert.Zero(t, steadyAllocs(f), "%s allocates", call)
				}
			})
		}
	}
}

// inertStream queues nothing: launches return at once. With it, an allocation test sees
// the sampler's own work alone (routing, parameters, scratch, copies), strictly.
type inertStream struct{ runtime.Stream }

func (inertStream) Launch(runtime.Kernel, runtime.Dim3, runtime.Dim3, *runtime.Args) error {
	return nil
}

func TestSamplerItselfNeverAllocates(t *testing.T) {
	dev := openCPU(t)
	const vocab, rows = 300, 5
	logits := make([]float32, rows*vocab)
	buf := upload(t, dev, runtime.BytesOf(logits))
	for name, batch := range allocationBatches(rows, vocab) {
		params := batch.params
		t.Run(name, func(t *testing.T) {
			s := newSampler(t, dev, Options{Stream: inertStream{dev.DefaultStream()}, Policy: &forcedSplit, Gumbel: batch.gumbel})
			var res Result
			calls := map[string]func(){
				"Sample": func() {
					_ = s.Sample(Logits{Data: buf, Rows: rows, Vocab: vocab}, params, &res)
				},
				"SampleFloat32": func() { _ = s.SampleFloat32(logits, vocab, params, &res) },
			}
			for call, f := range calls {
				f()
				assert.Zero(t, testing.AllocsPerRun(20, f), "%s allocates", call)
			}
		})
	}
}

// TestServingFeaturesAllocateNothing: with processors, log-probabilities and top
// log-probabilities on, SampleN, SampleDistinct, Relaunch and a Batch allocate nothing
// either.
func TestServingFeaturesAllocateNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's sync.Pool drops items on purpose: the Go kernels' pooled scratch reallocates")
	}
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	dev := openCPU(t)
	const vocab, rows = 5000, 6
	for _, pol := range []*SplitPolicy{nil, &forcedSplit} {
		s := newSampler(t, dev, Options{Seed: 1, Policy: pol})
		installBatchProcessors(t, vocab, s)
		logits := make([]float32, rows*vocab)
		for i := range logits {
			logits[i] = float32(i%89) / 17
		}
		lg := Logits{Data: upload(t, dev, runtime.BytesOf(logits)), Rows: rows, Vocab: vocab}
		params := batchParams(rows)
		distinct := make([]Params, rows)
		for i := range distinct {
			distinct[i] = Params{Temperature: 0.7, Logprobs: true, TopLogprobs: 2, FrequencyPenalty: 0.1, Step: uint64(i)}
		}
		b, err := s.NewBatch(rows, vocab, Float32, 2)
		require.NoError(t, err)
		for i, p := range params {
			require.NoError(t, b.SetRow(i, p))
		}
		var res Result
		calls := map[string]func(){
			"Sample":         func() { _ = s.Sample(lg, params, &res) },
			"SampleN":        func() { _ = s.SampleN(lg, params, 3, &res) },
			"SampleDistinct": func() { _ = s.SampleDistinct(lg, distinct, 4, &res) },
			"Relaunch":       func() { _ = s.Relaunch() },
			"Batch.Launch":   func() { _ = b.Launch(lg) },
			"Batch.Read":     func() { _ = b.Read(&res) },
		}
		for _, name := range []string{"Sample", "SampleN", "SampleDistinct", "Relaunch", "Batch.Launch", "Batch.Read"} {
			f := calls[name]
			f()
			for i := range res.Errs {
				require.NoError(t, res.Errs[i], "%s row %d", name, i)
			}
			assert.Zero(t, steadyAllocs(f), "%s allocates (split policy %v)", name, pol != nil)
		}
		require.NoError(t, b.Close())
	}
}

// bitmaskRows are rows of every route, every other one with a host token bitmask.
func bitmaskRows(rows, vocab int) []Params {
	out := mixedParams(rows, 3)
	mask := make([]int32, maskWords(vocab))
	for i := range mask {
		mask[i] = 0x5555_5555
	}
	for i := 0; i < rows; i += 2 {
		out[i].Bitmask = mask
	}
	return out
}
