package gokernel

import (
	"math"
	"math/bits"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/gumbel-go/gumbel/philox"
	"github.com/gumbel-go/gumbel/runtime"
)

// catScratch is one block's working memory, indexed by element (vals, proc, keys) or by
// position in the active set (the rest).
type catScratch struct {
	vals  []float32 // the row converted to float32 (16-bit dtypes only)
	proc  []float32 // the processed row x' (when the row has processors)
	keys  []uint32  // orderKey of every element (when a filter needs them)
	idx   []uint32  // the active set (after top-k), in index order
	w     []float32 // weight of each active element
	keysA []uint32  // key of each active element (top-p)
	q     []uint64  // fixed-point weight of each active element (top-p)
	tmpK  []uint32  // radix select's candidates
	tmpQ  []uint64
	// record is the log-probability record of the row's token, when the row asked for
	// one and its status is 0.
	record [abi.RecordWords]float32
}

// categorical is the categorical kernel's block (ABI.md, "categorical"): block 0 of each
// draw filters the whole row and draws its token by inverse CDF.
func categorical(b *runtime.BlockContext, d abi.DType) { oneBlockRow(b, d, abi.Categorical) }

// oneBlockRow is block 0 of each draw of the categorical and filtered kernels: the whole
// row filtered (steps 1 to 7 of ABI.md "categorical") and its token drawn, by inverse
// CDF (categorical) or by Gumbel-max over the kept set (filtered). The other blocks of
// the draw return at once: block 0 may advance the row's step, which they must not be
// reading.
func oneBlockRow(b *runtime.BlockContext, d abi.DType, family string) {
	if b.Block.X != 0 {
		return
	}
	l, ok, bad := setup(b, d, family)
	if !ok {
		return
	}
	if bad {
		l.fail()
		return
	}
	// The worker's grow-only working memory lives in its block context (the Go
	// edition's shared memory), so a steady stream of launches allocates nothing.
	sc, _ := b.Scratch.(*catScratch)
	if sc == nil {
		sc = new(catScratch)
		b.Scratch = sc
	}

	raw, row, seen := sc.load(&l)
	// Step 1: the largest logit m and the observations.
	m, seen := rowMax(row, seen)
	tok, status := int32(-1), seenStatus(seen)
	switch {
	case status != abi.StatusOK:
	case l.p.Temperature == 0:
		// Temperature 0 is greedy on every path: the first index of the largest logit.
		t := firstIndexOf(row, m)
		if l.logprobs != nil {
			sc.record = greedyRecord(raw, row, t, l.proc.active)
		}
		tok = int32(t)
	case family == abi.Filtered:
		ks := sc.keep(&l.p, row, m)
		t := gumbelKept(&ks, row, l.p.Seed, stepPlus(&l.p, l.z))
		if l.logprobs != nil {
			sc.record = keptRecord(raw, row, t, m, ks.invT, ks.total, ks.f)
		}
		tok = int32(t)
	default:
		tok = int32(sc.drawKept(&l, raw, row, m))
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

// load returns the row as float32 (raw) and its processed logits (row, raw itself
// without processors), with what the mask hid from the observations.
func (sc *catScratch) load(l *launchRow) (raw, row []float32, s abi.Seen) {
	raw = l.logits.loadAll(&sc.vals)
	row = raw
	if l.proc.active {
		n := len(raw)
		sc.proc = grow(sc.proc, n)
		for i := 0; i < n; i += convertChunk {
			end := min(i+convertChunk, n)
			s |= l.proc.processGroup(raw[i:end], i, sc.proc[i:end])
		}
		row = sc.proc
	}
	return raw, row, s
}

// rowMax is the largest finite value of row (-Inf when none is), with the row's
// observations added to s.
func rowMax(row []float32, s abi.Seen) (float32, abi.Seen) {
	m := negInf
	for _, x := range row {
		if x-x != 0 {
			if x != negInf {
				s |= abi.SeenNonFinite
			}
			continue
		}
		s |= abi.SeenFinite
		m = max(m, x)
	}
	return m, s
}

// greedyRecord is the record of a temperature-0 row's token: its processed distribution
// is softmax(x') at temperature 1.
func greedyRecord(raw, row []float32, tok int, processed bool) [abi.RecordWords]float32 {
	rawLSE, procLSE := emptyLSE, emptyLSE
	rawLSE.add(raw)
	if processed {
		procLSE.add(row)
	} else {
		procLSE = rawLSE
	}
	return recordOf(raw[tok], row[tok], rawLSE, procLSE)
}

// exp32 is the float32 exp of the contract, rounded from float64 (like philox's logs).
func exp32(x float32) float32 { return float32(math.Exp(float64(x))) }

// fixed is the fixed-point weight q = uint64(w·2^F): exact scaling, truncation.
func fixed(w, twoPowF float32) uint64 { return uint64(w * twoPowF) }

// topKThreshold is Kk, the k-th largest of keys counting repeats. tmp must hold
// len(keys) entries.
func topKThreshold(keys []uint32, k uint32, tmp []uint32) uint32 {
	return radixSelect(keys, nil, uint64(k), tmp, nil)
}

// topPThreshold is Kp, the largest key t present in keys whose fixed-point mass over
// key ≥ t reaches the share topP of the mass z. tmpK and tmpQ must hold len(keys)
// entries.
func topPThreshold(keys []uint32, q []uint64, z uint64, topP float32, tmpK []uint32, tmpQ []uint64) uint32 {
	P := uint64(uint32(topP * 0x1p32))
	hi, lo := bits.Mul64(z, P)
	target := hi<<32 | lo>>32 // (z·P) >> 32
	return radixSelect(keys, q, target, tmpK, tmpQ)
}

// keptSet is a filtered row after steps 2 to 7 of the categorical kernel: the active set
// (after top-k) with its weights, the key threshold and the kept mass.
type keptSet struct {
	idx       []uint32  // the active set, in index order
	w         []float32 // weight of each active element
	keys      []uint32  // orderKey of every element (nil when no filter needs them)
	threshold uint32    // kept keys are at least this (0: no key filter)
	minP      float32   // kept weights are at least this (0: off)
	total     uint64    // S, the fixed-point mass of the kept set
	invT      float32
	f         int // F = 63 - bitlen(V)
	twoPowF   float32
}

// kept reports whether active element j (element i of the row) is kept.
func (k *keptSet) kept(j int, i uint32) bool {
	if k.threshold != 0 && k.keys[i] < k.threshold {
		return false
	}
	return k.minP == 0 || k.w[j] >= k.minP
}

// keep runs steps 2 to 7 of the categorical kernel (weights, top-k, Z, top-p, min-p, S)
// on a row with a finite largest processed logit m and a positive temperature.
func (sc *catScratch) keep(p *abi.RowParams, row []float32, m float32) keptSet {
	n := len(row)
	topK := p.TopK > 0 && uint64(p.TopK) < uint64(n)
	topP := p.TopP > 0 && p.TopP < 1
	ks := keptSet{invT: float32(1 / p.Temperature)}
	if p.MinP > 0 && p.MinP <= 1 {
		ks.minP = p.MinP
	}

	// Step 2: weights. F leaves room for V weights of at most 2^F in 63 bits.
	invT := ks.invT
	ks.f = 63 - bits.Len32(uint32(n))
	ks.twoPowF = float32(math.Ldexp(1, ks.f))
	// exp(d) < 2^-F below cutoff, so q = 0 there whatever exp32's last bit.
	cutoff := -float32(float64(ks.f)*math.Ln2 + 1)
	// weight is w(x) = exp32(fl(fl(x - m)·invT)), 0 for x = -Inf and below cutoff. A
	// closure called once, so that Go inlines it into the loop over the row.
	weight := func(x float32) float32 {
		d := float32(float32(x-m) * invT)
		if d < cutoff {
			return 0
		}
		return exp32(d)
	}

	// Step 3: the top-k threshold, and the active set: elements with key ≥ Kk.
	if topK || topP {
		sc.keys = grow(sc.keys, n)
		ks.keys = sc.keys
		for i, x := range row {
			ks.keys[i] = orderKey(x)
		}
	}
	var kk uint32
	sc.idx = grow(sc.idx, n)
	idx := sc.idx[:0]
	if topK {
		sc.tmpK = grow(sc.tmpK, n)
		kk = topKThreshold(ks.keys, p.TopK, sc.tmpK)
		for i, k := range ks.keys {
			if k >= kk {
				idx = append(idx, uint32(i))
			}
		}
	} else {
		for i := range row {
			idx = append(idx, uint32(i))
		}
	}
	ks.idx = idx

	// Step 4: Z, the fixed-point mass of the active set.
	sc.w = grow(sc.w, len(idx))
	ks.w = sc.w
	var z uint64
	for j, i := range idx {
		ks.w[j] = weight(row[i])
		z += fixed(ks.w[j], ks.twoPowF)
	}

	// Step 5: the top-p threshold, by mass over the active set.
	var kp uint32
	if topP {
		sc.keysA = grow(sc.keysA, len(idx))
		sc.q = grow(sc.q, len(idx))
		for j, i := range idx {
			sc.keysA[j] = ks.keys[i]
			sc.q[j] = fixed(ks.w[j], ks.twoPowF)
		}
		sc.tmpK = grow(sc.tmpK, len(idx))
		sc.tmpQ = grow(sc.tmpQ, len(idx))
		kp = topPThreshold(sc.keysA, sc.q, z, p.TopP, sc.tmpK, sc.tmpQ)
	}

	// Steps 6 and 7: the kept set and its mass.
	ks.threshold = max(kk, kp)
	for j, i := range idx {
		if ks.kept(j, i) {
			ks.total += fixed(ks.w[j], ks.twoPowF)
		}
	}
	return ks
}

// drawKept filters a row with a finite largest processed logit m and a positive
// temperature (steps 2 to 7) and draws its token by inverse CDF (step 8); with LOGPROBS
// it leaves the token's record in sc.record.
func (sc *catScratch) drawKept(l *launchRow, raw, row []float32, m float32) int {
	ks := sc.keep(&l.p, row, m)

	// Step 8: inverse CDF in index order with an exact integer target.
	u := philox.CategoricalUniform64(l.p.Seed, stepPlus(&l.p, l.z))
	target, _ := bits.Mul64(u, ks.total)
	var acc uint64
	tok := -1
	for j, i := range ks.idx {
		if ks.kept(j, i) {
			acc += fixed(ks.w[j], ks.twoPowF)
			if acc > target {
				tok = int(i)
				break
			}
		}
	}
	if tok < 0 {
		// Unreachable: the largest logit is always kept with q = 2^F > 0, so
		// total > 0 and target < total.
		tok = firstIndexOf(row, m)
	}
	if l.logprobs != nil {
		sc.record = keptRecord(raw, row, tok, m, ks.invT, ks.total, ks.f)
	}
	return tok
}

// keptRecord is the record of a categorical draw: the kept set renormalised (ABI.md),
// the token's weight exp(d) over the kept mass total·2^-F.
func keptRecord(raw, row []float32, tok int, m, invT float32, total uint64, f int) [abi.RecordWords]float32 {
	rawLSE := emptyLSE
	rawLSE.add(raw)
	logKept := math.Log(float64(total)) - float64(f)*math.Ln2
	d := float32(float32(row[tok]-m) * invT)
	return [abi.RecordWords]float32{
		float32(rawLSE.logprob(float64(raw[tok]))),
		float32(float64(d) - logKept),
		float32(rawLSE.value()),
		float32(float64(m)*float64(invT) + logKept),
	}
}
