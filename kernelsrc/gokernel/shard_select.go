package gokernel

import (
	"math"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/gumbel-go/gumbel/philox"
	"github.com/gumbel-go/gumbel/runtime"
)

// shardSelect is block 0 of each launch row of shard_select (ABI.md, "shard_select"):
// it adds the row's matching elements to its histogram and, with SelectDraw, raises its
// key word to their Gumbel-max winner. The other blocks return at once.
func shardSelect(b *runtime.BlockContext, d abi.DType) {
	if b.Block.X != 0 || b.Block.Z != 0 {
		return
	}
	l, ok, bad := setup(b, d, abi.ShardSelect)
	if !ok {
		return
	}
	lay := abi.Launch{Rows: l.shape.Rows, Split: 1, Draws: 1}
	words := u64Words(b.Args.HostBytesArg(int(abi.ArgShard)), uint64(lay.SelectWords()))
	if words == nil {
		return // nowhere to say anything: as when the row's slot cannot be found
	}
	y := l.y
	keyWord := &words[lay.SelectKeyWord(y)]
	q := abi.DecodeSelectQuery(words[lay.SelectQueryWord(y)], words[lay.SelectQueryWord(y)+1])
	if bad || l.p.Flags&abi.FlagShard == 0 || !(l.p.Temperature > 0) || q.Shift%8 != 0 || q.Shift > 24 || q.F > 62 {
		*keyWord = max(*keyWord, abi.ShardKeyFailed|uint64(abi.StatusBadParams))
		return
	}
	sc, _ := b.Scratch.(*catScratch)
	if sc == nil {
		sc = new(catScratch)
		b.Scratch = sc
	}
	_, row, _ := sc.load(&l)

	invT := float32(1 / l.p.Temperature)
	wt := weigher{m: q.M, invT: invT, cutoff: weightCutoff(int(q.F))}
	twoPowF := float32(math.Ldexp(1, int(q.F)))
	minP := q.MinP && l.p.MinP > 0 && l.p.MinP <= 1
	var high uint32 // the key bits the prefix fixes: those above the digit
	if q.Shift < 24 {
		high = ^uint32(0) << (q.Shift + 8)
	}
	counts := words[lay.SelectHistWord(y, 0):][:abi.SelectBins]
	masses := words[lay.SelectHistWord(y, abi.SelectBins):][:abi.SelectBins]
	key := philox.Key(l.p.Seed)
	var best uint64
	for i, x := range row {
		if x != x || x > math.MaxFloat32 {
			continue // NaN and +Inf never match
		}
		k := orderKey(x)
		if k < q.Floor || k&high != q.Prefix&high {
			continue
		}
		w := wt.weight(x)
		if minP && !(w >= l.p.MinP) {
			continue
		}
		bin := k >> q.Shift & 0xFF
		counts[bin]++
		masses[bin] += fixed(w, twoPowF)
		if q.Draw {
			g := uint32(l.offset + i)
			best = max(best, pack(philox.Score(x, invT, elementGumbel(key, l.p.Step, g)), int(g)))
		}
	}
	if q.Draw {
		*keyWord = max(*keyWord, best)
	}
}
