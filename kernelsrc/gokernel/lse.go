package gokernel

import "math"

// lse is a running log-sum-exp: the largest member m and Σ exp(v - m) over the members.
// The empty set has m = -Inf and sum 0; a set holding +Inf has m = +Inf and sum 1.
// float64 throughout: the Go edition is the accurate reference the GPU editions (with
// their fast float32 exp) are compared to.
type lse struct{ m, sum float64 }

var emptyLSE = lse{m: math.Inf(-1)}

// add merges the set {xs} into a.
func (a *lse) add(xs []float32) { a.addScaled(xs, 1) }

// addScaled merges the set {fl(x·invT)} into a, in two passes (max, then sum) so that
// each member costs one exp.
func (a *lse) addScaled(xs []float32, invT float32) {
	cm := float32(negInf)
	if invT > 0 && invT <= math.MaxFloat32 {
		// fl(x·invT) grows with x: the largest member is fl(max(x)·invT). The groups
		// below +Inf go in vector code where the CPU has it; a NaN or +Inf stops it, and
		// the loop takes the rest.
		top, n := float32(negInf), 0
		if scanBelowVector {
			n, top = scanBelow(xs, float32(math.Inf(1)))
		}
		for _, x := range xs[n:] {
			top = max(top, x)
		}
		cm = float32(top * invT)
	} else {
		for _, x := range xs {
			cm = max(cm, float32(x*invT))
		}
	}
	if cm-cm != 0 { // empty (-Inf), +Inf or NaN: NaN only follows non-finite input
		a.merge(lse{m: float64(cm), sum: lseSumOf(cm)})
		return
	}
	m := float64(cm)
	a.merge(lse{m: m, sum: sumExp(xs, m, invT)})
}

// sumExpGo is Σ expNonPositive(float64(fl(x·invT)) - m) over xs, in index order.
func sumExpGo(xs []float32, m float64, invT float32) float64 {
	s := 0.0
	for _, x := range xs {
		s += expNonPositive(float64(float32(x*invT)) - m) // -Inf gives 0
	}
	return s
}

// expNonPositive is exp(d) for d ≤ 0 (and NaN for NaN), to about 1e-15 relative: the
// log-sum-exps call it once per element, where math.Exp would cost more than the whole
// sampling pass. Terms below e^-64 are returned as 0: beside the maximum's term of 1,
// even 2^31 of them are below float64's resolution.
func expNonPositive(d float64) float64 {
	if !(d >= -64) {
		if d != d {
			return d
		}
		return 0
	}
	// d = (64e + j)·ln2/64 + r with |r| ≤ ln2/128, ln2/64 split in two so that k·hi
	// is exact; exp(d) = 2^e · 2^(j/64) · exp(r), and exp(r) is a short series whose
	// remainder r^6/720 is below 4e-17.
	const (
		hi      = 6.93147180369123816490e-01 / 64
		lo      = 1.90821492927058770002e-10 / 64
		invStep = 64 / math.Ln2
	)
	k := int64(math.Floor(d*invStep + 0.5))
	kf := float64(k)
	r := float64(d-kf*hi) - kf*lo
	r2 := r * r
	p := (1 + r) + r2*(1.0/2+r*(1.0/6)) + float64(r2*r2)*(1.0/24+r*(1.0/120))
	return p * exp2Sixty4th[k&63] * math.Float64frombits(uint64(k>>6+1023)<<52)
}

// exp2Sixty4th[j] = 2^(j/64).
var exp2Sixty4th = func() (t [64]float64) {
	for j := range t {
		t[j] = math.Exp2(float64(j) / 64)
	}
	return t
}()

// lseSumOf is the sum that goes with a non-finite maximum.
func lseSumOf(m float32) float64 {
	if m == negInf {
		return 0
	}
	if m != m {
		return math.NaN()
	}
	return 1
}

// merge adds the members of b to a.
func (a *lse) merge(b lse) {
	switch {
	case b.m == math.Inf(-1):
		return
	case a.m == math.Inf(-1):
		*a = b
	case math.IsNaN(a.m) || math.IsNaN(b.m):
		*a = lse{m: math.NaN(), sum: math.NaN()}
	case math.IsInf(a.m, 1) || math.IsInf(b.m, 1):
		*a = lse{m: math.Inf(1), sum: 1}
	default:
		m := max(a.m, b.m)
		a.sum = a.sum*math.Exp(a.m-m) + b.sum*math.Exp(b.m-m)
		a.m = m
	}
}

// value is log Σ exp(v) over the members.
func (a lse) value() float64 {
	if a.m == math.Inf(-1) || math.IsInf(a.m, 1) {
		return a.m
	}
	return a.m + math.Log(a.sum)
}

// logprob is the log-probability of a value v under the set: (v - m) - log Σ, taken from
// the maximum so that it does not cancel against the log-sum-exp itself, which float64
// cannot tell from m once |m| passes 2^52 (logits near float32's largest: two members at
// 3e38 would read 0 instead of -log 2). A set whose m is not finite follows IEEE
// arithmetic on value.
func (a lse) logprob(v float64) float64 {
	if math.IsInf(a.m, 0) || math.IsNaN(a.m) {
		return v - a.value()
	}
	return (v - a.m) - math.Log(a.sum)
}

// pack is the ABI's partial: float32 max in the low word, float32 sum in the high.
func (a lse) pack() uint64 {
	return uint64(math.Float32bits(float32(a.sum)))<<32 | uint64(math.Float32bits(float32(a.m)))
}

// lseUnpack reads a partial written by pack.
func lseUnpack(u uint64) lse {
	return lse{m: float64(math.Float32frombits(uint32(u))), sum: float64(math.Float32frombits(uint32(u >> 32)))}
}
