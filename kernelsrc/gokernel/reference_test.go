package gokernel

import (
	"math"
	"math/bits"
	"sort"

	"github.com/gumbel-go/gumbel/philox"
)

// This file is the brute-force reference: ABI.md's definitions written as plainly as
// possible, per element, with sorting where the kernels select by radix.

type refParams struct {
	row         uint32
	temperature float32
	seed, step  uint64
	topK        uint32
	topP, minP  float32
}

func refBadTemperature(t float32) bool {
	return math.IsNaN(float64(t)) || t < 0 || math.IsInf(float64(t), 0) || (t > 0 && math.IsInf(float64(float32(1/t)), 0))
}

// refStatus is the status that the row's contents alone decide (1 or 2), else -1.
func refStatus(row []float32) int32 {
	finite := false
	for _, x := range row {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 1) {
			return StatusNonFinite
		}
		if !math.IsInf(float64(x), -1) {
			finite = true
		}
	}
	if !finite {
		return StatusNoFinite
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

func refGumbelArgmax(row []float32, p refParams) (int32, int32) {
	if refBadTemperature(p.temperature) {
		return -1, StatusBadParams
	}
	if s := refStatus(row); s >= 0 {
		return -1, s
	}
	if p.temperature == 0 {
		return refGreedy(row), StatusOK
	}
	invT := float32(1 / p.temperature)
	best, bestScore := -1, float32(0)
	for i, x := range row {
		score := float32(math.Inf(-1))
		if !math.IsInf(float64(x), -1) {
			score = philox.Score(x, invT, philox.ElementGumbel(p.seed, p.step, uint32(i)))
		}
		if best < 0 || score > bestScore {
			best, bestScore = i, score
		}
	}
	return int32(best), StatusOK
}

func refKey(f float32) uint32 {
	b := math.Float32bits(f)
	if b>>31 == 1 {
		return b ^ 0xFFFFFFFF
	}
	return b ^ 0x80000000
}

func refCategorical(row []float32, p refParams) (int32, int32) {
	if refBadTemperature(p.temperature) {
		return -1, StatusBadParams
	}
	if s := refStatus(row); s >= 0 {
		return -1, s
	}
	if p.temperature == 0 {
		return refGreedy(row), StatusOK
	}
	v := len(row)
	m := float32(math.Inf(-1))
	for _, x := range row {
		m = max(m, x)
	}
	invT := float32(1 / p.temperature)
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
	if p.topK > 0 && int(p.topK) < v {
		sorted := append([]uint32(nil), key...)
		sort.Slice(sorted, func(a, b int) bool { return sorted[a] > sorted[b] })
		kk = sorted[p.topK-1]
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
	if p.topP > 0 && p.topP < 1 {
		P := uint64(uint32(float64(p.topP) * (1 << 32)))
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

	minP := p.minP > 0 && p.minP <= 1
	kept := func(i int) bool {
		return key[i] >= max(kk, kp) && (!minP || w[i] >= p.minP)
	}
	var total uint64
	for i := range row {
		if kept(i) {
			total += q[i]
		}
	}
	u := philox.CategoricalUniform64(p.seed, p.step)
	target, _ := bits.Mul64(u, total)
	var acc uint64
	for i := range row {
		if kept(i) {
			acc += q[i]
			if acc > target {
				return int32(i), StatusOK
			}
		}
	}
	return -2, -2 // never: the test fails on it
}
