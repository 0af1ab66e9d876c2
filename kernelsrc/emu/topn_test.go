package emu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
)

// This file drives the topn kernel's two ways of merging (topn.cuh). A block first tries
// a thresholded selection (gb_topn_select, gb_topn_select_published), which gives up when
// a thread let go of keys at or above its threshold or when too many keys reach it. Then
// the per-key merge (gb_topn_merge) takes over: a thread keeps only its GB_TOPN_THREAD (4)
// largest keys, so a row whose top n (n > 4) bunches in one thread's elements, or in the
// published keys one thread of the last block reads, makes the block pass again below the
// keys it is sure of. The rows below put their largest values there on purpose, and the
// outputs must still be the Go edition's.

// topnThreadKeys is GB_TOPN_THREAD: with n at most this, no further pass is ever needed.
const topnThreadKeys = 4

// threadElems lists the elements thread t of a block of T threads scans in [start, end),
// in the order it meets them.
func threadElems(start, end, threads, t int) []int {
	var out []int
	for g := start + 4*t; g < end; g += 4 * threads {
		for j := g; j < min(g+4, end); j++ {
			out = append(out, j)
		}
	}
	return out
}

// hotValues are h values far above a background of llmRow's without its peaks (every
// value below 20): distinct, tied, or at the magnitude where perturbed scores need the
// exact comparison.
func hotValues(r *rand.Rand, h int) []float32 {
	out := make([]float32, h)
	base := float32(40)
	step := float32(0.25) // exact in every dtype near 40
	switch r.IntN(4) {
	case 0:
		step = 0 // ties: ranked by index
	case 1:
		base = 5000 // scores past GB_EXACT_LIMIT
		step = 32
	}
	for i := range out {
		out[i] = base + step*float32(r.IntN(h))
	}
	return out
}

// background is a row of llmRow's bulk, sometimes with -Inf holes, every value below 20.
func background(r *rand.Rand, v int) []float32 {
	row := make([]float32, v)
	holes := r.IntN(3) == 0
	for i := range row {
		row[i] = float32(math.Max(-19, math.Min(19, r.NormFloat64()*2)))
		if holes && r.IntN(3) == 0 {
			row[i] = float32(math.Inf(-1))
		}
	}
	return row
}

// oneThreadRow puts h hot values among one thread's elements of one block, the rest of
// the row below them: the block's top n bunches in that thread.
func oneThreadRow(r *rand.Rand, v, s, threads, h int) []float32 {
	row := background(r, v)
	x := r.IntN(s)
	start, end := chunkOf(v, s, x)
	if start == end {
		return row
	}
	t := r.IntN(min(threads, (end-start+3)/4))
	elems := threadElems(start, end, threads, t)
	for i, val := range hotValues(r, min(h, len(elems))) {
		row[elems[i]] = val
	}
	return row
}

// publishedRow puts hot values at the top of blocks chosen so that thread 0 of the last
// block, which reads the published words 0, T, 2T, ... (word w: block w / 20's key of rank
// w % 20), reads as many of the row's top n as it can: a word of rank k costs the block k+1
// hot values, cheapest first, n in all at most.
func publishedRow(r *rand.Rand, v, s, threads, n int) []float32 {
	row := background(r, v)
	need := make([]int, s)
	total := 0
	for rank := range maxTopN {
		for w := 0; w < s*maxTopN; w += threads {
			b := w / maxTopN
			if w%maxTopN != rank || need[b] > rank {
				continue
			}
			if total-need[b]+rank+1 > n {
				continue
			}
			total += rank + 1 - need[b]
			need[b] = rank + 1
		}
	}
	for b, k := range need {
		start, end := chunkOf(v, s, b)
		for i, val := range hotValues(r, min(k, end-start)) {
			row[start+i] = val
		}
	}
	return row
}

// topnCands is GB_TOPN_CANDS, the most candidates a thresholded selection ranks.
const topnCands = 32*maxTopN - 384

// crowdedRow fills the top n of h blocks with hot values, h < n chosen so that their
// h·n published keys outnumber topnCands: with S >= n blocks each list's largest key is
// a probe, so the threshold is the (n - h)-th largest of the other blocks' maxima, every
// hot key lies above it, and the last block's selection gives up. The per-key merge then
// passes again: the hot blocks whose largest word thread 0 of the last block reads (as
// in publishedRow) come first and hold the largest values, more than its list keeps.
// Other n leave the background.
func crowdedRow(r *rand.Rand, v, s, threads, n int) []float32 {
	row := background(r, v)
	h := topnCands/n + 1
	if h >= n || s < n {
		return row
	}
	blocks := r.Perm(s)
	first := func(b int) bool { return b*maxTopN%threads == 0 }
	sort.SliceStable(blocks, func(i, j int) bool { return first(blocks[i]) && !first(blocks[j]) })
	for _, b := range blocks[:h] {
		start, end := chunkOf(v, s, b)
		for i := start; i < min(start+n, end); i++ {
			row[i] = 40 + 0.25*float32(r.IntN(n))
		}
		if first(b) {
			row[start] = 60 + float32(b) // exact in every dtype
		}
	}
	return row
}

// sortedRow is a row of distinct values in descending or ascending order.
func sortedRow(r *rand.Rand, v int) []float32 {
	row := make([]float32, v)
	down := r.IntN(2) == 0
	for i := range row {
		k := i
		if !down {
			k = v - 1 - i
		}
		row[i] = 19 - float32(k)*(30/float32(v)) // spaced enough to stay distinct in bf16 for the top
	}
	return row
}

// TestCUDATopNBunchedMatchesGoEdition runs topn on rows whose top n bunches in one thread
// (one block and split, every dtype, plain and perturbed, processors, ties, -Inf, NaN,
// scores that need the exact comparison, tiny vocabularies and ones not a multiple of 4)
// and requires the Go edition's entries, further passes over a block's chunk and over the
// published lists on plain and perturbed rows, and none where n <= GB_TOPN_THREAD.
func TestCUDATopNBunchedMatchesGoEdition(t *testing.T) {
	r := rand.New(rand.NewPCG(20240520, 4))
	type shape struct{ s, block, warp, v int }
	shapes := []shape{{1, 32, 8, 1001}, {1, 16, 8, 130}, {1, 24, 8, 37}, {1, 16, 8, 5}, {3, 32, 16, 1001},
		{2, 16, 8, 255}, {16, 16, 8, 1001}, {16, 16, 8, 1003}, {8, 16, 8, 640}, {32, 16, 8, 1001},
		{1, 16, 8, 4001}, {2, 16, 8, 8191},
		// 64 published lists' probes, ranked by several threads each (gb_rank_keys).
		{64, 256, 32, 64 * 256}}
	ns := []uint32{5, 8, 13, 20, 20, 4, 1}
	var ls []*launch
	for _, sh := range shapes {
		for dt := range 3 {
			l := &launch{kernel: kernelTopN, dtype: dt, gridX: sh.s, block: sh.block, warp: sh.warp, vocab: sh.v,
				stride: stride(r, sh.v), slack: r.IntN(16), slots: 6}
			l.name = fmt.Sprintf("topn bunched dtype=%d S=%d V=%d T=%d warp=%d", dt, sh.s, sh.v, sh.block, sh.warp)
			l.withProcessors(r)
			l.rows(r, func(p *rowParams) {
				p.TopN = ns[r.IntN(len(ns))]
				if r.IntN(2) == 0 {
					p.Flags |= abi.FlagPerturbed
					for _, f := range []abi.Flags{abi.FlagBias, abi.FlagMask, abi.FlagPenalties} {
						if r.IntN(3) == 0 {
							p.Flags |= f
						}
					}
					p.RepetitionPenalty, p.FrequencyPenalty, p.PresencePenalty = 1.2, 0.5, 0.25
				}
				l.bitmaskFlag(r, p) // plain rows rank raw logits, which it must leave alone
			})
			rows := make(map[int][]float32, l.slots)
			for y := range l.params {
				p := &l.params[y]
				n := int(p.TopN)
				switch k := r.IntN(9); {
				case k < 6 && sh.s >= maxTopN:
					// Processors and a bad temperature would move the hot values.
					p.TopN, p.Flags, p.Temperature = maxTopN, p.Flags&abi.FlagPerturbed, 1
					rows[int(p.Row)] = crowdedRow(r, sh.v, sh.s, sh.block, maxTopN)
				case k < 3:
					rows[int(p.Row)] = oneThreadRow(r, sh.v, sh.s, sh.block, n)
				case k < 5 && sh.s > 1:
					rows[int(p.Row)] = publishedRow(r, sh.v, sh.s, sh.block, n)
				case k < 6:
					rows[int(p.Row)] = sortedRow(r, sh.v)
				default:
					rows[int(p.Row)] = rowShapes[r.IntN(len(rowShapes))](r, sh.v)
				}
				if r.IntN(12) == 0 {
					rows[int(p.Row)][r.IntN(sh.v)] = float32(math.NaN())
				}
			}
			l.fillRows(r, func(r *rand.Rand, v int) []float32 { return background(r, v) })
			for s, row := range rows {
				for i, x := range row {
					l.store(s*l.stride+i, x)
				}
			}
			ls = append(ls, l)
		}
	}
	got := decodeResults(t, runDriver(t, encodeJob(t, ls)), ls)
	matchGo(t, ls, got)
	cov := map[string]int{}
	for i, l := range ls {
		for y, p := range l.params {
			chunk, lists := got[i].passes[4*y], got[i].passes[4*y+1]
			selChunk, selLists := got[i].passes[4*y+2], got[i].passes[4*y+3]
			if p.TopN <= topnThreadKeys {
				require.Zero(t, chunk+lists, "%s: launch row %d (%+v): n <= GB_TOPN_THREAD passed again", l.name, y, p)
			}
			kind := "plain"
			if p.Flags&abi.FlagPerturbed != 0 {
				kind = "perturbed"
			}
			if chunk > 0 {
				cov["chunk passes "+kind]++
			}
			if lists > 0 {
				cov["list passes "+kind]++
			}
			if selChunk > 0 {
				cov["chunk selected "+kind]++
			}
			if selLists > 0 {
				cov["lists selected "+kind]++
			}
		}
	}
	t.Logf("rows that passed again: %v", cov)
	for _, k := range []string{"chunk passes plain", "chunk passes perturbed", "list passes plain",
		"list passes perturbed", "chunk selected plain", "chunk selected perturbed", "lists selected plain",
		"lists selected perturbed"} {
		require.Positive(t, cov[k], "no row took %q", k)
	}
}
