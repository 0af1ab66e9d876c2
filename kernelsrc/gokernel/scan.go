package gokernel

// scanBelow returns how many leading elements of row lie in whole groups of four whose
// every element is below floor (a NaN is not), stopping before the first group that
// holds one that is not, and the largest element of those groups (-Inf when none; which
// of equal values, +0 or -0, is unspecified). amd64 runs it in AVX2 where the CPU
// has it, else SSE (scan_amd64.s), arm64 in NEON (scan_arm64.s), other targets and the
// purego build in Go (scanBelowGo, which the tests check them against).

// scanBelowGo is scanBelow in Go.
func scanBelowGo(row []float32, floor float32) (int, float32) {
	top, n := negInf, 0
	for ; n+4 <= len(row); n += 4 {
		g := row[n : n+4 : n+4]
		if !(g[0] < floor && g[1] < floor && g[2] < floor && g[3] < floor) {
			break
		}
		for _, x := range g {
			if x > top {
				top = x
			}
		}
	}
	return n, top
}
