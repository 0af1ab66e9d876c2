package mslemu

import (
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/gumbel-go/gumbel/kernelsrc/gokernel"
)

// selectRole is what a launch row of a shard_select case is built to show: a row served,
// or one of the rows ABI.md has it refuse (its key word raised to ShardKeyFailed|3,
// nothing added).
type selectRole int

const (
	selGood      selectRole = iota
	selNoShard              // no FlagShard
	selTempZero             // temperature 0 (greedy: shard_select has no greedy rows)
	selTempBad              // negative, NaN, +Inf, or so small that 1/T overflows
	selReserved             // a reserved flag
	selLogprobs             // LOGPROBS, which a shard may not have
	selRecord               // RECORD, likewise
	selBadShift             // a query shift other than 24, 16, 8 or 0
	selBadF                 // a query F above 62
	selBadOffset            // the launch's vocab_offset is not a multiple of 4, or runs past MaxVocab
	numSelectRoles
)

var selectRoleNames = [numSelectRoles]string{"good", "no SHARD", "temperature 0", "bad temperature",
	"reserved flag", "LOGPROBS", "RECORD", "bad shift", "F > 62", "bad vocab_offset"}

// selectRow is one launch row of a shard_select case, as the test built it.
type selectRow struct {
	role selectRole
	q    abi.SelectQuery
	x    []float32 // its processed logits, as ABI.md computes them
	// prefixFromKey and floorAtKey: the query's prefix (floor) is an element's key;
	// realF: its F is 63 - bitlen(V) of the whole vocabulary.
	prefixFromKey, floorAtKey, realF bool
	// passFloor counts the elements neither NaN nor +Inf with key >= floor; eligible
	// those that also carry the prefix: the matches without min-p.
	passFloor, eligible int
}

// selectCase is a shard_select launch with the plan of each launch row.
type selectCase struct {
	*launchCase
	rows []selectRow
}

// processedRow is launch row p's processed logits x' (ABI.md, "Processed logits"): one
// float32 rounding per operation, as the kernels have them.
func processedRow(c *launchCase, p abi.RowParams) []float32 {
	v, row := c.vocab, int(p.Row)
	w := (v + 31) / 32
	xs := make([]float32, v)
	for i := range v {
		x := c.logit(row, i)
		if p.Flags&abi.FlagBias != 0 {
			x = float32(x + c.bias[row*v+i])
		}
		if p.Flags&abi.FlagPenalties != 0 {
			n := c.counts[row*v+i]
			if n != 0 && p.RepetitionPenalty != 1 {
				if x > 0 {
					x = float32(x / p.RepetitionPenalty)
				} else {
					x = float32(x * p.RepetitionPenalty)
				}
			}
			if out := n & abi.CountMask; out > 0 {
				f := float32(p.FrequencyPenalty * float32(out))
				x = float32(x - f)
				x = float32(x - p.PresencePenalty)
			}
		}
		if p.Flags&abi.FlagMask != 0 && c.mask[row*w+i/32]>>(i%32)&1 == 0 {
			x = negInf
		}
		if p.Flags&abi.FlagBitmask != 0 && c.bitmask[int(p.BitmaskRow)*w+i/32]>>(i%32)&1 == 0 {
			x = negInf
		}
		xs[i] = x
	}
	return xs
}

// matchable reports whether x may match a query: neither NaN nor +Inf.
func matchable(x float32) bool { return x == x && x <= math.MaxFloat32 }

// prefixMask is the key bits a query's prefix fixes at shift: those above the digit.
func prefixMask(shift uint8) uint32 {
	if shift >= 24 {
		return 0
	}
	return ^uint32(0) << (shift + 8)
}

// randomQuery draws a query over processed row x: m the row's largest processed logit or
// above it (another shard holding the maximum), any digit, a prefix mostly taken from an
// element's key (the other bits of the prefix, which must be ignored, random), a floor of
// 0, at an element's key or random, F of a real vocabulary, 45, or the extremes. With
// top, m is the row's own maximum and the keys are taken from the elements that hold it
// (so that min_p = 1 keeps some).
func randomQuery(r *rand.Rand, x []float32, globalVocab int, top bool) (q abi.SelectQuery, prefixFromKey, floorAtKey, realF bool) {
	var cands []int
	m := negInf
	for i, v := range x {
		if matchable(v) {
			cands = append(cands, i)
			m = max(m, v)
		}
	}
	if m == negInf {
		// Nothing finite: any finite m (the sampler would not ask, the row has status 2).
		m = pick[float32](r, 0, -7, 3)
	} else if top {
		var tops []int
		for _, i := range cands {
			if x[i] == m {
				tops = append(tops, i)
			}
		}
		cands = tops
	} else {
		m = float32(m + pick[float32](r, 0, 0, 0, 0.5, 3, 40))
	}
	q.M = m
	q.Shift = pick[uint8](r, 24, 16, 8, 0)
	keyOf := func() (uint32, bool) {
		if len(cands) == 0 {
			return r.Uint32(), false
		}
		return abi.OrderKey(x[cands[r.IntN(len(cands))]]), true
	}
	q.Prefix = r.Uint32()
	if r.IntN(4) != 0 {
		var k uint32
		k, prefixFromKey = keyOf()
		q.Prefix = k ^ r.Uint32()&^prefixMask(q.Shift)
	}
	switch k := r.IntN(10); {
	case k < 5:
	case k < 9:
		q.Floor, floorAtKey = keyOf()
	default:
		q.Floor = r.Uint32()
	}
	q.F = pick[uint8](r, 45, 62, 0, uint8(r.IntN(63)))
	if r.IntN(2) == 0 {
		q.F, realF = uint8(63-bits.Len(uint(globalVocab))), true
	}
	q.MinP = r.IntN(2) == 0
	q.Draw = r.IntN(5) < 3
	return q, prefixFromKey, floorAtKey, realF
}

// newSelectCase builds a shard_select launch of n rows at the given vocab_offset: rows
// from newCase's shapes (NaN, +Inf, -Inf, all -Inf, ties, huge values), processors and
// bitmask rows on some, some rows sharing a logits row with another launch row, flags a
// shard may carry and shard_select ignores (ADVANCE, ROUTED, ...), and a refused row of
// each kind now and then. The shard buffer starts with the queries, histograms holding
// counts and masses already (some close to 2^64, so that the sums wrap) and key words
// from 0 to failed keys.
func newSelectCase(r *rand.Rand, dtype, T, S, D, n, vocab int, offset uint32) *selectCase {
	name := fmt.Sprintf("shard_select%s/T=%d/S=%d/D=%d/V=%d/offset=%d", abi.Suffixes[dtype], T, S, D, vocab, offset)
	c := &selectCase{launchCase: newCase(r, name, shardSelect, dtype, T, S, n, vocab)}
	c.draws, c.vocabOffset, c.shard = D, offset, true
	badOffset := offset%4 != 0 || uint64(offset)+uint64(vocab) > abi.MaxVocab
	globalVocab := pick(r, int(offset)+vocab, 152064, 262144, 32000)
	params := make([]abi.RowParams, n)
	c.rows = make([]selectRow, n)
	for y := range params {
		p := abi.RowParams{Row: c.rowParams(y).Row, Temperature: pick(r, goodTemps...), Seed: r.Uint64(),
			Step: r.Uint64(), Flags: abi.FlagShard}
		if y > 0 && r.IntN(5) == 0 {
			p.Row = params[r.IntN(y)].Row // another query over the same logits
		}
		for _, f := range []abi.Flags{abi.FlagBias, abi.FlagMask, abi.FlagPenalties, abi.FlagBitmask} {
			if r.IntN(100) < 35 {
				p.Flags |= f
			}
		}
		if r.IntN(5) == 0 {
			// Flags shard_select has no use for: they change nothing (no step advance).
			p.Flags |= pick(r, abi.FlagAdvance, abi.FlagRouted|abi.FlagCategorical, abi.FlagRouted|abi.FlagFiltered,
				abi.FlagPerturbed, abi.FlagKeptSet, abi.FlagChainEnd, abi.FlagRouted)
		}
		p.BitmaskRow = pick[uint32](r, 0, 1, 2, 2, 3, 3, 4, 4)
		p.RepetitionPenalty = pick[float32](r, 1, 1.1, 1.3, 0.8, 2)
		p.FrequencyPenalty = pick[float32](r, 0, 0.5, -0.25, 1)
		p.PresencePenalty = pick[float32](r, 0, 0.2, -1, 0.7)
		p.MinP = pick[float32](r, 0, 1e-30, 1e-6, 0.05, 0.3, 0.9, 0.9, 1, 1, 1.5, nan)
		p.TopK, p.TopP = uint32(r.IntN(vocab+2)), pick[float32](r, 0, 0.5, 1) // ignored

		role := selGood
		if badOffset {
			role = selBadOffset
		} else if r.IntN(10) < 3 {
			role = selectRole(1 + r.IntN(int(selBadF)))
		}
		switch role {
		case selNoShard:
			p.Flags &^= abi.FlagShard
		case selTempZero:
			p.Temperature = 0
		case selTempBad:
			p.Temperature = pick(r, badTemps...)
		case selReserved:
			p.Flags |= 1 << (14 + r.IntN(18))
		case selLogprobs:
			p.Flags |= abi.FlagLogprobs
		case selRecord:
			p.Flags |= abi.FlagRecord
		}
		params[y] = p
		c.rows[y].role = role
	}
	featureBuffers(r, c.launchCase, params)

	l := abi.Launch{Rows: n}
	c.shard0 = make([]uint64, l.SelectWords())
	for y, p := range params {
		c.setRowParams(y, p)
		sr := &c.rows[y]
		sr.x = processedRow(c.launchCase, p)
		top := r.IntN(10) == 0 || p.MinP == 1 && r.IntN(2) == 0
		sr.q, sr.prefixFromKey, sr.floorAtKey, sr.realF = randomQuery(r, sr.x, globalVocab, top)
		switch sr.role {
		case selBadShift:
			sr.q.Shift = pick[uint8](r, 1, 4, 12, 25, 32, 255)
		case selBadF:
			sr.q.F = pick[uint8](r, 63, 64, 200, 255)
		}
		for _, v := range sr.x {
			if !matchable(v) || abi.OrderKey(v) < sr.q.Floor {
				continue
			}
			sr.passFloor++
			if mask := prefixMask(sr.q.Shift); abi.OrderKey(v)&mask == sr.q.Prefix&mask {
				sr.eligible++
			}
		}
		w0, w1 := sr.q.Words()
		c.shard0[l.SelectQueryWord(y)], c.shard0[l.SelectQueryWord(y)+1] = w0, w1
		if r.IntN(2) == 0 {
			for b := range 2 * abi.SelectBins {
				switch k := r.IntN(10); {
				case k < 6:
				case k < 9:
					c.shard0[l.SelectHistWord(y, b)] = uint64(r.IntN(1 << 20))
				default:
					c.shard0[l.SelectHistWord(y, b)] = math.MaxUint64 - uint64(r.IntN(1<<20))
				}
			}
		}
		c.shard0[l.SelectKeyWord(y)] = pick(r, 0, 0, 0, r.Uint64()>>r.IntN(64),
			abi.ShardKeyFailed|uint64(abi.StatusNonFinite), abi.ShardKeyFailed|uint64(abi.StatusBadParams),
			abi.ShardKeyFailed|uint64(abi.StatusExact))
	}
	return c
}

// TestShardSelectMatchesGoEdition runs shard_select in the emulator over every dtype,
// threadgroups of 32 to 1024 threads, one threadgroup per row and several, grids one and
// two draws deep (the threadgroups past x = 0 and z = 0 must do nothing), SIMD widths of 8
// to 64 and vocabulary offsets from 0 to the end of MaxVocab, with the queries of
// newSelectCase, and requires the Go edition's whole shard buffer word for word: queries
// untouched, histograms and key words. Nothing else may change (tokens, status, records,
// counts, params, counters). Coverage is asserted, so that the workload cannot pass
// without matching, drawing or refusing rows.
func TestShardSelectMatchesGoEdition(t *testing.T) {
	bin := buildDriver(t)
	r := rand.New(rand.NewPCG(2026, 1202))
	var cases []*selectCase
	sizes := []int{37, 64, 255, 1000, 4099}
	for dtype := range abi.Suffixes {
		for _, S := range []int{1, 3, 1, 3} {
			for _, off := range []uint32{0, 4, 1 << 20, (abi.MaxVocab - 4099) &^ 3} {
				v := sizes[r.IntN(len(sizes))]
				if off != 0 && off < 1<<20 {
					v = 37 + r.IntN(300)
				}
				T := pick(r, 32, 64, 256, 1024)
				D := pick(r, 1, 1, 2)
				cases = append(cases, newSelectCase(r, dtype, T, S, D, 6+r.IntN(4), v, off))
			}
		}
		// Offsets every row must refuse: not a multiple of 4, or past MaxVocab.
		for _, off := range []uint32{2, (abi.MaxVocab - 64 + 4) &^ 3} {
			cases = append(cases, newSelectCase(r, dtype, 64, 1+r.IntN(2), 1, 4, 64, off))
		}
	}
	for _, width := range []int{8, 16, 64} {
		c := newSelectCase(r, r.IntN(3), pick(r, 64, 256), 2, 1, 8, pick(r, 255, 1000), 4*uint32(r.IntN(1000)))
		c.simdWidth = width
		c.name += fmt.Sprintf("/width=%d", width)
		cases = append(cases, c)
	}
	launches := make([]*launchCase, len(cases))
	for i, c := range cases {
		launches[i] = c.launchCase
	}
	got := runDriver(t, bin, launches)
	kernels := gokernel.Kernels()

	var cov struct {
		matched      [3]int        // good rows that added counts, by dtype
		shifts       map[uint8]int // good rows that matched, by shift
		byShift      map[uint8]int // good rows whose prefix (from a key) matched some and excluded some
		realF        int           // good rows at 63 - bitlen(V) of a real vocabulary that added mass
		floorCut     int           // floor at an element's key, excluding some that the prefix allows
		minPCut      int           // min-p excluding most of the eligible elements
		minPOne      int           // min_p = 1 rows that matched
		mass         int           // good rows that added mass
		draws        int           // key words raised by a draw
		drawsKept    int           // draws whose winner did not beat the key word already there
		offsetDraws  int           // raised at a nonzero offset
		nonFinite    int           // rows holding NaN or +Inf that matched
		negInf       int           // rows holding -Inf that matched
		processors   map[abi.Flags]int
		preloaded    int // bins added to that already held a value
		fs           map[uint8]int
		refused      [numSelectRoles]int
		split, deep  int // launches with S > 1, and D > 1
		unchangedRow int // good rows where nothing matched
	}
	cov.shifts, cov.byShift, cov.processors, cov.fs = map[uint8]int{}, map[uint8]int{}, map[abi.Flags]int{}, map[uint8]int{}
	for i, c := range cases {
		want := runGoEdition(t, c.launchCase, kernels, r)
		require.Len(t, got[i].keys, len(c.shard0))
		if !assert.Equal(t, want.keys, got[i].keys, "%s: the shard buffer", c.name) {
			for j := range want.keys {
				if want.keys[j] != got[i].keys[j] {
					t.Logf("%s: first differing word %d: want %#x, got %#x", c.name, j, want.keys[j], got[i].keys[j])
					break
				}
			}
		}
		assert.Equal(t, want.tokens, got[i].tokens, "%s: tokens", c.name)
		assert.Equal(t, want.status, got[i].status, "%s: status", c.name)
		assert.Equal(t, bitsOf(want.logprobs), bitsOf(got[i].logprobs), "%s: records", c.name)
		assert.Equal(t, c.counts, got[i].counts, "%s: counts", c.name)
		assert.Equal(t, c.params, got[i].params, "%s: params (no step advances)", c.name)
		assert.Zero(t, got[i].countersLeft, "%s: counters", c.name)
		for _, v := range want.tokens {
			require.Equal(t, untouched, v, "%s: the Go edition wrote a token", c.name)
		}
		if c.S > 1 {
			cov.split++
		}
		if c.numDraws() > 1 {
			cov.deep++
		}

		l := abi.Launch{Rows: len(c.rows)}
		for y, sr := range c.rows {
			p := c.rowParams(y)
			qw := l.SelectQueryWord(y)
			require.Equal(t, c.shard0[qw:qw+2], want.keys[qw:qw+2], "%s: row %d: query", c.name, y)
			var added, mass uint64
			for b := range abi.SelectBins {
				w := l.SelectHistWord(y, b)
				dc, dm := want.keys[w]-c.shard0[w], want.keys[w+abi.SelectBins]-c.shard0[w+abi.SelectBins]
				added += dc
				mass += dm
				if dc != 0 && c.shard0[w] != 0 {
					cov.preloaded++
				}
				if dc == 0 {
					require.Zero(t, dm, "%s: row %d: mass in bin %d without a count", c.name, y, b)
				}
			}
			key0, key := c.shard0[l.SelectKeyWord(y)], want.keys[l.SelectKeyWord(y)]
			if sr.role != selGood {
				require.Zero(t, added, "%s: row %d (%s): refused rows add nothing", c.name, y, selectRoleNames[sr.role])
				require.Zero(t, mass, "%s: row %d (%s): refused rows add nothing", c.name, y, selectRoleNames[sr.role])
				require.Equal(t, max(key0, abi.ShardKeyFailed|uint64(abi.StatusBadParams)), key,
					"%s: row %d (%s): key word", c.name, y, selectRoleNames[sr.role])
				cov.refused[sr.role]++
				continue
			}
			minP := sr.q.MinP && p.MinP > 0 && p.MinP <= 1
			if !minP {
				require.Equal(t, uint64(sr.eligible), added, "%s: row %d: matches without min-p", c.name, y)
			} else {
				require.LessOrEqual(t, added, uint64(sr.eligible), "%s: row %d: matches with min-p", c.name, y)
			}
			if !sr.q.Draw {
				require.Equal(t, key0, key, "%s: row %d: key word without SELECT_DRAW", c.name, y)
			} else if added > 0 {
				if key > key0 {
					cov.draws++
					tok := 0xFFFFFFFF - uint32(key)
					require.GreaterOrEqual(t, tok, c.vocabOffset, "%s: row %d: winner", c.name, y)
					require.Less(t, tok, c.vocabOffset+uint32(c.vocab), "%s: row %d: winner", c.name, y)
					if c.vocabOffset != 0 {
						cov.offsetDraws++
					}
				} else {
					cov.drawsKept++
				}
			}
			if added == 0 {
				cov.unchangedRow++
				continue
			}
			cov.matched[c.dtype]++
			cov.fs[sr.q.F]++
			cov.shifts[sr.q.Shift]++
			if mass > 0 {
				cov.mass++
				if sr.realF {
					cov.realF++
				}
			}
			if sr.prefixFromKey && sr.eligible < sr.passFloor {
				cov.byShift[sr.q.Shift]++
			}
			if sr.floorAtKey && sr.eligible < countMatchable(sr.x, sr.q.Shift, sr.q.Prefix) {
				cov.floorCut++
			}
			if minP && 2*added < uint64(sr.eligible) {
				cov.minPCut++
			}
			if minP && p.MinP == 1 {
				cov.minPOne++
			}
			var hasNonFinite, hasNegInf bool
			for _, v := range sr.x {
				hasNonFinite = hasNonFinite || !matchable(v)
				hasNegInf = hasNegInf || v == negInf
			}
			if hasNonFinite {
				cov.nonFinite++
			}
			if hasNegInf {
				cov.negInf++
			}
			for _, f := range []abi.Flags{abi.FlagBias, abi.FlagMask, abi.FlagPenalties, abi.FlagBitmask} {
				if p.Flags&f != 0 {
					cov.processors[f]++
				}
			}
		}
	}
	t.Logf("%d launches; rows matching by dtype %v, by shift %v (prefix cutting %v), by F %v (a real V's %d); floor cuts %d, "+
		"min-p cuts %d, min_p = 1 %d, with mass %d, draws raising %d (at an offset %d) and not %d; with NaN or +Inf %d, "+
		"with -Inf %d; processors %v; preloaded bins added to %d; nothing matched %d; refused by kind %v",
		len(cases), cov.matched, cov.shifts, cov.byShift, cov.fs, cov.realF, cov.floorCut, cov.minPCut, cov.minPOne, cov.mass, cov.draws,
		cov.offsetDraws, cov.drawsKept, cov.nonFinite, cov.negInf, cov.processors, cov.preloaded, cov.unchangedRow,
		cov.refused)
	for d, n := range cov.matched {
		assert.Positive(t, n, "no %s row matched", abi.Suffixes[d])
	}
	for _, s := range []uint8{24, 16, 8, 0} {
		assert.Positive(t, cov.shifts[s], "no row at shift %d matched", s)
		if s < 24 {
			assert.Positive(t, cov.byShift[s], "no row at shift %d whose prefix cut elements", s)
		}
	}
	for _, f := range []abi.Flags{abi.FlagBias, abi.FlagMask, abi.FlagPenalties, abi.FlagBitmask} {
		assert.Positive(t, cov.processors[f], "no matching row with processor flag %d", f)
	}
	assert.Positive(t, cov.fs[45], "no matching row at F = 45")
	for _, n := range []int{cov.realF, cov.floorCut, cov.minPCut, cov.minPOne, cov.mass, cov.draws, cov.offsetDraws, cov.drawsKept,
		cov.nonFinite, cov.negInf, cov.preloaded, cov.split, cov.deep} {
		assert.Positive(t, n, "a part of the workload was never exercised (see the log)")
	}
	for role := selNoShard; role < numSelectRoles; role++ {
		assert.Positive(t, cov.refused[role], "no row refused for %s", selectRoleNames[role])
	}
}

// countMatchable counts the elements of x, neither NaN nor +Inf, whose key carries the
// prefix at shift: the matches with floor 0 and without min-p.
func countMatchable(x []float32, shift uint8, prefix uint32) int {
	n := 0
	mask := prefixMask(shift)
	for _, v := range x {
		if matchable(v) && abi.OrderKey(v)&mask == prefix&mask {
			n++
		}
	}
	return n
}

// TestShardSelectWeightCutoff pins the weight's cutoff of each F from 0 to 62 (ABI.md,
// "shard_select": the weight is 0 below the cutoff of the query's F), where it decides
// whether an element passes a tiny min_p: a row per F holds the values at and beside the
// cutoff as every edition computes it (-(F ln 2 + 1) in float32 arithmetic, each
// operation rounded) and as float64 arithmetic rounded once would, one unit higher for
// some F. The emulated Metal edition must count the same elements as the Go edition.
func TestShardSelectWeightCutoff(t *testing.T) {
	bin := buildDriver(t)
	const rows = 63
	var vals [][]float32
	differ := 0
	for f := range rows {
		c64 := -float32(float64(f)*math.Ln2 + 1)
		c32 := -(float32(float32(f)*0.6931472) + 1)
		if c32 != c64 {
			differ++
		}
		down := func(x float32) float32 { return math.Nextafter32(x, negInf) }
		up := func(x float32) float32 { return math.Nextafter32(x, 0) }
		vals = append(vals, []float32{0, c64, down(c64), up(c64), c32, down(c32), up(c32), -1})
	}
	require.Positive(t, differ, "the two cutoffs agree for every F: the test shows nothing")
	v := len(vals[0])
	c := &launchCase{
		name: "cutoffs", kernel: shardSelect, T: 32, S: 1, vocab: v, stride: v, outRows: rows,
		maxGroups: 4, yieldPct: 10, seed: 7, logits: make([]byte, 4*v*rows), params: make([]byte, abi.RowParamsSize*rows),
		shard: true,
	}
	l := abi.Launch{Rows: rows}
	c.shard0 = make([]uint64, l.SelectWords())
	for f := range rows {
		encodeRow(0, vals[f], c.logits[4*v*f:])
		c.setRowParams(f, abi.RowParams{Row: uint32(f), Temperature: 1, Flags: abi.FlagShard, MinP: 1e-37, Seed: uint64(f)})
		w0, w1 := abi.SelectQuery{M: 0, Shift: 24, F: uint8(f), MinP: true, Draw: true}.Words()
		c.shard0[l.SelectQueryWord(f)], c.shard0[l.SelectQueryWord(f)+1] = w0, w1
	}
	got := runDriver(t, bin, []*launchCase{c})
	want := runGoEdition(t, c, gokernel.Kernels(), rand.New(rand.NewPCG(1, 2)))
	assert.Equal(t, want.keys, got[0].keys, "the shard buffer")
	for f := range rows {
		var gotN, wantN uint64
		for b := range abi.SelectBins {
			gotN += got[0].keys[l.SelectHistWord(f, b)]
			wantN += want.keys[l.SelectHistWord(f, b)]
		}
		// Every value at or above the Go edition's cutoff, and no other, passes min_p.
		var n uint64
		for _, x := range vals[f] {
			if x >= -(float32(float32(f)*0.6931472) + 1) {
				n++
			}
		}
		assert.Equal(t, n, wantN, "F = %d: the Go edition's matches", f)
		assert.Equal(t, wantN, gotN, "F = %d: matches", f)
	}
}
