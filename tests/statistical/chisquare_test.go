package statistical

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMergeAdjacent(t *testing.T) {
	tests := []struct {
		name string
		in   []bin
		want []bin
	}{
		{"nothing to merge", []bin{{10, 9}, {5, 6}}, []bin{{10, 9}, {5, 6}}},
		{"light run merged until it reaches 5", []bin{{2, 1}, {2, 3}, {2, 2}, {9, 9}}, []bin{{6, 6}, {9, 9}}},
		{"light remainder joins the bin before", []bin{{7, 7}, {1, 0}, {2, 4}}, []bin{{10, 11}}},
		{"all light", []bin{{1, 1}, {2, 0}}, []bin{{3, 1}}},
		{"empty", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, mergeAdjacent(tt.in))
		})
	}
}

func TestChiSquareTest(t *testing.T) {
	tests := []struct {
		name      string
		probs     []float64
		counts    []int64
		binning   Binning
		chi2      float64
		df        int
		p         float64
		zeroDrawn int64
	}{
		{"perfect fit", []float64{0.5, 0.25, 0.25}, []int64{200, 100, 100}, BinTokens, 0, 2, 1, 0},
		// (60-50)²/50 + (40-50)²/50 = 4 on 1 df: p = 2(1 - Φ(2)).
		{"two bins", []float64{0.5, 0.5}, []int64{60, 40}, BinTokens, 4, 1, math.Erfc(2 / math.Sqrt2), 0},
		// At 1000 draws the two light tokens (expected 1 and 2, in the bands 6 and 5 nats
		// below the top) pool into 3 expected draws, too few for a bin of their own:
		// they join the lightest token bin (7 expected).
		{"light tokens pooled by nats", []float64{0.495, 0.495, 0.001, 0.002, 0.007}, []int64{495, 495, 3, 2, 5}, BinTokens,
			0, 2, 1, 0},
		{"light pool folded into the lightest token", []float64{0.7, 0.299, 0.001}, []int64{700, 299, 1}, BinTokens, 0, 1, 1, 0},
		// One draw of the zero-probability token: the rest fit well, yet the case fails.
		{"impossible token drawn", []float64{0.5, 0.5, 0}, []int64{50, 49, 1}, BinTokens, 0.02, 1, math.Erfc(0.1), 1},
		// 20 tokens, 2 per decile; 110 draws, 11 expected per decile:
		// 9 x (10-11)²/11 + (20-11)²/11 = 90/11 on 9 df.
		{"deciles", []float64{.05, .05, .05, .05, .05, .05, .05, .05, .05, .05, .05, .05, .05, .05, .05, .05, .05, .05, .05, .05},
			[]int64{5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 10, 10}, BinDeciles, 90.0 / 11, 9, -1, 0},
		{"one certain token", []float64{0, 1, 0}, []int64{0, 7, 0}, BinTokens, 0, 0, 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := ChiSquareTest(tt.probs, tt.counts, tt.binning)
			require.NoError(t, err)
			assert.Equal(t, tt.df, v.DF)
			assert.Equal(t, tt.df+1, v.Bins)
			assert.Equal(t, tt.zeroDrawn, v.ZeroDrawn)
			assert.InDelta(t, tt.chi2, v.ChiSquare, 1e-9)
			if tt.p >= 0 {
				assert.InDelta(t, tt.p, v.PValue, 1e-9)
			} else {
				assert.Greater(t, v.PValue, 0.1) // a mild misfit
			}
			assert.Equal(t, tt.zeroDrawn == 0 && (tt.p < 0 || tt.p >= Alpha), v.Pass(Alpha))
		})
	}
}

func TestChiSquareTestRejects(t *testing.T) {
	tests := []struct {
		name    string
		probs   []float64
		counts  []int64
		binning Binning
	}{
		{"lengths differ", []float64{0.5, 0.5}, []int64{1}, BinTokens},
		{"empty", nil, nil, BinTokens},
		{"probabilities do not sum to 1", []float64{0.5, 0.4}, []int64{1, 1}, BinTokens},
		{"negative probability", []float64{1.5, -0.5}, []int64{1, 1}, BinTokens},
		{"negative count", []float64{0.5, 0.5}, []int64{3, -1}, BinTokens},
		{"no draws", []float64{0.5, 0.5}, []int64{0, 0}, BinTokens},
		{"unknown binning", []float64{0.5, 0.5}, []int64{1, 1}, Binning(9)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ChiSquareTest(tt.probs, tt.counts, tt.binning)
			assert.Error(t, err)
		})
	}
}

// TestPowerOneDegree checks the Poisson mixture against the closed form on one degree of
// freedom, where the statistic is (Z + sqrt(λ))².
func TestPowerOneDegree(t *testing.T) {
	phi := func(x float64) float64 { return 0.5 * math.Erfc(-x/math.Sqrt2) }
	for _, alpha := range []float64{0.05, 1e-6} {
		c := CriticalValue(1, alpha)
		for _, lambda := range []float64{0, 0.5, 4, 25, 60, 200} {
			r := math.Sqrt(lambda)
			want := phi(-math.Sqrt(c)-r) + 1 - phi(math.Sqrt(c)-r)
			assert.InDelta(t, want, Power(1, lambda, alpha), 1e-9, "alpha %g, lambda %g", alpha, lambda)
		}
	}
	assert.True(t, math.IsNaN(Power(0, 1, 0.05)))
	assert.True(t, math.IsNaN(Power(1, -1, 0.05)))
	assert.True(t, math.IsNaN(Power(1, 1, 0)))
}

func TestDetectableNoncentrality(t *testing.T) {
	for _, df := range []int{1, 9, 100} {
		for _, power := range []float64{0.5, 0.9} {
			lambda := DetectableNoncentrality(df, Alpha, power)
			assert.InDelta(t, power, Power(df, lambda, Alpha), 1e-6, "df %d", df)
			assert.Greater(t, lambda, DetectableNoncentrality(df, 1e-3, power), "a stricter level needs more")
		}
	}
	// The figures the package documentation quotes (p < 1e-6, even odds).
	assert.InDelta(t, 24, DetectableNoncentrality(1, Alpha, 0.5), 0.5)
	assert.InDelta(t, 37, DetectableNoncentrality(9, Alpha, 0.5), 0.5)
}
