package emu

// shard_select (ABI.md, "shard_select"): a vocabulary shard's histograms of one key digit
// (counts and fixed-point masses) and its Gumbel-max winner over the elements a query
// matches. The CUDA edition spreads a row over S blocks that meet in global atomics; it
// must leave the Go edition's shard argument word for word, and the Go edition must
// follow the text of the ABI (selectReference).

import (
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/gumbel-go/gumbel/philox"
)

// spikyRow is an LLM-like row with a few NaN, +Inf and -Inf elements: NaN and +Inf never
// match, -Inf does where the key tests let it (weight 0, score -Inf).
func spikyRow(r *rand.Rand, v int) []float32 {
	row := llmRow(r, v)
	for _, x := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))} {
		for range 1 + r.IntN(3) {
			row[r.IntN(v)] = x
		}
	}
	return row
}

// selectShapes are the row shapes of the workload.
var selectShapes = []func(*rand.Rand, int) []float32{
	llmRow, llmRow, llmRow, spikyRow, spikyRow, tiedRow, maskedRow, farRow, hugeRow, soleRow, tinyRow, zeroRow,
	negInfRow, nanRow, posInfRow,
}

// The kinds of bad row the workload lays out: each must raise its key word to
// GB_SHARD_KEY_FAILED | 3 and add nothing.
const (
	badNoShard     = "no SHARD"
	badGreedy      = "temperature 0"
	badTemperature = "bad temperature"
	badReserved    = "reserved flag"
	badLogprobs    = "LOGPROBS"
	badRecord      = "RECORD"
	badShift       = "bad shift"
	badF           = "F > 62"
	badOffset      = "bad vocab_offset"
)

var selectBadKinds = []string{badNoShard, badGreedy, badTemperature, badReserved, badLogprobs, badRecord, badShift, badF}

// selectLaunch is a shard_select launch with what each launch row was made to be: "" for
// a good row, else its kind of bad row.
type selectLaunch struct {
	*launch
	bad []string
}

// processedValues is the processed logits x' of p's logits row (ABI.md, "Processed
// logits"), each operation rounded to float32 on its own.
func (l *launch) processedValues(p rowParams) []float32 {
	xs := l.rowValues(int(p.Row))
	base := int(p.Row) * l.vocab
	for i, x := range xs {
		if p.Flags&abi.FlagBias != 0 {
			x = float32(x + l.bias[base+i])
		}
		if p.Flags&abi.FlagPenalties != 0 {
			c := l.counts[base+i]
			if c != 0 && p.RepetitionPenalty != 1 {
				if x > 0 {
					x = float32(x / p.RepetitionPenalty)
				} else {
					x = float32(x * p.RepetitionPenalty)
				}
			}
			if out := c & abi.CountMask; out != 0 {
				x = float32(x - float32(p.FrequencyPenalty*float32(out)))
				x = float32(x - p.PresencePenalty)
			}
		}
		if !l.allows(p, i) {
			x = float32(math.Inf(-1))
		}
		xs[i] = x
	}
	return xs
}

// selectable reports whether x' can match a query at all: neither NaN nor +Inf.
func selectable(x float32) bool { return x == x && !math.IsInf(float64(x), 1) }

// selectRow lays out a launch row: a shard row at a positive temperature with the
// launch's processors and now and then a flag shard_select ignores, then made bad as
// the kind bad says ("" for a good row; the query's kinds are selectQuery's).
func (l *launch) selectRow(r *rand.Rand, bad string) rowParams {
	p := rowParams{Row: uint32(r.IntN(l.slots)), Temperature: []float32{0.25, 0.7, 1, 1, 1.8}[r.IntN(5)],
		Seed: r.Uint64(), Step: r.Uint64() >> r.IntN(64), Flags: abi.FlagShard,
		// Out of (0, 1] (-0.5, 2, NaN) min-p is off; 1 keeps the largest weights only,
		// 0.3 and 0.9 leave most of a row out, 1e-20 only the elements of weight 0.
		MinP: []float32{0, 0.02, 0.3, 0.9, 1, 1, 1e-3, 1e-20, -0.5, 2, float32(math.NaN())}[r.IntN(11)]}
	if l.bias != nil {
		for _, f := range []abi.Flags{abi.FlagBias, abi.FlagMask, abi.FlagPenalties} {
			if r.IntN(2) == 0 {
				p.Flags |= f
			}
		}
		p.RepetitionPenalty = []float32{1, 1.3, 0.7}[r.IntN(3)]
		p.FrequencyPenalty = []float32{0, 0.5, -0.25}[r.IntN(3)]
		p.PresencePenalty = []float32{0, 0.4}[r.IntN(2)]
	}
	l.bitmaskFlag(r, &p)
	if r.IntN(4) == 0 { // flags shard_select has no use for
		p.Flags |= []abi.Flags{abi.FlagAdvance, abi.FlagRouted | abi.FlagCategorical, abi.FlagRouted | abi.FlagFiltered,
			abi.FlagPerturbed, abi.FlagKeptSet, abi.FlagChainEnd}[r.IntN(6)]
	}
	switch bad {
	case badNoShard:
		p.Flags &^= abi.FlagShard
	case badGreedy:
		p.Temperature = 0
	case badTemperature:
		p.Temperature = badTemperatures[r.IntN(len(badTemperatures))]
	case badReserved:
		p.Flags |= 1 << (14 + r.IntN(18))
	case badLogprobs:
		p.Flags |= abi.FlagLogprobs
	case badRecord:
		p.Flags |= abi.FlagRecord
	}
	return p
}

// selectQuery writes launch row y's query and the words its launch finds beforehand.
// The query takes m from the row (at least its largest selectable x', as when another
// shard holds the row's maximum), and its prefix and floor mostly from the key of an
// element of the row, so that the digit's bins fill; the prefix's bits below the digit's
// top are random (they must be ignored). The histogram and key words are mostly zero,
// now and then not (the kernel adds to the one and raises the other).
func (l *launch) selectQuery(r *rand.Rand, y int, bad string) {
	p := l.params[y]
	var keys []uint32
	m := float32(math.Inf(-1))
	for _, x := range l.processedValues(p) {
		if selectable(x) {
			keys = append(keys, abi.OrderKey(x))
			m = max(m, x)
		}
	}
	if m == float32(math.Inf(-1)) {
		m = float32(r.NormFloat64() * 3) // another shard's maximum
	} else if r.IntN(4) == 0 {
		m = float32(m + float32(math.Abs(r.NormFloat64()*3)))
	}
	anyKey := func() uint32 {
		if len(keys) == 0 {
			return r.Uint32()
		}
		return keys[r.IntN(len(keys))]
	}
	q := abi.SelectQuery{M: m, Shift: []uint8{24, 16, 8, 0}[r.IntN(4)], MinP: r.IntN(2) == 0, Draw: r.IntN(3) != 0,
		F: []uint8{45, 45, uint8(63 - bits.Len(uint(l.vocab))), uint8(63 - bits.Len(uint(l.vocab))), 62, 52, 33, 0}[r.IntN(8)]}
	low := uint32(math.MaxUint32) // the prefix's ignored bits
	if q.Shift < 24 {
		low = 1<<(q.Shift+8) - 1
	}
	k := anyKey()
	q.Prefix = r.Uint32()
	if r.IntN(4) != 0 {
		q.Prefix = k ^ r.Uint32()&low
	}
	switch r.IntN(8) {
	case 0, 1: // at or below an element the prefix admits
		q.Floor = min(k, anyKey())
	case 2:
		q.Floor = k + 1
	case 3:
		q.Floor = r.Uint32() >> r.IntN(32)
	}
	switch bad {
	case badShift:
		q.Shift = []uint8{4, 12, 25, 32, 255}[r.IntN(5)]
	case badF:
		q.F = []uint8{63, 64, 255}[r.IntN(3)]
	}
	lay := abi.Launch{Rows: l.launchRows()}
	w := l.selectWords
	w[lay.SelectQueryWord(y)], w[lay.SelectQueryWord(y)+1] = q.Words()
	if r.IntN(4) == 0 {
		for range 1 + r.IntN(20) {
			w[lay.SelectHistWord(y, r.IntN(2*abi.SelectBins))] = r.Uint64() >> r.IntN(64) // may wrap
		}
	}
	switch r.IntN(8) {
	case 0:
		w[lay.SelectKeyWord(y)] = r.Uint64() >> r.IntN(64)
	case 1, 2:
		w[lay.SelectKeyWord(y)] = abi.Pack(float32(r.NormFloat64()*8), uint32(l.vocabOffset+r.IntN(l.vocab)))
	case 3: // a failed key, which a bad row raises only when its status is lower
		w[lay.SelectKeyWord(y)] = abi.ShardKeyFailed | uint64(1+r.IntN(5))
	}
}

// newShardSelect is a random shard_select launch: grid (s, n, 1) (now and then grid.z =
// 2, whose blocks with z = 1 must do nothing), n launch rows of up to slots logits rows
// (rows may share one), processors or a bitmask. bads is the kind of each launch row
// ("" good); nil makes 4 to 12 rows, about one in four bad of a random kind.
func newShardSelect(r *rand.Rand, dt, s, v, offset int, bads []string) selectLaunch {
	block, warp := emuShape(r, s)
	l := &launch{kernel: kernelShardSelect, dtype: dt, gridX: s, block: block, warp: warp, vocab: v,
		stride: stride(r, v), slack: r.IntN(16), slots: 3 + r.IntN(3), vocabOffset: offset}
	if r.IntN(6) == 0 {
		l.gridZ = 2
	}
	l.fillWith(r, selectShapes)
	if r.IntN(2) == 0 {
		l.withProcessors(r) // a bitmask too
	} else {
		l.withBitmask(r)
	}
	if bads == nil {
		bads = make([]string, 4+r.IntN(9))
		for y := range bads {
			if r.IntN(4) == 0 {
				bads[y] = selectBadKinds[r.IntN(len(selectBadKinds))]
			}
		}
	}
	sl := selectLaunch{launch: l, bad: bads}
	l.params = make([]rowParams, len(bads))
	for y := range l.params {
		l.params[y] = l.selectRow(r, bads[y])
	}
	l.selectWords = make([]uint64, abi.Launch{Rows: l.launchRows()}.SelectWords())
	for y := range l.params {
		l.selectQuery(r, y, sl.bad[y])
		if offset%4 != 0 || offset+v > abi.MaxVocab {
			sl.bad[y] = badOffset
		}
	}
	l.name = fmt.Sprintf("shard_select dtype=%d S=%d Z=%d V=%d offset=%d T=%d warp=%d", dt, s, l.draws(), v, offset,
		block, warp)
	return sl
}

// cutoffLaunch holds, for F where the cutoff fl(fl(F · fl(ln 2)) + 1) of every edition
// is an ulp off -(F ln 2 + 1) rounded once, logits right at both and an ulp either
// side, with m = 0 and T = 1 (so d = x') and a min_p far below 2^-F / e: an element
// matches exactly when its weight is not cut off, so the CUDA edition must cut off where
// the Go edition does.
func cutoffLaunch() selectLaunch {
	fs := []uint8{13, 17, 21, 26, 34, 42, 52, 45, 50}
	var row []float32
	for _, f := range fs {
		once := -float32(float64(f)*math.Ln2 + 1)
		twice := -float32(float32(float32(f)*float32(0.6931472)) + 1)
		for _, x := range []float32{once, twice} {
			row = append(row, x, math.Nextafter32(x, 0), math.Nextafter32(x, -100))
		}
	}
	row = append(row, 0) // m itself: weight 1
	l := &launch{kernel: kernelShardSelect, dtype: dtF32, gridX: 2, block: 16, warp: 8, vocab: len(row),
		stride: len(row), slots: 1, vocabOffset: 8, name: "shard_select at the weight cutoffs"}
	l.logits = make([]byte, 4*len(row))
	for i, x := range row {
		l.store(i, x)
	}
	l.selectWords = make([]uint64, abi.Launch{Rows: len(fs)}.SelectWords())
	lay := abi.Launch{Rows: len(fs)}
	for y, f := range fs {
		l.params = append(l.params, rowParams{Temperature: 1, Seed: uint64(y), Flags: abi.FlagShard, MinP: 1e-30})
		q := abi.SelectQuery{M: 0, Shift: 24, F: f, MinP: true, Draw: true}
		l.selectWords[lay.SelectQueryWord(y)], l.selectWords[lay.SelectQueryWord(y)+1] = q.Words()
	}
	return selectLaunch{launch: l, bad: make([]string, len(fs))}
}

// shardSelectLaunches is the workload: every dtype; S = 1, 3, 5 and 16; vocabularies
// from 37 to 4099 at aligned offsets, and a launch per dtype at an offset every row must
// refuse; a launch with every kind of bad row; a shard of Qwen's vocabulary (V = 151936
// over two ranks, F = 45 among the queries) in blocks of the real warp width; and the
// cutoff launch.
func shardSelectLaunches(r *rand.Rand) []selectLaunch {
	var ls []selectLaunch
	for dt := range 3 {
		for _, s := range []int{1, 1, 1, 3, 3, 3, 5, 16, 16} {
			v := []int{37, 130, 255, 1001, 4099}[r.IntN(5)]
			if s == 16 {
				v = []int{1001, 4099}[r.IntN(2)]
			}
			off := []int{0, 4, (151936 - v) &^ 3, (abi.MaxVocab - v) &^ 3}[r.IntN(4)]
			ls = append(ls, newShardSelect(r, dt, s, v, off, nil))
		}
		v := []int{37, 130}[r.IntN(2)]
		off := []int{2, abi.MaxVocab - 3, (abi.MaxVocab - v + 4) &^ 3}[r.IntN(3)]
		ls = append(ls, newShardSelect(r, dt, 1+2*r.IntN(2), v, off, nil))
	}
	// Every kind of bad row, beside good ones, in a split launch.
	bads := append(slices.Clone(selectBadKinds), "", "", "")
	r.Shuffle(len(bads), func(i, j int) { bads[i], bads[j] = bads[j], bads[i] })
	ls = append(ls, newShardSelect(r, r.IntN(3), 3, 130, 4, bads))
	l := newShardSelect(r, dtBF16, 16, 75968, 75968, nil)
	l.block, l.warp = 256, 32
	l.name += " (T=256 warp=32)"
	return append(ls, l, cutoffLaunch())
}

// selectStats is what selectReference saw of a good row.
type selectStats struct {
	matched, negInf int // matching elements, -Inf among them
	minPOut         int // elements that matched but for min-p
	skipped         int // NaN and +Inf elements that met the key tests
	best            uint64
}

// selectReference applies launch row y of l to words as ABI.md's "shard_select" says
// and returns what it saw (nothing for a bad row). The weight is 0 below the cutoff
// -fl(fl(F · 0.6931472) + 1) of ABI.md "categorical" step 2.
func selectReference(l *launch, y int, words []uint64) (st selectStats, bad bool) {
	lay := abi.Launch{Rows: l.launchRows()}
	p := l.params[y]
	q := abi.DecodeSelectQuery(words[lay.SelectQueryWord(y)], words[lay.SelectQueryWord(y)+1])
	key := &words[lay.SelectKeyWord(y)]
	t := p.Temperature
	if p.Flags&abi.FlagShard == 0 || p.Flags&(abi.FlagsReserved|abi.FlagLogprobs|abi.FlagRecord) != 0 ||
		!(t > 0) || t > math.MaxFloat32 || float32(1/t) > math.MaxFloat32 ||
		l.vocabOffset%4 != 0 || l.vocabOffset+l.vocab > abi.MaxVocab || q.Shift%8 != 0 || q.Shift > 24 || q.F > 62 {
		*key = max(*key, abi.ShardKeyFailed|uint64(abi.StatusBadParams))
		return st, true
	}
	invT := float32(1 / t)
	cutoff := -float32(float32(float32(q.F)*float32(0.6931472)) + 1)
	twoPowF := float32(math.Ldexp(1, int(q.F)))
	minP := q.MinP && p.MinP > 0 && p.MinP <= 1
	for i, x := range l.processedValues(p) {
		k := abi.OrderKey(x)
		if k < q.Floor || q.Shift < 24 && k>>(q.Shift+8) != q.Prefix>>(q.Shift+8) {
			continue
		}
		if !selectable(x) {
			st.skipped++
			continue
		}
		var w float32 // exp32(fl(fl(x' - m) · invT)), 0 for -Inf and below the cutoff
		if d := float32(float32(x-q.M) * invT); x != float32(math.Inf(-1)) && d >= cutoff {
			w = float32(math.Exp(float64(d)))
		}
		if minP && !(w >= p.MinP) {
			st.minPOut++
			continue
		}
		b := int(k >> q.Shift & 0xFF)
		words[lay.SelectHistWord(y, b)]++
		words[lay.SelectHistWord(y, abi.SelectBins+b)] += uint64(float32(w * twoPowF))
		st.matched++
		if x == float32(math.Inf(-1)) {
			st.negInf++
		}
		if q.Draw {
			g := uint32(l.vocabOffset + i)
			s := float32(float32(x*invT) + philox.ElementGumbel(p.Seed, p.Step, g))
			st.best = max(st.best, abi.Pack(s, g))
		}
	}
	if q.Draw {
		*key = max(*key, st.best)
	}
	return st, false
}

// selectWord says which launch row word i of a shard_select launch of n rows belongs to
// and what it holds.
func selectWord(i, n int) (y int, what string) {
	lay := abi.Launch{Rows: n}
	switch {
	case i < lay.SelectHistWord(0, 0):
		return i / 2, fmt.Sprintf("query word %d", i%2)
	case i < lay.SelectKeyWord(0):
		h := i - lay.SelectHistWord(0, 0)
		what = "count"
		if h%(2*abi.SelectBins) >= abi.SelectBins {
			what = "mass"
		}
		return h / (2 * abi.SelectBins), fmt.Sprintf("%s of bin %d", what, h%abi.SelectBins)
	}
	return i - lay.SelectKeyWord(0), "key word"
}

// matchSelect requires got (another edition's outcomes of shard_select launches) to be
// the Go edition's (wants): the whole shard argument word for word, and nothing else
// written (tokens, statuses, counts and params as they were, no counters).
func matchSelect(t *testing.T, ls []selectLaunch, wants, got []outcome) {
	t.Helper()
	for i, l := range ls {
		want, g := wants[i], got[i]
		require.Len(t, g.keys, len(want.keys), "%s: shard words", l.name)
		for w := range want.keys {
			if want.keys[w] != g.keys[w] {
				y, what := selectWord(w, l.launchRows())
				assert.Failf(t, "shard word differs", "%s: word %d (launch row %d %s) is %#x, want %#x (row %+v)",
					l.name, w, y, what, g.keys[w], want.keys[w], l.params[y])
			}
		}
		untouchedSlots := slices.Repeat([]int32{untouched}, l.outSlots())
		assert.Equal(t, untouchedSlots, g.tokens, "%s: tokens", l.name)
		assert.Equal(t, untouchedSlots, g.status, "%s: status", l.name)
		assert.Equal(t, untouchedSlots, want.tokens, "%s: Go tokens", l.name)
		assert.Equal(t, want.counts, g.counts, "%s: counts", l.name)
		assert.Equal(t, want.params, g.params, "%s: params", l.name)
		assert.Equal(t, l.paramBytes(), want.params, "%s: Go params", l.name)
		assert.Empty(t, g.counters, "%s: counters", l.name)
	}
}

// checkSelectReference requires the Go edition's shard words to be selectReference's and
// returns the workload's coverage.
func checkSelectReference(t *testing.T, ls []selectLaunch, wants []outcome) map[string]int {
	t.Helper()
	cov := map[string]int{}
	for i, l := range ls {
		words := slices.Clone(l.selectWords)
		lay := abi.Launch{Rows: l.launchRows()}
		rows := map[uint32]int{} // good launch rows per logits row
		for y, p := range l.params {
			q := abi.DecodeSelectQuery(words[lay.SelectQueryWord(y)], words[lay.SelectQueryWord(y)+1])
			before := slices.Clone(words[lay.SelectHistWord(y, 0):][:2*abi.SelectBins])
			preKey := words[lay.SelectKeyWord(y)]
			st, bad := selectReference(l.launch, y, words)
			require.Equal(t, l.bad[y] != "", bad, "%s: launch row %d (%+v) was made %q", l.name, y, p, l.bad[y])
			if bad {
				cov["bad: "+l.bad[y]]++
				if preKey > abi.ShardKeyFailed|uint64(abi.StatusBadParams) {
					cov["bad row below an earlier key"]++
				}
				continue
			}
			rows[p.Row]++
			cov[fmt.Sprintf("dtype %d S=%d", l.dtype, l.gridX)]++
			if st.matched == 0 {
				cov["no match"]++
				continue
			}
			cov["matched"]++
			for _, c := range []struct {
				met  bool
				name string
			}{
				{q.Shift < 24, "prefix matched"},
				{q.Floor > 0, "floor cut matched"},
				{st.minPOut > 0, "min-p excluded some"},
				{st.minPOut > st.matched, "min-p excluded most"},
				{q.MinP && p.MinP == 1, "min_p = 1 matched"},
				{st.negInf > 0, "-Inf matched"},
				{st.skipped > 0, "NaN or +Inf skipped"},
				{p.Flags&(abi.FlagBias|abi.FlagPenalties|abi.FlagMask) != 0, "processors"},
				{p.Flags&abi.FlagBitmask != 0, "bitmask"},
				{slices.ContainsFunc(before, func(w uint64) bool { return w != 0 }), "added to earlier words"},
				{l.vocabOffset > 0, "offset"},
				{q.F == uint8(63-bits.Len(uint(l.vocab))), "F of V"},
				{q.F == 45, "F = 45"},
			} {
				if c.met {
					cov[c.name]++
				}
			}
			switch {
			case !q.Draw:
			case st.best > preKey:
				cov["drew"]++
			default:
				cov["drew below an earlier key"]++
			}
		}
		for _, n := range rows {
			if n > 1 {
				cov["logits row shared by good launch rows"]++
			}
		}
		assert.Equal(t, words, wants[i].keys, "%s: the Go edition's shard words are not the ABI's", l.name)
	}
	return cov
}

// TestCUDAShardSelectMatchesGoEdition: the emulated CUDA edition, S blocks per row meeting
// in global atomics, leaves the Go edition's shard argument (queries, histograms, key
// words) word for word, and the Go edition's is what ABI.md says.
func TestCUDAShardSelectMatchesGoEdition(t *testing.T) {
	sls := shardSelectLaunches(rand.New(rand.NewPCG(20261202, 514)))
	ls := make([]*launch, len(sls))
	for i, l := range sls {
		ls[i] = l.launch
	}
	got := decodeResults(t, runDriver(t, encodeJob(t, ls)), ls)
	wants := goEdition(t, ls)
	matchSelect(t, sls, wants, got)
	cov := checkSelectReference(t, sls, wants)
	t.Logf("%d launches; launch rows by what they met: %v", len(ls), cov)
	names := []string{"matched", "no match", "prefix matched", "floor cut matched", "min-p excluded some",
		"min-p excluded most", "min_p = 1 matched", "-Inf matched", "NaN or +Inf skipped", "processors", "bitmask",
		"added to earlier words", "offset", "F of V", "F = 45", "drew", "drew below an earlier key",
		"logits row shared by good launch rows", "bad: " + badOffset, "bad row below an earlier key"}
	for _, k := range selectBadKinds {
		names = append(names, "bad: "+k)
	}
	for dt := range 3 {
		for _, s := range []int{1, 3, 5, 16} {
			names = append(names, fmt.Sprintf("dtype %d S=%d", dt, s))
		}
	}
	for _, k := range names {
		assert.Positive(t, cov[k], "no launch row with %q", k)
	}
}
