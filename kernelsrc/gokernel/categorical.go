package gokernel

import (
	"math"
	"math/bits"

	"github.com/gumbel-go/gumbel/half"
	"github.com/gumbel-go/gumbel/philox"
	"github.com/gumbel-go/gumbel/runtime"
)

// categoricalKernel returns categorical for one dtype: one block per row (blocks with
// Block.X > 0 do nothing).
func categoricalKernel(d dtype) runtime.GoKernel {
	return func(b *runtime.BlockContext) { categoricalBlock(b, d) }
}

// catScratch is one block's working memory, indexed by element (vals, keys) or by
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
	// record is the log-probability record of the last token sample returned with
	// status 0, when the row asked for one.
	record [4]float32
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

func categoricalBlock(b *runtime.BlockContext, d dtype) {
	l, ok, bad := setup(b, d, kindCategorical)
	if !ok || l.x != 0 {
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
	token, status := sc.sample(&l)
	l.finish(token, status)
	if l.logprobs != nil {
		if status == StatusOK {
			l.writeRecord(sc.record)
		} else {
			l.writeRecord(nanRecord)
		}
	}
	l.complete()
}

// exp32 is the float32 exp of the contract, rounded from float64 (like philox's logs).
func exp32(x float32) float32 { return float32(math.Exp(float64(x))) }

// sample runs the categorical steps of ABI.md on one row.
func (sc *catScratch) sample(l *launchRow) (int32, int32) {
	p := &l.p
	n := l.vocab
	row := l.logits.f
	switch l.logits.d {
	case f16:
		sc.vals = grow(sc.vals, n)
		for i, h := range l.logits.u16 {
			sc.vals[i] = half.Float16ToFloat32(h)
		}
		row = sc.vals
	case bf16:
		sc.vals = grow(sc.vals, n)
		for i, h := range l.logits.u16 {
			sc.vals[i] = half.BFloat16ToFloat32(h)
		}
		row = sc.vals
	}
	raw := row
	var flags uint32
	if l.proc.active {
		sc.proc = grow(sc.proc, n)
		for i := 0; i < n; i += convertChunk {
			end := min(i+convertChunk, n)
			flags |= l.proc.apply(row[i:end], i, sc.proc[i:end])
		}
		row = sc.proc
	}

	topK := p.topK > 0 && uint64(p.topK) < uint64(n)
	topP := p.topP > 0 && p.topP < 1
	minP := p.minP > 0 && p.minP <= 1

	// Step 1: the largest logit m and the row flags (and every key, for the filters).
	m := negInf
	var keys []uint32
	if topK || topP {
		sc.keys = grow(sc.keys, n)
		keys = sc.keys
		for i, x := range row {
			keys[i] = orderKey(x)
		}
	}
	for _, x := range row {
		if x-x != 0 {
			if x != negInf {
				flags |= flagNonFinite
			}
			continue
		}
		flags |= flagFinite
		m = max(m, x)
	}
	switch {
	case flags&flagNonFinite != 0:
		return -1, StatusNonFinite
	case flags&flagFinite == 0:
		return -1, StatusNoFinite
	}
	if p.temperature == 0 {
		// Temperature 0 is greedy on every path: the first index of the largest logit.
		tok := firstIndexOf(row, m)
		if l.logprobs != nil {
			rawLSE, procLSE := emptyLSE, emptyLSE
			rawLSE.add(raw)
			if l.proc.active {
				procLSE.add(row)
			} else {
				procLSE = rawLSE
			}
			sc.record = recordOf(raw[tok], row[tok], rawLSE, procLSE)
		}
		return int32(tok), StatusOK
	}

	// Step 2: weights. F leaves room for V weights of at most 2^F in 63 bits.
	invT := float32(1 / p.temperature)
	f := 63 - bits.Len32(uint32(n))
	scale := float32(math.Ldexp(1, f))
	// exp(d) < 2^-F below cutoff, so q = 0 there whatever exp32's last bit: skip it.
	cutoff := -float32(float64(f)*math.Ln2 + 1)
	weight := func(x float32) float32 {
		d := float32(float32(x-m) * invT)
		if d < cutoff {
			return 0
		}
		return exp32(d)
	}

	// Step 3: top-k threshold, and the active set: elements with key ≥ Kk.
	var kk uint32
	sc.idx = grow(sc.idx, n)
	idx := sc.idx[:0]
	if topK {
		sc.tmpK = grow(sc.tmpK, n)
		kk = radixSelect(keys, nil, uint64(p.topK), sc.tmpK, nil)
		for i, k := range keys {
			if k >= kk {
				idx = append(idx, uint32(i))
			}
		}
	} else {
		for i := range row {
			idx = append(idx, uint32(i))
		}
	}

	// Step 4: Z, the fixed-point mass of the active set.
	sc.w = grow(sc.w, len(idx))
	w := sc.w
	var z uint64
	for j, i := range idx {
		w[j] = weight(row[i])
		z += uint64(w[j] * scale)
	}

	// Step 5: top-p threshold, by mass over the active set.
	var kp uint32
	if topP {
		P := uint64(uint32(p.topP * 0x1p32))
		hi, lo := bits.Mul64(z, P)
		target := hi<<32 | lo>>32
		sc.keysA = grow(sc.keysA, len(idx))
		sc.q = grow(sc.q, len(idx))
		for j, i := range idx {
			sc.keysA[j] = keys[i]
			sc.q[j] = uint64(w[j] * scale)
		}
		sc.tmpK = grow(sc.tmpK, len(idx))
		sc.tmpQ = grow(sc.tmpQ, len(idx))
		kp = radixSelect(sc.keysA, sc.q, target, sc.tmpK, sc.tmpQ)
	}

	// Steps 6 and 7: the kept set and its mass.
	threshold := max(kk, kp)
	kept := func(j int, i uint32) bool {
		if threshold != 0 && keys[i] < threshold {
			return false
		}
		return !minP || w[j] >= p.minP
	}
	var total uint64
	for j, i := range idx {
		if kept(j, i) {
			total += uint64(w[j] * scale)
		}
	}

	// Step 8: inverse CDF in index order with an exact integer target.
	u := philox.CategoricalUniform64(p.seed, p.step+uint64(l.z)) // draw z: step + z
	target, _ := bits.Mul64(u, total)
	var acc uint64
	tok := -1
	for j, i := range idx {
		if kept(j, i) {
			acc += uint64(w[j] * scale)
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
		// The kept set renormalised (ABI.md): the token's weight exp(d) over the
		// kept mass S_kept·2^-F.
		rawLSE := emptyLSE
		rawLSE.add(raw)
		logKept := math.Log(float64(total)) - float64(f)*math.Ln2
		d := float32(float32(row[tok]-m) * invT)
		sc.record = [4]float32{
			float32(rawLSE.logprob(float64(raw[tok]))),
			float32(float64(d) - logKept),
			float32(rawLSE.value()),
			float32(float64(m)*float64(invT) + logKept),
		}
	}
	return int32(tok), StatusOK
}

// recordOf is a log-probability record: the token's raw logit x and processed value v,
// and the two log-normalisers.
func recordOf(x, v float32, raw, processed lse) [4]float32 {
	return [4]float32{
		float32(raw.logprob(float64(x))),
		float32(processed.logprob(float64(v))),
		float32(raw.value()),
		float32(processed.value()),
	}
}

func firstIndexOf(row []float32, v float32) int {
	for i, x := range row {
		if x == v {
			return i
		}
	}
	return 0
}

// radixSelect returns the largest key t present in keys whose mass Σ weight over
// key ≥ t is at least target (weights nil: every key weighs 1, so with target k it is the
// k-th largest key counting repeats). It picks 8-bit digits from the top, skipping empty
// bins. target must not exceed the total mass. tmpK (and tmpW when weights is set) must
// hold len(keys) entries.
func radixSelect(keys []uint32, weights []uint64, target uint64, tmpK []uint32, tmpW []uint64) uint32 {
	if len(keys) == 0 {
		return 0
	}
	var prefix, mask uint32
	var above uint64 // mass of the keys above the current prefix's range
	for shift := 24; shift >= 0; shift -= 8 {
		var count [256]uint32
		var mass [256]uint64
		if weights == nil {
			for _, k := range keys {
				if k&mask == prefix {
					count[k>>shift&0xff]++
				}
			}
			for d, c := range count {
				mass[d] = uint64(c)
			}
		} else {
			for j, k := range keys {
				if k&mask == prefix {
					d := k >> shift & 0xff
					count[d]++
					mass[d] += weights[j]
				}
			}
		}
		chosen := -1
		for d := 255; d >= 0; d-- {
			if count[d] == 0 {
				continue
			}
			chosen = d
			if above+mass[d] >= target {
				break
			}
			above += mass[d]
		}
		prefix |= uint32(chosen) << shift
		mask |= 0xff << shift
		if shift == 24 {
			// Later digits look only at the chosen bin: move it aside once.
			n := 0
			for j, k := range keys {
				if k&mask == prefix {
					tmpK[n] = k
					if weights != nil {
						tmpW[n] = weights[j]
					}
					n++
				}
			}
			keys = tmpK[:n]
			if weights != nil {
				weights = tmpW[:n]
			}
		}
	}
	return prefix
}
