package gokernel

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestScanBelowMatchesGo: scanBelow (SSE on amd64) stops where the Go form stops and
// passes the same maximum, on rows with values at, above and below the floor, NaN and
// infinities at every place, and every length up to a few groups.
func TestScanBelowMatchesGo(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 4))
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	specials := []float32{nan, inf, -inf, 3, 2.5, 0, float32(math.Copysign(0, -1))}
	for trial := range 20000 {
		n := r.IntN(40)
		if trial%100 == 0 {
			n = 1000 + r.IntN(100)
		}
		row := make([]float32, n)
		for i := range row {
			row[i] = float32(r.NormFloat64() * 2)
		}
		for range r.IntN(3) {
			if n > 0 {
				row[r.IntN(n)] = specials[r.IntN(len(specials))]
			}
		}
		floor := []float32{3, 2.5, 0, inf, -inf, nan, 8}[r.IntN(7)]
		gotN, gotTop := scanBelow(row, floor)
		wantN, wantTop := scanBelowGo(row, floor)
		require.Equal(t, wantN, gotN, "trial %d: row %v floor %v", trial, row, floor)
		if wantTop == 0 {
			require.Zero(t, gotTop, "trial %d", trial) // either zero may come back
			continue
		}
		require.Equal(t, math.Float32bits(wantTop), math.Float32bits(gotTop), "trial %d: row %v floor %v", trial, row, floor)
	}
}
