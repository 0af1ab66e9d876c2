//go:build gpu

package sampler_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/gumbel-go/gumbel/bench"
	"github.com/gumbel-go/gumbel/collective"
	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/sampler"
	"github.com/stretchr/testify/require"
)

// gpuShards is one sampler per rank on the one GPU there is, joined by the in-process
// collective, each viewing its columns of a whole-vocabulary logits buffer.
type gpuShards struct {
	samplers []*sampler.Sampler
	comms    []collective.Comm
	bounds   []int
	res      []sampler.Result
	errs     []error
}

func newGPUShards(t testing.TB, dev runtime.Device, ranks, vocab int) *gpuShards {
	t.Helper()
	comms, err := collective.NewLocal(ranks)
	require.NoError(t, err)
	g := &gpuShards{comms: comms, res: make([]sampler.Result, ranks), errs: make([]error, ranks)}
	per := (vocab/ranks + 3) &^ 3
	for r := range ranks {
		g.bounds = append(g.bounds, min(r*per, vocab))
		g.samplers = append(g.samplers, gpuSampler(t, dev, sampler.Options{Seed: 9}))
	}
	g.bounds = append(g.bounds, vocab)
	t.Cleanup(func() {
		for _, c := range comms {
			_ = c.Close()
		}
	})
	return g
}

// step runs SampleShard on every rank at once over the rows of buf (rows x vocab).
func (g *gpuShards) step(buf runtime.Buffer, rows, vocab int, params []sampler.Params) {
	var wg sync.WaitGroup
	for r := range g.comms {
		wg.Go(func() {
			lo, hi := g.bounds[r], g.bounds[r+1]
			lg := sampler.Logits{Data: buf, Offset: 4 * lo, DType: sampler.Float32, Rows: rows, Vocab: hi - lo,
				RowStride: vocab}
			sh := sampler.Shard{Offset: lo, Global: vocab, Comm: g.comms[r]}
			g.errs[r] = g.samplers[r].SampleShard(lg, params, sh, &g.res[r])
		})
	}
	wg.Wait()
}

// TestGPUShardMatchesWholeVocabulary: on the GPU, 2 and 4 vocabulary shards merged by
// the in-process collective give every rank the whole vocabulary's tokens at Qwen's
// vocabulary, greedy and Gumbel-max rows, over many steps.
func TestGPUShardMatchesWholeVocabulary(t *testing.T) {
	dev := openGPU(t)
	const rows, steps = 8, 300
	buf := uploadTo(t, dev, bench.LLMLogits(rows, qwenVocab, 24))
	whole := gpuSampler(t, dev, sampler.Options{Seed: 9})
	lg := sampler.Logits{Data: buf, DType: sampler.Float32, Rows: rows, Vocab: qwenVocab}
	for _, ranks := range []int{2, 4} {
		g := newGPUShards(t, dev, ranks, qwenVocab)
		var ref sampler.Result
		same := 0
		for step := range uint64(steps) {
			params := make([]sampler.Params, rows)
			for i := range params {
				params[i] = sampler.Params{Temperature: []float32{0, 0.6, 1, 1.3}[i%4], RequestID: uint64(i + 1), Step: step}
			}
			require.NoError(t, whole.Sample(lg, params, &ref))
			g.step(buf, rows, qwenVocab, params)
			for r := range ranks {
				require.NoError(t, g.errs[r])
				require.Equal(t, ref.Tokens, g.res[r].Tokens, "%d shards, rank %d, step %d", ranks, r, step)
			}
			same += rows
		}
		t.Logf("%d shards: %d of %d tokens identical to the whole vocabulary's on every rank", ranks, same, steps*rows)
	}
}

// BenchmarkGPUShard times one SampleShard step over all ranks (shard launches, the
// in-process merge through the host, the tokens back) beside Sample over the whole
// vocabulary, on one GPU, Gumbel-max rows at Qwen's vocabulary.
func BenchmarkGPUShard(b *testing.B) {
	dev := openGPU(b)
	for _, rows := range []int{1, 8, 64} {
		buf := uploadTo(b, dev, bench.LLMLogits(rows, qwenVocab, 24))
		params := make([]sampler.Params, rows)
		for i := range params {
			params[i] = sampler.Params{Temperature: 0.8, RequestID: uint64(i + 1)}
		}
		b.Run(fmt.Sprintf("whole/batch=%d", rows), func(b *testing.B) {
			s := gpuSampler(b, dev, sampler.Options{Seed: 9})
			lg := sampler.Logits{Data: buf, DType: sampler.Float32, Rows: rows, Vocab: qwenVocab}
			var res sampler.Result
			for b.Loop() {
				if err := s.Sample(lg, params, &res); err != nil {
					b.Fatal(err)
				}
			}
		})
		for _, ranks := range []int{2, 4} {
			b.Run(fmt.Sprintf("shards=%d/batch=%d", ranks, rows), func(b *testing.B) {
				g := newGPUShards(b, dev, ranks, qwenVocab)
				for b.Loop() {
					g.step(buf, rows, qwenVocab, params)
					if g.errs[0] != nil {
						b.Fatal(g.errs[0])
					}
				}
			})
		}
	}
}
