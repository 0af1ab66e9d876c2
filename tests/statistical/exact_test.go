package statistical

import (
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// softmax is the textbook float64 softmax of xs/t over the indices in keep (all when nil).
func softmax(xs []float64, t float64, keep []int) []float64 {
	if keep == nil {
		for i := range xs {
			keep = append(keep, i)
		}
	}
	out := make([]float64, len(xs))
	sum := 0.0
	for _, i := range keep {
		out[i] = math.Exp(xs[i] / t)
		sum += out[i]
	}
	for _, i := range keep {
		out[i] /= sum
	}
	return out
}

func TestProbabilities(t *testing.T) {
	neg := float32(math.Inf(-1))
	tests := []struct {
		name   string
		logits []float32
		temp   float32
		filter Filter
		want   []float64
	}{
		{"softmax", []float32{1, 2, 3, 0}, 1, Filter{}, softmax([]float64{1, 2, 3, 0}, 1, nil)},
		{"temperature divides", []float32{1, 2, 3, 0}, 0.5, Filter{}, softmax([]float64{1, 2, 3, 0}, 0.5, nil)},
		{"masked tokens get zero", []float32{neg, 2, neg, 0}, 1.5, Filter{}, softmax([]float64{0, 2, 0, 0}, 1.5, []int{1, 3})},
		{"top-k keeps the k largest", []float32{1, 5, 3, 4, 2}, 1, Filter{TopK: 2},
			softmax([]float64{1, 5, 3, 4, 2}, 1, []int{1, 3})},
		{"top-k keeps ties at the k-th value", []float32{4, 5, 3, 4, 4}, 1, Filter{TopK: 2},
			softmax([]float64{4, 5, 3, 4, 4}, 1, []int{0, 1, 3, 4})},
		{"top-k >= V is off", []float32{1, 2, 3}, 1, Filter{TopK: 3}, softmax([]float64{1, 2, 3}, 1, nil)},
		// Masses e^0, e^-1, e^-2, e^-3 over Z: cumulative 0.644, 0.881, 0.968, 1.
		{"top-p keeps the smallest head reaching p", []float32{0, -1, -2, -3}, 1, Filter{TopP: 0.9},
			softmax([]float64{0, -1, -2, -3}, 1, []int{0, 1, 2})},
		{"top-p keeps ties at the threshold", []float32{0, -1, -2, -2, -3}, 1, Filter{TopP: 0.85},
			softmax([]float64{0, -1, -2, -2, -3}, 1, []int{0, 1, 2, 3})},
		{"top-p over the top-k set", []float32{0, -1, -2, -3, -3.5}, 1, Filter{TopK: 3, TopP: 0.9},
			softmax([]float64{0, -1, -2, -3, -3.5}, 1, []int{0, 1})},
		{"top-p at one token's mass", []float32{3, 0, 0}, 1, Filter{TopP: 0.5}, []float64{1, 0, 0}},
		{"top-p 1 is off", []float32{0, -1, -2}, 1, Filter{TopP: 1}, softmax([]float64{0, -1, -2}, 1, nil)},
		{"min-p relative to the top", []float32{0, -1, -2, -3}, 1, Filter{MinP: 0.25},
			softmax([]float64{0, -1, -2, -3}, 1, []int{0, 1})},
		{"min-p after the temperature", []float32{0, -1, -2, -3}, 2, Filter{MinP: 0.25},
			softmax([]float64{0, -1, -2, -3}, 2, []int{0, 1, 2})},
		{"min-p 1 keeps the top ties", []float32{2, 1, 2}, 1, Filter{MinP: 1}, []float64{0.5, 0, 0.5}},
		{"every filter", []float32{0, -0.5, -1, -1.5, -2, -8}, 1, Filter{TopK: 5, TopP: 0.95, MinP: 0.3},
			softmax([]float64{0, -0.5, -1, -1.5, -2, -8}, 1, []int{0, 1, 2})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Probabilities(tt.logits, tt.temp, tt.filter)
			require.NoError(t, err)
			require.Len(t, got, len(tt.want))
			for i := range got {
				assert.InDelta(t, tt.want[i], got[i], 1e-12, "token %d", i)
			}
		})
	}
}

func TestProbabilitiesRejects(t *testing.T) {
	neg, nan, inf := float32(math.Inf(-1)), float32(math.NaN()), float32(math.Inf(1))
	tests := []struct {
		name      string
		logits    []float32
		temp      float32
		filter    Filter
		ambiguous bool
	}{
		{"empty row", nil, 1, Filter{}, false},
		{"zero temperature", []float32{1}, 0, Filter{}, false},
		{"negative temperature", []float32{1}, -1, Filter{}, false},
		{"NaN temperature", []float32{1}, nan, Filter{}, false},
		{"infinite temperature", []float32{1}, inf, Filter{}, false},
		{"NaN logit", []float32{1, nan}, 1, Filter{}, false},
		{"+Inf logit", []float32{inf, 1}, 1, Filter{}, false},
		{"no finite logit", []float32{neg, neg}, 1, Filter{}, false},
		{"negative top-k", []float32{1, 2}, 1, Filter{TopK: -1}, false},
		{"top-p above 1", []float32{1, 2}, 1, Filter{TopP: 1.5}, false},
		{"NaN top-p", []float32{1, 2}, 1, Filter{TopP: nan}, false},
		{"min-p above 1", []float32{1, 2}, 1, Filter{MinP: 2}, false},
		{"negative min-p", []float32{1, 2}, 1, Filter{MinP: -0.5}, false},
		// The top token holds e/(1+e) of the mass: a top-p of that value sits on it.
		{"top-p on a boundary", []float32{0, 1}, 1, Filter{TopP: float32(math.E / (1 + math.E))}, true},
		{"min-p on a boundary", []float32{0, -1}, 1, Filter{MinP: float32(math.Exp(-1))}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Probabilities(tt.logits, tt.temp, tt.filter)
			require.Error(t, err)
			assert.Equal(t, tt.ambiguous, errors.Is(err, ErrAmbiguous), "%v", err)
		})
	}
}
