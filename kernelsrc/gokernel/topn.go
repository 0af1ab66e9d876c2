package gokernel

import (
	"encoding/binary"
	"math"
	"sync/atomic"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/gumbel-go/gumbel/philox"
	"github.com/gumbel-go/gumbel/runtime"
)

// topnList is a block's best packed keys, largest first; 0 marks an empty entry (every
// key that may enter is above -Inf, so its packed value is never 0).
type topnList struct {
	n int // entries kept: the row's N
	k [abi.MaxTopN]uint64
}

// floor is the smallest key kept, 0 while the list has room.
func (t *topnList) floor() uint64 { return t.k[t.n-1] }

// topnInsert adds key to the list; the caller has checked that it exceeds the floor.
func topnInsert(t *topnList, key uint64) {
	j := t.n - 1
	for j > 0 && t.k[j-1] < key {
		t.k[j] = t.k[j-1]
		j--
	}
	t.k[j] = key
}

// topnScan is one block's running state.
type topnScan struct {
	list topnList
	set  lse // log-sum-exp of the values the log-probabilities are taken over
	seen abi.Seen
	invT float32
	seed uint64
	key  [2]uint32 // philox.Key(seed)
	step uint64
}

// topn is one block of topn: it keeps the N largest keys of its chunk and the chunk's
// log-sum-exp, then takes part in the row's merge.
func topn(b *runtime.BlockContext, d abi.DType) {
	l, ok, bad := setup(b, d, abi.TopN)
	if !ok {
		return
	}
	if bad {
		if l.x == 0 {
			l.topnFail(abi.TopNRefused)
		}
		return
	}
	start, end := l.chunk()

	perturbed := l.p.Flags&abi.FlagPerturbed != 0
	noisy := perturbed && l.p.Temperature != 0
	var invT float32
	if noisy {
		invT = float32(1 / l.p.Temperature)
	}
	ns := topnScan{list: topnList{n: int(l.p.TopN)}, set: emptyLSE, invT: invT,
		seed: l.p.Seed, key: philox.Key(l.p.Seed), step: l.p.Step}
	var buf, proc [convertChunk]float32
	for i := start; i < end; i += convertChunk {
		xs := l.logits.load(&buf, i, min(convertChunk, end-i))
		if perturbed && l.proc.active {
			ns.seen |= l.proc.processGroup(xs, i, proc[:])
			xs = proc[:len(xs)]
		}
		if noisy {
			ns.scanGumbel(xs, i)
			ns.set.addScaled(xs, invT)
		} else {
			ns.scanPlain(xs, i)
			ns.set.add(xs)
		}
	}
	l.topnEnd(&ns)
}

// scanPlain ranks the values xs themselves (global index base). Once the list is full,
// groups of four below its floor's value change nothing (an equal value comes later, so
// its key is smaller), and where scanBelow runs in vector code it passes them: on an LLM
// row, all but a few hundred elements. Such a group holds no NaN or +Inf, and its finite
// elements are not the row's first: the full list already reports SeenFinite.
func (ns *topnScan) scanPlain(xs []float32, base int) {
	for j := 0; j < len(xs); {
		step := len(xs) // without vector code: one plain loop
		if limit := ns.floorScore(); scanBelowVector && limit > negInf {
			if n, _ := scanBelow(xs[j:], limit); n > 0 {
				j += n
				continue
			}
			step = 4 // the group that stopped it, then the skip again
		}
		end := min(j+step, len(xs))
		ns.rankPlain(xs[j:end], base+j)
		j = end
	}
}

// rankPlain is scanPlain's element-by-element loop over xs (global index base).
func (ns *topnScan) rankPlain(xs []float32, base int) {
	for j, x := range xs {
		if x-x != 0 { // NaN or ±Inf
			if x != negInf {
				ns.seen |= abi.SeenNonFinite
			}
			continue
		}
		ns.seen |= abi.SeenFinite
		if p := pack(x, base+j); p > ns.list.floor() {
			topnInsert(&ns.list, p)
		}
	}
}

// scanGumbel ranks the Gumbel scores of xs (at most convertChunk elements from global
// index base, a multiple of four), noising only the elements that may reach the list:
// gumbelCandidates lists those that might beat its floor's score as the chunk begins
// (the floor only rises), and each is tested against the floor as it stands before its
// noise is drawn. Elements come in index order, so a later one must beat the floor's
// score strictly.
func (ns *topnScan) scanGumbel(xs []float32, base int) {
	var words [convertChunk]uint32
	var cands [convertChunk]uint16
	nc, seen := gumbelCandidates(xs, base, ns.step, ns.key, ns.invT, ns.floorScore(), &words, &cands)
	ns.seen |= seen
	for _, c := range cands[:nc] {
		i := int(c)
		x, w := xs[i], words[i]
		if float32(float32(x*ns.invT)+gumbelBound(w)) < ns.floorScore() {
			continue
		}
		var tail uint32
		if w < abi.TailThreshold {
			tail = philox.Word(ns.seed, ns.step, uint32(base+i), philox.PurposeGumbelTail)
		}
		score := philox.Score(x, ns.invT, philox.Gumbel(w, tail))
		if score == negInf {
			continue // -Inf keys never enter the list
		}
		if p := pack(score, base+i); p > ns.list.floor() {
			topnInsert(&ns.list, p)
		}
	}
}

// floorScore is the score of the list's floor, -Inf while the list has room.
func (ns *topnScan) floorScore() float32 {
	if floor := ns.list.floor(); floor != 0 {
		return orderKeyInverse(uint32(floor >> 32))
	}
	return negInf
}

// topnEnd publishes the block's list and log-sum-exp; the last block of the row merges
// them and writes the row's N entries.
func (l *launchRow) topnEnd(ns *topnScan) {
	list, set, seen := &ns.list, ns.set, ns.seen
	if s := l.shape.Split; s > 1 {
		sh, y := l.shape, l.y
		word := func(x, j int) []byte { return l.partials[8*sh.TopNWord(y, x, j):] }
		for j := range abi.MaxTopN {
			binary.LittleEndian.PutUint64(word(l.x, j), list.k[j])
		}
		binary.LittleEndian.PutUint64(word(l.x, abi.MaxTopN), set.pack())
		arrivals, seenWord := &l.counters[sh.DrawCounter(y, 0)], &l.counters[sh.DrawCounter(y, 0)+1]
		atomic.OrUint32(seenWord, uint32(seen))
		if atomic.AddUint32(arrivals, 1) != uint32(s) {
			return
		}
		*list = topnList{n: list.n}
		set = emptyLSE
		for x := range s {
			for j := range list.n {
				k := binary.LittleEndian.Uint64(word(x, j))
				if k <= list.floor() {
					break // the block's list is sorted: nothing after it enters
				}
				topnInsert(list, k)
			}
			set.merge(lseUnpack(binary.LittleEndian.Uint64(word(x, abi.MaxTopN))))
		}
		seen = abi.Seen(atomic.LoadUint32(seenWord))
		atomic.StoreUint32(seenWord, 0)
		atomic.StoreUint32(arrivals, 0)
	}
	if seen&abi.SeenNonFinite != 0 {
		l.topnFail(-1)
		return
	}
	perturbed := l.p.Flags&abi.FlagPerturbed != 0
	if perturbed && l.p.Temperature != 0 {
		l.topnExact(list)
	}
	for j := range list.n {
		k := list.k[j]
		if k == 0 {
			l.topnPut(j, -1, negInf)
			continue
		}
		tok := int(^uint32(k))
		v := l.logits.at(tok)
		if perturbed {
			v = l.proc.processed(v, tok)
			if l.p.Temperature != 0 {
				v = float32(v * float32(1/l.p.Temperature))
			}
		}
		l.topnPut(j, int32(tok), float32(set.logprob(float64(v))))
	}
}

// topnExact makes a perturbed row's list exact (ABI.md, "topn"). It is already when no
// key's score reaches ExactLimit in magnitude and the list is full, or holds every
// element whose fl(x'·invT) is finite: only an element whose product overflowed to -Inf
// can be missing, for its float32 key never enters. Otherwise the row is ranked again by
// the exact comparison: the list gets the keys pack(s, i) of the row's N largest values
// in their order, 0 past its finite elements.
func (l *launchRow) topnExact(list *topnList) {
	invT := float32(1 / l.p.Temperature)
	full, exact := true, true
	for _, k := range list.k[:list.n] {
		full = full && k != 0
		exact = exact && (k == 0 || !inexact(k))
	}
	if exact && (full || !l.underflows(invT)) {
		return
	}
	var top [abi.MaxTopN]exactValue
	n := l.exactTop(l.p.Step, invT, top[:list.n], nil, nil)
	for j := range list.n {
		list.k[j] = 0
		if j < n {
			list.k[j] = pack(top[j].s, top[j].idx)
		}
	}
}

// underflows reports an element whose x' is finite and whose fl(x'·invT) is -Inf.
func (l *launchRow) underflows(invT float32) bool {
	var buf, proc [convertChunk]float32
	for i := 0; i < l.vocab; i += convertChunk {
		xs := l.logits.load(&buf, i, min(convertChunk, l.vocab-i))
		if l.proc.active {
			l.proc.processGroup(xs, i, proc[:])
			xs = proc[:len(xs)]
		}
		for _, x := range xs {
			if x > negInf && float32(x*invT) == negInf {
				return true
			}
		}
	}
	return false
}

// topnFail gives the row's N entries (all abi.MaxTopN when N itself is bad) the token
// tok (-1 for a row with NaN or +Inf, abi.TopNRefused for bad parameters) and NaN.
func (l *launchRow) topnFail(tok int32) {
	n := int(l.p.TopN)
	if n < 1 || n > abi.MaxTopN {
		n = abi.MaxTopN
	}
	for j := range n {
		l.topnPut(j, tok, float32(math.NaN()))
	}
}

// topnPut writes entry j of the row where the output buffers hold it.
func (l *launchRow) topnPut(j int, token int32, value float32) {
	o := uint64(l.p.Row)*abi.MaxTopN + uint64(j)
	if uint64(len(l.tokens))/4 > o {
		binary.LittleEndian.PutUint32(l.tokens[4*o:], uint32(token))
	}
	if uint64(len(l.status))/4 > o {
		binary.LittleEndian.PutUint32(l.status[4*o:], math.Float32bits(value))
	}
}
