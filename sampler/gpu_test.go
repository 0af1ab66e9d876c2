//go:build gpu

package sampler_test

// The sampler on a real GPU, checked against the CPU device (the reference edition of
// the kernels) and timed. Run on the GPU host:
//
//	go test -tags gpu -count=1 -v -run GPU ./sampler/
//	go test -tags gpu -count=1 -run '^$' -bench GPU -benchtime 2000x ./sampler/
//
// or build once here and copy the static binary over:
//
//	CGO_ENABLED=0 go test -c -tags gpu -o sampler-gpu.test ./sampler/
//	./sampler-gpu.test -test.v -test.run GPU
//	./sampler-gpu.test -test.run '^$' -test.bench GPU -test.benchtime 2000x

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"testing"

	"github.com/gumbel-go/gumbel"
	"github.com/gumbel-go/gumbel/bench"
	"github.com/gumbel-go/gumbel/half"
	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/runtime/cpu"
	"github.com/gumbel-go/gumbel/sampler"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const qwenVocab = 151936

// openGPU opens the device gumbel.Open picks; landing on the CPU device fails the test.
func openGPU(t testing.TB) runtime.Device {
	t.Helper()
	opened, err := gumbel.Open(runtime.OpenOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = opened.Close() })
	info := opened.Info()
	require.NotEqual(t, runtime.CPU, info.Backend, "the gpu tag expects a GPU; skipped: %v", opened.Skipped)
	t.Logf("device: %s %s (%s, %d multiprocessors)", info.Backend, info.Name, info.Arch, info.Multiprocessors)
	return opened.Device
}

func gpuSampler(t testing.TB, dev runtime.Device, opts sampler.Options) *sampler.Sampler {
	t.Helper()
	s, err := sampler.New(dev, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// gpuParams cycles through every route and filter, with per-row seeds and ids.
func gpuParams(n int, step uint64) []sampler.Params {
	kinds := []sampler.Params{
		{Temperature: 0},
		{Temperature: 0.7, HasSeed: true},
		{Temperature: 1.3},
		{Temperature: 0.9, TopK: 50, HasSeed: true},
		{Temperature: 1, TopP: 0.9, HasSeed: true},
		{Temperature: 1.1, MinP: 0.05},
		{Temperature: 0.8, TopK: 40, TopP: 0.95, MinP: 0.02, HasSeed: true},
		{Temperature: 0.5, TopK: 1},
		{Temperature: 2, TopP: 0.3},
	}
	out := make([]sampler.Params, n)
	for i := range out {
		p := kinds[i%len(kinds)]
		p.Seed, p.RequestID, p.Step = 1000+uint64(i)*7919, 50+uint64(i), step
		out[i] = p
	}
	return out
}

// TestGPUMatchesCPU: the GPU samples the tokens the CPU device samples, for every
// route, dtype and launch shape (ABI.md: editions differ only where expf, logf or
// log1pf differ in the last place, which moves a token about once in a million rows).
func TestGPUMatchesCPU(t *testing.T) {
	gpu := openGPU(t)
	host, err := cpu.Open()
	require.NoError(t, err)
	defer host.Close()
	forced := sampler.SplitPolicy{TargetBlocks: 1 << 20, MinElementsPerBlock: 1, MaxBlocksPerRow: 512}
	tests := []struct {
		vocab, rows int
	}{
		{1, 9}, {7, 40}, {1000, 200}, {qwenVocab, 64}, {256000, 8},
	}
	for _, tc := range tests {
		rng := rand.New(rand.NewPCG(uint64(tc.vocab), 1))
		logits := make([]float32, tc.rows*tc.vocab)
		for i := range logits {
			logits[i] = float32(rng.NormFloat64() * 2)
		}
		// A few poisoned rows: NaN, +Inf, all -Inf.
		if tc.rows > 20 {
			logits[3*tc.vocab+tc.vocab/2] = float32(math.NaN())
			logits[5*tc.vocab] = float32(math.Inf(1))
			for i := range tc.vocab {
				logits[7*tc.vocab+i] = float32(math.Inf(-1))
			}
		}
		bf := make([]uint16, len(logits))
		f16 := make([]uint16, len(logits))
		for i, x := range logits {
			bf[i], f16[i] = half.BFloat16(x), half.Float16(x)
		}
		params := gpuParams(tc.rows, 3)
		var want [3]sampler.Result
		ref := gpuSampler(t, host, sampler.Options{Seed: 5})
		require.NoError(t, ref.SampleFloat32(logits, tc.vocab, params, &want[0]))
		require.NoError(t, ref.SampleBits(bf, sampler.BFloat16, tc.vocab, params, &want[1]))
		require.NoError(t, ref.SampleBits(f16, sampler.Float16, tc.vocab, params, &want[2]))
		for _, cfg := range []struct {
			name string
			opts sampler.Options
		}{
			{"default", sampler.Options{Seed: 5}},
			{"split off", sampler.Options{Seed: 5, Split: sampler.Off}},
			{"forced split", sampler.Options{Seed: 5, Split: sampler.On, Policy: &forced}},
			{"block 256", sampler.Options{Seed: 5, BlockSize: 256}},
		} {
			t.Run(fmt.Sprintf("V=%d/%s", tc.vocab, cfg.name), func(t *testing.T) {
				s := gpuSampler(t, gpu, cfg.opts)
				var got sampler.Result
				require.NoError(t, s.SampleFloat32(logits, tc.vocab, params, &got))
				assertSameResult(t, &want[0], &got, "float32")
				require.NoError(t, s.SampleBits(bf, sampler.BFloat16, tc.vocab, params, &got))
				assertSameResult(t, &want[1], &got, "bfloat16")
				require.NoError(t, s.SampleBits(f16, sampler.Float16, tc.vocab, params, &got))
				assertSameResult(t, &want[2], &got, "float16")
			})
		}
	}
}

func assertSameResult(t *testing.T, want, got *sampler.Result, what string) {
	t.Helper()
	require.Len(t, got.Tokens, len(want.Tokens))
	for i := range want.Tokens {
		assert.Equal(t, want.Tokens[i], got.Tokens[i], "%s row %d (%s)", what, i, want.Routes[i])
		assert.Equal(t, want.Errs[i] == nil, got.Errs[i] == nil, "%s row %d: %v against %v", what, i, want.Errs[i], got.Errs[i])
	}
}

// TestGPUSteadyStateAllocs: a warm Sample allocates nothing on the Go heap, launch
// path included.
func TestGPUSteadyStateAllocs(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	gpu := openGPU(t)
	const rows = 8
	logits := make([]float32, rows*qwenVocab)
	for i := range logits {
		logits[i] = float32(i%977) / 100
	}
	for name, params := range map[string][]sampler.Params{
		"greedy":   slices.Repeat([]sampler.Params{{}}, rows),
		"gumbel":   slices.Repeat([]sampler.Params{{Temperature: 0.8}}, rows),
		"filtered": slices.Repeat([]sampler.Params{{Temperature: 0.8, TopK: 50, TopP: 0.9}}, rows),
		"top-p":    slices.Repeat([]sampler.Params{{Temperature: 0.8, TopP: 0.9}}, rows),
		"mixed":    gpuParams(rows, 1),
	} {
		t.Run(name, func(t *testing.T) {
			s := gpuSampler(t, gpu, sampler.Options{})
			var res sampler.Result
			f := func() { _ = s.SampleFloat32(logits, qwenVocab, params, &res) }
			f()
			assert.Zero(t, testing.AllocsPerRun(50, f))
		})
	}
}

// BenchmarkGPUSample is BenchmarkSample on the GPU, over more batch sizes, with the
// logits already in device memory.
func BenchmarkGPUSample(b *testing.B) {
	gpu := openGPU(b)
	routes := []struct {
		name   string
		params sampler.Params
		gumbel sampler.Switch
	}{
		{"greedy", sampler.Params{}, sampler.On},
		{"gumbel", sampler.Params{Temperature: 0.8}, sampler.On},
		{"categorical", sampler.Params{Temperature: 0.8}, sampler.Off},
		{"topk50_topp0.9", sampler.Params{Temperature: 0.8, TopK: 50, TopP: 0.9}, sampler.On},
		{"topp0.9", sampler.Params{Temperature: 0.8, TopP: 0.9}, sampler.On},
		{"categorical_topk50_topp0.9", sampler.Params{Temperature: 0.8, TopK: 50, TopP: 0.9}, sampler.Off},
	}
	for _, r := range routes {
		for _, batch := range []int{1, 8, 64, 256} {
			b.Run(fmt.Sprintf("route=%s/batch=%d", r.name, batch), func(b *testing.B) {
				s := gpuSampler(b, gpu, sampler.Options{Gumbel: r.gumbel})
				benchSteps(b, gpu, s, batch, r.params)
			})
		}
	}
}

// BenchmarkGPUSplitSweep times Gumbel-max rows with a forced number of blocks per row:
// the measurements the GPU thresholds of DefaultSplitPolicy are to be chosen from (the
// fastest S for each batch and vocabulary).
func BenchmarkGPUSplitSweep(b *testing.B) {
	gpu := openGPU(b)
	for _, vocab := range []int{32000, qwenVocab, 256000} {
		for _, batch := range []int{1, 4, 16, 64, 132, 264} {
			for _, perRow := range []int{1, 2, 4, 8, 16, 32, 64, 128, 256} {
				if perRow > 1 && vocab/perRow < 512 {
					continue
				}
				b.Run(fmt.Sprintf("V=%d/batch=%d/S=%d", vocab, batch, perRow), func(b *testing.B) {
					pol := sampler.SplitPolicy{TargetBlocks: perRow * batch, MinElementsPerBlock: 1, MaxBlocksPerRow: perRow}
					s := gpuSampler(b, gpu, sampler.Options{Split: sampler.On, Policy: &pol})
					benchStepsVocab(b, gpu, s, batch, vocab, sampler.Params{Temperature: 0.8})
				})
			}
		}
	}
}

func benchSteps(b *testing.B, dev runtime.Device, s *sampler.Sampler, batch int, p sampler.Params) {
	benchStepsVocab(b, dev, s, batch, qwenVocab, p)
}

func benchStepsVocab(b *testing.B, dev runtime.Device, s *sampler.Sampler, batch, vocab int, p sampler.Params) {
	rng := rand.New(rand.NewPCG(1, uint64(batch)))
	logits := make([]float32, batch*vocab)
	for i := range logits {
		logits[i] = float32(rng.NormFloat64() * 2)
	}
	buf, err := dev.Alloc(4 * len(logits))
	require.NoError(b, err)
	defer buf.Free()
	st := dev.DefaultStream()
	require.NoError(b, st.CopyToDevice(buf, 0, runtime.BytesOf(logits)))
	require.NoError(b, st.Synchronize())
	params := make([]sampler.Params, batch)
	for i := range params {
		params[i] = p
		params[i].RequestID = uint64(i)
	}
	lg := sampler.Logits{Data: buf, Rows: batch, Vocab: vocab}
	var res sampler.Result
	require.NoError(b, s.Sample(lg, params, &res))
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		for j := range params {
			params[j].Step = uint64(i)
		}
		if err := s.Sample(lg, params, &res); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch*vocab), "ns/element")
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "us/step")
}

// TestGPUVerifyChainLaw is the verification law (verify_test.go) on the GPU.
func TestGPUVerifyChainLaw(t *testing.T) {
	dev := openGPU(t)
	for _, lc := range verifyLawCases() {
		t.Run(lc.name, func(t *testing.T) { checkVerifyLaw(t, dev, lc, sampler.On, 100_000) })
	}
}

// TestGPUVerifyChainIsSampling: on the GPU, at Qwen's vocabulary, VerifyChain emits
// the tokens Sample draws at each position of the path, for unfiltered, filtered,
// greedy and logit-biased requests, with drafts that follow the draws for a while.
func TestGPUVerifyChainIsSampling(t *testing.T) {
	dev := openGPU(t)
	const requests, k = 12, 4
	target, _, _, _ := draftedChains(requests, k, 0.8, 3)
	lg := upload(t, dev, target, requests*(k+1), qwenVocab)
	s := gpuSampler(t, dev, sampler.Options{Seed: 2})
	kinds := []sampler.Params{
		{Temperature: 0.8}, {Temperature: 0.7, TopP: 0.9}, {Temperature: 1, TopK: 50, TopP: 0.95},
		{Temperature: 0.6, MinP: 0.05}, {}, {Temperature: 1.3, TopK: 20},
	}
	sampleAt := func(p sampler.Params, row, d int) int32 {
		one := lg
		one.Offset, one.Rows = 4*row*qwenVocab, 1
		p.Step += uint64(d)
		var out sampler.Result
		require.NoError(t, s.Sample(one, []sampler.Params{p}, &out))
		require.NoError(t, out.Errs[0])
		return out.Tokens[0]
	}
	params := make([]sampler.Params, requests)
	drafts := make([]sampler.Draft, requests)
	for b := range requests {
		p := kinds[b%len(kinds)]
		p.Seed, p.Step = uint64(100+b), 7
		params[b] = p
		d := make([]int32, k)
		for j := range k {
			d[j] = sampleAt(p, b*(k+1)+j, j)
			if j == b%(k+1) {
				d[j] = (d[j] + 1) % qwenVocab
			}
		}
		drafts[b] = sampler.Draft{Tokens: d, Row: b * (k + 1)}
	}
	var res sampler.Verified
	require.NoError(t, s.VerifyChain(lg, params, drafts, &res))
	for b := range requests {
		require.NoError(t, res.Errs[b])
		assert.Equal(t, min(b%(k+1), k), res.Accepted[b], "request %d", b)
		for i, tok := range res.Tokens[b] {
			assert.Equal(t, sampleAt(params[b], b*(k+1)+i, i), tok, "request %d token %d", b, i)
		}
	}
}

// TestGPUScoreMatchesCPU: Score on the GPU gives the CPU device's ranks and statuses
// exactly and its records to 1e-5, at Qwen's vocabulary, in every dtype, with
// temperatures, bitmasks and top log-probabilities.
func TestGPUScoreMatchesCPU(t *testing.T) {
	gdev := openGPU(t)
	cdev, err := cpu.Open()
	require.NoError(t, err)
	defer cdev.Close()
	const rows = 24
	rng := rand.New(rand.NewPCG(8, 8))
	logits := make([]float32, rows*qwenVocab)
	for i := range logits {
		logits[i] = float32(rng.NormFloat64() * 2.5)
	}
	logits[5*qwenVocab+3] = float32(math.NaN())
	params := make([]sampler.Params, rows)
	tokens := make([]int32, rows)
	for i := range params {
		params[i] = sampler.Params{Temperature: []float32{0, 0.6, 1, 1.7}[i%4], TopLogprobs: (i % 3) * 4}
		tokens[i] = int32(rng.IntN(qwenVocab))
		if i%5 == 2 {
			m := make([]int32, (qwenVocab+31)/32)
			for w := range m {
				m[w] = int32(rng.Uint32())
			}
			params[i].Bitmask = m
		}
	}
	bits := make([]uint16, len(logits))
	for _, dt := range []sampler.DType{sampler.Float32, sampler.BFloat16, sampler.Float16} {
		src := runtime.BytesOf(logits)
		if dt != sampler.Float32 {
			for i, x := range logits {
				if dt == sampler.BFloat16 {
					bits[i] = half.BFloat16(x)
				} else {
					bits[i] = half.Float16(x)
				}
			}
			src = runtime.BytesOf(bits)
		}
		var got, want sampler.Scores
		for _, side := range []struct {
			dev runtime.Device
			res *sampler.Scores
		}{{gdev, &got}, {cdev, &want}} {
			buf, err := side.dev.Alloc(len(src))
			require.NoError(t, err)
			require.NoError(t, side.dev.DefaultStream().CopyToDevice(buf, 0, src))
			s := gpuSampler(t, side.dev, sampler.Options{Seed: 1})
			require.NoError(t, s.Score(sampler.Logits{Data: buf, DType: dt, Rows: rows, Vocab: qwenVocab}, params, tokens, side.res))
			require.NoError(t, buf.Free())
		}
		for i := range rows {
			require.Equal(t, want.Errs[i] == nil, got.Errs[i] == nil, "%s row %d: %v / %v", dt, i, want.Errs[i], got.Errs[i])
			assert.Equal(t, want.Ranks[i], got.Ranks[i], "%s row %d", dt, i)
			if want.Errs[i] != nil {
				continue
			}
			assert.InDelta(t, want.Logprobs[i].Raw, got.Logprobs[i].Raw, 1e-4, "%s row %d", dt, i)
			assert.InDelta(t, want.Logprobs[i].Processed, got.Logprobs[i].Processed, 1e-4, "%s row %d", dt, i)
		}
	}
}

// BenchmarkGPUVerifyChain times VerifyChain for B requests with 4 drafts each at
// Qwen's vocabulary (drafts a drafter close to the target sampled, verified as
// deterministic ones), beside one Sample call over the same B·5 target rows:
// host-observed time per call, and the device time of the call's launches replayed
// back to back and from a graph. Target logits in float32 and bfloat16.
func BenchmarkGPUVerifyChain(b *testing.B) {
	dev := openGPU(b)
	const k = 4
	cfg := bench.Config{Groups: 15, Repeats: 50}
	for _, c := range []struct {
		requests int
		dt       sampler.DType
	}{{1, sampler.Float32}, {8, sampler.Float32}, {64, sampler.Float32}, {8, sampler.BFloat16}} {
		requests, suffix := c.requests, ""
		if c.dt == sampler.BFloat16 {
			suffix = "-bf16"
		}
		target, _, params, drafts := draftedChains(requests, k, 0.8, 5)
		lg := uploadAs(b, dev, target, requests*(k+1), qwenVocab, c.dt)
		s := gpuSampler(b, dev, sampler.Options{Seed: 1})
		b.Run(fmt.Sprintf("verify-%dx%d%s", requests, k, suffix), func(b *testing.B) {
			var res sampler.Verified
			for b.Loop() {
				if err := s.VerifyChain(lg, params, drafts, &res); err != nil {
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
