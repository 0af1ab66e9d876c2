package gokernel

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/gumbel-go/gumbel/runtime"
)

// benchVocab is Qwen's vocabulary size.
const benchVocab = 151936

// llmLogits is one LLM-shaped row: normal(0, 2) with a handful of clear favourites.
func llmLogits(r *rand.Rand, v int) []float32 {
	row := make([]float32, v)
	for i := range row {
		row[i] = float32(r.NormFloat64() * 2)
	}
	for range 5 {
		row[r.IntN(v)] = 15 + 10*r.Float32()
	}
	return row
}

// BenchmarkKernels reports ns per vocabulary element of one row on the CPU device.
func BenchmarkKernels(b *testing.B) {
	workers := testDevice.Info().Multiprocessors
	r := rand.New(rand.NewPCG(8, 8))
	cases := []struct {
		name   string
		kernel string
		d      abi.DType
		p      abi.RowParams
		split  []int
	}{
		{"gumbel/T=1", "gumbel_argmax", abi.F32, abi.RowParams{Temperature: 1}, []int{1, workers}},
		{"gumbel/T=1", "gumbel_argmax", abi.F16, abi.RowParams{Temperature: 1}, []int{1, workers}},
		{"gumbel/T=1", "gumbel_argmax", abi.BF16, abi.RowParams{Temperature: 1}, []int{1, workers}},
		{"gumbel/T=0.1", "gumbel_argmax", abi.F32, abi.RowParams{Temperature: 0.1}, []int{1}},
		{"greedy", "gumbel_argmax", abi.F32, abi.RowParams{}, []int{1, workers}},
		{"categorical/none", "categorical", abi.F32, abi.RowParams{Temperature: 1}, []int{1}},
		{"categorical/topk50-topp0.9", "categorical", abi.F32, abi.RowParams{Temperature: 1, TopK: 50, TopP: 0.9}, []int{1}},
		{"categorical/topp0.9", "categorical", abi.F32, abi.RowParams{Temperature: 1, TopP: 0.9}, []int{1}},
		{"filtered/topk40-topp0.9", "filtered", abi.F32, abi.RowParams{Temperature: 0.8, TopK: 40, TopP: 0.9}, []int{1}},
		{"filtered/minp0.05", "filtered", abi.F32, abi.RowParams{Temperature: 0.8, MinP: 0.05}, []int{1}},
		{"filtered/topp0.9", "filtered", abi.F32, abi.RowParams{Temperature: 0.8, TopP: 0.9}, []int{1}},
		{"categorical/topp0.95", "categorical", abi.F32, abi.RowParams{Temperature: 1, TopP: 0.95}, []int{1}},
		{"filtered/topp0.95", "filtered", abi.F32, abi.RowParams{Temperature: 0.8, TopP: 0.95}, []int{1}},
		// Each row feature beside its plain case above, for the overhead.
		{"gumbel/T=1/logprobs", "gumbel_argmax", abi.F32, abi.RowParams{Temperature: 1, Flags: abi.FlagLogprobs}, []int{1, workers}},
		{"greedy/logprobs", "gumbel_argmax", abi.F32, abi.RowParams{Flags: abi.FlagLogprobs}, []int{1}},
		{"gumbel/T=1/processors", "gumbel_argmax", abi.F32, abi.RowParams{Temperature: 1, Flags: abi.FlagBias | abi.FlagMask | abi.FlagPenalties, RepetitionPenalty: 1.1}, []int{1}},
		{"categorical/topk50-topp0.9/logprobs", "categorical", abi.F32, abi.RowParams{Temperature: 1, TopK: 50, TopP: 0.9, Flags: abi.FlagLogprobs}, []int{1}},
		// A token bitmask of random bits, about half the tokens allowed (as in gumbel
		// bench's masked routes): almost no word is all allowed or all banned.
		{"greedy/bitmask", "gumbel_argmax", abi.F32, abi.RowParams{Flags: abi.FlagBitmask}, []int{1}},
		{"gumbel/T=1/bitmask", "gumbel_argmax", abi.F32, abi.RowParams{Temperature: 1, Flags: abi.FlagBitmask}, []int{1}},
		{"categorical/topk50-topp0.9/bitmask", "categorical", abi.F32, abi.RowParams{Temperature: 1, TopK: 50, TopP: 0.9, Flags: abi.FlagBitmask}, []int{1}},
		{"filtered/topk50-topp0.9", "filtered", abi.F32, abi.RowParams{Temperature: 0.8, TopK: 50, TopP: 0.9}, []int{1}},
		{"filtered/topk50-topp0.9/bitmask", "filtered", abi.F32, abi.RowParams{Temperature: 0.8, TopK: 50, TopP: 0.9, Flags: abi.FlagBitmask}, []int{1}},
		{"topn/plain", "topn", abi.F32, abi.RowParams{TopN: 20}, []int{1, workers}},
		{"topn/perturbed", "topn", abi.F32, abi.RowParams{Temperature: 1, TopN: 20, Flags: abi.FlagPerturbed}, []int{1}},
	}
	kernels := Kernels()
	mod, err := testDevice.Load(&runtime.Program{Name: "bench", Go: kernels})
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range cases {
		for _, s := range c.split {
			b.Run(fmt.Sprintf("%s/%s/S=%d", c.name, dtypeName(c.d), s), func(b *testing.B) {
				p := &problem{d: c.d, vocab: benchVocab, stride: benchVocab,
					rows: [][]float32{llmLogits(r, benchVocab)}, params: []abi.RowParams{c.p}}
				p.params[0].Seed = 12345
				if c.p.Flags&(abi.FlagBias|abi.FlagMask|abi.FlagPenalties) != 0 {
					randomInputs(r, p)
					p.params[0].Flags = c.p.Flags
					for i := range p.mask[0] {
						p.mask[0][i] = 0xFFFFFFF7 // a few banned tokens
					}
				}
				if c.p.Flags&abi.FlagBitmask != 0 {
					words := make([]uint32, (benchVocab+31)/32)
					for i := range words {
						words[i] = r.Uint32()
					}
					p.bitmask = [][]uint32{words}
				}
				buf := p.layout(s)
				args := buf.args(p.stride, p.vocab)
				if c.kernel == "topn" {
					args = buf.topnArgs(p.stride, p.vocab, make([]int32, abi.MaxTopN), make([]float32, abi.MaxTopN))
					buf.status[0] = abi.StatusOK // topn writes no status
				}
				k, err := mod.Kernel(abi.KernelName(c.kernel, c.d))
				if err != nil {
					b.Fatal(err)
				}
				grid := runtime.Dim3{X: s, Y: 1, Z: 1}
				stream := testDevice.DefaultStream()
				step := uint32(0)
				cpu0, haveCPU := processCPUTime()
				for b.Loop() {
					step++
					binary.LittleEndian.PutUint32(buf.params[abi.StepOffset:], step)
					if err := stream.Launch(k, grid, runtime.Dim3{X: 1024, Y: 1, Z: 1}, args); err != nil {
						b.Fatal(err)
					}
				}
				if buf.status[0] != abi.StatusOK {
					b.Fatalf("status %d", buf.status[0])
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/benchVocab, "ns/elem")
				if cpu1, ok := processCPUTime(); ok && haveCPU {
					b.ReportMetric(float64((cpu1-cpu0).Nanoseconds())/float64(b.N)/benchVocab, "cpu-ns/elem")
				}
			})
		}
	}
}

// BenchmarkExp compares the log-sum-exps' exp with math.Exp.
func BenchmarkExp(b *testing.B) {
	xs := make([]float64, 1024)
	r := rand.New(rand.NewPCG(9, 9))
	for i := range xs {
		xs[i] = -r.ExpFloat64() * 6
	}
	var sink float64
	b.Run("expNonPositive", func(b *testing.B) {
		for b.Loop() {
			for _, x := range xs {
				sink += expNonPositive(x)
			}
		}
	})
	b.Run("math.Exp", func(b *testing.B) {
		for b.Loop() {
			for _, x := range xs {
				sink += math.Exp(x)
			}
		}
	})
	_ = sink
}

// BenchmarkScanGreedyMasked reports ns per element of the fused greedy scan of a masked
// row (V = 151936): random bits, the worst case, and a grammar's kind of mask, whose
// words are mostly all banned or all allowed (70% and 20% here, the rest random bits).
func BenchmarkScanGreedyMasked(b *testing.B) {
	r := rand.New(rand.NewPCG(12, 12))
	xs := llmLogits(r, benchVocab)
	for _, kind := range []string{"random", "grammar"} {
		words := benchMaskWords(r, kind)
		p := processor{active: true, bitmask: words}
		b.Run(kind, func(b *testing.B) {
			for b.Loop() {
				sc := gumbelScan{bestScore: negInf}
				for i := 0; i < benchVocab; i += convertChunk {
					sc.scanGreedyMasked(xs[i:min(benchVocab, i+convertChunk)], i, 0, &p)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/benchVocab, "ns/elem")
		})
	}
}

// BenchmarkScanBelow reports ns per element of each edition of scanBelow over one LLM
// row (V = 151936) in chunks, as the scans call it: under +Inf, which passes every
// group (the row maximum, the log-sum-exp), and under the row's largest value, which
// stops once, at the group holding it (the greedy scan once its best is found).
func BenchmarkScanBelow(b *testing.B) {
	r := rand.New(rand.NewPCG(14, 14))
	xs := llmLogits(r, benchVocab)
	top := negInf
	for _, x := range xs {
		top = max(top, x)
	}
	forms := append([]scanBelowForm{{"go", scanBelowGo}}, scanBelowForms()...)
	for _, floor := range []struct {
		name string
		v    float32
	}{{"inf", float32(math.Inf(1))}, {"max", top}} {
		for _, f := range forms {
			b.Run(floor.name+"/"+f.name, func(b *testing.B) {
				var sink float32
				for b.Loop() {
					for i := 0; i < benchVocab; i += convertChunk {
						chunk := xs[i:min(benchVocab, i+convertChunk)]
						for j := 0; j < len(chunk); j += 4 {
							n, t := f.scan(chunk[j:], floor.v)
							j += n
							sink = max(sink, t)
						}
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/benchVocab, "ns/elem")
				_ = sink
			})
		}
	}
}

// benchMaskWords is a bitmask row of benchVocab tokens for the masked benchmarks: random
// bits, or ("grammar") words 70% banned, 20% allowed and 10% random.
func benchMaskWords(r *rand.Rand, kind string) []uint32 {
	words := make([]uint32, (benchVocab+31)/32)
	for i := range words {
		words[i] = r.Uint32()
		if kind == "grammar" {
			switch k := r.IntN(10); {
			case k < 7:
				words[i] = 0
			case k < 9:
				words[i] = ^uint32(0)
			}
		}
	}
	return words
}
