package abi

import (
	"encoding/binary"
	"math"
)

// RowParamsSize is the bytes of one RowParams record: 16 little-endian 32-bit words.
const RowParamsSize = 64

// RowParams is one launch row's parameters, in the order and size of its words: a
// 64-bit field is two words, low half first. The C++ editions read the same layout
// (struct gb_row_params, a 64-bit field split into _lo and _hi words).
type RowParams struct {
	// Row is the logits row this launch row samples, and its slot in the outputs.
	Row uint32
	// Temperature: 0 is greedy; otherwise positive and finite, with 1/Temperature finite.
	Temperature float32
	// Seed keys the row's random stream.
	Seed uint64
	// Step is the row's position in its stream (the decode step); draw z uses Step+z.
	Step uint64
	// TopK keeps the k largest logits (categorical only); 0 is off. residual: record y's
	// TopK is the first record of launch row y's chain.
	TopK uint32
	// TopP keeps the smallest set holding this share of the mass (categorical only); 1 or
	// more is off.
	TopP float32
	// MinP keeps logits whose weight is at least this share of the largest (categorical
	// only); 0 is off.
	MinP float32
	// Flags are the row's features.
	Flags Flags
	// RepetitionPenalty divides positive and multiplies negative logits of seen tokens
	// (FlagPenalties); 1 is off.
	RepetitionPenalty float32
	// FrequencyPenalty is subtracted once per time a token was drawn (FlagPenalties).
	FrequencyPenalty float32
	// PresencePenalty is subtracted from every token drawn at least once (FlagPenalties).
	PresencePenalty float32
	// TopN is the n of the topn kernels, 1 to MaxTopN; residual: the draft row holding
	// the drafter's probabilities at this position.
	TopN uint32
	// BitmaskRow is the row of the bitmask argument the row applies (FlagBitmask).
	BitmaskRow uint32
	// Token is the token the score kernel scores, in [0, V); residual: the draft token
	// at this position (none with FlagChainEnd).
	Token uint32
}

// Encode writes p into the first RowParamsSize bytes of dst.
func (p *RowParams) Encode(dst []byte) {
	dst = dst[:RowParamsSize]
	le := binary.LittleEndian
	le.PutUint32(dst[0:], p.Row)
	le.PutUint32(dst[4:], math.Float32bits(p.Temperature))
	le.PutUint64(dst[8:], p.Seed)
	le.PutUint64(dst[16:], p.Step)
	le.PutUint32(dst[24:], p.TopK)
	le.PutUint32(dst[28:], math.Float32bits(p.TopP))
	le.PutUint32(dst[32:], math.Float32bits(p.MinP))
	le.PutUint32(dst[36:], uint32(p.Flags))
	le.PutUint32(dst[40:], math.Float32bits(p.RepetitionPenalty))
	le.PutUint32(dst[44:], math.Float32bits(p.FrequencyPenalty))
	le.PutUint32(dst[48:], math.Float32bits(p.PresencePenalty))
	le.PutUint32(dst[52:], p.TopN)
	le.PutUint32(dst[56:], p.BitmaskRow)
	le.PutUint32(dst[60:], p.Token)
}

// DecodeRowParams reads the record in the first RowParamsSize bytes of src.
func DecodeRowParams(src []byte) RowParams {
	src = src[:RowParamsSize]
	le := binary.LittleEndian
	f := func(off int) float32 { return math.Float32frombits(le.Uint32(src[off:])) }
	return RowParams{
		Row:               le.Uint32(src[0:]),
		Temperature:       f(4),
		Seed:              le.Uint64(src[8:]),
		Step:              le.Uint64(src[16:]),
		TopK:              le.Uint32(src[24:]),
		TopP:              f(28),
		MinP:              f(32),
		Flags:             Flags(le.Uint32(src[36:])),
		RepetitionPenalty: f(40),
		FrequencyPenalty:  f(44),
		PresencePenalty:   f(48),
		TopN:              le.Uint32(src[52:]),
		BitmaskRow:        le.Uint32(src[56:]),
		Token:             le.Uint32(src[60:]),
	}
}

// StepOffset is the byte offset of the Step field, which FlagAdvance rewrites on the
// device.
const StepOffset = 16

// Fields a Batch rewrites alone when a row's bitmask row changes.
const (
	// FlagsOffset is the byte offset of the Flags field.
	FlagsOffset = 36
	// BitmaskRowOffset is the byte offset of the BitmaskRow field.
	BitmaskRowOffset = 56
)

// TokenOffset is the byte offset of the Token field.
const TokenOffset = 60

// TopKOffset is the byte offset of the TopK field, which names a residual launch row's
// chain.
const TopKOffset = 24
