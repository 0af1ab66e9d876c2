package emu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/gumbel-go/gumbel/philox"
)

// This file tests the residual kernel (../cuda/residual.cuh) against the Go edition:
// chains of draft positions verified with the drafter's probabilities, the token and
// status of every slot bit for bit. The draft tokens and probabilities are laid out so
// that the workload meets every outcome: chains accepted to their end (the bonus draw),
// rejected at the first or at a middle position, q = p, q far from p, q above p
// everywhere (the residual holds no mass: the draw falls back to p), q = 0 at the draft
// token, bad rows at the stop and past it, processors, splits over 1, 2 and 5 blocks,
// chains longer than a warp, and launch rows (one per chain) that serve the chains in
// order, in reverse order or shuffled.
// The records residual reads are the Go edition's score records over the same rows, as
// the sampler lays them out. Beside the comparison, the Go edition's verdicts are checked
// against the chains decided on the host, and its drawn tokens, where no processor
// applies, against a draw that computes every element's noise, so that a mistake both
// editions share, or a skip that changes a result, is caught too.

// How a position's draft token is chosen.
const (
	planAccept  = iota // the row's largest logit, q[t] half its probability: accepted
	planReject         // the row's smallest logit, q[t] = 1: rejected unless p(t) is 1
	planNatural        // drawn from q
)

// What a position's draft row holds.
const (
	draftP       = iota // the softmax of the raw row at the temperature: q = p without processors (nearP)
	draftFar            // random weights, far from p
	draftOver           // 2 everywhere: above p, so the residual holds no mass
	draftZeroTok        // random weights, 0 at the draft token
	numDraftKinds
)

// How a position is made bad (a rejection, and status 3 at the stop).
const (
	badTempZero = iota
	badTemp     // negative, NaN, infinite or too small to invert
	badToken    // at or past V (a chain's end ignores its token: there it is no fault)
	badFlag     // a reserved flag
	badShard    // FlagShard: shards are gumbel_argmax's alone
	numBadKinds

	badNone = -1
)

// residualMeta is what a RowParams record (a position) was built to do, for the coverage.
type residualMeta struct {
	plan, kind, bad int
	position        int // the row's index in its chain
}

// residualRows are the target logits and temperatures of a residual workload's positions.
type residualRows struct {
	shapes []func(*rand.Rand, int) []float32
	temps  []float32
	// keptOdds gives one chain in keptOdds filters (0: none): its target is the filtered
	// law.
	keptOdds int
}

// keptExactRows are distinct logits near 1e7 at T = 16: every draw from p needs the exact
// comparison, and its winner over the whole row often lies outside a kept set.
var keptExactRows = residualRows{
	shapes: []func(*rand.Rand, int) []float32{func(r *rand.Rand, v int) []float32 {
		row := make([]float32, v)
		for i, j := range r.Perm(v) {
			row[i] = 1e7 + float32(j)
		}
		return row
	}},
	temps:    []float32{16},
	keptOdds: 1,
}

var ordinaryResidualRows = residualRows{
	shapes: []func(*rand.Rand, int) []float32{
		llmRow, llmRow, llmRow, strongRow, strongRow, tiedRow, maskedRow, farRow, hugeRow, soleRow, tinyRow, zeroRow,
		negInfRow, nanRow, posInfRow,
	},
	temps:    []float32{0.25, 0.7, 1, 1.8},
	keptOdds: 3,
}

// hostSoftmax is the distribution of the raw row at invT in float64 (uniform where it
// has none: no finite logit, NaN or +Inf).
func hostSoftmax(row []float32, invT float32) []float64 {
	p := make([]float64, len(row))
	m := math.Inf(-1)
	for i, x := range row {
		p[i] = float64(float32(x * invT))
		if p[i] > m {
			m = p[i]
		}
	}
	var sum float64
	for i := range p {
		p[i] = math.Exp(p[i] - m)
		if p[i] != p[i] {
			p[i] = 0
		}
		sum += p[i]
	}
	for i := range p {
		if !(sum > 0) || math.IsInf(sum, 0) || math.IsInf(m, 0) {
			p[i] = 1 / float64(len(p))
		} else {
			p[i] /= sum
		}
	}
	return p
}

// drawFrom returns an index drawn with the given (unnormalised, non-negative) weights.
func drawFrom(r *rand.Rand, w []float32) uint32 {
	var sum float64
	for _, x := range w {
		sum += float64(x)
	}
	u := r.Float64() * sum
	for i, x := range w {
		if u -= float64(x); u < 0 {
			return uint32(i)
		}
	}
	return uint32(len(w) - 1)
}

// extremeLogit returns the index of the row's largest (or smallest) logit, NaN ignored.
func extremeLogit(row []float32, largest bool) uint32 {
	best := -1
	for i, x := range row {
		if x != x {
			continue
		}
		if best < 0 || (largest && x > row[best]) || (!largest && x < row[best]) {
			best = i
		}
	}
	return uint32(max(best, 0))
}

// spoil makes a position bad in the given way; it returns badNone where the row stays
// good (a chain's end with a token past V).
func spoil(r *rand.Rand, p *rowParams, bad, v int) int {
	switch bad {
	case badTempZero:
		p.Temperature = 0
	case badTemp:
		p.Temperature = badTemperatures[r.IntN(len(badTemperatures))]
	case badToken:
		p.Token = []uint32{uint32(v), uint32(v + 2), math.MaxUint32}[r.IntN(3)]
		if p.Flags&abi.FlagChainEnd != 0 {
			return badNone
		}
	case badFlag:
		p.Flags |= []abi.Flags{1 << 14, 1 << 31}[r.IntN(2)]
	case badShard:
		p.Flags |= abi.FlagShard
	}
	return bad
}

// newResidual is a residual launch of chains of the given lengths, their records one
// after another, each chain with its own seed, steps Step + i and temperature, over
// distinct logits rows of rows' shapes (one slot stays untouched) and draft rows in a
// random order. The
// launch has a row per chain, record y's TopK naming the first record of launch row y's
// chain: the chains in order, in reverse order or shuffled (mostly not the chain that
// holds record y: launch rows and records are unrelated). processors gives the launch
// the processor buffers and its rows the feature flags. The records come from the Go
// edition's score kernel over the same rows and tokens. Without exactP, the draftP rows
// hold p scaled by 1 ± 1% at random: where q = p, the residual at a rejection is
// rounding noise, which a device's expf, one last place off Go's (ABI.md), redraws.
func newResidual(t *testing.T, r *rand.Rand, rows residualRows, dt, s, v, block, warp int, chains []int, processors, exactP bool) (*launch, []residualMeta) {
	t.Helper()
	n := 0
	for _, c := range chains {
		n += c
	}
	l := &launch{kernel: kernelResidual, dtype: dt, gridX: s, gridY: len(chains), block: block, warp: warp,
		vocab: v, stride: stride(r, v), slack: r.IntN(16), slots: n + 1, logprobs: true}
	serve := make([]int, len(chains)) // launch row y serves chain serve[y]
	order := r.IntN(3)
	for y := range serve {
		serve[y] = []int{y, len(chains) - 1 - y, y}[order]
	}
	if order == 2 {
		r.Shuffle(len(serve), func(i, j int) { serve[i], serve[j] = serve[j], serve[i] })
	}
	l.name = fmt.Sprintf("residual dtype=%d S=%d V=%d stride=%d T=%d warp=%d chains=%v rows serve %v processors=%v",
		dt, s, v, l.stride, block, warp, chains, serve, processors)
	shapes := rows.shapes
	if slices.Max(chains) > 8 {
		// A long chain reaches far only over rows whose drafts can all be accepted.
		shapes = []func(*rand.Rand, int) []float32{llmRow, strongRow}
	}
	l.fillWith(r, shapes)
	if processors {
		l.withProcessors(r)
	}
	slots := r.Perm(l.slots)[:n]
	draftRows := r.Perm(n)
	l.params = make([]rowParams, n)
	l.draft = make([]float32, n*v)
	metas := make([]residualMeta, n)
	starts := make([]uint32, len(chains))
	filters := make([]filterConfig, n) // the filters of the FlagKeptSet positions
	y := 0
	for c, length := range chains {
		starts[c] = uint32(y)
		seed, step := r.Uint64(), r.Uint64()>>r.IntN(64)
		temp := rows.temps[r.IntN(len(rows.temps))]
		kept := rows.keptOdds > 0 && r.IntN(rows.keptOdds) == 0
		scenario := r.IntN(4)
		if c == 0 {
			scenario = 0 // every launch tries one chain accepted to its end
		}
		spoilOdds := 8 // a bad position one time in spoilOdds
		if length > 8 {
			// A long chain, to reach past the warp's width: accepted to its end or to its
			// middle, seldom spoiled.
			scenario, spoilOdds = c%2*2, 64
		}
		for i := range length {
			p := rowParams{Row: uint32(slots[y]), Temperature: temp, Seed: seed, Step: step + uint64(i),
				TopN: uint32(draftRows[y])}
			if processors {
				l.featureFlags(r, &p) // LOGPROBS, RECORD and ADVANCE among them: residual ignores them
			}
			if r.IntN(4) == 0 {
				p.Flags |= abi.FlagRouted | []abi.Flags{0, abi.FlagCategorical, abi.FlagFiltered}[r.IntN(3)]
			}
			if kept {
				filters[y] = filterConfigs[r.IntN(len(filterConfigs))]
				p.Flags |= abi.FlagKeptSet
				p.MinP = filters[y].mp // residual's own min_p completes the descriptor
			}
			m := residualMeta{plan: planNatural, kind: r.IntN(numDraftKinds), bad: badNone, position: i}
			switch {
			case scenario == 0: // every draft accepted: the chain's end draws
				m.plan = planAccept
			case scenario == 1 && i == 0: // rejected at once
				m.plan = planReject
			case scenario == 2 && i < length/2: // rejected in the middle
				m.plan = planAccept
			case scenario == 2 && i == length/2:
				m.plan = planReject
			}
			row := l.rowValues(int(p.Row))
			q := l.draft[int(p.TopN)*v : int(p.TopN+1)*v]
			switch m.kind {
			case draftP:
				for k, x := range hostSoftmax(row, float32(1/temp)) {
					if !exactP {
						x *= 1 + 0.01*(2*r.Float64()-1)
					}
					q[k] = float32(x)
				}
			case draftFar, draftZeroTok:
				var sum float64
				for k := range q {
					q[k] = float32(math.Exp(3 * r.NormFloat64()))
					sum += float64(q[k])
				}
				for k := range q {
					q[k] = float32(float64(q[k]) / sum)
				}
			case draftOver:
				for k := range q {
					q[k] = 2
				}
			}
			switch {
			case i == length-1:
				p.Flags |= abi.FlagChainEnd
				p.Token = uint32(r.IntN(v))
			case m.plan == planAccept:
				p.Token = extremeLogit(row, true)
			case m.plan == planReject:
				p.Token = extremeLogit(row, false)
			default:
				p.Token = drawFrom(r, q)
			}
			if r.IntN(spoilOdds) == 0 {
				m.bad = spoil(r, &p, r.IntN(numBadKinds), v)
			}
			l.params[y], metas[y] = p, m
			y++
		}
	}
	// Record y's TopK, otherwise unused by residual, is where launch row y's chain starts.
	for y, c := range serve {
		l.params[y].TopK = starts[c]
	}
	// score's records over the same rows: FlagShard and CHAIN_END cleared (score refuses
	// shards; the records of a chain's end are never read), the rest as the rows have it.
	sc := *l
	sc.kernel, sc.gridY, sc.draft, sc.records = kernelScore, 0, nil, nil
	sc.params = slices.Clone(l.params)
	for y := range sc.params {
		sc.params[y].Flags &^= abi.FlagShard | abi.FlagChainEnd
	}
	l.records = goEdition(t, []*launch{&sc})[0].logprobs
	// The filtered kernel's kept-set descriptors at the FlagKeptSet positions, with each
	// one's draft token, over the same rows: the filters in TopK (which residual's
	// records use otherwise), no routing, nothing recorded or advanced.
	fl := *l
	fl.kernel, fl.gridY, fl.gridZ, fl.draft, fl.records, fl.params = kernelFiltered, 0, 1, nil, nil, nil
	for y, p := range l.params {
		if p.Flags&abi.FlagKeptSet != 0 {
			filters[y].apply(&p, v)
			p.Flags = p.Flags&^(abi.FlagShard|abi.FlagChainEnd|abi.FlagRouted|abi.FlagCategorical|abi.FlagFiltered|
				abi.FlagRecord|abi.FlagAdvance) | abi.FlagLogprobs
			fl.params = append(fl.params, p)
		}
	}
	if len(fl.params) > 0 {
		descs := goEdition(t, []*launch{&fl})[0].logprobs
		for _, p := range fl.params {
			copy(l.records[4*p.Row:4*p.Row+4], descs[4*p.Row:])
		}
	}
	// The probabilities that decide the planned drafts.
	for y, p := range l.params {
		if p.Flags&abi.FlagChainEnd != 0 || int(p.Token) >= v {
			continue
		}
		q := l.draft[int(p.TopN)*v : int(p.TopN+1)*v]
		switch metas[y].plan {
		case planAccept:
			if pt := math.Exp(float64(l.records[4*p.Row+1])); pt > 0 {
				q[p.Token] = float32(pt / 2)
			}
		case planReject:
			q[p.Token] = 1
		}
		if metas[y].kind == draftZeroTok {
			q[p.Token] = 0
		}
	}
	return l, metas
}

// residualLaunches is the residual workload: every dtype, S of 1, 2 and 5, tiny, small
// and larger vocabularies (odd ones among them), chains of lengths 1 to 5 in every
// launch, with and without processors; then a full-width block, a grid deeper than one
// (its blocks with z > 0 do nothing), a larger vocabulary split over 5 blocks and chains
// longer than a warp. exactP is newResidual's.
func residualLaunches(t *testing.T, r *rand.Rand, shape shaper, exactP bool) ([]*launch, [][]residualMeta) {
	var ls []*launch
	var metas [][]residualMeta
	add := func(l *launch, m []residualMeta) {
		ls = append(ls, l)
		metas = append(metas, m)
	}
	chainsOf := func() []int {
		c := []int{1, 2, 3, 4, 5}
		r.Shuffle(len(c), func(i, j int) { c[i], c[j] = c[j], c[i] })
		return append(c, 1+r.IntN(5))
	}
	for dt := range 3 {
		for _, s := range []int{1, 2, 5} {
			tiny, small, larger := []int{1, 5, 7}, []int{37, 130, 255}, []int{1001, 4099}
			for _, v := range append(pick(r, tiny, small, larger), pick(r, small, small, larger)...) {
				block, warp := shape(r, s)
				add(newResidual(t, r, ordinaryResidualRows, dt, s, v, block, warp, chainsOf(), v > 1 && r.IntN(3) != 0, exactP))
			}
		}
	}
	block, warp := shape(r, 1)
	if block < 1024 {
		block, warp = 1024, 32
	}
	add(newResidual(t, r, ordinaryResidualRows, dtF32, 1, 6007, block, warp, []int{5, 3}, false, exactP))
	block, warp = shape(r, 2)
	l, m := newResidual(t, r, ordinaryResidualRows, dtF16, 2, 130, block, warp, chainsOf(), true, exactP)
	l.gridZ = 3
	l.name += " grid.z=3"
	add(l, m)
	block, warp = shape(r, 5)
	add(newResidual(t, r, ordinaryResidualRows, dtBF16, 5, 4099, block, warp, chainsOf(), false, exactP))
	// Chains longer than the warp (32 lanes on the GPU, 8 here): decided a window of
	// records at a time.
	block, warp = shape(r, 2)
	if warp > 8 {
		block, warp = 16, 8
	}
	add(newResidual(t, r, ordinaryResidualRows, dtF32, 2, 130, block, warp, []int{37, 2, 40, 11}, false, exactP))
	block, warp = shape(r, 2)
	add(newResidual(t, r, keptExactRows, dtF32, 2, 301, block, warp, chainsOf(), false, exactP))
	return ls, metas
}

// hostGoodChainRow is the ABI's test of a residual row's own parameters.
func hostGoodChainRow(p rowParams, v int) bool {
	t := p.Temperature
	return p.Flags&(abi.FlagsReserved|abi.FlagShard) == 0 && t > 0 && !math.IsInf(float64(t), 1) &&
		!math.IsInf(float64(float32(1/t)), 1) && v >= 1 && v <= abi.MaxVocab &&
		(p.Flags&abi.FlagChainEnd != 0 || int64(p.Token) < int64(v))
}

// hostAccepted decides a draft position as ABI.md says.
func (l *launch) hostAccepted(p rowParams) bool {
	if !hostGoodChainRow(p, l.vocab) || p.Flags&abi.FlagChainEnd != 0 {
		return false
	}
	u := philox.DraftUniform(p.Seed, p.Step)
	q := l.draft[int(p.TopN)*l.vocab+int(p.Token)]
	return float32(u*q) < float32(math.Exp(float64(l.records[4*p.Row+1])))
}

// hostKey is the ABI's packed (score, index) key.
func hostKey(score float32, i int) uint64 {
	b := math.Float32bits(score)
	if b == 0x80000000 {
		b = 0
	}
	if b>>31 != 0 {
		b = ^b
	} else {
		b |= 0x80000000
	}
	return uint64(b)<<32 | uint64(^uint32(i))
}

// hostResidualDraw is the stop's draw of a row without processors, every element's noise
// computed: the residual's winner at a rejected position (empty reports that the
// residual held no mass), else p's. inexact reports a draw from p whose float32 winner
// reaches ExactLimit, which the kernels finish by the exact comparison: then token is
// that float32 winner, not the answer.
func (l *launch) hostResidualDraw(p rowParams) (token int32, empty, inexact bool) {
	row := l.rowValues(int(p.Row))
	invT := float32(1 / p.Temperature)
	end := p.Flags&abi.FlagChainEnd != 0
	var q []float32
	var lse float32
	if !end {
		q, lse = l.draft[int(p.TopN)*l.vocab:int(p.TopN+1)*l.vocab], l.records[4*p.Row+3]
	}
	var bestR, bestP uint64
	var scoreP float32
	for i, x := range row {
		s := float32(x * invT)
		g := philox.ElementGumbel(p.Seed, p.Step, uint32(i))
		if k := hostKey(float32(s+g), i); k > bestP {
			bestP, scoreP = k, float32(s+g)
		}
		if !end {
			d := float32(s - lse)
			if w := float32(float32(math.Exp(float64(d))) - q[i]); w > 0 {
				bestR = max(bestR, hostKey(float32(float32(math.Log(float64(w)))+g), i))
			}
		}
	}
	if bestR == 0 {
		return int32(^uint32(bestP)), true, !(math.Abs(float64(scoreP)) < float64(abi.ExactLimit))
	}
	return int32(^uint32(bestR)), false, false
}

// checkResidual requires got, the outcomes of residual launches, to match the Go
// edition's (matchOutcomes: tokens and statuses bit for bit, the records left as they
// were, counters zeroed), params and counts to be unchanged, and the Go edition's
// outcomes to follow the chains decided on the host; it returns what the workload
// reached, by name.
func checkResidual(t *testing.T, ls []*launch, metas [][]residualMeta, got []outcome) map[string]int {
	t.Helper()
	wants := goEdition(t, ls)
	matchOutcomes(t, ls, wants, got)
	cov := map[string]int{}
	for i, l := range ls {
		want := wants[i]
		assert.Equal(t, l.paramBytes(), got[i].params, "%s: params changed", l.name)
		assert.Equal(t, l.counts, got[i].counts, "%s: counts changed", l.name)
		// The chain of each record, and the launch rows that serve another chain than
		// the one holding their own record.
		chainOf := make([]int, len(l.params))
		for y := range l.params {
			if y > 0 {
				chainOf[y] = chainOf[y-1]
				if l.params[y-1].Flags&abi.FlagChainEnd != 0 {
					chainOf[y]++
				}
			}
		}
		require.Equal(t, chainOf[len(chainOf)-1]+1, l.launchRows(), "%s: a launch row per chain", l.name)
		for y := range l.launchRows() {
			first := int(l.params[y].TopK)
			require.True(t, first == 0 || l.params[first-1].Flags&abi.FlagChainEnd != 0, "%s: row %d starts no chain", l.name, y)
			if chainOf[first] != chainOf[y] {
				cov["launch row serving another chain than its record's"]++
			}
		}
		stopped := false // the current chain has reached its stop
		for y, p := range l.params {
			m := metas[i][y]
			if m.position == 0 {
				stopped = false
			}
			o := int(p.Row)
			st, tok := want.status[o], want.tokens[o]
			what := fmt.Sprintf("%s: record %d (position %d, %+v, %+v)", l.name, y, m.position, m, p)
			end := p.Flags&abi.FlagChainEnd != 0
			good := hostGoodChainRow(p, l.vocab)
			switch {
			case stopped:
				assert.Equal(t, int32(abi.StatusNotReached), st, "%s: status past the stop", what)
				assert.Equal(t, int32(-1), tok, "%s: token past the stop", what)
				cov["past"]++
				if !good {
					cov["bad row past the stop"]++
				}
				continue
			case !end && l.hostAccepted(p):
				assert.Equal(t, int32(abi.StatusOK), st, "%s: status of an accepted draft", what)
				assert.Equal(t, int32(p.Token), tok, "%s: token of an accepted draft", what)
				cov["accepted"]++
				if m.kind == draftZeroTok {
					cov["q = 0 at the draft: accepted"]++
				}
				if m.plan == planNatural && m.kind == draftP && p.Flags&(abi.FlagsProcessors|abi.FlagKeptSet) == 0 {
					cov["q = p: accepted"]++
				}
				if p.Flags&abi.FlagKeptSet != 0 {
					cov["kept set: accepted"]++
				}
				continue
			}
			stopped = true
			if m.position >= l.warp {
				cov["stop past the warp's width"]++
			}
			// A draft whose row has no record (status 1 or 2 at score) rejects for that; and
			// q is p only where the host's softmax is (no scaled logit overflows: p(t) > 0).
			if lp := l.records[4*o+1]; m.plan == planNatural && !end && good && lp == lp {
				switch {
				case m.kind == draftP && p.Flags&(abi.FlagsProcessors|abi.FlagKeptSet) == 0 && lp > float32(math.Inf(-1)):
					cov["q = p: rejected"]++
				case m.kind == draftFar:
					cov["q far from p: rejected"]++
				}
			}
			if !good {
				assert.Equal(t, int32(abi.StatusBadParams), st, "%s: status of a bad stop", what)
				assert.Equal(t, int32(-1), tok, "%s: token of a bad stop", what)
				cov["stop: status 3"]++
				if p.Flags&abi.FlagShard != 0 {
					cov["stop: status 3 for FlagShard"]++
				}
				continue
			}
			cov[fmt.Sprintf("stop: status %d", st)]++
			if st != int32(abi.StatusOK) {
				assert.Equal(t, int32(-1), tok, "%s: token of a status-%d stop", what, st)
				continue
			}
			require.True(t, tok >= 0 && int(tok) < l.vocab, "%s: token %d", what, tok)
			switch {
			case end && m.position == 4:
				cov["stop: every draft of a chain of 5 accepted"]++
				fallthrough
			case end:
				cov["stop: chain end drawn"]++
				if int(p.Token) >= l.vocab {
					cov["stop: chain end with a token past V drawn"]++
				}
			case m.position == 0:
				cov["stop: rejected at position 0, drawn"]++
			default:
				cov["stop: rejected in the middle, drawn"]++
			}
			if l.gridX > 1 {
				cov["stop: split row drawn"]++
			}
			if p.Flags&abi.FlagKeptSet != 0 {
				// The Go edition's draws over kept sets are checked against keepRow's kept
				// sets in package gokernel.
				cov[fmt.Sprintf("stop: kept set drawn, chain end %v", end)]++
				if rec := l.records[4*o : 4*o+4]; !end && rec[1] == float32(math.Inf(-1)) {
					cov["kept set: draft token dropped by the filters"]++
				}
			}
			if p.Flags&abi.FlagsProcessors != 0 {
				cov["stop: processors drawn"]++
				l.bitmaskCoverage(cov, p, abi.Residual, true, st)
				continue
			}
			if p.Flags&abi.FlagKeptSet != 0 {
				continue
			}
			if rawStatus(l.rowValues(o)) != abi.StatusOK {
				continue
			}
			host, empty, inexact := l.hostResidualDraw(p)
			if inexact {
				cov["stop: drawn from p by the exact comparison"]++
				continue // the Go edition, checked against arbitrary precision, is the answer
			}
			assert.Equal(t, host, tok, "%s: token of the stop, every element's noise computed", what)
			switch {
			case end:
			case empty:
				cov["stop: residual empty, drawn from p"]++
				if m.kind == draftOver {
					cov["stop: q above p, drawn from p"]++
				}
			default:
				cov["stop: residual drawn"]++
			}
		}
	}
	return cov
}

// requireResidualCoverage requires what every residual workload must reach.
func requireResidualCoverage(t *testing.T, cov map[string]int) {
	t.Helper()
	for _, k := range []string{"past", "bad row past the stop", "accepted", "q = 0 at the draft: accepted",
		"q = p: accepted", "q far from p: rejected", "stop: status 0", "stop: status 1", "stop: status 2",
		"stop: status 3", "stop: chain end drawn", "stop: every draft of a chain of 5 accepted",
		"stop: chain end with a token past V drawn", "stop: rejected at position 0, drawn",
		"stop: rejected in the middle, drawn", "stop: split row drawn", "stop: processors drawn",
		"stop: residual empty, drawn from p", "stop: q above p, drawn from p", "stop: residual drawn",
		"bitmask token " + abi.Residual, "launch row serving another chain than its record's",
		"stop past the warp's width", "kept set: accepted", "stop: kept set drawn, chain end true",
		"stop: kept set drawn, chain end false", "kept set: draft token dropped by the filters"} {
		require.Positive(t, cov[k], "the workload never reached %q", k)
	}
	// q = p accepts but for rounding: u·q < p fails only for u within a few ulps of 1.
	require.LessOrEqual(t, 10*cov["q = p: rejected"], cov["q = p: accepted"], "q = p rejected too often")
}

// TestResidualMatchesGoEdition runs the residual workload in the emulation and requires
// the Go edition's tokens and statuses in every slot.
func TestResidualMatchesGoEdition(t *testing.T) {
	r := rand.New(rand.NewPCG(20261215, 1))
	ls, metas := residualLaunches(t, r, emuShape, true)
	got := decodeResults(t, runDriver(t, encodeJob(t, ls)), ls)
	cov := checkResidual(t, ls, metas, got)
	t.Logf("%d launches; coverage %v", len(ls), cov)
	requireResidualCoverage(t, cov)
}
