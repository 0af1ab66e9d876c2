package gokernel

import (
	"math"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/gumbel-go/gumbel/philox"
)

// filterArgs are the inputs of gumbelFilter that stay fixed over a chunk. The layout is
// read by gumbel_filter_amd64.s.
type filterArgs struct {
	invT, limit float32
	ctr         [4]uint32 // the PurposeGumbel counter of the chunk's first element
	key         [2]uint32
}

// ln2Up is ln 2 rounded up to float32.
const ln2Up float32 = 0.6931472

// wordBound bounds gumbelBound(w) from above without a table, so that vector code can
// compute it: the bit length L of w (exact: w>>1 is cut to 24 significant bits first, so
// its conversion to float32 does not round up to the next power of two) gives
// (33-L)·ln 2 + 0.02. Words 0 and 1 give about 109.5, above MaxGumbel.
func wordBound(w uint32) float32 {
	a := w >> 1
	if a > 0x00FFFFFF {
		a &^= 0x7F
	}
	e := int32(math.Float32bits(float32(int32(a))) >> 23) // 127 + L - 2, or 0 when w < 2
	return float32(float32(float32(158-e)*ln2Up) + 0.02)
}

// gumbelFilterGo is the Go form of gumbelFilter, which the tests check the assembly
// against: over whole groups of 32 elements of xs (global index of xs[0] at a.ctr), it
// writes the PurposeGumbel words of every group that holds an element passing the first
// test below, and lists in cands the elements that pass both, in index order:
//
//	fl(fl(s + MaxGumbel) + x·0) >= limit   and   fl(fl(s + wordBound(w)) + x·0) >= limit
//
// with s = fl(x·invT). Both are the scan's own tests loosened (wordBound(w) >=
// gumbelBound(w)), so every element the scan would noise is listed. It returns the
// elements it covered, the candidates, and whether it saw a finite element and a NaN or
// +Inf.
func gumbelFilterGo(xs []float32, a *filterArgs, words *[convertChunk]uint32, cands *[convertChunk]uint16) (n, nc int, finite, bad bool) {
	n = min(len(xs), convertChunk) &^ 31
	for g := 0; g < n; g += 32 {
		var pass1 uint32
		for k, x := range xs[g : g+32] {
			b := math.Float32bits(x)
			finite = finite || b&0x7FFFFFFF < 0x7F800000
			bad = bad || nanOrPosInf(b) != 0
			s := float32(x * a.invT)
			if float32(float32(s+abi.MaxGumbel)+x*0) >= a.limit {
				pass1 |= 1 << k
			}
		}
		if pass1 == 0 {
			continue
		}
		w := philox.Block8(a.ctr[0]+uint32(g/4), a.ctr[1], a.ctr[2], a.ctr[3], a.key)
		copy(words[g:g+32], w[:])
		for k, x := range xs[g : g+32] {
			s := float32(x * a.invT)
			if pass1>>k&1 != 0 && float32(float32(s+wordBound(w[k]))+x*0) >= a.limit {
				cands[nc] = uint16(g + k)
				nc++
			}
		}
	}
	return n, nc, finite, bad
}
