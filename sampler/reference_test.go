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

// refCategoricalKept is refCategorical that also returns the integer kept sum S of step
// 7, which the log-probability record uses.
func refCategoricalKept(row []float32, temperature float32, topK int, topP, minP float32, seed, step uint64) (int32, uint32, uint64) {
	if st := refFlags(row); st != 0 {
		return -1, st, 0
	}
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
	kept := func(i int) bool { return keys[i] >= threshold && (minP == 0 || w[i] >= minP) }
	var total uint64
	for i := range row {
		if kept(i) {
			total += q[i]
		}
	}
	target, _ := bits.Mul64(philox.CategoricalUniform64(seed, step), total)
	var prefix uint64
	for i := range row {
		if kept(i) {
			prefix += q[i]
			if prefix > target {
				return int32(i), 0, total
			}
		}
	}
	panic("reference: no token drawn")
}

// refSample samples one row as the sampler should, given the route the row takes.
func refSample(row []float32, p Params, r Route, samplerSeed uint64) (int32, uint32) {
	seed := p.Seed
	if !p.HasSeed {
		seed = philox.RowSeed(samplerSeed, p.RequestID)
	}
	switch r {
	case RouteGreedy:
		return refGumbelArgmax(row, 0, seed, p.Step)
	case RouteGumbel:
		return refGumbelArgmax(row, p.Temperature, seed, p.Step)
	}
	topK := p.TopK
	if topK >= len(row) {
		topK = 0
	}
	return refCategorical(row, p.Temperature, topK, p.TopP, p.MinP, seed, p.Step)
}
