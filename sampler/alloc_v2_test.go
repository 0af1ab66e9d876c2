package sampler

import (
	"runtime/debug"
	"testing"

	"github.com/gumbel-go/gumbel/runtime"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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
