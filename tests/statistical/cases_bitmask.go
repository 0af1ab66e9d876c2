package statistical

import (
	"github.com/gumbel-go/gumbel/philox"
	"github.com/gumbel-go/gumbel/sampler"
)

// The token bitmask specs (structured output): each row's mask rides in its Params
// (Params.Bitmask) and is applied after the bias and penalties, ANDed with the allowed
// and banned lists, and before the temperature and the filters.

// TailMaskVocab is the vocabulary of the mask-tail case: not a multiple of 32, so its
// last mask word holds bits past the vocabulary, and those bits are set. The row's
// second bump (around 0.7·V = 63) straddles the last word's first tokens, so a kernel
// that misreads the partial word moves a lot of mass.
const TailMaskVocab = 90

// pathTopK8 keeps the eight largest processed logits: on the sparse mask-grammar row
// that cuts three of its eleven tokens at every temperature, and only if the mask comes
// before the filter do the eight include more than one allowed token.
var pathTopK8 = path{label: "topk8", gumbel: true, route: sampler.RouteFiltered, topK: 8}

// grammarMaskProcessors: a sparse mask as a grammar writes it, one likely token (the
// runner-up; the top is masked out) and ten of the less likely ones, every eighth from
// the 40th most likely on.
func grammarMaskProcessors(x []float32) *Processors {
	r := ranked(x)
	allowed := []int32{r[1]}
	for j := 40; len(allowed) < 11; j += 8 {
		allowed = append(allowed, r[j])
	}
	return &Processors{Bitmask: BitmaskOf(len(x), allowed)}
}

// oneTokenMaskProcessors: a mask that allows the least likely token alone, a point mass.
// That token lies more than ln(1/0.05) nats (at T = 1.5 too) below the top, so a min-p
// filter that took the row's maximum before the mask would keep nothing.
func oneTokenMaskProcessors(x []float32) *Processors {
	r := ranked(x)
	return &Processors{Bitmask: BitmaskOf(len(x), []int32{r[len(r)-1]})}
}

// penaltyMaskProcessors: a pseudo-random half of the tokens in the mask, ANDed with an
// allowed list of three tokens in four (each rules out tokens the other keeps), under the
// repetition penalty of repetitionProcessors, which the mask leaves on penalised top and
// negative tokens alike. Of the row the list and the penalty leave, the mask rules out
// the three largest logits and keeps the fourth, so that the min-p cut, measured from the
// masked row's maximum, lies 0.35 nats below where a pass that read the maximum before
// the mask puts it; it keeps the least likely token, which the cut removes at T = 1.
func penaltyMaskProcessors(x []float32) *Processors {
	p := &Processors{Prompt: repetitionPrompt(x), Repetition: 1.8}
	for i := range x {
		if i%4 != 3 {
			p.Allowed = append(p.Allowed, int32(i))
		}
	}
	listed, err := ProcessedLogits(x, Processors{Prompt: p.Prompt, Repetition: p.Repetition, Allowed: p.Allowed})
	if err != nil {
		panic(err) // the prompt is built from x: in range
	}
	order := ranked(listed)
	allow := make([]bool, len(x))
	for i := range allow {
		allow[i] = philox.SplitMix64(uint64(i)^0x6772616d)&1 == 0
	}
	for _, t := range order[:3] {
		allow[t] = false
	}
	allow[order[3]] = true
	allow[order[len(p.Allowed)-1]] = true
	var allowed []int32
	for i, ok := range allow {
		if ok {
			allowed = append(allowed, int32(i))
		}
	}
	p.Bitmask = BitmaskOf(len(x), allowed)
	return p
}

// tailMaskProcessors: on a vocabulary that is not a multiple of 32, a pseudo-random two
// tokens in three, token 31 among them (the sign bit of an int32 word), and every bit
// past the vocabulary set: a kernel that does not bound the last word by V draws
// tokens outside the row.
func tailMaskProcessors(x []float32) *Processors {
	v := len(x)
	allowed := []int32{31}
	for i := range x {
		if i != 31 && philox.SplitMix64(uint64(i)^0x7461696c)%3 != 0 {
			allowed = append(allowed, int32(i))
		}
	}
	m := BitmaskOf(v, allowed)
	if v%32 != 0 {
		m[len(m)-1] |= -1 << (v % 32)
	}
	return &Processors{Bitmask: m}
}
