package sampler

import (
	"encoding/binary"
	"errors"
	"math"
	"testing"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/gumbel-go/gumbel/philox"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRouteFor(t *testing.T) {
	nan := float32(math.NaN())
	tests := []struct {
		name   string
		p      Params
		vocab  int
		gumbel bool
		want   Route
	}{
		{"temperature 0", Params{}, 100, true, RouteGreedy},
		{"temperature 0 with filters", Params{TopK: 5, TopP: 0.5, MinP: 0.1}, 100, true, RouteGreedy},
		{"top-k 1", Params{Temperature: 1, TopK: 1}, 100, true, RouteGreedy},
		{"top-k 1 with gumbel off", Params{Temperature: 1, TopK: 1}, 100, false, RouteGreedy},
		{"temperature 0 with gumbel off", Params{}, 100, false, RouteGreedy},
		{"reciprocal overflows", Params{Temperature: 1e-39}, 100, true, RouteGreedy},
		{"smallest normal temperature", Params{Temperature: 0x1p-126}, 100, true, RouteGumbel},
		{"plain sampling", Params{Temperature: 0.7}, 100, true, RouteGumbel},
		{"plain sampling, gumbel off", Params{Temperature: 0.7}, 100, false, RouteCategorical},
		{"top-k", Params{Temperature: 0.7, TopK: 50}, 100, true, RouteFiltered},
		{"top-k = vocab is off", Params{Temperature: 0.7, TopK: 100}, 100, true, RouteGumbel},
		{"top-k > vocab is off", Params{Temperature: 0.7, TopK: 1000}, 100, true, RouteGumbel},
		{"top-k just under vocab", Params{Temperature: 0.7, TopK: 99}, 100, true, RouteFiltered},
		{"top-p", Params{Temperature: 0.7, TopP: 0.9}, 100, true, RouteFiltered},
		{"top-p 1 is off", Params{Temperature: 0.7, TopP: 1}, 100, true, RouteGumbel},
		{"top-p 0 is off", Params{Temperature: 0.7, TopP: 0}, 100, true, RouteGumbel},
		{"min-p", Params{Temperature: 0.7, MinP: 0.05}, 100, true, RouteFiltered},
		{"min-p 1", Params{Temperature: 0.7, MinP: 1}, 100, true, RouteFiltered},
		{"all filters", Params{Temperature: 0.7, TopK: 20, TopP: 0.9, MinP: 0.05}, 100, true, RouteFiltered},
		{"NaN top-p counts as a filter", Params{Temperature: 0.7, TopP: nan}, 100, true, RouteFiltered},
		{"smallest normal temperature, top-k", Params{Temperature: 0x1p-126, TopK: 5}, 100, true, RouteFiltered},
		{"filters off are no filter with gumbel off", Params{Temperature: 0.7, TopK: 100, TopP: 1}, 100, false, RouteCategorical},
		// The kill switch: with Gumbel-max off, every filtered row is categorical.
		{"top-k, gumbel off", Params{Temperature: 0.7, TopK: 50}, 100, false, RouteCategorical},
		{"top-p, gumbel off", Params{Temperature: 0.7, TopP: 0.9}, 100, false, RouteCategorical},
		{"min-p, gumbel off", Params{Temperature: 0.7, MinP: 0.05}, 100, false, RouteCategorical},
		{"all filters, gumbel off", Params{Temperature: 0.7, TopK: 20, TopP: 0.9, MinP: 0.05}, 100, false, RouteCategorical},
		{"temperature 0 with filters, gumbel off", Params{TopK: 5, TopP: 0.5, MinP: 0.1}, 100, false, RouteGreedy},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &Sampler{set: Settings{Gumbel: tc.gumbel}}
			assert.Equal(t, tc.want, s.RouteFor(tc.p, tc.vocab))
		})
	}
}

func TestRouteOfTreatsEveryTopKAsAFilter(t *testing.T) {
	s := &Sampler{set: Settings{Gumbel: true}}
	assert.Equal(t, RouteFiltered, s.RouteOf(Params{Temperature: 1, TopK: 1 << 20}))
	assert.Equal(t, RouteGumbel, s.RouteOf(Params{Temperature: 1}))
	assert.Equal(t, RouteGreedy, s.RouteOf(Params{Temperature: 1, TopK: 1}))
	off := &Sampler{set: Settings{Gumbel: false}}
	assert.Equal(t, RouteCategorical, off.RouteOf(Params{Temperature: 1, TopK: 1 << 20}))
	assert.Equal(t, RouteCategorical, off.RouteOf(Params{Temperature: 1}))
	assert.Equal(t, RouteGreedy, off.RouteOf(Params{Temperature: 1, TopK: 1}))
}

func TestRouteString(t *testing.T) {
	assert.Equal(t, "greedy", RouteGreedy.String())
	assert.Equal(t, "gumbel", RouteGumbel.String())
	assert.Equal(t, "categorical", RouteCategorical.String())
	assert.Equal(t, "filtered", RouteFiltered.String())
	assert.Equal(t, "route(?)", NumRoutes.String())
}

// TestNeedsRowMax: filter_max runs first for a filtered row whose filters need the row's
// largest logit before the blocks can select: top-p or min-p without top-k.
func TestNeedsRowMax(t *testing.T) {
	tests := []struct {
		name string
		p    Params
		want bool
	}{
		{"top-p alone", Params{Temperature: 1, TopP: 0.9}, true},
		{"min-p alone", Params{Temperature: 1, MinP: 0.1}, true},
		{"top-p and min-p", Params{Temperature: 1, TopP: 0.9, MinP: 0.1}, true},
		{"top-k alone", Params{Temperature: 1, TopK: 10}, false},
		{"top-k and top-p", Params{Temperature: 1, TopK: 10, TopP: 0.9}, false},
		{"top-k and min-p", Params{Temperature: 1, TopK: 10, MinP: 0.1}, false},
		{"all filters", Params{Temperature: 1, TopK: 10, TopP: 0.9, MinP: 0.1}, false},
		{"top-k = vocab is off: top-p alone", Params{Temperature: 1, TopK: 100, TopP: 0.9}, true},
		{"top-p 1 is off", Params{Temperature: 1, TopK: 100, TopP: 1}, false},
		{"no filter", Params{Temperature: 1}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, needsRowMax(tc.p, 100))
		})
	}
}

func TestCheckParams(t *testing.T) {
	nan := float32(math.NaN())
	inf := float32(math.Inf(1))
	tests := []struct {
		name string
		p    Params
		want error
	}{
		{"zero value", Params{}, nil},
		{"everything set", Params{Temperature: 2, TopK: 40, TopP: 0.95, MinP: 0.1}, nil},
		{"bounds", Params{Temperature: 1, TopP: 1, MinP: 1}, nil},
		{"negative temperature", Params{Temperature: -0.1}, ErrTemperature},
		{"NaN temperature", Params{Temperature: nan}, ErrTemperature},
		{"infinite temperature", Params{Temperature: inf}, ErrTemperature},
		{"negative top-k", Params{Temperature: 1, TopK: -1}, ErrTopK},
		{"top-p above 1", Params{Temperature: 1, TopP: 1.01}, ErrTopP},
		{"negative top-p", Params{Temperature: 1, TopP: -0.5}, ErrTopP},
		{"NaN top-p", Params{Temperature: 1, TopP: nan}, ErrTopP},
		{"min-p above 1", Params{Temperature: 1, MinP: 2}, ErrMinP},
		{"negative min-p", Params{Temperature: 1, MinP: -0.01}, ErrMinP},
		{"NaN min-p", Params{Temperature: 1, MinP: nan}, ErrMinP},
		{"bad field of a greedy row", Params{TopP: 3}, ErrTopP},
		{"serving fields set", Params{Temperature: 1, Logprobs: true, TopLogprobs: 20, RepetitionPenalty: 1.3, FrequencyPenalty: -2, PresencePenalty: 0.5}, nil},
		{"repetition 0 and 1 are off", Params{RepetitionPenalty: 1}, nil},
		{"top log-probabilities 21", Params{TopLogprobs: 21}, ErrTopLogprobs},
		{"negative top log-probabilities", Params{TopLogprobs: -1}, ErrTopLogprobs},
		{"negative repetition", Params{RepetitionPenalty: -1}, ErrPenalty},
		{"NaN repetition", Params{RepetitionPenalty: nan}, ErrPenalty},
		{"infinite repetition", Params{RepetitionPenalty: inf}, ErrPenalty},
		{"NaN frequency", Params{FrequencyPenalty: nan}, ErrPenalty},
		{"infinite presence", Params{PresencePenalty: -inf}, ErrPenalty},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := checkParams(7, tc.p)
			if tc.want == nil {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.ErrorIs(t, err, tc.want)
			assert.Contains(t, err.Error(), "row 7")
		})
	}
}

func TestPutRowParams(t *testing.T) {
	le := binary.LittleEndian
	tests := []struct {
		name      string
		route     Route
		p         Params
		vocab     int
		wantTemp  float32
		wantTopK  uint32
		wantTopP  float32
		wantMinP  float32
		wantFirst uint32
	}{
		{"greedy by top-k 1", RouteGreedy, Params{Temperature: 0.8, TopK: 1}, 50, 0, 0, 1, 0, 3},
		{"gumbel", RouteGumbel, Params{Temperature: 0.8}, 50, 0.8, 0, 1, 0, 3},
		{"categorical, all filters", RouteCategorical, Params{Temperature: 1.5, TopK: 10, TopP: 0.25, MinP: 0.125}, 50, 1.5, 10, 0.25, 0.125, 3},
		{"top-k at vocab written off", RouteCategorical, Params{Temperature: 1, TopK: 50, MinP: 0.5}, 50, 1, 0, 1, 0.5, 3},
		{"filtered, all filters", RouteFiltered, Params{Temperature: 1.5, TopK: 10, TopP: 0.25, MinP: 0.125}, 50, 1.5, 10, 0.25, 0.125, 3},
		{"filtered, top-p 1 and top-k at vocab written off", RouteFiltered, Params{Temperature: 0.5, TopK: 60, TopP: 1, MinP: 0.25}, 50, 0.5, 0, 1, 0.25, 3},
		{"gumbel carries the filters off", RouteGumbel, Params{Temperature: 0.8, TopK: 10, TopP: 0.25, MinP: 0.125}, 50, 0.8, 0, 1, 0, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			buf := make([]byte, 2*RowParamsSize)
			for i := range buf {
				buf[i] = 0xAB
			}
			const seed, step = 0x0123456789ABCDEF, 0xFEDCBA9876543210
			tc.p.Step = step
			putRowParams(buf, 3, tc.route, tc.p, tc.vocab, seed, 0, 0, -1)
			assert.Equal(t, tc.wantFirst, le.Uint32(buf[0:]))
			assert.Equal(t, tc.wantTemp, math.Float32frombits(le.Uint32(buf[4:])))
			assert.Equal(t, uint32(0x89ABCDEF), le.Uint32(buf[8:]), "seed low word")
			assert.Equal(t, uint32(0x01234567), le.Uint32(buf[12:]), "seed high word")
			assert.Equal(t, uint32(0x76543210), le.Uint32(buf[16:]), "step low word")
			assert.Equal(t, uint32(0xFEDCBA98), le.Uint32(buf[20:]), "step high word")
			assert.Equal(t, tc.wantTopK, le.Uint32(buf[24:]))
			assert.Equal(t, tc.wantTopP, math.Float32frombits(le.Uint32(buf[28:])))
			assert.Equal(t, tc.wantMinP, math.Float32frombits(le.Uint32(buf[32:])))
			assert.Equal(t, make([]byte, 28), buf[36:RowParamsSize], "reserved words")
			for _, b := range buf[RowParamsSize:] {
				require.Equal(t, byte(0xAB), b, "wrote past the record")
			}
		})
	}
}

func TestRowSeed(t *testing.T) {
	tests := []struct {
		name string
		p    Params
		want uint64
	}{
		{"own seed", Params{Seed: 5, HasSeed: true, RequestID: 9}, 5},
		{"own seed zero", Params{Seed: 0, HasSeed: true, RequestID: 9}, 0},
		{"own nonzero seed without HasSeed", Params{Seed: 5, RequestID: 9}, 5},
		{"derived", Params{RequestID: 9}, philox.RowSeed(77, 9)},
		{"derived, request 0", Params{}, philox.RowSeed(77, 0)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, rowSeed(77, tc.p))
		})
	}
	assert.NotEqual(t, rowSeed(77, Params{RequestID: 1}), rowSeed(77, Params{RequestID: 2}))
	assert.NotEqual(t, rowSeed(77, Params{RequestID: 1}), rowSeed(78, Params{RequestID: 1}))
}

func TestRowResult(t *testing.T) {
	tests := []struct {
		name      string
		token     int32
		status    uint32
		wantToken int32
		wantErr   error
	}{
		{"ok", 12, 0, 12, nil},
		{"ok, first", 0, 0, 0, nil},
		{"non-finite", -1, 1, -1, ErrNonFiniteLogit},
		{"no finite", -1, 2, -1, ErrNoFiniteLogit},
		{"rejected by the kernel", -1, 3, -1, ErrKernelRejected},
		{"unknown status", 4, 9, -1, ErrDevice},
		{"token past vocab", 100, 0, -1, ErrDevice},
		{"negative token", -5, 0, -1, ErrDevice},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tok, err := rowResult(2, tc.token, tc.status, 100)
			assert.Equal(t, tc.wantToken, tok)
			if tc.wantErr == nil {
				assert.NoError(t, err)
			} else {
				assert.True(t, errors.Is(err, tc.wantErr), "got %v", err)
			}
		})
	}
}

func TestPutRowParamsFeatureWords(t *testing.T) {
	le := binary.LittleEndian
	penalised := Params{Temperature: 1, RepetitionPenalty: 1.5, FrequencyPenalty: -0.25, PresencePenalty: 2}
	tests := []struct {
		name                 string
		p                    Params
		flags                abi.Flags
		topn                 uint32
		wantRep, wantFreq    float32
		wantPresence         float32
		wantPenaltyWordsZero bool
	}{
		{"no features", penalised, 0, 0, 0, 0, 0, true},
		{"penalties off without the flag", penalised, abi.FlagBias | abi.FlagLogprobs, 7, 0, 0, 0, true},
		{"penalties with the flag", penalised, abi.FlagPenalties | abi.FlagRecord, 0, 1.5, -0.25, 2, false},
		{"repetition 0 is written as off", Params{FrequencyPenalty: 1}, abi.FlagPenalties, 0, 1, 1, 0, false},
		{"perturbed topn", Params{Temperature: 0.5}, abi.FlagPerturbed | abi.FlagMask, 20, 0, 0, 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			buf := make([]byte, RowParamsSize)
			putRowParams(buf, 1, RouteGumbel, tc.p, 100, 9, tc.flags, tc.topn, -1)
			assert.Equal(t, uint32(tc.flags), le.Uint32(buf[36:]), "flags")
			if tc.wantPenaltyWordsZero {
				assert.Equal(t, make([]byte, 12), buf[40:52], "penalty words")
			} else {
				assert.Equal(t, tc.wantRep, math.Float32frombits(le.Uint32(buf[40:])))
				assert.Equal(t, tc.wantFreq, math.Float32frombits(le.Uint32(buf[44:])))
				assert.Equal(t, tc.wantPresence, math.Float32frombits(le.Uint32(buf[48:])))
			}
			assert.Equal(t, tc.topn, le.Uint32(buf[52:]), "topn")
			assert.Equal(t, make([]byte, 8), buf[56:], "reserved words 14 and 15")
		})
	}
}
