package gokernel

import (
	"encoding/binary"
	"math"
	"math/bits"
	"sync/atomic"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/gumbel-go/gumbel/philox"
	"github.com/gumbel-go/gumbel/runtime"
)

// gumbelBounds[bits.Len32(w)] bounds philox.Gumbel(w, tail) from above for every tail.
// An element's u is at least w·2^-32 ≥ 2^(L-33) for a word of bit length L ≥ 1, and
// E = -log1p(-u) ≥ u, so g = -log E ≤ (33-L)·ln 2; the 0.01 margin covers float32
// rounding (about 1e-6 here) many times over. A word of zero keeps the global bound.
var gumbelBounds = func() (t [33]float32) {
	t[0] = abi.MaxGumbel
	for l := 1; l <= 32; l++ {
		t[l] = min(float32(float64(33-l)*math.Ln2+0.01), abi.MaxGumbel)
	}
	return t
}()

// gumbelBound bounds the Gumbel noise of main word w from above, whatever its tail word.
// Skipping the noise of an element whose fl(x·invT + gumbelBound(w)) is below the best
// score is exact (rounding is monotonic), and after the first few hundred elements of a
// row it skips nearly every logarithm, leaving Philox as the main cost.
func gumbelBound(w uint32) float32 { return gumbelBounds[bits.Len32(w)] }

// gumbelScan is one block's running reduction over its chunk.
type gumbelScan struct {
	best      uint64  // packed (score, index); 0 when empty
	bestScore float32 // the score in best; -Inf while empty
	seen      abi.Seen
	invT      float32
	key       [2]uint32
	step      uint64
	skip      bool
	noised    int // elements whose noise was computed (for the tests of the skip)
}

// gumbelArgmax is one block of gumbel_argmax: it scans its chunk of the row for the
// largest score (greedy or Gumbel) and the log-sum-exps of the record, then takes part
// in the row's reduction.
func gumbelArgmax(b *runtime.BlockContext, d abi.DType, skip bool) {
	l, ok, bad := setup(b, d, abi.GumbelArgmax)
	if !ok {
		return
	}
	if bad {
		if l.x == 0 {
			l.fail()
		}
		return
	}

	start, end := l.chunk()

	sc := gumbelScan{
		bestScore: negInf,
		key:       philox.Key(l.p.Seed),
		step:      stepPlus(&l.p, l.z),
		skip:      skip,
	}
	greedy := l.p.Temperature == 0
	if !greedy {
		sc.invT = float32(1 / l.p.Temperature)
	}
	logprobs := l.logprobs != nil
	// Without processors, at temperature 0 or 1 the processed values are the raw
	// logits themselves: one log-sum-exp serves for both.
	sameSets := !l.proc.active && (greedy || sc.invT == 1)
	raw, processed := emptyLSE, emptyLSE
	var buf, proc [convertChunk]float32
	for i := start; i < end; i += convertChunk {
		xs := l.logits.load(&buf, i, min(convertChunk, end-i))
		if logprobs {
			raw.add(xs)
		}
		if greedy && !logprobs && l.proc.masksOnly() {
			// A grammar's greedy row: the mask and the arg-max in one pass.
			sc.scanGreedyMasked(xs, i, l.offset, &l.proc)
			continue
		}
		if l.proc.active {
			sc.seen |= l.proc.processGroup(xs, i, proc[:])
			xs = proc[:len(xs)]
		}
		// The scans index, noise and pack by the global index (a shard's offset added).
		if greedy {
			sc.scanGreedy(xs, l.offset+i)
		} else {
			sc.scanGumbel(xs, l.offset+i)
		}
		if logprobs && !sameSets {
			// Beside the arg-max, over the chunk just loaded: no second pass over
			// the row.
			if greedy {
				processed.add(xs)
			} else {
				processed.addScaled(xs, sc.invT)
			}
		}
	}
	if sameSets {
		processed = raw
	}
	l.argmaxEnd(sc.best, sc.seen, raw, processed)
}

// scanGreedy scans xs (global index base) for the largest logit, lowest index first.
// Groups of four below the best so far change nothing, and where scanBelow runs in
// vector code it passes them: on an LLM row, all but a few hundred elements. A NaN or
// +Inf stops it, so the observations are the element-by-element loop's; a skipped
// finite element lies below a finite best, which reports the row's SeenFinite.
func (sc *gumbelScan) scanGreedy(xs []float32, base int) {
	bestX, bestI := sc.bestScore, -1
	for j := 0; j < len(xs); {
		step := len(xs) // without vector code: one plain loop
		if scanBelowVector {
			if n, _ := scanBelow(xs[j:], bestX); n > 0 {
				j += n
				continue
			}
			step = 4 // the group that stopped it, then the skip again
		}
		end := min(j+step, len(xs))
		var bad bool
		bestX, bestI, bad = greedyRun(xs[j:end], base+j, bestX, bestI)
		if bad {
			sc.seen |= abi.SeenNonFinite
		}
		j = end
	}
	if bestI >= 0 {
		sc.seen |= abi.SeenFinite
		sc.best, sc.bestScore = pack(bestX, bestI), bestX
	}
}

// greedyRun is the greedy loop over xs (row index base): the largest finite element
// above bestX, lowest index first (bestX and bestI stay when there is none), and whether
// a NaN or +Inf was seen.
func greedyRun(xs []float32, base int, bestX float32, bestI int) (float32, int, bool) {
	bad := false
	for k, x := range xs {
		if x > bestX {
			if x > math.MaxFloat32 {
				bad = true
				continue
			}
			bestX, bestI = x, base+k
		} else if x != x {
			bad = true
		}
	}
	return bestX, bestI, bad
}

// scanGreedyMasked is processGroup then scanGreedy for a row whose only processors are
// masks, without writing the masked values out; base is the row index of xs[0], offset
// what makes it global. At each word boundary maskSkip (vector code, where the CPU has
// it) passes the whole words that change nothing, as scanBelow does for scanGreedy: on
// an LLM row, all but a handful. The word that stops it, and the elements outside whole
// words, take the loop below. A skipped allowed element is at most a best that is
// finite or -Inf, so the observations stay the loop's: a finite one lies below a finite
// best, which reports the row's SeenFinite.
func (sc *gumbelScan) scanGreedyMasked(xs []float32, base, offset int, p *processor) {
	bestX, bestI := sc.bestScore, -1
	var odd, bad uint32
	for j := 0; j < len(xs); {
		if useMaskAVX2 && (base+j)&31 == 0 {
			if j += p.maskSkip(xs[j:], (base+j)>>5, bestX); j == len(xs) {
				break
			}
		}
		i := base + j
		w := p.maskWord(i>>5) >> (i & 31)
		n := min(len(xs)-j, 32-i&31)
		seg := xs[j : j+n]
		var segOdd uint32 // bit 31: a masked NaN or infinity, -Inf included
		switch full := ^uint32(0) >> uint(32-n); w & full {
		case full: // all allowed: most words of an open grammar state
			var nonFinite bool
			if bestX, bestI, nonFinite = greedyRun(seg, base+j, bestX, bestI); nonFinite {
				bad = 1
			}
			j += n
			continue
		case 0: // none allowed: most words of a closed one; only a NaN or +Inf shows
			for _, x := range seg {
				segOdd |= math.Float32bits(x)&0x7FFFFFFF + 0x00800000
			}
		default:
			for k, x := range seg {
				keep := -(w >> uint(k) & 1) // all ones where allowed
				b := math.Float32bits(x)
				segOdd |= b&^keep&0x7FFFFFFF + 0x00800000
				if y := math.Float32frombits(b&keep | negInfBits&^keep); y > bestX {
					if y > math.MaxFloat32 {
						bad = 1
						continue
					}
					bestX, bestI = y, base+j+k
				} else if y != y {
					bad = 1
				}
			}
		}
		if segOdd>>31 != 0 { // rare: tell a masked -Inf from a masked NaN or +Inf
			for k, x := range seg {
				if w>>uint(k)&1 == 0 {
					odd |= nanOrPosInf(math.Float32bits(x))
				}
			}
		}
		j += n
	}
	if bad != 0 || odd != 0 {
		sc.seen |= abi.SeenNonFinite
	}
	if bestI >= 0 {
		sc.seen |= abi.SeenFinite
		sc.best, sc.bestScore = pack(bestX, offset+bestI), bestX
	}
}

// scanGumbel scans xs (at most convertChunk elements from global index base, a multiple
// of four) for the largest Gumbel score: gumbelCandidates lists the elements that might
// win, which are then noised in index order.
func (sc *gumbelScan) scanGumbel(xs []float32, base int) {
	var words [convertChunk]uint32
	var cands [convertChunk]uint16
	xs = xs[:min(len(xs), convertChunk)]

	// The running state lives in locals: the loop is hot.
	best, bestScore, invT := sc.best, sc.bestScore, sc.invT
	// limit is the score an element must be able to reach to be worth its noise:
	// the best so far, or -Inf (nothing skipped) when the skip is off.
	limit := negInf
	if sc.skip {
		limit = bestScore
	}
	nc, seen := gumbelCandidates(xs, base, sc.step, sc.key, invT, limit, &words, &cands)
	sc.seen |= seen

	for _, c := range cands[:nc] {
		i := int(c)
		w, s := words[i], float32(xs[i]*invT)
		if float32(s+gumbelBound(w)) < limit {
			continue
		}
		var tail uint32
		if w < abi.TailThreshold {
			tails := philox.Block(philox.Counter(uint32(base+i), sc.step, philox.PurposeGumbelTail), sc.key)
			tail = tails[i&3]
		}
		sc.noised++
		score := philox.Score(xs[i], invT, philox.Gumbel(w, tail))
		if p := pack(score, base+i); p > best {
			best, bestScore = p, score
			if sc.skip {
				limit = score
			}
		}
	}
	sc.best, sc.bestScore = best, bestScore
}

// gumbelCandidates lists in cands, in index order, the elements of xs (at most
// convertChunk from global index base, a multiple of four) whose Gumbel score
// fl(fl(x·invT) + g) might reach limit, with the PurposeGumbel words of their groups in
// words, and returns how many it listed and what it observed. Where the CPU allows,
// gumbelFilter takes the chunk's whole groups of 32 in vector code (testing the word's
// bound too); the rest goes through two passes in Go: scale the logits, listing the
// elements that might reach limit with the largest noise and marking their groups of
// four; draw the Philox words of those groups only (keeping the Philox calls in a loop
// of their own roughly halves the cost per element). The caller tests each listed
// element against its word's bound (gumbelBound) before it draws the noise.
func gumbelCandidates(xs []float32, base int, step uint64, key [2]uint32, invT, limit float32,
	words *[convertChunk]uint32, cands *[convertChunk]uint16) (int, abi.Seen) {
	var need [convertChunk / 4]uint8 // per group of four, the elements that might reach limit
	var seen abi.Seen
	fa := filterArgs{invT: invT, limit: limit, key: key,
		ctr: philox.Counter(uint32(base), step, philox.PurposeGumbel)}
	n0, nc, vecFinite, vecBad := gumbelFilter(xs, &fa, words, cands)

	// No branch depends on the values: a masked row holds -Inf where a grammar put it,
	// which no predictor learns. fl(s + MaxGumbel) + x·0 is NaN for a NaN or infinite
	// x, so such an element is never noised: -Inf scores -Inf whatever its noise (an
	// empty key loses to any other, as a -Inf one does), and NaN or +Inf fails the row.
	var finite, bad uint32
	for i := n0; i < len(xs); i++ {
		x := xs[i]
		b := math.Float32bits(x)
		finite |= b&0x7FFFFFFF - 0x7F800000 // bit 31 set by a finite x
		bad |= nanOrPosInf(b)
		s := float32(x * invT)
		var bit uint8
		if float32(float32(s+abi.MaxGumbel)+x*0) >= limit {
			bit = 1
		}
		need[i>>2] |= bit << (i & 3)
		cands[nc] = uint16(i)
		nc += int(bit)
	}
	if finite>>31 != 0 || vecFinite {
		seen |= abi.SeenFinite
	}
	if bad != 0 || vecBad {
		seen |= abi.SeenNonFinite
	}

	// Eight or four blocks at a time where any of them is needed (nearly always, since
	// MaxGumbel is a loose bound): Block8 and Block4 run their chains side by side.
	groups := (len(xs) + 3) / 4
	g := n0 / 4
	for ; g+8 <= groups; g += 8 {
		if need[g]|need[g+1]|need[g+2]|need[g+3]|need[g+4]|need[g+5]|need[g+6]|need[g+7] != 0 {
			c := philox.Counter(uint32(base+4*g), step, philox.PurposeGumbel)
			w := philox.Block8(c[0], c[1], c[2], c[3], key)
			copy(words[4*g:4*g+32], w[:])
		}
	}
	for ; g+4 <= groups; g += 4 {
		if need[g]|need[g+1]|need[g+2]|need[g+3] != 0 {
			c := philox.Counter(uint32(base+4*g), step, philox.PurposeGumbel)
			w := philox.Block4(c[0], c[1], c[2], c[3], key)
			copy(words[4*g:4*g+16], w[:])
		}
	}
	for ; g < groups; g++ {
		if need[g] != 0 {
			w := philox.Block(philox.Counter(uint32(base+4*g), step, philox.PurposeGumbel), key)
			copy(words[4*g:4*g+4], w[:])
		}
	}
	return nc, seen
}

// argmaxEnd publishes this block's partials; the last block of the draw to arrive
// reduces all of them, writes the token, status and record, and leaves the draw's
// counters at zero.
func (l *launchRow) argmaxEnd(best uint64, seen abi.Seen, raw, processed lse) {
	if s := l.shape.Split; s > 1 {
		sh, y, z := l.shape, l.y, l.z
		word := func(w int) []byte { return l.partials[8*w:] }
		binary.LittleEndian.PutUint64(word(sh.KeyWord(y, z, l.x)), best)
		if l.logprobs != nil {
			binary.LittleEndian.PutUint64(word(sh.PairWord(y, z, l.x, 0)), raw.pack())
			binary.LittleEndian.PutUint64(word(sh.PairWord(y, z, l.x, 1)), processed.pack())
		}
		arrivals, seenWord := &l.counters[sh.DrawCounter(y, z)], &l.counters[sh.DrawCounter(y, z)+1]
		atomic.OrUint32(seenWord, uint32(seen))
		if atomic.AddUint32(arrivals, 1) != uint32(s) {
			return
		}
		// Every other block's partials and observations happen before its increment,
		// which happens before ours: they are all visible now.
		raw, processed = emptyLSE, emptyLSE
		for x := range s {
			best = max(best, binary.LittleEndian.Uint64(word(sh.KeyWord(y, z, x))))
			if l.logprobs != nil {
				raw.merge(lseUnpack(binary.LittleEndian.Uint64(word(sh.PairWord(y, z, x, 0)))))
				processed.merge(lseUnpack(binary.LittleEndian.Uint64(word(sh.PairWord(y, z, x, 1)))))
			}
		}
		seen = abi.Seen(atomic.LoadUint32(seenWord))
		atomic.StoreUint32(seenWord, 0)
		atomic.StoreUint32(arrivals, 0)
	}
	if st := seenStatus(seen); st != abi.StatusOK {
		l.finish(-1, st)
		l.writeShardKey(0, st)
		l.writeRecord(nanRecord)
	} else {
		tok := int(^uint32(best)) // global: a shard reports its winner's global index
		l.finish(int32(tok), abi.StatusOK)
		if l.logprobs != nil {
			l.writeRecord(l.argmaxRecord(tok, raw, processed))
		}
		st := abi.StatusOK
		if inexact(best) {
			// A score this large may have lost the noise to float32 rounding:
			// gumbel_exact finishes the draw (ABI.md, "Exact scores"). The winner's key
			// alone decides, so greedy rows of such logits take that path too.
			st = abi.StatusExact
			l.finish(int32(tok), st)
		}
		l.writeShardKey(best, st)
	}
	l.rowDone()
}

// argmaxRecord is the log-probability record of token tok on the Gumbel and greedy
// paths, given the raw and processed log-normalisers.
func (l *launchRow) argmaxRecord(tok int, raw, processed lse) [abi.RecordWords]float32 {
	x := l.logits.at(tok)
	v := l.proc.processed(x, tok)
	if l.p.Temperature != 0 {
		v = float32(v * float32(1/l.p.Temperature))
	}
	return recordOf(x, v, raw, processed)
}
