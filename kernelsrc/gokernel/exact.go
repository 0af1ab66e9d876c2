package gokernel

import (
	"encoding/binary"
	"math"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/gumbel-go/gumbel/philox"
	"github.com/gumbel-go/gumbel/runtime"
)

// exactValue is an element's canonical Gumbel-max value (ABI.md, "Exact scores"): its
// float32 score s while |fl(x'·invT)| < ExactScale, otherwise the exact x'·invT + g,
// which the comparison below evaluates from x' and g.
type exactValue struct {
	x, g, s float32 // processed logit, noise, float32 score fl(fl(x'·invT) + g)
	exact   bool
	idx     int // global index
}

func exactValueOf(x, invT, g float32, idx int) exactValue {
	y := float32(x * invT)
	return exactValue{x: x, g: g, s: float32(y + g), exact: !(abs32(y) < abi.ExactScale), idx: idx}
}

// above reports whether v's value exceeds w's, ties to the lower index.
func (v exactValue) above(w exactValue, invT float32) bool {
	if d := exactSign(v, w, invT); d != 0 {
		return d > 0
	}
	return v.idx < w.idx
}

// exactSign is the sign of value(a) - value(b), from float32 operations whose results
// every edition gets bit for bit: differences of values within a factor 2 of each other
// are exact (Sterbenz), the product's rounding error is exact (twoProd), and a value
// pair that is not within a factor 2 lies thousands apart, further than any noise.
func exactSign(a, b exactValue, invT float32) int {
	switch {
	case !a.exact && !b.exact:
		return cmp32(a.s, b.s)
	case a.exact && b.exact:
		if !within2(a.x, b.x) {
			return cmp32(a.x, b.x)
		}
		p, e := twoProd(float32(a.x-b.x), invT)
		if abs32(p) > math.MaxFloat32 {
			return cmp32(a.x, b.x) // the logits' difference alone overflows: far apart
		}
		return signSum(p, e, a.g, b.g)
	case a.exact:
		return -exactSign(b, a, invT)
	}
	// a's float32 score against b's exact value: s_a - (p + e) - g_b.
	p, e := twoProd(b.x, invT)
	if !within2(a.s, p) {
		return cmp32(a.s, p)
	}
	return signSum(float32(a.s-p), -e, 0, b.g)
}

// signSum is the sign of p + e + ga - gb, evaluated as a float-float sum.
func signSum(p, e, ga, gb float32) int {
	dg, dgErr := twoSum(ga, -gb)
	t, tErr := twoSum(p, dg)
	r := float32(float32(tErr+e) + dgErr)
	return cmp32(float32(t+r), 0)
}

// twoProd returns p = fl(a·b) and its exact rounding error e (a·b = p + e), as a fused
// multiply-add computes it; the product of two float32 values is exact in float64.
func twoProd(a, b float32) (p, e float32) {
	ab := float64(a) * float64(b)
	p = float32(ab)
	return p, float32(ab - float64(p))
}

// twoSum returns s = fl(a + b) and its exact rounding error (Knuth's TwoSum).
func twoSum(a, b float32) (s, e float32) {
	s = float32(a + b)
	bb := float32(s - a)
	e = float32(float32(a-float32(s-bb)) + float32(b-bb))
	return s, e
}

// within2 reports finite, nonzero a and b of one sign within a factor 2 of each other:
// then a - b is exact.
func within2(a, b float32) bool {
	if a == 0 || b == 0 || (a > 0) != (b > 0) || abs32(a) > math.MaxFloat32 || abs32(b) > math.MaxFloat32 {
		return false
	}
	return abs32(a) <= float32(2*abs32(b)) && abs32(b) <= float32(2*abs32(a))
}

func cmp32(a, b float32) int {
	switch {
	case a > b:
		return 1
	case a < b:
		return -1
	}
	return 0
}

// inexact reports a packed key whose score reaches ExactLimit in magnitude, where a
// float32 score may no longer hold the noise: the key's draw needs the exact comparison.
func inexact(key uint64) bool { return abi.Inexact(key) }

func abs32(x float32) float32 { return math.Float32frombits(math.Float32bits(x) &^ (1 << 31)) }

// gumbelExact is block (0, y, 0) of gumbel_exact: it finishes the draws of launch row y
// that gumbel_argmax left with StatusExact, taking each Gumbel winner by the exact
// comparison (ABI.md, "Exact scores") and its record from log-sum-exps of its own (a
// greedy draw's arg-max stands), then counts the row's tokens for RECORD, which
// gumbel_argmax left to it. One block per row, so that every draw reads the counts from
// before the launch. Other blocks and shard rows return at once.
func gumbelExact(b *runtime.BlockContext, d abi.DType) {
	l, ok, bad := setup(b, d, abi.GumbelExact)
	if !ok || bad || l.x != 0 || l.z != 0 || l.p.Flags&abi.FlagShard != 0 {
		return
	}
	draws := l.shape.Draws
	first := uint64(l.p.Row) * uint64(draws)
	if uint64(len(l.status))/4 < first+uint64(draws) {
		return
	}
	pending := false
	for z := range draws {
		l.z, l.slot = z, first+uint64(z)
		if abi.Status(binary.LittleEndian.Uint32(l.status[4*l.slot:])) != abi.StatusExact {
			continue
		}
		pending = true
		if l.p.Temperature == 0 {
			// The arg-max of the logits is exact already: the token and record stand.
			l.finish(int32(binary.LittleEndian.Uint32(l.tokens[4*l.slot:])), abi.StatusOK)
			continue
		}
		l.exactDraw()
	}
	if !pending || l.counts == nil {
		return
	}
	for o := first; o < first+uint64(draws); o++ {
		if abi.Status(binary.LittleEndian.Uint32(l.status[4*o:])) != abi.StatusOK {
			continue
		}
		if tok := int32(binary.LittleEndian.Uint32(l.tokens[4*o:])); tok >= 0 && int(tok) < l.vocab {
			recordToken(&l.counts[tok])
		}
	}
}

// exactDraw finishes draw l.z of the row: the whole row scanned at the draw's step.
func (l *launchRow) exactDraw() {
	step := stepPlus(&l.p, l.z)
	if l.p.Flags&abi.FlagAdvance != 0 {
		step -= uint64(l.shape.Draws) // gumbel_argmax has advanced the row already
	}
	invT := float32(1 / l.p.Temperature)
	raw, processed := emptyLSE, emptyLSE
	var sets func(xs, ps []float32)
	if l.logprobs != nil {
		sets = func(xs, ps []float32) {
			raw.add(xs)
			processed.addScaled(ps, invT)
		}
	}
	var top [1]exactValue
	if l.exactTop(step, invT, top[:], sets, nil) == 0 {
		return // status 5 holds a finite winner; nothing else reaches here
	}
	best := top[0]
	l.finish(int32(best.idx), abi.StatusOK)
	if l.logprobs != nil {
		if !l.proc.active && invT == 1 {
			processed = raw
		}
		l.writeRecord(recordOf(l.logits.at(best.idx), float32(best.x*invT), raw, processed))
	}
}

// exactTop fills top with the row's largest values at step by the exact comparison,
// largest first, over the elements whose x' is finite, and returns how many it holds
// (fewer than len(top) only where the row has fewer such elements). sets, when not nil,
// is given each chunk's raw and processed logits; rule, when not nil, leaves out the
// elements it does not keep.
func (l *launchRow) exactTop(step uint64, invT float32, top []exactValue, sets func(xs, ps []float32), rule *keptRule) int {
	key := philox.Key(l.p.Seed)
	n := 0
	var buf, proc [convertChunk]float32
	for i := 0; i < l.vocab; i += convertChunk {
		xs := l.logits.load(&buf, i, min(convertChunk, l.vocab-i))
		ps := xs
		if l.proc.active {
			l.proc.processGroup(xs, i, proc[:])
			ps = proc[:len(xs)]
		}
		if sets != nil {
			sets(xs, ps)
		}
		for j, x := range ps {
			if !(abs32(x) <= math.MaxFloat32) || rule != nil && !rule.keeps(x) {
				continue // -Inf never wins; NaN and +Inf end the row with status 1
			}
			v := exactValueOf(x, invT, elementGumbel(key, step, uint32(i+j)), i+j)
			if n == len(top) && !v.above(top[n-1], invT) {
				continue
			}
			k := min(n, len(top)-1)
			for ; k > 0 && v.above(top[k-1], invT); k-- {
				top[k] = top[k-1]
			}
			top[k] = v
			n = min(n+1, len(top))
		}
	}
	return n
}

// elementGumbel is philox.ElementGumbel with the key already expanded.
func elementGumbel(key [2]uint32, step uint64, i uint32) float32 {
	w := philox.Block(philox.Counter(i, step, philox.PurposeGumbel), key)[i&3]
	var tail uint32
	if w < abi.TailThreshold {
		tail = philox.Block(philox.Counter(i, step, philox.PurposeGumbelTail), key)[i&3]
	}
	return philox.Gumbel(w, tail)
}
