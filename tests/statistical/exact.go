package statistical

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// Filter is a row's top-k, top-p and min-p, with the sampler's meaning of off: TopK 0 or
// >= V, TopP 0 or 1, MinP 0.
type Filter struct {
	TopK int
	TopP float32
	MinP float32
}

// boundaryMargin is how close (relative) a top-p cumulative mass may come to its target,
// or a min-p weight to its threshold, before the case is called ambiguous: the kernels
// work in float32 (expf, last-place error ~1e-7) and fixed point (truncation ~2^-45 per
// weight), this harness in float64, and the two may only be compared where they cannot
// disagree about which tokens are kept.
const boundaryMargin = 1e-5

// ErrAmbiguous reports a case whose filter boundary lies too close to call: float32 and
// float64 arithmetic might keep different tokens.
var ErrAmbiguous = errors.New("statistical: filter boundary too close to call")

// Expected returns the exact probability of every outcome of a case (see [Case.Cells]):
// [Probabilities] of the case's logits, processed first when the case has processors
// ([ProcessedLogits]), and for the pair modes the law of the ordered pair
// ([PairProbabilities]).
func Expected(c *Case) ([]float64, error) {
	logits := c.Logits
	if c.Processors != nil {
		var err error
		if logits, err = ProcessedLogits(logits, *c.Processors); err != nil {
			return nil, err
		}
	}
	p, err := Probabilities(logits, c.Temperature, Filter{TopK: c.TopK, TopP: c.TopP, MinP: c.MinP})
	if err != nil || c.Mode == ModeSample {
		return p, err
	}
	return PairProbabilities(p, c.Mode == ModePairs)
}

// Probabilities returns, in float64, the distribution a sampler must draw from for one row:
// softmax(logits / T) over the tokens the filter keeps, zero elsewhere. The kept set follows
// kernelsrc/ABI.md, computed independently by sorting:
//
//   - top-k (0 < k < V): keep every token whose logit is >= the k-th largest logit
//     (counting repeats), so ties at the k-th value are all kept;
//   - top-p (0 < p < 1): over the top-k set, the threshold is the largest logit t such that
//     the tokens with logit >= t hold at least p of the top-k set's mass; keep every token
//     with logit >= t (ties at the threshold all kept);
//   - min-p (0 < min_p <= 1): keep tokens whose weight exp((x - max)/T) relative to the top
//     token is >= min_p;
//
// and the kept tokens' weights are renormalised. It returns [ErrAmbiguous] when a top-p or
// min-p boundary is within a relative 1e-5 of its threshold, and an error for input the
// sampler rejects (T <= 0, NaN or +Inf logits, no finite logit, filters out of range).
func Probabilities(logits []float32, temperature float32, f Filter) ([]float64, error) {
	v := len(logits)
	t := float64(temperature)
	switch {
	case v == 0:
		return nil, errors.New("statistical: empty logits row")
	case !(t > 0) || math.IsInf(t, 1):
		return nil, fmt.Errorf("statistical: temperature %v: want finite and > 0", temperature)
	case f.TopK < 0:
		return nil, fmt.Errorf("statistical: top-k %d < 0", f.TopK)
	case !(f.TopP >= 0 && f.TopP <= 1):
		return nil, fmt.Errorf("statistical: top-p %v outside [0, 1]", f.TopP)
	case !(f.MinP >= 0 && f.MinP <= 1):
		return nil, fmt.Errorf("statistical: min-p %v outside [0, 1]", f.MinP)
	}
	top := math.Inf(-1)
	for i, x := range logits {
		xf := float64(x)
		if math.IsNaN(xf) || math.IsInf(xf, 1) {
			return nil, fmt.Errorf("statistical: logit %d is %v", i, x)
		}
		top = max(top, xf)
	}
	if math.IsInf(top, -1) {
		return nil, errors.New("statistical: no finite logit")
	}

	w := make([]float64, v)
	for i, x := range logits {
		w[i] = math.Exp((float64(x) - top) / t) // exp(-Inf) = 0 for masked tokens
	}
	kept := make([]bool, v)
	for i := range kept {
		kept[i] = true
	}

	// Indices by logit, largest first (stable, though ties never matter: every rule
	// below keeps or drops a whole group of equal logits).
	order := make([]int, v)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return byLogitDesc(logits[a], logits[b]) })

	if f.TopK > 0 && f.TopK < v {
		kth := logits[order[f.TopK-1]]
		for i, x := range logits {
			kept[i] = x >= kth
		}
	}

	if f.TopP > 0 && f.TopP < 1 {
		z := 0.0
		for i := range w {
			if kept[i] {
				z += w[i]
			}
		}
		target := float64(f.TopP) * z
		threshold := float32(math.Inf(-1))
		cum := 0.0
		found := false
		for g := 0; g < v && !found; {
			x := logits[order[g]]
			if !kept[order[g]] {
				break // the kept set is a prefix of order: top-k keeps the largest logits
			}
			for ; g < v && logits[order[g]] == x; g++ {
				cum += w[order[g]]
			}
			if math.Abs(cum-target) <= boundaryMargin*z {
				return nil, fmt.Errorf("%w: top-p %v: mass %.9g of the tokens with logit >= %v is within %g of the target %.9g",
					ErrAmbiguous, f.TopP, cum, x, boundaryMargin, target)
			}
			if cum >= target {
				threshold, found = x, true
			}
		}
		for i, x := range logits {
			kept[i] = kept[i] && x >= threshold
		}
	}

	if f.MinP > 0 {
		m := float64(f.MinP)
		for i := range w {
			if w[i] != 1 && math.Abs(w[i]-m) <= boundaryMargin*m {
				return nil, fmt.Errorf("%w: min-p %v: token %d has relative weight %.9g", ErrAmbiguous, f.MinP, i, w[i])
			}
			kept[i] = kept[i] && w[i] >= m
		}
	}

	sum := 0.0
	for i := range w {
		if kept[i] {
			sum += w[i]
		}
	}
	p := make([]float64, v)
	for i := range w {
		if kept[i] {
			p[i] = w[i] / sum
		}
	}
	return p, nil
}

// byLogitDesc orders logits largest first for a stable sort: a before b when a > b, and
// equal otherwise (NaN included), as the less function a > b does for sort.SliceStable.
func byLogitDesc(a, b float32) int {
	switch {
	case a > b:
		return -1
	case a < b:
		return 1
	}
	return 0
}
