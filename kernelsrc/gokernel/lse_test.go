package gokernel

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestExpNonPositive bounds the log-sum-exps' exp against math.Exp.
func TestExpNonPositive(t *testing.T) {
	r := rand.New(rand.NewPCG(16, 16))
	worst := 0.0
	check := func(d float64) {
		want, got := math.Exp(d), expNonPositive(d)
		if d < -64 {
			require.Zero(t, got, "exp(%g)", d)
			return
		}
		worst = max(worst, math.Abs(got-want)/want)
	}
	for _, d := range []float64{0, -0.0, -1e-300, -0.34657359, -0.34657360, -math.Ln2, -1, -10, -63.999, -64, -64.001, -100, -1e300, math.Inf(-1)} {
		check(d)
	}
	for range 200000 {
		check(-r.ExpFloat64() * 8)
	}
	assert.Less(t, worst, 1e-14, "largest relative error")
	assert.True(t, math.IsNaN(expNonPositive(math.NaN())))
	t.Logf("largest relative error %.3g", worst)
}

// TestLSELogprob checks lse.logprob, the log-probability of a member taken from the set's
// maximum, where float64's v - value() cancels: members at float32's largest values,
// beyond 2^52, as well as ordinary ones and the non-finite sets that follow IEEE
// arithmetic.
func TestLSELogprob(t *testing.T) {
	const big = float32(3e38)
	inf := float32(math.Inf(1))
	cases := []struct {
		name    string
		members []float32
		v       float32
		want    float64
	}{
		{"two members at 3e38", []float32{big, big, -big, 1}, big, -math.Ln2},
		{"one member at 3e38", []float32{big, 5, -big}, big, 0},
		{"small member beside 3e38", []float32{big, 5}, 5, 5 - float64(big)},
		{"four members near 2^60", []float32{1 << 60, 1 << 60, 1 << 60, 1 << 60}, 1 << 60, -math.Log(4)},
		{"ordinary", []float32{0, 1, 2}, 2, 2 - math.Log(math.Exp(0)+math.Exp(1)+math.Exp(2))},
		{"set holding +Inf", []float32{inf, 1}, inf, math.NaN()},
		{"member of an empty set", []float32{float32(math.Inf(-1))}, 0, math.Inf(1)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := emptyLSE
			a.add(c.members)
			got := a.logprob(float64(c.v))
			switch {
			case math.IsNaN(c.want):
				assert.True(t, math.IsNaN(got), "got %v, want NaN", got)
			case math.IsInf(c.want, 0):
				assert.Equal(t, c.want, got)
			default:
				assert.InDelta(t, c.want, got, 1e-12*max(1, math.Abs(c.want)))
			}
		})
	}
}
