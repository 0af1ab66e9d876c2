package sampler

import (
	"fmt"
	"math"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/gumbel-go/gumbel/philox"
)

// RowParamsSize is the size in bytes of one RowParams record of the kernel ABI
// (kernelsrc/ABI.md): 16 little-endian 32-bit words.
const RowParamsSize = abi.RowParamsSize

// maxVocab bounds the vocabulary from above (exclusive): the ABI's largest V, since it
// passes V as u32 and indices as int32 tokens.
const maxVocab = abi.MaxVocab + 1

// RouteOf returns the route of a row whose vocabulary size is not known: temperature 0
// or TopK 1 is greedy; while the Gumbel switch is on, a sampled row is Gumbel-max
// without a filter and filtered with one; with the switch off it is categorical. Without a vocabulary every TopK > 1
// counts as a filter; Sample routes with [Sampler.RouteFor], where TopK >= Vocab is
// off as well.
func (s *Sampler) RouteOf(p Params) Route {
	return s.RouteFor(p, maxVocab)
}

// RouteFor returns the route of a row of a vocab-element batch, the route Sample gives
// it. TopK >= vocab, TopP 0 or 1 and MinP 0 count as off. A temperature so small that
// its reciprocal overflows float32 (below about 2.9e-39) is greedy too: it is greedy's
// limit, and the kernels scale by that reciprocal.
func (s *Sampler) RouteFor(p Params, vocab int) Route {
	return route(p, vocab, s.set.Gumbel)
}

func route(p Params, vocab int, gumbel bool) Route {
	if p.Temperature == 0 || p.TopK == 1 || math.IsInf(float64(1/p.Temperature), 0) {
		return RouteGreedy
	}
	switch {
	case !gumbel:
		return RouteCategorical
	case filtered(p, vocab):
		return RouteFiltered
	}
	return RouteGumbel
}

// filtered reports whether any of top-k, top-p and min-p is on for a row of vocab
// elements.
func filtered(p Params, vocab int) bool {
	return topKOn(p.TopK, vocab) || topPOn(p.TopP) || p.MinP != 0
}

// needsRowMax reports whether a filtered row's filters need its largest logit before its
// blocks can select (top-p or min-p without top-k), so that filter_max runs first.
func needsRowMax(p Params, vocab int) bool {
	return !topKOn(p.TopK, vocab) && (topPOn(p.TopP) || p.MinP != 0)
}

func topKOn(k, vocab int) bool { return k > 0 && k < vocab }
func topPOn(p float32) bool    { return p != 0 && p != 1 }

// checkParams returns row's error when its parameters are out of range, or nil.
// Every field is checked, used by the row's route or not, so a bad value never
// hides behind another setting.
func checkParams(row int, p Params) error {
	t := float64(p.Temperature)
	switch {
	case math.IsNaN(t) || math.IsInf(t, 0) || t < 0:
		return fmt.Errorf("row %d: temperature %v: %w", row, p.Temperature, ErrTemperature)
	case p.TopK < 0:
		return fmt.Errorf("row %d: top-k %d: %w", row, p.TopK, ErrTopK)
	case !(p.TopP >= 0 && p.TopP <= 1):
		return fmt.Errorf("row %d: top-p %v: %w", row, p.TopP, ErrTopP)
	case !(p.MinP >= 0 && p.MinP <= 1):
		return fmt.Errorf("row %d: min-p %v: %w", row, p.MinP, ErrMinP)
	case p.TopLogprobs < 0 || p.TopLogprobs > MaxTopLogprobs:
		return fmt.Errorf("row %d: top log-probabilities %d: %w", row, p.TopLogprobs, ErrTopLogprobs)
	case !(p.RepetitionPenalty >= 0) || math.IsInf(float64(p.RepetitionPenalty), 0):
		return fmt.Errorf("row %d: repetition penalty %v: %w", row, p.RepetitionPenalty, ErrPenalty)
	case !finite(p.FrequencyPenalty) || !finite(p.PresencePenalty):
		return fmt.Errorf("row %d: frequency penalty %v, presence penalty %v: %w", row, p.FrequencyPenalty, p.PresencePenalty, ErrPenalty)
	}
	return nil
}

func finite(x float32) bool { return !math.IsNaN(float64(x)) && !math.IsInf(float64(x), 0) }

// penaltiesOn reports whether any penalty of p changes a logit.
func penaltiesOn(p Params) bool {
	return (p.RepetitionPenalty != 0 && p.RepetitionPenalty != 1) || p.FrequencyPenalty != 0 || p.PresencePenalty != 0
}

// hasSeed reports whether a row carries its own seed: a nonzero Seed, or HasSeed (which
// asks for Seed even when it is 0).
func hasSeed(p Params) bool { return p.HasSeed || p.Seed != 0 }

// named reports whether a row's stream is reproducible: it has its own seed or a
// request id.
func named(p Params) bool { return hasSeed(p) || p.RequestID != 0 }

// rowSeed is the seed of a named row (see named): its own, or one derived from the
// sampler seed and its request id (never from its position in the batch).
func rowSeed(samplerSeed uint64, p Params) uint64 {
	if hasSeed(p) {
		return p.Seed
	}
	return philox.RowSeed(samplerSeed, p.RequestID)
}

// seedOf is the seed a row samples with in this call: rowSeed for a named row; a row
// with neither a seed nor a request id takes the sampler's next unnamed seed, so no two
// such rows share a stream. The caller holds s.mu. It neither allocates nor calls the
// system.
func (s *Sampler) seedOf(p Params) uint64 {
	if named(p) {
		return rowSeed(s.set.Seed, p)
	}
	s.unnamedRows++
	return philox.UnnamedRowSeed(s.set.Seed, s.unnamedRows)
}

// putRowParams writes the RowParams record of logits row `row` into dst (at least
// RowParamsSize bytes), in the form its route's kernel expects: greedy rows carry
// temperature 0; filters that are off, and every filter of a gumbel_argmax row, are
// written as the ABI's off values (top_k 0, top_p 1, min_p 0). The penalty words are
// written only with abi.FlagPenalties. A row with a token bitmask (mask row m >= 0)
// gets abi.FlagBitmask.
func putRowParams(dst []byte, row int, r Route, p Params, vocab int, seed uint64, flags abi.Flags, topn uint32, m int) {
	rp := abi.RowParams{Row: uint32(row), Temperature: p.Temperature, Seed: seed, Step: p.Step, TopP: 1,
		Flags: flags, TopN: topn}
	if m >= 0 {
		rp.Flags |= abi.FlagBitmask
		rp.BitmaskRow = uint32(m)
	}
	if r == RouteGreedy {
		rp.Temperature = 0
	}
	// Filters reach the categorical and filtered kernels only; gumbel_argmax rows carry
	// them off.
	if r == RouteCategorical || r == RouteFiltered {
		if topKOn(p.TopK, vocab) {
			rp.TopK = uint32(p.TopK)
		}
		if topPOn(p.TopP) {
			rp.TopP = p.TopP
		}
		rp.MinP = p.MinP
	}
	if flags&abi.FlagPenalties != 0 {
		rp.RepetitionPenalty = p.RepetitionPenalty
		if rp.RepetitionPenalty == 0 {
			rp.RepetitionPenalty = 1
		}
		rp.FrequencyPenalty, rp.PresencePenalty = p.FrequencyPenalty, p.PresencePenalty
	}
	rp.Encode(dst)
}
