package gokernel

import (
	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/gumbel-go/gumbel/philox"
	"github.com/gumbel-go/gumbel/runtime"
)

// filterMax is filter_max's block. The GPU editions find each block's largest processed
// logit here for the filtered kernel that follows; the Go edition's filtered kernel reads
// the whole row in one block, so this pass has nothing to do.
func filterMax(*runtime.BlockContext, abi.DType) {}

// filtered is the filtered kernel's block (ABI.md, "filtered"): block 0 of each draw
// filters the whole row as the categorical kernel does (steps 1 to 7) and draws its token
// by Gumbel-max over the kept set.
func filtered(b *runtime.BlockContext, d abi.DType) { oneBlockRow(b, d, abi.Filtered) }

// gumbelKept is the Gumbel-max draw over the kept set: the kept element of largest value
// (ABI.md, "Exact scores") with its gumbel_argmax noise at step, ties to the lowest index.
// The float32 scores decide unless the winning one reaches ExactLimit in magnitude; then
// the kept set is scanned again with the exact comparison, which only such rows pay for.
// The kept set always holds the row's largest logit, so a token is always found.
func gumbelKept(ks *keptSet, row []float32, seed, step uint64) int {
	key := philox.Key(seed)
	var best uint64
	for j, i := range ks.idx {
		if ks.kept(j) {
			best = max(best, pack(philox.Score(row[i], ks.invT, elementGumbel(key, step, i)), int(i)))
		}
	}
	if !inexact(best) {
		return int(^uint32(best))
	}
	win := exactValue{idx: -1}
	for j, i := range ks.idx {
		if !ks.kept(j) {
			continue
		}
		v := exactValueOf(row[i], ks.invT, elementGumbel(key, step, i), int(i))
		if win.idx < 0 || v.above(win, ks.invT) {
			win = v
		}
	}
	return win.idx
}
