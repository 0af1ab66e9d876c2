//go:build amd64 && !purego

package gokernel

import "golang.org/x/sys/cpu"

// gumbelFilterAVX2 is gumbelFilterGo over the n elements from xs (n a multiple of 32,
// at most convertChunk) in AVX2 (gumbel_filter_amd64.s); it returns the candidates and
// the observations as bit 0 (a finite element) and bit 1 (a NaN or +Inf).
//
//go:noescape
func gumbelFilterAVX2(xs *float32, n int, a *filterArgs, words *[convertChunk]uint32, cands *[convertChunk]uint16) (nc int, seen uint32)

var useFilterAVX2 = cpu.X86.HasAVX2

// gumbelFilter is gumbelFilterGo where the CPU has AVX2; elsewhere it covers nothing
// and the scan's Go passes take the whole chunk.
func gumbelFilter(xs []float32, a *filterArgs, words *[convertChunk]uint32, cands *[convertChunk]uint16) (n, nc int, finite, bad bool) {
	n = min(len(xs), convertChunk) &^ 31
	if !useFilterAVX2 || n == 0 {
		return 0, 0, false, false
	}
	nc, seen := gumbelFilterAVX2(&xs[0], n, a, words, cands)
	return n, nc, seen&1 != 0, seen&2 != 0
}
