package gokernel

import (
	"math"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/gumbel-go/gumbel/philox"
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

func abs32(x float32) float32 { return math.Float32frombits(math.Float32bits(x) &^ (1 << 31)) }

// exactScan is a Gumbel block's chunk [start, end) again (global index offset+i), its
// winner found by the exact comparison: the path of a block whose best float32 score
// reached ExactLimit.
func (l *launchRow) exactScan(start, end int, invT float32, key [2]uint32, step uint64) exactValue {
	best := exactValue{idx: -1}
	for i := start; i < end; i++ {
		x := l.proc.processed(l.logits.at(i), i)
		if x == negInf || x != x || x > math.MaxFloat32 {
			continue // -Inf never wins; NaN and +Inf fail the row
		}
		v := exactValueOf(x, invT, elementGumbel(key, step, uint32(l.offset+i)), l.offset+i)
		if best.idx < 0 || v.above(best, invT) {
			best = v
		}
	}
	return best
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
