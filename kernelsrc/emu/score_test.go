package emu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
)

// This file tests the score kernel (../cuda/score.cuh) against the Go edition: per row the
// rank of a given token among the raw logits (its ties included), its raw and processed
// log-probabilities and the two log-sum-exps. Beside the comparison, the Go edition's
// answers are checked against the row itself on the host (the status of bad rows and of
// rows without processors, the rank, the raw half of the record, and the processed half
// where no processor applies), so that a mistake both editions share is caught too.

// The tokens a score row asks about.
const (
	pickArgmax = iota // the largest logit (its ties rank with it)
	pickTied          // a token whose logit another token shares
	pickLeast         // the smallest logit
	pickNegInf        // a -Inf logit, or the smallest where the row has none
	pickRandom
	numPicks
)

// pickToken returns the token of row (the stored logits) that pick names.
func pickToken(r *rand.Rand, row []float32, pick int) uint32 {
	largest, least := -1, -1
	for i, x := range row {
		if x != x {
			continue
		}
		if largest < 0 || x > row[largest] {
			largest = i
		}
		if least < 0 || x < row[least] {
			least = i
		}
	}
	if largest < 0 {
		return uint32(r.IntN(len(row)))
	}
	var among []int
	switch pick {
	case pickArgmax:
		return uint32(largest)
	case pickTied:
		n := map[float32]int{} // +0 and -0 are one key, as they tie under >=
		for _, x := range row {
			n[x]++
		}
		for i, x := range row {
			if n[x] > 1 {
				among = append(among, i)
			}
		}
	case pickNegInf:
		for i, x := range row {
			if math.IsInf(float64(x), -1) {
				among = append(among, i)
			}
		}
		if len(among) == 0 {
			return uint32(least)
		}
	case pickLeast:
		return uint32(least)
	}
	if len(among) == 0 {
		return uint32(r.IntN(len(row)))
	}
	return uint32(among[r.IntN(len(among))])
}

// scoreRowShapes are the rows of the score launches: LLM-shaped, ties, masked and sparse
// rows, magnitudes that overflow once scaled, subnormals and signed zeros, and the rows
// of statuses 1 and 2.
var scoreRowShapes = []func(*rand.Rand, int) []float32{
	llmRow, llmRow, llmRow, strongRow, tiedRow, tiedRow, steppedRow, maskedRow, sparseRow, farRow, hugeRow,
	soleRow, tinyRow, zeroRow, negInfRow, nanRow, posInfRow,
}

var scoreTemperatures = []float32{0, 0.7, 1, 2}

// scoreRow fills a score row's parameters: a temperature, a token of the row picked one
// of the ways above, and, with processors, the feature flags; the flags and fields score
// ignores (LOGPROBS, RECORD, ADVANCE, filters, TopN, PERTURBED) are set at random. About
// one row in eight is bad: a token at or past V, a reserved flag or a bad temperature.
func (l *launch) scoreRow(r *rand.Rand, p *rowParams, processors bool) {
	p.Temperature = scoreTemperatures[r.IntN(len(scoreTemperatures))]
	if l.vocab > 0 {
		p.Token = pickToken(r, l.rowValues(int(p.Row)), r.IntN(numPicks))
	}
	if processors {
		l.featureFlags(r, p)
	} else if r.IntN(2) == 0 {
		// RECORD without a counts buffer: score ignores it, so the row is not bad.
		p.Flags |= abi.FlagLogprobs | abi.FlagAdvance | abi.FlagRecord
	}
	p.TopK, p.TopP, p.MinP = uint32(r.IntN(3)), []float32{0, 0.9}[r.IntN(2)], []float32{0, 0.1}[r.IntN(2)]
	p.TopN = uint32(r.IntN(2 * abi.MaxTopN))
	if r.IntN(4) == 0 {
		p.Flags |= abi.FlagPerturbed
	}
	if r.IntN(8) != 0 {
		return
	}
	switch r.IntN(5) {
	case 0:
		p.Token = uint32(l.vocab + r.IntN(3))
	case 1:
		p.Token = math.MaxUint32
	case 2:
		p.Flags |= []abi.Flags{1 << 14, 1 << 31}[r.IntN(2)]
	default:
		p.Temperature = badTemperatures[r.IntN(len(badTemperatures))]
	}
}

// badScoreRow reports whether the ABI gives the row status 3 (temperature negative, NaN,
// infinite or too small to invert, reserved flags, V = 0, token at or past V).
func badScoreRow(p rowParams, vocab int) bool {
	t := p.Temperature
	return !(t >= 0) || math.IsInf(float64(t), 1) || t > 0 && math.IsInf(float64(float32(1/t)), 1) ||
		p.Flags&abi.FlagsReserved != 0 || vocab == 0 || int64(p.Token) >= int64(vocab)
}

// scoreShapes are the block shapes of the score launches: (threads, warp lanes).
var scoreShapes = [][2]int{{32, 8}, {32, 16}, {32, 32}, {128, 32}, {128, 64}, {1024, 32}}

// newScore is a score launch of slots rows of the given shapes; processors gives it bias,
// counts, mask and bitmask buffers and its rows the feature flags.
func newScore(r *rand.Rand, dt, s, v, block, warp, slots int, processors bool) *launch {
	l := &launch{kernel: kernelScore, dtype: dt, gridX: s, block: block, warp: warp, vocab: v,
		stride: stride(r, v), slack: r.IntN(16), slots: slots, logprobs: true}
	l.name = fmt.Sprintf("score dtype=%d S=%d V=%d stride=%d T=%d warp=%d processors=%v", dt, s, v, l.stride, block,
		warp, processors)
	l.fillWith(r, scoreRowShapes)
	if processors && v > 0 {
		l.withProcessors(r)
	}
	l.rows(r, func(p *rowParams) { l.scoreRow(r, p, processors && v > 0) })
	return l
}

// scoreLaunches is the score workload: every dtype, S of 1, 3 and 17 (17 blocks over a
// row of 5 leaves most of them empty), V of 1, 5, 1000 and 4099, every block shape, with
// and without processors; then two full-size launches, a grid deeper than one (its
// blocks with z > 0 do nothing) and V = 0.
func scoreLaunches(r *rand.Rand) []*launch {
	var ls []*launch
	k := 0
	for dt := range 3 {
		for _, s := range []int{1, 3, 17} {
			for _, v := range []int{1, 5, 1000, 4099} {
				sh := scoreShapes[k%len(scoreShapes)]
				k++
				ls = append(ls, newScore(r, dt, s, v, sh[0], sh[1], 5+r.IntN(4), r.IntN(3) != 0))
			}
		}
	}
	ls = append(ls, newScore(r, dtBF16, 17, 151936, 1024, 32, 3, true), newScore(r, dtF32, 1, 151936, 128, 64, 2, false))
	l := newScore(r, dtF16, 3, 1000, 32, 16, 5, true)
	l.gridZ = 3
	l.name += " grid.z=3"
	ls = append(ls, l)
	l = &launch{kernel: kernelScore, dtype: dtF32, gridX: 2, block: 32, warp: 8, stride: 4, slots: 3, logprobs: true,
		name: "score vocab=0"}
	l.fill(r)
	l.rows(r, func(p *rowParams) { p.Temperature = 1 })
	return append(ls, l)
}

// rawStatus is the status of a row without processors: 1 for a NaN or +Inf, else 2
// when every logit is -Inf, else 0.
func rawStatus(row []float32) abi.Status {
	st := abi.StatusNoFinite
	for _, x := range row {
		switch {
		case x != x || math.IsInf(float64(x), 1):
			return abi.StatusNonFinite
		case !math.IsInf(float64(x), -1):
			st = abi.StatusOK
		}
	}
	return st
}

// hostScore is the score of token t of a row without processors, from the row itself:
// the rank, the number of logits equal to the token's, and the record at invT, the
// log-sum-exps in float64.
func hostScore(row []float32, t int, invT float32) (rank, ties int, rec [4]float32) {
	xt := row[t]
	for _, x := range row {
		if x >= xt {
			rank++
		}
		if x == xt {
			ties++
		}
	}
	// The log-sum-exp of fl(x·scale): +Inf when a scaled logit overflows.
	lse := func(scale float32) float64 {
		m := math.Inf(-1)
		for _, x := range row {
			m = math.Max(m, float64(float32(x*scale)))
		}
		if math.IsInf(m, 0) {
			return m
		}
		var sum float64
		for _, x := range row {
			sum += math.Exp(float64(float32(x*scale)) - m)
		}
		return m + math.Log(sum)
	}
	raw, proc := lse(1), lse(invT)
	vt := float64(float32(xt * invT))
	rec = [4]float32{float32(float64(xt) - raw), float32(vt - proc), float32(raw), float32(proc)}
	return rank, ties, rec
}

// checkScore requires got, the outcomes of score launches, to match the Go edition's
// (matchOutcomes), and the Go edition's to agree with the rows themselves (hostScore);
// and it requires that params and counts stay as they were. It returns what the
// workload reached, by name.
func checkScore(t *testing.T, ls []*launch, got []outcome) map[string]int {
	t.Helper()
	wants := goEdition(t, ls)
	matchOutcomes(t, ls, wants, got)
	cov := map[string]int{}
	for i, l := range ls {
		want := wants[i]
		assert.Equal(t, l.paramBytes(), got[i].params, "%s: params changed", l.name)
		assert.Equal(t, l.counts, got[i].counts, "%s: counts changed", l.name)
		for _, p := range l.params {
			o := int(p.Row)
			st, rank, rec := want.status[o], want.tokens[o], want.logprobs[4*o:4*o+4]
			what := fmt.Sprintf("%s: %+v", l.name, p)
			if st == untouched {
				assert.Fail(t, "the Go edition left the row alone", "%s (ROUTED: %v)", what, p.Flags&abi.FlagRouted != 0)
				continue
			}
			cov[fmt.Sprintf("status %d", st)]++
			if st != 0 {
				assert.Equal(t, int32(-1), rank, "%s: rank of a status-%d row", what, st)
				for k, w := range rec {
					assert.True(t, w != w, "%s: record word %d of a status-%d row is %v", what, k, st, w)
				}
			}
			bad := badScoreRow(p, l.vocab)
			assert.Equal(t, bad, st == int32(abi.StatusBadParams), "%s: status %d", what, st)
			if bad {
				switch {
				case p.Flags&abi.FlagsReserved != 0:
					cov["bad: reserved flag"]++
				case int(p.Token) >= l.vocab && l.vocab > 0:
					cov["bad: token >= V"]++
				default:
					cov["bad: temperature or V"]++
				}
				continue
			}
			row := l.rowValues(o)
			processed := p.Flags&abi.FlagsProcessors != 0
			if !processed {
				assert.Equal(t, int32(rawStatus(row)), st, "%s: status of a row without processors", what)
			}
			if st != 0 {
				l.bitmaskCoverage(cov, p, abi.Score, false, st)
				continue
			}
			invT := float32(1)
			if p.Temperature != 0 {
				invT = 1 / p.Temperature
			}
			hostRank, ties, hostRec := hostScore(row, int(p.Token), invT)
			assert.Equal(t, int32(hostRank), rank, "%s: rank", what)
			words := []int{0, 2} // the processed half depends on the processors
			if !processed {
				words = append(words, 1, 3)
			}
			tol := recordTolerance(hostRec[:]...)
			for _, k := range words {
				switch w := hostRec[k]; {
				case w != w:
					assert.True(t, rec[k] != rec[k], "%s: record word %d is %v, want NaN", what, k, rec[k])
				case math.IsInf(float64(w), 0):
					assert.Equal(t, w, rec[k], "%s: record word %d", what, k)
				default:
					assert.InDelta(t, w, rec[k], tol, "%s: record word %d (record %v, host %v)", what, k, rec, hostRec)
				}
			}
			l.bitmaskCoverage(cov, p, abi.Score, true, 0)
			switch {
			case rank == 1:
				cov["rank 1"]++
			case rank > 1:
				cov["rank > 1"]++
			}
			if ties > 1 {
				cov["ties counted"]++
			}
			if math.IsInf(float64(row[p.Token]), -1) {
				cov["-Inf token"]++
				if l.vocab%4 != 0 {
					// The last group of the row is ragged: its padding must not count.
					cov["-Inf token, V not a multiple of 4"]++
				}
			}
			if math.IsInf(float64(rec[1]), -1) && !math.IsInf(float64(rec[0]), -1) {
				cov["token masked"]++
			}
			if rec[0] != rec[1] || rec[2] != rec[3] {
				cov["processed != raw"]++
				if processed {
					cov["processed != raw, processors"]++
				}
			}
			if l.gridX > 1 {
				cov["split row"]++
			}
		}
	}
	return cov
}

// requireScoreCoverage requires what every score workload must reach.
func requireScoreCoverage(t *testing.T, cov map[string]int) {
	t.Helper()
	for _, k := range []string{"status 0", "status 1", "status 2", "status 3", "rank 1", "rank > 1", "ties counted",
		"-Inf token", "-Inf token, V not a multiple of 4", "token masked", "processed != raw", "processed != raw, processors", "split row", "bad: reserved flag",
		"bad: token >= V", "bad: temperature or V"} {
		require.Positive(t, cov[k], "the workload never reached %q", k)
	}
	requireBitmaskCoverage(t, cov, true, abi.Score)
}

// TestScoreIgnoresRouting runs score on ROUTED rows, which ABI.md says score ignores: each
// row is scored whatever family its flags name.
func TestScoreIgnoresRouting(t *testing.T) {
	r := rand.New(rand.NewPCG(20261201, 2))
	var ls []*launch
	for _, s := range []int{1, 3} {
		for _, processors := range []bool{false, true} {
			l := newScore(r, dtF32, s, 37, 32, 8, 6, processors)
			l.name += " routed"
			for y := range l.params {
				l.params[y].Flags |= abi.FlagRouted | []abi.Flags{0, abi.FlagCategorical, abi.FlagFiltered}[y%3]
			}
			ls = append(ls, l)
		}
	}
	got := decodeResults(t, runDriver(t, encodeJob(t, ls)), ls)
	cov := checkScore(t, ls, got)
	require.Positive(t, cov["status 0"], "no routed row was scored")
}

// TestScoreMatchesGoEdition runs the score workload in the emulation and requires the Go
// edition's ranks, statuses and records.
func TestScoreMatchesGoEdition(t *testing.T) {
	ls := scoreLaunches(rand.New(rand.NewPCG(20261201, 1)))
	got := decodeResults(t, runDriver(t, encodeJob(t, ls)), ls)
	cov := checkScore(t, ls, got)
	t.Logf("%d launches; coverage %v", len(ls), cov)
	requireScoreCoverage(t, cov)
}
