//go:build gpu

package sampler_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/bench"
	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/runtime/cpu"
	"github.com/gumbel-go/gumbel/sampler"
)

// TestGPUVerifyChainProbsLaw is the verification law with draft probabilities
// (verify_probs_test.go) on the GPU, at a million draws per case.
func TestGPUVerifyChainProbsLaw(t *testing.T) {
	dev := openGPU(t)
	for _, lc := range probsLawCases() {
		t.Run(lc.name, func(t *testing.T) { checkProbsLaw(t, dev, lc, sampler.Float32, 1_000_000) })
	}
	lc := probsLawCases()[1]
	t.Run(lc.name+" bfloat16", func(t *testing.T) { checkProbsLaw(t, dev, lc, sampler.BFloat16, 1_000_000) })
}

// draftedChains lays out requests chains of k drafts at Qwen's vocabulary as a draft
// model gives them: the drafter's logits are the target's plus normal noise of sd 1,
// its probabilities their softmax at the request's temperature, and each draft token is
// drawn from them.
func draftedChains(requests, k int, temp float32, seed uint64) (target, draft []float32, params []sampler.Params, drafts []sampler.Draft) {
	rng := rand.New(rand.NewPCG(seed, 11))
	rows := requests * (k + 1)
	target = bench.LLMLogits(rows, qwenVocab, seed)
	draft = make([]float32, max(requests*k, 1)*qwenVocab)
	for b := range requests {
		toks := make([]int32, k)
		for j := range k {
			t := target[(b*(k+1)+j)*qwenVocab:][:qwenVocab]
			q := draft[(b*k+j)*qwenVocab:][:qwenVocab]
			m := math.Inf(-1)
			for i, x := range t {
				q[i] = (x + float32(rng.NormFloat64())) / temp
				m = math.Max(m, float64(q[i]))
			}
			sum := 0.0
			for i := range q {
				sum += math.Exp(float64(q[i]) - m)
			}
			p := make([]float64, qwenVocab)
			for i := range q {
				p[i] = math.Exp(float64(q[i])-m) / sum
				q[i] = float32(p[i])
			}
			toks[j] = drawFrom(rng, p)
		}
		params = append(params, sampler.Params{Temperature: temp, Seed: seed + uint64(b), Step: 3})
		drafts = append(drafts, sampler.Draft{Tokens: toks, Row: b * (k + 1), ProbsRow: b * k})
	}
	return target, draft, params, drafts
}

// TestGPUVerifyChainProbsMatchesCPU: the GPU's verdicts and tokens are the CPU
// device's, at Qwen's vocabulary, with a drafter close to the target (long accepted
// runs and residual draws alike), a bitmask on one request and a greedy one.
func TestGPUVerifyChainProbsMatchesCPU(t *testing.T) {
	gdev := openGPU(t)
	cdev, err := cpu.Open()
	require.NoError(t, err)
	defer cdev.Close()
	const requests, k = 16, 4
	target, draft, params, drafts := draftedChains(requests, k, 0.8, 21)
	params[3].Temperature = 0
	mask := make([]int32, (qwenVocab+31)/32)
	for w := range mask {
		mask[w] = int32(0x5555_5555 | 1<<(w%31))
	}
	params[5].Bitmask = mask
	accepted := 0
	for _, rounds := range []uint64{0, 1, 2} {
		var got, want sampler.Verified
		for _, side := range []struct {
			dev runtime.Device
			res *sampler.Verified
		}{{gdev, &got}, {cdev, &want}} {
			s := gpuSampler(t, side.dev, sampler.Options{Seed: 1})
			ps := append([]sampler.Params(nil), params...)
			for b := range ps {
				ps[b].Step += rounds * 10
			}
			lg := upload(t, side.dev, target, requests*(k+1), qwenVocab)
			dr := upload(t, side.dev, draft, requests*k, qwenVocab)
			require.NoError(t, s.VerifyChainProbs(lg, dr, ps, drafts, side.res))
		}
		for b := range requests {
			require.NoError(t, want.Errs[b], "request %d", b)
			require.NoError(t, got.Errs[b], "request %d", b)
			assert.Equal(t, want.Tokens[b], got.Tokens[b], "round %d request %d", rounds, b)
			accepted += want.Accepted[b]
		}
	}
	t.Logf("drafts accepted: %d of %d", accepted, 3*requests*k)
}

// BenchmarkGPUVerifyChainProbs times VerifyChainProbs for B requests with 4 drafts
// each at Qwen's vocabulary (a drafter close to the target), beside one Sample call
// over the same B·5 target rows: host-observed time per call, and the device time of
// the call's launches (score and residual) replayed back to back and from a graph.
// Target logits in float32 and in bfloat16 (the draft probabilities are float32).
func BenchmarkGPUVerifyChainProbs(b *testing.B) {
	dev := openGPU(b)
	const k = 4
	cfg := bench.Config{Groups: 15, Repeats: 50}
	for _, c := range []struct {
		requests int
		dt       sampler.DType
	}{{1, sampler.Float32}, {8, sampler.Float32}, {64, sampler.Float32}, {1, sampler.BFloat16}, {8, sampler.BFloat16}, {64, sampler.BFloat16}} {
		requests, suffix := c.requests, ""
		if c.dt == sampler.BFloat16 {
			suffix = "-bf16"
		}
		target, draft, params, drafts := draftedChains(requests, k, 0.8, 5)
		lg := uploadAs(b, dev, target, requests*(k+1), qwenVocab, c.dt)
		dr := upload(b, dev, draft, requests*k, qwenVocab)
		s := gpuSampler(b, dev, sampler.Options{Seed: 1})
		b.Run(fmt.Sprintf("probs-%dx%d%s", requests, k, suffix), func(b *testing.B) {
			var res sampler.Verified
			for b.Loop() {
				if err := s.VerifyChainProbs(lg, dr, params, drafts, &res); err != nil {
					b.Fatal(err)
				}
			}
			reportDeviceTime(b, dev, s, cfg)
		})
		b.Run(fmt.Sprintf("sample-%d%s", requests*(k+1), suffix), func(b *testing.B) {
			benchSampleRows(b, dev, s, lg, requests*(k+1), cfg)
		})
	}
}

// benchSampleRows times one Sample call over the first rows rows of lg at temperature
// 0.8, each row its own seed: the plain Gumbel step over the rows a verification call
// covers, which the verification benchmarks report beside it.
func benchSampleRows(b *testing.B, dev runtime.Device, s *sampler.Sampler, lg sampler.Logits, rows int, cfg bench.Config) {
	ps := make([]sampler.Params, rows)
	for j := range ps {
		ps[j] = sampler.Params{Temperature: 0.8, Seed: uint64(j + 1)}
	}
	var res sampler.Result
	for b.Loop() {
		if err := s.Sample(lg, ps, &res); err != nil {
			b.Fatal(err)
		}
	}
	reportDeviceTime(b, dev, s, cfg)
}

// reportDeviceTime reports the device time of s's last call's launches, replayed back
// to back (device-us) and from a CUDA graph (graph-us).
func reportDeviceTime(b *testing.B, dev runtime.Device, s *sampler.Sampler, cfg bench.Config) {
	dus, gus, err := bench.DeviceTime(dev, s.Stream(), s.Relaunch, cfg)
	require.NoError(b, err)
	b.ReportMetric(dus, "device-us")
	b.ReportMetric(gus, "graph-us")
}
