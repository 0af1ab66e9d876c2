package statistical

import (
	"errors"
	"fmt"
	"math"
	"sort"

	"gonum.org/v1/gonum/mathext"
)

// MinExpected is the smallest expected count a chi-square bin may have; lighter bins are
// merged with their neighbours (Cochran's rule of thumb, which keeps Pearson's statistic
// close to its chi-square law).
const MinExpected = 5

// Verdict is the result of a chi-square goodness-of-fit test.
type Verdict struct {
	// Draws is the number of tokens counted.
	Draws int64
	// ChiSquare is Pearson's statistic over the merged bins.
	ChiSquare float64
	// DF is the degrees of freedom: merged bins minus one.
	DF int
	// PValue is the probability of a statistic at least this large under the exact
	// distribution.
	PValue float64
	// Bins is the number of merged bins.
	Bins int
	// ZeroDrawn counts draws of tokens whose probability is zero; FirstZero is the
	// lowest such token (-1 when none).
	ZeroDrawn int64
	FirstZero int
}

// Pass reports whether the verdict accepts the sampler at threshold alpha: no
// impossible token drawn and p >= alpha.
func (v Verdict) Pass(alpha float64) bool {
	return v.ZeroDrawn == 0 && v.PValue >= alpha
}

// bin is one chi-square cell: expected and observed counts.
type bin struct{ expected, observed float64 }

// ChiSquareTest compares token counts with exact probabilities, binned as binning says
// (see [Binning]). probs and counts must have the same length; probs must sum to 1.
func ChiSquareTest(probs []float64, counts []int64, binning Binning) (Verdict, error) {
	if len(probs) != len(counts) || len(probs) == 0 {
		return Verdict{}, fmt.Errorf("statistical: %d probabilities against %d counts", len(probs), len(counts))
	}
	v := Verdict{FirstZero: -1}
	sum := 0.0
	for i, p := range probs {
		if !(p >= 0 && p <= 1) {
			return Verdict{}, fmt.Errorf("statistical: probability %d is %v", i, p)
		}
		if counts[i] < 0 {
			return Verdict{}, fmt.Errorf("statistical: count %d is %d", i, counts[i])
		}
		sum += p
		v.Draws += counts[i]
		if p == 0 && counts[i] > 0 {
			v.ZeroDrawn += counts[i]
			if v.FirstZero < 0 {
				v.FirstZero = i
			}
		}
	}
	if math.Abs(sum-1) > 1e-9 {
		return Verdict{}, fmt.Errorf("statistical: probabilities sum to %.12g", sum)
	}
	if v.Draws == 0 {
		return Verdict{}, errors.New("statistical: no draws")
	}
	var bins []bin
	switch binning {
	case BinTokens:
		bins = tokenBins(probs, counts, float64(v.Draws))
	case BinDeciles:
		bins = decileBins(probs, counts, float64(v.Draws))
	default:
		return Verdict{}, fmt.Errorf("statistical: unknown binning %d", binning)
	}
	for _, b := range bins {
		d := b.observed - b.expected
		v.ChiSquare += d * d / b.expected
	}
	v.Bins = len(bins)
	v.DF = len(bins) - 1
	v.PValue = 1
	if v.DF > 0 {
		v.PValue = ChiSquareSurvival(v.DF, v.ChiSquare)
	}
	return v, nil
}

// tokenBins gives every token expected at least MinExpected times its own bin and pools
// the lighter ones by whole nats below the top token, merging adjacent pools (nearest to
// the top first) until each holds MinExpected. Zero-probability tokens are left out: any
// draw of one fails the case on its own.
func tokenBins(probs []float64, counts []int64, draws float64) []bin {
	top := 0.0
	for _, p := range probs {
		top = max(top, p)
	}
	var own []bin
	pools := map[int]*bin{}
	for i, p := range probs {
		if p == 0 {
			continue
		}
		e, o := p*draws, float64(counts[i])
		if e >= MinExpected {
			own = append(own, bin{e, o})
			continue
		}
		band := int(math.Floor(math.Log(top / p)))
		b := pools[band]
		if b == nil {
			b = &bin{}
			pools[band] = b
		}
		b.expected += e
		b.observed += o
	}
	bands := make([]int, 0, len(pools))
	for k := range pools {
		bands = append(bands, k)
	}
	sort.Ints(bands)
	ordered := make([]bin, len(bands))
	for i, k := range bands {
		ordered[i] = *pools[k]
	}
	merged := mergeAdjacent(ordered)
	if n := len(merged); n > 0 && merged[n-1].expected < MinExpected && len(own) > 0 {
		// Too little pooled mass for a bin of its own: fold it into the lightest
		// token bin, which keeps the statistic honest without inventing a cell.
		lightest := 0
		for i := range own {
			if own[i].expected < own[lightest].expected {
				lightest = i
			}
		}
		own[lightest].expected += merged[n-1].expected
		own[lightest].observed += merged[n-1].observed
		merged = merged[:n-1]
	}
	return append(own, merged...)
}

// decileBins bins tokens by index decile (fewer bins when V < 10), leaving out
// zero-probability tokens, then merges adjacent light deciles.
func decileBins(probs []float64, counts []int64, draws float64) []bin {
	v := len(probs)
	n := min(10, v)
	bins := make([]bin, n)
	for i, p := range probs {
		if p == 0 {
			continue
		}
		d := i * n / v
		bins[d].expected += p * draws
		bins[d].observed += float64(counts[i])
	}
	nonEmpty := bins[:0]
	for _, b := range bins {
		if b.expected > 0 {
			nonEmpty = append(nonEmpty, b)
		}
	}
	return mergeAdjacent(nonEmpty)
}

// mergeAdjacent merges runs of consecutive bins until each holds at least MinExpected
// expected draws; a light remainder at the end joins the bin before it. A single light
// bin stays as it is (the caller decides what to do with it).
func mergeAdjacent(in []bin) []bin {
	var out []bin
	var cur bin
	open := false
	for _, b := range in {
		cur.expected += b.expected
		cur.observed += b.observed
		open = true
		if cur.expected >= MinExpected {
			out = append(out, cur)
			cur, open = bin{}, false
		}
	}
	if open {
		if len(out) > 0 {
			out[len(out)-1].expected += cur.expected
			out[len(out)-1].observed += cur.observed
		} else {
			out = append(out, cur)
		}
	}
	return out
}

// ChiSquareSurvival returns P(X > x) for X chi-square with df degrees of freedom: the
// regularized upper incomplete gamma function Q(df/2, x/2). It is what gonum's
// distuv.ChiSquared.Survival computes, taken from the light mathext package so that the
// tests do not compile distuv's matrix and optimisation dependencies.
func ChiSquareSurvival(df int, x float64) float64 {
	return mathext.GammaIncRegComp(float64(df)/2, x/2)
}

// CriticalValue returns the chi-square statistic at which a test with df degrees of
// freedom rejects at level alpha: the (1 - alpha) quantile, 2·P⁻¹(df/2, 1 - alpha).
func CriticalValue(df int, alpha float64) float64 {
	return 2 * mathext.GammaIncRegInv(float64(df)/2, 1-alpha)
}

// Power returns the probability that a chi-square test with df degrees of freedom and
// level alpha rejects when the statistic follows the non-central chi-square law with the
// given non-centrality (the sum over bins of draws·(p_true - p_expected)²/p_expected).
// It sums the Poisson mixture of central chi-square laws that the non-central law is.
func Power(df int, noncentrality, alpha float64) float64 {
	if df < 1 || noncentrality < 0 || !(alpha > 0 && alpha < 1) {
		return math.NaN()
	}
	c := CriticalValue(df, alpha)
	half := noncentrality / 2
	if half == 0 {
		return ChiSquareSurvival(df, c)
	}
	// The Poisson weights beyond mean + 12 standard deviations (+ 30 for small means)
	// are below 1e-30.
	last := int(half + 12*math.Sqrt(half) + 30)
	total := 0.0
	for j := 0; j <= last; j++ {
		// The Poisson(half) weight of j, in logs so that large means do not overflow.
		lg, _ := math.Lgamma(float64(j) + 1)
		w := math.Exp(float64(j)*math.Log(half) - half - lg)
		if w == 0 {
			continue
		}
		total += w * ChiSquareSurvival(df+2*j, c)
	}
	return min(1, total)
}

// DetectableNoncentrality returns the smallest non-centrality that a chi-square test with
// df degrees of freedom and level alpha detects with the given power.
func DetectableNoncentrality(df int, alpha, power float64) float64 {
	lo, hi := 0.0, 1.0
	for Power(df, hi, alpha) < power {
		hi *= 2
		if hi > 1e9 {
			return math.Inf(1)
		}
	}
	for i := 0; i < 100 && hi-lo > 1e-9*hi; i++ {
		mid := (lo + hi) / 2
		if Power(df, mid, alpha) < power {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi
}

// Noncentrality returns the chi-square non-centrality per draw of a sampler that
// follows law got when want is expected: Σ (got - want)²/want over the outcomes want
// allows, +Inf when got puts mass where want has none.
func Noncentrality(want, got []float64) float64 {
	sum := 0.0
	for i := range want {
		switch {
		case want[i] > 0:
			d := got[i] - want[i]
			sum += d * d / want[i]
		case got[i] > 0:
			return math.Inf(1)
		}
	}
	return sum
}
