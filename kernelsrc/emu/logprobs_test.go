package emu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// This file tests the log-probability arithmetic of the CUDA edition on rows whose logits are
// large: a frequency penalty of -0.25 on a saturated count (0x7FFFFFFF) lifts a logit by
// 2^29, where float32's spacing is 64, so fl(m + log s) rounds back to the maximum m and
// x - LSE reads 0 for every token that ties with it. Found on an H200 (topn, bf16, S = 37,
// V = 151936): the kernels must take each log-probability from the set's maximum,
// fl(fl(x - m) - log s), as the Go edition's float64 arithmetic does.

// strictLogProbTolerance is the tolerance of one log-probability word on its own: the
// launch tests compare a record's words within 1e-5 of the record's largest magnitude,
// which next to an LSE of 5e8 would let a log-probability of 0 pass for -9.2.
func strictLogProbTolerance(want float32) float64 {
	return 1e-5 * max(1, math.Abs(float64(want)))
}

// matchGoStrict is matchGo followed by requireStrictLogProbs, on one run of the Go
// edition.
func matchGoStrict(t *testing.T, ls []*launch, got []outcome) (seen [4]int, kinds map[string]int) {
	t.Helper()
	wants := goEdition(t, ls)
	seen, kinds = matchOutcomes(t, ls, wants, got)
	requireStrictLogProbs(t, ls, wants, got)
	return seen, kinds
}

// requireStrictLogProbs compares the log-probabilities themselves (topn values, record
// words 0 and 1 of slots with status 0) with the Go edition's outcomes wants, word by
// word.
func requireStrictLogProbs(t *testing.T, ls []*launch, wants, got []outcome) {
	t.Helper()
	checked := 0
	for i, l := range ls {
		want := wants[i]
		if l.kernel == kernelTopN {
			for o, bits := range want.status {
				w := math.Float32frombits(uint32(bits))
				if want.tokens[o] < 0 {
					continue
				}
				h := math.Float32frombits(uint32(got[i].status[o]))
				assert.InDelta(t, w, h, strictLogProbTolerance(w), "%s: topn value %d", l.name, o)
				checked++
			}
			continue
		}
		for o, st := range want.status {
			if st != 0 || want.logprobs == nil {
				continue
			}
			for k := range 2 {
				w, h := want.logprobs[4*o+k], got[i].logprobs[4*o+k]
				assert.InDelta(t, w, h, strictLogProbTolerance(w), "%s: slot %d record word %d", l.name, o, k)
				checked++
			}
		}
	}
	require.Positive(t, checked, "no log-probability was compared")
}

// penalisedCounts returns counts for slots rows of v elements: mostly saturated output
// counts (some with the prompt bit), so that a frequency penalty of -0.25 lifts most
// logits to 2^29, and a few zero.
func penalisedCounts(r *rand.Rand, slots, v int) []uint32 {
	c := make([]uint32, slots*v)
	for i := range c {
		switch r.IntN(8) {
		case 0:
			c[i] = 0
		case 1:
			c[i] = 0xFFFFFFFF
		default:
			c[i] = 0x7FFFFFFF
		}
	}
	return c
}

// fillRows stores shape(r, vocab) in every slot of the launch (stride padding NaN).
func (l *launch) fillRows(r *rand.Rand, shape func(*rand.Rand, int) []float32) {
	n := (l.slots-1)*l.stride + l.vocab
	l.logits = make([]byte, n*l.elemSize())
	for i := range n {
		l.store(i, float32(math.NaN()))
	}
	for s := range l.slots {
		for i, x := range shape(r, l.vocab) {
			l.store(s*l.stride+i, x)
		}
	}
}

// hugeTiedRow holds tied logits 2^29 - k * 2^22, k < 3 (exact in bf16; beyond f16's
// range, so the launches below use f32 and bf16): the raw log-sum-exp rounds back to its
// maximum.
func hugeTiedRow(r *rand.Rand, v int) []float32 {
	row := make([]float32, v)
	for i := range row {
		row[i] = float32(1<<29) - float32(r.IntN(3))*float32(1<<22)
	}
	return row
}

// TestCUDATopNFullWidthPenalisedTies is the H200 launch: topn_bf16, S = 37, T = 1024,
// warp 32, V = 151936, N = 20, a row of tied bf16 logits lifted to 2^29 by the penalty,
// ranked by Gumbel scores. One row: the full-width emulation is slow (about a minute).
func TestCUDATopNFullWidthPenalisedTies(t *testing.T) {
	r := rand.New(rand.NewPCG(20261130, 7))
	l := &launch{kernel: kernelTopN, dtype: dtBF16, gridX: 37, block: 1024, warp: 32, vocab: 151936,
		stride: 151936, slots: 2, name: "topn bf16 S=37 T=1024 V=151936 penalised ties"}
	l.fillRows(r, tiedRow)
	l.bias = make([]float32, l.slots*l.vocab)
	l.counts = penalisedCounts(r, l.slots, l.vocab)
	l.rows(r, func(p *rowParams) {
		p.Temperature, p.TopN = 1, 20
		p.Flags = abi.FlagPerturbed | abi.FlagPenalties
		p.RepetitionPenalty, p.FrequencyPenalty, p.PresencePenalty = 1, -0.25, 0.4
	})
	ls := []*launch{l}
	got := decodeResults(t, runDriver(t, encodeJob(t, ls)), ls)
	matchGoStrict(t, ls, got)
	row := int(l.params[0].Row)
	for j := range maxTopN {
		v := math.Float32frombits(uint32(got[0].status[row*maxTopN+j]))
		require.Less(t, v, float32(-5), "entry %d: the log-probability of one of thousands of tied tokens", j)
	}
}

// TestCUDALargeLogitLogProbs runs the same numerics on small launches: topn plain over
// raw logits near 2^29 and perturbed over penalised ones, and gumbel_argmax records
// (greedy, temperature 1 and 0.7, one block and split) of penalised rows.
func TestCUDALargeLogitLogProbs(t *testing.T) {
	r := rand.New(rand.NewPCG(20261130, 8))
	var ls []*launch
	for _, dt := range []int{dtF32, dtBF16} {
		for _, s := range []int{1, 3} {
			for _, kernel := range []int{kernelGumbel, kernelCategorical, kernelTopN} {
				for _, plain := range []bool{false, true} {
					if kernel == kernelGumbel && plain {
						continue
					}
					if kernel == kernelCategorical && s > 1 {
						continue // one block per row
					}
					l := &launch{kernel: kernel, dtype: dt, gridX: s, block: 32, warp: 8, vocab: 1001, stride: 1003,
						slots: 5}
					l.name = fmt.Sprintf("large logits %s dtype=%d S=%d plain=%v", kernelNames[kernel], dt, s, plain)
					if plain {
						l.fillRows(r, hugeTiedRow)
					} else {
						l.fillRows(r, tiedRow)
						l.bias = make([]float32, l.slots*l.vocab)
						l.counts = penalisedCounts(r, l.slots, l.vocab)
					}
					l.logprobs = kernel != kernelTopN
					temps := []float32{0, 1, 0.7, 1}
					l.rows(r, func(p *rowParams) {
						p.Temperature = temps[r.IntN(len(temps))]
						p.TopN = 20
						if !plain {
							p.Flags = abi.FlagPenalties
							p.RepetitionPenalty, p.FrequencyPenalty, p.PresencePenalty = 1, -0.25, 0.4
						}
						if kernel == kernelTopN && !plain {
							p.Flags |= abi.FlagPerturbed
						}
						if kernel != kernelTopN {
							p.Flags |= abi.FlagLogprobs
						}
						if kernel == kernelCategorical && p.Temperature != 0 {
							// The filtered draw's record (greedy rows take the greedy record).
							p.TopK = 7
						}
					})
					ls = append(ls, l)
				}
			}
		}
	}
	got := decodeResults(t, runDriver(t, encodeJob(t, ls)), ls)
	seen, _ := matchGoStrict(t, ls, got)
	require.Positive(t, seen[0], "no slot sampled a token")
}

// scaledRow returns a row shape: llmRow's logits times scale, plus offset.
func scaledRow(scale, offset float32) func(*rand.Rand, int) []float32 {
	return func(r *rand.Rand, v int) []float32 {
		row := llmRow(r, v)
		for i := range row {
			row[i] = row[i]*scale + offset
		}
		return row
	}
}

// TestCUDALargeMagnitudeLogProbs checks gumbel_argmax's records of rows without
// processors at every magnitude of logit, word by word: LLM logits, logits near 2^21 and
// 2^22 (float32's spacing there is 1/4 and 1/2, which a log-sum-exp that scaled its
// reference before subtracting it, fl(m log2 e), would lose), one logit of 1e7 among LLM
// logits (one thread's reference far above the others'), logits near ±2^27, a spread of
// a million, tied logits near 2^29, rows holding ±3e38 (several members at 3e38 each
// have log-probability -log 2 or less, which a float LSE would round to 0, and the
// scaled values overflow at small temperatures) and rows of -FLT_MAX alone, greedy and
// at temperatures on both sides of 1, split or not.
func TestCUDALargeMagnitudeLogProbs(t *testing.T) {
	ls := largeMagnitudeLaunches(rand.New(rand.NewPCG(20261130, 9)), []int{1, 3}, 1001, 1003, 32, 8)
	got := decodeResults(t, runDriver(t, encodeJob(t, ls)), ls)
	seen, _ := matchGoStrict(t, ls, got)
	require.Positive(t, seen[0], "no slot sampled a token")
}

// loneRow returns a row shape: llmRow's logits with one of them set to x.
func loneRow(x float32) func(*rand.Rand, int) []float32 {
	return func(r *rand.Rand, v int) []float32 {
		row := llmRow(r, v)
		row[r.IntN(v)] = x
		return row
	}
}

// magnitudeShape is a row shape of the large-magnitude launches.
type magnitudeShape struct {
	name  string
	shape func(*rand.Rand, int) []float32
}

// magnitudeShapes are the rows of TestCUDALargeMagnitudeLogProbs (see there).
var magnitudeShapes = []magnitudeShape{
	{"llm", llmRow},
	{"far", farRow},
	{"near 2^21", scaledRow(1, 1<<21)},
	{"near 2^22", scaledRow(1, 1<<22)},
	{"lone 1e7", loneRow(1e7)},
	{"-FLT_MAX", scaledRow(0, -math.MaxFloat32)},
	{"near 2^27", scaledRow(1, 1<<27)},
	{"near -2^27", scaledRow(1, -(1 << 27))},
	{"spread 1e6", scaledRow(1e5, 0)},
	{"tied 2^29", hugeTiedRow},
	{"huge", hugeRow},
}

// largeMagnitudeLaunches are gumbel_argmax launches of every magnitude shape in float32
// and bfloat16, split into each of gridXs blocks of block threads (warps of warp lanes),
// with records at temperatures on both sides of 1 and greedy rows.
func largeMagnitudeLaunches(r *rand.Rand, gridXs []int, vocab, stride, block, warp int) []*launch {
	var ls []*launch
	for _, dt := range []int{dtF32, dtBF16} {
		for _, s := range gridXs {
			for _, sh := range magnitudeShapes {
				l := &launch{kernel: kernelGumbel, dtype: dt, gridX: s, block: block, warp: warp, vocab: vocab,
					stride: stride, slots: 6, logprobs: true}
				l.name = fmt.Sprintf("magnitudes %s dtype=%d S=%d V=%d", sh.name, dt, s, vocab)
				l.fillRows(r, sh.shape)
				temps := []float32{1, 0.7, 0.25, 3, 1e-3, 0}
				l.rows(r, func(p *rowParams) {
					p.Temperature = temps[r.IntN(len(temps))]
					p.Flags = abi.FlagLogprobs
				})
				ls = append(ls, l)
			}
		}
	}
	return ls
}

// recordShape is one launch shape of the record-merge tests: S blocks per row of block
// threads, in warps of warp lanes.
type recordShape struct {
	name           string
	warp, block, s int
}

// matchRecordShapes launches each shape on rows of every magnitude (LLM-like, far apart,
// up to 2^27), with rows at T = 0, 1, 0.8 and 2 (greedy rows, one and two log-sum-exps)
// that all ask for a record, and compares every record word with the Go edition's.
func matchRecordShapes(t *testing.T, r *rand.Rand, shapes []recordShape) {
	t.Helper()
	var ls []*launch
	for _, c := range shapes {
		for _, shape := range []func(*rand.Rand, int) []float32{llmRow, farRow, scaledRow(1, 1<<27)} {
			l := &launch{kernel: kernelGumbel, dtype: dtF32, gridX: c.s, block: c.block, warp: c.warp, vocab: 4099,
				stride: 4101, slots: 4, logprobs: true, name: c.name}
			l.fillRows(r, shape)
			temps := []float32{0, 1, 0.8, 2}
			l.rows(r, func(p *rowParams) {
				p.Temperature = temps[r.IntN(len(temps))]
				p.Flags = abi.FlagLogprobs
			})
			ls = append(ls, l)
		}
	}
	got := decodeResults(t, runDriver(t, encodeJob(t, ls)), ls)
	seen, _ := matchGoStrict(t, ls, got)
	require.Positive(t, seen[0], "no slot sampled a token")
}

// TestCUDAFinishingWarpRecord covers every shape of the finishing warp's record merge
// (gb_finish_warp_record): S from 2 to the warp size, so that a set's pairs spread over
// 1, 2, 4 and (64-lane warps, as HIP's CDNA targets) 8 lanes.
func TestCUDAFinishingWarpRecord(t *testing.T) {
	var shapes []recordShape
	for _, c := range []struct{ warp, s int }{
		{8, 2}, {8, 8}, {32, 9}, {32, 16}, {32, 17}, {32, 32}, {64, 24}, {64, 33}, {64, 64},
	} {
		shapes = append(shapes, recordShape{fmt.Sprintf("finishing warp=%d S=%d", c.warp, c.s), c.warp, c.warp, c.s})
	}
	matchRecordShapes(t, rand.New(rand.NewPCG(20261130, 12)), shapes)
}

// TestCUDABlockMergeRecord covers the block merge of a record (gb_block_win with the
// winner's payload: each warp's merge, then warp 0's merge of the warps' pairs and
// payloads) with 2 to 32 warps per block (as many as the warp has lanes, up to 32) on 8-,
// 16-, 32- and 64-lane warps, and S = 1 (the block finishes its draw) and 3 (it publishes
// its pairs). The emulation's other tests run blocks of at most 4 warps.
func TestCUDABlockMergeRecord(t *testing.T) {
	var shapes []recordShape
	for _, c := range []struct{ warp, warps int }{
		{8, 2}, {8, 8}, {16, 9}, {16, 16}, {32, 5}, {32, 17}, {32, 32}, {64, 16},
	} {
		for _, s := range []int{1, 3} {
			name := fmt.Sprintf("block merge warp=%d warps=%d S=%d", c.warp, c.warps, s)
			shapes = append(shapes, recordShape{name, c.warp, c.warp * c.warps, s})
		}
	}
	matchRecordShapes(t, rand.New(rand.NewPCG(20261130, 13)), shapes)
}
