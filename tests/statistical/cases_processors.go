package statistical

import (
	"fmt"
	"math"
	"slices"

	"github.com/gumbel-go/gumbel/sampler"
)

// CIProcessorDraws is the draw count of every processor case in SizeCI, on either
// route: a processor that is skipped or misapplied moves a whole token's mass, so a
// tenth of the Gumbel cases' million still catches each such bug with probability 0.99
// (TestProcessorCasesHaveTeeth); each case's Detects says what finer error it still
// catches.
const CIProcessorDraws = 100_000

// processorPath is the route and filter of a processor case.
var (
	// pathMinPLoose keeps tokens within about 3.9 nats of the top: looser than
	// pathMinP, so that at T = 1 the cut falls among the penalised negative logits of
	// the repetition cases (dividing them instead of multiplying keeps tokens the cut
	// removes). At T = 1.5 the processed bimodal row may span less than that, and the
	// case tests the processors on the filtered kernel with little or no cut.
	pathMinPLoose = path{label: "minp0.02", gumbel: true, route: sampler.RouteFiltered, minP: 0.02}
)

// processorSpec builds a case's processors from its logits row.
type processorSpec struct {
	label string
	build func(x []float32) *Processors
	// filtered is the filtered path the processor is also sampled on, and, behind the
	// kill switch, on the categorical kernel (every spec in SizeFull; in SizeCI those
	// with categoricalCI).
	filtered      path
	categoricalCI bool
	// vocab is the row's vocabulary; 0 means SmallVocab.
	vocab int
}

// processorSpecs are the processors of the suite, each sampled on the Gumbel route, on a
// filtered route and (see processorCases) with the same filter on the categorical route.
// The bitmask specs (cases_bitmask.go) take all three routes in SizeCI too: the mask is
// applied by each kernel and each filter pass on its own.
var processorSpecs = []processorSpec{
	{label: "bias", build: biasProcessors, filtered: pathTopKTopP},
	{label: "allowed", build: allowedProcessors, filtered: pathMinP},
	{label: "banned", build: bannedProcessors, filtered: pathTopKTopP},
	{label: "repetition", build: repetitionProcessors, filtered: pathMinPLoose},
	{label: "all", build: allProcessors, filtered: pathMinPLoose, categoricalCI: true},
	{label: "mask-grammar", build: grammarMaskProcessors, filtered: pathTopK8, categoricalCI: true},
	{label: "mask-one", build: oneTokenMaskProcessors, filtered: pathMinP, categoricalCI: true},
	{label: "mask-penalties", build: penaltyMaskProcessors, filtered: pathMinPLoose, categoricalCI: true},
	{label: "mask-tail", build: tailMaskProcessors, filtered: pathTopKTopP, categoricalCI: true, vocab: TailMaskVocab},
}

// ranked returns the indices of x by value, largest first, ties to the lowest index.
func ranked(x []float32) []int32 {
	r := make([]int32, len(x))
	for i := range r {
		r[i] = int32(i)
	}
	slices.SortStableFunc(r, func(a, b int32) int { return byLogitDesc(x[a], x[b]) })
	return r
}

// BiasBan is the bias that bans a token outright: its processed weight is exp(-1e9)
// = 0 in float64, so a single draw of it fails the case. BiasOpenAIBan is the -100 that
// OpenAI's API documents as a ban: e^-100 of the top's weight, never drawn in practice.
const (
	BiasBan       = -1e9
	BiasOpenAIBan = -100
)

// biasProcessors: a sparse bias list that bans the top token outright, gives the
// runner-up OpenAI's -100, promotes the least likely token to half a nat below the old
// top, and nudges six body tokens by ±0.75.
func biasProcessors(x []float32) *Processors {
	r := ranked(x)
	rare := r[len(r)-1]
	p := &Processors{}
	add := func(t int32, b float32) {
		p.BiasTokens = append(p.BiasTokens, t)
		p.BiasValues = append(p.BiasValues, b)
	}
	add(r[0], BiasBan)
	add(r[1], BiasOpenAIBan)
	add(rare, x[r[0]]-x[rare]-0.5)
	for j := 2; j < 8; j++ {
		add(r[j], float32(0.75*float64(1-2*(j%2))))
	}
	return p
}

// allowedProcessors: only every third token, the top token and the least likely one.
func allowedProcessors(x []float32) *Processors {
	r := ranked(x)
	p := &Processors{Allowed: []int32{r[0], r[len(r)-1]}}
	for i := 1; i < len(x); i += 3 {
		if int32(i) != r[0] && int32(i) != r[len(r)-1] {
			p.Allowed = append(p.Allowed, int32(i))
		}
	}
	return p
}

// bannedProcessors: the first, third and fifth most likely tokens and every ninth.
func bannedProcessors(x []float32) *Processors {
	r := ranked(x)
	p := &Processors{Banned: []int32{r[0], r[2], r[4]}}
	for i := 5; i < len(x); i += 9 {
		if int32(i) != r[0] && int32(i) != r[2] && int32(i) != r[4] {
			p.Banned = append(p.Banned, int32(i))
		}
	}
	return p
}

// repetitionProcessors: a repetition penalty of 1.8 on a prompt of the six most likely
// tokens (positive logits, divided) and the eight tokens just below -0.3 (negative
// logits, multiplied: a sampler that divides them too draws them more, not less).
func repetitionProcessors(x []float32) *Processors {
	return &Processors{Prompt: repetitionPrompt(x), Repetition: 1.8}
}

func repetitionPrompt(x []float32) []int32 {
	r := ranked(x)
	prompt := append([]int32(nil), r[:6]...)
	negatives := 0
	for _, t := range r {
		if x[t] < -0.3 && negatives < 8 {
			prompt = append(prompt, t)
			negatives++
		}
	}
	return prompt
}

// allProcessors: bias, allowed, banned and the repetition penalty together, on
// overlapping tokens, so that their order (bias, penalties, mask) matters: the prompt's
// top tokens are biased too, and (x + b)/1.8 is not x/1.8 + b.
func allProcessors(x []float32) *Processors {
	r := ranked(x)
	p := &Processors{Prompt: repetitionPrompt(x), Repetition: 1.8}
	p.BiasTokens = []int32{r[0], r[1], r[3], r[len(r)-1]}
	p.BiasValues = []float32{1.5, BiasBan, -1, x[r[0]] - x[r[len(r)-1]] - 1}
	for i := 0; i < len(x); i++ {
		if i%4 != 2 || int32(i) == r[0] || int32(i) == r[len(r)-1] {
			p.Allowed = append(p.Allowed, int32(i))
		}
	}
	// Ban two tokens the allowed list keeps, or the ban would change nothing.
	for _, t := range r[2:] {
		if t%4 != 2 && len(p.Banned) < 2 {
			p.Banned = append(p.Banned, t)
		}
	}
	return p
}

// processorCases are the logit-processor cases of a suite: every processor on the Gumbel
// route and on a filtered route; behind the kill switch, with the same filter on the
// categorical route, every processor in SizeFull and, in SizeCI, all of them together
// and each bitmask.
func processorCases(cfg Config, seed uint64, alpha float64, draws func(int) int) []Case {
	full := cfg.Size == SizeFull
	n, temps := CIProcessorDraws, []float32{1}
	if full {
		n, temps = FullDraws, Temperatures
	}
	var out []Case
	for _, spec := range processorSpecs {
		vocab := spec.vocab
		if vocab == 0 {
			vocab = SmallVocab
		}
		for _, t := range temps {
			paths := []path{pathGumbel, spec.filtered}
			if full || spec.categoricalCI {
				paths = append(paths, spec.filtered.killSwitch())
			}
			for _, p := range paths {
				logits := Logits(Bimodal, vocab, t)
				c := placed(Case{
					Name:        fmt.Sprintf("%s/V%d/T%.1f/%s/%s", Bimodal, vocab, t, p.label, spec.label),
					Shape:       Bimodal,
					Route:       p.route,
					Gumbel:      p.gumbel,
					Temperature: t,
					TopK:        p.topK,
					TopP:        p.topP,
					MinP:        p.minP,
					Logits:      logits,
					Processors:  spec.build(logits),
				}, seed, alpha, draws(n))
				if !full {
					c.Detects = detectsTokenShift(&c)
				}
				out = append(out, c)
			}
		}
	}
	return out
}

// detectsTokenShift states the smallest relative error in the probability of a token
// holding 1% of the mass that a case catches half the time: non-centrality
// n·0.01·delta² on one degree of freedom's worth of bins.
func detectsTokenShift(c *Case) string {
	lambda := DetectableNoncentrality(1, c.Alpha, 0.5)
	delta := math.Sqrt(lambda / (float64(c.Draws) * 0.01))
	return fmt.Sprintf("%d draws catch (with probability 1/2) a relative error of %.0f%% in a token that holds 1%% of the mass, "+
		"or a whole skipped processor (TestProcessorCasesHaveTeeth)", c.Draws, delta*100)
}
