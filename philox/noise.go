package philox

import "math"

// TailThreshold is the main-word value below which Gumbel reads the tail-extension word.
// Below 2^24 a 32-bit word alone would give u a relative spacing coarser than float32's
// own, so the smallest exponentials of a large vocabulary could share a value and the
// lowest-index tie-break would bias the draw.
const TailThreshold = 1 << 24

// MaxGumbel bounds Gumbel from above: the smallest u is 2^-65 (main word 0, tail word 0),
// so E >= 2^-65 and g = -log(E) <= 65·ln 2 ≈ 45.05. A token whose x/T + MaxGumbel is
// below the best score so far cannot win, so a kernel may skip its noise without changing
// any result.
const MaxGumbel float32 = 45.1

// Gumbel returns the Gumbel noise g = -log(E) of one element, E = -log(1-u) an Exp(1)
// variate built from the element's main word w (PurposeGumbel) and, when
// w < TailThreshold, its tail word (PurposeGumbelTail; ignored otherwise).
//
//   - w >= 2^31 (u >= 1/2): 1 - u = (^w + 1/2)·2^-32 exactly, E = -log(1 - u).
//   - 2^24 <= w < 2^31:     u = (w + 1/2)·2^-32, E = -log1p(-u).
//   - w < 2^24:             u = (w + (tail + 1/2)·2^-32)·2^-32, E = -log1p(-u).
//
// u is never 0 or 1, so g is always finite, between about -3.14 and MaxGumbel.
func Gumbel(w, tail uint32) float32 {
	return -log32(Exponential(w, tail))
}

// Exponential returns the Exp(1) variate E of [Gumbel] (the exponential-race form:
// argmax x/T - log E is the Gumbel-max draw).
func Exponential(w, tail uint32) float32 {
	if w >= 1<<31 {
		oneMinusU := float32(float32(^w)+0.5) * 0x1p-32
		return -log32(oneMinusU)
	}
	var u float32
	if w < TailThreshold {
		frac := float32(float32(tail)+0.5) * 0x1p-32
		u = float32(float32(w)+frac) * 0x1p-32
	} else {
		u = float32(float32(w)+0.5) * 0x1p-32
	}
	return -log1p32(-u)
}

// ElementGumbel is the noise of one vocabulary element for (seed, step): Gumbel of its
// PurposeGumbel word and, when needed, its PurposeGumbelTail word.
func ElementGumbel(seed, step uint64, index uint32) float32 {
	w := Word(seed, step, index, PurposeGumbel)
	var tail uint32
	if w < TailThreshold {
		tail = Word(seed, step, index, PurposeGumbelTail)
	}
	return Gumbel(w, tail)
}

// log32 and log1p32 are the float32 functions of the contract, rounded from float64.
func log32(x float32) float32   { return float32(math.Log(float64(x))) }
func log1p32(x float32) float32 { return float32(math.Log1p(float64(x))) }

// Score returns the Gumbel-max score of one element: fl(fl(x·invT) + g), two separately
// rounded float32 operations (kernels must not fuse them into one multiply-add).
func Score(x, invT, g float32) float32 {
	return float32(float32(x*invT) + g)
}
