package emu

// Exact scores (ABI.md, "Exact scores"): Gumbel rows whose |x'/T| reaches the float32
// score's limits, which gumbel_argmax leaves with status 5 and gumbel_exact finishes, and
// which perturbed topn and residual's draws from p finish in their last block.

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/stretchr/testify/require"
)

// exactRows are row shapes whose scores reach ExactScale at the temperatures below:
// constant rows of huge values (the noise alone decides), a tie of two large logits
// above small ones, values near ±MaxFloat32, a row huge in one part only, so that some
// blocks' winners are exact values and others are not, and a few ordinary logits among
// -3e38, whose x'/T underflows to -Inf below T = 1 (a topn list then has empty entries).
var exactRows = []func(r *rand.Rand, v int) []float32{
	func(r *rand.Rand, v int) []float32 { return constRow(v, []float32{1e7, -1e9, 3e38, 6e4}[r.IntN(4)]) },
	func(r *rand.Rand, v int) []float32 {
		row := constRow(v, 1)
		row[r.IntN(v)], row[r.IntN(v)] = 25, 25
		return row
	},
	func(r *rand.Rand, v int) []float32 {
		row := make([]float32, v)
		for i := range row {
			row[i] = float32(math.MaxFloat32) * float32(1-r.Float64()*1e-6) * []float32{1, -1}[r.IntN(2)]
		}
		return row
	},
	func(r *rand.Rand, v int) []float32 {
		row := llmRow(r, v)
		for i := range v / 3 {
			row[i] = 6e4 - float32(r.IntN(3))
		}
		return row
	},
	func(r *rand.Rand, v int) []float32 {
		row := constRow(v, -3e38)
		for range 1 + r.IntN(3) {
			row[r.IntN(v)] = float32(r.NormFloat64())
		}
		return row
	},
}

// exactTemperatures are the temperatures of exact rows: ordinary, then small enough
// that |x/T| of ordinary logits reaches ExactScale.
var exactTemperatures = []float32{1, 0.3, 1e-3, 1e-5, 1e-7, 1e-30}

func constRow(v int, c float32) []float32 {
	row := make([]float32, v)
	for i := range row {
		row[i] = c
	}
	return row
}

// exactLaunches is the workload of exact scores, on exactRows and a few ordinary rows
// at exactTemperatures, over every dtype, one block and split, with and without
// processors: gumbel_argmax (then gumbel_exact) with one and several draws, records,
// RECORD and ADVANCE, and perturbed topn (SampleDistinct) with N from 1 to 20.
func exactLaunches(r *rand.Rand) []*launch {
	var ls []*launch
	for dt := range 3 {
		for _, s := range []int{1, 3, 16} {
			for _, d := range []int{1, 3, 0} { // 0: topn
				kernel := kernelGumbel
				if d == 0 {
					kernel = kernelTopN
				}
				v := []int{37, 257, 1001}[r.IntN(3)]
				block, warp := emuShape(r, s)
				l := &launch{kernel: kernel, dtype: dt, gridX: s, gridZ: d, block: block, warp: warp, vocab: v,
					stride: stride(r, v), slack: r.IntN(16), slots: 6, logprobs: kernel == kernelGumbel && r.IntN(2) == 0}
				l.name = fmt.Sprintf("exact %s dtype=%d S=%d D=%d V=%d T=%d warp=%d", kernelNames[kernel], dt, s, d, v, block, warp)
				l.fill(r)
				for row := range l.slots {
					if r.IntN(5) != 0 {
						vals := exactRows[r.IntN(len(exactRows))](r, v)
						for i, x := range vals {
							l.store(row*l.stride+i, x)
						}
					}
				}
				features := r.IntN(2) == 0
				if features {
					l.withProcessors(r)
				}
				l.rows(r, func(p *rowParams) {
					if features {
						l.featureFlags(r, p) // topn ignores LOGPROBS, RECORD and ADVANCE
						if !l.logprobs {
							p.Flags &^= abi.FlagLogprobs
						}
					}
					p.Temperature = exactTemperatures[r.IntN(len(exactTemperatures))]
					switch {
					case kernel == kernelTopN:
						p.Flags |= abi.FlagPerturbed
						p.TopN = []uint32{1, 2, 5, 20}[r.IntN(4)]
					case l.logprobs && r.IntN(2) == 0:
						p.Flags |= abi.FlagLogprobs
					}
				})
				ls = append(ls, l)
			}
		}
	}
	return ls
}

// exactCoverage counts the launch rows whose largest |x'/T| reaches ExactLimit: the rows
// on which some block takes the exact path.
func exactCoverage(ls []*launch) int {
	n := 0
	for _, l := range ls {
		for _, p := range l.params {
			vals := l.rowValues(int(p.Row))
			for _, x := range vals {
				y := float32(x * float32(1/p.Temperature))
				if !math.IsNaN(float64(x)) && !math.IsInf(float64(x), 0) && !(math.Abs(float64(y)) < float64(abi.ExactLimit)) {
					n++
					break
				}
			}
		}
	}
	return n
}

// TestCUDAExactScoresMatchGoEdition: the emulated CUDA edition finds the Go edition's
// tokens, statuses, records, counts and steps, and its perturbed topn lists, on rows
// whose scores need the exact comparison.
func TestCUDAExactScoresMatchGoEdition(t *testing.T) {
	ls := exactLaunches(rand.New(rand.NewPCG(20261201, 21)))
	got := decodeResults(t, runDriver(t, encodeJob(t, ls)), ls)
	seen, kinds := matchGo(t, ls, got)
	n := exactCoverage(ls)
	t.Logf("%d launches; slots by status %v; topn entries %d; %d launch rows need the exact comparison", len(ls),
		seen, kinds["topn perturbed"], n)
	require.Greater(t, n, 60, "too few rows reach ExactLimit")
	for i, o := range got {
		if ls[i].kernel == kernelGumbel {
			require.NotContains(t, o.status, int32(abi.StatusExact), "%s: a draw left unfinished", ls[i].name)
		}
	}
}

// exactResidualRows are the residual positions of exact scores: exactRows at
// exactTemperatures, where the draws from p (a chain's end, a residual without mass)
// need the exact comparison.
var exactResidualRows = residualRows{shapes: exactRows, temps: exactTemperatures}

// TestCUDAExactResidualMatchesGoEdition: the emulated CUDA edition verifies chains over
// rows whose scores need the exact comparison as the Go edition does, every slot's token
// and status, and finishes the draws from p by the exact comparison.
func TestCUDAExactResidualMatchesGoEdition(t *testing.T) {
	r := rand.New(rand.NewPCG(20261201, 24))
	var ls []*launch
	var metas [][]residualMeta
	for dt := range 3 {
		for _, s := range []int{1, 2, 5} {
			v := []int{37, 130, 1001}[r.IntN(3)]
			block, warp := emuShape(r, s)
			l, m := newResidual(t, r, exactResidualRows, dt, s, v, block, warp, []int{1, 2, 3, 1, 2, 1, 1, 2}, r.IntN(2) == 0, true)
			ls, metas = append(ls, l), append(metas, m)
		}
	}
	got := decodeResults(t, runDriver(t, encodeJob(t, ls)), ls)
	cov := checkResidual(t, ls, metas, got)
	t.Logf("%d launches; coverage %v", len(ls), cov)
	require.Greater(t, cov["stop: drawn from p by the exact comparison"], 15, "too few draws from p need the exact comparison")
}
