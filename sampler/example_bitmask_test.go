package sampler_test

import (
	"fmt"
	"log"
	"strings"

	"github.com/gumbel-go/gumbel/sampler"
)

// digitsGrammar is a tiny grammar as an engine would drive one: one to three digits,
// then a closing bracket. Its state is the digits written so far.
type digitsGrammar struct{ digits int }

// A toy vocabulary: tokens 0-9 are the digits, 10 is "]", 11-15 are words the grammar
// never allows.
var toyVocab = []string{"0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "]", " the", " cat", "{", "\n", "<eos>"}

const closeToken = 10

// fillMask writes the tokens the grammar allows next into mask, in the layout grammar
// libraries use: bit j%32 of word j/32 allows token j.
func (g *digitsGrammar) fillMask(mask []int32) {
	clear(mask)
	allow := func(tok int) { mask[tok/32] |= 1 << (tok % 32) }
	if g.digits < 3 {
		for d := range 10 {
			allow(d)
		}
	}
	if g.digits > 0 {
		allow(closeToken)
	}
}

// accept advances the grammar by one token and reports whether it is complete.
func (g *digitsGrammar) accept(tok int32) bool {
	if tok == closeToken {
		return true
	}
	g.digits++
	return false
}

// Structured output: each step the grammar writes the row's token bitmask on the host,
// the sampler applies it inside its one pass over the logits, and the sampled token
// advances the grammar. The model here prefers words and the end of text, which the mask
// rules out, so every step samples among the allowed tokens only.
func Example_bitmask() {
	dev, s := newCPUSampler()
	defer dev.Close()
	defer s.Close()

	vocab := len(toyVocab)
	logits := []float32{0.5, 1, 0.2, 0.1, 0.3, 1.5, 0.4, 0, 0.6, 0.2, 0.8, 4, 3.5, 3, 2, 5}
	mask := make([]int32, (vocab+31)/32)
	var g digitsGrammar
	var out strings.Builder
	var res sampler.Result
	for step := uint64(0); ; step++ {
		g.fillMask(mask)
		p := sampler.Params{Temperature: 0.7, Seed: 7, Step: step, Bitmask: mask}
		if err := s.SampleFloat32(logits, vocab, []sampler.Params{p}, &res); err != nil {
			log.Fatal(err)
		}
		if res.Errs[0] != nil {
			log.Fatal(res.Errs[0])
		}
		tok := res.Tokens[0]
		out.WriteString(toyVocab[tok])
		if g.accept(tok) {
			break
		}
	}
	fmt.Printf("%q\n", out.String())
	// Output:
	// "95]"
}
