package mslemu

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/gumbel-go/gumbel/half"
	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/gumbel-go/gumbel/kernelsrc/gokernel"
)

// scoreVocabs and scoreTemps are the vocabularies and temperatures of the score launches
// (temperature 0 scores at 1).
var (
	scoreVocabs = []int{1, 5, 1000, 4099}
	scoreTemps  = []float32{0, 0.7, 2}
)

// What newScoreCase does to a launch row's token.
const (
	tokAny    = iota // a random token of the row as its shape made it
	tokTied          // copies of the token's element at other indices
	tokNegInf        // the token's logit is -Inf
	tokBad           // a token at or past V: status 3
	numTokenKinds
)

// elemSize is the bytes of one logit of the case's dtype.
func (c *launchCase) elemSize() int {
	if c.dtype == 0 {
		return 4
	}
	return 2
}

// logit decodes element i of logits row row.
func (c *launchCase) logit(row, i int) float32 {
	b := c.logits[(row*c.stride+i)*c.elemSize():]
	switch c.dtype {
	case 0:
		return math.Float32frombits(binary.LittleEndian.Uint32(b))
	case 1:
		return half.Float16ToFloat32(binary.LittleEndian.Uint16(b))
	}
	return half.BFloat16ToFloat32(binary.LittleEndian.Uint16(b))
}

// newScoreCase builds a score launch of n rows over newCase's row shapes (NaN, +Inf,
// -Inf, all -Inf, ties, huge values, ...), at temperatures 0, 0.7 and 2, with processors
// and bitmask rows (featureBuffers), and tokens chosen by kind: any, tied with other
// elements of the row, at a -Inf logit, or past V. A few rows have a bad temperature or a
// reserved flag, and some set flags score has no use for (LOGPROBS, ADVANCE, RECORD,
// PERTURBED, ROUTED with either route), which must change nothing.
func newScoreCase(r *rand.Rand, dtype, T, S, n, vocab, width int) *launchCase {
	name := featureCaseName(score, dtype, T, S, 1, vocab, width)
	c := newCase(r, name, score, dtype, T, S, n, vocab)
	c.simdWidth = width
	es := c.elemSize()
	params := make([]abi.RowParams, n)
	for y := range params {
		p := &params[y]
		p.Row, p.Seed, p.Step = c.rowParams(y).Row, r.Uint64(), r.Uint64()
		p.Temperature = pick(r, scoreTemps...)
		if r.IntN(20) == 0 {
			p.Temperature = pick(r, badTemps...)
		}
		row := int(p.Row)
		tok := r.IntN(vocab)
		p.Token = uint32(tok)
		switch (y + r.IntN(2)) % numTokenKinds {
		case tokTied:
			src := c.logits[(row*c.stride+tok)*es:][:es]
			for range 1 + r.IntN(4) {
				copy(c.logits[(row*c.stride+r.IntN(vocab))*es:], src)
			}
		case tokNegInf:
			encodeRow(dtype, []float32{negInf}, c.logits[(row*c.stride+tok)*es:])
		case tokBad:
			p.Token = pick(r, uint32(vocab), uint32(vocab+7), math.MaxUint32)
		}
		chance := func(pct int) bool { return r.IntN(100) < pct }
		for _, f := range []struct {
			flag abi.Flags
			pct  int
		}{
			{abi.FlagBias, 35}, {abi.FlagMask, 30}, {abi.FlagPenalties, 35}, {abi.FlagBitmask, 35},
			{abi.FlagLogprobs, 30}, {abi.FlagAdvance, 30}, {abi.FlagRecord, 30}, {abi.FlagPerturbed, 20},
		} {
			if chance(f.pct) {
				p.Flags |= f.flag
			}
		}
		if chance(20) {
			p.Flags |= abi.FlagRouted | pick(r, 0, abi.FlagCategorical, abi.FlagFiltered)
		}
		if chance(3) {
			p.Flags |= 1 << 14 // reserved: status 3
		}
		p.BitmaskRow = pick[uint32](r, 0, 1, 2, 2, 3, 3, 4, 4)
		p.RepetitionPenalty = pick[float32](r, 1, 1.1, 1.3, 0.8, 2)
		p.FrequencyPenalty = pick[float32](r, 0, 0.5, -0.25, 1)
		p.PresencePenalty = pick[float32](r, 0, 0.2, -1, 0.7)
		p.TopN = pick[uint32](r, 0, 1, 20)
		c.setRowParams(y, *p)
	}
	featureBuffers(r, c, params)
	return c
}

// withoutRouting is c with ROUTED, CATEGORICAL and FILTERED cleared in every row: score
// scores a row whatever its route (as the CUDA edition does), and the Go edition's
// routing check leaves such a row alone, so routed rows are compared with the Go edition
// of the same row unrouted.
func withoutRouting(c *launchCase) *launchCase {
	u := *c
	u.params = slices.Clone(c.params)
	for y := range u.launchRows() {
		p := u.rowParams(y)
		p.Flags &^= abi.FlagRouted | abi.FlagCategorical | abi.FlagFiltered
		u.setRowParams(y, p)
	}
	return &u
}

// TestScoreMatchesGoEdition runs score in the emulator over every dtype, threadgroups of
// 32, 256 and 1024 threads, 1, 3 and 17 threadgroups per row (and a grid two deep, whose
// second layer must stay idle), SIMD widths of 8 to 64 and V of 1, 5, 1000 and 4099, on
// newScoreCase's rows: ties at the token's logit, NaN, +Inf, -Inf, all -Inf,
// temperatures 0, 0.7 and 2, processors and bitmask rows, bad rows (token >= V, bad
// temperature, reserved flag). Statuses and ranks must equal the Go edition's (and the
// ranks a count over the logits), records agree within recordTolerance, params and counts
// stay as they were, and counters be left at zero.
func TestScoreMatchesGoEdition(t *testing.T) {
	bin := buildDriver(t)
	r := rand.New(rand.NewPCG(2026, 15))
	var cases []*launchCase
	add := func(dtype, T, S, width int) *launchCase {
		v := scoreVocabs[len(cases)%len(scoreVocabs)]
		c := newScoreCase(r, dtype, T, S, 8, v, width)
		cases = append(cases, c)
		return c
	}
	for dtype := range abi.Suffixes {
		for _, T := range []int{32, 256, 1024} {
			for _, S := range []int{1, 3, 17} {
				add(dtype, T, S, 0)
			}
		}
	}
	for _, width := range []int{8, 16, 64} {
		for _, T := range []int{64, 512} {
			add(0, T, pick(r, 3, 17), width)
		}
	}
	deep := add(2, 128, 3, 0)
	deep.draws = 2
	deep.name += "/grid.z=2"

	got := runDriver(t, bin, cases)
	kernels := gokernel.Kernels()
	var records, tied, routed, processed, bitmasked int
	var worst float64
	var statusCounts [4]int
	var temps [3]int
	for i, c := range cases {
		want := runGoEdition(t, withoutRouting(c), kernels, r)
		assert.Equal(t, c.params, got[i].params, "%s: score changed params", c.name)
		want.params = c.params
		n, w := compareOutputs(t, c, want, got[i])
		records += n
		worst = max(worst, w)
		for y := range c.launchRows() {
			p := c.rowParams(y)
			row := int(p.Row)
			st := want.status[row]
			if !assert.True(t, st >= 0 && st < 4, "%s: launch row %d: the Go edition wrote status %d", c.name, y, st) {
				continue
			}
			statusCounts[st]++
			if abi.Status(st) != abi.StatusOK {
				continue
			}
			xt := c.logit(row, int(p.Token))
			rank, above := 0, 0
			for j := range c.vocab {
				x := c.logit(row, j)
				if x >= xt {
					rank++
				}
				if x > xt {
					above++
				}
			}
			assert.Equal(t, int32(rank), want.tokens[row], "%s: launch row %d: the Go edition's rank", c.name, y)
			assert.Equal(t, int32(rank), got[i].tokens[row], "%s: launch row %d: rank", c.name, y)
			if rank > above+1 {
				tied++
			}
			if p.Flags&abi.FlagRouted != 0 {
				routed++
			}
			if p.Flags&abi.FlagsProcessors != 0 {
				processed++
			}
			if p.Flags&abi.FlagBitmask != 0 {
				bitmasked++
			}
			temps[slices.Index(scoreTemps, p.Temperature)]++
		}
	}
	t.Logf("%d launches: rows by status 0/1/2/3 %v; scored rows: %d tied at the token, %d processed, "+
		"%d with a bitmask row, %d routed, by temperature 0/0.7/2 %v; %d records compared, largest deviation "+
		"%.3g of the normaliser", len(cases), statusCounts, tied, processed, bitmasked, routed, temps, records, worst)
	for st, n := range statusCounts {
		assert.Positive(t, n, "no row ended with status %d", st)
	}
	for k, n := range temps {
		assert.Positive(t, n, "no row scored at temperature %g", scoreTemps[k])
	}
	assert.Positive(t, tied, "no scored row with ties at the token's logit")
	assert.Positive(t, processed, "no scored row with processors")
	assert.Positive(t, bitmasked, "no scored row with a bitmask row")
	assert.Positive(t, routed, "no routed row scored")
	assert.Greater(t, records, 100, "too few records compared")
}

// TestScoreKnownRows checks the emulated score kernel on small rows against answers
// computed here in float64, without an edition to compare with: the rank counts the
// token's ties (-0 ties +0), a lone finite logit has probability 1, the raw record
// ignores the temperature while the processed one applies it, and a masked token's
// processed log-probability is -Inf.
func TestScoreKnownRows(t *testing.T) {
	bin := buildDriver(t)
	negZero := float32(math.Copysign(0, -1))
	type known struct {
		name  string
		row   []float32
		token uint32
		temp  float32
		mask  uint32 // allowed tokens (FlagMask) unless 0
		rank  int32
	}
	rows := []known{
		{name: "ties", row: []float32{1, 3, 3, 2, 3}, token: 2, rank: 3},
		{name: "signed zeros", row: []float32{0, -1, negZero}, token: 2, rank: 2},
		{name: "lone finite", row: []float32{negInf, 5, negInf, negInf}, token: 1, temp: 2, rank: 1},
		{name: "temperature", row: []float32{0.5, -1, 2, 0.25}, token: 0, temp: 0.7, rank: 2},
		{name: "masked token", row: []float32{1, 2, 3}, token: 2, temp: 2, mask: 0b011, rank: 1},
	}
	var cases []*launchCase
	for _, k := range rows {
		for _, S := range []int{1, 3} {
			c := &launchCase{
				name: fmt.Sprintf("%s/S=%d", k.name, S), kernel: score, T: 32, S: S, vocab: len(k.row),
				stride: len(k.row), outRows: 1, maxGroups: S, yieldPct: 20, seed: uint64(S),
				logits: make([]byte, 4*len(k.row)), params: make([]byte, abi.RowParamsSize),
			}
			encodeRow(0, k.row, c.logits)
			p := abi.RowParams{Temperature: k.temp, Token: k.token}
			if k.mask != 0 {
				p.Flags, c.mask = abi.FlagMask, []uint32{k.mask}
			}
			c.setRowParams(0, p)
			cases = append(cases, c)
		}
	}
	// logprob is x_t - log Σ exp(x) over xs in float64.
	logprob := func(xs []float64, xt float64) float64 {
		var s float64
		for _, x := range xs {
			s += math.Exp(x)
		}
		return xt - math.Log(s)
	}
	for i, res := range runDriver(t, bin, cases) {
		k := rows[i/2]
		name := cases[i].name
		invT := float32(1)
		if k.temp != 0 {
			invT = 1 / k.temp
		}
		var raw, proc []float64
		for j, x := range k.row {
			raw = append(raw, float64(x))
			if k.mask != 0 && k.mask>>j&1 == 0 {
				x = negInf
			}
			proc = append(proc, float64(x*invT))
		}
		assert.Equal(t, int32(abi.StatusOK), res.status[0], "%s: status", name)
		assert.Equal(t, k.rank, res.tokens[0], "%s: rank", name)
		rec := res.logprobs[:4]
		assert.InDelta(t, logprob(raw, raw[k.token]), rec[0], 1e-5, "%s: raw log-probability (record %v)", name, rec)
		if pt := proc[k.token]; math.IsInf(pt, -1) {
			assert.True(t, math.IsInf(float64(rec[1]), -1), "%s: processed log-probability %g", name, rec[1])
		} else {
			assert.InDelta(t, logprob(proc, pt), rec[1], 1e-5, "%s: processed log-probability (record %v)", name, rec)
		}
		assert.InDelta(t, logprob(raw, 0), -rec[2], 1e-5, "%s: raw log-normaliser (record %v)", name, rec)
		assert.InDelta(t, logprob(proc, 0), -rec[3], 1e-5, "%s: processed log-normaliser (record %v)", name, rec)
	}
}
