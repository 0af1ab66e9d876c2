package gokernel

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestScanBelowMatchesGo: scanBelow (SSE on amd64, NEON on arm64) stops where the Go
// form stops and passes the same maximum, on rows with values at, above and below the
// floor, NaN and infinities at every place, and every length up to a few groups.
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

// TestScanBelowEveryStop: on every length up to 48, with the row's largest passing
// value at every place and one element that stops the scan (NaN, +Inf, the floor, above
// it) at every place, scanBelow stops where the Go form stops with the same maximum;
// the stops fall in either group of a two-group step and in the tail. Rows of -Inf and
// of signed zeros check the maximum's edge values.
func TestScanBelowEveryStop(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	negZero := float32(math.Copysign(0, -1))
	const floor = 3
	stoppers := []float32{nan, inf, floor, floor + 1}
	check := func(row []float32, floor float32, what string) {
		t.Helper()
		gotN, gotTop := scanBelow(row, floor)
		wantN, wantTop := scanBelowGo(row, floor)
		require.Equal(t, wantN, gotN, "%s: row %v floor %v", what, row, floor)
		if wantTop == 0 {
			require.Zero(t, gotTop, "%s: row %v floor %v", what, row, floor)
			return
		}
		require.Equal(t, math.Float32bits(wantTop), math.Float32bits(gotTop), "%s: row %v floor %v", what, row, floor)
	}
	row := make([]float32, 48)
	for n := range 49 {
		for peak := -1; peak < n; peak++ {
			for stop := -1; stop < n; stop++ {
				r := row[:n]
				for i := range r {
					r[i] = -1 - float32(i%5)
				}
				if peak >= 0 {
					r[peak] = floor - 0.25
				}
				if stop >= 0 {
					r[stop] = stoppers[(peak+stop+2)%len(stoppers)]
				}
				check(r, floor, "every stop")
			}
		}
	}
	for n := range 20 {
		r := row[:n]
		for i := range r {
			r[i] = float32(math.Inf(-1))
		}
		check(r, floor, "-Inf")
		check(r, float32(math.Inf(-1)), "-Inf at a -Inf floor")
		for i := range r {
			r[i] = negZero
		}
		check(r, floor, "-0")
		for i := range r {
			if i%3 == 1 {
				r[i] = 0
			}
		}
		check(r, floor, "±0")
		check(r, 0, "±0 at a zero floor")
		check(r, negZero, "±0 at a -0 floor")
	}
}
