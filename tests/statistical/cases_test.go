package statistical

import (
	"math"
	"strings"
	"testing"

	"github.com/gumbel-go/gumbel/sampler"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCasesAreWellFormed(t *testing.T) {
	for _, size := range []Size{SizeCI, SizeFull} {
		t.Run(size.String(), func(t *testing.T) {
			cases := Cases(Config{Size: size})
			names := map[string]bool{}
			seeds := map[uint64]bool{}
			paths := map[string]bool{}
			for _, c := range cases {
				assert.False(t, names[c.Name], "duplicate case %s", c.Name)
				names[c.Name] = true
				assert.False(t, seeds[c.Seed], "%s: seed shared with another case", c.Name)
				seeds[c.Seed] = true
				assert.Equal(t, Alpha, c.Alpha, c.Name)

				probs, err := Expected(&c)
				require.NoError(t, err, "%s: its filter boundaries must be clear of float32 rounding", c.Name)
				require.Len(t, probs, c.Cells())

				p := c.Params(7)
				assert.Equal(t, uint64(7), p.Step)
				assert.True(t, p.HasSeed)
				filtered := c.TopK > 0 || c.TopP > 0 || c.MinP > 0
				killSwitch := c.Route == sampler.RouteCategorical
				assert.Equal(t, !killSwitch, c.Options().Gumbel == sampler.On,
					"%s: the Gumbel switch is off only for the kill-switch cases", c.Name)
				assert.Equal(t, c.Gumbel, c.Options().Gumbel == sampler.On, c.Name)
				switch {
				case filtered && killSwitch:
					paths["categorical, filtered"] = true
					assert.True(t, strings.Contains(c.Name, "/categorical-"), "%s: a filtered kill-switch case says so", c.Name)
				case filtered:
					paths["filtered"] = true
					assert.Equal(t, sampler.RouteFiltered, c.Route, c.Name)
				case killSwitch:
					paths["categorical"] = true
				default:
					paths["gumbel"] = true
					assert.Equal(t, sampler.RouteGumbel, c.Route, c.Name)
				}
				if size == SizeFull {
					assert.GreaterOrEqual(t, c.Draws, 1_000_000, c.Name)
					assert.Empty(t, c.Detects, c.Name)
				}
				reduced := c.Vocab() == LargeVocab ||
					(c.Route == sampler.RouteGumbel && c.Processors == nil && c.Mode == ModeSample && c.Draws < CISmallDraws)
				if size == SizeCI && reduced {
					assert.NotEmpty(t, c.Detects, "%s: a reduced case must say what it can still detect", c.Name)
					t.Logf("%s: %s", c.Name, c.Detects)
				}
			}
			assert.Len(t, paths, 4)
			for _, want := range []string{
				"flat/V151936/T1.0/gumbel/deciles", "tail/V151936/T1.0/gumbel", "tail/V151936/T1.0/categorical",
				"peaked/V128/T0.5/gumbel", "bimodal/V128/T1.5/categorical", "masked/V128/T1.0/topk50-topp0.9",
				"bimodal/V128/T1.0/minp0.05", "flat/V128/T1.0/categorical-topk50-topp0.9",
				"bimodal/V128/T1.5/categorical-minp0.05", "bimodal/V128/T1.0/categorical-minp0.02/all",
				"bimodal/V128/T1.0/categorical-topk8/mask-grammar", "bimodal/V128/T1.0/minp0.05/mask-one",
				"bimodal/V128/T1.0/categorical-minp0.02/mask-penalties", "bimodal/V90/T1.0/gumbel/mask-tail",
				"spread/V8/T1.0/gumbel/distinct/mask",
			} {
				assert.True(t, names[want], "missing %s", want)
			}
			if size == SizeFull {
				for _, shape := range []Shape{Peaked, Flat, Bimodal, Masked, DiffuseTail} {
					for _, temp := range Temperatures {
						found := false
						for _, c := range cases {
							found = found || (c.Shape == shape && c.Temperature == temp)
						}
						assert.True(t, found, "full suite lacks %v at T %v", shape, temp)
					}
				}
			}
		})
	}
}

func TestFilteredCasesCut(t *testing.T) {
	filteredCases, oneToken := 0, 0
	for _, c := range Cases(Config{Size: SizeFull}) {
		if c.TopK == 0 && c.TopP == 0 && c.MinP == 0 || c.Shape == Extreme {
			// The Extreme rows' filters keep every token of real mass: those cases test
			// the draw among huge tied values, not the cut.
			continue
		}
		filtered, err := Expected(&c)
		require.NoError(t, err)
		logits := c.Logits
		if c.Processors != nil {
			logits, err = ProcessedLogits(logits, *c.Processors)
			require.NoError(t, err)
		}
		plain, err := Probabilities(logits, c.Temperature, Filter{})
		require.NoError(t, err)
		if possible(plain) == 1 {
			// A point mass (the mask-one cases): no filter has anything to cut.
			continue
		}
		filteredCases++
		cut := 0
		for i := range plain {
			if plain[i] > 0 && filtered[i] == 0 {
				cut++
			}
		}
		if c.Shape == Flat {
			// Every logit ties with the k-th: top-k and top-p keep them all.
			assert.Zero(t, cut, c.Name)
			continue
		}
		if c.MinP == pathMinPLoose.minP && c.Temperature > 1 {
			// The loose min-p keeps 3.9 nats, about what the processed row spans at
			// T = 1.5: it may cut nothing there (see pathMinPLoose).
			continue
		}
		assert.Positive(t, cut, "%s: the filter must remove tokens", c.Name)
		kept := 0
		for _, p := range filtered {
			if p > 0 {
				kept++
			}
		}
		if kept == 1 {
			// Top-p 0.9 of a row whose top token holds more: a fine check that no
			// second token slips in, but it tests no proportions.
			oneToken++
		}
	}
	assert.LessOrEqual(t, oneToken*10, filteredCases, "most filtered cases must leave a choice")
}

func TestDiffuseTailShape(t *testing.T) {
	for _, temp := range Temperatures {
		logits := Logits(DiffuseTail, LargeVocab, temp)
		probs, err := Probabilities(logits, temp, Filter{})
		require.NoError(t, err)
		top := 0.0
		for _, p := range probs {
			top = max(top, p)
		}
		tailTokens, tailMass := 0, 0.0
		for _, p := range probs {
			nats := math.Log(top / p)
			if nats >= tailNats-1e-3 {
				assert.LessOrEqual(t, nats, tailNatsMax+1e-3)
				tailTokens++
				tailMass += p
			}
		}
		assert.GreaterOrEqual(t, tailTokens, 100_000, "T %v", temp)
		assert.GreaterOrEqual(t, tailMass, 1e-4, "T %v", temp)
		assert.Greater(t, top, 0.8, "T %v: one dominant token", temp)
		t.Logf("T %v: %d tail tokens hold %.3g of the mass; the top token %.4f", temp, tailTokens, tailMass, top)
	}
}

func TestMaskedShape(t *testing.T) {
	x := Logits(Masked, SmallVocab, 1)
	neg := float32(math.Inf(-1))
	top := argmax(x)
	assert.Equal(t, neg, x[0])
	assert.Equal(t, neg, x[len(x)-1])
	assert.Equal(t, neg, x[top-1])
	assert.Equal(t, neg, x[top+1])
	masked := 0
	for _, v := range x {
		if v == neg {
			masked++
		}
	}
	assert.InDelta(t, len(x)/3, masked, float64(len(x))/8)
}

func TestLogitsAreDeterministic(t *testing.T) {
	for _, shape := range []Shape{Peaked, Flat, Bimodal, Masked, DiffuseTail, Spread} {
		assert.Equal(t, Logits(shape, 1000, 1.5), Logits(shape, 1000, 1.5), shape.String())
	}
	a, b := Cases(Config{}), Cases(Config{Seed: 2})
	require.Equal(t, len(a), len(b))
	assert.NotEqual(t, a[0].Seed, b[0].Seed, "the base seed reaches the cases")
	scaled := Cases(Config{DrawScale: 0.01})
	assert.Equal(t, a[0].Draws/100, scaled[0].Draws)
}

// TestProcessorCasesCut shows that every processor changes its row: the processed law
// differs from the raw one, the bias case's promoted token becomes likely, and the filtered
// cases keep several tokens (all but the point masses of mask-one).
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
		if strings.HasSuffix(c.Name, "/mask-one") {
			assert.Equal(t, 1, possible(p), "%s: a point mass", c.Name)
			continue
		}
		assert.GreaterOrEqual(t, possible(p), 5, "%s: the processed row must leave a choice", c.Name)
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
		assert.Len(t, names, 3)
		routes := map[sampler.Route]int{}
		for _, tc := range TrackedCases(Config{Size: size}) {
			routes[tc.Route]++
			assert.Equal(t, tc.Route == sampler.RouteCategorical, !tc.Gumbel, tc.Name)
		}
		assert.Equal(t, map[sampler.Route]int{sampler.RouteGumbel: 1, sampler.RouteFiltered: 1, sampler.RouteCategorical: 1}, routes,
			"tracked penalties on the Gumbel, filtered and (behind the kill switch) categorical kernels")
	}
}

// possible counts the outcomes of positive probability.
func possible(p []float64) int {
	n := 0
	for _, q := range p {
		if q > 0 {
			n++
		}
	}
	return n
}

// TestBitmaskCases shows that the bitmask cases have the properties their specs claim.
func TestBitmaskCases(t *testing.T) {
	specs := map[string]bool{}
	for _, c := range Cases(Config{Size: SizeFull}) {
		p := c.Processors
		if p == nil || p.Bitmask == nil {
			continue
		}
		label := c.Name[strings.LastIndex(c.Name, "/")+1:]
		specs[label] = true
		v := c.Vocab()
		require.Len(t, p.Bitmask, BitmaskWords(v), c.Name)
		var allowed []int32
		for i := range v {
			if BitmaskAllows(p.Bitmask, i) {
				allowed = append(allowed, int32(i))
			}
		}
		r := ranked(c.Logits)
		rank := make([]int, v)
		for j, tok := range r {
			rank[tok] = j
		}
		switch label {
		case "mask-grammar":
			require.Len(t, allowed, 11, c.Name)
			likely := 0
			for _, tok := range allowed {
				if rank[tok] < 2 {
					likely++
				} else {
					assert.GreaterOrEqual(t, rank[tok], 40, "%s: token %d", c.Name, tok)
				}
			}
			assert.Equal(t, 1, likely, "%s: one likely token", c.Name)
			assert.False(t, BitmaskAllows(p.Bitmask, int(r[0])), "%s: the top token is masked out", c.Name)
		case "mask-one":
			assert.Equal(t, []int32{r[v-1]}, allowed, c.Name)
			// Below min-p 0.05 of the raw top at every temperature of the suite.
			for _, temp := range Temperatures {
				assert.Less(t, math.Exp(float64(c.Logits[r[v-1]]-c.Logits[r[0]])/float64(temp)), 0.05)
			}
		case "mask-penalties":
			require.NotNil(t, p.Allowed, c.Name)
			list := map[int32]bool{}
			for _, tok := range p.Allowed {
				list[tok] = true
			}
			maskOnly, listOnly := 0, 0
			for i := range v {
				switch {
				case BitmaskAllows(p.Bitmask, i) && !list[int32(i)]:
					maskOnly++
				case !BitmaskAllows(p.Bitmask, i) && list[int32(i)]:
					listOnly++
				}
			}
			assert.Positive(t, maskOnly, "%s: the list rules out tokens the mask keeps", c.Name)
			assert.Positive(t, listOnly, "%s: the mask rules out tokens the list keeps", c.Name)
			pos, neg := 0, 0
			for _, tok := range p.Prompt {
				if BitmaskAllows(p.Bitmask, int(tok)) && list[tok] {
					if c.Logits[tok] > 0 {
						pos++
					} else {
						neg++
					}
				}
			}
			assert.Positive(t, pos, "%s: a penalised positive logit is kept", c.Name)
			assert.Positive(t, neg, "%s: a penalised negative logit is kept", c.Name)
			x, err := ProcessedLogits(c.Logits, *p)
			require.NoError(t, err)
			unmasked := *p
			unmasked.Bitmask = nil
			y, err := ProcessedLogits(c.Logits, unmasked)
			require.NoError(t, err)
			gap := y[ranked(y)[0]] - x[ranked(x)[0]]
			assert.InDelta(t, 0.35, gap, 0.01, "%s: the mask lowers the row's maximum", c.Name)
		case "mask-tail":
			require.NotZero(t, v%32, c.Name)
			last := uint32(p.Bitmask[len(p.Bitmask)-1])
			assert.Equal(t, ^uint32(0)<<(v%32), last&(^uint32(0)<<(v%32)), "%s: every bit past V is set", c.Name)
			assert.True(t, BitmaskAllows(p.Bitmask, 31), "%s: the sign bit allows a token", c.Name)
			// The last word's likely tokens: some allowed, some not.
			in, out := 0, 0
			for i := v &^ 31; i < v; i++ {
				if rank[i] < 20 {
					if BitmaskAllows(p.Bitmask, i) {
						in++
					} else {
						out++
					}
				}
			}
			assert.Positive(t, in, c.Name)
			assert.Positive(t, out, c.Name)
		case "mask":
			require.Equal(t, PairVocab, v, c.Name)
			assert.Len(t, allowed, 5, c.Name)
			assert.False(t, BitmaskAllows(p.Bitmask, int(r[0])), "%s: the top token is masked out", c.Name)
			assert.Equal(t, int32(-1)<<v, p.Bitmask[0]&(int32(-1)<<v), "%s: every bit past V is set", c.Name)
		default:
			t.Errorf("%s: unknown bitmask spec", c.Name)
		}
	}
	assert.Len(t, specs, 5)
}
