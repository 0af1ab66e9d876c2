package gokernel

import (
	"github.com/gumbel-go/gumbel/kernelsrc/abi"
)

// orderKey is abi.OrderKey: the order-preserving key of a float32.
func orderKey(f float32) uint32 { return abi.OrderKey(f) }

// orderKeyInverse is abi.OrderKeyValue: the float32 of an order key.
func orderKeyInverse(k uint32) float32 { return abi.OrderKeyValue(k) }

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
		var count, mass [abi.SelectBins]uint64
		if weights == nil {
			for _, k := range keys {
				if k&mask == prefix {
					count[k>>shift&0xff]++
				}
			}
			mass = count
		} else {
			for j, k := range keys {
				if k&mask == prefix {
					d := k >> shift & 0xff
					count[d]++
					mass[d] += weights[j]
				}
			}
		}
		prefix |= abi.SelectDigit(count[:], mass[:], target, &above) << shift
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
