package statistical

import (
	"fmt"
	"math"

	"github.com/gumbel-go/gumbel/philox"
	"github.com/gumbel-go/gumbel/sampler"
)

// Alpha is the default acceptance threshold: a case fails when its p-value is below it.
// See the package documentation for why 1e-6.
const Alpha = 1e-6

// Vocabulary sizes of the suite. SmallVocab keeps a million draws per case affordable on
// the CPU device; LargeVocab is Qwen2's vocabulary, where 24-bit noise ties and capped
// noise bite.
const (
	SmallVocab = 128
	LargeVocab = 151936
)

// Temperatures every shape is sampled at.
var Temperatures = []float32{0.5, 1.0, 1.5}

// Size chooses how many draws the suite makes.
type Size uint8

// Sizes.
const (
	// SizeCI is the CPU suite of `go test`: a million draws for the small-vocabulary
	// Gumbel-max cases at T = 1, fewer for the others, a few thousand for the large
	// ones, a reduced temperature grid for the filtered cases (on the filtered route and,
	// behind the kill switch, on the categorical one).
	SizeCI Size = iota
	// SizeFull is the GPU suite: every shape at every temperature, at least a million
	// draws per case.
	SizeFull
)

// String returns "ci" or "full".
func (s Size) String() string {
	if s == SizeFull {
		return "full"
	}
	return "ci"
}

// Draw counts of each size. The CI figures keep `go test` on the CPU device short
// (BenchmarkDraw measures a draw of each kind): a million draws where they buy the
// suite's resolution, fewer where a case's own job needs fewer, and a few thousand for
// the 151936-token rows, one draw of which costs about a thousand of a 128-token row.
const (
	// CISmallDraws is the draw count of the small-vocabulary Gumbel-max cases at T = 1
	// in SizeCI, the path this module is about.
	CISmallDraws = 1_000_000
	// CISmallTemperatureDraws is the draw count of the small-vocabulary Gumbel-max
	// cases at the other temperatures in SizeCI. What they share with their shape's
	// T = 1 case (the noise, the arg-max, ties, masked tokens) that case checks with a
	// million draws; their own job is the temperature, and a quarter of the draws still
	// catches a temperature 10% off with probability 0.99
	// (TestTemperatureCasesHaveTeeth).
	CISmallTemperatureDraws = 250_000
	// CISmallCategoricalDraws is the draw count of the small-vocabulary categorical and
	// filtered cases (either route) in SizeCI: a quarter of the Gumbel cases', which
	// halves the smallest shift of a token's probability they can see.
	CISmallCategoricalDraws = 250_000
	// CILargeDraws is the draw count of the large-vocabulary Gumbel-max cases in
	// SizeCI: enough for the flat decile case to catch a split phase that drops one
	// block of the row with probability 0.99 (TestFlatLargeCaseCatchesALostBlock); the
	// subtle biases of the large rows need the full size whatever the CI count (see
	// their Detects).
	CILargeDraws = 2_048
	// CILargeCategoricalDraws is the draw count of the large-vocabulary categorical
	// case in SizeCI.
	CILargeCategoricalDraws = 1_024
	// FullDraws is the draw count of every case of SizeFull but one.
	FullDraws = 1_000_000
	// CIExtremeDraws is the draw count of the Extreme cases in SizeCI: rows of four
	// tokens, where a bias of a few percent (what float32 scores gave) shows at once.
	CIExtremeDraws = 200_000
	// FullFlatLargeDraws is the draw count of the flat large-vocabulary Gumbel-max case
	// of SizeFull. A sampler with 24-bit uniforms and lowest-index ties moves about
	// 4.5e-3 x (11 - 2i)/100 of the mass into decile i: a non-centrality of 6.8e-6 per
	// draw, so 2e7 draws give 135, far above the 72 that p < 1e-6 on 9 degrees of
	// freedom needs for 99% power. A million draws would give 6.8 and could never catch
	// it (TestTieBiasDrawCount).
	FullFlatLargeDraws = 20_000_000
)

// DefaultSeed seeds the suite when Config.Seed is zero.
const DefaultSeed uint64 = 0x67756d62656c // "gumbel"

// Config chooses the suite.
type Config struct {
	// Size picks the draw counts and the case grid.
	Size Size
	// Seed is the base seed; each case derives its own from it and its name. Zero
	// means DefaultSeed.
	Seed uint64
	// Alpha is the acceptance threshold; zero means [Alpha].
	Alpha float64
	// DrawScale multiplies every draw count (for a quick look: 0.01); zero means 1.
	DrawScale float64
}

// resolved returns the seed, acceptance threshold and draw scale of cfg, with the
// defaults in place of zeros.
func (cfg Config) resolved() (seed uint64, alpha, scale float64) {
	seed, alpha, scale = cfg.Seed, cfg.Alpha, cfg.DrawScale
	if seed == 0 {
		seed = DefaultSeed
	}
	if alpha == 0 {
		alpha = Alpha
	}
	if scale <= 0 {
		scale = 1
	}
	return seed, alpha, scale
}

// Shape is the form of a case's logits row.
type Shape uint8

// Shapes.
const (
	// Peaked: one token holds most of the mass, the rest Gaussian noise.
	Peaked Shape = iota
	// Flat: every logit equal. Ties everywhere: a biased tie-break shows.
	Flat
	// Bimodal: two bumps of likely tokens over Gaussian noise.
	Bimodal
	// Masked: Gaussian logits with about a third of the entries -Inf, including the
	// first and last index and both neighbours of the top token.
	Masked
	// DiffuseTail: one dominant token, a few body tokens 2 to 8 nats below it, and every
	// other token 20 to 30 nats below it (in units of logit/T), holding more than 1e-4 of
	// the mass together: the tail a sampler with capped noise never draws.
	DiffuseTail
	// Spread: Gaussian logits of unit spread, no token dominating: the row of the
	// pair cases, whose few tokens must each be drawn often.
	Spread
	// Extreme: rows whose |x/T| lies far beyond what a float32 score resolves of the
	// noise: constant rows of huge logits, up to ±MaxFloat32, and a tie of two logits at
	// temperatures down to 1e-30 (cases_extreme.go).
	Extreme
)

// String returns the shape's name.
func (s Shape) String() string {
	switch s {
	case Peaked:
		return "peaked"
	case Flat:
		return "flat"
	case Bimodal:
		return "bimodal"
	case Masked:
		return "masked"
	case DiffuseTail:
		return "tail"
	case Spread:
		return "spread"
	case Extreme:
		return "extreme"
	}
	return "shape(?)"
}

// Binning is how draws are grouped for the chi-square test.
type Binning uint8

// Binnings.
const (
	// BinTokens: a bin per token whose expected count is at least MinExpected; lighter
	// tokens pooled by whole nats below the top token (log(p_top/p)).
	BinTokens Binning = iota
	// BinDeciles: ten bins of consecutive indices (index*10/V), where a lowest-index
	// tie-break shifts mass.
	BinDeciles
)

// String returns "tokens" or "deciles".
func (b Binning) String() string {
	if b == BinDeciles {
		return "deciles"
	}
	return "tokens"
}

// Case is one chi-square experiment.
type Case struct {
	// Name is unique within a suite, e.g. "bimodal/V128/T1.0/topk50-topp0.9".
	Name  string
	Shape Shape
	// Route is the route every draw must take: RouteFiltered for a filtered case with
	// the Gumbel switch on, RouteCategorical for any case with it off.
	Route sampler.Route
	// Gumbel is the sampler's Gumbel switch for this case: off for the kill-switch
	// cases, filtered or not.
	Gumbel      bool
	Temperature float32
	TopK        int
	TopP        float32
	MinP        float32
	Binning     Binning
	// Draws is the number of tokens drawn.
	Draws int
	// Seed is the seed of every row; draw number d uses step d.
	Seed uint64
	// Logits is the row every draw samples, len = vocabulary size.
	Logits []float32
	// Alpha is the acceptance threshold.
	Alpha float64
	// Detects says, for cases drawn too few times to catch every bias the suite is
	// about, what they can still catch. Empty otherwise.
	Detects string
	// Processors, when not nil, are the row's logit processors: the case samples, and
	// is tested against, the processed logits.
	Processors *Processors
	// Mode is how the case draws: one token per Sample row, or ordered pairs.
	Mode Mode
}

// Mode is how a case draws its tokens and what one counted draw is.
type Mode uint8

// Modes.
const (
	// ModeSample: one token per row of a Sample call.
	ModeSample Mode = iota
	// ModePairs: SampleN with replacement, four draws per row counted as two ordered
	// pairs (draws 0 and 1, draws 2 and 3), tested against the independent pair law
	// p_a·p_b: every draw has the row's law and the two draws of a pair are independent.
	ModePairs
	// ModeDistinct: SampleDistinct, two draws without replacement per row, the ordered
	// pair tested against the successive-sampling law p_a·p_b/(1 - p_a).
	ModeDistinct
)

// String returns the mode's name.
func (m Mode) String() string {
	switch m {
	case ModeSample:
		return "sample"
	case ModePairs:
		return "pairs"
	case ModeDistinct:
		return "distinct"
	}
	return "mode(?)"
}

// Cells returns the number of outcomes a draw of the case can have: the vocabulary, or
// its square for the pair modes (pair (a, b) is outcome a·V + b).
func (c *Case) Cells() int {
	if c.Mode == ModeSample {
		return c.Vocab()
	}
	return c.Vocab() * c.Vocab()
}

// Vocab returns the vocabulary size.
func (c *Case) Vocab() int { return len(c.Logits) }

// Params returns the sampler parameters of draw number step.
func (c *Case) Params(step uint64) sampler.Params {
	p := sampler.Params{
		Temperature: c.Temperature,
		TopK:        c.TopK,
		TopP:        c.TopP,
		MinP:        c.MinP,
		Seed:        c.Seed,
		HasSeed:     true,
		Step:        step,
	}
	if c.Processors != nil {
		p.RepetitionPenalty = c.Processors.Repetition
		p.FrequencyPenalty = c.Processors.Frequency
		p.PresencePenalty = c.Processors.Presence
		// The mask travels with every row's parameters (the sampler copies it per call),
		// so each draw of every mode applies it.
		p.Bitmask = c.Processors.Bitmask
	}
	return p
}

// Options returns the sampler options of the case: the Gumbel switch set explicitly (never
// from the environment, so the case means the same everywhere) and the split phase on.
func (c *Case) Options() sampler.Options {
	sw := sampler.Off
	if c.Gumbel {
		sw = sampler.On
	}
	return sampler.Options{Seed: c.Seed, HasSeed: true, Gumbel: sw, Split: sampler.On}
}

// path describes how a case samples: its route and filter.
type path struct {
	label  string
	gumbel bool
	route  sampler.Route
	topK   int
	topP   float32
	minP   float32
}

var (
	pathGumbel      = path{label: "gumbel", gumbel: true, route: sampler.RouteGumbel}
	pathCategorical = path{label: "categorical", gumbel: false, route: sampler.RouteCategorical}
	pathTopKTopP    = path{label: "topk50-topp0.9", gumbel: true, route: sampler.RouteFiltered, topK: 50, topP: 0.9}
	pathMinP        = path{label: "minp0.05", gumbel: true, route: sampler.RouteFiltered, minP: 0.05}
)

// killSwitch returns a filtered path behind the kill switch: the same filters with the
// Gumbel switch off, which sends the rows to the categorical kernel.
func (p path) killSwitch() path {
	p.label, p.gumbel, p.route = "categorical-"+p.label, false, sampler.RouteCategorical
	return p
}

// Cases returns the suite of a configuration, in a fixed order.
func Cases(cfg Config) []Case {
	seed, alpha, scale := cfg.resolved()
	draws := func(n int) int { return max(1, int(math.Round(float64(n)*scale))) }

	var out []Case
	add := func(shape Shape, vocab int, t float32, p path, binning Binning, n int, detects string) {
		name := fmt.Sprintf("%s/V%d/T%.1f/%s", shape, vocab, t, p.label)
		if binning == BinDeciles {
			name += "/deciles"
		}
		out = append(out, Case{
			Name:        name,
			Shape:       shape,
			Route:       p.route,
			Gumbel:      p.gumbel,
			Temperature: t,
			TopK:        p.topK,
			TopP:        p.topP,
			MinP:        p.minP,
			Binning:     binning,
			Draws:       draws(n),
			Seed:        philox.SplitMix64(seed ^ hashName(name)),
			Logits:      Logits(shape, vocab, t),
			Alpha:       alpha,
			Detects:     detects,
		})
	}

	small := []Shape{Peaked, Flat, Bimodal, Masked}
	full := cfg.Size == SizeFull
	smallDraws, categoricalDraws := CISmallDraws, CISmallCategoricalDraws
	if full {
		smallDraws, categoricalDraws = FullDraws, FullDraws
	}
	for _, shape := range small {
		for _, t := range Temperatures {
			if full || t == 1 {
				add(shape, SmallVocab, t, pathGumbel, BinTokens, smallDraws, "")
			} else {
				add(shape, SmallVocab, t, pathGumbel, BinTokens, CISmallTemperatureDraws, "")
				out[len(out)-1].Detects = detectsTemperature(&out[len(out)-1])
			}
			add(shape, SmallVocab, t, pathCategorical, BinTokens, categoricalDraws, "")
		}
	}
	// The filtered kernel is the slow one on the CPU: the CI grid samples every shape
	// with top-k + top-p at T = 1 and varies the temperature on the bimodal shape only,
	// where the filters cut the most. Behind the kill switch the same filters take the
	// categorical kernel, whose filters no other case exercises: the CI grid samples them
	// with top-k + top-p on every shape at T = 1, and with min-p where it meets masked
	// tokens (masked at T = 1) and the temperature (bimodal at T = 1.5).
	for _, shape := range small {
		for _, t := range Temperatures {
			if full || t == 1 || shape == Bimodal {
				add(shape, SmallVocab, t, pathTopKTopP, BinTokens, categoricalDraws, "")
			}
			if full || t == 1 {
				add(shape, SmallVocab, t, pathTopKTopP.killSwitch(), BinTokens, categoricalDraws, "")
			}
		}
	}
	for _, shape := range []Shape{Bimodal, Masked} {
		for _, t := range Temperatures {
			if full || t == 1 || (shape == Bimodal && t == 1.5) {
				add(shape, SmallVocab, t, pathMinP, BinTokens, categoricalDraws, "")
			}
			if full || (shape == Masked && t == 1) || (shape == Bimodal && t == 1.5) {
				add(shape, SmallVocab, t, pathMinP.killSwitch(), BinTokens, categoricalDraws, "")
			}
		}
	}
	out = append(out, processorCases(cfg, seed, alpha, draws)...)
	out = append(out, pairCases(cfg, seed, alpha, draws)...)
	out = append(out, extremeCases(cfg, seed, alpha, draws)...)

	if full {
		add(Flat, LargeVocab, 1, pathGumbel, BinDeciles, FullFlatLargeDraws, "")
		add(Flat, LargeVocab, 1, pathCategorical, BinDeciles, FullDraws, "")
		for _, t := range Temperatures {
			add(DiffuseTail, LargeVocab, t, pathGumbel, BinTokens, FullDraws, "")
			add(DiffuseTail, LargeVocab, t, pathCategorical, BinTokens, FullDraws, "")
		}
		return out
	}
	add(Flat, LargeVocab, 1, pathGumbel, BinDeciles, CILargeDraws,
		detectsDeciles(draws(CILargeDraws), alpha))
	add(DiffuseTail, LargeVocab, 1, pathGumbel, BinTokens, CILargeDraws, "")
	add(DiffuseTail, LargeVocab, 1, pathCategorical, BinTokens, CILargeCategoricalDraws, "")
	for i := range out {
		if out[i].Shape == DiffuseTail {
			out[i].Detects = detectsTail(&out[i], alpha)
		}
	}
	return out
}

// detectsTemperature states the smallest relative error of the temperature, either way,
// that a case catches half the time, and its resolution on a token that holds 1% of the
// mass.
func detectsTemperature(c *Case) string {
	probs, err := Expected(c)
	if err != nil {
		return "unknown: " + err.Error()
	}
	bins := 0
	for _, p := range probs {
		if p > 0 {
			bins++
		}
	}
	lambda := DetectableNoncentrality(max(1, bins-1), c.Alpha, 0.5)
	n := float64(c.Draws)
	shift := math.Sqrt(DetectableNoncentrality(1, c.Alpha, 0.5) / (n * 0.01))
	tokens := fmt.Sprintf("a relative error of %.0f%% in a token that holds 1%% of the mass; the T = 1 case of this shape draws %d times as many",
		shift*100, CISmallDraws/CISmallTemperatureDraws)
	if n*temperatureNoncentrality(c, probs, 1) < lambda {
		return fmt.Sprintf("%d draws catch (with probability 1/2) %s; no temperature changes this row's law", c.Draws, tokens)
	}
	lo, hi := 0.0, 1.0
	for range 40 {
		if mid := (lo + hi) / 2; n*temperatureNoncentrality(c, probs, mid) >= lambda {
			hi = mid
		} else {
			lo = mid
		}
	}
	return fmt.Sprintf("%d draws catch (with probability 1/2) a temperature %.1f%% off, or %s", c.Draws, hi*100, tokens)
}

// temperatureNoncentrality is the smaller per-draw non-centrality of a sampler of case c
// (whose law is probs) that uses the temperature T·(1+delta) or T/(1+delta).
func temperatureNoncentrality(c *Case, probs []float64, delta float64) float64 {
	f := Filter{TopK: c.TopK, TopP: c.TopP, MinP: c.MinP}
	least := math.Inf(1)
	for _, t := range []float32{c.Temperature * float32(1+delta), c.Temperature / float32(1+delta)} {
		got, err := Probabilities(c.Logits, t, f)
		if err != nil {
			return math.Inf(1)
		}
		least = min(least, Noncentrality(probs, got))
	}
	return least
}

// detectsDeciles states the smallest decile-mass shift a flat decile case of n draws
// catches half the time: moving delta from one decile to another gives the
// non-centrality n·(delta²/0.1 + delta²/0.1).
func detectsDeciles(n int, alpha float64) string {
	lambda := DetectableNoncentrality(9, alpha, 0.5)
	delta := math.Sqrt(lambda / (20 * float64(n)))
	return fmt.Sprintf("%d draws catch (with probability 1/2) a shift of %.2g of the mass from one index decile to another (%.0f%% of a decile); "+
		"the 24-bit tie bias (about 4e-4) needs the full size", n, delta, delta/0.1*100)
}

// detectsTail states what a diffuse-tail case of n draws catches half the time. Pooling
// the row into the dominant token and the rest, a shift delta of the dominant token's
// probability p has non-centrality n·delta²/(p(1-p)); losing the whole tail (mass tail)
// removes n·tail expected draws from bins that hold about that many.
func detectsTail(c *Case, alpha float64) string {
	probs, err := Expected(c)
	if err != nil {
		return "unknown: " + err.Error()
	}
	top, tail := 0.0, 0.0
	for _, p := range probs {
		top = max(top, p)
	}
	for _, p := range probs {
		if p > 0 && math.Log(top/p) >= tailNats {
			tail += p
		}
	}
	n := float64(c.Draws)
	lambda := DetectableNoncentrality(1, alpha, 0.5)
	delta := math.Sqrt(lambda * top * (1 - top) / n)
	return fmt.Sprintf("%d draws catch (with probability 1/2) a shift of %.2g in the dominant token's mass; "+
		"the tail's %.2g of the mass is %.2g expected draws, too few to see it lost: that needs the full size",
		c.Draws, delta, tail, n*tail)
}

// placed gives a case what it derives from the suite's configuration: its seed (from
// its name), the acceptance threshold and the draw count.
func placed(c Case, seed uint64, alpha float64, draws int) Case {
	c.Seed = philox.SplitMix64(seed ^ hashName(c.Name))
	c.Alpha, c.Draws = alpha, draws
	return c
}

// hashName is FNV-1a of a case name, so each case's seed depends on its name only.
func hashName(s string) uint64 {
	h := uint64(0xcbf29ce484222325)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 0x100000001b3
	}
	return h
}
