package sampler

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gumbel-go/gumbel/runtime"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Issue 21: a seed that is set is never silently ignored, rows without one never share
// a stream, and a sampler without a fixed seed draws fresh randomness.

// seedVocab is the vocabulary of the seed tests: small, so that token agreement between
// streams is frequent enough to measure.
const seedVocab = 64

// seedLogits are the logits of the seed tests, one row per baselineRows entry.
func seedLogits(rows int) []float32 {
	return randomLogits(rand.New(rand.NewPCG(21, 2)), rows, seedVocab, 1.5)
}

// streams samples rows of logits (vocab seedVocab) at steps 0..steps-1 and returns each
// row's tokens.
func streams(t *testing.T, s *Sampler, logits []float32, params []Params, steps int) [][]int32 {
	t.Helper()
	params = slices.Clone(params)
	out := make([][]int32, len(params))
	var res Result
	for step := range uint64(steps) {
		for i := range params {
			params[i].Step = step
		}
		require.NoError(t, s.SampleFloat32(logits, seedVocab, params, &res))
		for i := range params {
			require.NoError(t, res.Errs[i], "row %d", i)
			out[i] = append(out[i], res.Tokens[i])
		}
	}
	return out
}

// baselineRows are rows whose tokens were recorded before issue 21 (baselineTokens):
// rows with HasSeed, and rows with a request id under a fixed sampler seed.
var baselineRows = []Params{
	{Temperature: 1, Seed: 1, HasSeed: true},
	{Temperature: 1, Seed: 2, HasSeed: true},
	{Temperature: 1, Seed: 0, HasSeed: true},
	{Temperature: 0.8, Seed: 1 << 40, HasSeed: true, RequestID: 5},
	{Temperature: 1.2, TopK: 10, Seed: 9, HasSeed: true},
	{Temperature: 1, TopP: 0.9, MinP: 0.02, Seed: 10, HasSeed: true},
	{Temperature: 1, RequestID: 3},
	{Temperature: 0.9, TopK: 20, RequestID: 4},
}

// baselineTokens[gumbel] are baselineRows' tokens at steps 0..15 under Options{Seed: 77}
// (Gumbel switch on, then off), recorded from the code before issue 21.
var baselineTokens = map[Switch][][]int32{
	On: {
		{17, 31, 32, 32, 32, 29, 45, 45, 55, 45, 3, 14, 20, 17, 46, 2},
		{24, 57, 1, 51, 33, 55, 23, 61, 0, 52, 61, 30, 38, 61, 27, 19},
		{61, 40, 33, 7, 13, 40, 31, 13, 19, 13, 33, 41, 33, 10, 13, 30},
		{15, 15, 15, 34, 59, 15, 44, 32, 42, 32, 25, 34, 15, 62, 62, 62},
		{56, 19, 19, 53, 6, 51, 53, 32, 19, 53, 56, 55, 56, 53, 36, 56},
		{28, 18, 54, 43, 19, 32, 47, 29, 21, 47, 7, 29, 21, 47, 29, 60},
		{15, 29, 39, 19, 62, 42, 27, 29, 7, 46, 53, 46, 21, 46, 39, 59},
		{57, 35, 60, 60, 46, 60, 26, 40, 35, 14, 35, 57, 44, 57, 57, 60},
	},
	Off: {
		{32, 46, 25, 32, 20, 50, 15, 14, 18, 20, 18, 63, 17, 17, 18, 18},
		{33, 1, 46, 9, 51, 52, 28, 57, 42, 11, 6, 6, 0, 61, 45, 33},
		{53, 7, 6, 54, 18, 59, 56, 58, 6, 7, 27, 28, 13, 31, 13, 7},
		{56, 11, 30, 32, 59, 25, 15, 62, 41, 36, 15, 20, 15, 62, 59, 62},
		{6, 6, 56, 56, 56, 36, 36, 53, 32, 36, 56, 63, 56, 6, 63, 63},
		{5, 47, 53, 60, 11, 32, 21, 48, 16, 52, 21, 43, 21, 18, 21, 6},
		{29, 59, 31, 29, 35, 11, 29, 53, 3, 35, 50, 3, 59, 35, 14, 46},
		{60, 35, 35, 35, 15, 57, 57, 60, 35, 26, 12, 57, 26, 16, 35, 16},
	},
}

// baselineSeedZero[gumbel] are the tokens of baselineRows[6:] (request ids, no seed)
// under the sampler seed 0, recorded before issue 21 with Options{} (then seed 0, now
// fresh randomness; Options{HasSeed: true} asks for seed 0).
var baselineSeedZero = map[Switch][][]int32{
	On: {
		{3, 42, 41, 45, 60, 53, 25, 35, 29, 29, 62, 29, 3, 25, 17, 3},
		{40, 57, 60, 60, 57, 43, 11, 57, 12, 11, 60, 35, 57, 46, 60, 35},
	},
	Off: {
		{28, 7, 53, 62, 37, 63, 39, 35, 28, 29, 18, 35, 31, 35, 35, 40},
		{35, 21, 57, 35, 57, 21, 35, 57, 57, 43, 14, 60, 11, 14, 60, 57},
	},
}

func TestSeededRowsKeepTheirTokens(t *testing.T) {
	dev := openCPU(t)
	logits := seedLogits(len(baselineRows))
	for _, gumbel := range []Switch{On, Off} {
		s := newSampler(t, dev, Options{Seed: 77, Gumbel: gumbel})
		assert.Equal(t, baselineTokens[gumbel], streams(t, s, logits, baselineRows, 16), "gumbel %v", gumbel)
	}
}

func TestRowSeedIsNeverIgnored(t *testing.T) {
	dev := openCPU(t)
	logits := seedLogits(1)
	tests := []struct {
		name string
		a, b Params
		same bool
	}{
		{"seed 1 and seed 2 without HasSeed differ", Params{Temperature: 1, Seed: 1}, Params{Temperature: 1, Seed: 2}, false},
		{"a nonzero seed counts as set", Params{Temperature: 1, Seed: 5}, Params{Temperature: 1, Seed: 5, HasSeed: true}, true},
		{"a seed wins over a request id", Params{Temperature: 1, Seed: 5, RequestID: 9}, Params{Temperature: 1, Seed: 5, HasSeed: true}, true},
		{"HasSeed asks for seed 0", Params{Temperature: 1, HasSeed: true, RequestID: 9}, Params{Temperature: 1, HasSeed: true}, true},
		{"seed 0 with HasSeed is not the request's stream", Params{Temperature: 1, HasSeed: true, RequestID: 9}, Params{Temperature: 1, RequestID: 9}, false},
		{"filtered: seed 1 and seed 2 differ", Params{Temperature: 1, TopK: 30, Seed: 1}, Params{Temperature: 1, TopK: 30, Seed: 2}, false},
	}
	for _, gumbel := range []Switch{On, Off} {
		s := newSampler(t, dev, Options{Seed: 77, Gumbel: gumbel})
		for _, tc := range tests {
			t.Run(fmt.Sprintf("%s, gumbel %v", tc.name, gumbel), func(t *testing.T) {
				a := streams(t, s, logits, []Params{tc.a}, 16)[0]
				b := streams(t, s, logits, []Params{tc.b}, 16)[0]
				if tc.same {
					assert.Equal(t, a, b, "gumbel %v", gumbel)
				} else {
					// Two independent streams agree at a step with probability sum p_j^2
					// (about 0.07 here): 16 equal steps in a row would be a 1e-18 event.
					assert.NotEqual(t, a, b, "gumbel %v", gumbel)
				}
			})
		}
	}
}

// softmax returns the probabilities of row at temperature temp.
func softmax(row []float32, temp float64) []float64 {
	m := math.Inf(-1)
	for _, x := range row {
		m = math.Max(m, float64(x)/temp)
	}
	p := make([]float64, len(row))
	sum := 0.0
	for i, x := range row {
		p[i] = math.Exp(float64(x)/temp - m)
		sum += p[i]
	}
	for i := range p {
		p[i] /= sum
	}
	return p
}

func TestUnseededRowsGetIndependentStreams(t *testing.T) {
	dev := openCPU(t)
	// A peaked row, so that four independent draws agree often enough to count.
	row := make([]float32, seedVocab)
	for i := range row {
		row[i] = float32(-float64(i))
	}
	const copies, steps = 4, 100
	logits := slices.Repeat(row, copies)
	tests := []struct {
		name   string
		p      Params
		gumbel Switch
		probs  []float64
	}{
		{"gumbel", Params{Temperature: 1}, On, softmax(row, 1)},
		{"categorical", Params{Temperature: 1}, Off, softmax(row, 1)},
		{"filtered", Params{Temperature: 1, TopK: 8}, On, softmax(row[:8], 1)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newSampler(t, dev, Options{Seed: 77, Gumbel: tc.gumbel})
			// All four agree with probability q = sum p_j^4 at each step, independently
			// across steps when the streams are independent.
			q := 0.0
			for _, p := range tc.probs {
				q += p * p * p * p
			}
			params := slices.Repeat([]Params{tc.p}, copies)
			got := streams(t, s, logits, params, steps)
			agree := 0
			for z := range steps {
				if got[0][z] == got[1][z] && got[1][z] == got[2][z] && got[2][z] == got[3][z] {
					agree++
				}
			}
			// Binomial(steps, q): mean and a 5-sigma band (q is about 0.16 here).
			mean, sd := steps*q, math.Sqrt(steps*q*(1-q))
			assert.InDelta(t, mean, float64(agree), 5*sd+1, "steps where all %d rows agree (q = %.4f)", copies, q)
			for i := 1; i < copies; i++ {
				assert.NotEqual(t, got[0], got[i], "row %d repeats row 0's stream", i)
			}
		})
	}
}

func TestSamplerSeed(t *testing.T) {
	dev := openCPU(t)
	logits := seedLogits(len(baselineRows))
	// Rows that follow the sampler seed: request ids, and rows with neither a seed nor a
	// request id.
	unseeded := []Params{
		{Temperature: 1, RequestID: 3},
		{Temperature: 0.9, TopK: 20, RequestID: 4},
		{Temperature: 1},
		{Temperature: 1.1, MinP: 0.05},
	}
	// unseeded[:2] are baselineRows[6:], on their logits rows.
	uLogits := slices.Concat(logits[6*seedVocab:], logits[:2*seedVocab])
	run := func(t *testing.T, opts Options) (uint64, [][]int32, [][]int32) {
		s := newSampler(t, dev, opts)
		return s.Settings().Seed, streams(t, s, uLogits, unseeded, 16), streams(t, s, logits, baselineRows, 16)
	}
	for _, gumbel := range []Switch{On, Off} {
		t.Run(fmt.Sprintf("gumbel %v", gumbel), func(t *testing.T) {
			seedA, a, seededA := run(t, Options{Gumbel: gumbel})
			seedB, b, seededB := run(t, Options{Gumbel: gumbel})
			assert.NotZero(t, seedA, "a fresh sampler seed is never 0")
			assert.NotEqual(t, seedA, seedB, "two samplers with Options.Seed 0 draw fresh seeds")
			for i := range unseeded {
				assert.NotEqual(t, a[i], b[i], "row %d: two samplers with Options.Seed 0 draw the same tokens", i)
			}
			assert.Equal(t, seededA[:6], seededB[:6], "rows with their own seed ignore the sampler seed")
			assert.Equal(t, baselineTokens[gumbel][:6], seededA[:6], "rows with their own seed keep their tokens")

			tests := []struct {
				name string
				opts Options
				want [][]int32 // tokens of unseeded[:len(want)]
			}{
				{"passing Settings().Seed back reproduces", Options{Seed: seedA, Gumbel: gumbel}, a},
				{"a nonzero seed is fixed", Options{Seed: 77, Gumbel: gumbel}, baselineTokens[gumbel][6:]},
				{"HasSeed fixes seed 0", Options{HasSeed: true, Gumbel: gumbel}, baselineSeedZero[gumbel]},
			}
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					seed, got, _ := run(t, tc.opts)
					assert.Equal(t, tc.opts.Seed, seed, "Settings().Seed")
					assert.Equal(t, tc.want, got[:len(tc.want)])
					// Unnamed rows replay too, given the same calls on a sampler with the
					// same seed.
					_, again, _ := run(t, tc.opts)
					assert.Equal(t, got, again)
				})
			}
		})
	}
}

func TestUnseededBatchRowsGetIndependentStreams(t *testing.T) {
	dev := openCPU(t)
	const rows = 4
	logits := slices.Repeat(seedLogits(1), rows)
	lg := Logits{Data: upload(t, dev, runtime.BytesOf(logits)), Rows: rows, Vocab: seedVocab}
	s := newSampler(t, dev, Options{Seed: 77})
	b, err := s.NewBatch(rows, seedVocab, Float32, 1)
	require.NoError(t, err)
	defer b.Close()
	for i := range rows {
		require.NoError(t, b.SetRow(i, Params{Temperature: 1}))
	}
	got := make([][]int32, rows)
	var res Result
	for range 32 {
		require.NoError(t, b.Launch(lg))
		require.NoError(t, b.Read(&res))
		for i := range rows {
			require.NoError(t, res.Errs[i])
			got[i] = append(got[i], res.Tokens[i])
		}
	}
	for i := 1; i < rows; i++ {
		assert.NotEqual(t, got[0], got[i], "batch row %d repeats row 0's stream", i)
	}
}
