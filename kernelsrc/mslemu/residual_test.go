package mslemu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/gumbel-go/gumbel/kernelsrc/gokernel"
	"github.com/gumbel-go/gumbel/philox"
	"github.com/gumbel-go/gumbel/runtime"
)

// A residual workload spells each chain as one letter per position, the last one a
// CHAIN_END row (upper case). Draft positions:
//
//	a  accepted
//	r  rejected: the chain stops here and draws from the residual
//	t  accepted at the boundary: q at the token makes fl(u·q) the float just below expf(lp)
//	T  rejected at the boundary: fl(u·q) == expf(lp)
//	q  accepted with q = 0 at the draft token
//	m  rejected: the draft token is masked (p = 0) and q = 0 at it
//	S  a FlagShard row (shards are gumbel_argmax's alone): rejected, status 3
//	z  temperature 0, n  temperature NaN, v  token >= V, x  a reserved flag: rejected, status 3
//	p  a row holding NaN: its record is NaN, rejected, status 1
//	d  a row with nothing allowed (mask): rejected, status 2
//
// Chain ends: E a good row, Z temperature 0 and X a reserved flag (status 3), P a row
// holding NaN (status 1), D nothing allowed (status 2), H huge logits (whatever the Go
// edition says). Letters after the stop are positions that are not reached.
const (
	chainAccepts = "aqt"     // the draft positions that are accepted
	chainEnds    = "EZXPDH"  // the CHAIN_END rows
	chainBad     = "SznvxZX" // status 3 at the stop
)

// Draft rows q of a workload's positions.
const (
	qMix   = iota // one of the others per position
	qFar          // random probabilities unrelated to p
	qClose        // p with each probability moved by up to 10%, renormalised
	qEqual        // p rounded to float32: the residual is rounding only
	qCover        // 1.5p + 1e-4: q > p everywhere, the residual is empty (the fallback to p)
	numQModes
	// qOver is 2 everywhere: above any filtered target too (not in qMix's draw).
	qOver = numQModes
)

// residualWorkload is one row of TestResidualMatchesGoEdition's table.
type residualWorkload struct {
	name   string
	chains []string
	q      int
	// procs are processors every row applies (the bitmask from mask rows 1 to 3).
	procs abi.Flags
	// exact gives the rows exactShapes at exactTemperatures, where the draws from p need
	// the exact comparison.
	exact bool
	// kept gives every position FlagKeptSet: its target is the filtered law of its
	// filters, described by the filtered kernel's descriptor in place of score's record.
	kept bool
}

var residualWorkloads = []residualWorkload{
	{name: "bonus: every draft accepted", chains: []string{"E", "aE", "aaE", "aaaE", "aaaaE"}},
	{name: "rejected at the first position", chains: []string{"rE", "raE", "raaaE"}},
	{name: "rejected in the middle", chains: []string{"arE", "aaraE", "aaarE"}},
	{name: "q close to p", chains: []string{"aaE", "arE", "raE", "aarE"}, q: qClose},
	{name: "q far from p", chains: []string{"aE", "rE", "aarE", "araE"}, q: qFar},
	{name: "empty residual (q covers p)", chains: []string{"rE", "arE", "aaarE"}, q: qCover},
	{name: "q equals p (a residual of rounding)", chains: []string{"rE", "arE", "aaE"}, q: qEqual},
	{name: "q = 0 at the draft token", chains: []string{"qE", "qqrE", "mE", "qmaE"}},
	{name: "acceptance at the rounding boundary", chains: []string{"tE", "TE", "tTE", "atE"}},
	{name: "bad rows", chains: []string{"zaE", "avE", "xE", "aaZ", "aX", "anE", "rzE", "rxvX", "SE", "aSE"}},
	{name: "bias and bitmask", chains: []string{"aE", "arE", "raE", "aaaE"}, procs: abi.FlagBias | abi.FlagBitmask},
	{name: "mask and penalties", chains: []string{"aE", "rE", "aarE", "mE"}, procs: abi.FlagMask | abi.FlagPenalties},
	{name: "non-finite rows", chains: []string{"pE", "aP", "dE", "aD", "H", "aH", "pzE"}},
	{name: "exact scores", chains: []string{"E", "rE", "E", "rE", "E"}, q: qCover, exact: true},
	{name: "filters", chains: []string{"E", "aE", "arE", "raE", "aaaE", "tE", "TE", "qE"}, kept: true},
	{name: "filters, q far from p", chains: []string{"aE", "rE", "aarE", "araE"}, q: qFar, kept: true},
	{name: "filters, empty residual", chains: []string{"rE", "arE", "aaarE"}, q: qOver, kept: true},
	{name: "filters, bad rows", chains: []string{"zaE", "avE", "xE", "aaZ", "aX", "anE", "SE"}, kept: true},
	{name: "filters, mask and penalties", chains: []string{"aE", "rE", "aarE", "mE"}, procs: abi.FlagMask | abi.FlagPenalties,
		kept: true},
	{name: "filters, non-finite rows", chains: []string{"pE", "aP", "dE", "aD", "H", "aH"}, kept: true},
	{name: "filters, exact scores", chains: []string{"E", "rE", "E", "rE", "E"}, q: qOver, exact: true, kept: true},
}

// residualVocabs are small odd vocabularies, so that S = 5 leaves some threadgroups
// without elements.
var residualVocabs = []int{3, 7, 13, 33, 101, 257, 1001}

// chainPlan is what a workload asks of one position (RowParams record).
type chainPlan struct {
	letter byte
	chain  int
	pos    int       // position in the chain
	stop   int       // the position where the chain stops
	q      int       // its draft row's mode
	p      []float64 // its target distribution as computed here (nil: not finite)
	// exact: its row is one of exactShapes, whose status is whatever the Go edition says
	// (in float16 the huge ones are +Inf)
	exact bool
}

// residualCase is a residual launch with what it was built to show.
type residualCase struct {
	*launchCase
	plans []chainPlan
	// filters are the records as the filtered kernel takes them: residual's records
	// before the chains' starts replace TopK.
	filters []abi.RowParams
}

// targetProbs is the processed distribution of launch row p at its temperature (1 for
// temperature 0): the processed logits in float32, one rounding per operation as the
// kernels have them (penalties may leave many logits equal), then a float64 softmax; nil
// when the row holds NaN or +Inf or nothing finite. It chooses tokens and draft rows; the
// kernels' own arithmetic decides.
func targetProbs(c *launchCase, p abi.RowParams) []float64 {
	v, row := c.vocab, int(p.Row)
	w := (v + 31) / 32
	invT := float32(1)
	if p.Temperature > 0 && !math.IsInf(float64(p.Temperature), 0) {
		invT = 1 / p.Temperature
	}
	xs := make([]float64, v)
	top := math.Inf(-1)
	for i := range v {
		x := c.logit(row, i)
		if p.Flags&abi.FlagBias != 0 {
			x += c.bias[row*v+i]
		}
		if p.Flags&abi.FlagPenalties != 0 {
			n := c.counts[row*v+i]
			if n != 0 && p.RepetitionPenalty != 1 {
				if x > 0 {
					x /= p.RepetitionPenalty
				} else {
					x *= p.RepetitionPenalty
				}
			}
			if out := n & abi.CountMask; out > 0 {
				f := p.FrequencyPenalty * float32(out)
				x -= f
				x -= p.PresencePenalty
			}
		}
		if p.Flags&abi.FlagMask != 0 && c.mask[row*w+i/32]>>(i%32)&1 == 0 {
			x = negInf
		}
		if p.Flags&abi.FlagBitmask != 0 && c.bitmask[int(p.BitmaskRow)*w+i/32]>>(i%32)&1 == 0 {
			x = negInf
		}
		s := float64(x * invT)
		if math.IsNaN(s) || math.IsInf(s, 1) {
			return nil
		}
		xs[i] = s
		top = max(top, s)
	}
	if math.IsInf(top, 0) {
		return nil
	}
	var sum float64
	for i, x := range xs {
		xs[i] = math.Exp(x - top)
		sum += xs[i]
	}
	for i := range xs {
		xs[i] /= sum
	}
	return xs
}

// steepRow is distinct logits one step of the dtype apart near the top of its range,
// in a random order: at steepTemperature every score needs the exact comparison, and in
// float32 and float16 the noise reaches several ranks down, so that a draw over the whole
// row often leaves a kept set (bfloat16's steps are too coarse for that).
func steepRow(r *rand.Rand, dtype, v int) []float32 {
	base, step := []float32{1e7, 65504, 3e9}[dtype], []float32{1, 32, 1 << 24}[dtype]
	row := make([]float32, v)
	for i, j := range r.Perm(v) {
		row[i] = base - step*float32(j)
	}
	return row
}

// steepTemperature is steepRow's temperature by dtype.
var steepTemperature = []float32{16, 8, 1}

// draftRow returns a draft distribution over target p in the given mode.
func draftRow(r *rand.Rand, p []float64, mode int) []float32 {
	v := len(p)
	q := make([]float32, v)
	var sum float64
	raw := make([]float64, v)
	for i := range raw {
		switch mode {
		case qClose:
			raw[i] = p[i] * (1 + 0.1*(2*r.Float64()-1))
		case qEqual, qCover:
			raw[i] = p[i]
		default:
			e := r.ExpFloat64()
			raw[i] = e * e * e // spiky, as a small model's distribution
		}
		sum += raw[i]
	}
	for i := range q {
		switch mode {
		case qEqual:
			q[i] = float32(p[i])
		case qCover:
			q[i] = float32(1.5*p[i] + 1e-4)
		case qOver:
			q[i] = 2
		default:
			q[i] = float32(raw[i] / sum)
		}
	}
	return q
}

// sampleWhere draws an index from q among those where keep holds, or returns -1.
func sampleWhere(r *rand.Rand, q []float32, keep func(i int) bool) int {
	var total float64
	for i, x := range q {
		if keep(i) {
			total += float64(x)
		}
	}
	if total <= 0 {
		return -1
	}
	u := r.Float64() * total
	last := -1
	for i, x := range q {
		if !keep(i) {
			continue
		}
		last = i
		if u -= float64(x); u < 0 {
			return i
		}
	}
	return last
}

// draftAccepted is the acceptance test of a draft position with good parameters, as
// ABI.md states it.
func draftAccepted(p abi.RowParams, vocab int, records, draft []float32) bool {
	u := philox.DraftUniform(p.Seed, p.Step)
	q := draft[int(p.TopN)*vocab+int(p.Token)]
	lp := records[abi.RecordWords*int(p.Row)+1]
	return float32(u*q) < float32(math.Exp(float64(lp)))
}

// newResidualCase builds a launch of workload w: its chains' records in order, one launch
// row per chain (launch row y's chain, named by record y's TopK, in reverse or shuffled
// order), each position on its own logits row (rows in a shuffled order, one left unnamed) and draft row (CHAIN_END
// rows name a draft row and token far outside the buffers, which must not be read), the
// flags residual ignores set at random, score's records of the draft positions from the
// Go edition, and per chain a seed and base step (positions at base + i, some across
// 2^64) found so that every position decides as its letter says.
func newResidualCase(t *testing.T, r *rand.Rand, kernels map[string]runtime.GoKernel, w residualWorkload, dtype, T, S,
	vocab, width, draws int) *residualCase {
	t.Helper()
	letters := strings.Join(w.chains, "")
	n := len(letters)
	name := fmt.Sprintf("%s/residual%s/T=%d/S=%d/V=%d", w.name, abi.Suffixes[dtype], T, S, vocab)
	if width != 0 {
		name += fmt.Sprintf("/width=%d", width)
	}
	if draws > 1 {
		name += fmt.Sprintf("/grid.z=%d", draws)
	}
	esize := 4
	if dtype != 0 {
		esize = 2
	}
	c := &launchCase{
		name: name, kernel: residual, dtype: dtype, T: T, S: S, draws: draws, vocab: vocab, stride: vocab + 1,
		outRows: n + 1, maxGroups: 1 + r.IntN(6), yieldPct: r.IntN(40), simdWidth: width, seed: r.Uint64(),
	}
	c.logits = make([]byte, ((c.outRows-1)*c.stride+vocab)*esize)
	rows := r.Perm(c.outRows)[:n]
	draftRows := n + 2
	draftOf := r.Perm(draftRows)
	shapes := map[string]rowShape{}
	for _, s := range rowShapes {
		shapes[s.name] = s
	}
	finite := []string{"llm", "flat", "steps", "tied", "masked", "far", "zeros", "sole"}
	wbits := (vocab + 31) / 32

	// Rows, parameters and processor buffers.
	plans := make([]chainPlan, n)
	params := make([]abi.RowParams, n)
	var flags abi.Flags
	y := 0
	for ci, ch := range w.chains {
		stop := strings.IndexFunc(ch, func(l rune) bool { return !strings.ContainsRune(chainAccepts, l) })
		require.GreaterOrEqual(t, stop, 0, "chain %q has no end", ch)
		require.True(t, strings.ContainsRune(chainEnds, rune(ch[len(ch)-1])), "chain %q must end in one of %s", ch,
			chainEnds)
		for i := range len(ch) {
			l := ch[i]
			plans[y+i] = chainPlan{letter: l, chain: ci, pos: i, stop: stop, q: w.q, exact: w.exact}
			if w.q == qMix {
				plans[y+i].q = 1 + r.IntN(numQModes-1)
			}
			shape := pick(r, finite...)
			switch l {
			case 'p', 'P':
				shape = "nan"
			case 'H':
				shape = "huge"
			}
			row := rows[y+i]
			vals := shapes[shape].make(r, vocab)
			if w.exact {
				vals = exactShapes[r.IntN(len(exactShapes))](r, vocab)
				if w.kept {
					vals = steepRow(r, dtype, vocab)
				}
			}
			encodeRow(dtype, vals, c.logits[row*c.stride*esize:])
			if row < c.outRows-1 {
				encodeRow(dtype, []float32{nan}, c.logits[(row*c.stride+vocab)*esize:])
			}
			p := abi.RowParams{
				Row: uint32(row), Temperature: pick[float32](r, 0.5, 0.8, 1, 1.3, 2), TopN: uint32(draftOf[y+i]),
				Flags: w.procs, BitmaskRow: uint32(1 + r.IntN(3)), RepetitionPenalty: pick[float32](r, 1, 1.3, 0.8),
				FrequencyPenalty: pick[float32](r, 0, 0.5, -0.25), PresencePenalty: pick[float32](r, 0, 0.2, -1),
				TopK: pick[uint32](r, 0, 1, 5), TopP: pick[float32](r, 0, 0.5, 1), MinP: pick[float32](r, 0, 0.1),
			}
			if w.exact {
				p.Temperature = pick(r, exactTemperatures...)
				if w.kept {
					p.Temperature = steepTemperature[dtype]
				}
			}
			if w.kept {
				p.Flags |= abi.FlagKeptSet
			}
			// Flags residual has no use for, which must change nothing.
			for _, f := range []abi.Flags{abi.FlagLogprobs, abi.FlagAdvance, abi.FlagRecord, abi.FlagPerturbed,
				abi.FlagRouted | abi.FlagCategorical, abi.FlagRouted | abi.FlagFiltered} {
				if r.IntN(6) == 0 {
					p.Flags |= f
				}
			}
			switch l {
			case 'z', 'Z':
				p.Temperature = 0
			case 'n':
				p.Temperature = nan
			case 'x', 'X':
				p.Flags |= 1 << 14
			case 'S':
				p.Flags |= abi.FlagShard
			case 'm', 'd', 'D':
				p.Flags |= abi.FlagMask
			}
			if strings.ContainsRune(chainEnds, rune(l)) {
				p.Flags |= abi.FlagChainEnd
				p.TopN, p.Token = pick[uint32](r, 1<<30, math.MaxUint32), pick[uint32](r, 1<<30, math.MaxUint32)
			}
			params[y+i] = p
			flags |= p.Flags
		}
		y += len(ch)
	}
	if flags&abi.FlagBias != 0 {
		c.bias = make([]float32, c.outRows*vocab)
		for i := range c.bias {
			c.bias[i] = float32(r.NormFloat64() * 2)
		}
	}
	if flags&abi.FlagPenalties != 0 {
		c.counts = make([]uint32, c.outRows*vocab)
		for i := range c.counts {
			c.counts[i] = pick[uint32](r, 0, 0, 0, 1, 3, 1<<31, 1<<31|2, abi.CountMask)
		}
	}
	if flags&abi.FlagMask != 0 {
		c.mask = make([]uint32, c.outRows*wbits)
		for row := range c.outRows {
			words := c.mask[row*wbits : (row+1)*wbits]
			for i := range vocab {
				if r.IntN(4) != 0 {
					words[i/32] |= 1 << (i % 32)
				}
			}
			i := r.IntN(vocab)
			words[i/32] |= 1 << (i % 32) // at least one allowed
		}
	}
	if flags&abi.FlagBitmask != 0 {
		// Mask row 0 allows nothing; rows 1 to 3 most tokens, at least one.
		c.bitmask = make([]uint32, 4*wbits)
		for row := 1; row < 4; row++ {
			words := c.bitmask[row*wbits : (row+1)*wbits]
			for i := range vocab {
				if r.IntN(5) != 0 {
					words[i/32] |= 1 << (i % 32)
				}
			}
			i := r.IntN(vocab)
			words[i/32] |= 1 << (i % 32)
		}
	}

	// Draft tokens and draft rows.
	c.draft = make([]float32, draftRows*vocab)
	for i := range c.draft {
		c.draft[i] = r.Float32() // rows no position names: read by no one
	}
	for y := range n {
		pl, p := &plans[y], &params[y]
		row := int(p.Row)
		switch pl.letter {
		case 'm':
			// A masked token: the mask of its row leaves it out, and some other token in.
			tok := r.IntN(vocab)
			words := c.mask[row*wbits : (row+1)*wbits]
			words[tok/32] &^= 1 << (tok % 32)
			if vocab > 1 {
				other := (tok + 1 + r.IntN(vocab-1)) % vocab
				words[other/32] |= 1 << (other % 32)
			}
			p.Token = uint32(tok)
		case 'd', 'D':
			clear(c.mask[row*wbits : (row+1)*wbits])
		}
		pl.p = targetProbs(c, *p)
		// A row meant to be finite that its shape, mask or bitmask left without a finite
		// logit (likely at small V) is drawn again.
		for try := 0; pl.p == nil && !w.exact && !strings.ContainsRune("pPdDH", rune(pl.letter)); try++ {
			require.Less(t, try, 100, "%s: record %d: no finite row", name, y)
			encodeRow(dtype, shapes[pick(r, finite...)].make(r, vocab), c.logits[row*c.stride*esize:])
			pl.p = targetProbs(c, *p)
		}
		if p.Flags&abi.FlagChainEnd != 0 {
			continue
		}
		q := c.draft[int(p.TopN)*vocab : (int(p.TopN)+1)*vocab]
		if pl.p == nil {
			copy(q, draftRow(r, make([]float64, vocab), qFar))
		} else {
			copy(q, draftRow(r, pl.p, pl.q))
		}
		switch {
		case pl.letter == 'm':
		case pl.letter == 'v':
			p.Token = pick(r, uint32(vocab), uint32(vocab+3), math.MaxUint32)
		case pl.p == nil:
			p.Token = uint32(r.IntN(vocab))
		case (pl.pos < pl.stop || pl.letter == 'T') && w.kept:
			p.Token = uint32(argmax(pl.p)) // the row's largest logit: every filter keeps it
		case pl.pos < pl.stop || pl.letter == 'T':
			// A token the draft does not overweight, so that it is likely accepted (and,
			// for T, has p > 0).
			tok := sampleWhere(r, q, func(i int) bool { return float64(q[i]) <= pl.p[i] })
			if tok < 0 {
				tok = argmax(pl.p)
			}
			p.Token = uint32(tok)
		default:
			// A token the draft overweights, as rejected tokens are.
			tok := sampleWhere(r, q, func(i int) bool { return float64(q[i]) > pl.p[i] })
			if tok < 0 {
				tok = r.IntN(vocab)
			}
			p.Token = uint32(tok)
		}
		if (pl.letter == 'q' || pl.letter == 'm') && p.Token < uint32(vocab) {
			q[p.Token] = 0
		}
	}
	c.params = make([]byte, abi.RowParamsSize*n)
	for y, p := range params {
		c.setRowParams(y, p)
	}

	// score's records of the draft positions, as a score launch over the same logits
	// leaves them (it reads no random stream: the seeds come after). The host scores a
	// row without FlagShard, which score refuses.
	sc := *c
	sc.kernel, sc.S, sc.draws, sc.draft = score, 1, 1, nil
	sc.name = c.name + "/score"
	sc.params = nil
	for _, p := range params {
		switch {
		case w.kept:
			// The filtered kernel's kept-set descriptors, at every position (a chain's end
			// draws over its kept set), for the draft token: the row as Sample sends it,
			// nothing routed, recorded or advanced.
			sc.kernel, sc.name = filtered, c.name+"/filtered"
			p.Flags = p.Flags&^(abi.FlagChainEnd|abi.FlagRouted|abi.FlagCategorical|abi.FlagFiltered|abi.FlagRecord|
				abi.FlagAdvance) | abi.FlagLogprobs
		case p.Flags&abi.FlagChainEnd != 0:
			continue
		default:
			p.Flags &^= abi.FlagShard
		}
		sc.params = append(sc.params, make([]byte, abi.RowParamsSize)...)
		p.Encode(sc.params[len(sc.params)-abi.RowParamsSize:])
	}
	c.records0 = runGoEdition(t, &sc, kernels, r).logprobs

	// Seeds and steps: each chain's draft positions up to its stop decide as planned.
	y = 0
	for _, ch := range w.chains {
		ys := make([]int, 0, len(ch))
		for i := range len(ch) {
			pl := plans[y+i]
			good := !strings.ContainsRune(chainBad, rune(pl.letter))
			if i <= pl.stop && good && params[y+i].Flags&abi.FlagChainEnd == 0 {
				ys = append(ys, y+i)
			}
		}
		planned := func() bool {
			for _, yy := range ys {
				p := params[yy]
				if draftAccepted(p, vocab, c.records0, c.draft) != (plans[yy].pos < plans[yy].stop) {
					return false
				}
				if l := plans[yy].letter; (l == 't' || l == 'T') && c.draft[int(p.TopN)*vocab+int(p.Token)] == 0 {
					return false // no q on the boundary
				}
			}
			return true
		}
		found := false
		for try := range 8000 {
			if try == 4000 {
				// The plan is unlikely with these drafts: move q at the tokens so that
				// accepted positions always pass and the stop fails half the time.
				for _, yy := range ys {
					p := params[yy]
					pt := math.Exp(float64(c.records0[abi.RecordWords*int(p.Row)+1]))
					qt := &c.draft[int(p.TopN)*vocab+int(p.Token)]
					if plans[yy].pos < plans[yy].stop {
						require.Truef(t, pt > 0, "%s: record %d (%q) cannot be accepted: record %v", name, yy,
							ch, c.records0[abi.RecordWords*p.Row:][:abi.RecordWords])
						*qt = min(*qt, float32(0.5*pt))
					} else if pt == pt {
						*qt = max(*qt, float32(2*pt))
					}
				}
			}
			seed, step := r.Uint64(), r.Uint64()
			if try%5 == 0 {
				step = math.MaxUint64 - uint64(r.IntN(3)) // positions across the wrap of the step
			}
			for i := range len(ch) {
				params[y+i].Seed, params[y+i].Step = seed, step+uint64(i)
			}
			for _, yy := range ys {
				if l := plans[yy].letter; l == 't' || l == 'T' {
					p := params[yy]
					pt := float32(math.Exp(float64(c.records0[abi.RecordWords*int(p.Row)+1])))
					if l == 't' {
						pt = math.Nextafter32(pt, 0)
					}
					c.draft[int(p.TopN)*vocab+int(p.Token)] = boundaryQ(philox.DraftUniform(p.Seed, p.Step), pt)
				}
			}
			if planned() {
				found = true
				break
			}
		}
		require.True(t, found, "%s: no seed makes chain %q decide as planned", name, ch)
		y += len(ch)
	}
	filters := slices.Clone(params)
	// One launch row per chain: record y's TopK is the first record of launch row y's
	// chain, which need not hold record y: the chains in reverse order, or shuffled.
	var starts []uint32
	y = 0
	for _, ch := range w.chains {
		starts = append(starts, uint32(y))
		y += len(ch)
	}
	serves := r.Perm(len(starts))
	if r.IntN(2) == 0 {
		for i := range serves {
			serves[i] = len(serves) - 1 - i
		}
	}
	for ly, ci := range serves {
		params[ly].TopK = starts[ci]
	}
	c.gridRows = len(starts)
	for y, p := range params {
		c.setRowParams(y, p)
	}
	return &residualCase{launchCase: c, plans: plans, filters: filters}
}

// boundaryQ returns a q with fl(u·q) == target, or 0 when none is found (planning then
// fails and draws another seed).
func boundaryQ(u, target float32) float32 {
	if !(u > 0) || !(target > 0) || math.IsInf(float64(target), 0) {
		return 0
	}
	q := float32(float64(target) / float64(u))
	for range 64 {
		switch prod := u * q; {
		case prod == target:
			return q
		case prod < target:
			q = math.Nextafter32(q, float32(math.Inf(1)))
		default:
			q = math.Nextafter32(q, 0)
		}
	}
	return 0
}

func argmax(p []float64) int {
	best := 0
	for i, x := range p {
		if x > p[best] {
			best = i
		}
	}
	return best
}

// TestResidualMatchesGoEdition runs residual in the emulator over every dtype, 1, 2 and
// 5 threadgroups per row (small odd V, so that some threadgroups have no elements),
// threadgroups of 32 to 256 threads, SIMD widths of 8 to 64 and a grid two deep whose
// second layer must stay idle, on residualWorkloads: several chains of 1 to 5 positions
// per launch (one launch row per chain, serving the chains in reverse or shuffled order),
// every draft accepted (the bonus draw), rejections at the first, a middle
// and the last draft, draft rows close to, far from, equal to and covering the target
// (the fallback to p), q = 0 at the draft token, masked draft tokens, bad rows at the
// stop and past it, processors and NaN, +Inf, all-masked and huge rows. Tokens and
// statuses of every slot must equal the Go edition's, which must follow each chain's
// plan; records, params and counts stay as they were, and counters return to zero. A
// bonus draw and a fallback draw must also be the token gumbel_argmax draws at that row,
// finished by gumbel_exact where its scores need the exact comparison (the last workload).
func TestResidualMatchesGoEdition(t *testing.T) {
	bin := buildDriver(t)
	r := rand.New(rand.NewPCG(2026, 12))
	kernels := gokernel.Kernels()
	var cases []*residualCase
	for wi, w := range residualWorkloads {
		for dtype := range abi.Suffixes {
			for si, S := range []int{1, 2, 5} {
				k := (wi*3+dtype)*3 + si
				T := []int{32, 64, 256}[k%3]
				width, draws := 0, 1
				switch k % 7 {
				case 2:
					width = pick(r, 8, 16, 64)
					T = max(T, width)
				case 5:
					draws = 2
				}
				v := residualVocabs[k%len(residualVocabs)]
				cases = append(cases, newResidualCase(t, r, kernels, w, dtype, T, S, v, width, draws))
			}
		}
	}
	launches := make([]*launchCase, len(cases))
	for i, c := range cases {
		launches[i] = c.launchCase
	}
	got := runDriver(t, bin, launches)

	// What the stops drew: by status, and the kinds of draws among status 0.
	var stops [5]int
	var bonus, residualDraws, fallback, exactDraws, keptDraws, before, past int
	for i, rc := range cases {
		c := rc.launchCase
		want := runGoEdition(t, c, kernels, r)
		assert.Equal(t, want.tokens, got[i].tokens, "%s: tokens", c.name)
		assert.Equal(t, want.status, got[i].status, "%s: status", c.name)
		assert.Equal(t, bitsOf(c.records0), bitsOf(got[i].logprobs), "%s: residual wrote records", c.name)
		assert.Equal(t, bitsOf(c.records0), bitsOf(want.logprobs), "%s: the Go edition wrote records", c.name)
		assert.Equal(t, c.params, got[i].params, "%s: params changed", c.name)
		assert.Equal(t, c.counts, got[i].counts, "%s: counts changed", c.name)
		assert.Zero(t, got[i].countersLeft, "%s: counters not left at zero", c.name)
		assert.Zero(t, want.countersLeft, "%s: the Go edition left counters set", c.name)

		for y, pl := range rc.plans {
			p := c.rowParams(y)
			o := int(p.Row)
			st, tok := abi.Status(want.status[o]), want.tokens[o]
			where := fmt.Sprintf("%s: record %d (%q of chain %d)", c.name, y, pl.letter, pl.chain)
			switch {
			case pl.pos < pl.stop:
				before++
				assert.Equal(t, abi.StatusOK, st, "%s: an accepted draft's status", where)
				assert.Equal(t, int32(p.Token), tok, "%s: an accepted draft's token", where)
			case pl.pos > pl.stop:
				past++
				assert.Equal(t, abi.StatusNotReached, st, "%s: past the stop", where)
				assert.Equal(t, int32(-1), tok, "%s: past the stop", where)
			default:
				stops[min(int(st), 4)]++
				switch {
				case strings.ContainsRune(chainBad, rune(pl.letter)):
					assert.Equal(t, abi.StatusBadParams, st, "%s: a bad stop", where)
				case strings.ContainsRune("pP", rune(pl.letter)):
					assert.Equal(t, abi.StatusNonFinite, st, "%s: a NaN stop", where)
				case strings.ContainsRune("dD", rune(pl.letter)):
					assert.Equal(t, abi.StatusNoFinite, st, "%s: a stop with nothing allowed", where)
				case pl.letter != 'H' && !pl.exact:
					assert.Equal(t, abi.StatusOK, st, "%s: the stop's status", where)
				}
				if st != abi.StatusOK {
					continue
				}
				end := p.Flags&abi.FlagChainEnd != 0
				// Where the log-sum-exp is so large that it rounds its log-normaliser
				// away (saturated counts with a negative frequency penalty),
				// d = fl(s - lse) is no log-probability and q may not cover p.
				cover := pl.q == qOver || pl.q == qCover && math.Abs(float64(c.records0[abi.RecordWords*o+3])) < 1<<20
				switch {
				case end:
					bonus++
				case cover:
					fallback++
				default:
					residualDraws++
				}
				if (end || cover) && p.Flags&abi.FlagKeptSet != 0 {
					keptDraws++
					assert.Equal(t, filteredToken(t, c, rc.filters[y], kernels, r), tok,
						"%s: a draw from p must be the filtered kernel's at the row", where)
				} else if end || cover {
					want, exact := gumbelArgmaxToken(t, c, p, kernels, r)
					assert.Equal(t, want, tok, "%s: a draw from p must be gumbel_argmax's at the row", where)
					if exact {
						exactDraws++
					}
				}
			}
		}
	}
	t.Logf("%d launches: %d accepted drafts, %d positions not reached; stops by status 0/1/2/3/4 %v; among status 0: "+
		"%d bonus draws, %d from the residual, %d fallbacks to p; %d draws from p by the exact comparison", len(cases),
		before, past, stops, bonus, residualDraws, fallback, exactDraws)
	for st, n := range stops[:4] {
		assert.Positive(t, n, "no stop ended with status %d", st)
	}
	assert.Zero(t, stops[4], "a stop wrote NOT_REACHED")
	assert.Positive(t, bonus, "no bonus draw")
	assert.Positive(t, residualDraws, "no draw from the residual")
	assert.Positive(t, fallback, "no fallback to p")
	assert.Greater(t, exactDraws, 10, "too few draws from p need the exact comparison")
	assert.Greater(t, keptDraws, 50, "too few draws from p over a kept set")
}

// filteredToken is the token the Go edition's filtered kernel draws for launch row p of
// c alone (its filters and processors, nothing else): the one Sample draws there.
func filteredToken(t *testing.T, c *launchCase, p abi.RowParams, kernels map[string]runtime.GoKernel,
	r *rand.Rand) int32 {
	t.Helper()
	g := *c
	g.kernel, g.S, g.draws, g.draft, g.records0 = filtered, 1, 1, nil, nil
	p.Flags &= abi.FlagsProcessors
	g.params = make([]byte, abi.RowParamsSize)
	g.setRowParams(0, p)
	res := runGoEdition(t, &g, kernels, r)
	require.Equal(t, int32(abi.StatusOK), res.status[p.Row], "%s: the filtered kernel's status", c.name)
	return res.tokens[p.Row]
}

// gumbelArgmaxToken is the token the Go edition's gumbel_argmax draws for launch row p of
// c alone, with the processors and nothing else, and whether gumbel_exact finished it.
func gumbelArgmaxToken(t *testing.T, c *launchCase, p abi.RowParams, kernels map[string]runtime.GoKernel,
	r *rand.Rand) (token int32, exact bool) {
	t.Helper()
	g := *c
	g.kernel, g.S, g.draws, g.draft, g.records0, g.argmaxOnly = gumbelArgmax, 1, 1, nil, nil, true
	p.Flags &= abi.FlagsProcessors
	g.params = make([]byte, abi.RowParamsSize)
	g.setRowParams(0, p)
	exact = runGoEdition(t, &g, kernels, r).status[p.Row] == int32(abi.StatusExact)
	g.argmaxOnly = false
	res := runGoEdition(t, &g, kernels, r)
	require.Equal(t, int32(abi.StatusOK), res.status[p.Row], "%s: gumbel_argmax's status", c.name)
	return res.tokens[p.Row], exact
}
