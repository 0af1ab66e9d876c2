package statistical

import (
	"errors"
	"math"
	"math/bits"
	"math/rand/v2"
	"sort"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// These tests prove the harness has teeth: simulated samplers, exact or with a known
// bias, run through RunDrawer on the suite's own cases. The simulations are cheap (no
// pass over the vocabulary per draw), so they run at the full size's draw counts. An
// exact simulation must pass every case (no false alarm at the fixed seeds); each biased
// one must fail the case built to catch it.

// aliasDrawer draws tokens i.i.d. from a given distribution with Vose's alias method
// (O(1) per draw). A token of probability zero is never drawn: its own column has
// threshold 0 and its alias is a token of positive probability.
type aliasDrawer struct {
	threshold []float64
	alias     []int32
	rng       *rand.Rand
}

func newAliasDrawer(probs []float64, seed uint64) *aliasDrawer {
	n := len(probs)
	sum := 0.0
	for _, p := range probs {
		sum += p
	}
	d := &aliasDrawer{threshold: make([]float64, n), alias: make([]int32, n), rng: rand.New(rand.NewPCG(seed, 0x696e76))}
	scaled := make([]float64, n)
	var small, large []int32
	for i, p := range probs {
		scaled[i] = p / sum * float64(n)
		if scaled[i] < 1 {
			small = append(small, int32(i))
		} else {
			large = append(large, int32(i))
		}
	}
	for len(small) > 0 && len(large) > 0 {
		s, l := small[len(small)-1], large[len(large)-1]
		small = small[:len(small)-1]
		d.threshold[s], d.alias[s] = scaled[s], l
		scaled[l] -= 1 - scaled[s]
		if scaled[l] < 1 {
			large = large[:len(large)-1]
			small = append(small, l)
		}
	}
	// Leftovers are 1 up to rounding: they keep their own column.
	for _, i := range append(small, large...) {
		if probs[i] > 0 {
			d.threshold[i], d.alias[i] = 1, i
		} else {
			d.threshold[i], d.alias[i] = 0, int32(argmaxFloat(probs))
		}
	}
	return d
}

func argmaxFloat(p []float64) int {
	best := 0
	for i, v := range p {
		if v > p[best] {
			best = i
		}
	}
	return best
}

func (d *aliasDrawer) Batch() int { return 4096 }

func (d *aliasDrawer) Draw(_ uint64, tokens []int32) error {
	n := len(d.threshold)
	for j := range tokens {
		i := d.rng.IntN(n)
		if d.rng.Float64() < d.threshold[i] {
			tokens[j] = int32(i)
		} else {
			tokens[j] = d.alias[i]
		}
	}
	return nil
}

// gumbelGroupDrawer simulates Gumbel-max over a row whose logits take few distinct
// values, with the noise optionally capped (the -log(-log u) of a float32 u that can
// get no closer to 1 than 2^-24 cannot exceed about 16.6). Over n tokens sharing a scaled
// logit y, the largest of n capped noises is min(log n + G, cap) with G one standard
// Gumbel, so a draw costs one variate per distinct logit; the winner is then uniform
// within its group. With G = -log E, E ~ Exp(1), the group's exp(score) is
// min(n·e^y / E, e^(y + cap)): compared in that form, a draw needs no logarithm.
type gumbelGroupDrawer struct {
	weight  []float64 // n·e^(y - y_top) of each group
	ceiling []float64 // e^(y - y_top + cap), +Inf without a cap
	members [][]int32
	rng     *rand.Rand
}

func newGumbelGroupDrawer(logits []float32, temperature float32, noiseCap float64, seed uint64) *gumbelGroupDrawer {
	byValue := map[float32][]int32{}
	for i, x := range logits {
		if !math.IsInf(float64(x), -1) {
			byValue[x] = append(byValue[x], int32(i))
		}
	}
	d := &gumbelGroupDrawer{rng: rand.New(rand.NewPCG(seed, 0x67756d))}
	keys := make([]float32, 0, len(byValue))
	for x := range byValue {
		keys = append(keys, x)
	}
	sort.Slice(keys, func(a, b int) bool { return keys[a] > keys[b] })
	top := float64(keys[0]) / float64(temperature)
	for _, x := range keys {
		y := float64(x)/float64(temperature) - top
		d.weight = append(d.weight, float64(len(byValue[x]))*math.Exp(y))
		d.ceiling = append(d.ceiling, math.Exp(y+noiseCap))
		d.members = append(d.members, byValue[x])
	}
	return d
}

func (d *gumbelGroupDrawer) Batch() int { return 4096 }

func (d *gumbelGroupDrawer) Draw(_ uint64, tokens []int32) error {
	for j := range tokens {
		best, win := 0.0, 0
		for g, w := range d.weight {
			if d.ceiling[g] <= best {
				continue // even the capped maximum cannot win: skipping changes nothing
			}
			if s := min(w/d.rng.ExpFloat64(), d.ceiling[g]); s > best {
				best, win = s, g
			}
		}
		m := d.members[win]
		tokens[j] = m[d.rng.IntN(len(m))]
	}
	return nil
}

// tieDrawer simulates Gumbel-max (equivalently the exponential race) over a flat row of
// V tokens whose uniforms have only `bits` bits, ties going to the lowest index. The
// winning value is shared by c tokens, c ~ Binomial(V, 2^-bits) conditioned on c >= 1
// (the drift of that law over the ~2^bits/V levels above the winner is negligible);
// the c tokens are a uniform random subset and the lowest wins. bits = 0 means
// continuous uniforms: no ties, a uniform index.
type tieDrawer struct {
	vocab int
	cdf   []float64 // of c, from c = 1
	rng   *rand.Rand
	picks []int32
}

func newTieDrawer(vocab, bits int, seed uint64) *tieDrawer {
	d := &tieDrawer{vocab: vocab, rng: rand.New(rand.NewPCG(seed, 0x746965))}
	if bits == 0 {
		d.cdf = []float64{1}
		return d
	}
	p := math.Ldexp(1, -bits)
	n := float64(vocab)
	// Binomial(n, p) probabilities for c = 1..16 through logs, conditioned on c >= 1.
	p0 := math.Exp(n * math.Log1p(-p))
	sum := 0.0
	for c := 1; c <= 16; c++ {
		lg, _ := math.Lgamma(n + 1)
		lc, _ := math.Lgamma(float64(c) + 1)
		lnc, _ := math.Lgamma(n - float64(c) + 1)
		sum += math.Exp(lg-lc-lnc+float64(c)*math.Log(p)+(n-float64(c))*math.Log1p(-p)) / (1 - p0)
		d.cdf = append(d.cdf, sum)
	}
	return d
}

func (d *tieDrawer) Batch() int { return 4096 }

func (d *tieDrawer) Draw(_ uint64, tokens []int32) error {
	for j := range tokens {
		u := d.rng.Float64()
		c := 1 + sort.SearchFloat64s(d.cdf, u)
		c = min(c, len(d.cdf))
		d.picks = d.picks[:0]
		lowest := int32(d.vocab)
		for len(d.picks) < c {
			i := int32(d.rng.IntN(d.vocab))
			dup := false
			for _, q := range d.picks {
				dup = dup || q == i
			}
			if !dup {
				d.picks = append(d.picks, i)
				lowest = min(lowest, i)
			}
		}
		tokens[j] = lowest
	}
	return nil
}

// findCase returns the case of that name from a suite.
func findCase(t *testing.T, suite []Case, name string) Case {
	t.Helper()
	for _, c := range suite {
		if c.Name == name {
			return c
		}
	}
	require.Failf(t, "no such case", "%s", name)
	return Case{}
}

func expected(t *testing.T, c Case) []float64 {
	t.Helper()
	p, err := Expected(&c)
	require.NoError(t, err)
	return p
}

// TestExactSimulationPassesEveryCase runs an exact i.i.d. sampler through every case of
// both suites at their own draw counts (the flat tie case at a tenth: its 2e7 draws
// take long and prove nothing more): the harness raises no false alarm at the fixed
// seeds.
func TestExactSimulationPassesEveryCase(t *testing.T) {
	seen := map[string]bool{}
	for _, size := range []Size{SizeCI, SizeFull} {
		for _, c := range Cases(Config{Size: size}) {
			if seen[c.Name+"/"+strconv.Itoa(c.Draws)] {
				continue
			}
			seen[c.Name+"/"+strconv.Itoa(c.Draws)] = true
			if c.Draws > FullDraws {
				c.Draws /= 10
			}
			out := RunDrawer(newAliasDrawer(expected(t, c), c.Seed), c, nil)
			assert.True(t, out.Pass, "%s (%d draws): %s", c.Name, c.Draws, out.Message)
			assert.Equal(t, c.Draws, out.Draws, c.Name)
			assert.Equal(t, out.DF+1, out.Bins, c.Name)
		}
	}
}

func TestBiasedSamplersFail(t *testing.T) {
	full := Cases(Config{Size: SizeFull})
	tail := findCase(t, full, "tail/V151936/T1.0/gumbel")
	tailCold := findCase(t, full, "tail/V151936/T0.5/categorical")
	flat := findCase(t, full, "flat/V151936/T1.0/gumbel/deciles")
	masked := findCase(t, full, "masked/V128/T1.0/gumbel")
	bimodal := findCase(t, full, "bimodal/V128/T0.5/gumbel")
	flatTopK := findCase(t, full, "flat/V128/T1.0/topk50-topp0.9")
	bimodalMinP := findCase(t, full, "bimodal/V128/T1.5/minp0.05")

	// dropTail zeroes the probability of every token more than `nats` below the top.
	dropTail := func(p []float64, nats float64) []float64 {
		top := 0.0
		for _, v := range p {
			top = max(top, v)
		}
		out := append([]float64(nil), p...)
		for i, v := range out {
			if v > 0 && math.Log(top/v) > nats {
				out[i] = 0
			}
		}
		return out
	}

	tests := []struct {
		name   string
		c      Case
		drawer func(c Case) Drawer
		fails  bool
	}{
		{"gumbel-max, exact noise", tail,
			func(c Case) Drawer { return newGumbelGroupDrawer(c.Logits, c.Temperature, math.Inf(1), c.Seed) }, false},
		{"gumbel-max, noise capped at 16.6 (24-bit float u near 1)", tail,
			func(c Case) Drawer { return newGumbelGroupDrawer(c.Logits, c.Temperature, 16.6, c.Seed) }, true},
		{"categorical that drops tokens 19 nats below the top", tailCold,
			func(c Case) Drawer { return newAliasDrawer(dropTail(expected(t, c), 19), c.Seed) }, true},
		{"flat row, continuous uniforms", flat,
			func(c Case) Drawer { return newTieDrawer(c.Vocab(), 0, c.Seed) }, false},
		{"flat row, 24-bit uniforms, lowest index wins ties", flat,
			func(c Case) Drawer { return newTieDrawer(c.Vocab(), 24, c.Seed) }, true},
		{"one masked token drawn once", masked,
			func(c Case) Drawer {
				p := expected(t, c)
				leak := append([]float64(nil), p...)
				leak[0] = 1.0 / float64(c.Draws) // token 0 is masked in this shape
				return newAliasDrawer(leak, c.Seed)
			}, true},
		{"temperature ignored (T = 1 at T = 0.5)", bimodal,
			func(c Case) Drawer {
				p, err := Probabilities(c.Logits, 1, Filter{})
				require.NoError(t, err)
				return newAliasDrawer(p, c.Seed)
			}, true},
		{"top-k that drops ties at the k-th logit", flatTopK,
			func(c Case) Drawer {
				p := make([]float64, c.Vocab())
				for i := range 50 {
					p[i] = 1.0 / 50
				}
				return newAliasDrawer(p, c.Seed)
			}, true},
		{"min-p judged on logits before the temperature", bimodalMinP,
			func(c Case) Drawer {
				untempered, err := Probabilities(c.Logits, 1, Filter{MinP: c.MinP})
				require.NoError(t, err)
				q, err := Probabilities(c.Logits, c.Temperature, Filter{})
				require.NoError(t, err)
				for i := range q {
					if untempered[i] == 0 {
						q[i] = 0
					}
				}
				return newAliasDrawer(q, c.Seed)
			}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := RunDrawer(tt.drawer(tt.c), tt.c, nil)
			require.Equal(t, tt.c.Draws, out.Draws, out.Message)
			if tt.fails {
				assert.False(t, out.Pass, "%s passed a biased sampler: %s", tt.c.Name, out.Message)
			} else {
				assert.True(t, out.Pass, "%s failed an exact sampler: %s", tt.c.Name, out.Message)
			}
			t.Logf("%s, %d draws: %s", tt.c.Name, out.Draws, out.Message)
		})
	}
}

// tieBiasNoncentrality is the chi-square non-centrality per draw that 24-bit ties (the
// law of tieDrawer) give the decile test of a flat row: with c tokens tied, the winner is
// the lowest of c uniform indices, which lands in decile i with probability
// (1 - (i-1)/10)^c - (1 - i/10)^c instead of 1/10.
func tieBiasNoncentrality(vocab, bits int) float64 {
	d := newTieDrawer(vocab, bits, 1)
	var q [10]float64
	prev := 0.0
	for k, cum := range d.cdf {
		c := float64(k + 1)
		for i := range q {
			q[i] += (cum - prev) * (math.Pow(1-float64(i)/10, c) - math.Pow(1-float64(i+1)/10, c))
		}
		prev = cum
	}
	lambda := 0.0
	for _, v := range q {
		lambda += (v - 0.1) * (v - 0.1) / 0.1
	}
	return lambda
}

// TestTieBiasDrawCount justifies FullFlatLargeDraws: 2e7 draws catch the 24-bit tie bias
// at V = 151936 almost surely, where 1e6 draws would catch it almost never.
func TestTieBiasDrawCount(t *testing.T) {
	perDraw := tieBiasNoncentrality(LargeVocab, 24)
	t.Logf("24-bit ties at V = %d: non-centrality %.3g per draw; %d draws give %.0f, %d give %.1f",
		LargeVocab, perDraw, FullFlatLargeDraws, perDraw*FullFlatLargeDraws, FullDraws, perDraw*FullDraws)
	assert.InDelta(t, 6.7e-6, perDraw, 0.5e-6, "the figure quoted in cases.go")
	assert.Greater(t, Power(9, perDraw*FullFlatLargeDraws, Alpha), 0.99)
	assert.Less(t, Power(9, perDraw*FullDraws, Alpha), 0.01)
	// 32-bit words alone (before the contract's tail extension) make ties 256 times
	// rarer and the non-centrality 65536 times smaller: invisible at any count here.
	assert.Less(t, tieBiasNoncentrality(LargeVocab, 32)*FullFlatLargeDraws, 0.01)
}

// TestTemperatureCasesHaveTeeth shows that every unfiltered small-vocabulary case of the
// CI suite at a temperature other than 1 (where the temperature is the case's own job)
// catches, with probability at least 0.99, a sampler whose temperature is 10% off either
// way. The flat shape is left out: no temperature changes its law.
func TestTemperatureCasesHaveTeeth(t *testing.T) {
	tested := 0
	for _, c := range Cases(Config{Size: SizeCI}) {
		if c.Vocab() != SmallVocab || c.Temperature == 1 || c.Shape == Flat || c.Processors != nil || c.Mode != ModeSample ||
			(Filter{TopK: c.TopK, TopP: c.TopP, MinP: c.MinP}) != (Filter{}) {
			continue
		}
		want := expected(t, c)
		possible := 0
		for _, q := range want {
			if q > 0 {
				possible++
			}
		}
		need := DetectableNoncentrality(max(1, possible-1), c.Alpha, 0.99)
		lambda := float64(c.Draws) * temperatureNoncentrality(&c, want, 0.1)
		assert.Greater(t, lambda, need, "%s (%d draws)", c.Name, c.Draws)
		tested++
	}
	assert.Equal(t, 12, tested, "three shapes at two temperatures on two routes")
}

// TestFlatLargeCaseCatchesALostBlock shows that the flat decile case of the CI suite
// catches, with probability at least 0.99, a split phase that drops one block of the
// row, for a row cut into up to eight blocks (the CPU device cuts one into as many as
// it has workers).
func TestFlatLargeCaseCatchesALostBlock(t *testing.T) {
	c := findCase(t, Cases(Config{Size: SizeCI}), "flat/V151936/T1.0/gumbel/deciles")
	want := expected(t, c)
	deciles := func(p []float64) []float64 {
		d := make([]float64, 10)
		for i, q := range p {
			d[i*10/len(p)] += q
		}
		return d
	}
	need := DetectableNoncentrality(9, c.Alpha, 0.99)
	for blocks := 2; blocks <= 8; blocks++ {
		for k := range blocks {
			lo, hi := k*len(want)/blocks, (k+1)*len(want)/blocks
			got := append([]float64(nil), want...)
			kept := 0.0
			for i := range got {
				if i >= lo && i < hi {
					got[i] = 0
				}
				kept += got[i]
			}
			for i := range got {
				got[i] /= kept
			}
			lambda := float64(c.Draws) * Noncentrality(deciles(want), deciles(got))
			assert.Greater(t, lambda, need, "block %d of %d lost", k, blocks)
		}
	}
}

// processorBug is a misimplementation of the processors whose law a case must reject.
type processorBug struct {
	name    string
	applies func(c *Case) bool
	// logits are the row the bug samples, through the case's temperature and filters;
	// law, when not nil, is instead the bug's law over the tokens, filters included
	// (errNothingKept when it keeps no token: the row fails).
	logits func(c *Case) ([]float32, error)
	law    func(c *Case) ([]float64, error)
}

// errNothingKept is the law of a bug that leaves a row no token to draw: the sampler
// fails the row (ErrNoFiniteLogit) or draws a token of probability zero.
var errNothingKept = errors.New("no token kept")

// processorBugs are the ways a kernel could get the processors wrong.
var processorBugs = []processorBug{
	{name: "processors skipped", applies: func(c *Case) bool { return true },
		logits: func(c *Case) ([]float32, error) { return c.Logits, nil }},
	{name: "negative logits divided by the repetition penalty too",
		applies: func(c *Case) bool { return c.Processors.Repetition > 1 },
		logits: func(c *Case) ([]float32, error) {
			p := *c.Processors
			x, err := ProcessedLogits(c.Logits, Processors{BiasTokens: p.BiasTokens, BiasValues: p.BiasValues})
			if err != nil {
				return nil, err
			}
			for _, t := range p.Prompt {
				x[t] /= p.Repetition
			}
			return ProcessedLogits(x, Processors{Allowed: p.Allowed, Banned: p.Banned, Bitmask: p.Bitmask})
		}},
	{name: "penalties before the bias",
		applies: func(c *Case) bool { return c.Processors.Repetition > 1 && c.Processors.BiasTokens != nil },
		logits: func(c *Case) ([]float32, error) {
			p := *c.Processors
			x, err := ProcessedLogits(c.Logits, Processors{Prompt: p.Prompt, Repetition: p.Repetition})
			if err != nil {
				return nil, err
			}
			return ProcessedLogits(x, Processors{BiasTokens: p.BiasTokens, BiasValues: p.BiasValues,
				Allowed: p.Allowed, Banned: p.Banned, Bitmask: p.Bitmask})
		}},
	{name: "banned tokens ignored",
		applies: func(c *Case) bool { return c.Processors.Banned != nil },
		logits: func(c *Case) ([]float32, error) {
			p := *c.Processors
			p.Banned = nil
			return ProcessedLogits(c.Logits, p)
		}},
	{name: "bitmask ignored",
		applies: func(c *Case) bool { return c.Processors.Bitmask != nil },
		logits: func(c *Case) ([]float32, error) {
			p := *c.Processors
			p.Bitmask = nil
			return ProcessedLogits(c.Logits, p)
		}},
	{name: "bitmask bits read most significant first",
		applies: func(c *Case) bool { return c.Processors.Bitmask != nil },
		logits: func(c *Case) ([]float32, error) {
			p := *c.Processors
			p.Bitmask = make([]int32, len(c.Processors.Bitmask))
			for i, w := range c.Processors.Bitmask {
				p.Bitmask[i] = int32(bits.Reverse32(uint32(w)))
			}
			return ProcessedLogits(c.Logits, p)
		}},
	{name: "bitmask ORed with the allowed tokens",
		applies: func(c *Case) bool { return c.Processors.Bitmask != nil && c.Processors.Allowed != nil },
		logits: func(c *Case) ([]float32, error) {
			p := *c.Processors
			p.Bitmask = BitmaskOf(c.Vocab(), p.Allowed)
			for i, w := range c.Processors.Bitmask {
				p.Bitmask[i] |= w
			}
			p.Allowed = nil
			return ProcessedLogits(c.Logits, p)
		}},
	{name: "bitmask applied after the filters",
		applies: func(c *Case) bool {
			return c.Processors.Bitmask != nil && (Filter{TopK: c.TopK, TopP: c.TopP, MinP: c.MinP}) != (Filter{})
		},
		law: func(c *Case) ([]float64, error) {
			p := *c.Processors
			p.Bitmask = nil
			x, err := ProcessedLogits(c.Logits, p)
			if err != nil {
				return nil, err
			}
			q, err := Probabilities(x, c.Temperature, Filter{TopK: c.TopK, TopP: c.TopP, MinP: c.MinP})
			if err != nil {
				return nil, err
			}
			sum := 0.0
			for i := range q {
				if !BitmaskAllows(c.Processors.Bitmask, i) {
					q[i] = 0
				}
				sum += q[i]
			}
			if sum == 0 {
				return nil, errNothingKept
			}
			for i := range q {
				q[i] /= sum
			}
			return q, nil
		}},
}

// bugLaw returns the law of a case's outcomes under a processor bug.
func bugLaw(c *Case, bug processorBug) ([]float64, error) {
	var p []float64
	if bug.law != nil {
		var err error
		if p, err = bug.law(c); err != nil {
			return nil, err
		}
	} else {
		x, err := bug.logits(c)
		if err != nil {
			return nil, err
		}
		if p, err = Probabilities(x, c.Temperature, Filter{TopK: c.TopK, TopP: c.TopP, MinP: c.MinP}); err != nil {
			return nil, err
		}
	}
	if c.Mode == ModeSample {
		return p, nil
	}
	return PairProbabilities(p, c.Mode == ModePairs)
}

// TestProcessorCasesHaveTeeth shows that every processor case of the CI suite catches,
// with probability at least 0.99, a sampler that gets its processor wrong in a plausible
// way: a law that puts mass q on impossible tokens fails as soon as one is drawn, with
// probability 1 - (1 - q)^n over n draws; any other has a non-centrality above what
// p < Alpha needs at 99% power on the case's degrees of freedom (taken as the number of
// possible outcomes, an upper bound on the bins).
func TestProcessorCasesHaveTeeth(t *testing.T) {
	tested, masks := 0, 0
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
			tested++
			if bug.name == "bitmask ignored" {
				masks++
			}
			got, err := bugLaw(&c, bug)
			if errors.Is(err, errNothingKept) {
				t.Logf("%s, %s: no token left, the row fails", c.Name, bug.name)
				continue
			}
			require.NoError(t, err, "%s: %s", c.Name, bug.name)
			impossible := 0.0
			for i := range want {
				if want[i] == 0 {
					impossible += got[i]
				}
			}
			caught := 1.0
			if impossible < 1 {
				caught = -math.Expm1(float64(c.Draws) * math.Log1p(-impossible))
			}
			lambda := float64(c.Draws) * Noncentrality(want, got)
			if caught < 0.99 {
				assert.Greater(t, lambda, need, "%s: %s", c.Name, bug.name)
			}
			t.Logf("%s, %s: impossible tokens drawn with probability %.3g, non-centrality %.3g (needs %.0f)",
				c.Name, bug.name, caught, lambda, need)
		}
	}
	assert.GreaterOrEqual(t, tested, 2*len(processorSpecs)+6)
	masked := 0
	for _, c := range Cases(Config{Size: SizeCI}) {
		if c.Processors != nil && c.Processors.Bitmask != nil {
			masked++
		}
	}
	assert.Equal(t, masked, masks, "every bitmask case is tested against an ignored mask")
	assert.GreaterOrEqual(t, masked, 12, "four bitmask specs on three routes")
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
