package sampler

import (
	"math"
	"math/bits"
	"sort"

	"github.com/gumbel-go/gumbel/philox"
)

// This file is an independent host reference of kernelsrc/ABI.md, written from the
// specification (not from any kernel edition), against which the device's tokens are
// checked. It favours plainness over speed: sorting where the kernels radix-select.

// refOrderKey is the ABI's order-preserving map of a float32 to a uint32.
func refOrderKey(f float32) uint32 {
	b := math.Float32bits(f)
	if b>>31 != 0 {
		return ^b
	}
	return b ^ 0x80000000
}

// refPack is the ABI's packed (score, index) key: the largest wins, ties to the lowest
// index.
func refPack(score float32, index int) uint64 {
	return uint64(refOrderKey(score))<<32 | uint64(0xFFFFFFFF-uint32(index))
}

// refFlags returns the status that ends a row before sampling (1: NaN or +Inf, 2: no
// finite logit) or 0.
func refFlags(row []float32) uint32 {
	finite := false
	for _, x := range row {
		switch {
		case x != x || math.IsInf(float64(x), 1):
			return 1
		case !math.IsInf(float64(x), -1):
			finite = true
		}
	}
	if !finite {
		return 2
	}
	return 0
}

// refGumbelArgmax is gumbel_argmax for one row: temperature 0 is greedy.
func refGumbelArgmax(row []float32, temperature float32, seed, step uint64) (int32, uint32) {
	if st := refFlags(row); st != 0 {
		return -1, st
	}
	var best uint64
	invT := float32(1 / temperature)
	for i, x := range row {
		score := x
		if temperature != 0 && !math.IsInf(float64(x), -1) {
			score = philox.Score(x, invT, philox.ElementGumbel(seed, step, uint32(i)))
		}
		best = max(best, refPack(score, i))
	}
	return int32(0xFFFFFFFF - uint32(best)), 0
}

// refCategorical is the categorical kernel for one row.
func refCategorical(row []float32, temperature float32, topK int, topP, minP float32, seed, step uint64) (int32, uint32) {
	token, status, _ := refCategoricalKept(row, temperature, topK, topP, minP, seed, step)
	return token, status
}

// refKeptSet is steps 1 to 7 of the categorical kernel (ABI "categorical") for a row
// whose status is 0: kept[i] says whether element i is in the kept set, q[i] is its
// fixed-point weight and total S the kept set's fixed-point mass. The filtered route
// keeps exactly the same set.
type refKeptSet struct {
	kept  []bool
	q     []uint64
	total uint64
}

// refKeep computes the kept set of a row with at least one finite logit and no NaN or
// +Inf, at a positive temperature.
func refKeep(row []float32, temperature float32, topK int, topP, minP float32) refKeptSet {
	v := len(row)
	m := float32(math.Inf(-1))
	for _, x := range row {
		m = max(m, x)
	}
	invT := float32(1 / temperature)
	scale := float32(math.Ldexp(1, 63-bits.Len(uint(v))))
	w := make([]float32, v)
	q := make([]uint64, v)
	keys := make([]uint32, v)
	for i, x := range row {
		keys[i] = refOrderKey(x)
		if math.IsInf(float64(x), -1) {
			continue
		}
		d := float32(x - m)
		w[i] = float32(math.Exp(float64(float32(d * invT))))
		q[i] = uint64(float32(w[i] * scale))
	}
	order := make([]int, v)
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return keys[order[a]] > keys[order[b]] })

	var kk uint32
	if topK > 0 && topK < v {
		kk = keys[order[topK-1]]
	}
	var z uint64
	for i := range row {
		if keys[i] >= kk {
			z += q[i]
		}
	}
	var kp uint32
	if topP > 0 && topP < 1 {
		p := uint64(uint32(float32(topP * 0x1p32)))
		hi, lo := bits.Mul64(z, p)
		target := hi<<32 | lo>>32
		// Walk the distinct kept keys from the top, adding each key's whole mass;
		// the first whose mass at or above it reaches the target is Kp.
		var mass uint64
		for j := 0; j < v && keys[order[j]] >= kk; {
			t := keys[order[j]]
			for ; j < v && keys[order[j]] == t; j++ {
				mass += q[order[j]]
			}
			if mass >= target {
				kp = t
				break
			}
		}
	}
	threshold := max(kk, kp)
	ks := refKeptSet{kept: make([]bool, v), q: q}
	for i := range row {
		ks.kept[i] = keys[i] >= threshold && (minP == 0 || w[i] >= minP)
		if ks.kept[i] {
			ks.total += q[i]
		}
	}
	return ks
}

// refCategoricalKept is refCategorical that also returns the integer kept sum S of step
// 7, which the log-probability record uses.
func refCategoricalKept(row []float32, temperature float32, topK int, topP, minP float32, seed, step uint64) (int32, uint32, uint64) {
	if st := refFlags(row); st != 0 {
		return -1, st, 0
	}
	ks := refKeep(row, temperature, topK, topP, minP)
	target, _ := bits.Mul64(philox.CategoricalUniform64(seed, step), ks.total)
	var prefix uint64
	for i := range row {
		if ks.kept[i] {
			prefix += ks.q[i]
			if prefix > target {
				return int32(i), 0, ks.total
			}
		}
	}
	panic("reference: no token drawn")
}

// refFiltered is the filtered route for one row: the categorical kernel's kept set
// (steps 1 to 7), then Gumbel-max over it: the kept element with the largest score
// fl(fl(x·invT) + g), g being gumbel_argmax's noise for that element at the step (the
// PurposeGumbel word, extended by the PurposeGumbelTail word below the tail threshold),
// ties to the lowest index.
func refFiltered(row []float32, temperature float32, topK int, topP, minP float32, seed, step uint64) (int32, uint32) {
	if st := refFlags(row); st != 0 {
		return -1, st
	}
	ks := refKeep(row, temperature, topK, topP, minP)
	invT := float32(1 / temperature)
	var best uint64
	found := false
	for i, x := range row {
		if !ks.kept[i] {
			continue
		}
		w := philox.Word(seed, step, uint32(i), philox.PurposeGumbel)
		var tail uint32
		if w < philox.TailThreshold {
			tail = philox.Word(seed, step, uint32(i), philox.PurposeGumbelTail)
		}
		best = max(best, refPack(philox.Score(x, invT, philox.Gumbel(w, tail)), i))
		found = true
	}
	if !found {
		panic("reference: empty kept set")
	}
	return int32(0xFFFFFFFF - uint32(best)), 0
}

// refTopK returns the top-k a row's kernels see: top-k >= V is off.
func refTopK(p Params, vocab int) int {
	if p.TopK >= vocab {
		return 0
	}
	return p.TopK
}

// refSample samples one row as the sampler should, given the route the row takes. A
// sampled row needs its own seed or a request id: the seed of a row with neither is
// fresh randomness the reference cannot know.
func refSample(row []float32, p Params, r Route, samplerSeed uint64) (int32, uint32) {
	seed := p.Seed
	if !hasSeed(p) {
		seed = philox.RowSeed(samplerSeed, p.RequestID)
	}
	switch r {
	case RouteGreedy:
		return refGumbelArgmax(row, 0, seed, p.Step)
	case RouteGumbel:
		return refGumbelArgmax(row, p.Temperature, seed, p.Step)
	case RouteFiltered:
		return refFiltered(row, p.Temperature, refTopK(p, len(row)), p.TopP, p.MinP, seed, p.Step)
	}
	return refCategorical(row, p.Temperature, refTopK(p, len(row)), p.TopP, p.MinP, seed, p.Step)
}

// Processed logits, log-probability records, top-n lists and Gumbel-top-k.

// refProcessors is one row's processor state as the reference applies it: nil slices
// are off.
type refProcessors struct {
	bias    []float32 // vocab entries
	counts  []uint32  // vocab entries: bit 31 prompt, low bits output count
	allowed []bool    // vocab entries
}

// refProcess returns row's processed logits x' (ABI "Processed logits"), every operation
// rounded to float32 on its own.
func refProcess(row []float32, pr refProcessors, p Params) []float32 {
	rep := p.RepetitionPenalty
	if rep == 0 {
		rep = 1
	}
	out := make([]float32, len(row))
	for i, x := range row {
		if pr.bias != nil {
			x = float32(x + pr.bias[i])
		}
		if pr.counts != nil {
			c := pr.counts[i]
			if c != 0 && rep != 1 {
				if x > 0 {
					x = float32(x / rep)
				} else {
					x = float32(x * rep)
				}
			}
			if o := c & 0x7FFFFFFF; o > 0 {
				x = float32(x - float32(p.FrequencyPenalty*float32(o)))
				x = float32(x - p.PresencePenalty)
			}
		}
		if pr.allowed != nil && !pr.allowed[i] {
			x = float32(math.Inf(-1))
		}
		out[i] = x
	}
	return out
}

// refLSE is the float64 log-sum-exp of xs; -Inf when every member is -Inf.
func refLSE(xs []float64) float64 {
	m := math.Inf(-1)
	for _, x := range xs {
		m = max(m, x)
	}
	if math.IsInf(m, -1) {
		return m
	}
	var sum float64
	for _, x := range xs {
		sum += math.Exp(x - m)
	}
	return m + math.Log(sum)
}

// widen converts float32 values to float64, each optionally scaled by invT in float32
// first (the ABI's fl(x * invT)).
func widen(xs []float32, invT float32, scale bool) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		if scale {
			x = float32(x * invT)
		}
		out[i] = float64(x)
	}
	return out
}

// refRecord is the log-probability record of token tok of a row whose raw logits are raw
// and processed logits proc, drawn by route r with params p (ABI "The log-probability
// record"). Categorical and filtered rows share one record: the kept set's.
func refRecord(raw, proc []float32, tok int32, r Route, p Params) Logprob {
	rawLSE := refLSE(widen(raw, 1, false))
	rec := Logprob{Raw: float32(float64(raw[tok]) - rawLSE), RawLSE: float32(rawLSE)}
	switch r {
	case RouteGreedy:
		lse := refLSE(widen(proc, 1, false))
		rec.Processed, rec.ProcessedLSE = float32(float64(proc[tok])-lse), float32(lse)
	case RouteGumbel:
		invT := float32(1 / p.Temperature)
		lse := refLSE(widen(proc, invT, true))
		rec.Processed, rec.ProcessedLSE = float32(float64(float32(proc[tok]*invT))-lse), float32(lse)
	case RouteCategorical, RouteFiltered:
		// The filtered route's record is the categorical one: the same kept set.
		kept := refKeep(proc, p.Temperature, refTopK(p, len(raw)), p.TopP, p.MinP).total
		m := float32(math.Inf(-1))
		for _, x := range proc {
			m = max(m, x)
		}
		invT := float32(1 / p.Temperature)
		lnS := math.Log(float64(kept)) - float64(63-bits.Len(uint(len(raw))))*math.Ln2
		rec.Processed = float32(float64(float32(float32(proc[tok]-m)*invT)) - lnS)
		rec.ProcessedLSE = float32(float64(m)*float64(invT) + lnS)
	}
	return rec
}

// refTop returns the n largest raw logits' tokens and raw log-probabilities, largest
// first, ties to the lowest index, -Inf logits left out.
func refTop(raw []float32, n int) ([]int32, []float32) {
	lse := refLSE(widen(raw, 1, false))
	order := make([]int, 0, len(raw))
	for i, x := range raw {
		if !math.IsInf(float64(x), -1) {
			order = append(order, i)
		}
	}
	sort.SliceStable(order, func(a, b int) bool { return raw[order[a]] > raw[order[b]] })
	order = order[:min(n, len(order))]
	tokens, values := make([]int32, len(order)), make([]float32, len(order))
	for j, i := range order {
		tokens[j], values[j] = int32(i), float32(float64(raw[i])-lse)
	}
	return tokens, values
}

// refGumbelTopK returns the n largest Gumbel scores' tokens of a processed row at
// (seed, step), largest first (greedy rows rank x' itself): the ABI's perturbed topn.
func refGumbelTopK(proc []float32, temperature float32, seed, step uint64, n int) []int32 {
	keys := make([]uint64, 0, len(proc))
	invT := float32(1 / temperature)
	for i, x := range proc {
		if math.IsInf(float64(x), -1) {
			continue
		}
		score := x
		if temperature != 0 {
			score = philox.Score(x, invT, philox.ElementGumbel(seed, step, uint32(i)))
		}
		keys = append(keys, refPack(score, i))
	}
	sort.Slice(keys, func(a, b int) bool { return keys[a] > keys[b] })
	keys = keys[:min(n, len(keys))]
	out := make([]int32, len(keys))
	for j, k := range keys {
		out[j] = int32(0xFFFFFFFF - uint32(k))
	}
	return out
}
