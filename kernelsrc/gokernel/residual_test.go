package gokernel

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/gumbel-go/gumbel/philox"
	"github.com/gumbel-go/gumbel/runtime"
)

// chainCase is one launch of residual: chains laid out over consecutive logits rows,
// each position one launch row.
type chainCase struct {
	name string
	// chains[c] are chain c's draft tokens; its positions are the next len+1 rows.
	chains [][]uint32
	// q returns the draft probabilities at a position whose target logits are row.
	q func(row []float32, rng *rand.Rand) []float32
	// drawn draws each draft token from q (the listed ones give the lengths), as a
	// drafter does: drafts then pass often, and the residual differs from p.
	drawn bool
	// apart asks that some stop's residual winner differ from p's.
	apart bool
	// temp is the rows' temperature (0: 0.9).
	temp float32
	// row makes the target logits at a position (nil: llmRow).
	row func(r *rand.Rand, v int) []float32
	// bad spoils launch row y's parameters (nil: none).
	bad func(y int, p *abi.RowParams)
	// filter gives launch row y filters (nil: none): its target is the filtered law,
	// described to residual by the filtered kernel's kept-set descriptor.
	filter func(y int, p *abi.RowParams)
}

// chainWant is the verdict of one chain computed here from ABI.md's formulas, without
// the kernel's skip and split: the tokens and statuses of its positions, and whether
// its stop drew from a residual whose winner is not p's. filters holds each position's
// parameters with its filters (those with FlagKeptSet draw over the kept set that
// keepRow finds).
func chainWant(rows [][]float32, params, filters []abi.RowParams, draft []float32, records []float32, vocab int) (tokens []int32, status []abi.Status, apart bool) {
	stopped := false
	for j, p := range params {
		switch {
		case stopped:
			tokens, status = append(tokens, -1), append(status, abi.StatusNotReached)
			continue
		case p.Flags&abi.FlagChainEnd == 0 && goodChainRow(p, uint32(vocab)) &&
			float32(philox.DraftUniform(p.Seed, p.Step)*draft[int(p.TopN)*vocab+int(p.Token)]) < exp32(records[4*p.Row+1]):
			tokens, status = append(tokens, int32(p.Token)), append(status, abi.StatusOK)
			continue
		}
		stopped = true
		if !goodChainRow(p, uint32(vocab)) {
			tokens, status = append(tokens, -1), append(status, abi.StatusBadParams)
			continue
		}
		invT := float32(1 / p.Temperature)
		row := rows[p.Row]
		kept := func(int) bool { return true }
		var ks keptSet
		if p.Flags&abi.FlagKeptSet != 0 {
			m, _ := rowMax(row, 0)
			fp := filters[j]
			ks = new(catScratch).keepRow(&fp, row, m)
			in := make([]bool, vocab)
			for a, i := range ks.idx {
				in[i] = ks.kept(a)
			}
			kept = func(i int) bool { return in[i] }
		}
		var bestR uint64
		for i, x := range row {
			if p.Flags&abi.FlagChainEnd == 0 && kept(i) {
				d := float32(x * invT)
				if p.Flags&abi.FlagKeptSet != 0 {
					d = float32(float32(x-records[4*p.Row+2]) * invT)
				}
				w := float32(exp32(float32(d-records[4*p.Row+3])) - draft[int(p.TopN)*vocab+i])
				if w > 0 {
					bestR = max(bestR, pack(float32(logf32(w)+philox.ElementGumbel(p.Seed, p.Step, uint32(i))), i))
				}
			}
		}
		// The draw from p is gumbel_argmax's, exact at any scale, or over a kept set the
		// filtered kernel's.
		tok, _ := refGumbelArgmax(row, p)
		if p.Flags&abi.FlagKeptSet != 0 {
			tok = int32(gumbelKept(&ks, row, p.Seed, p.Step))
		}
		if bestR != 0 {
			apart = int32(^uint32(bestR)) != tok
			tok = int32(^uint32(bestR))
		}
		tokens, status = append(tokens, tok), append(status, abi.StatusOK)
	}
	return tokens, status, apart
}

// TestResidualChains: every chain's verdict and stop token equal the formulas of
// ABI.md, for every split and launch order: accepted runs, rejections at the first and
// a later draft, a chain without drafts, an empty residual (the fallback to p), and bad
// rows before, at and after a stop.
func TestResidualChains(t *testing.T) {
	const v = 301
	dist := func(row []float32, rng *rand.Rand) []float32 {
		q := make([]float32, len(row))
		sum := float32(0)
		for i := range q {
			q[i] = float32(rng.ExpFloat64())
			if i%7 == 0 {
				q[i] *= 40 // the drafter likes some tokens far more than the target does
			}
			sum += q[i]
		}
		for i := range q {
			q[i] /= sum
		}
		return q
	}
	// near is a drafter whose logits are the target's plus normal noise of sd 3: drafts
	// pass often, and at a rejection the residual differs from the target.
	near := func(row []float32, rng *rand.Rand) []float32 {
		q := make([]float32, len(row))
		m, sum := math.Inf(-1), 0.0
		for i, x := range row {
			q[i] = float32(float64(x)/0.9 + 3*rng.NormFloat64())
			m = math.Max(m, float64(q[i]))
		}
		for i := range q {
			sum += math.Exp(float64(q[i]) - m)
		}
		for i := range q {
			q[i] = float32(math.Exp(float64(q[i])-m) / sum)
		}
		return q
	}
	// favourite is a drafter sure of the target's arg-max: at a rejection the residual
	// is p without it.
	favourite := func(row []float32, _ *rand.Rand) []float32 {
		q := make([]float32, len(row))
		q[firstIndexOf(row, slices.Max(row))] = 1
		return q
	}
	ones := func(row []float32, _ *rand.Rand) []float32 {
		q := make([]float32, len(row))
		for i := range q {
			q[i] = 1
		}
		return q
	}
	zeros := func(row []float32, _ *rand.Rand) []float32 { return make([]float32, len(row)) }
	// Rows whose scores reach ExactLimit, where the draws from p are exact: a flat row of
	// 1e7 at T = 1 (the noise alone decides), and two tied logits at T = 1e-30.
	flat := func(_ *rand.Rand, v int) []float32 { return slices.Repeat([]float32{1e7}, v) }
	tie := func(r *rand.Rand, v int) []float32 {
		row := slices.Repeat([]float32{1}, v)
		row[r.IntN(v)], row[r.IntN(v)] = 25, 25
		return row
	}
	// filters gives every position one of the filters and their combinations.
	filters := func(y int, p *abi.RowParams) {
		p.Flags |= abi.FlagKeptSet
		switch y % 5 {
		case 0:
			p.TopK = 5
		case 1:
			p.TopP = 0.8
		case 2:
			p.MinP = 0.05
		case 3:
			p.TopK, p.TopP, p.MinP = 20, 0.9, 0.01
		case 4:
			p.TopP, p.MinP = 0.95, 0.2
		}
	}
	topK := func(k uint32) func(int, *abi.RowParams) {
		return func(_ int, p *abi.RowParams) { p.Flags, p.TopK = p.Flags|abi.FlagKeptSet, k }
	}
	// tiedTop has five logits tied at the third largest value: top-k 3 keeps all seven.
	tiedTop := func(r *rand.Rand, v int) []float32 {
		row := llmRow(r, v)
		for i := range row {
			row[i] = min(row[i], 5)
		}
		for j, i := range r.Perm(v)[:7] {
			row[i] = float32(max(9-j, 7))
		}
		return row
	}
	// steep rows of logits near 1e7, distinct and falling, the largest first: at T = 16
	// every score needs the exact comparison, and the noise reaches some 50 ranks down,
	// so that a draw over the whole row would often leave top-k's kept set.
	steep := func(_ *rand.Rand, v int) []float32 {
		row := make([]float32, v)
		for i := range row {
			row[i] = 1e7 + float32(v-i)
		}
		return row
	}
	cases := []chainCase{
		{name: "filtered chains", chains: [][]uint32{{3, 7, 5}, {14}, {}, {0, 21}, {1, 2, 3, 4, 5}}, q: dist, filter: filters},
		{name: "filtered, drafter near the target", chains: [][]uint32{{0, 0, 0, 0}, {0, 0}, {0, 0, 0}, {0}, {0, 0}, {0, 0, 0}},
			q: near, drawn: true, filter: filters},
		{name: "filtered, draft of the favourite", chains: make([][]uint32, 48),
			q: favourite, drawn: true, apart: true, temp: 4, filter: filters},
		{name: "filtered, empty residual", chains: [][]uint32{{8, 9}, {10}, {1}, {2}, {3}}, q: ones, filter: filters},
		{name: "ties at the k-th value", chains: [][]uint32{{0, 0, 0}, {0, 0}, {0}}, q: near, drawn: true, row: tiedTop, filter: topK(3)},
		{name: "huge rows, top-k, every draft accepted", chains: [][]uint32{{1, 2}, {3}, {0}, {2, 1, 0}}, q: zeros, temp: 16, row: steep, filter: topK(4)},
		{name: "huge rows, top-k, empty residual", chains: [][]uint32{{8, 9}, {10}, {11}, {12}}, q: ones, temp: 16, row: steep, filter: topK(4)},
		{name: "mixed chains", chains: [][]uint32{{3, 7, 5}, {14}, {}, {0, 21}}, q: dist},
		{name: "drafter near the target", chains: [][]uint32{{0, 0, 0, 0}, {0, 0}, {0, 0, 0}, {0}, {0, 0}}, q: near, drawn: true},
		{name: "draft of the favourite", chains: make([][]uint32, 48),
			q: favourite, drawn: true, apart: true, temp: 4},
		{name: "zero draft probability accepts", chains: [][]uint32{{1, 2, 3, 4}}, q: zeros},
		{name: "empty residual", chains: [][]uint32{{8, 9}, {10}}, q: ones},
		{name: "huge flat rows, every draft accepted", chains: [][]uint32{{1, 2}, {3}, {4}, {5}}, q: zeros, temp: 1, row: flat},
		{name: "huge flat rows, empty residual", chains: [][]uint32{{8, 9}, {10}, {11}, {12}}, q: ones, temp: 1, row: flat},
		{name: "tie at T = 1e-30, empty residual", chains: [][]uint32{{8}, {10}, {11}, {12}}, q: ones, temp: 1e-30, row: tie},
		{name: "bad rows", chains: [][]uint32{{5, 6, 7}, {9, 10}, {11}}, q: dist,
			bad: func(y int, p *abi.RowParams) {
				switch y {
				case 1:
					p.Token = v // chain 0's second draft: the chain stops there, status 3
				case 5:
					p.Temperature = 0 // chain 1's second draft: a stop with status 3
				case 6:
					p.Flags |= 1 << 14 // chain 1's end: never reached
				}
			}},
	}
	for _, c := range cases {
		for i := range c.chains {
			if c.chains[i] == nil {
				c.chains[i] = []uint32{0} // a one-draft chain
			}
		}
		for _, s := range []int{1, 3, 8} {
			for _, order := range []launchOrder{onDevice, reversed, shuffled} {
				rng := rand.New(rand.NewPCG(5, uint64(len(c.name))))
				p := &problem{d: abi.F32, vocab: v, stride: v}
				var draft []float32
				var starts []uint32
				for ci, toks := range c.chains {
					starts = append(starts, uint32(len(p.params)))
					for k := range len(toks) + 1 {
						row := uint32(len(p.rows))
						if c.row != nil {
							p.rows = append(p.rows, c.row(rng, v))
						} else {
							p.rows = append(p.rows, llmRow(rng, v))
						}
						rp := abi.RowParams{Row: row, Temperature: cmp.Or(c.temp, 0.9), Seed: uint64(40 + ci), Step: uint64(3 + k)}
						if k == len(toks) {
							rp.Flags = abi.FlagChainEnd
						} else {
							q := c.q(p.rows[row], rng)
							rp.Token, rp.TopN = toks[k], uint32(len(draft)/v)
							if c.drawn {
								rp.Token = drawToken(q, rng)
							}
							draft = append(draft, q...)
						}
						p.params = append(p.params, rp)
					}
				}
				if c.bad != nil {
					for y := range p.params {
						c.bad(y, &p.params[y])
					}
				}
				if c.filter != nil {
					for y := range p.params {
						c.filter(y, &p.params[y])
					}
				}
				filters := slices.Clone(p.params)
				for y := range starts {
					// Launch row y serves the chains in reverse order: record y's TopK
					// names a chain that need not hold record y.
					p.params[y].TopK = starts[len(starts)-1-y]
				}
				b := p.layout(s)
				b.draft = draft
				// score's records: the processed log-probability of each draft token and
				// the processed log-sum-exp, in float64.
				for _, rp := range p.params {
					invT := 1 / float64(rp.Temperature)
					m, sum := math.Inf(-1), 0.0
					for _, x := range p.rows[rp.Row] {
						m = math.Max(m, float64(x)*invT)
					}
					for _, x := range p.rows[rp.Row] {
						sum += math.Exp(float64(x)*invT - m)
					}
					lse := m + math.Log(sum)
					tok := min(int(rp.Token), v-1)
					b.logprobs[4*rp.Row+1] = float32(float64(p.rows[rp.Row][tok])*invT - lse)
					b.logprobs[4*rp.Row+3] = float32(lse)
				}
				if c.filter != nil {
					keptSetRecords(t, p, filters, b.logprobs)
				}
				records := append([]float32(nil), b.logprobs...)
				fn := func(bc *runtime.BlockContext) { residual(bc, abi.F32) }
				grid := runtime.Dim3{X: s, Y: len(c.chains), Z: 1}
				launch(t, fn, grid, b.args(p.stride, p.vocab), order, rng)
				for i, cnt := range b.counters {
					require.Zero(t, cnt, "counters[%d]", i)
				}
				for i := range records {
					require.Equal(t, math.Float32bits(records[i]), math.Float32bits(b.logprobs[i]), "residual writes no records")
				}
				y, residuals := 0, 0
				for ci, toks := range c.chains {
					n := len(toks) + 1
					wantTok, wantSt, apart := chainWant(p.rows, p.params[y:y+n], filters[y:y+n], draft, records, v)
					if apart {
						residuals++
					}
					for k := range n {
						row := p.params[y+k].Row
						what := []any{"%s S=%d %v chain %d position %d", c.name, s, order, ci, k}
						require.Equal(t, wantSt[k], b.status[row], what...)
						require.Equal(t, wantTok[k], b.tokens[row], what...)
					}
					y += n
				}
				if c.apart {
					require.Positive(t, residuals, "%s: some residual draw differs from p's", c.name)
				}
			}
		}
	}
}

// keptSetRecords runs the filtered kernel with FlagKeptSet over the positions with
// filters (params before residual's chain starts replace their TopK) and puts each
// one's descriptor into records, after checking it against keepRow. The descriptor's
// token is the position's draft token.
func keptSetRecords(t *testing.T, p *problem, filters []abi.RowParams, records []float32) {
	t.Helper()
	fp := &problem{d: p.d, vocab: p.vocab, stride: p.stride, rows: p.rows}
	for _, rp := range filters {
		if rp.Flags&abi.FlagKeptSet != 0 {
			rp.Flags = rp.Flags&^abi.FlagChainEnd | abi.FlagLogprobs
			fp.params = append(fp.params, rp)
		}
	}
	b := fp.run(t, func(bc *runtime.BlockContext) { filtered(bc, abi.F32) }, 1, onDevice, nil)
	for _, rp := range fp.params {
		desc := b.logprobs[4*rp.Row : 4*rp.Row+4]
		row := p.rows[rp.Row]
		require.Equal(t, abi.StatusOK, b.status[rp.Row])
		m, _ := rowMax(row, 0)
		ks := new(catScratch).keepRow(&rp, row, m)
		require.Equal(t, ks.threshold, math.Float32bits(desc[0]), "row %d: threshold", rp.Row)
		require.Equal(t, m, desc[2], "row %d: m", rp.Row)
		logKept := logKeptMass(ks.total, ks.f)
		require.Equal(t, float32(logKept), desc[3], "row %d: ln S", rp.Row)
		if rp.Token < uint32(len(row)) {
			want := math.Inf(-1)
			for a, i := range ks.idx {
				if i == rp.Token && ks.kept(a) {
					want = float64(float32(float32(row[i]-m)*ks.invT)) - logKept
				}
			}
			requireClose(t, want, desc[1], "row %d: log p of token %d", rp.Row, rp.Token)
		}
		copy(records[4*rp.Row:], desc)
	}
}

// drawToken draws a token from the distribution q.
func drawToken(q []float32, rng *rand.Rand) uint32 {
	u := float32(rng.Float64())
	for i, x := range q {
		if u < x {
			return uint32(i)
		}
		u -= x
	}
	return uint32(len(q) - 1)
}
