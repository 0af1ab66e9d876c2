package gokernel

import (
	"math"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
)

// orderKey is abi.OrderKey: the order-preserving key of a float32.
func orderKey(f float32) uint32 { return abi.OrderKey(f) }

// orderKeyInverse inverts orderKey.
func orderKeyInverse(k uint32) float32 {
	if k>>31 != 0 {
		return math.Float32frombits(k &^ 0x80000000)
	}
	return math.Float32frombits(^k)
}

// pack is abi.Pack: the packed (score, index) partial.
func pack(score float32, index int) uint64 { return abi.Pack(score, uint32(index)) }

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
		prefix |= selectBin(&count, &mass, target, &above) << shift
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

// selectBin picks one digit of radixSelect: the highest non-empty bin at which the mass
// from the top, *above included, reaches target (the lowest non-empty bin when none
// does), adding the mass of the bins above it to *above.
func selectBin(count *[256]uint32, mass *[256]uint64, target uint64, above *uint64) uint32 {
	chosen := -1
	for d := 255; d >= 0; d-- {
		if count[d] == 0 {
			continue
		}
		chosen = d
		if *above+mass[d] >= target {
			break
		}
		*above += mass[d]
	}
	return uint32(chosen)
}
