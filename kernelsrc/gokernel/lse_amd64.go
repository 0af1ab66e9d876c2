//go:build amd64 && !purego

package gokernel

import "golang.org/x/sys/cpu"

// sumExpAVX2 is sumExpGo over the n elements from xs (n a multiple of 4) in AVX2
// (lse_amd64.s).
//
//go:noescape
func sumExpAVX2(xs *float32, n int, invT float32, m float64, table *[64]float64) float64

var useSumExpAVX2 = cpu.X86.HasAVX2

// sumExp is sumExpGo (its members finite or -Inf and at most m): in AVX2 where the CPU
// has it, four sums added at the end.
func sumExp(xs []float32, m float64, invT float32) float64 {
	n := len(xs) &^ 3
	if !useSumExpAVX2 || n == 0 {
		return sumExpGo(xs, m, invT)
	}
	return sumExpAVX2(&xs[0], n, invT, m, &exp2Sixty4th) + sumExpGo(xs[n:], m, invT)
}
