package emu

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/stretchr/testify/require"
)

// This file tests the serving features in the emulated CUDA edition against the Go
// edition: logit processors, several draws per row, device-side RECORD and ADVANCE,
// device routing, log-probability records and the topn kernels.

// withProcessors gives the launch bias, counts and mask buffers with LLM-like contents:
// sparse biases (a few strong ones), counts of tokens seen in the prompt and sampled a
// few times (and some at the saturation point of RECORD), and masks that mostly allow,
// some that allow only a few tokens, and one that allows nothing; and a bitmask buffer
// (withBitmask).
func (l *launch) withProcessors(r *rand.Rand) {
	n := l.slots * l.vocab
	l.bias = make([]float32, n)
	l.counts = make([]uint32, n)
	for i := range n {
		switch r.IntN(12) {
		case 0:
			l.bias[i] = float32(r.NormFloat64() * 3)
		case 1:
			l.bias[i] = []float32{-100, 30, 5}[r.IntN(3)]
		}
		switch r.IntN(10) {
		case 0:
			l.counts[i] = 1 << 31 // prompt token
		case 1:
			l.counts[i] = uint32(1 + r.IntN(4))
		case 2:
			l.counts[i] = 1<<31 | uint32(1+r.IntN(3))
		case 3:
			l.counts[i] = []uint32{0x7FFFFFFF, 0xFFFFFFFF, 0x7FFFFFFE}[r.IntN(3)]
		}
	}
	words := (l.vocab + 31) / 32
	l.mask = make([]uint32, l.slots*words)
	for s := range l.slots {
		kind := r.IntN(6)
		for w := range words {
			var m uint32
			switch kind {
			case 0: // a few allowed tokens
				m = 1 << r.IntN(32)
				if r.IntN(3) != 0 {
					m = 0
				}
			case 1: // nothing allowed
				m = 0
			default: // most allowed
				m = ^(r.Uint32() & r.Uint32() & r.Uint32())
			}
			l.mask[s*words+w] = m
		}
	}
	l.withBitmask(r)
}

// The kinds of bitmask row withBitmask lays out, as a grammar engine leaves them.
const (
	bitmaskGrammar = iota // about ten allowed tokens: a grammar's next terminals
	bitmaskSingle         // one allowed token: a forced token
	bitmaskNothing        // no token below V allowed (the bits beyond V set): status 2
	bitmaskRun            // one run of up to 64 allowed tokens
	bitmaskDense          // most tokens allowed
	bitmaskAll            // every token allowed
	numBitmaskKinds
)

// withBitmask gives the launch a bitmask buffer (kernel argument 12) of numBitmaskKinds
// to numBitmaskKinds + 2 mask rows, one of each kind at least, in a random order, so that
// the buffer has more or fewer mask rows than the launch has logits rows and its last
// mask row ends right before a guard page in the emulation. About half the mask rows (and
// every one that allows nothing) also set the bits of their last word beyond V, which
// every kernel must ignore.
func (l *launch) withBitmask(r *rand.Rand) {
	words := (l.vocab + 31) / 32
	if words == 0 {
		return
	}
	rows := numBitmaskKinds + r.IntN(3)
	l.bitmask = make([]uint32, rows*words)
	for m, k := range r.Perm(rows) {
		row := l.bitmask[m*words : (m+1)*words]
		set := func(i int) { row[i/32] |= 1 << (i % 32) }
		kind := k % numBitmaskKinds
		switch kind {
		case bitmaskGrammar:
			for range 10 {
				set(r.IntN(l.vocab))
			}
		case bitmaskSingle:
			set(r.IntN(l.vocab))
		case bitmaskRun:
			lo := r.IntN(l.vocab)
			hi := min(lo+1+r.IntN(64), l.vocab)
			for i := lo; i < hi; i++ {
				set(i)
			}
		case bitmaskDense:
			for w := range row {
				row[w] = ^(r.Uint32() & r.Uint32() & r.Uint32())
			}
		case bitmaskAll:
			for w := range row {
				row[w] = ^uint32(0)
			}
		}
		if tail := l.vocab % 32; tail != 0 && (kind == bitmaskNothing || r.IntN(2) == 0) {
			row[words-1] |= ^uint32(0) << tail
		} else if tail != 0 {
			row[words-1] &= 1<<tail - 1
		}
	}
}

// bitmaskRows is the number of mask rows in the launch's bitmask buffer.
func (l *launch) bitmaskRows() int {
	if words := (l.vocab + 31) / 32; words > 0 {
		return len(l.bitmask) / words
	}
	return 0
}

// bitmaskFlag gives about half the rows of a launch with a bitmask FlagBitmask and a
// mask row of the buffer, any of them.
func (l *launch) bitmaskFlag(r *rand.Rand, p *rowParams) {
	if rows := l.bitmaskRows(); rows > 0 && r.IntN(2) == 0 {
		p.Flags |= abi.FlagBitmask
		p.BitmaskRow = uint32(r.IntN(rows))
	}
}

// allows reports whether the row's mask and bitmask, those its flags apply, let token i
// through.
func (l *launch) allows(p rowParams, i int) bool {
	w := (l.vocab + 31) / 32
	if p.Flags&abi.FlagMask != 0 && l.mask[int(p.Row)*w+i/32]>>(i%32)&1 == 0 {
		return false
	}
	return p.Flags&abi.FlagBitmask == 0 || l.bitmask[int(p.BitmaskRow)*w+i/32]>>(i%32)&1 != 0
}

// bitmaskAllowed is the number of tokens below V that the row's bitmask row allows, and
// whether the row sets bits beyond V.
func (l *launch) bitmaskAllowed(p rowParams) (n int, beyond bool) {
	w := (l.vocab + 31) / 32
	row := l.bitmask[int(p.BitmaskRow)*w : int(p.BitmaskRow+1)*w]
	for i := range l.vocab {
		n += int(row[i/32] >> (i % 32) & 1)
	}
	tail := l.vocab % 32
	return n, tail != 0 && row[w-1]>>tail != 0
}

// bitmaskCoverage counts what a slot of a FlagBitmask row reached, under the names of
// requireBitmaskCoverage (family is the kernel's, "topn" for perturbed topn entries).
func (l *launch) bitmaskCoverage(c map[string]int, p rowParams, family string, sampled bool, status int32) {
	if p.Flags&abi.FlagBitmask == 0 {
		return
	}
	n, beyond := l.bitmaskAllowed(p)
	switch {
	case sampled:
		c["bitmask token "+family]++
		if p.Flags&abi.FlagMask != 0 {
			c["bitmask+mask token"]++
		}
		if n == 1 {
			c["bitmask single token"]++
		} else if n <= 10 {
			c["bitmask grammar token"]++
		}
		if beyond {
			c["bitmask token, bits beyond V"]++
		}
	case status == 2 && n == 0:
		c["bitmask allows nothing"]++
	case status == 1:
		for i, x := range l.rowValues(int(p.Row)) {
			if (x != x || math.IsInf(float64(x), 1)) && !l.allows(p, i) {
				c["bitmask status 1 of a masked NaN or +Inf"]++
				break
			}
		}
	}
}

// requireAllowedTokens requires every token of the outcomes that the processors decide
// (status 0 of the sampling kernels, the entries of perturbed topn rows) to be one the
// row's mask and bitmask allow. Score writes ranks, not tokens: its launches are skipped.
func requireAllowedTokens(t *testing.T, ls []*launch, outs []outcome) {
	t.Helper()
	for i, l := range ls {
		if l.kernel == kernelScore {
			continue
		}
		for _, p := range l.params {
			if l.kernel == kernelTopN {
				if p.Flags&abi.FlagPerturbed == 0 {
					continue
				}
				for j := range maxTopN {
					if tok := outs[i].tokens[int(p.Row)*maxTopN+j]; tok >= 0 {
						require.True(t, l.allows(p, int(tok)), "%s: %+v: topn entry %d is token %d, masked", l.name, p, j, tok)
					}
				}
				continue
			}
			d := l.slotDraws()
			for z := range d {
				if o := int(p.Row)*d + z; outs[i].status[o] == 0 {
					tok := int(outs[i].tokens[o])
					if p.Flags&abi.FlagShard != 0 {
						tok -= l.vocabOffset // a shard's tokens are global indices
					}
					require.True(t, tok >= 0 && tok < l.vocab && l.allows(p, tok), "%s: %+v: draw %d is token %d, masked",
						l.name, p, z, tok)
				}
			}
		}
	}
}

// featureFlags picks a row's feature flags: processors (the bitmask with bitmaskFlag),
// records, RECORD and ADVANCE.
func (l *launch) featureFlags(r *rand.Rand, p *rowParams) {
	for _, f := range []abi.Flags{abi.FlagLogprobs, abi.FlagLogprobs, abi.FlagBias, abi.FlagMask, abi.FlagPenalties, abi.FlagRecord, abi.FlagAdvance} {
		if r.IntN(2) == 0 {
			p.Flags |= f
		}
	}
	p.RepetitionPenalty = []float32{1, 1, 1.3, 0.7}[r.IntN(4)]
	p.FrequencyPenalty = []float32{0, 0.5, -0.25}[r.IntN(3)]
	p.PresencePenalty = []float32{0, 0.4}[r.IntN(2)]
	l.bitmaskFlag(r, p)
}

// featureLaunches is the workload of the serving features.
func featureLaunches(r *rand.Rand) []*launch {
	var ls []*launch
	add := func(l *launch, fill func(p *rowParams)) {
		l.fill(r)
		l.withProcessors(r)
		l.logprobs = true
		l.rows(r, fill)
		ls = append(ls, l)
	}
	vocabs := []int{5, 37, 255, 1001}
	// gumbel_argmax: every dtype, split and not, one and several draws.
	for dt := range 3 {
		for _, s := range []int{1, 3} {
			for _, d := range []int{1, 3} {
				v := vocabs[r.IntN(len(vocabs))]
				block, warp := emuShape(r, s)
				l := &launch{kernel: kernelGumbel, dtype: dt, gridX: s, gridZ: d, block: block, warp: warp, vocab: v,
					stride: stride(r, v), slack: r.IntN(16), slots: 4 + r.IntN(2)}
				l.name = fmt.Sprintf("gumbel dtype=%d S=%d D=%d V=%d T=%d warp=%d", dt, s, d, v, block, warp)
				add(l, func(p *rowParams) { l.featureFlags(r, p) })
			}
		}
	}
	// Log-probabilities alone: temperature 1 (raw and processed are one log-sum-exp),
	// other temperatures and greedy, on a larger row split over many blocks.
	for _, s := range []int{1, 16} {
		l := &launch{kernel: kernelGumbel, dtype: dtF32, gridX: s, block: 16, warp: 8, vocab: 4099, stride: 4099, slots: 5}
		l.name = fmt.Sprintf("gumbel logprobs only S=%d V=4099", s)
		temps := []float32{1, 1, 0.7, 0, 1.5}
		add(l, func(p *rowParams) { p.Flags = abi.FlagLogprobs; p.Temperature = temps[r.IntN(len(temps))] })
	}
	// categorical: every dtype, with filters, processors and draws.
	ks := []uint32{0, 0, 1, 3, 20}
	ps := []float32{0, 0, 0.5, 0.9}
	mps := []float32{0, 0, 0.05}
	for dt := range 3 {
		for _, d := range []int{1, 2} {
			v := vocabs[1+r.IntN(len(vocabs)-1)]
			block, warp := emuShape(r, 1)
			l := &launch{kernel: kernelCategorical, dtype: dt, gridX: 1, gridZ: d, block: block, warp: warp, vocab: v,
				stride: stride(r, v), slack: r.IntN(16), slots: 4 + r.IntN(2)}
			l.name = fmt.Sprintf("categorical dtype=%d D=%d V=%d T=%d warp=%d", dt, d, v, block, warp)
			add(l, func(p *rowParams) {
				l.featureFlags(r, p)
				p.TopK, p.TopP, p.MinP = ks[r.IntN(len(ks))], ps[r.IntN(len(ps))], mps[r.IntN(len(mps))]
			})
		}
	}
	// Device routing: each kernel takes only its own rows of a mixed launch.
	for k := range 2 {
		for _, d := range []int{1, 2} {
			l := &launch{kernel: k, dtype: dtBF16, gridX: 2 - k, gridZ: d, block: 32, warp: 16, vocab: 130, stride: 131,
				slots: 6}
			l.name = fmt.Sprintf("routed %s D=%d", kernelNames[k], d)
			add(l, func(p *rowParams) {
				l.featureFlags(r, p)
				p.Flags |= abi.FlagRouted
				if r.IntN(2) == 0 {
					p.Flags |= abi.FlagCategorical
				}
				p.TopP = 0.9
			})
		}
	}
	// topn: plain and perturbed, every dtype, one block or split, every n and bad ones.
	ns := []uint32{1, 3, 20, 20, 7, 0, 21}
	for dt := range 3 {
		for _, s := range []int{1, 3, 16} {
			v := []int{5, 37, 1001}[r.IntN(3)]
			block, warp := emuShape(r, s)
			l := &launch{kernel: kernelTopN, dtype: dt, gridX: s, block: block, warp: warp, vocab: v,
				stride: stride(r, v), slack: r.IntN(16), slots: 4 + r.IntN(2)}
			l.name = fmt.Sprintf("topn dtype=%d S=%d V=%d T=%d warp=%d", dt, s, v, block, warp)
			add(l, func(p *rowParams) {
				p.TopN = ns[r.IntN(len(ns))]
				if r.IntN(2) == 0 {
					p.Flags |= abi.FlagPerturbed
					for _, f := range []abi.Flags{abi.FlagBias, abi.FlagMask, abi.FlagPenalties} {
						if r.IntN(2) == 0 {
							p.Flags |= f
						}
					}
					p.RepetitionPenalty, p.FrequencyPenalty, p.PresencePenalty = 1.2, 0.5, 0.25
				}
				// Perturbed rows' scores see the bitmask; plain rows rank raw logits, which
				// it must leave alone.
				l.bitmaskFlag(r, p)
			})
			l.logprobs = false
		}
	}
	return append(ls, grammarLaunches(r)...)
}

// grammarLaunches are launches whose every row applies a mask row of the bitmask (a
// third of them the mask too), on LLM-shaped logits, as constrained decoding runs:
// gumbel_argmax greedy and sampled, one block and split, one and several draws;
// categorical with the serving filters; topn perturbed, split and over aligned rows.
func grammarLaunches(r *rand.Rand) []*launch {
	var ls []*launch
	for i, c := range []struct{ kernel, s, v int }{
		{kernelGumbel, 1, 4099}, {kernelGumbel, 3, 4099}, {kernelCategorical, 1, 1001}, {kernelTopN, 3, 1001},
		{kernelTopN, 1, 1000},
	} {
		d := 1 + i%2
		if c.kernel == kernelTopN {
			d = 1
		}
		l := &launch{kernel: c.kernel, dtype: i % 3, gridX: c.s, gridZ: d, block: 32, warp: 16, vocab: c.v,
			stride: stride(r, c.v), slack: r.IntN(16), slots: 6, logprobs: c.kernel != kernelTopN}
		l.name = fmt.Sprintf("grammar %s dtype=%d S=%d D=%d V=%d", kernelNames[c.kernel], l.dtype, c.s, d, c.v)
		if c.v%4 == 0 {
			// Aligned rows of several trips per thread: the scans' fast path for rows
			// whose only processors are masks.
			l.stride, l.slack = c.v, 0
		}
		// NaN and +Inf rows: a grammar's mask mostly hides them, and the row must still
		// fail (status 1), which the masks-only path has to see before it writes -Inf.
		l.fillWith(r, []func(*rand.Rand, int) []float32{llmRow, llmRow, strongRow, steppedRow, tiedRow, nanRow, posInfRow})
		l.withProcessors(r)
		l.rows(r, func(p *rowParams) {
			p.Flags = abi.FlagBitmask
			p.BitmaskRow = uint32(r.IntN(l.bitmaskRows()))
			if r.IntN(3) == 0 {
				p.Flags |= abi.FlagMask
			}
			switch c.kernel {
			case kernelTopN:
				p.Flags |= abi.FlagPerturbed
				p.TopN = 20
			case kernelCategorical:
				p.Flags |= abi.FlagLogprobs
				p.TopK, p.TopP = []uint32{0, 20, 50}[r.IntN(3)], []float32{0, 0.9}[r.IntN(2)]
			default:
				p.Flags |= abi.FlagLogprobs
			}
		})
		ls = append(ls, l)
	}
	return ls
}

// featureCoverage counts what the workload exercised, from outcomes that match the Go edition.
func featureCoverage(ls []*launch, got []outcome) map[string]int {
	c := map[string]int{}
	for i, l := range ls {
		o := got[i]
		if l.kernel == kernelTopN {
			for _, p := range l.params {
				for j := range maxTopN {
					slot := int(p.Row)*maxTopN + j
					v := math.Float32frombits(uint32(o.status[slot]))
					perturbed := p.Flags&abi.FlagPerturbed != 0
					switch {
					case perturbed && o.tokens[slot] >= 0:
						l.bitmaskCoverage(c, p, "topn", true, 0)
					case perturbed && j == 0 && math.IsInf(float64(v), -1):
						l.bitmaskCoverage(c, p, "topn", false, 2)
					case p.Flags&abi.FlagBitmask != 0 && o.tokens[slot] >= 0 && !l.allows(p, int(o.tokens[slot])):
						c["topn plain token the bitmask masks"]++
					}
					switch {
					case o.tokens[slot] >= 0 && perturbed && p.Temperature != 0:
						c["topn perturbed token"]++
					case o.tokens[slot] >= 0:
						c["topn token"]++
					case o.status[slot] != untouched && v != v:
						c["topn NaN slot"]++
					case math.IsInf(float64(v), -1):
						c["topn empty slot"]++
					}
				}
			}
			continue
		}
		d := l.draws()
		params := l.paramBytes()
		for y, p := range l.params {
			routedAway := p.Flags&abi.FlagRouted != 0 && (p.Flags&abi.FlagCategorical != 0) != (l.kernel == kernelCategorical)
			for z := range d {
				slot := int(p.Row)*d + z
				if !routedAway {
					l.bitmaskCoverage(c, p, kernelNames[l.kernel], o.status[slot] == 0, o.status[slot])
				}
				switch {
				case routedAway:
					if o.status[slot] == untouched {
						c["routed row left alone"]++
					}
				case o.status[slot] == 0 && p.Flags&abi.FlagLogprobs != 0:
					c[fmt.Sprintf("%s record", kernelNames[l.kernel])]++
					if p.Flags&abi.FlagsProcessors != 0 {
						c["record of a processed row"]++
					}
					if d > 1 {
						c["record of a later draw"]++
					}
				case o.status[slot] > 0 && p.Flags&abi.FlagLogprobs != 0:
					c["NaN record"]++
				}
			}
			before := binary.LittleEndian.Uint64(params[y*paramsBytes+16:])
			after := binary.LittleEndian.Uint64(o.params[y*paramsBytes+16:])
			if after != before {
				c["step advanced"]++
			}
		}
		for k := range o.counts {
			if o.counts[k] != l.counts[k] {
				c["count recorded"]++
			}
		}
	}
	return c
}

// requireBitmaskCoverage requires the bitmask coverage of bitmaskCoverage: tokens of
// each of the families, tokens of rows with the mask too, of rows whose bitmask allows
// one token or a grammar's few, of rows that set bits beyond V, rows whose bitmask
// allows nothing (status 2), and (nonFinite: for workloads with NaN and +Inf rows)
// status 1 from a NaN or +Inf logit the bitmask masks.
func requireBitmaskCoverage(t *testing.T, cov map[string]int, nonFinite bool, families ...string) {
	t.Helper()
	keys := []string{"bitmask+mask token", "bitmask single token", "bitmask grammar token",
		"bitmask token, bits beyond V", "bitmask allows nothing"}
	if nonFinite {
		keys = append(keys, "bitmask status 1 of a masked NaN or +Inf")
	}
	for _, f := range families {
		keys = append(keys, "bitmask token "+f)
	}
	for _, k := range keys {
		require.Positive(t, cov[k], "the workload never reached %q", k)
	}
}

// TestCUDAFeaturesMatchGoEdition runs the features workload and requires the Go edition's
// outputs.
func TestCUDAFeaturesMatchGoEdition(t *testing.T) {
	ls := featureLaunches(rand.New(rand.NewPCG(20261130, 2)))
	got := decodeResults(t, runDriver(t, encodeJob(t, ls)), ls)
	seen, kinds := matchGo(t, ls, got)
	cov := featureCoverage(ls, got)
	requireBitmaskCoverage(t, cov, true, abi.GumbelArgmax, abi.Categorical, "topn")
	require.Positive(t, cov["topn plain token the bitmask masks"], "no plain topn row ranked a token its bitmask masks")
	t.Logf("slots by status %v; sampled by path %v; coverage %v", seen, kinds, cov)
	for s, n := range seen {
		require.Positive(t, n, "no slot ended with status %d", s)
	}
	for _, k := range []string{"gumbel_argmax record", "categorical record", "record of a processed row",
		"record of a later draw", "NaN record", "routed row left alone", "step advanced", "count recorded",
		"topn token", "topn perturbed token", "topn NaN slot", "topn empty slot"} {
		require.Positive(t, cov[k], "the workload never reached %q", k)
	}
	for _, k := range []string{"greedy", "gumbel split", "gumbel", "categorical"} {
		require.Positive(t, kinds[k], "no slot sampled a token on the %s path", k)
	}
}

// lateRow is a row whose largest early logit sets a high best after the first trips,
// followed by a late special at a random position: a larger value (which wins where it
// is allowed), NaN or +Inf (observed before the mask, wherever they are), or -Inf.
func lateRow(r *rand.Rand, v int) []float32 {
	row := background(r, v)
	if v < 8 {
		return row
	}
	row[r.IntN(v/8)] = 30
	specials := []float32{35, 35, 35, 25, 25, float32(math.Inf(-1)), float32(math.NaN()), float32(math.Inf(1))}
	for range 1 + r.IntN(2) {
		row[v/2+r.IntN(v-v/2)] = specials[r.IntN(len(specials))]
	}
	return row
}

// TestCUDAMasksOnlyScansMatchGoEdition runs greedy and Gumbel rows whose only processors
// are masks (a token mask, a grammar's bitmask, or both; no log-probabilities) over many
// trips per thread, with late larger values, NaN and +Inf in allowed and banned positions
// after a high early best, and requires the Go edition's tokens and statuses: a scan
// that passed over groups below its best without observing them would miss the NaN.
func TestCUDAMasksOnlyScansMatchGoEdition(t *testing.T) {
	r := rand.New(rand.NewPCG(20261202, 23))
	var ls []*launch
	for _, s := range []int{1, 3} {
		for _, v := range []int{1001, 2003} {
			l := &launch{kernel: kernelGumbel, dtype: dtF32, gridX: s, block: 16, warp: 8, vocab: v,
				stride: v, slots: 16}
			l.name = fmt.Sprintf("masks only S=%d V=%d", s, v)
			l.withProcessors(r)
			// Dense token masks on most rows, so that threads hold an allowed best early.
			words := (v + 31) / 32
			for slot := range l.slots {
				if slot%4 != 3 {
					for w := range words {
						l.mask[slot*words+w] = ^(r.Uint32() & r.Uint32())
					}
				}
			}
			l.rows(r, func(p *rowParams) {
				p.Temperature = []float32{0, 0, 0.7, 1}[r.IntN(4)]
				p.Flags = []abi.Flags{abi.FlagMask, 0, abi.FlagMask}[r.IntN(3)]
				l.bitmaskFlag(r, p)
			})
			l.fillRows(r, lateRow)
			ls = append(ls, l)
		}
	}
	got := decodeResults(t, runDriver(t, encodeJob(t, ls)), ls)
	seen, _ := matchGo(t, ls, got)
	t.Logf("rows by status (ok, NaN/+Inf, no finite, bad params): %v", seen)
	require.Positive(t, seen[0], "no row drew a token")
	require.Positive(t, seen[1], "no row saw NaN or +Inf")
}
