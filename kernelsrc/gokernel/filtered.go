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
// by Gumbel-max over the kept set. The other blocks of the draw return at once: block 0
// may advance the row's step, which they must not be reading.
func filtered(b *runtime.BlockContext, d abi.DType) {
	if b.Block.X != 0 {
		return
	}
	l, ok, bad := setup(b, d, abi.Filtered)
	if !ok {
		return
	}
	if bad {
		l.fail()
		return
	}
	sc, _ := b.Scratch.(*catScratch)
	if sc == nil {
		sc = new(catScratch)
		b.Scratch = sc
	}

	raw, row, seen := sc.load(&l)
	m, seen := rowMax(row, seen)
	tok, status := int32(-1), seenStatus(seen)
	switch {
	case status != abi.StatusOK:
	case l.p.Temperature == 0:
		t := firstIndexOf(row, m)
		if l.logprobs != nil {
			sc.record = greedyRecord(raw, row, t, l.proc.active)
		}
		tok = int32(t)
	default:
		ks := sc.keep(&l.p, row, m)
		t := gumbelKept(&ks, row, l.p.Seed, stepPlus(&l.p, l.z))
		if l.logprobs != nil {
			sc.record = keptRecord(raw, row, t, m, ks.invT, ks.total, ks.f)
		}
		tok = int32(t)
	}
	l.finish(tok, status)
	if l.logprobs != nil {
		if status == abi.StatusOK {
			l.writeRecord(sc.record)
		} else {
			l.writeRecord(nanRecord)
		}
	}
	l.rowDone()
}

// gumbelKept is the Gumbel-max draw over the kept set: the kept element with the largest
// score fl(fl(x'·invT) + g), g its gumbel_argmax noise at step, ties to the lowest index.
// The kept set always holds the row's largest logit, so a token is always found.
func gumbelKept(ks *keptSet, row []float32, seed, step uint64) int {
	key := philox.Key(seed)
	var best uint64
	for j, i := range ks.idx {
		if !ks.kept(j, i) {
			continue
		}
		w := philox.Block(philox.Counter(i, step, philox.PurposeGumbel), key)[i&3]
		var tail uint32
		if w < abi.TailThreshold {
			tail = philox.Block(philox.Counter(i, step, philox.PurposeGumbelTail), key)[i&3]
		}
		best = max(best, pack(philox.Score(row[i], ks.invT, philox.Gumbel(w, tail)), int(i)))
	}
	return int(^uint32(best))
}
