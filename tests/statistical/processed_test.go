package statistical

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestProcessedLogits(t *testing.T) {
	neg := float32(math.Inf(-1))
	tests := []struct {
		name   string
		logits []float32
		proc   Processors
		want   []float32
	}{
		{"nothing", []float32{1, -2, 3}, Processors{}, []float32{1, -2, 3}},
		{"sparse bias", []float32{1, -2, 3, 0}, Processors{BiasTokens: []int32{3, 0}, BiasValues: []float32{2.5, -1e9}},
			[]float32{float32(1 - 1e9), -2, 3, 2.5}},
		{"allowed", []float32{1, -2, 3, 0}, Processors{Allowed: []int32{1, 3}}, []float32{neg, -2, neg, 0}},
		{"banned on top of allowed", []float32{1, -2, 3, 0}, Processors{Allowed: []int32{1, 3}, Banned: []int32{3}},
			[]float32{neg, -2, neg, neg}},
		// Repetition divides positive and multiplies negative logits of seen tokens, prompt
		// or output; token 3 was never seen.
		{"repetition", []float32{2, -2, 0.5, 4}, Processors{Counts: []uint32{PromptBit, PromptBit, 3, 0}, Repetition: 2},
			[]float32{1, -4, 0.25, 4}},
		{"prompt marks are counts", []float32{2, -2, 0.5, 4}, Processors{Prompt: []int32{0, 1}, Repetition: 2},
			[]float32{1, -4, 0.5, 4}},
		// Frequency and presence act on outputs only: the prompt bit is not an output.
		{"frequency and presence", []float32{2, 2, 2, 2}, Processors{Counts: []uint32{PromptBit, 1, PromptBit | 3, 0}, Frequency: 0.5, Presence: 0.25},
			[]float32{2, 1.25, 0.25, 2}},
		// Bias first, then the penalty: (1 + 1)/2, not 1/2 + 1.
		{"bias before penalties", []float32{1}, Processors{BiasTokens: []int32{0}, BiasValues: []float32{1}, Prompt: []int32{0}, Repetition: 2},
			[]float32{1}},
		{"a negative biased logit is multiplied", []float32{1}, Processors{BiasTokens: []int32{0}, BiasValues: []float32{-3}, Prompt: []int32{0}, Repetition: 2},
			[]float32{-4}},
		{"penalties then mask", []float32{1, 2}, Processors{Counts: []uint32{1, 1}, Frequency: -5, Banned: []int32{0}},
			[]float32{neg, 7}},
		// Bit j%32 of word j/32, least significant first.
		{"bitmask", []float32{1, -2, 3, 0}, Processors{Bitmask: []int32{0b1010}}, []float32{neg, -2, neg, 0}},
		{"bitmask ANDed with allowed and banned", []float32{1, -2, 3, 0, 5},
			Processors{Bitmask: []int32{0b11101}, Allowed: []int32{0, 1, 2, 3}, Banned: []int32{3}},
			[]float32{1, neg, 3, neg, neg}},
		{"bits past the vocabulary ignored", []float32{1, -2, 3}, Processors{Bitmask: []int32{-1 &^ 0b10}},
			[]float32{1, neg, 3}},
		{"bitmask after the penalties", []float32{1, 2}, Processors{Counts: []uint32{1, 1}, Frequency: -5, Bitmask: []int32{0b10}},
			[]float32{neg, 7}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ProcessedLogits(tt.logits, tt.proc)
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestProcessedLogitsRejects(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	x := []float32{1, 2, 3}
	tests := []struct {
		name string
		proc Processors
		want string
	}{
		{"bias lengths differ", Processors{BiasTokens: []int32{0, 1}, BiasValues: []float32{1}}, "bias tokens"},
		{"bias token out of range", Processors{BiasTokens: []int32{3}, BiasValues: []float32{1}}, "outside"},
		{"NaN bias", Processors{BiasTokens: []int32{0}, BiasValues: []float32{nan}}, "bias"},
		{"infinite bias", Processors{BiasTokens: []int32{0}, BiasValues: []float32{-inf}}, "bias"},
		{"negative allowed token", Processors{Allowed: []int32{-1}}, "outside"},
		{"banned token out of range", Processors{Banned: []int32{7}}, "outside"},
		{"prompt token out of range", Processors{Prompt: []int32{3}}, "outside"},
		{"counts of another vocabulary", Processors{Counts: []uint32{0}}, "counts"},
		{"negative repetition", Processors{Repetition: -1}, "penalties"},
		{"NaN frequency", Processors{Frequency: nan}, "penalties"},
		{"infinite presence", Processors{Presence: inf}, "penalties"},
		{"bitmask of another vocabulary", Processors{Bitmask: []int32{0, 0}}, "bitmask"},
		{"no bitmask words", Processors{Bitmask: []int32{}}, "bitmask"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ProcessedLogits(x, tt.proc)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

func TestBitmaskOf(t *testing.T) {
	tokens := []int32{0, 5, 31, 32, 63, 64, 69}
	m := BitmaskOf(70, tokens)
	require.Len(t, m, 3)
	assert.Equal(t, []int32{int32(-1<<31 | 1<<5 | 1), int32(-1<<31 | 1), 1<<5 | 1}, m)
	var got []int32
	for i := range 70 {
		if BitmaskAllows(m, i) {
			got = append(got, int32(i))
		}
	}
	assert.Equal(t, tokens, got)
	assert.Equal(t, 1, BitmaskWords(1))
	assert.Equal(t, 1, BitmaskWords(32))
	assert.Equal(t, 2, BitmaskWords(33))
	assert.Equal(t, 4748, BitmaskWords(LargeVocab))
}

func TestLogSoftmax(t *testing.T) {
	neg := float32(math.Inf(-1))
	tests := []struct {
		name   string
		logits []float32
		temp   float32
	}{
		{"plain", []float32{1, 2, 3, 0}, 1},
		{"temperature", []float32{1, 2, 3, 0}, 0.5},
		{"greedy is temperature 1", []float32{1, 2, 3, 0}, 0},
		{"masked", []float32{neg, 2, neg, -1}, 1.5},
		{"large logits", []float32{1000, 999, 998}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lp, lse, err := LogSoftmax(tt.logits, tt.temp)
			require.NoError(t, err)
			temp := float64(tt.temp)
			if temp == 0 {
				temp = 1
			}
			sum := 0.0
			for i, x := range tt.logits {
				sum += math.Exp(lp[i])
				if math.IsInf(float64(x), -1) {
					assert.True(t, math.IsInf(lp[i], -1))
					continue
				}
				assert.InDelta(t, float64(x)/temp-lse, lp[i], 1e-12)
			}
			assert.InDelta(t, 1, sum, 1e-12)
		})
	}
	_, _, err := LogSoftmax([]float32{neg}, 1)
	assert.Error(t, err)
	_, _, err = LogSoftmax([]float32{1}, -1)
	assert.Error(t, err)
}

func TestPairProbabilities(t *testing.T) {
	p := []float64{0.5, 0.3, 0.2, 0}
	with, err := PairProbabilities(p, true)
	require.NoError(t, err)
	without, err := PairProbabilities(p, false)
	require.NoError(t, err)
	for a := range p {
		for b := range p {
			assert.InDelta(t, p[a]*p[b], with[a*4+b], 1e-15)
			want := 0.0
			if a != b && p[a] > 0 {
				want = p[a] * p[b] / (1 - p[a])
			}
			assert.InDelta(t, want, without[a*4+b], 1e-15, "(%d, %d)", a, b)
		}
	}
	// The first draw of a pair without replacement still has the row's law.
	for a := range p {
		first := 0.0
		for b := range p {
			first += without[a*4+b]
		}
		assert.InDelta(t, p[a], first, 1e-15)
	}
	_, err = PairProbabilities([]float64{1, 0}, false)
	assert.Error(t, err, "one token: no second draw without replacement")
}
