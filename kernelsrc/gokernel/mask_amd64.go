//go:build amd64 && !purego

package gokernel

import "golang.org/x/sys/cpu"

// maskApplyAVX2 is maskGroupGo over words whole mask words (32 elements each) from xs
// to dst, aligned to a word boundary, with m1 and m2 the words of the mask and the
// bitmask (mask_amd64.s); hidden is its SeenNonFinite.
//
//go:noescape
func maskApplyAVX2(dst, xs *float32, m1, m2 *uint32, words int) (hidden bool)

// maskSkipAVX2 returns how many of the words whole mask words from xs (aligned as
// above) the masked greedy scan may pass with the running best, stopping before the
// first word that holds an allowed element above best or NaN, or a banned NaN or +Inf
// (mask_amd64.s).
//
//go:noescape
func maskSkipAVX2(xs *float32, m1, m2 *uint32, words int, best float32) (skipped int)

var useMaskAVX2 = cpu.X86.HasAVX2

// maskApply is maskGroupGo over the whole words that begin xs (xs[0] the first element
// of word w0), in AVX2 where the CPU has it: it returns the elements it covered, a
// multiple of 32 (0 without AVX2), and whether it masked away a NaN or +Inf.
func (p *processor) maskApply(xs []float32, w0 int, dst []float32) (int, bool) {
	nw := len(xs) >> 5
	if !useMaskAVX2 || nw == 0 || p.mask == nil && p.bitmask == nil {
		return 0, false
	}
	m1, m2 := p.maskRows(w0, nw)
	dst = dst[:32*nw]
	return 32 * nw, maskApplyAVX2(&dst[0], &xs[0], &m1[0], &m2[0], nw)
}

// maskSkip returns how many leading elements of xs (xs[0] the first element of word
// w0), whole words, the masked greedy scan with running best may pass: no allowed
// element above best, no NaN or +Inf, masked or not. 0 without AVX2.
func (p *processor) maskSkip(xs []float32, w0 int, best float32) int {
	nw := len(xs) >> 5
	if !useMaskAVX2 || nw == 0 || p.mask == nil && p.bitmask == nil {
		return 0
	}
	m1, m2 := p.maskRows(w0, nw)
	return 32 * maskSkipAVX2(&xs[0], &m1[0], &m2[0], nw, best)
}
