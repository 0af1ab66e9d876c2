package emu

// Exact scores (ABI.md, "Exact scores"): Gumbel rows whose |x'/T| reaches the float32
// score's limits, which gumbel_argmax leaves with status 5 and gumbel_exact finishes.

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
// above small ones, values near ±MaxFloat32, and a row huge in one part only, so that
// some blocks' winners are exact values and others are not.
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

// exactLaunches is the workload of exact scores: gumbel_argmax (then gumbel_exact) over
// every dtype, one block and split, one and several draws, with and without processors,
// records, RECORD and ADVANCE, on exactRows and a few ordinary rows.
func exactLaunches(r *rand.Rand) []*launch {
	var ls []*launch
	for dt := range 3 {
		for _, s := range []int{1, 3, 16} {
			for _, d := range []int{1, 3} {
				v := []int{37, 257, 1001}[r.IntN(3)]
				block, warp := emuShape(r, s)
				l := &launch{kernel: kernelGumbel, dtype: dt, gridX: s, gridZ: d, block: block, warp: warp, vocab: v,
					stride: stride(r, v), slack: r.IntN(16), slots: 6, logprobs: r.IntN(2) == 0}
				l.name = fmt.Sprintf("exact dtype=%d S=%d D=%d V=%d T=%d warp=%d", dt, s, d, v, block, warp)
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
						l.featureFlags(r, p)
						if !l.logprobs {
							p.Flags &^= abi.FlagLogprobs
						}
					}
					p.Temperature = exactTemperatures[r.IntN(len(exactTemperatures))]
					if l.logprobs && r.IntN(2) == 0 {
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
// tokens, statuses, records, counts and steps on rows whose scores need the exact
// comparison.
func TestCUDAExactScoresMatchGoEdition(t *testing.T) {
	ls := exactLaunches(rand.New(rand.NewPCG(20261201, 21)))
	got := decodeResults(t, runDriver(t, encodeJob(t, ls)), ls)
	seen, _ := matchGo(t, ls, got)
	n := exactCoverage(ls)
	t.Logf("%d launches; slots by status %v; %d launch rows need the exact comparison", len(ls), seen, n)
	require.Greater(t, n, 40, "too few rows reach ExactLimit")
	for i, o := range got {
		require.NotContains(t, o.status, int32(abi.StatusExact), "%s: a draw left unfinished", ls[i].name)
	}
}
