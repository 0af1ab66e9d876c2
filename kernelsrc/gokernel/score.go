package gokernel

import (
	"encoding/binary"
	"math"
	"sync/atomic"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/gumbel-go/gumbel/runtime"
)

// scoreScan is one block's running state in score.
type scoreScan struct {
	raw, processed lse
	seen           abi.Seen
	// above counts the logits at or above the token's raw logit xt.
	above uint64
	xt    float32
	invT  float32
}

// score is one block of score: over its chunk of the row, the raw log-sum-exp, the
// processed one (processors, then 1/temperature; temperature 0 scores at 1) and how many
// raw logits are at or above the token's; the last block of the row merges the blocks'
// words and writes the token's record, its rank and the row's status.
func score(b *runtime.BlockContext, d abi.DType) {
	l, ok, bad := setup(b, d, abi.Score)
	if !ok {
		return
	}
	if bad {
		if l.x == 0 {
			l.fail()
		}
		return
	}
	start, end := l.chunk()
	sc := scoreScan{raw: emptyLSE, processed: emptyLSE, invT: 1, xt: l.logits.at(int(l.p.Token))}
	if l.p.Temperature != 0 {
		sc.invT = float32(1 / l.p.Temperature)
	}
	var buf, proc [convertChunk]float32
	for i := start; i < end; i += convertChunk {
		xs := l.logits.load(&buf, i, min(convertChunk, end-i))
		sc.raw.add(xs)
		for _, x := range xs {
			if x >= sc.xt {
				sc.above++
			}
		}
		ps := xs
		if l.proc.active {
			sc.seen |= l.proc.processGroup(xs, i, proc[:])
			ps = proc[:len(xs)]
		}
		for _, x := range ps {
			sc.seen |= seen(x)
		}
		sc.processed.addScaled(ps, sc.invT)
	}
	l.scoreEnd(&sc)
}

// scoreEnd publishes the block's words; the last block of the row merges them and
// writes the row's outputs: the record of the token (Raw, Processed, RawLSE,
// ProcessedLSE), its rank (how many raw logits are at or above its own, itself and its
// ties included) in tokens and the status in status.
func (l *launchRow) scoreEnd(sc *scoreScan) {
	raw, processed, seen, above := sc.raw, sc.processed, sc.seen, sc.above
	if s := l.shape.Split; s > 1 {
		sh, y := l.shape, l.y
		word := func(x, j int) []byte { return l.partials[8*sh.ScoreWord(y, x, j):] }
		binary.LittleEndian.PutUint64(word(l.x, 0), raw.pack())
		binary.LittleEndian.PutUint64(word(l.x, 1), processed.pack())
		binary.LittleEndian.PutUint64(word(l.x, 2), above)
		arrivals, seenWord := &l.counters[sh.DrawCounter(y, 0)], &l.counters[sh.DrawCounter(y, 0)+1]
		atomic.OrUint32(seenWord, uint32(seen))
		if atomic.AddUint32(arrivals, 1) != uint32(s) {
			return
		}
		raw, processed, above = emptyLSE, emptyLSE, 0
		for x := range s {
			raw.merge(lseUnpack(binary.LittleEndian.Uint64(word(x, 0))))
			processed.merge(lseUnpack(binary.LittleEndian.Uint64(word(x, 1))))
			above += binary.LittleEndian.Uint64(word(x, 2))
		}
		seen = abi.Seen(atomic.LoadUint32(seenWord))
		atomic.StoreUint32(seenWord, 0)
		atomic.StoreUint32(arrivals, 0)
	}
	if st := seenStatus(seen); st != abi.StatusOK {
		l.finish(-1, st)
		l.writeRecord(nanRecord)
		return
	}
	tok := int(l.p.Token)
	v := l.proc.processed(sc.xt, tok)
	v = float32(v * sc.invT)
	l.finish(int32(min(above, math.MaxInt32)), abi.StatusOK)
	l.writeRecord(recordOf(sc.xt, v, raw, processed))
}
