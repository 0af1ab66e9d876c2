package sampler

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gumbel-go/gumbel/runtime"
)

// BenchmarkSample times one sampling step (parameter upload, launches, token copy and
// wait) on the CPU device with the logits already in device memory, at Qwen's
// vocabulary. ns/element is the time per vocabulary element per row.
func BenchmarkSample(b *testing.B) {
	dev := openCPU(b)
	routes := []struct {
		name   string
		params Params
		gumbel Switch
	}{
		{"greedy", Params{}, On},
		{"gumbel", Params{Temperature: 0.8}, On},
		{"categorical", Params{Temperature: 0.8}, Off},
		{"topk50_topp0.9", Params{Temperature: 0.8, TopK: 50, TopP: 0.9}, On},
		{"topp0.9", Params{Temperature: 0.8, TopP: 0.9}, On},
		{"categorical_topk50_topp0.9", Params{Temperature: 0.8, TopK: 50, TopP: 0.9}, Off},
	}
	for _, r := range routes {
		for _, batch := range []int{1, 8} {
			b.Run(fmt.Sprintf("route=%s/batch=%d", r.name, batch), func(b *testing.B) {
				rng := rand.New(rand.NewPCG(1, uint64(batch)))
				logits := randomLogits(rng, batch, bigVocab, 2)
				buf := upload(b, dev, runtime.BytesOf(logits))
				params := make([]Params, batch)
				for i := range params {
					params[i] = r.params
					params[i].RequestID = uint64(i)
				}
				s := newSampler(b, dev, Options{Gumbel: r.gumbel, Seed: 1})
				lg := Logits{Data: buf, Rows: batch, Vocab: bigVocab}
				var res Result
				if err := s.Sample(lg, params, &res); err != nil {
					b.Fatal(err)
				}
				sampleSteps(b, s, lg, params, &res)
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch*bigVocab), "ns/element")
			})
		}
	}
}

// BenchmarkSampleServing times a Gumbel step at Qwen's vocabulary, batch 8, on the CPU
// device, plain and with each serving feature, for comparing their costs (the GPU
// figures come from BenchmarkGPUServingCost).
func BenchmarkSampleServing(b *testing.B) {
	dev := openCPU(b)
	const batch = 8
	rng := rand.New(rand.NewPCG(1, batch))
	logits := randomLogits(rng, batch, bigVocab, 2)
	buf := upload(b, dev, runtime.BytesOf(logits))
	lg := Logits{Data: buf, Rows: batch, Vocab: bigVocab}
	for _, tc := range []struct {
		name string
		edit func(*Params)
	}{
		{"plain", func(*Params) {}},
		{"logprobs", func(p *Params) { p.Logprobs = true }},
		{"top5", func(p *Params) { p.TopLogprobs = 5 }},
		{"penalties", func(p *Params) { p.FrequencyPenalty, p.RepetitionPenalty = 0.5, 1.2 }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			s := newSampler(b, dev, Options{Seed: 1})
			params := make([]Params, batch)
			for i := range params {
				params[i] = Params{Temperature: 0.8, RequestID: uint64(i)}
				tc.edit(&params[i])
				if params[i].FrequencyPenalty == 0 {
					continue
				}
				if err := s.TrackTokens(i, bigVocab, []int32{1, 2, 3}); err != nil {
					b.Fatal(err)
				}
			}
			var res Result
			sampleSteps(b, s, lg, params, &res)
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "us/step")
		})
	}
}

// sampleSteps times one Sample call per benchmark iteration, each at the next step, and
// reports allocations.
func sampleSteps(b *testing.B, s *Sampler, lg Logits, params []Params, res *Result) {
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		for j := range params {
			params[j].Step = uint64(i)
		}
		if err := s.Sample(lg, params, res); err != nil {
			b.Fatal(err)
		}
	}
}
