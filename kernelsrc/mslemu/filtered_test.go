package mslemu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/gumbel-go/gumbel/kernelsrc/gokernel"
)

// Filter combinations of a filtered row: which of top-k, top-p and min-p are on.
const (
	comboTopK = 1 << iota
	comboTopP
	comboMinP
	numCombos = 1 << 3
)

// setFilters gives p the filters of combo: an active value for each filter in it, an
// inactive one (0, or out of range: top-k ≥ V, top-p ≥ 1, min-p > 1) for the rest.
func setFilters(r *rand.Rand, p *abi.RowParams, combo, vocab int) {
	v := uint32(vocab)
	if combo&comboTopK != 0 && vocab > 1 {
		p.TopK = pick[uint32](r, 1, 2, 5, 50, v/3+1, v-1)
		p.TopK = min(p.TopK, v-1)
	} else {
		p.TopK = pick[uint32](r, 0, 0, v, v+3)
	}
	if combo&comboTopP != 0 {
		p.TopP = pick[float32](r, 1e-12, 0.01, 0.3, 0.5, 0.9, 0.999)
	} else {
		p.TopP = pick[float32](r, 0, 0, 1, 1.5)
	}
	if combo&comboMinP != 0 {
		p.MinP = pick[float32](r, 1e-30, 0.01, 0.05, 0.3, 0.5, 1)
	} else {
		p.MinP = pick[float32](r, 0, 0, 1.5)
	}
}

// activeCombo is the filters that are on in p (ABI.md, "categorical": top-k for
// 0 < k < V, top-p for 0 < p < 1, min-p for 0 < min_p ≤ 1).
func activeCombo(p abi.RowParams, vocab int) int {
	c := 0
	if p.TopK > 0 && uint64(p.TopK) < uint64(vocab) {
		c |= comboTopK
	}
	if p.TopP > 0 && p.TopP < 1 {
		c |= comboTopP
	}
	if p.MinP > 0 && p.MinP <= 1 {
		c |= comboMinP
	}
	return c
}

// TestFilteredMatchesGoEdition runs the filtered route in the emulator (filter_max over
// (S, n, 1), then filtered over (S, n, D), on the same buffers) over every dtype,
// threadgroups of 32, 256 and 1024, 1, 2, 3 and 16 threadgroups per row, 1 and 3 draws
// and SIMD widths of 8 to 64. Each launch has rows with every combination of top-k, top-p
// and min-p (and rows whose filters are off or out of range), greedy and bad rows, the
// row features of TestRowFeaturesMatchGoEdition (processors, LOGPROBS, ADVANCE, RECORD,
// routing to any kernel, reserved flags) on every row shape. Tokens, status, counts and
// params must equal the Go edition's, records agree within recordTolerance, and counters
// be left at zero.
func TestFilteredMatchesGoEdition(t *testing.T) {
	bin := buildDriver(t)
	r := rand.New(rand.NewPCG(2026, 9))
	var cases []*launchCase
	splits := []int{1, 2, 3, 16}
	add := func(dtype, T, S, D, width int) {
		v := vocabs[r.IntN(len(vocabs))]
		c := newFeatureCase(r, featureCaseName(filtered, dtype, T, S, D, v, width), filtered, dtype, T, S, D,
			numCombos, v)
		c.simdWidth = width
		for y := range c.launchRows() {
			p := c.rowParams(y)
			setFilters(r, &p, (y+len(cases))%numCombos, v)
			if r.IntN(4) == 0 {
				// The kept set's descriptor in place of the record, for a token that is
				// sometimes past V.
				p.Flags |= abi.FlagLogprobs | abi.FlagKeptSet
				p.Token = uint32(r.IntN(v + 1))
			}
			c.setRowParams(y, p)
		}
		cases = append(cases, c)
	}
	draws := func() int { return pick(r, 1, 3) }
	for dtype := range abi.Suffixes {
		for _, T := range []int{32, 256, 1024} {
			for _, S := range splits {
				add(dtype, T, S, draws(), 0)
			}
		}
	}
	for _, width := range []int{8, 16, 64} {
		for _, T := range []int{64, 512} {
			add(0, T, pick(r, splits...), draws(), width)
		}
	}
	got := runDriver(t, bin, cases)
	kernels := gokernel.Kernels()
	var records, greedy, sampled int
	var worst float64
	var statusCounts [4]int
	var combos [numCombos]int
	for i, c := range cases {
		want := runGoEdition(t, c, kernels, r)
		n, w := compareOutputs(t, c, want, got[i])
		records += n
		worst = max(worst, w)
		for y := range c.launchRows() {
			p := c.rowParams(y)
			for z := range c.numDraws() {
				st := want.status[int(p.Row)*c.numDraws()+z]
				if st < 0 || st >= 4 {
					continue // routed away
				}
				statusCounts[st]++
				if st != int32(abi.StatusOK) {
					continue
				}
				if p.Temperature == 0 {
					greedy++
				} else {
					sampled++
					combos[activeCombo(p, c.vocab)]++
				}
			}
		}
	}
	t.Logf("%d launches: slots by status 0/1/2/3 %v, %d greedy and %d sampled draws (by filters "+
		"none/k/p/kp/min/k+min/p+min/all: %v); %d records compared, largest deviation %.3g of the normaliser",
		len(cases), statusCounts, greedy, sampled, combos, records, worst)
	for st, n := range statusCounts {
		assert.Positive(t, n, "no slot ended with status %d", st)
	}
	for combo, n := range combos {
		assert.Positive(t, n, "no draw with filter combination %d", combo)
	}
	assert.Positive(t, greedy, "no greedy draw")
	assert.Greater(t, records, 150, "too few log-probability records compared")
}

// TestFilteredExactMatchesGoEdition runs the filtered route in the emulator on the rows of
// TestExactScoresMatchGoEdition (exactShapes) at temperatures down to 1e-30, every
// combination of filters and the row features, where the float32 scores lose the noise
// and the draw is redrawn by the exact comparison (ABI.md, "filtered"): tokens, status,
// counts and params must equal the Go edition's, records agree within recordTolerance.
func TestFilteredExactMatchesGoEdition(t *testing.T) {
	bin := buildDriver(t)
	r := rand.New(rand.NewPCG(2026, 1203))
	var cases []*launchCase
	var tops [][]float32 // per case, the largest |x| of each row given an exact shape (0: none)
	for i := range 36 {
		dtype := i % len(abi.Suffixes)
		S := pick(r, 1, 3, 16)
		v := pick(r, 4, 37, 257, 1001)
		D := 1 + r.IntN(3)
		T := pick(r, 32, 256)
		c := newFeatureCase(r, "exact "+featureCaseName(filtered, dtype, T, S, D, v, 0), filtered, dtype, T, S, D,
			numCombos, v)
		esize := 4
		if dtype != 0 {
			esize = 2
		}
		top := make([]float32, c.outRows)
		for row := range c.outRows {
			if r.IntN(5) != 0 {
				vals := exactShapes[r.IntN(len(exactShapes))](r, v)
				encodeRow(dtype, vals, c.logits[row*c.stride*esize:])
				for _, x := range vals {
					top[row] = max(top[row], float32(math.Abs(float64(x))))
				}
			}
		}
		for y := range c.launchRows() {
			p := c.rowParams(y)
			setFilters(r, &p, (y+i)%numCombos, v)
			if y%2 == 0 {
				p.Flags &^= abi.FlagsProcessors // half the rows as they come, for the count below
			}
			if p.Temperature > 0 && !math.IsInf(float64(p.Temperature), 0) {
				p.Temperature = pick[float32](r, 1, 0.3, 1e-3, 1e-5, 1e-7, 1e-30)
			}
			c.setRowParams(y, p)
		}
		cases = append(cases, c)
		tops = append(tops, top)
	}
	got := runDriver(t, bin, cases)
	kernels := gokernel.Kernels()
	exact := 0
	for i, c := range cases {
		want := runGoEdition(t, c, kernels, r)
		compareOutputs(t, c, want, got[i])
		for y := range c.launchRows() {
			p := c.rowParams(y)
			if p.Temperature == 0 || p.Flags&abi.FlagsProcessors != 0 {
				continue
			}
			for z := range c.numDraws() {
				// The largest logit is always kept: beyond ExactLimit its score takes the
				// draw to the exact comparison.
				if want.status[int(p.Row)*c.numDraws()+z] == 0 && float32(tops[i][p.Row]/p.Temperature) >= abi.ExactLimit {
					exact++
				}
			}
		}
	}
	t.Logf("%d launches, %d draws redrawn by the exact comparison", len(cases), exact)
	require.Greater(t, exact, 50, "too few draws need the exact comparison")
}
