package gokernel

import (
	"encoding/binary"
	"math"
	"math/bits"
	"sync/atomic"

	"github.com/gumbel-go/gumbel/philox"
	"github.com/gumbel-go/gumbel/runtime"
)

// topnKernel returns topn for one dtype: the N largest keys of each row (raw logits, or
// with PERTURBED the Gumbel scores of gumbel_argmax), largest first, with their
// log-probabilities. Grid (S, n, 1); blocks with Block.Z > 0 do nothing.
func topnKernel(d dtype) runtime.GoKernel {
	return func(b *runtime.BlockContext) { topnBlock(b, d) }
}

// topList is a block's best packed keys, largest first; 0 marks an empty entry (every
// key that may enter is above -Inf, so its packed value is never 0).
type topList struct {
	n int // entries kept: the row's N
	k [MaxTopN]uint64
}

// floor is the smallest key kept, 0 while the list has room.
func (t *topList) floor() uint64 { return t.k[t.n-1] }

// insert adds p, which the caller has checked to exceed floor.
func (t *topList) insert(p uint64) {
	j := t.n - 1
	for j > 0 && t.k[j-1] < p {
		t.k[j] = t.k[j-1]
		j--
	}
	t.k[j] = p
}

func topnBlock(b *runtime.BlockContext, d dtype) {
	l, ok, bad := setup(b, d, kindTopN)
	if !ok {
		return
	}
	if bad {
		if l.x == 0 {
			l.topnFail()
		}
		return
	}
	start, end := l.chunk()

	perturbed := l.p.flags&FlagPerturbed != 0
	noisy := perturbed && l.p.temperature != 0
	var invT float32
	if noisy {
		invT = float32(1 / l.p.temperature)
	}
	ns := topnScan{list: topList{n: int(l.p.topN)}, set: emptyLSE, invT: invT,
		seed: l.p.seed, key: philox.Key(l.p.seed), step: l.p.step, group: -1}
	var buf, proc [convertChunk]float32
	for i := start; i < end; i += convertChunk {
		xs := l.logits.load(&buf, i, min(convertChunk, end-i))
		if perturbed && l.proc.active {
			ns.flags |= l.proc.apply(xs, i, proc[:])
			xs = proc[:len(xs)]
		}
		if noisy {
			ns.gumbel(xs, i)
			ns.set.addScaled(xs, invT)
		} else {
			ns.plain(xs, i)
			ns.set.add(xs)
		}
	}
	l.topnReduce(&ns)
}

// topnScan is one block's running state.
type topnScan struct {
	list  topList
	set   lse // log-sum-exp of the values the log-probabilities are taken over
	flags uint32
	invT  float32
	seed  uint64
	key   [2]uint32 // philox.Key(seed)
	step  uint64
	group int // the group of four whose Philox words are in words
	words [4]uint32
}

// plain ranks the values xs themselves (global index base).
func (ns *topnScan) plain(xs []float32, base int) {
	for j, x := range xs {
		if x-x != 0 { // NaN or ±Inf
			if x != negInf {
				ns.flags |= flagNonFinite
			}
			continue
		}
		ns.flags |= flagFinite
		if p := pack(x, base+j); p > ns.list.floor() {
			ns.list.insert(p)
		}
	}
}

// gumbel ranks the Gumbel scores of xs, skipping the noise of elements that cannot
// reach the list: elements come in index order, so a later element must beat the
// floor's score strictly, and its score is at most fl(fl(x·invT) + bound).
func (ns *topnScan) gumbel(xs []float32, base int) {
	for j, x := range xs {
		if x-x != 0 {
			if x != negInf {
				ns.flags |= flagNonFinite
			}
			continue
		}
		ns.flags |= flagFinite
		s := float32(x * ns.invT)
		floor := ns.list.floor()
		limit := negInf
		if floor != 0 {
			limit = keyFloat(uint32(floor >> 32))
		}
		if float32(s+philox.MaxGumbel) < limit {
			continue
		}
		i := base + j
		if i>>2 != ns.group {
			ns.group = i >> 2
			ns.words = philox.Block(philox.Counter(uint32(i), ns.step, philox.PurposeGumbel), ns.key)
		}
		w := ns.words[i&3]
		if float32(s+wordBound[bits.Len32(w)]) < limit {
			continue
		}
		var tail uint32
		if w < philox.TailThreshold {
			tail = philox.Word(ns.seed, ns.step, uint32(i), philox.PurposeGumbelTail)
		}
		score := philox.Score(x, ns.invT, philox.Gumbel(w, tail))
		if score == negInf {
			continue // -Inf keys never enter the list
		}
		if p := pack(score, i); p > floor {
			ns.list.insert(p)
		}
	}
}

// topnReduce publishes the block's list and log-sum-exp; the last block of the row
// merges them and writes the row's N entries.
func (l *launchRow) topnReduce(ns *topnScan) {
	list, set, flags := &ns.list, ns.set, ns.flags
	if l.s > 1 {
		at := func(p, j int) []byte { return l.partials[8*(topnStride*p+j):] }
		p := l.y*l.s + l.x
		for j := range MaxTopN {
			binary.LittleEndian.PutUint64(at(p, j), list.k[j])
		}
		binary.LittleEndian.PutUint64(at(p, MaxTopN), set.packed())
		atomic.OrUint32(&l.counters[2*l.y+1], flags)
		if atomic.AddUint32(&l.counters[2*l.y], 1) != uint32(l.s) {
			return
		}
		*list = topList{n: list.n}
		set = emptyLSE
		for q := l.y * l.s; q < (l.y+1)*l.s; q++ {
			for j := range list.n {
				k := binary.LittleEndian.Uint64(at(q, j))
				if k <= list.floor() {
					break // the block's list is sorted: nothing after it enters
				}
				list.insert(k)
			}
			set.merge(unpackLSE(binary.LittleEndian.Uint64(at(q, MaxTopN))))
		}
		flags = atomic.LoadUint32(&l.counters[2*l.y+1])
		atomic.StoreUint32(&l.counters[2*l.y+1], 0)
		atomic.StoreUint32(&l.counters[2*l.y], 0)
	}
	if flags&flagNonFinite != 0 {
		l.topnFail()
		return
	}
	perturbed := l.p.flags&FlagPerturbed != 0
	for j := range list.n {
		k := list.k[j]
		if k == 0 {
			l.topnPut(j, -1, negInf)
			continue
		}
		tok := int(^uint32(k))
		v := l.logits.at(tok)
		if perturbed {
			v = l.proc.one(v, tok)
			if l.p.temperature != 0 {
				v = float32(v * float32(1/l.p.temperature))
			}
		}
		l.topnPut(j, int32(tok), float32(set.logprob(float64(v))))
	}
}

// topnFail gives the row's N entries (all 20 when N itself is bad) token -1 and NaN.
func (l *launchRow) topnFail() {
	n := int(l.p.topN)
	if n < 1 || n > MaxTopN {
		n = MaxTopN
	}
	for j := range n {
		l.topnPut(j, -1, float32(math.NaN()))
	}
}

// topnPut writes entry j of the row where the output buffers hold it.
func (l *launchRow) topnPut(j int, token int32, value float32) {
	o := uint64(l.p.row)*MaxTopN + uint64(j)
	if uint64(len(l.tokens))/4 > o {
		binary.LittleEndian.PutUint32(l.tokens[4*o:], uint32(token))
	}
	if uint64(len(l.status))/4 > o {
		binary.LittleEndian.PutUint32(l.status[4*o:], math.Float32bits(value))
	}
}
