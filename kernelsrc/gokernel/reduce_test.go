package gokernel

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRadixSelect compares radixSelect with a brute-force search, counting and weighted.
func TestRadixSelect(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	for trial := range 300 {
		n := 1 + r.IntN(300)
		keys := make([]uint32, n)
		weights := make([]uint64, n)
		spread := pick(r, uint32(4), 1000, math.MaxUint32)
		for i := range keys {
			keys[i] = r.Uint32() % spread
			if r.IntN(3) == 0 {
				keys[i] <<= 24 // share low digits, differ in the top one
			}
			weights[i] = uint64(r.IntN(5)) // zero weights too
		}
		var total uint64
		for _, w := range weights {
			total += w
		}
		tmpK, tmpW := make([]uint32, n), make([]uint64, n)
		for _, weighted := range []bool{false, true} {
			ws := weights
			max := total
			if !weighted {
				ws, max = nil, uint64(n)
			}
			target := uint64(r.IntN(int(max) + 1))
			// Brute force: the largest present key whose mass at or above it reaches target.
			var want uint32
			found := false
			for _, t := range keys {
				var m uint64
				for i, k := range keys {
					if k >= t {
						if ws == nil {
							m++
						} else {
							m += ws[i]
						}
					}
				}
				if m >= target && (!found || t > want) {
					want, found = t, true
				}
			}
			require.True(t, found)
			got := radixSelect(keys, ws, target, tmpK, tmpW)
			require.Equal(t, want, got, "trial %d weighted=%v target=%d", trial, weighted, target)
		}
	}
}

// TestOrderKey: keys follow the float order, -0 ties with +0, orderKeyInverse undoes
// orderKey, and the largest packed value is the largest score, ties to the lowest index.
func TestOrderKey(t *testing.T) {
	inf := float32(math.Inf(1))
	ordered := []float32{-inf, -math.MaxFloat32, -1, -math.SmallestNonzeroFloat32, 0, math.SmallestNonzeroFloat32, 1, math.MaxFloat32, inf}
	for i, f := range ordered {
		require.Equal(t, math.Float32bits(f), math.Float32bits(orderKeyInverse(orderKey(f))), "orderKeyInverse(orderKey(%g))", f)
		if i > 0 {
			require.Less(t, orderKey(ordered[i-1]), orderKey(f), "orderKey(%g) < orderKey(%g)", ordered[i-1], f)
			require.Less(t, pack(ordered[i-1], 0), pack(f, 1000), "a larger score packs larger")
		}
	}
	negZero := float32(math.Copysign(0, -1))
	require.Equal(t, orderKey(0), orderKey(negZero), "-0 ties with +0")
	require.Greater(t, pack(negZero, 3), pack(0, 4), "equal scores: the lower index packs larger")
	require.Greater(t, pack(1, 3), pack(1, 4), "equal scores: the lower index packs larger")
}
