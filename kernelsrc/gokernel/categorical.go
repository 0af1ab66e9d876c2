package gokernel

import (
	"cmp"
	"math"
	"math/bits"
	"slices"

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
	act   []float32 // the processed logit of each active element (top-k)
	w     []float32 // weight of each active element
	keysA []uint32  // key of each active element (top-k)
	q     []uint64  // fixed-point weight of each active element
	tmpK  []uint32  // radix select's candidates
	tmpQ  []uint64
	heap  []uint32 // keepFew: the k largest keys
	cand  []uint32 // keepFew: the elements that met the heap's smallest key
	// candK is the k whose candidates and Kk (candKk) rowMaxTopK left for this row's
	// keepFew, 0 when none are waiting.
	candK  int
	candKk uint32
	// candMinP says that cand holds the candidates rowMaxMinP left for this row's
	// min-p.
	candMinP bool
	order    []uint32 // keepFew: the active set by key
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
	// Step 1: the largest logit m and the observations; for a small top-k, keepFew's
	// candidates in the same pass.
	var m float32
	switch {
	case fewTopK(&l.p, len(row)) > 0:
		m, seen = sc.rowMaxTopK(row, seen, fewTopK(&l.p, len(row)))
	case minPAlone(&l.p, len(row)):
		m, seen = sc.rowMaxMinP(row, seen, &l.p)
	default:
		m, seen = rowMax(row, seen)
	}
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
			sc.record = ks.record(&l.p, raw, row, t, m)
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
// observations added to s. A row without NaN or +Inf, the usual one, takes one pass:
// scanBelow under +Inf where it runs in vector code (-Inf changes neither the largest
// finite value nor the observations), else a loop that ORs nonFinite beside the maximum
// (and leaves a row holding -Inf to the exact loop).
func rowMax(row []float32, s abi.Seen) (float32, abi.Seen) {
	if scanBelowVector {
		n, m := scanBelow(row, float32(math.Inf(1)))
		if n == len(row)&^3 {
			clean := true
			for _, x := range row[n:] {
				clean = clean && x < float32(math.Inf(1))
				m = max(m, x)
			}
			if clean {
				if m == 0 {
					for _, x := range row {
						m = max(m, x) // max's answer for signed zeros: +0 when the row holds one
					}
				}
				if m != negInf {
					s |= abi.SeenFinite
				}
				return m, s
			}
		}
	}
	m0, m1, m2, m3 := negInf, negInf, negInf, negInf
	var bad uint32
	i := 0
	for ; i+4 <= len(row); i += 4 {
		x0, x1, x2, x3 := row[i], row[i+1], row[i+2], row[i+3]
		bad |= nonFinite(x0) | nonFinite(x1) | nonFinite(x2) | nonFinite(x3)
		if x0 > m0 {
			m0 = x0
		}
		if x1 > m1 {
			m1 = x1
		}
		if x2 > m2 {
			m2 = x2
		}
		if x3 > m3 {
			m3 = x3
		}
	}
	for ; i < len(row); i++ {
		bad |= nonFinite(row[i])
		if row[i] > m0 {
			m0 = row[i]
		}
	}
	if bad == 0 {
		if len(row) == 0 {
			return negInf, s
		}
		m := max(m0, m1, m2, m3)
		if m == 0 {
			// max's answer for signed zeros: +0 when the row holds one.
			for _, x := range row {
				m = max(m, x)
			}
		}
		return m, s | abi.SeenFinite
	}
	return rowMaxExact(row, s)
}

// rowMaxExact is rowMax one element at a time: the reference the fast paths are checked
// against, and the path of rows holding a non-finite logit.
func rowMaxExact(row []float32, s abi.Seen) (float32, abi.Seen) {
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
	return radixSelect(keys, q, abi.TopPTarget(z, topP), tmpK, tmpQ)
}

// keptSet is a filtered row after steps 2 to 7 of the categorical kernel: the active set
// (after top-k) with its weights, the key threshold and the kept mass.
type keptSet struct {
	idx       []uint32  // the active set, in index order
	w         []float32 // weight of each active element
	q         []uint64  // fixed-point weight of each active element, fixed(w, 2^F)
	keys      []uint32  // orderKey of each active element (nil when no filter needs them)
	threshold uint32    // kept keys are at least this (0: no key filter)
	minP      float32   // kept weights are at least this (0: off)
	total     uint64    // S, the fixed-point mass of the kept set
	invT      float32
	f         int // F = 63 - bitlen(V)
	twoPowF   float32
}

// keptMass is S, the fixed-point mass of the kept elements.
func (k *keptSet) keptMass() uint64 {
	var total uint64
	for j := range k.idx {
		if k.kept(j) {
			total += k.q[j]
		}
	}
	return total
}

// kept reports whether active element j is kept.
func (k *keptSet) kept(j int) bool {
	if k.threshold != 0 && k.keys[j] < k.threshold {
		return false
	}
	return k.minP == 0 || k.w[j] >= k.minP
}

// newKeptSet is a kept set of a row of n elements with largest logit m before any
// filter has run (temperature, min-p and F: V weights of at most 2^F fit in 63 bits), and
// the weigher of its step 2.
func newKeptSet(p *abi.RowParams, n int, m float32) (keptSet, weigher) {
	ks := keptSet{invT: float32(1 / p.Temperature)}
	if p.MinP > 0 && p.MinP <= 1 {
		ks.minP = p.MinP
	}
	ks.f = 63 - bits.Len32(uint32(n))
	ks.twoPowF = float32(math.Ldexp(1, ks.f))
	return ks, weigher{m: m, invT: ks.invT, cutoff: weightCutoff(ks.f)}
}

// keep runs steps 2 to 7 of the categorical kernel (weights, top-k, Z, top-p, min-p, S)
// on a row with a finite largest processed logit m and a positive temperature: by
// keepFew or keepNucleus where they serve, else by keepRow.
func (sc *catScratch) keep(p *abi.RowParams, row []float32, m float32) keptSet {
	if ks, ok := sc.keepFew(p, row, m); ok {
		return ks
	}
	if ks, ok := sc.keepNucleus(p, row, m); ok {
		return ks
	}
	return sc.keepRow(p, row, m)
}

// keepRow is keep written as ABI.md states it, over the whole row: the reference that
// keepFew is checked against, and the path of the rows keepFew does not take.
func (sc *catScratch) keepRow(p *abi.RowParams, row []float32, m float32) keptSet {
	n := len(row)
	topK := p.TopK > 0 && uint64(p.TopK) < uint64(n)
	topP := p.TopP > 0 && p.TopP < 1
	// Step 2: weights.
	ks, wt := newKeptSet(p, n, m)

	// Step 3: the top-k threshold, and the active set: elements with key ≥ Kk.
	if topK || topP {
		sc.keys = grow(sc.keys, n)
		for i, x := range row {
			sc.keys[i] = orderKey(x)
		}
	}
	var kk uint32
	sc.idx = grow(sc.idx, n)
	idx := sc.idx[:0]
	if topK {
		sc.tmpK = grow(sc.tmpK, n)
		kk = topKThreshold(sc.keys, p.TopK, sc.tmpK)
		for i, k := range sc.keys {
			if k >= kk {
				idx = append(idx, uint32(i))
			}
		}
	} else {
		idx = idx[:n]
		for i := range idx {
			idx[i] = uint32(i)
		}
	}
	ks.idx = idx

	// Step 4: Z, the fixed-point mass of the active set, from the weights of its
	// elements side by side (weights runs in vector code where it can).
	xs := row
	if topK {
		sc.act = grow(sc.act, len(idx))
		for j, i := range idx {
			sc.act[j] = row[i]
		}
		xs = sc.act
	}
	sc.w, sc.q = grow(sc.w, len(idx)), grow(sc.q, len(idx))
	ks.w, ks.q = sc.w, sc.q
	z := weights(ks.w, ks.q, xs, wt, ks.twoPowF)

	// Step 5: the top-p threshold, by mass over the active set.
	var kp uint32
	switch {
	case topK:
		sc.keysA = grow(sc.keysA, len(idx))
		for j, i := range idx {
			sc.keysA[j] = sc.keys[i]
		}
		ks.keys = sc.keysA
	case topP:
		ks.keys = sc.keys // the active set is the row
	}
	if topP {
		sc.tmpK = grow(sc.tmpK, len(idx))
		sc.tmpQ = grow(sc.tmpQ, len(idx))
		kp = topPThreshold(ks.keys, ks.q, z, p.TopP, sc.tmpK, sc.tmpQ)
	}

	// Steps 6 and 7: the kept set and its mass, which is Z when nothing filters it.
	ks.threshold = max(kk, kp)
	ks.total = z
	if ks.threshold != 0 || ks.minP != 0 {
		ks.total = ks.keptMass()
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
		if ks.kept(j) {
			acc += ks.q[j]
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
		sc.record = ks.record(&l.p, raw, row, tok, m)
	}
	return tok
}

// record is what a categorical or filtered draw of token tok writes in its slot: the
// log-probability record, or with FlagKeptSet the kept set's descriptor.
func (k *keptSet) record(p *abi.RowParams, raw, row []float32, tok int, m float32) [abi.RecordWords]float32 {
	if p.Flags&abi.FlagKeptSet != 0 {
		return k.descriptor(p, row, m)
	}
	return keptRecord(raw, row, tok, m, k.invT, k.total, k.f)
}

// logKeptMass is ln(S·2^-F), the log-normaliser of a kept set of mass total relative to
// exp(fl((x' - m)·invT)).
func logKeptMass(total uint64, f int) float64 {
	return math.Log(float64(total)) - float64(f)*math.Ln2
}

// keptRecord is the record of a categorical draw: the kept set renormalised (ABI.md),
// the token's weight exp(d) over the kept mass total·2^-F.
func keptRecord(raw, row []float32, tok int, m, invT float32, total uint64, f int) [abi.RecordWords]float32 {
	rawLSE := emptyLSE
	rawLSE.add(raw)
	logKept := logKeptMass(total, f)
	d := float32(float32(row[tok]-m) * invT)
	return [abi.RecordWords]float32{
		float32(rawLSE.logprob(float64(raw[tok]))),
		float32(float64(d) - logKept),
		float32(rawLSE.value()),
		float32(float64(m)*float64(invT) + logKept),
	}
}

// descriptor is the kept set's descriptor (ABI.md, "The kept-set descriptor"): the key
// threshold's bits, the processed log-probability of the row's Token under the kept law
// (-Inf when it is not kept, NaN when it is no token), m and ln(S·2^-F).
func (k *keptSet) descriptor(p *abi.RowParams, row []float32, m float32) [abi.RecordWords]float32 {
	logKept := logKeptMass(k.total, k.f)
	lp := float32(math.NaN())
	if t := p.Token; uint64(t) < uint64(len(row)) {
		lp = negInf
		if x := row[t]; ruleOf(p, len(row), k.threshold, m).keeps(x) {
			lp = float32(float64(float32(float32(x-m)*k.invT)) - logKept)
		}
	}
	return [abi.RecordWords]float32{math.Float32frombits(k.threshold), lp, m, float32(logKept)}
}

// keptRule decides an element's place in a kept set from its processed logit alone, as
// keptSet.kept does: its key at least threshold and, with min-p, its weight at least
// minP. The residual kernel rebuilds it from a descriptor and its row's min_p.
type keptRule struct {
	threshold uint32
	minP      float32 // 0: off
	wt        weigher
}

// ruleOf is the kept-set rule of a sampled row of n elements with key threshold t and
// largest processed logit m.
func ruleOf(p *abi.RowParams, n int, t uint32, m float32) keptRule {
	f := 63 - bits.Len32(uint32(n))
	r := keptRule{threshold: t, wt: weigher{m: m, invT: float32(1 / p.Temperature), cutoff: weightCutoff(f)}}
	if p.MinP > 0 && p.MinP <= 1 {
		r.minP = p.MinP
	}
	return r
}

// keeps reports whether the element of processed logit x is kept.
func (r keptRule) keeps(x float32) bool {
	return orderKey(x) >= r.threshold && (r.minP == 0 || r.wt.weight(x) >= r.minP)
}

// fewKeys is the largest top-k that keepFew takes: it keeps a heap of k keys.
const fewKeys = 1024

// keepFew is keep for the rows whose kept set one scan can find, shaped for a CPU: top-k
// with k ≤ fewKeys (with or without top-p and min-p), and min-p alone. It returns the same
// kept set, weights, threshold and S as keep, over an active set that holds every kept
// element (top-k: exactly keep's, every key ≥ Kk; min-p alone: the elements whose scaled
// difference can pass min-p), and false for the other rows. keep's full-row passes (an
// order key per element, radix selects over the row, an exponential per element) are
// what a CPU pays most for; here one comparison per element remains.
func (sc *catScratch) keepFew(p *abi.RowParams, row []float32, m float32) (keptSet, bool) {
	n := len(row)
	topK := p.TopK > 0 && uint64(p.TopK) < uint64(n)
	topP := p.TopP > 0 && p.TopP < 1
	minP := p.MinP > 0 && p.MinP <= 1
	ks, wt := newKeptSet(p, n, m)

	var kk uint32
	switch {
	case topK && p.TopK <= fewKeys:
		if sc.candK == int(p.TopK) {
			kk = sc.candKk
		} else {
			kk = sc.topKCandidates(row, int(p.TopK))
		}
		sc.candK = 0
		idx := grow(sc.idx, len(row))[:0]
		for _, i := range sc.cand {
			if orderKey(row[i]) >= kk {
				idx = append(idx, i)
			}
		}
		sc.idx = idx
	case !topK && !topP && minP:
		dmin := minPBound(p.MinP)
		lim := minPLimit(m, dmin, ks.invT)
		idx := grow(sc.idx, len(row))[:0]
		if sc.candMinP {
			// rowMaxMinP's candidates hold every element at or above lim.
			for _, i := range sc.cand {
				if x := row[i]; x >= lim && float32(float32(x-m)*ks.invT) >= dmin {
					idx = append(idx, i)
				}
			}
		} else {
			for i, x := range row {
				if x >= lim && float32(float32(x-m)*ks.invT) >= dmin {
					idx = append(idx, uint32(i))
				}
			}
		}
		sc.candMinP = false
		sc.idx = idx
	default:
		return ks, false
	}
	ks.idx = sc.idx

	// Steps 4 to 7 of keep, on the active set.
	sc.w, sc.q = grow(sc.w, len(ks.idx)), grow(sc.q, len(ks.idx))
	ks.w, ks.q = sc.w, sc.q
	var z uint64
	for j, i := range ks.idx {
		ks.w[j] = wt.weight(row[i])
		ks.q[j] = fixed(ks.w[j], ks.twoPowF)
		z += ks.q[j]
	}
	var kp uint32
	if topK {
		sc.keysA = grow(sc.keysA, len(ks.idx))
		ks.keys = sc.keysA
		for j, i := range ks.idx {
			ks.keys[j] = orderKey(row[i])
		}
		if topP {
			kp = topPSorted(ks.keys, ks.q, z, p.TopP, &sc.order)
		}
	}
	ks.threshold = max(kk, kp)
	ks.total = ks.keptMass()
	return ks, true
}

// keepNucleus is keep for the rows whose only key filter is top-p (min-p may join it),
// and false for the others. Z needs every element's weight, but Kp only the heaviest
// elements' keys: rather than an order key per element and a radix select over the row,
// it looks for a cut lim whose elements x ≥ lim already carry the target mass, and
// selects Kp among them alone. That is keep's Kp: the keys of the other elements lie
// below the smallest of theirs, t, whose mass over keys ≥ t already reaches the target,
// so Kp ≥ t, and over keys ≥ t the two selects see the same keys and masses. The active
// set is the candidates, which hold every kept element. A row whose cuts find no such
// set of at most n/nucleusShare elements takes the full select, on the weights already
// computed. keepRow, the full select throughout, is the reference it is checked against.
func (sc *catScratch) keepNucleus(p *abi.RowParams, row []float32, m float32) (keptSet, bool) {
	n := len(row)
	if p.TopK > 0 && uint64(p.TopK) < uint64(n) || !(p.TopP > 0 && p.TopP < 1) {
		return keptSet{}, false
	}
	ks, wt := newKeptSet(p, n, m)

	// The candidates of the first cut, nucleusCut, which holds the nucleus of most LLM
	// rows. Any lim ≤ m is correct once the candidates' mass is checked; the cut only
	// decides how many there are.
	limit := n / nucleusShare
	idx, ok := nucleusCandidates(row, nucleusLimit(m, nucleusCut, ks.invT), grow(sc.idx, n), limit)
	sc.idx = idx

	sc.w, sc.q = grow(sc.w, n), grow(sc.q, n)
	z := weights(sc.w, sc.q, row, wt, ks.twoPowF)
	target := abi.TopPTarget(z, p.TopP)
	if ok && candidateMass(idx, sc.q) < target {
		// The second cut: the d below which the n elements' weights, each at most
		// exp(d), could not make up z - target (less a margin for roundings), and not
		// below the cutoff, under which weights are 0.
		d := math.Log(float64(z-target)/(float64(n)*float64(ks.twoPowF))) - 0.5
		d = max(d, float64(wt.cutoff)-0.5)
		ok = d < nucleusCut
		if ok {
			idx, ok = nucleusCandidates(row, nucleusLimit(m, d, ks.invT), grow(sc.idx, n), limit)
			sc.idx = idx
			ok = ok && candidateMass(idx, sc.q) >= target
		}
	}
	if ok && len(idx) > 0 {
		// The candidates' weights, moved to the front (j ≤ i), and their keys.
		sc.keysA = grow(sc.keysA, len(idx))
		for j, i := range idx {
			sc.w[j], sc.q[j] = sc.w[i], sc.q[i]
			sc.keysA[j] = orderKey(row[i])
		}
		ks.idx, ks.w, ks.q, ks.keys = idx, sc.w[:len(idx)], sc.q[:len(idx)], sc.keysA
		sc.tmpK, sc.tmpQ = grow(sc.tmpK, len(idx)), grow(sc.tmpQ, len(idx))
		ks.threshold = radixSelect(ks.keys, ks.q, target, sc.tmpK, sc.tmpQ)
		ks.total = ks.keptMass()
		return ks, true
	}

	// keepRow's steps 3, 5 to 7 for top-p without top-k, on the weights above.
	sc.idx, sc.keys = grow(sc.idx, n), grow(sc.keys, n)
	for i, x := range row {
		sc.idx[i] = uint32(i)
		sc.keys[i] = orderKey(x)
	}
	ks.idx, ks.w, ks.q, ks.keys = sc.idx, sc.w, sc.q, sc.keys
	sc.tmpK, sc.tmpQ = grow(sc.tmpK, n), grow(sc.tmpQ, n)
	ks.threshold = radixSelect(ks.keys, ks.q, target, sc.tmpK, sc.tmpQ)
	ks.total = ks.keptMass()
	return ks, true
}

// nucleusCut is keepNucleus's first cut, in d: the weights below it are under
// exp(-8) ≈ 3.4e-4 of the largest.
const nucleusCut = -8

// nucleusShare bounds keepNucleus's candidates to n/nucleusShare: a row that dense near
// its maximum has a wide nucleus, which the full select serves, and listing stops early.
const nucleusShare = 16

// nucleusLimit is the logit of d = fl(fl(x - m)·invT) = d, roughly, and at most m; NaN
// when it is out of float32's finite range.
func nucleusLimit(m float32, d float64, invT float32) float32 {
	lim := min(float32(float64(m)+d/float64(invT)), m)
	if !(lim >= -math.MaxFloat32) {
		return float32(math.NaN())
	}
	return lim
}

// nucleusCandidates lists the elements of row at least lim, in index order, in idx's
// storage; false when they would exceed limit or lim is NaN. Whole groups of four below
// lim pass at once (scanBelow).
func nucleusCandidates(row []float32, lim float32, idx []uint32, limit int) ([]uint32, bool) {
	idx = idx[:0]
	if lim != lim {
		return idx, false
	}
	for i := 0; i < len(row); {
		k, _ := scanBelow(row[i:], lim)
		i += k
		for end := min(i+4, len(row)); i < end; i++ {
			if row[i] >= lim {
				if len(idx) == limit {
					return idx, false
				}
				idx = append(idx, uint32(i))
			}
		}
	}
	return idx, true
}

// candidateMass is Σ q over the elements idx.
func candidateMass(idx []uint32, q []uint64) uint64 {
	var mass uint64
	for _, i := range idx {
		mass += q[i]
	}
	return mass
}

// minPBound is the d = fl(fl(x - m)·invT) below which min-p keeps nothing: w =
// exp32(d) ≥ min_p needs d ≥ ln(min_p), and the margin covers exp32's and log's last
// places many times over, so no kept element is left out.
func minPBound(minP float32) float32 { return float32(math.Log(float64(minP)))*1.0001 - 1e-3 }

// minPLimit is a logit below which d stays under dmin, by a margin far above the
// roundings of d, for the row maximum m: the scans compare logits, and only the elements
// they pass pay for d. It grows with m.
func minPLimit(m, dmin, invT float32) float32 {
	return math.Nextafter32(float32(float64(m)+(float64(dmin)-0.01)/float64(invT)), negInf)
}

// minPAlone reports whether a sampled row's only filter is min-p, which keepFew takes
// from rowMaxMinP's candidates.
func minPAlone(p *abi.RowParams, n int) bool {
	return p.Temperature != 0 && p.MinP > 0 && p.MinP <= 1 && !(p.TopK > 0 && uint64(p.TopK) < uint64(n)) &&
		!(p.TopP > 0 && p.TopP < 1)
}

// rowMaxMinP is rowMax and min-p's candidates in one pass over a row of finite values:
// an element is a candidate when it reaches minPLimit of the running maximum, which only
// grows, so every element that reaches the limit of the row's maximum is one. Most
// elements cost one comparison. A row holding NaN or an infinity takes rowMax, and
// keepFew then scans the row itself.
func (sc *catScratch) rowMaxMinP(row []float32, s abi.Seen, p *abi.RowParams) (float32, abi.Seen) {
	invT := float32(1 / p.Temperature)
	dmin := minPBound(p.MinP)
	cand := grow(sc.cand, len(row))[:0] // sized once: no growth on the hot path
	m, lim := negInf, negInf
	var bad uint32
	for i := 0; i < len(row); {
		// Whole groups of four below the limit (which lies below m) hold no candidate,
		// cannot raise m and hold no NaN or +Inf; a -Inf among them, which the element
		// loop would count as bad, changes nothing the fused pass gives (the tests
		// compare it with the reference on rows of -Inf).
		n, _ := scanBelow(row[i:], lim)
		i += n
		for end := min(i+4, len(row)); i < end; i++ {
			x := row[i]
			bad |= nonFinite(x)
			if x >= lim {
				if x > m {
					m, lim = x, minPLimit(x, dmin, invT)
				}
				cand = append(cand, uint32(i))
			}
		}
	}
	sc.cand, sc.candMinP = cand, false
	if bad != 0 || len(row) == 0 {
		return rowMax(row, s)
	}
	if m == 0 {
		for _, x := range row {
			m = max(m, x) // max's answer for signed zeros: +0 when the row holds one
		}
	}
	sc.candMinP = true
	return m, s | abi.SeenFinite
}

// fewTopK is the k of a sampled row whose kept set keepFew finds from a heap of the k
// largest keys, 0 for other rows.
func fewTopK(p *abi.RowParams, n int) int {
	if p.Temperature == 0 || p.TopK == 0 || uint64(p.TopK) >= uint64(n) || p.TopK > fewKeys {
		return 0
	}
	return int(p.TopK)
}

// nonFinite has its top bit set when x is ±Inf or NaN (exponent all ones): integer
// operations without a branch, so that a scan ORs it over the row and tests once.
func nonFinite(x float32) uint32 {
	return (math.Float32bits(x)&0x7FFFFFFF + 0x00800000) & 0x80000000
}

// rowMaxTopK is rowMax and topKCandidates in one pass over a row of finite values (any
// other row takes them one after the other), leaving the candidates for keepFew. Most
// elements cost two comparisons, with the maximum and with the heap's floor: a NaN or
// +Inf passes the floor (NaN fails every comparison, so it is not below it), so the
// candidates' path is where they are caught.
func (sc *catScratch) rowMaxTopK(row []float32, s abi.Seen, k int) (float32, abi.Seen) {
	heap := grow(sc.heap, k)[:0]
	cand := grow(sc.cand, len(row))[:0] // sized once: no growth on the hot path
	m, bad := negInf, false
	for i := range k {
		x := row[i]
		bad = bad || x-x != 0 && x != negInf
		m = max(m, x)
		cand = append(cand, uint32(i))
		heap = heapPush(heap, orderKey(x))
	}
	floor := orderKeyInverse(heap[0])
	for i := k; i < len(row); {
		// Whole groups of four below the floor hold no candidate, no NaN and no +Inf:
		// scanBelow passes them at a few instructions per group (AVX2 or SSE on
		// amd64, NEON on arm64), and the group that stops it is taken element by
		// element.
		n, top := scanBelow(row[i:], floor)
		if top > m {
			m = top
		}
		i += n
		for end := min(i+4, len(row)); i < end; i++ {
			x := row[i]
			if x > m {
				m = x
			}
			if x < floor {
				continue
			}
			if x-x != 0 && x != negInf {
				bad = true
				continue
			}
			cand, floor = offer(heap, cand, x, i)
		}
	}
	sc.heap, sc.cand = heap, cand
	if bad || m == negInf || math.IsInf(float64(floor), -1) {
		// NaN or +Inf somewhere, no finite value, or -Inf among the k largest: the exact
		// observations first, then the candidates again if the row samples.
		m, s = rowMax(row, s)
		if seenStatus(s) == abi.StatusOK {
			sc.candKk, sc.candK = sc.topKCandidates(row, k), k
		}
		return m, s
	}
	if m == 0 {
		for _, x := range row {
			m = max(m, x) // max's answer for signed zeros: +0 when the row holds one
		}
	}
	sc.candKk, sc.candK = heap[0], k
	return m, s | abi.SeenFinite
}

// offer lists element i, of value x at least the heap's smallest key's value, among the
// candidates, and puts its key in the heap of the k largest when it beats the smallest;
// it returns the candidates and the value of the heap's smallest key.
func offer(heap, cand []uint32, x float32, i int) ([]uint32, float32) {
	cand = append(cand, uint32(i))
	if key := orderKey(x); key > heap[0] {
		heap[0] = key
		heapDown(heap)
	}
	return cand, orderKeyInverse(heap[0])
}

// topKCandidates scans row once for the k largest keys (a min-heap of k keys) and returns
// Kk, the k-th largest counting repeats, leaving in sc.cand, in index order, every element
// that was at least the heap's smallest key when the scan met it: a superset of the
// elements with key ≥ Kk (the heap's smallest key only grows). The row holds no NaN or
// +Inf (its status is 0); whole groups of four below that key's value pass at once.
func (sc *catScratch) topKCandidates(row []float32, k int) uint32 {
	heap := grow(sc.heap, k)[:0]
	cand := grow(sc.cand, len(row))[:0]
	for i := range k {
		cand = append(cand, uint32(i))
		heap = heapPush(heap, orderKey(row[i]))
	}
	floor := orderKeyInverse(heap[0]) // the value of the heap's smallest key
	for i := k; i < len(row); {
		n, _ := scanBelow(row[i:], floor)
		i += n
		for end := min(i+4, len(row)); i < end; i++ {
			if x := row[i]; x >= floor {
				cand, floor = offer(heap, cand, x, i)
			}
		}
	}
	sc.heap, sc.cand = heap, cand
	return heap[0]
}

// heapPush adds key to the min-heap h.
func heapPush(h []uint32, key uint32) []uint32 {
	h = append(h, key)
	for c := len(h) - 1; c > 0; {
		parent := (c - 1) / 2
		if h[parent] <= h[c] {
			break
		}
		h[parent], h[c] = h[c], h[parent]
		c = parent
	}
	return h
}

// heapDown restores the min-heap h after its root grew.
func heapDown(h []uint32) {
	for p := 0; ; {
		c := 2*p + 1
		if c >= len(h) {
			return
		}
		if c+1 < len(h) && h[c+1] < h[c] {
			c++
		}
		if h[p] <= h[c] {
			return
		}
		h[p], h[c] = h[c], h[p]
		p = c
	}
}

// topPSorted is topPThreshold over a short active set (keys and fixed-point weights per
// element): the keys in descending order, and Kp the first whose running fixed-point
// mass reaches the target, which is radixSelect's answer (the largest key whose mass
// over keys ≥ it reaches the target). order is scratch.
func topPSorted(keys []uint32, q []uint64, z uint64, topP float32, order *[]uint32) uint32 {
	target := abi.TopPTarget(z, topP)
	o := grow(*order, len(keys))
	for j := range o {
		o[j] = uint32(j)
	}
	*order = o
	slices.SortFunc(o, func(a, b uint32) int { return cmp.Compare(keys[b], keys[a]) })
	var acc uint64
	for _, j := range o {
		acc += q[j]
		if acc >= target {
			return keys[j]
		}
	}
	return keys[o[len(o)-1]] // unreachable: the target never exceeds z
}

// weigher is the weight w(x) = exp32(fl(fl(x - m)·invT)) of ABI.md's categorical step 2,
// 0 for x = -Inf and below cutoff (where q = 0 whatever exp32's last bit).
type weigher struct{ m, invT, cutoff float32 }

// weightCutoff is the d below which exp(d) < 2^-F, F = f: -(F ln 2 + 1) in float32
// arithmetic, each operation rounded, as the GPU editions compute it (the conversions
// keep Go from fusing them).
func weightCutoff(f int) float32 {
	const ln2 = float32(0.6931472)
	return -float32(float32(float32(f)*ln2) + 1)
}

func (wt weigher) weight(x float32) float32 {
	d := float32(float32(x-wt.m) * wt.invT)
	if d < wt.cutoff {
		return 0
	}
	return exp32(d)
}
