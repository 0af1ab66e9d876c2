//go:build amd64 && !purego

package gokernel

import "golang.org/x/sys/cpu"

// weightsAVX2 is weightsGo over the n elements from xs (n a multiple of 4) in AVX2
// (weights_amd64.s), four at a time, for a weigher whose cutoff is at least -64 and
// twoPowF = 2^F with F ≤ 52. It stops before the first group of four that holds an
// element it cannot settle (NaN, d > 0, or y near a float32 midpoint), returning the
// elements done and Σ q over them.
//
//go:noescape
func weightsAVX2(w *float32, q *uint64, xs *float32, n int, m, invT, cutoff float32, twoPowF float64, table *[64]float64) (done int, z uint64)

var useWeightsAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// weights is weightsGo, bit for bit, in AVX2 where the CPU has it (with FMA).
//
// exp32(d) is math.Exp(d) rounded once to float32. The vector form computes its own
// float64 y ≈ exp(d), takes float32(y) where that is sure to be the same float32, and
// leaves the group to weightsGo where it is not. For d in [-64, 0], y is within 2^-50 of
// exp(d), relatively: with k = round(d·64/ln 2) and r = d - k·ln2/64, |r| ≤ ln2/128;
// d - k·hi is exact (hi has 32 significant bits, |k| < 2^13) and r rounds once after it
// (under 1e-18); the degree-5 Taylor series of exp(r) leaves under 4e-17 and its Horner
// evaluation in FMAs rounds by about 2^-53 at the last step; the table's 2^(j/64) is
// within one ulp (math.Exp2); the product rounds once and 2^(k>>6) is exact: under
// 5e-16 < 2^-50 in all. math.Exp is within one ulp (2^-52), so y and math.Exp(d) lie
// within 2^-49·y of each other: under 16 units in y's last place. Rounding to nearest is
// monotone, so both round to the same float32 unless a float32 midpoint lies between
// them, that is where y's 29 bits below float32's 24 read 2^28 (the next midpoints are
// 2^27 units away or more). A lane whose bits lie within midpointMargin = 256 units of
// 2^28 (16 times the bound) goes to weightsGo: about one element in two million.
// TestWeightsAVX2Exhaustive checks every float32 d in [-64, 0].
func weights(w []float32, q []uint64, xs []float32, wt weigher, twoPowF float32) uint64 {
	n := len(xs) &^ 3
	if !useWeightsAVX2 || n == 0 || !(wt.cutoff >= -64) || !(twoPowF <= 1<<52) {
		return weightsGo(w, q, xs, wt, twoPowF)
	}
	w, q = w[:len(xs)], q[:len(xs)]
	var z uint64
	for i := 0; i < n; {
		done, s := weightsAVX2(&w[i], &q[i], &xs[i], n-i, wt.m, wt.invT, wt.cutoff, float64(twoPowF), &exp2Sixty4th)
		z += s
		if i += done; i < n {
			z += weightsGo(w[i:i+4], q[i:i+4], xs[i:i+4], wt, twoPowF)
			i += 4
		}
	}
	return z + weightsGo(w[n:], q[n:], xs[n:], wt, twoPowF)
}
