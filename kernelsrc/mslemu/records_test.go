package mslemu

import (
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
)

// recordTolerance is how far a log-probability word of the MSL edition may lie from the
// Go edition's: ABI.md lets the log-sum-exps use an exp of relative error 2^-20 and any
// order, and says editions agree to about 1e-5 relative. Every word is a difference
// from (or is) a log-normaliser, so the error is relative to the larger of the two
// normalisers (and to 1, for words near 0).
const recordTolerance = 1e-5

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

// compareOutputs requires the Go edition's outputs of one case from the emulated MSL:
// counters left at zero, params (ADVANCE) and counts (RECORD) equal, tokens and status
// equal in every slot, and log-probability records (topn: values) within
// recordTolerance. It returns the number of records or values compared and the largest
// relative deviation seen.
func compareOutputs(t *testing.T, c *launchCase, want, got result) (records int, worst float64) {
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
				assert.Failf(t, "topn value differs", "%s: slot %d: Go %g, MSL %g (params %+v)", c.name, o, w, g,
					c.rowParams(y))
			} else if w == w && !math.IsInf(float64(w), 0) && want.tokens[o] >= 0 {
				records++
				worst = max(worst, math.Abs(float64(w-g))/float64(scale))
			}
		}
		return records, worst
	}
	kept := keptSetSlots(c)
	for o := range c.slots() {
		assert.Equal(t, want.status[o], got.status[o], "%s: slot %d status", c.name, o)
		assert.Equal(t, want.tokens[o], got.tokens[o], "%s: slot %d token", c.name, o)
		w, g := want.logprobs[4*o:4*o+4], got.logprobs[4*o:4*o+4]
		if kept[o] && abi.Status(want.status[o]) == abi.StatusOK {
			// A kept-set descriptor: the threshold bit for bit, m exactly (+0 and -0
			// weigh alike), the two logarithms within tolerance of their own size.
			assert.Equal(t, math.Float32bits(w[0]), math.Float32bits(g[0]), "%s: slot %d: descriptor's threshold", c.name, o)
			assert.True(t, w[2] == g[2], "%s: slot %d: descriptor's m: Go %v, MSL %v", c.name, o, w, g)
			for _, k := range []int{1, 3} {
				assert.True(t, closeEnough(w[k], g[k], max(1, float32(math.Abs(float64(w[3]))))),
					"%s: slot %d: descriptor's word %d: Go %v, MSL %v", c.name, o, k, w, g)
			}
			records++
			continue
		}
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

// keptSetSlots marks the output slots of c's sampled FlagKeptSet rows of the categorical
// and filtered kernels, which hold kept-set descriptors rather than records.
func keptSetSlots(c *launchCase) map[int]bool {
	kept := map[int]bool{}
	if c.kernel != categorical && c.kernel != filtered {
		return kept
	}
	for y := range c.launchRows() {
		p := c.rowParams(y)
		if p.Flags&abi.FlagKeptSet == 0 || p.Flags&abi.FlagLogprobs == 0 || p.Temperature == 0 {
			continue
		}
		for z := range c.numDraws() {
			kept[int(p.Row)*c.numDraws()+z] = true
		}
	}
	return kept
}

// rowsOf lists the logits row of each launch row.
func rowsOf(c *launchCase) []uint32 {
	rows := make([]uint32, c.launchRows())
	for y := range rows {
		rows[y] = c.rowParams(y).Row
	}
	return rows
}

// bitsOf compares float32 records bit for bit (NaN included).
func bitsOf(v []float32) []uint32 {
	out := make([]uint32, len(v))
	for i, f := range v {
		out[i] = math.Float32bits(f)
	}
	return out
}
