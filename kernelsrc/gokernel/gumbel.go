package gokernel

import (
	"encoding/binary"
	"math"
	"math/bits"
	"sync/atomic"

	"github.com/gumbel-go/gumbel/philox"
	"github.com/gumbel-go/gumbel/runtime"
)

var negInf = float32(math.Inf(-1))

// wordBound[bits.Len32(w)] bounds philox.Gumbel(w, tail) from above for every tail.
// An element's u is at least w·2^-32 ≥ 2^(L-33) for a word of bit length L ≥ 1, and
// E = -log1p(-u) ≥ u, so g = -log E ≤ (33-L)·ln 2; the 0.01 margin covers float32
// rounding (about 1e-6 here) many times over. A word of zero keeps the global bound.
// Skipping the noise of an element whose fl(x·invT + wordBound) is below the best score
// is exact (rounding is monotonic), and after the first few hundred elements of a row
// it skips nearly every logarithm, leaving Philox as the main cost.
var wordBound = func() (t [33]float32) {
	t[0] = philox.MaxGumbel
	for l := 1; l <= 32; l++ {
		t[l] = min(float32(float64(33-l)*math.Ln2+0.01), philox.MaxGumbel)
	}
	return t
}()

// gumbelKernel returns gumbel_argmax for one dtype. skip turns the noise-skipping
// shortcut on; the results are bit-identical either way (the tests prove it), so only
// the tests turn it off.
func gumbelKernel(d dtype, skip bool) runtime.GoKernel {
	return func(b *runtime.BlockContext) { gumbelBlock(b, d, skip) }
}

// gumbelScan is one block's running reduction over its chunk.
type gumbelScan struct {
	best      uint64  // packed (score, index); 0 when empty
	bestScore float32 // the score in best; -Inf while empty
	flags     uint32
	invT      float32
	key       [2]uint32
	step      uint64
	skip      bool
	noised    int // elements whose noise was computed (for the tests of the skip)
}

func gumbelBlock(b *runtime.BlockContext, d dtype, skip bool) {
	l, ok, bad := setup(b, d, kindGumbel)
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
		key:       philox.Key(l.p.seed),
		step:      l.p.step + uint64(l.z), // draw z samples at step + z
		skip:      skip,
	}
	greedy := l.p.temperature == 0
	if !greedy {
		sc.invT = float32(1 / l.p.temperature)
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
		if l.proc.active {
			sc.flags |= l.proc.apply(xs, i, proc[:])
			xs = proc[:len(xs)]
		}
		if greedy {
			sc.greedy(xs, i)
		} else {
			sc.noisy(xs, i)
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
	l.reduce(sc.best, sc.flags, raw, processed)
}

// greedy scans xs (global index base) for the largest logit, lowest index first.
func (sc *gumbelScan) greedy(xs []float32, base int) {
	bestX, bestI := sc.bestScore, -1
	for j, x := range xs {
		if x > bestX {
			if x > math.MaxFloat32 {
				sc.flags |= flagNonFinite
				continue
			}
			bestX, bestI = x, base+j
		} else if x != x {
			sc.flags |= flagNonFinite
		}
	}
	if bestI >= 0 {
		sc.flags |= flagFinite
		sc.best, sc.bestScore = pack(bestX, bestI), bestX
	}
}

// noisy scans xs (at most convertChunk elements from global index base, a multiple of
// four) for the largest Gumbel score, in three passes over the chunk: scale the logits
// and find the groups of four that might hold a winner; draw the Philox words of those
// groups only; then compute the noise of the elements that can still win. Keeping the
// Philox calls in a loop of their own roughly halves the cost per element.
func (sc *gumbelScan) noisy(xs []float32, base int) {
	var scaled [convertChunk]float32
	var words [convertChunk]uint32
	var need [convertChunk / 4]uint8 // per group of four, the elements that might win
	xs = xs[:min(len(xs), convertChunk)]

	// The running state lives in locals: the loops are hot.
	best, bestScore, flags, invT := sc.best, sc.bestScore, sc.flags, sc.invT
	// limit is the score an element must be able to reach to be worth its noise:
	// the best so far, or -Inf (nothing skipped) when the skip is off.
	limit := negInf
	if sc.skip {
		limit = bestScore
	}

	for i, x := range xs {
		if x-x != 0 { // NaN or ±Inf
			if x == negInf {
				// Scores -Inf without noise. The packed comparison keeps the
				// lowest index among equal scores whatever the order we meet
				// them in, so recording it now is safe.
				if p := pack(negInf, base+i); p > best {
					best = p // only an empty or -Inf best is beaten: bestScore stays -Inf
				}
			} else {
				flags |= flagNonFinite
			}
			continue
		}
		flags |= flagFinite
		s := float32(x * invT)
		scaled[i] = s
		if float32(s+philox.MaxGumbel) >= limit {
			need[i>>2] |= 1 << (i & 3)
		}
	}

	for g := 0; 4*g < len(xs); g++ {
		if need[g] != 0 {
			w := philox.Block(philox.Counter(uint32(base+4*g), sc.step, philox.PurposeGumbel), sc.key)
			copy(words[4*g:4*g+4], w[:])
		}
	}

	for i := range xs {
		if need[i>>2]&(1<<(i&3)) == 0 {
			continue
		}
		w, s := words[i], scaled[i]
		if float32(s+wordBound[bits.Len32(w)]) < limit {
			continue
		}
		var tail uint32
		if w < philox.TailThreshold {
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
	sc.best, sc.bestScore, sc.flags = best, bestScore, flags
}

// reduce publishes this block's partials; the last block of the draw to arrive reduces
// all of them, writes the token, status and record, and leaves the draw's counters at
// zero.
func (l *launchRow) reduce(best uint64, flags uint32, raw, processed lse) {
	if l.s > 1 {
		c := l.z*l.n + l.y // the draw's counter pair and partials row
		p := c*l.s + l.x
		lpBase := l.n * l.d * l.s
		binary.LittleEndian.PutUint64(l.partials[8*p:], best)
		if l.logprobs != nil {
			binary.LittleEndian.PutUint64(l.partials[8*(lpBase+2*p):], raw.packed())
			binary.LittleEndian.PutUint64(l.partials[8*(lpBase+2*p+1):], processed.packed())
		}
		atomic.OrUint32(&l.counters[2*c+1], flags)
		if atomic.AddUint32(&l.counters[2*c], 1) != uint32(l.s) {
			return
		}
		// Every other block's partials and flags happen before its increment, which
		// happens before ours: they are all visible now.
		raw, processed = emptyLSE, emptyLSE
		for x := c * l.s; x < (c+1)*l.s; x++ {
			best = max(best, binary.LittleEndian.Uint64(l.partials[8*x:]))
			if l.logprobs != nil {
				raw.merge(unpackLSE(binary.LittleEndian.Uint64(l.partials[8*(lpBase+2*x):])))
				processed.merge(unpackLSE(binary.LittleEndian.Uint64(l.partials[8*(lpBase+2*x+1):])))
			}
		}
		flags = atomic.LoadUint32(&l.counters[2*c+1])
		atomic.StoreUint32(&l.counters[2*c+1], 0)
		atomic.StoreUint32(&l.counters[2*c], 0)
	}
	switch {
	case flags&flagNonFinite != 0:
		l.finish(-1, StatusNonFinite)
		l.writeRecord(nanRecord)
	case flags&flagFinite == 0:
		l.finish(-1, StatusNoFinite)
		l.writeRecord(nanRecord)
	default:
		tok := int(^uint32(best))
		l.finish(int32(tok), StatusOK)
		if l.logprobs != nil {
			l.writeRecord(l.argmaxRecord(tok, raw, processed))
		}
	}
	l.complete()
}

// argmaxRecord is the log-probability record of token tok on the Gumbel and greedy
// paths, given the raw and processed log-normalisers.
func (l *launchRow) argmaxRecord(tok int, raw, processed lse) [4]float32 {
	x := l.logits.at(tok)
	v := l.proc.one(x, tok)
	if l.p.temperature != 0 {
		v = float32(v * float32(1/l.p.temperature))
	}
	return recordOf(x, v, raw, processed)
}
