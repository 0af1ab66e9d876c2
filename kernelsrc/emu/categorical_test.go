package emu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/stretchr/testify/require"
)

// This file tests the categorical kernel's top-k list (categorical.cuh, gb_cat_compact): once
// the keys at or above a radix level's chosen bin fit in GB_CAT_CAP (3072), the rest of
// the row's work runs on a shared-memory list of them; otherwise the full-row path runs.
// Which path a row takes follows from its keys, so the workload reaches each by
// construction: every top-k row of a vocabulary up to 3072 is listed right after the
// first pass; at V = 4099 an all-equal row (every key ties at the k-th) cannot be listed
// and falls back, while LLM-like rows are listed; min-p alone (no top-k, no top-p) lists
// the elements that may pass min-p: LLM-like rows fit, equal rows at V = 4099 and
// min_p = 1e-30 do not.

// equalRow holds one value everywhere: every key ties with the k-th.
func equalRow(r *rand.Rand, v int) []float32 {
	row := make([]float32, v)
	x := float32(r.NormFloat64())
	for i := range row {
		row[i] = x
	}
	return row
}

// sparseRow holds a few finite logits among -Inf, so that k often exceeds the finite
// count and -Inf keys enter the kept set (with weight 0).
func sparseRow(r *rand.Rand, v int) []float32 {
	row := negInfRow(r, v)
	for range 1 + r.IntN(6) {
		row[r.IntN(v)] = float32(r.NormFloat64() * 3)
	}
	return row
}

// steppedRow is LLM-like with a long run of logits equal to the 10th largest, so that a
// small k lands inside a tie of a few dozen keys.
func steppedRow(r *rand.Rand, v int) []float32 {
	row := llmRow(r, v)
	for range 20 + r.IntN(40) {
		row[r.IntN(v)] = 9.5
	}
	return row
}

var listRowShapes = []func(*rand.Rand, int) []float32{
	llmRow, llmRow, llmRow, steppedRow, tiedRow, equalRow, sparseRow, maskedRow, farRow, zeroRow, soleRow,
}

// fillWith lays out the launch's rows like fill, with shapes drawn from the given ones.
func (l *launch) fillWith(r *rand.Rand, shapes []func(*rand.Rand, int) []float32) {
	n := (l.slots-1)*l.stride + l.vocab
	l.logits = make([]byte, n*l.elemSize())
	for i := range n {
		l.store(i, float32(math.NaN()))
	}
	for s := range l.slots {
		row := shapes[r.IntN(len(shapes))](r, l.vocab)
		for i, v := range row {
			l.store(s*l.stride+i, v)
		}
	}
}

// listLaunches is the top-k workload: k from 2 (k = 1 is greedy on the host, but the
// kernel must still get it right) to V - 1, with top-p and min-p, every dtype, several
// draws, logit processors (the bitmask among them), log-probability records and kept-set
// descriptors, vocabularies that take one and several trips of the row passes, and fixed
// rows that fall back at the default capacity.
func listLaunches(r *rand.Rand) []*launch {
	var ls []*launch
	ks := func(v int) []uint32 {
		return []uint32{1, 2, 2, 3, 5, 20, 50, uint32(v / 2), uint32(v - 2), uint32(v - 1)}
	}
	ps := []float32{0, 0, 0.5, 0.9, 0.999}
	mps := []float32{0, 0, 0.05, 1}
	temps := []float32{0.25, 0.7, 1, 1, 1.8}
	filters := func(v int, p *rowParams) {
		k := ks(v)
		p.Temperature = temps[r.IntN(len(temps))]
		p.TopK, p.TopP, p.MinP = k[r.IntN(len(k))], ps[r.IntN(len(ps))], mps[r.IntN(len(mps))]
	}
	for dt := range 3 {
		for _, v := range []int{37, 300, 1001, 4099} {
			block, warp := 16, 8
			if v == 300 {
				block, warp = 96, 32 // three warps: the compaction's warp totals
			}
			d := 1 + r.IntN(2)
			l := &launch{kernel: kernelCategorical, dtype: dt, gridX: 1, gridZ: d, block: block, warp: warp,
				vocab: v, stride: stride(r, v), slack: r.IntN(16), slots: 5}
			l.name = fmt.Sprintf("list dtype=%d D=%d V=%d T=%d warp=%d", dt, d, v, block, warp)
			l.fillWith(r, listRowShapes)
			if r.IntN(2) == 0 {
				l.withProcessors(r)
			}
			l.logprobs = true
			l.rows(r, func(p *rowParams) {
				filters(v, p)
				if l.bias != nil {
					l.featureFlags(r, p)
				} else {
					p.Flags = abi.FlagLogprobs
				}
				if r.IntN(4) == 0 {
					// The kept set's descriptor in place of the record.
					p.Flags |= abi.FlagLogprobs | abi.FlagKeptSet
					p.Token = uint32(r.IntN(v + 1))
				}
			})
			ls = append(ls, l)
		}
	}
	// More tied keys than the default capacity: all-equal rows at V = 4099 fall back at
	// every level, in a launch that also holds listed rows.
	l := &launch{kernel: kernelCategorical, dtype: dtF32, gridX: 1, gridZ: 2, block: 32, warp: 16, vocab: 4099,
		stride: 4099, slots: 4}
	l.name = "list fallback: ties beyond the capacity"
	l.fillWith(r, []func(*rand.Rand, int) []float32{equalRow})
	l.store(2*4099+7, 30) // row 2: one dominant logit among equals
	l.store(3*4099+1, 30)
	l.store(3*4099+4000, 29)
	l.logprobs = true
	l.rows(r, func(p *rowParams) {
		p.Temperature, p.TopK, p.TopP, p.MinP, p.Flags = 1, 2, []float32{0, 0.5}[r.IntN(2)], 0, abi.FlagLogprobs
	})
	ls = append(ls, l)
	// Min-p alone: listed when its candidates fit (LLM-like rows), the full-row path when
	// they do not (equal rows at V = 4099; a min_p so small that nothing is excluded).
	for dt := range 3 {
		l := &launch{kernel: kernelCategorical, dtype: dt, gridX: 1, gridZ: 1 + r.IntN(2), block: 32, warp: 16,
			vocab: 4099, stride: 4099 + dt, slots: 6}
		l.name = fmt.Sprintf("list min-p dtype=%d", dt)
		l.fillWith(r, []func(*rand.Rand, int) []float32{llmRow, llmRow, farRow, equalRow, tiedRow, zeroRow})
		if dt == dtBF16 {
			l.withProcessors(r)
		}
		l.logprobs = true
		l.rows(r, func(p *rowParams) {
			p.Temperature = temps[r.IntN(len(temps))]
			p.MinP = []float32{0.05, 0.05, 0.3, 1, 1e-30}[r.IntN(5)]
			p.Flags = abi.FlagLogprobs
			if l.bias != nil {
				l.featureFlags(r, p)
			}
		})
		ls = append(ls, l)
	}
	return ls
}

// TestCategoricalListMatchesGoEdition runs the top-k workload and requires the Go
// edition's tokens, statuses, records, counts and steps.
func TestCategoricalListMatchesGoEdition(t *testing.T) {
	ls := listLaunches(rand.New(rand.NewPCG(20261130, 46)))
	got := decodeResults(t, runDriver(t, encodeJob(t, ls)), ls)
	seen, kinds := matchGo(t, ls, got)
	cov := featureCoverage(ls, got)
	t.Logf("slots by status %v; sampled by path %v; coverage %v", seen, kinds, cov)
	requireBitmaskCoverage(t, cov, false, abi.Categorical) // no NaN or +Inf rows
	require.Positive(t, seen[0], "no slot sampled a token")
	for _, k := range []string{"top-k", "top-k+top-p+min-p", "min-p"} {
		require.Positive(t, kinds[k], "no slot sampled a token on the %s path", k)
	}
}

// maskedPassLaunches is the workload of rows whose only processors are masks (a grammar's
// bitmask, with or without the allowed-token mask) on every row pass of the categorical
// kernel: the first pass, the full-row path's tiles (no filter), top-p's radix levels
// over the row, top-k's and min-p's lists, and greedy rows. The passes read each trip's
// mask words with its logits (gb_cat_load_trip), so the vocabularies end inside a trip
// and inside a group: 4099 elements are 65 chunks of a 16-thread block (a last trip of
// one chunk), and 16485 are 258 chunks, more than GB_MAX_TILES, so that a tile holds two
// chunks and tiles end inside a trip. Rows with NaN or +Inf logits, which a mask may ban,
// take status 1 all the same.
func maskedPassLaunches(r *rand.Rand) []*launch {
	var ls []*launch
	filters := [][3]float32{{0, 0, 0}, {0, 0, 0}, {0, 0.9, 0}, {0, 0.5, 0}, {50, 0, 0}, {3, 0.9, 0}, {0, 0, 0.05}}
	temps := []float32{0, 0.7, 1, 1.8}
	shapes := []func(*rand.Rand, int) []float32{llmRow, llmRow, llmRow, tiedRow, maskedRow, nanRow, posInfRow}
	for dt := range 3 {
		for _, v := range []int{4099, 16485} {
			l := &launch{kernel: kernelCategorical, dtype: dt, gridX: 1, gridZ: 1 + r.IntN(2), block: 16, warp: 8,
				vocab: v, stride: stride(r, v), slack: r.IntN(16), slots: 7}
			l.name = fmt.Sprintf("masked passes dtype=%d D=%d V=%d", dt, l.gridZ, v)
			l.fillWith(r, shapes)
			l.withProcessors(r) // the rows below apply only its mask and bitmask
			l.logprobs = true
			l.rows(r, func(p *rowParams) {
				f := filters[r.IntN(len(filters))]
				p.Temperature = temps[r.IntN(len(temps))]
				p.TopK, p.TopP, p.MinP = uint32(f[0]), f[1], f[2]
				p.Flags = abi.FlagBitmask
				p.BitmaskRow = uint32(r.IntN(l.bitmaskRows()))
				if r.IntN(3) == 0 {
					p.Flags |= abi.FlagMask
				}
				if r.IntN(6) == 0 {
					p.Flags = 0 // an unmasked row among masked ones
				}
				if r.IntN(3) == 0 {
					p.Flags |= abi.FlagLogprobs
				}
			})
			ls = append(ls, l)
		}
	}
	return ls
}

// TestCategoricalMaskedPassesMatchGoEdition runs the masked-passes workload and requires
// the Go edition's outcomes.
func TestCategoricalMaskedPassesMatchGoEdition(t *testing.T) {
	ls := maskedPassLaunches(rand.New(rand.NewPCG(20261201, 23)))
	got := decodeResults(t, runDriver(t, encodeJob(t, ls)), ls)
	seen, kinds := matchGo(t, ls, got)
	cov := featureCoverage(ls, got)
	t.Logf("slots by status %v; sampled by path %v; coverage %v", seen, kinds, cov)
	require.Positive(t, cov["bitmask token "+abi.Categorical], "no masked row sampled a token")
	require.Positive(t, cov["bitmask status 1 of a masked NaN or +Inf"], "no masked NaN or +Inf reached status 1")
	require.Positive(t, cov["bitmask allows nothing"], "no row's bitmask allowed nothing")
	for _, k := range []string{"categorical", "top-p", "top-k", "min-p", "greedy"} {
		require.Positive(t, kinds[k], "no slot sampled a token on the %s path", k)
	}
}
