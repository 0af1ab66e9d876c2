package gokernel

import (
	"math"
	"math/big"
	"math/bits"
	"sort"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/gumbel-go/gumbel/philox"
)

// This file is the brute-force reference: ABI.md's definitions written as plainly as
// possible, per element, with sorting where the kernels select by radix.

func refBadTemperature(t float32) bool {
	return math.IsNaN(float64(t)) || t < 0 || math.IsInf(float64(t), 0) || (t > 0 && math.IsInf(float64(float32(1/t)), 0))
}

// refStatus is the status that the row's contents alone decide (1 or 2), else -1.
func refStatus(row []float32) abi.Status {
	finite := false
	for _, x := range row {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 1) {
			return abi.StatusNonFinite
		}
		if !math.IsInf(float64(x), -1) {
			finite = true
		}
	}
	if !finite {
		return abi.StatusNoFinite
	}
	return -1
}

func refGreedy(row []float32) int32 {
	best := -1
	for i, x := range row {
		if !math.IsInf(float64(x), -1) && (best < 0 || x > row[best]) {
			best = i
		}
	}
	return int32(best)
}

func refGumbelArgmax(row []float32, p abi.RowParams) (int32, abi.Status) {
	if refBadTemperature(p.Temperature) {
		return -1, abi.StatusBadParams
	}
	if s := refStatus(row); s >= 0 {
		return -1, s
	}
	if p.Temperature == 0 {
		return refGreedy(row), abi.StatusOK
	}
	invT := float32(1 / p.Temperature)
	best, bestValue := -1, new(big.Float)
	for i, x := range row {
		if math.IsInf(float64(x), -1) {
			continue
		}
		v := refExactValue(x, invT, philox.ElementGumbel(p.Seed, p.Step, uint32(i)))
		if best < 0 || v.Cmp(bestValue) > 0 {
			best, bestValue = i, v
		}
	}
	return int32(best), abi.StatusOK
}

// refExactValue is an element's value under ABI.md's "Exact scores", in arbitrary
// precision: its float32 score below ExactScale, x·invT + g exactly from there on.
func refExactValue(x, invT, g float32) *big.Float {
	y := float32(x * invT)
	if math.Abs(float64(y)) < float64(abi.ExactScale) {
		return new(big.Float).SetFloat64(float64(float32(y + g)))
	}
	prod := new(big.Float).SetPrec(1024).SetFloat64(float64(x))
	prod.Mul(prod, new(big.Float).SetFloat64(float64(invT)))
	return prod.Add(prod, new(big.Float).SetFloat64(float64(g)))
}

func refKey(f float32) uint32 {
	b := math.Float32bits(f)
	if b>>31 == 1 {
		return b ^ 0xFFFFFFFF
	}
	return b ^ 0x80000000
}

func refCategorical(row []float32, p abi.RowParams) (int32, abi.Status) {
	tok, status, _ := refCategoricalKept(row, p)
	return tok, status
}

// refCategoricalKept is refCategorical that also returns the kept set (nil on the greedy
// and error paths).
func refCategoricalKept(row []float32, p abi.RowParams) (int32, abi.Status, []bool) {
	if refBadTemperature(p.Temperature) {
		return -1, abi.StatusBadParams, nil
	}
	if s := refStatus(row); s >= 0 {
		return -1, s, nil
	}
	if p.Temperature == 0 {
		return refGreedy(row), abi.StatusOK, nil
	}
	v := len(row)
	m := float32(math.Inf(-1))
	for _, x := range row {
		m = max(m, x)
	}
	invT := float32(1 / p.Temperature)
	f := 63 - bits.Len(uint(v))
	w := make([]float32, v)
	q := make([]uint64, v)
	key := make([]uint32, v)
	for i, x := range row {
		w[i] = float32(math.Exp(float64(float32(float32(x-m) * invT))))
		q[i] = uint64(float64(w[i]) * math.Ldexp(1, f))
		key[i] = refKey(x)
	}

	// top-k: the k-th largest key, counting repeats.
	var kk uint32
	if p.TopK > 0 && int(p.TopK) < v {
		sorted := append([]uint32(nil), key...)
		sort.Slice(sorted, func(a, b int) bool { return sorted[a] > sorted[b] })
		kk = sorted[p.TopK-1]
	}
	var z uint64
	for i := range row {
		if key[i] >= kk {
			z += q[i]
		}
	}

	// top-p: the largest present key t of the kept set whose mass at or above t
	// reaches the target.
	var kp uint32
	if p.TopP > 0 && p.TopP < 1 {
		P := uint64(uint32(float64(p.TopP) * (1 << 32)))
		hi, lo := bits.Mul64(z, P)
		target := hi<<32 | lo>>32
		var order []int // the kept set, largest key first
		for i := range row {
			if key[i] >= kk {
				order = append(order, i)
			}
		}
		sort.SliceStable(order, func(a, b int) bool { return key[order[a]] > key[order[b]] })
		var mass uint64
		for j, i := range order {
			mass += q[i]
			lastOfKey := j+1 == len(order) || key[order[j+1]] != key[i]
			if lastOfKey && mass >= target {
				kp = key[i]
				break
			}
		}
	}

	minP := p.MinP > 0 && p.MinP <= 1
	kept := func(i int) bool {
		return key[i] >= max(kk, kp) && (!minP || w[i] >= p.MinP)
	}
	var total uint64
	for i := range row {
		if kept(i) {
			total += q[i]
		}
	}
	u := philox.CategoricalUniform64(p.Seed, p.Step)
	target, _ := bits.Mul64(u, total)
	keptSet := make([]bool, v)
	for i := range row {
		keptSet[i] = kept(i)
	}
	var acc uint64
	for i := range row {
		if kept(i) {
			acc += q[i]
			if acc > target {
				return int32(i), abi.StatusOK, keptSet
			}
		}
	}
	return -2, -2, nil // never: the test fails on it
}

// refInputs are one logits row's processor inputs (nil: none).
type refInputs struct {
	bias   []float32
	counts []uint32
	mask   []uint32
	// bitmask is every token bitmask row; a row picks one with BitmaskRow.
	bitmask [][]uint32
}

func (p *problem) inputs(r uint32) refInputs {
	var in refInputs
	if int(r) < len(p.bias) {
		in.bias = p.bias[r]
	}
	if int(r) < len(p.counts) {
		in.counts = p.counts[r]
	}
	if int(r) < len(p.mask) {
		in.mask = p.mask[r]
	}
	in.bitmask = p.bitmask
	return in
}

// rnd rounds a float64 result of one operation on float32 values to float32: float64
// holds the exact result of a float32 +, -, * or / closely enough that this is the
// correctly rounded float32 operation.
func rnd(v float64) float32 { return float32(v) }

// refProcessed applies the row's processors as ABI.md lists them. status is 1 when a
// NaN or +Inf appears before the mask, 2 when nothing finite survives the mask, else -1.
func refProcessed(row []float32, p abi.RowParams, in refInputs) ([]float32, abi.Status) {
	out := make([]float32, len(row))
	nonFinite, finite := false, false
	for i, x := range row {
		if p.Flags&abi.FlagBias != 0 {
			x = rnd(float64(x) + float64(in.bias[i]))
		}
		if p.Flags&abi.FlagPenalties != 0 {
			c := in.counts[i]
			if c != 0 && p.RepetitionPenalty != 1 {
				if x > 0 {
					x = rnd(float64(x) / float64(p.RepetitionPenalty))
				} else {
					x = rnd(float64(x) * float64(p.RepetitionPenalty))
				}
			}
			if n := c & abi.CountMask; n > 0 {
				x = rnd(float64(x) - float64(rnd(float64(p.FrequencyPenalty)*float64(n))))
				x = rnd(float64(x) - float64(p.PresencePenalty))
			}
		}
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 1) {
			nonFinite = true
		}
		if p.Flags&abi.FlagMask != 0 && in.mask[i/32]&(1<<(i%32)) == 0 {
			x = float32(math.Inf(-1))
		}
		if p.Flags&abi.FlagBitmask != 0 && in.bitmask[p.BitmaskRow][i/32]&(1<<(i%32)) == 0 {
			x = float32(math.Inf(-1))
		}
		if !math.IsInf(float64(x), -1) && !math.IsNaN(float64(x)) {
			finite = true
		}
		out[i] = x
	}
	switch {
	case nonFinite:
		return out, abi.StatusNonFinite
	case !finite:
		return out, abi.StatusNoFinite
	}
	return out, -1
}

// refSample is one draw (draw z: step + z) of a kernel on the processed row.
func refSample(categorical bool, row []float32, p abi.RowParams, in refInputs, z int) (int32, abi.Status) {
	if refBadTemperature(p.Temperature) || (p.Flags&^abi.FlagBitmask)>>9 != 0 {
		return -1, abi.StatusBadParams
	}
	xp, st := refProcessed(row, p, in)
	if st >= 0 {
		return -1, st
	}
	p.Step += uint64(z)
	if categorical {
		return refCategorical(xp, p)
	}
	return refGumbelArgmax(xp, p)
}

// refSet is a set's log-sum-exp in float64, kept as its largest member m and
// Σ exp(v - m): -Inf and 0 for an empty set, +Inf for one holding +Inf.
type refSet struct{ m, s float64 }

func refSetOf(vs []float32) refSet {
	a := refSet{m: math.Inf(-1)}
	for _, v := range vs {
		a.m = math.Max(a.m, float64(v))
	}
	if math.IsInf(a.m, 0) {
		return a
	}
	for _, v := range vs {
		a.s += math.Exp(float64(v) - a.m)
	}
	return a
}

// lse is log Σ exp(v).
func (a refSet) lse() float64 {
	if math.IsInf(a.m, 0) {
		return a.m // empty, or a set holding +Inf
	}
	return a.m + math.Log(a.s)
}

// logprob is the log-probability of member v, (v - m) - log Σ exp(v - m): not v - lse(),
// which float64 cannot resolve once |m| passes 2^52 (two members at 3e38 give each
// -log 2, where 3e38 - fl(3e38 + log 2) reads 0).
func (a refSet) logprob(v float32) float64 {
	if math.IsInf(a.m, 0) {
		return float64(v) - a.m
	}
	return (float64(v) - a.m) - math.Log(a.s)
}

// refRecord is the log-probability record of a draw that returned tok with status 0,
// from float64 log-softmaxes of the definitions in ABI.md.
func refRecord(categorical bool, row []float32, p abi.RowParams, in refInputs, z int, tok int32) [4]float64 {
	xp, _ := refProcessed(row, p, in)
	raw := refSetOf(row)
	rec := [4]float64{raw.logprob(row[tok]), 0, raw.lse(), 0}
	if p.Temperature == 0 {
		proc := refSetOf(xp)
		rec[1], rec[3] = proc.logprob(xp[tok]), proc.lse()
		return rec
	}
	invT := float32(1 / p.Temperature)
	scaled := make([]float32, len(xp))
	if !categorical {
		for i, x := range xp {
			scaled[i] = rnd(float64(x) * float64(invT))
		}
		proc := refSetOf(scaled)
		rec[1], rec[3] = proc.logprob(scaled[tok]), proc.lse()
		return rec
	}
	// Categorical: renormalised over the kept set, taken relative to the largest
	// processed logit m as the kernel's weights are (x·invT itself may overflow).
	q := p
	q.Step += uint64(z)
	_, _, kept := refCategoricalKept(xp, q)
	m := float32(math.Inf(-1))
	for _, x := range xp {
		m = max(m, x)
	}
	for i, x := range xp {
		scaled[i] = float32(math.Inf(-1))
		if kept[i] {
			scaled[i] = rnd(float64(rnd(float64(x)-float64(m))) * float64(invT))
		}
	}
	renorm := refSetOf(scaled)
	rec[1], rec[3] = renorm.logprob(scaled[tok]), float64(m)*float64(invT)+renorm.lse()
	return rec
}

// refTopN is the top-N list of a row: tokens and values, sorted by key, largest first,
// ties to the lowest index, -Inf keys left out; N entries, padded with -1 and -Inf. The
// keys of a perturbed Gumbel row are the exact values of its finite x' (ABI.md, "Exact
// scores").
func refTopN(row []float32, p abi.RowParams, in refInputs) ([]int32, []float64) {
	n := int(p.TopN)
	keys := make([]float32, len(row))
	vals := make([]float32, len(row))
	var exact []*big.Float
	perturbed := p.Flags&abi.FlagPerturbed != 0
	if !perturbed {
		copy(keys, row)
		copy(vals, row)
	} else {
		xp, _ := refProcessed(row, p, in)
		copy(keys, xp)
		copy(vals, xp)
		if p.Temperature != 0 {
			invT := float32(1 / p.Temperature)
			exact = make([]*big.Float, len(row))
			for i, x := range xp {
				if !math.IsInf(float64(x), -1) {
					vals[i] = rnd(float64(x) * float64(invT))
					exact[i] = refExactValue(x, invT, philox.ElementGumbel(p.Seed, p.Step, uint32(i)))
				}
			}
		}
	}
	var order []int
	for i, k := range keys {
		if !math.IsInf(float64(k), -1) {
			order = append(order, i)
		}
	}
	sort.SliceStable(order, func(a, b int) bool {
		if exact != nil {
			return exact[order[a]].Cmp(exact[order[b]]) > 0
		}
		return keys[order[a]] > keys[order[b]]
	})
	set := refSetOf(vals)
	toks, values := make([]int32, n), make([]float64, n)
	for j := range n {
		toks[j], values[j] = -1, math.Inf(-1)
		if j < len(order) {
			toks[j], values[j] = int32(order[j]), set.logprob(vals[order[j]])
		}
	}
	return toks, values
}
