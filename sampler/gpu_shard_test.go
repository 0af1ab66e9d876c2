//go:build gpu

package sampler_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/gumbel-go/gumbel"
	"github.com/gumbel-go/gumbel/bench"
	"github.com/gumbel-go/gumbel/collective"
	"github.com/gumbel-go/gumbel/collective/nccl"
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

// shardRowParams is row i's parameters at a step of the shard tests: greedy, Gumbel-max
// and the filters engines ship (top-k + top-p, top-p, min-p, top-k alone).
func shardRowParams(i int, step uint64) sampler.Params {
	p := sampler.Params{Temperature: []float32{0, 0.6, 1, 1.3}[i%4], RequestID: uint64(i + 1), Step: step}
	switch i % 8 {
	case 5:
		p.TopK, p.TopP = 50, 0.9
	case 6:
		p.TopP = 0.95
	case 7:
		p.MinP = 0.05
	case 4:
		p.Temperature, p.TopK = 0.7, 20
	}
	return p
}

// TestGPUShardMatchesWholeVocabulary: on the GPU, 2 and 4 vocabulary shards merged by
// the in-process collective give every rank the whole vocabulary's tokens (and, for a
// third of the rows, log-probabilities) at Qwen's vocabulary, greedy, Gumbel-max and
// filtered rows, over many steps.
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
				params[i] = shardRowParams(i, step)
				params[i].Logprobs = i%3 == 0
			}
			require.NoError(t, whole.Sample(lg, params, &ref))
			g.step(buf, rows, qwenVocab, params)
			for r := range ranks {
				require.NoError(t, g.errs[r])
				require.Equal(t, ref.Tokens, g.res[r].Tokens, "%d shards, rank %d, step %d", ranks, r, step)
				for i, p := range params {
					if p.Logprobs {
						want, got := ref.Logprobs[i], g.res[r].Logprobs[i]
						require.InDelta(t, want.Processed, got.Processed, 1e-4, "%d shards, rank %d, row %d", ranks, r, i)
						require.InDelta(t, want.ProcessedLSE, got.ProcessedLSE, 1e-4, "%d shards, rank %d, row %d", ranks, r, i)
					}
				}
			}
			same += rows
		}
		t.Logf("%d shards: %d of %d tokens identical to the whole vocabulary's on every rank", ranks, same, steps*rows)
	}
}

// BenchmarkGPUShard times one SampleShard step over all ranks (shard launches, the
// in-process merge through the host, the tokens back; for filtered rows the selection
// rounds) beside Sample over the whole vocabulary, on one GPU, Gumbel-max rows and
// top-k 50 + top-p 0.9 rows at Qwen's vocabulary.
func BenchmarkGPUShard(b *testing.B) {
	dev := openGPU(b)
	for _, rows := range []int{1, 8, 64} {
		buf := uploadTo(b, dev, bench.LLMLogits(rows, qwenVocab, 24))
		for _, filtered := range []bool{false, true} {
			params := make([]sampler.Params, rows)
			for i := range params {
				params[i] = sampler.Params{Temperature: 0.8, RequestID: uint64(i + 1)}
				if filtered {
					params[i].TopK, params[i].TopP = 50, 0.9
				}
			}
			name := "gumbel"
			if filtered {
				name = "topk50-topp0.9"
			}
			benchShard(b, dev, buf, rows, name, params)
		}
	}
}

// benchShard is BenchmarkGPUShard for one batch of params.
func benchShard(b *testing.B, dev runtime.Device, buf runtime.Buffer, rows int, name string, params []sampler.Params) {
	b.Run(fmt.Sprintf("%s/whole/batch=%d", name, rows), func(b *testing.B) {
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
		b.Run(fmt.Sprintf("%s/shards=%d/batch=%d", name, ranks, rows), func(b *testing.B) {
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

// columns is tokens [lo, hi) of every row of logits (rows of vocab), as one rank holds them.
func columns(logits []float32, vocab, lo, hi int) []float32 {
	out := make([]float32, 0, len(logits)/vocab*(hi-lo))
	for i := 0; i < len(logits); i += vocab {
		out = append(out, logits[i+lo:i+hi]...)
	}
	return out
}

// ncclRanks opens CUDA devices 0 and 1 and joins them in one NCCL communicator (InitAll,
// one process); it skips the test on a host with fewer than two GPUs, which cannot run it.
func ncclRanks(t testing.TB) ([]runtime.Device, []collective.Comm) {
	t.Helper()
	var devs []runtime.Device
	for ordinal := range 2 {
		opened, err := gumbel.Open(runtime.OpenOptions{Backend: "cuda", Ordinal: ordinal})
		if err != nil {
			if ordinal == 1 {
				t.Skipf("two GPUs needed: device 1 does not open (%v)", err)
			}
			require.NoError(t, err)
		}
		t.Cleanup(func() { _ = opened.Close() })
		devs = append(devs, opened.Device)
	}
	lib, err := nccl.Open()
	require.NoError(t, err)
	comms, err := lib.InitAll(devs)
	require.NoError(t, err)
	out := make([]collective.Comm, len(comms))
	for i, c := range comms {
		t.Cleanup(func() { _ = c.Close() })
		out[i] = c
	}
	return devs, out
}

// TestGPUShardNCCLTwoRanks is the two-GPU run of vocabulary-parallel sampling: Qwen's
// vocabulary split in two, one half on each GPU, merged by NCCL; every rank's tokens
// equal one GPU's over the whole vocabulary, at batch 1, 8 and 64 over 10,000 steps in
// all. Run it on a host with two GPUs:
//
//	../shared/tools/gpu-bundle sampler && bash .gpu/run-tests -test.run TestGPUShardNCCLTwoRanks -test.v
func TestGPUShardNCCLTwoRanks(t *testing.T) {
	devs, comms := ncclRanks(t)
	const half = qwenVocab / 2
	whole := gpuSampler(t, devs[0], sampler.Options{Seed: 9})
	ranks := []*sampler.Sampler{gpuSampler(t, devs[0], sampler.Options{Seed: 9}),
		gpuSampler(t, devs[1], sampler.Options{Seed: 9})}
	steps := map[int]int{1: 4000, 8: 4000, 64: 2000}
	for _, rows := range []int{1, 8, 64} {
		logits := bench.LLMLogits(rows, qwenVocab, uint64(rows))
		full := uploadTo(t, devs[0], logits)
		var parts [2]runtime.Buffer
		for r := range 2 {
			parts[r] = uploadTo(t, devs[r], columns(logits, qwenVocab, r*half, (r+1)*half))
		}
		var ref sampler.Result
		res := make([]sampler.Result, 2)
		errs := make([]error, 2)
		for step := range uint64(steps[rows]) {
			params := make([]sampler.Params, rows)
			for i := range params {
				params[i] = shardRowParams(i, step)
			}
			require.NoError(t, whole.Sample(sampler.Logits{Data: full, DType: sampler.Float32, Rows: rows, Vocab: qwenVocab}, params, &ref))
			var wg sync.WaitGroup
			for r := range 2 {
				wg.Go(func() {
					lg := sampler.Logits{Data: parts[r], DType: sampler.Float32, Rows: rows, Vocab: half}
					errs[r] = ranks[r].SampleShard(lg, params, sampler.Shard{Offset: r * half, Global: qwenVocab, Comm: comms[r]}, &res[r])
				})
			}
			wg.Wait()
			for r := range 2 {
				require.NoError(t, errs[r])
				require.Equal(t, ref.Tokens, res[r].Tokens, "batch %d, rank %d, step %d", rows, r, step)
			}
		}
		t.Logf("batch %d: %d steps, every rank's tokens equal one GPU's", rows, steps[rows])
	}
}

// BenchmarkGPUShardNCCL times one SampleShard step over two GPUs (each rank's half of
// Qwen's vocabulary, NCCL's all-reduce of 8 bytes per row, the tokens back; for filtered
// rows the selection rounds, 4 KB per row each) beside one Sample call over the whole
// vocabulary on one GPU, Gumbel-max rows and top-k 50 + top-p 0.9 rows.
func BenchmarkGPUShardNCCL(b *testing.B) {
	devs, comms := ncclRanks(b)
	for _, rows := range []int{1, 8, 64} {
		logits := bench.LLMLogits(rows, qwenVocab, 24)
		for _, filtered := range []bool{false, true} {
			params := make([]sampler.Params, rows)
			name := "gumbel"
			for i := range params {
				params[i] = sampler.Params{Temperature: 0.8, RequestID: uint64(i + 1)}
				if filtered {
					params[i].TopK, params[i].TopP, name = 50, 0.9, "topk50-topp0.9"
				}
			}
			benchShardNCCL(b, devs, comms, logits, rows, name, params)
		}
	}
}

// benchShardNCCL is BenchmarkGPUShardNCCL for one batch of params.
func benchShardNCCL(b *testing.B, devs []runtime.Device, comms []collective.Comm, logits []float32, rows int, name string,
	params []sampler.Params) {
	const half = qwenVocab / 2
	b.Run(fmt.Sprintf("%s/whole/batch=%d", name, rows), func(b *testing.B) {
		s := gpuSampler(b, devs[0], sampler.Options{Seed: 9})
		lg := sampler.Logits{Data: uploadTo(b, devs[0], logits), DType: sampler.Float32, Rows: rows, Vocab: qwenVocab}
		var res sampler.Result
		for b.Loop() {
			if err := s.Sample(lg, params, &res); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run(fmt.Sprintf("%s/nccl-2/batch=%d", name, rows), func(b *testing.B) {
		var lgs [2]sampler.Logits
		var ss [2]*sampler.Sampler
		for r := range 2 {
			part := columns(logits, qwenVocab, r*half, (r+1)*half)
			lgs[r] = sampler.Logits{Data: uploadTo(b, devs[r], part), DType: sampler.Float32, Rows: rows, Vocab: half}
			ss[r] = gpuSampler(b, devs[r], sampler.Options{Seed: 9})
		}
		var res [2]sampler.Result
		var errs [2]error
		for b.Loop() {
			var wg sync.WaitGroup
			for r := range 2 {
				wg.Go(func() {
					errs[r] = ss[r].SampleShard(lgs[r], params, sampler.Shard{Offset: r * half, Global: qwenVocab, Comm: comms[r]}, &res[r])
				})
			}
			wg.Wait()
			if errs[0] != nil || errs[1] != nil {
				b.Fatal(errs[0], errs[1])
			}
		}
	})
}
