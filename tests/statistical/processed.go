package statistical

import (
	"errors"
	"fmt"
	"math"
)

// PromptBit marks a prompt token in a row's token counts (kernelsrc/ABI.md, "Processed
// logits"): the low 31 bits count the times the token was sampled.
const PromptBit = 1 << 31

// Processors are one row's logit processors as the reference applies them. The zero value
// processes nothing.
type Processors struct {
	// BiasTokens[j] gets BiasValues[j] added to its logit.
	BiasTokens []int32
	BiasValues []float32
	// Allowed, when not nil, lists the only tokens that may be drawn.
	Allowed []int32
	// Banned lists tokens that may never be drawn.
	Banned []int32
	// Bitmask, when not nil, is the row's token bitmask (sampler.Params.Bitmask):
	// ceil(V/32) words, bit j%32 of word j/32 allowing token j, ANDed with Allowed and
	// Banned. Bits beyond V are ignored.
	Bitmask []int32
	// Counts, when not nil, are the row's token counts (len = vocabulary), the state the
	// penalties read: the low 31 bits count outputs, PromptBit marks a prompt token.
	Counts []uint32
	// Prompt is the prompt of a row that is tracked (sampler.TrackTokens) and has drawn
	// nothing since: when Counts is nil, the counts are PromptBit for these tokens and
	// zero elsewhere.
	Prompt []int32
	// Repetition divides positive and multiplies negative logits of every seen token
	// (prompt or output); 0 or 1 is off.
	Repetition float32
	// Frequency is subtracted once per output occurrence, Presence once for any.
	Frequency float32
	Presence  float32
}

// Penalised reports whether the processors read token counts.
func (p *Processors) Penalised() bool {
	return (p.Repetition != 0 && p.Repetition != 1) || p.Frequency != 0 || p.Presence != 0
}

// ProcessedLogits applies the processors to a row in the order and float32 arithmetic of
// kernelsrc/ABI.md: bias, then penalties from the counts, then the mask (tokens that the
// allowed list, the banned list or the bitmask rule out become -Inf). Every operation is rounded to float32 on its own: the
// explicit conversions keep the compiler from fusing a multiply and a subtract.
func ProcessedLogits(logits []float32, p Processors) ([]float32, error) {
	v := len(logits)
	if len(p.BiasTokens) != len(p.BiasValues) {
		return nil, fmt.Errorf("statistical: %d bias tokens against %d values", len(p.BiasTokens), len(p.BiasValues))
	}
	if p.Counts != nil && len(p.Counts) != v {
		return nil, fmt.Errorf("statistical: %d counts for %d logits", len(p.Counts), v)
	}
	rep := p.Repetition
	if rep == 0 {
		rep = 1
	}
	if !(rep > 0) || math.IsInf(float64(rep), 1) || !finite32(p.Frequency) || !finite32(p.Presence) {
		return nil, fmt.Errorf("statistical: penalties %v, %v, %v", p.Repetition, p.Frequency, p.Presence)
	}
	inVocab := func(what string, tokens []int32) error {
		for _, t := range tokens {
			if t < 0 || int(t) >= v {
				return fmt.Errorf("statistical: %s token %d outside [0, %d)", what, t, v)
			}
		}
		return nil
	}
	for _, check := range []error{inVocab("bias", p.BiasTokens), inVocab("allowed", p.Allowed),
		inVocab("banned", p.Banned), inVocab("prompt", p.Prompt)} {
		if check != nil {
			return nil, check
		}
	}
	if p.Bitmask != nil && len(p.Bitmask) != BitmaskWords(v) {
		return nil, fmt.Errorf("statistical: bitmask of %d words for %d logits, want %d", len(p.Bitmask), v, BitmaskWords(v))
	}
	if p.Counts == nil && p.Prompt != nil {
		p.Counts = PromptCounts(v, p.Prompt)
	}

	x := make([]float32, v)
	copy(x, logits)
	bias := make([]float32, v)
	for j, t := range p.BiasTokens {
		if !finite32(p.BiasValues[j]) {
			return nil, fmt.Errorf("statistical: bias %v for token %d", p.BiasValues[j], t)
		}
		bias[t] = float32(bias[t] + p.BiasValues[j]) // a repeated token's biases add up
	}
	for i := range x {
		x[i] = float32(x[i] + bias[i])
		if p.Counts != nil {
			c := p.Counts[i]
			out := c &^ PromptBit
			if c != 0 && rep != 1 {
				if x[i] > 0 {
					x[i] = float32(x[i] / rep)
				} else {
					x[i] = float32(x[i] * rep)
				}
			}
			if out > 0 {
				x[i] = float32(x[i] - float32(p.Frequency*float32(out)))
				x[i] = float32(x[i] - p.Presence)
			}
		}
	}
	neg := float32(math.Inf(-1))
	if p.Allowed != nil {
		allowed := make([]bool, v)
		for _, t := range p.Allowed {
			allowed[t] = true
		}
		for i := range x {
			if !allowed[i] {
				x[i] = neg
			}
		}
	}
	for _, t := range p.Banned {
		x[t] = neg
	}
	if p.Bitmask != nil {
		for i := range x {
			if !BitmaskAllows(p.Bitmask, i) {
				x[i] = neg
			}
		}
	}
	return x, nil
}

// BitmaskWords is the length of a token bitmask row for a vocabulary: ceil(vocab/32).
func BitmaskWords(vocab int) int { return (vocab + 31) / 32 }

// BitmaskAllows reports whether a bitmask row allows token t: bit t%32 (least
// significant first) of word t/32.
func BitmaskAllows(mask []int32, t int) bool { return uint32(mask[t/32])>>(t%32)&1 != 0 }

// BitmaskOf returns the bitmask row of vocab tokens that allows exactly the listed ones
// (which must lie in [0, vocab)).
func BitmaskOf(vocab int, allowed []int32) []int32 {
	m := make([]int32, BitmaskWords(vocab))
	for _, t := range allowed {
		m[t/32] |= int32(uint32(1) << (t % 32))
	}
	return m
}

// PromptCounts returns the counts of a freshly tracked row: PromptBit on every prompt
// token (which must lie in [0, vocab)), zero elsewhere.
func PromptCounts(vocab int, prompt []int32) []uint32 {
	c := make([]uint32, vocab)
	for _, t := range prompt {
		c[t] = PromptBit
	}
	return c
}

func finite32(f float32) bool { return !math.IsNaN(float64(f)) && !math.IsInf(float64(f), 0) }

// LogSoftmax returns log softmax(x / T) in float64 over every token (-Inf for masked ones)
// and the log-normaliser LSE(x / T). T = 0 stands for 1 (the greedy route's
// log-probabilities are at temperature 1, kernelsrc/ABI.md).
func LogSoftmax(x []float32, temperature float32) ([]float64, float64, error) {
	t := float64(temperature)
	if t == 0 {
		t = 1
	}
	if !(t > 0) || math.IsInf(t, 1) || len(x) == 0 {
		return nil, 0, fmt.Errorf("statistical: log-softmax of %d logits at T %v", len(x), temperature)
	}
	top := math.Inf(-1)
	for _, v := range x {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 1) {
			return nil, 0, fmt.Errorf("statistical: logit %v", v)
		}
		top = max(top, float64(v)/t)
	}
	if math.IsInf(top, -1) {
		return nil, 0, errors.New("statistical: no finite logit")
	}
	sum := 0.0
	for _, v := range x {
		sum += math.Exp(float64(v)/t - top)
	}
	lse := top + math.Log(sum)
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)/t - lse
	}
	return out, lse, nil
}

// PairProbabilities returns the law of an ordered pair of draws (first, second) from p,
// flattened as pair[a*V + b]. With replacement the draws are independent: p_a·p_b.
// Without replacement the second is drawn from what is left: p_a·p_b/(1 - p_a) for a != b
// and 0 for a == b (successive sampling, the law of the Gumbel-top-2). A token holding all
// of the mass leaves nothing to draw second, so that is an error.
func PairProbabilities(p []float64, replacement bool) ([]float64, error) {
	v := len(p)
	out := make([]float64, v*v)
	for a, pa := range p {
		if pa == 0 {
			continue
		}
		if !replacement && pa >= 1 {
			return nil, fmt.Errorf("statistical: token %d holds all the mass: no second draw without replacement", a)
		}
		for b, pb := range p {
			switch {
			case replacement:
				out[a*v+b] = pa * pb
			case a != b:
				out[a*v+b] = pa * pb / (1 - pa)
			}
		}
	}
	// Renormalise the float64 rounding away (ChiSquareTest wants the sum within 1e-9).
	sum := 0.0
	for _, q := range out {
		sum += q
	}
	for i := range out {
		out[i] /= sum
	}
	return out, nil
}
