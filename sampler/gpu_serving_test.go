//go:build gpu

package sampler_test

// The serving features on a real GPU: a Batch captured in a CUDA graph and replayed, and
// log-probabilities, processors, draws and top log-probabilities against the CPU device.
// Run on the GPU host:
//
//	go test -tags gpu -count=1 -v -run 'GPUBatchGraph|GPUServing' ./sampler/
//	go test -tags gpu -count=1 -run '^$' -bench GPUServingCost -benchtime 2000x ./sampler/

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime/debug"
	"testing"

	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/runtime/cpu"
	"github.com/gumbel-go/gumbel/sampler"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// servingParams are gpuParams with log-probabilities, top log-probabilities and
// penalties on some rows.
func servingParams(n int, step uint64) []sampler.Params {
	params := gpuParams(n, step)
	for i := range params {
		params[i].Logprobs = i%2 == 0
		params[i].TopLogprobs = (i % 3) * 3
		if i%4 == 1 {
			params[i].RepetitionPenalty, params[i].FrequencyPenalty, params[i].PresencePenalty = 1.2, 0.4, 0.3
		}
	}
	return params
}

// installServing gives every sampler the same processors: tracked rows 1 and 5 (with a
// prompt), a bias on row 2, an allowed list on row 3, bans on row 4.
func installServing(t *testing.T, vocab int, samplers ...*sampler.Sampler) {
	t.Helper()
	allowed := make([]int32, 0, vocab/3)
	for tok := 0; tok < vocab; tok += 3 {
		allowed = append(allowed, int32(tok))
	}
	for _, s := range samplers {
		require.NoError(t, s.TrackTokens(1, vocab, []int32{1, 2, 3, 500}))
		require.NoError(t, s.TrackTokens(5, vocab, nil))
		require.NoError(t, s.SetLogitBias(2, vocab, []int32{0, 9, 77}, []float32{6, -2, 3}))
		require.NoError(t, s.SetAllowedTokens(3, vocab, allowed))
		require.NoError(t, s.SetBannedTokens(4, vocab, []int32{4, 5, 6, 100}))
	}
}

// uploadTo copies host float32 logits into a new device buffer that the test frees.
func uploadTo(t testing.TB, dev runtime.Device, logits []float32) runtime.Buffer {
	t.Helper()
	buf, err := dev.Alloc(4 * len(logits))
	require.NoError(t, err)
	t.Cleanup(func() { _ = buf.Free() })
	st := dev.DefaultStream()
	require.NoError(t, st.CopyToDevice(buf, 0, runtime.BytesOf(logits)))
	require.NoError(t, st.Synchronize())
	return buf
}

func gpuLogprobTolerance(want float32) float64 {
	// ABI.md: editions agree to about 1e-5 relative (the GPU's fast exp).
	return 3e-5*max(1, math.Abs(float64(want))) + 1e-5
}

// TestGPUBatchGraphReplay captures one Batch.Launch in a CUDA graph, replays it 1000
// times, and checks every replay's tokens (and at the end the device-kept counts)
// against uncaptured Sample calls with the same steps on another sampler.
func TestGPUBatchGraphReplay(t *testing.T) {
	gpu := openGPU(t)
	st, err := gpu.NewStream()
	require.NoError(t, err)
	defer st.Close()
	gc, ok := st.(runtime.GraphCapturer)
	if !ok {
		t.Skipf("%s streams cannot capture graphs", gpu.Info().Backend)
	}
	const rows, vocab = 8, qwenVocab
	for _, tc := range []struct {
		draws, replays int
		huge           bool // logits near 1e6 in most rows: gumbel_exact finishes their draws
	}{{1, 1000, false}, {3, 200, false}, {2, 100, true}} {
		t.Run(fmt.Sprintf("draws=%d/huge=%v", tc.draws, tc.huge), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(71, uint64(tc.draws)))
			logits := make([]float32, rows*vocab)
			for i := range logits {
				logits[i] = float32(rng.NormFloat64() * 2)
				if tc.huge && i/vocab != 6 {
					logits[i] = 1e6 + float32(rng.IntN(3))
				}
			}
			lg := sampler.Logits{Data: uploadTo(t, gpu, logits), Rows: rows, Vocab: vocab}
			s := gpuSampler(t, gpu, sampler.Options{Seed: 5, Stream: st})
			ref := gpuSampler(t, gpu, sampler.Options{Seed: 5})
			installServing(t, vocab, s, ref)
			b, err := s.NewBatch(rows, vocab, sampler.Float32, tc.draws)
			require.NoError(t, err)
			defer b.Close()
			params := servingParams(rows, 1<<40)
			for i, p := range params {
				require.NoError(t, b.SetRow(i, p))
			}
			require.NoError(t, gc.BeginCapture())
			launchErr := b.Launch(lg)
			g, err := gc.EndCapture()
			require.NoError(t, launchErr)
			require.NoError(t, err)
			defer g.Close()

			stepped := make([]sampler.Params, rows)
			var got, want sampler.Result
			mismatches := 0
			for k := range tc.replays {
				require.NoError(t, g.Launch(st))
				require.NoError(t, b.Read(&got))
				for i, p := range params {
					stepped[i] = p
					stepped[i].Step += uint64(k * tc.draws)
				}
				require.NoError(t, ref.SampleN(lg, stepped, tc.draws, &want))
				for i := range rows {
					require.NoError(t, got.Errs[i], "replay %d row %d", k, i)
					for z := range tc.draws {
						o := i*tc.draws + z
						if want.Tokens[o] != got.Tokens[o] {
							mismatches++
							t.Errorf("replay %d row %d draw %d (%s): graph %d, Sample %d", k, i, z, got.Routes[i], got.Tokens[o], want.Tokens[o])
						}
					}
				}
				if mismatches > 10 {
					t.FailNow()
				}
			}
			countsA, countsB := make([]uint32, vocab), make([]uint32, vocab)
			for _, row := range []int{1, 5} {
				require.NoError(t, s.TokenCounts(row, countsA))
				require.NoError(t, ref.TokenCounts(row, countsB))
				assert.Equal(t, countsB, countsA, "row %d's counts after %d replays", row, tc.replays)
			}
			assert.Zero(t, testing.AllocsPerRun(100, func() { _ = g.Launch(st) }), "a replay allocates nothing")
			require.NoError(t, st.Synchronize())
		})
	}
}

// TestGPUServingMatchesCPU: log-probabilities, top log-probabilities, processors, draws
// with and without replacement, and the device-kept counts, on the GPU and on the CPU
// device (the reference edition).
func TestGPUServingMatchesCPU(t *testing.T) {
	gpu := openGPU(t)
	host, err := cpu.Open()
	require.NoError(t, err)
	defer host.Close()
	for _, vocab := range []int{1000, qwenVocab} {
		t.Run(fmt.Sprintf("V=%d", vocab), func(t *testing.T) {
			const rows, steps = 9, 4
			rng := rand.New(rand.NewPCG(9, uint64(vocab)))
			logits := make([]float32, rows*vocab)
			for i := range logits {
				logits[i] = float32(rng.NormFloat64() * 2)
			}
			g := gpuSampler(t, gpu, sampler.Options{Seed: 3})
			c := gpuSampler(t, host, sampler.Options{Seed: 3})
			installServing(t, vocab, g, c)
			params := servingParams(rows, 17)
			var want, got sampler.Result
			compare := func(what string) {
				t.Helper()
				require.Equal(t, len(want.Tokens), len(got.Tokens), what)
				assert.Equal(t, want.Tokens, got.Tokens, what)
				for i := range rows {
					assert.Equal(t, want.Errs[i] == nil, got.Errs[i] == nil, "%s row %d: %v against %v", what, i, want.Errs[i], got.Errs[i])
				}
				require.Equal(t, len(want.Logprobs), len(got.Logprobs), what)
				for o, w := range want.Logprobs {
					gl := got.Logprobs[o]
					for _, f := range [][2]float32{{w.Raw, gl.Raw}, {w.Processed, gl.Processed}, {w.RawLSE, gl.RawLSE}, {w.ProcessedLSE, gl.ProcessedLSE}} {
						if math.IsNaN(float64(f[0])) {
							assert.True(t, math.IsNaN(float64(f[1])), "%s slot %d: NaN on the CPU", what, o)
							continue
						}
						assert.InDelta(t, f[0], f[1], gpuLogprobTolerance(f[0]), "%s slot %d", what, o)
					}
				}
				require.Equal(t, len(want.Top), len(got.Top), what)
				for i := range want.Top {
					assert.Equal(t, want.Top[i].Count, got.Top[i].Count, "%s row %d", what, i)
					assert.Equal(t, want.Top[i].Tokens, got.Top[i].Tokens, "%s row %d", what, i)
					for j := range want.Top[i].Count {
						assert.InDelta(t, want.Top[i].Logprobs[j], got.Top[i].Logprobs[j], gpuLogprobTolerance(want.Top[i].Logprobs[j]), "%s row %d entry %d", what, i, j)
					}
				}
			}
			for step := range uint64(steps) {
				for i := range params {
					params[i].Step = 17 + step*10
				}
				require.NoError(t, c.SampleFloat32(logits, vocab, params, &want))
				require.NoError(t, g.SampleFloat32(logits, vocab, params, &got))
				compare(fmt.Sprintf("Sample step %d", step))
				require.NoError(t, c.SampleNFloat32(logits, vocab, params, 3, &want))
				require.NoError(t, g.SampleNFloat32(logits, vocab, params, 3, &got))
				compare(fmt.Sprintf("SampleN step %d", step))
				distinct := make([]sampler.Params, rows)
				for i, p := range params {
					distinct[i] = p
					distinct[i].TopK, distinct[i].TopP, distinct[i].MinP = 0, 0, 0
				}
				// Without filtered rows, topn runs beside gumbel_argmax (Sampler.sharesDevice).
				require.NoError(t, c.SampleFloat32(logits, vocab, distinct, &want))
				require.NoError(t, g.SampleFloat32(logits, vocab, distinct, &got))
				compare(fmt.Sprintf("Sample without filters step %d", step))
				require.NoError(t, c.SampleDistinctFloat32(logits, vocab, distinct, 5, &want))
				require.NoError(t, g.SampleDistinctFloat32(logits, vocab, distinct, 5, &got))
				compare(fmt.Sprintf("SampleDistinct step %d", step))
			}
			countsC, countsG := make([]uint32, vocab), make([]uint32, vocab)
			for _, row := range []int{1, 5} {
				require.NoError(t, c.TokenCounts(row, countsC))
				require.NoError(t, g.TokenCounts(row, countsG))
				assert.Equal(t, countsC, countsG, "row %d's counts", row)
			}
		})
	}
}

// TestGPUServingAllocs: with every serving feature on, a warm Sample, SampleN,
// SampleDistinct and Batch.Launch allocate nothing on the Go heap.
func TestGPUServingAllocs(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	gpu := openGPU(t)
	const rows, vocab = 8, qwenVocab
	logits := make([]float32, rows*vocab)
	for i := range logits {
		logits[i] = float32(i%977) / 100
	}
	lg := sampler.Logits{Data: uploadTo(t, gpu, logits), Rows: rows, Vocab: vocab}
	s := gpuSampler(t, gpu, sampler.Options{})
	installServing(t, vocab, s)
	params := servingParams(rows, 1)
	distinct := make([]sampler.Params, rows)
	for i := range distinct {
		distinct[i] = sampler.Params{Temperature: 0.8, Logprobs: true, Step: uint64(i)}
	}
	b, err := s.NewBatch(rows, vocab, sampler.Float32, 1)
	require.NoError(t, err)
	defer b.Close()
	for i, p := range params {
		require.NoError(t, b.SetRow(i, p))
	}
	var res sampler.Result
	for name, f := range map[string]func(){
		"Sample":         func() { _ = s.Sample(lg, params, &res) },
		"SampleN":        func() { _ = s.SampleN(lg, params, 4, &res) },
		"SampleDistinct": func() { _ = s.SampleDistinct(lg, distinct, 5, &res) },
		"Batch.Launch":   func() { _ = b.Launch(lg) },
		"Batch.Read":     func() { _ = b.Read(&res) },
	} {
		f()
		assert.Zero(t, testing.AllocsPerRun(50, f), name)
	}
	require.NoError(t, s.Stream().Synchronize())
}

// BenchmarkGPUServingCost times the device work of one sampling step at V = 151936,
// batch 8 (Relaunch between two events), plain and with each serving feature: the issue
// asks that log-probabilities cost under 10% of the plain step.
func BenchmarkGPUServingCost(b *testing.B) {
	gpu := openGPU(b)
	const rows, vocab = 8, qwenVocab
	rng := rand.New(rand.NewPCG(2, 2))
	logits := make([]float32, rows*vocab)
	for i := range logits {
		logits[i] = float32(rng.NormFloat64() * 2)
	}
	lg := sampler.Logits{Data: uploadTo(b, gpu, logits), Rows: rows, Vocab: vocab}
	base := sampler.Params{Temperature: 0.8}
	for _, tc := range []struct {
		name   string
		edit   func(*sampler.Params)
		draws  int
		tracks bool
	}{
		{"plain", func(*sampler.Params) {}, 1, false},
		{"logprobs", func(p *sampler.Params) { p.Logprobs = true }, 1, false},
		{"top5", func(p *sampler.Params) { p.TopLogprobs = 5 }, 1, false},
		{"logprobs+top5", func(p *sampler.Params) { p.Logprobs, p.TopLogprobs = true, 5 }, 1, false},
		{"penalties", func(p *sampler.Params) { p.FrequencyPenalty, p.RepetitionPenalty = 0.5, 1.2 }, 1, true},
		{"draws4", func(*sampler.Params) {}, 4, false},
	} {
		b.Run(tc.name, func(b *testing.B) {
			s := gpuSampler(b, gpu, sampler.Options{})
			params := make([]sampler.Params, rows)
			for i := range params {
				params[i] = base
				params[i].RequestID = uint64(i)
				tc.edit(&params[i])
				if tc.tracks {
					require.NoError(b, s.TrackTokens(i, vocab, []int32{1, 2, 3}))
				}
			}
			var res sampler.Result
			require.NoError(b, s.SampleN(lg, params, tc.draws, &res))
			start, err := gpu.NewEvent()
			require.NoError(b, err)
			defer start.Close()
			end, err := gpu.NewEvent()
			require.NoError(b, err)
			defer end.Close()
			st := s.Stream()
			require.NoError(b, st.Record(start))
			for b.Loop() {
				if err := s.Relaunch(); err != nil {
					b.Fatal(err)
				}
			}
			require.NoError(b, st.Record(end))
			require.NoError(b, end.Synchronize())
			ms, err := end.ElapsedSince(start)
			require.NoError(b, err)
			b.ReportMetric(float64(ms)*1000/float64(b.N), "device-us/step")
		})
	}
}
