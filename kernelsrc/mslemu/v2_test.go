package mslemu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/gumbel-go/gumbel/kernelsrc/gokernel"
)

// recordTolerance is how far a log-probability word of the MSL edition may lie from the
// Go edition's: ABI.md lets the log-sum-exps use an exp of relative error 2^-20 and any
// order, and says editions agree to about 1e-5 relative. Every word is a difference
// from (or is) a log-normaliser, so the error is relative to the larger of the two
// normalisers (and to 1, for words near 0).
const recordTolerance = 1e-5

// v2Row draws the version-2 fields of one launch row of kernel k: flags, penalties and,
// for topn, N. The caller has set the version-1 fields.
func v2Row(r *rand.Rand, k kernelKind, p *rowParams) {
	chance := func(pct int) bool { return r.IntN(100) < pct }
	set := func(f abi.Flags, pct int) {
		if chance(pct) {
			p.flags |= f
		}
	}
	set(abi.FlagBias, 40)
	set(abi.FlagMask, 40)
	set(abi.FlagPenalties, 40)
	if k == topN {
		set(abi.FlagPerturbed, 60)
		p.topN = pick[uint32](r, 1, 2, 5, 20, 20, 7, 3, 0, 21)
	} else {
		set(abi.FlagLogprobs, 75)
		set(abi.FlagAdvance, 50)
		set(abi.FlagRecord, 50)
		if chance(25) {
			p.flags |= abi.FlagRouted
			set(abi.FlagCategorical, 50)
		}
	}
	if chance(3) {
		p.flags |= 1 << 12 // reserved: status 3
	}
	p.repetition = pick[float32](r, 1, 1.1, 1.3, 0.8, 2)
	p.frequency = pick[float32](r, 0, 0.5, -0.25, 1)
	p.presence = pick[float32](r, 0, 0.2, -1, 0.7)
}

// v2Buffers fills the bias, counts and mask buffers of the case's rows when a launch
// row uses them.
func v2Buffers(r *rand.Rand, c *launchCase, params []rowParams) {
	var flags abi.Flags
	for _, p := range params {
		flags |= p.flags
	}
	v, rows := c.vocab, c.outRows
	if flags&abi.FlagBias != 0 {
		c.bias = make([]float32, rows*v)
		for i := range c.bias {
			switch k := r.IntN(20); {
			case k < 8:
				// no bias
			case k == 8:
				c.bias[i] = float32(40 * (r.Float64() - 0.5))
			default:
				c.bias[i] = float32(r.NormFloat64() * 2)
			}
		}
	}
	if flags&(abi.FlagPenalties|abi.FlagRecord) != 0 {
		c.counts = make([]uint32, rows*v)
		for i := range c.counts {
			switch k := r.IntN(100); {
			case k < 55:
			case k < 80:
				c.counts[i] = 1 + uint32(r.IntN(4))
			case k < 88:
				c.counts[i] = 1 << 31 // prompt only
			case k < 94:
				c.counts[i] = 1<<31 | uint32(1+r.IntN(3))
			case k < 97:
				c.counts[i] = 0x7FFFFFFF // saturated
			default:
				c.counts[i] = 0xFFFFFFFF
			}
		}
	}
	if flags&abi.FlagMask != 0 {
		w := (v + 31) / 32
		c.mask = make([]uint32, rows*w)
		for row := range rows {
			words := c.mask[row*w : (row+1)*w]
			switch k := r.IntN(10); {
			case k == 0:
				// nothing allowed: status 2
			case k == 1:
				i := r.IntN(v)
				words[i/32] = 1 << (i % 32)
			default:
				for i := range v {
					if r.IntN(10) < 7 {
						words[i/32] |= 1 << (i % 32)
					}
				}
			}
		}
	}
}

// newV2Case is newCase with version-2 rows: processors, log-probabilities, draws,
// routing, step advance and token recording (topn: N and PERTURBED).
func newV2Case(r *rand.Rand, name string, kernel kernelKind, dtype, T, S, draws, n, vocab int) *launchCase {
	c := newCase(r, name, kernel, dtype, T, S, n, vocab)
	c.draws = draws
	params := make([]rowParams, n)
	for y := range params {
		p := &params[y]
		p.row = binaryRow(c.params[64*y:])
		p.temperature = binaryTemperature(c.params[64*y:])
		p.seed, p.step = r.Uint64(), r.Uint64()
		if r.IntN(8) == 0 {
			p.step = math.MaxUint64 - uint64(r.IntN(2)) // draws wrap the step
		}
		if kernel == categorical {
			p.topK = pick[uint32](r, 0, 0, 1, 2, 5, 50, uint32(max(vocab-1, 0)))
			p.topP = pick[float32](r, 0, 0, 0.01, 0.5, 0.9, 0.999, 1)
			p.minP = pick[float32](r, 0, 0, 0, 0.05, 0.5, 1)
		}
		v2Row(r, kernel, p)
		p.put(c.params[64*y:])
	}
	v2Buffers(r, c, params)
	return c
}

func binaryRow(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

func binaryTemperature(b []byte) float32 { return math.Float32frombits(binaryRow(b[4:])) }

// closeEnough reports whether got lies within recordTolerance of want, relative to
// scale; NaNs, infinities and untouched sentinels must match exactly.
func closeEnough(want, got, scale float32) bool {
	if math.IsNaN(float64(want)) || math.IsNaN(float64(got)) {
		return math.IsNaN(float64(want)) && math.IsNaN(float64(got))
	}
	if math.IsInf(float64(want), 0) || math.IsInf(float64(got), 0) || want == math.Float32frombits(uint32(untouched)) {
		return want == got
	}
	return math.Abs(float64(want)-float64(got)) <= recordTolerance*float64(scale)
}

// compareV2 requires the Go edition's outputs of one case from the emulated MSL and
// returns the number of records compared and the largest relative deviation seen.
func compareV2(t *testing.T, c *launchCase, want, got result) (records int, worst float64) {
	t.Helper()
	assert.Zero(t, got.countersLeft, "%s: counters not left at zero", c.name)
	assert.Zero(t, want.countersLeft, "%s: the Go edition left counters set", c.name)
	assert.Equal(t, want.params, got.params, "%s: params after the launch (ADVANCE)", c.name)
	assert.Equal(t, want.counts, got.counts, "%s: counts after the launch (RECORD)", c.name)
	if c.kernel == topN {
		for o := range c.slots() {
			assert.Equal(t, want.tokens[o], got.tokens[o], "%s: topn slot %d token", c.name, o)
			w, g := math.Float32frombits(uint32(want.status[o])), math.Float32frombits(uint32(got.status[o]))
			scale := max(1, float32(math.Abs(float64(w))))
			if !closeEnough(w, g, scale) {
				y := slices.Index(rowsOf(c), uint32(o/abi.MaxTopN))
				assert.Failf(t, "topn value differs", "%s: slot %d: Go %g, MSL %g (params %x)", c.name, o, w, g,
					c.params[64*y:64*y+56])
			} else if w == w && !math.IsInf(float64(w), 0) && want.tokens[o] >= 0 {
				records++
				worst = max(worst, math.Abs(float64(w-g))/float64(scale))
			}
		}
		return records, worst
	}
	for o := range c.slots() {
		assert.Equal(t, want.status[o], got.status[o], "%s: slot %d status", c.name, o)
		assert.Equal(t, want.tokens[o], got.tokens[o], "%s: slot %d token", c.name, o)
		w, g := want.logprobs[4*o:4*o+4], got.logprobs[4*o:4*o+4]
		scale := float32(1)
		for _, v := range w[2:] {
			if !math.IsInf(float64(v), 0) && v == v {
				scale = max(scale, float32(math.Abs(float64(v))))
			}
		}
		ok := true
		for k := range 4 {
			ok = ok && closeEnough(w[k], g[k], scale)
		}
		if !ok {
			assert.Failf(t, "log-probability record differs", "%s: slot %d (status %d): Go %v, MSL %v",
				c.name, o, want.status[o], w, g)
			continue
		}
		if abi.Status(want.status[o]) == abi.StatusOK && w[0] != math.Float32frombits(uint32(untouched)) {
			records++
			for k := range 4 {
				if !math.IsInf(float64(w[k]), 0) && w[k] == w[k] {
					worst = max(worst, math.Abs(float64(w[k]-g[k]))/float64(scale))
				}
			}
		}
	}
	return records, worst
}

// TestVersion2MatchesGoEdition runs the version-2 features of sampling.metal in the
// emulator, over every dtype, threadgroups of 32, 256 and 1024, 1, 3 and 16 threadgroups
// per row, 1 to 3 draws and SIMD widths of 8 to 64: processed logits (bias, penalties
// with prompt and saturated counts, masks with nothing or one token allowed), records,
// device routing, step advance (across the 2^64 wrap), token recording and topn with and
// without PERTURBED. Tokens, status, counts and params must equal the Go edition's;
// log-probability records and topn values must agree within recordTolerance.
func TestVersion2MatchesGoEdition(t *testing.T) {
	bin := buildDriver(t)
	r := rand.New(rand.NewPCG(2026, 7))
	var cases []*launchCase
	add := func(kernel kernelKind, dtype, T, S, D, width int) {
		v := vocabs[r.IntN(len(vocabs))]
		name := fmt.Sprintf("v2/%s/T=%d/S=%d/D=%d/V=%d/width=%d", abi.Suffixes[dtype], T, S, D, v, width)
		switch kernel {
		case gumbelArgmax:
			name = abi.GumbelArgmax + name
		case categorical:
			name = abi.Categorical + name
		default:
			name = abi.TopN + name
		}
		c := newV2Case(r, name, kernel, dtype, T, S, D, 5, v)
		c.simdWidth = width
		cases = append(cases, c)
	}
	for dtype := range abi.Suffixes {
		for _, T := range []int{32, 256, 1024} {
			for _, S := range []int{1, 3, 16} {
				add(gumbelArgmax, dtype, T, S, 1+r.IntN(3), 0)
				add(topN, dtype, T, S, 1, 0)
			}
			for range 3 {
				add(categorical, dtype, T, 1, 1+r.IntN(3), 0)
			}
		}
	}
	for _, width := range []int{8, 16, 64} {
		for _, T := range []int{64, 512} {
			add(gumbelArgmax, 0, T, 3, 2, width)
			add(categorical, 0, T, 1, 2, width)
			add(topN, 0, T, 3, 1, width)
		}
	}
	got := runDriver(t, bin, cases)
	kernels := gokernel.Kernels()
	var records, okSlots, untouchedSlots int
	var worst float64
	var statusCounts [4]int
	for i, c := range cases {
		want := runGoEdition(t, c, kernels, r)
		n, w := compareV2(t, c, want, got[i])
		records += n
		worst = max(worst, w)
		if c.kernel == topN {
			continue
		}
		for o := range c.slots() {
			switch st := want.status[o]; {
			case st == untouched:
				untouchedSlots++
			case st >= 0 && st < 4:
				statusCounts[st]++
				okSlots++
			}
		}
	}
	t.Logf("%d launches: %d slots with a status (0/1/2/3: %v), %d left alone (routed away or unnamed); "+
		"%d records and topn values compared, largest deviation %.3g of the normaliser",
		len(cases), okSlots, statusCounts, untouchedSlots, records, worst)
	for st, n := range statusCounts {
		assert.Positive(t, n, "no slot ended with status %d", st)
	}
	assert.Greater(t, records, 500, "too few log-probability records compared")
}

// TestDrawsEqualAdvancedLaunches runs the emulated kernels the way a captured graph
// replays them: one launch of D draws (ADVANCE | RECORD | PENALTIES | LOGPROBS) must give
// the same tokens and records as D one-draw launches that each read the step the
// previous one advanced on the device, end with the same step, and add every drawn
// token to the counts once.
func TestDrawsEqualAdvancedLaunches(t *testing.T) {
	bin := buildDriver(t)
	r := rand.New(rand.NewPCG(5, 9))
	const draws = 4
	for _, kernel := range []kernelKind{gumbelArgmax, categorical} {
		whole := newV2Case(r, fmt.Sprintf("whole/%d", kernel), kernel, 0, 256, 3, draws, 4, 1000)
		whole.bias, whole.mask = nil, nil
		whole.counts = make([]uint32, whole.outRows*whole.vocab)
		for i := range whole.counts {
			whole.counts[i] = uint32(r.IntN(3)) // penalties that move the draws
		}
		single := *whole
		single.draws = 1
		single.name = fmt.Sprintf("single/%d", kernel)
		single.params = slices.Clone(whole.params)
		for y := range whole.launchRows() {
			p := rowParams{row: binaryRow(whole.params[64*y:]), temperature: 1.5, seed: r.Uint64(), step: r.Uint64(),
				flags:      abi.FlagAdvance | abi.FlagRecord | abi.FlagPenalties | abi.FlagLogprobs,
				repetition: 1.5, frequency: 0.5, presence: 0.25}
			if kernel == categorical {
				p.topK = 50
			}
			p.put(whole.params[64*y:])
			p.flags &^= abi.FlagRecord // the one-draw launches keep the counts fixed
			p.put(single.params[64*y:])
		}
		got := runDriver(t, bin, []*launchCase{whole})[0]

		wantCounts := slices.Clone(whole.counts)
		var last result
		for z := range draws {
			res := runDriver(t, bin, []*launchCase{&single})[0]
			single.params = res.params
			last = res
			for row := range whole.outRows {
				o := row*draws + z
				assert.Equal(t, res.status[row], got.status[o], "%s: row %d draw %d status", whole.name, row, z)
				assert.Equal(t, res.tokens[row], got.tokens[o], "%s: row %d draw %d token", whole.name, row, z)
				assert.Equal(t, bitsOf(res.logprobs[4*row:4*row+4]), bitsOf(got.logprobs[4*o:4*o+4]),
					"%s: row %d draw %d record", whole.name, row, z)
				if abi.Status(res.status[row]) == abi.StatusOK {
					wantCounts[row*whole.vocab+int(res.tokens[row])]++
				}
			}
		}
		for y := range whole.launchRows() {
			assert.Equal(t, last.params[64*y+16:64*y+24], got.params[64*y+16:64*y+24], "%s: launch row %d: the step after D draws",
				whole.name, y)
		}
		assert.Equal(t, wantCounts, got.counts, "%s: counts after RECORD", whole.name)
		assert.NotEqual(t, whole.params, got.params, "%s: ADVANCE moved no step", whole.name)
	}
}

// bitsOf compares float32 records bit for bit (NaN included).
func bitsOf(v []float32) []uint32 {
	out := make([]uint32, len(v))
	for i, f := range v {
		out[i] = math.Float32bits(f)
	}
	return out
}

// rowsOf lists the logits row of each launch row.
func rowsOf(c *launchCase) []uint32 {
	rows := make([]uint32, c.launchRows())
	for y := range rows {
		rows[y] = binaryRow(c.params[64*y:])
	}
	return rows
}
