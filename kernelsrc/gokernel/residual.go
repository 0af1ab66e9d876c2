package gokernel

import (
	"encoding/binary"
	"math"
	"sync/atomic"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/gumbel-go/gumbel/philox"
	"github.com/gumbel-go/gumbel/runtime"
)

// goodChainRow reports whether a residual row's own parameters can be verified: a
// positive temperature, no reserved flag and no FlagShard (shards are gumbel_argmax's
// alone) and, unless it ends its chain, a draft token in the vocabulary. Every block of
// a chain's launch row applies the same test to the chain's records.
func goodChainRow(p abi.RowParams, vocab uint32) bool {
	return p.Flags&(abi.FlagsReserved|abi.FlagShard) == 0 && !badRow(p.Temperature, vocab) && p.Temperature > 0 &&
		(p.Flags&abi.FlagChainEnd != 0 || p.Token < vocab)
}

// chainView holds what a residual block reads besides its own row: the launch's
// RowParams, the records score left in logprobs and the draft probabilities.
type chainView struct {
	params   []byte
	logprobs []float32
	draft    []float32
	vocab    uint32
}

// record returns word w of the log-probability record at logits row r, or NaN when the
// buffer does not hold it.
func (c *chainView) record(r uint32, w int) float32 {
	i := uint64(r)*abi.RecordWords + uint64(w)
	if i >= uint64(len(c.logprobs)) {
		return float32(math.NaN())
	}
	return c.logprobs[i]
}

// draftRow returns draft row q, or nil when the buffer does not hold it.
func (c *chainView) draftRow(q uint32) []float32 {
	v := uint64(c.vocab)
	if (uint64(q)+1)*v > uint64(len(c.draft)) {
		return nil
	}
	return c.draft[uint64(q)*v : (uint64(q)+1)*v]
}

// accepted decides a position that is not its chain's last: its draft token is kept
// when fl(u·q) < p, u its DraftUniform, q the draft probability of the token and p
// its target probability from score's record. A row that cannot be verified rejects.
func (c *chainView) accepted(p abi.RowParams) bool {
	if !goodChainRow(p, c.vocab) {
		return false
	}
	q := c.draftRow(p.TopN)
	if q == nil {
		return false
	}
	u := philox.DraftUniform(p.Seed, p.Step)
	return float32(u*q[p.Token]) < exp32(c.record(p.Row, 1))
}

// chain finds launch row y's chain, records first through end (its CHAIN_END record),
// and the record where it stops: its first rejected draft, or end. ok is false when the
// records do not all lie in the params buffer.
func (c *chainView) chain(y int) (first, end, stop int, ok bool) {
	head, ok := readRowParams(c.params, y)
	if !ok {
		return 0, 0, 0, false
	}
	first, stop = int(head.TopK), -1
	for end = first; ; end++ {
		p, ok := readRowParams(c.params, end)
		if !ok {
			return 0, 0, 0, false
		}
		if p.Flags&abi.FlagChainEnd != 0 {
			break
		}
		if stop < 0 && !c.accepted(p) {
			stop = end
		}
	}
	if stop < 0 {
		stop = end
	}
	return first, end, stop, true
}

// logf32 is the float32 logf of the contract, rounded from float64 (as exp32).
func logf32(x float32) float32 { return float32(math.Log(float64(x))) }

// residualScan is one block's running state at a chain's stop: the best key over the
// residual and the best Gumbel-max key over p (the fallback).
type residualScan struct {
	bestR, bestP   uint64
	scoreR, scoreP float32 // the scores in bestR and bestP; -Inf while empty
	seen           abi.Seen
}

// residual is one block of residual (ABI.md): it decides where its launch row's chain
// stops; block 0 writes the verdicts of the other positions, and the stop's blocks draw
// its token, from the residual max(p - q, 0) at a rejected draft or from p at the
// chain's end.
func residual(b *runtime.BlockContext, d abi.DType) {
	a := b.Args
	if a == nil || a.Len() < abi.NumArgs {
		return
	}
	c := chainView{
		params:   a.HostBytesArg(int(abi.ArgParams)),
		logprobs: f32Words(a.HostBytesArg(int(abi.ArgLogprobs)), 1),
		draft:    f32Words(a.HostBytesArg(int(abi.ArgDraft)), 1),
		vocab:    a.U32Arg(int(abi.ArgVocab)),
	}
	first, last, stop, ok := c.chain(b.Block.Y)
	if !ok {
		return
	}
	l, ok, bad := setupRecord(b, d, abi.Residual, stop)
	if !ok {
		return
	}
	if l.x == 0 {
		for j := first; j <= last; j++ {
			p, _ := readRowParams(c.params, j)
			switch {
			case j < stop:
				l.writeSlot(uint64(p.Row), int32(p.Token), abi.StatusOK)
			case j > stop:
				l.writeSlot(uint64(p.Row), -1, abi.StatusNotReached)
			}
		}
	}
	end := l.p.Flags&abi.FlagChainEnd != 0
	kept := l.p.Flags&abi.FlagKeptSet != 0
	var q []float32
	var lse float32
	if !end {
		q, lse = c.draftRow(l.p.TopN), c.record(l.p.Row, 3)
		bad = bad || q == nil
	}
	if !end || kept {
		bad = bad || uint64(len(c.logprobs)) < (uint64(l.p.Row)+1)*abi.RecordWords
	}
	if bad {
		if l.x == 0 {
			l.fail()
		}
		return
	}
	invT := float32(1 / l.p.Temperature)
	seed, step := l.p.Seed, l.p.Step
	sc := residualScan{scoreR: negInf, scoreP: negInf}
	// With a kept-set descriptor the target is the filtered law: the elements the rule
	// drops are in neither draw, and a kept element's log-probability is
	// fl(fl(fl(x' - m)·invT) - ln(S·2^-F)) (lse holds ln(S·2^-F)).
	var rule *keptRule
	if kept {
		r := ruleOf(&l.p, l.vocab, math.Float32bits(c.record(l.p.Row, 0)), c.record(l.p.Row, 2))
		rule = &r
	}
	start, stop := l.chunk()
	var buf, proc [convertChunk]float32
	for i := start; i < stop; i += convertChunk {
		xs := l.logits.load(&buf, i, min(convertChunk, stop-i))
		if l.proc.active {
			sc.seen |= l.proc.processGroup(xs, i, proc[:])
			xs = proc[:len(xs)]
		}
		for k, x := range xs {
			sc.seen |= seen(x)
			if rule != nil && !rule.keeps(x) {
				continue
			}
			idx := i + k
			s := float32(x * invT)
			var w, dd float32
			candR := false
			if !end {
				if rule != nil {
					dd = float32(float32(float32(x-rule.wt.m)*invT) - lse)
				} else {
					dd = float32(s - lse)
				}
				w = float32(exp32(dd) - q[idx])
				candR = w > 0 && float32(float32(dd+1)+abi.MaxGumbel) >= sc.scoreR
			}
			candP := float32(s+abi.MaxGumbel) >= sc.scoreP
			if !candR && !candP {
				continue
			}
			g := philox.ElementGumbel(seed, step, uint32(idx))
			if candP {
				score := float32(s + g)
				if k := pack(score, idx); k > sc.bestP {
					sc.bestP, sc.scoreP = k, score
				}
			}
			if candR {
				score := float32(logf32(w) + g)
				if k := pack(score, idx); k > sc.bestR {
					sc.bestR, sc.scoreR = k, score
				}
			}
		}
	}
	l.residualEnd(&sc, rule)
}

// residualEnd publishes the block's keys; the last block of the row merges them and
// writes the stop's token: the residual's winner, or p's when the residual is empty.
// rule, when not nil, is the kept set p's draw is over.
func (l *launchRow) residualEnd(sc *residualScan, rule *keptRule) {
	bestR, bestP, seen := sc.bestR, sc.bestP, sc.seen
	if s := l.shape.Split; s > 1 {
		sh, y := l.shape, l.y
		word := func(x, j int) []byte { return l.partials[8*sh.ResidualWord(y, x, j):] }
		binary.LittleEndian.PutUint64(word(l.x, 0), bestR)
		binary.LittleEndian.PutUint64(word(l.x, 1), bestP)
		arrivals, seenWord := &l.counters[sh.DrawCounter(y, 0)], &l.counters[sh.DrawCounter(y, 0)+1]
		atomic.OrUint32(seenWord, uint32(seen))
		if atomic.AddUint32(arrivals, 1) != uint32(s) {
			return
		}
		bestR, bestP = 0, 0
		for x := range s {
			bestR = max(bestR, binary.LittleEndian.Uint64(word(x, 0)))
			bestP = max(bestP, binary.LittleEndian.Uint64(word(x, 1)))
		}
		seen = abi.Seen(atomic.LoadUint32(seenWord))
		atomic.StoreUint32(seenWord, 0)
		atomic.StoreUint32(arrivals, 0)
	}
	if st := seenStatus(seen); st != abi.StatusOK {
		l.finish(-1, st)
		return
	}
	best := bestR
	if best == 0 {
		best = bestP
		if inexact(best) {
			// p's draw is gumbel_argmax's, which a score this large leaves to the exact
			// comparison (ABI.md, "Exact scores"); a residual score never gets here.
			var top [1]exactValue
			l.exactTop(l.p.Step, float32(1/l.p.Temperature), top[:], nil, rule)
			best = pack(top[0].s, top[0].idx)
		}
	}
	l.finish(int32(^uint32(best)), abi.StatusOK)
}
