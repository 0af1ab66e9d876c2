package gokernel

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestExactSignMatchesArbitraryPrecision: the float32 comparison of exact values agrees
// with the values computed in arbitrary precision, on pairs near each other (where the
// float32 scores tie or mislead), across the ExactScale boundary, and at logits and
// temperatures whose products overflow float32.
func TestExactSignMatchesArbitraryPrecision(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 1))
	noise := func() float32 { return float32(-math.Log(-math.Log(r.Float64()))) }
	invTs := []float32{1, 1e-3, 0.37, 3, 1e5, 1e7, 1e30, float32(1 / 1e-38)}
	cases := 0
	for range 200000 {
		invT := invTs[r.IntN(len(invTs))]
		// A value y of |y| around ExactScale or far beyond it, then a neighbour within a
		// few units of noise (or the same logit).
		scale := []float64{4000, 4096, 5000, 1e6, 1e20, 1e38 * float64(invT)}[r.IntN(6)]
		y := scale * (1 + r.Float64()) * float64([]int{1, -1}[r.IntN(2)])
		xa := float32(y / float64(invT))
		if math.IsInf(float64(xa), 0) || xa == 0 {
			continue
		}
		xb := xa
		switch r.IntN(3) {
		case 0:
			xb = float32(float64(xa) + (r.Float64()-0.5)*60/float64(invT))
		case 1:
			xb = math.Nextafter32(xa, float32(math.Inf(1-2*r.IntN(2))))
		}
		if math.IsInf(float64(xb), 0) {
			continue
		}
		a := exactValueOf(xa, invT, noise(), 0)
		b := exactValueOf(xb, invT, noise(), 1)
		want := refExactValue(a.x, invT, a.g).Cmp(refExactValue(b.x, invT, b.g))
		require.Equal(t, want, exactSign(a, b, invT), "x %g vs %g, g %g vs %g, invT %g", a.x, b.x, a.g, b.g, invT)
		require.Equal(t, -want, exactSign(b, a, invT))
		cases++
	}
	require.Greater(t, cases, 100000)
}

// TestExactSignFlatHugeRow checks one case by hand: in a flat row of 1e7 at T = 1, where
// the float32 score has lost the noise, the comparison decides by the noise alone.
func TestExactSignFlatHugeRow(t *testing.T) {
	a := exactValueOf(1e7, 1, 0.25, 3)
	b := exactValueOf(1e7, 1, 0.5, 9)
	require.True(t, a.exact && b.exact)
	require.Equal(t, float32(1e7), a.s, "the float32 score has lost the noise")
	require.True(t, b.above(a, 1))
	require.False(t, a.above(b, 1))
}
