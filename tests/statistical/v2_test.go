package statistical

import (
	"math"
	"strings"
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
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ProcessedLogits(x, tt.proc)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
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

// processorBug is a misimplementation of the processors whose law a case must reject.
type processorBug struct {
	name    string
	applies func(c *Case) bool
	logits  func(c *Case) ([]float32, error)
}

// processorBugs are the ways a kernel could get the processors wrong.
var processorBugs = []processorBug{
	{"processors skipped", func(c *Case) bool { return true }, func(c *Case) ([]float32, error) { return c.Logits, nil }},
	{"negative logits divided by the repetition penalty too",
		func(c *Case) bool { return c.Processors.Repetition > 1 },
		func(c *Case) ([]float32, error) {
			p := *c.Processors
			x, err := ProcessedLogits(c.Logits, Processors{BiasTokens: p.BiasTokens, BiasValues: p.BiasValues})
			if err != nil {
				return nil, err
			}
			for _, t := range p.Prompt {
				x[t] /= p.Repetition
			}
			return ProcessedLogits(x, Processors{Allowed: p.Allowed, Banned: p.Banned})
		}},
	{"penalties before the bias",
		func(c *Case) bool { return c.Processors.Repetition > 1 && c.Processors.BiasTokens != nil },
		func(c *Case) ([]float32, error) {
			p := *c.Processors
			x, err := ProcessedLogits(c.Logits, Processors{Prompt: p.Prompt, Repetition: p.Repetition})
			if err != nil {
				return nil, err
			}
			return ProcessedLogits(x, Processors{BiasTokens: p.BiasTokens, BiasValues: p.BiasValues, Allowed: p.Allowed, Banned: p.Banned})
		}},
	{"banned tokens ignored",
		func(c *Case) bool { return c.Processors.Banned != nil },
		func(c *Case) ([]float32, error) {
			p := *c.Processors
			p.Banned = nil
			return ProcessedLogits(c.Logits, p)
		}},
}

// TestProcessorCasesHaveTeeth shows that every processor case of the CI suite catches,
// with probability at least 0.99, a sampler that gets its processor wrong in a plausible
// way: a law that puts mass on an impossible token fails outright, and any other has a
// non-centrality above what p < Alpha needs at 99% power on the case's degrees of
// freedom (taken as the number of possible tokens, an upper bound on the bins).
func TestProcessorCasesHaveTeeth(t *testing.T) {
	tested := 0
	for _, c := range Cases(Config{Size: SizeCI}) {
		if c.Processors == nil {
			continue
		}
		want, err := Expected(&c)
		require.NoError(t, err, c.Name)
		possible := 0
		for _, q := range want {
			if q > 0 {
				possible++
			}
		}
		need := DetectableNoncentrality(max(1, possible-1), c.Alpha, 0.99)
		for _, bug := range processorBugs {
			if !bug.applies(&c) {
				continue
			}
			x, err := bug.logits(&c)
			require.NoError(t, err, "%s: %s", c.Name, bug.name)
			got, err := Probabilities(x, c.Temperature, Filter{TopK: c.TopK, TopP: c.TopP, MinP: c.MinP})
			require.NoError(t, err, "%s: %s", c.Name, bug.name)
			lambda := float64(c.Draws) * Noncentrality(want, got)
			assert.Greater(t, lambda, need, "%s: %s", c.Name, bug.name)
			t.Logf("%s, %s: non-centrality %.3g (needs %.0f)", c.Name, bug.name, lambda, need)
			tested++
		}
	}
	assert.GreaterOrEqual(t, tested, 2*len(processorSpecs)+6)
}

// TestProcessorCasesCut shows that every processor changes its row: the processed law
// differs from the raw one, the bias case's promoted token becomes likely, and the filtered
// cases keep several tokens.
func TestProcessorCasesCut(t *testing.T) {
	for _, c := range Cases(Config{Size: SizeFull}) {
		if c.Processors == nil {
			continue
		}
		x, err := ProcessedLogits(c.Logits, *c.Processors)
		require.NoError(t, err)
		assert.NotEqual(t, c.Logits, x, c.Name)
		p, err := Expected(&c)
		require.NoError(t, err)
		kept := 0
		for _, q := range p {
			if q > 0 {
				kept++
			}
		}
		assert.GreaterOrEqual(t, kept, 5, "%s: the processed row must leave a choice", c.Name)
		if strings.HasSuffix(c.Name, "/bias") {
			r := ranked(c.Logits)
			assert.Zero(t, p[r[0]], "%s: the top token is banned by its bias", c.Name)
			rare := r[len(r)-1]
			above := 0
			for _, q := range p {
				if q > p[rare] {
					above++
				}
			}
			assert.Less(t, above, 5, "%s: the rarest token is promoted among the five most likely", c.Name)
		}
	}
}

// copyDrawer draws pairs of independent draws from p, except that with probability eps
// the second copies the first.
type copyDrawer struct{ *aliasDrawer }

func newCopyDrawer(p []float64, eps float64, seed uint64) copyDrawer {
	v := len(p)
	law := make([]float64, v*v)
	for a := range p {
		for b := range p {
			law[a*v+b] = (1 - eps) * p[a] * p[b]
		}
		law[a*v+a] += eps * p[a]
	}
	return copyDrawer{newAliasDrawer(law, seed)}
}

func TestPairCasesCatchBiasedSamplers(t *testing.T) {
	cases := Cases(Config{Size: SizeCI})
	pairs := findCase(t, cases, "spread/V8/T1.0/gumbel/pairs")
	distinct := findCase(t, cases, "spread/V8/T1.0/gumbel/distinct")
	law := func(c Case) []float64 {
		p, err := Probabilities(c.Logits, c.Temperature, Filter{})
		require.NoError(t, err)
		return p
	}
	tests := []struct {
		name   string
		c      Case
		drawer Drawer
		fails  bool
	}{
		{"independent pairs", pairs, newAliasDrawer(expected(t, pairs), 1), false},
		{"second draw copies the first 2% of the time", pairs, newCopyDrawer(law(pairs), 0.02, 2), true},
		{"successive sampling", distinct, newAliasDrawer(expected(t, distinct), 3), false},
		{"independent draws, repeats rejected", distinct, newAliasDrawer(rejectionLaw(law(distinct)), 4), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := RunDrawer(tt.drawer, tt.c, nil)
			require.Equal(t, tt.c.Draws, out.Draws, out.Message)
			assert.Equal(t, !tt.fails, out.Pass, "%s: %s", tt.c.Name, out.Message)
			t.Logf("%s: %s", tt.c.Name, out.Message)
		})
	}
}

func TestTrackedCasesAreWellFormed(t *testing.T) {
	for _, size := range []Size{SizeCI, SizeFull} {
		names := map[string]bool{}
		for _, tc := range TrackedCases(Config{Size: size}) {
			assert.False(t, names[tc.Name], tc.Name)
			names[tc.Name] = true
			require.NotNil(t, tc.Processors, tc.Name)
			assert.True(t, tc.Processors.Penalised(), tc.Name)
			assert.NotZero(t, tc.Processors.Frequency, tc.Name)
			assert.NotZero(t, tc.Processors.Presence, tc.Name)
			assert.Greater(t, tc.Processors.Repetition, float32(1), tc.Name)
			assert.GreaterOrEqual(t, tc.BuildSteps, 2, tc.Name)
			p := tc.Params(3)
			assert.Equal(t, tc.Processors.Frequency, p.FrequencyPenalty)
			assert.Equal(t, tc.Processors.Presence, p.PresencePenalty)
			assert.Equal(t, tc.Processors.Repetition, p.RepetitionPenalty)
			// The prompt holds positive and negative logits.
			pos, negs := 0, 0
			for _, tok := range tc.Processors.Prompt {
				if tc.Logits[tok] > 0 {
					pos++
				} else {
					negs++
				}
			}
			assert.Positive(t, pos, tc.Name)
			assert.Positive(t, negs, tc.Name)
			if size == SizeFull {
				assert.GreaterOrEqual(t, tc.Draws, FullDraws)
			}
		}
		assert.Len(t, names, 2)
	}
}
