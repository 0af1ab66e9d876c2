// Package abi is the one definition of the sampling kernels' binary interface: the
// kernel names, the argument positions, the RowParams record, its flags, the status
// codes, the random stream's purposes, the limits, and the sizes of the scratch and
// output buffers a launch needs. Every edition of the kernels follows it: the Go edition
// (package gokernel) and the sampler use this package directly, and `go generate` writes
// it into the header that the CUDA/HIP and Metal editions include (../abi.h) and into the
// tables of ../ABI.md, which specifies what the kernels compute. A test fails when a
// generated file is out of date.
//
// Names carry over mechanically: a constant FlagLogprobs is GB_FLAG_LOGPROBS in C++, a
// RowParams field TopK is top_k; `git grep -iE 'flag_?logprobs'` finds every use.
package abi

//go:generate go run ./gen

import (
	"math"
	"math/bits"

	"github.com/gumbel-go/gumbel/philox"
)

// Kernel families. A kernel's full name appends its logits type: [KernelName].
const (
	GumbelArgmax = "gumbel_argmax"
	Categorical  = "categorical"
	TopN         = "topn"
	// FilterMax is the first pass of the filtered route: each block's largest processed
	// logit, for rows whose filters need the row's maximum before they can select.
	FilterMax = "filter_max"
	// Filtered is the filtered route: top-k, top-p and min-p with a Gumbel-max draw over
	// the kept set, S blocks per row.
	Filtered = "filtered"
	// Score is scoring: the raw and processed log-probabilities and the raw rank of a
	// given token per row, S blocks per row, nothing drawn.
	Score = "score"
	// Residual is speculative verification with the drafter's probabilities: each
	// launch row is one chain of draft tokens (a record per position), accepted or
	// rejected on the device from score's records, and the position where the chain
	// stops draws its token from the residual max(p - q, 0), or from p after the last
	// draft.
	Residual = "residual"
	// GumbelExact finishes the gumbel_argmax draws left with StatusExact: one block per
	// launch row and draw rescans the row and takes its winner by the exact comparison
	// (ABI.md, "Exact scores").
	GumbelExact = "gumbel_exact"
	// ShardSelect is a vocabulary shard's part of the filtered route: histograms of its
	// keys and masses, from which the ranks find the top-k and top-p thresholds together,
	// and its Gumbel-max winner over a kept set whose thresholds it is given (ABI.md,
	// "shard_select").
	ShardSelect = "shard_select"
)

// DType is the element type of the logits, the kernel's name suffix and its template
// argument in the C++ editions.
type DType uint8

// Logits element types.
const (
	// F32: IEEE binary32, suffix _f32.
	F32 DType = 0
	// F16: IEEE binary16, suffix _f16.
	F16 DType = 1
	// BF16: the top half of an IEEE binary32 (bfloat16), suffix _bf16.
	BF16 DType = 2
)

// DTypes lists the element types in order.
var DTypes = [...]DType{F32, F16, BF16}

// Suffixes are the kernel name suffixes of the element types, in the order of DTypes.
var Suffixes = [...]string{F32: "_f32", F16: "_f16", BF16: "_bf16"}

// Suffix returns the kernel name suffix: "_f32", "_f16" or "_bf16".
func (d DType) Suffix() string {
	if int(d) < len(Suffixes) {
		return Suffixes[d]
	}
	return "_invalid"
}

// Size returns the bytes of one element.
func (d DType) Size() int {
	if d == F32 {
		return 4
	}
	return 2
}

// KernelName returns the name of a family's kernel for one element type, such as
// "gumbel_argmax_bf16".
func KernelName(family string, d DType) string { return family + d.Suffix() }

// Arg is the position of a kernel argument. Every kernel takes the sixteen arguments in
// this order; a buffer whose feature no row of the launch uses may be any valid buffer of
// at least 8 bytes, which the kernel never reads or writes.
type Arg int

// Argument positions.
const (
	// ArgLogits (buffer): the logits, row r starting at element r·row_stride.
	ArgLogits Arg = 0
	// ArgParams (buffer): one RowParams per launch row.
	ArgParams Arg = 1
	// ArgTokens (buffer, int32): the token of each output slot; topn: its tokens.
	ArgTokens Arg = 2
	// ArgStatus (buffer, int32): the status of each output slot; topn: its float32
	// log-probabilities.
	ArgStatus Arg = 3
	// ArgPartials (buffer, uint64): the split phase's scratch.
	ArgPartials Arg = 4
	// ArgCounters (buffer, uint32): arrival counters, zero before a launch and after it.
	ArgCounters Arg = 5
	// ArgRowStride (u64): elements from one logits row to the next.
	ArgRowStride Arg = 6
	// ArgVocab (u32): V, the elements of a row, 1 ≤ V ≤ MaxVocab.
	ArgVocab Arg = 7
	// ArgLogprobs (buffer, float32): four words of log-probability record per output slot
	// (FlagLogprobs); unused by topn.
	ArgLogprobs Arg = 8
	// ArgBias (buffer, float32): V additive biases per logits row (FlagBias).
	ArgBias Arg = 9
	// ArgCounts (buffer, uint32): V token counts per logits row (FlagPenalties,
	// FlagRecord).
	ArgCounts Arg = 10
	// ArgMask (buffer, uint32): ceil(V/32) words of allowed-token bitmap per logits row
	// (FlagMask).
	ArgMask Arg = 11
	// ArgBitmask (buffer, uint32): token bitmasks of ceil(V/32) words per mask row, the
	// layout of the grammar libraries; launch row y applies mask row bitmask_row
	// (FlagBitmask).
	ArgBitmask Arg = 12
	// ArgVocabOffset (u32): the global index of element 0 of the rows with FlagShard (a
	// vocabulary shard), a multiple of 4 with vocab_offset + V ≤ MaxVocab.
	ArgVocabOffset Arg = 13
	// ArgShard (buffer, uint64): the shard key of each output slot of the rows with
	// FlagShard (gumbel_argmax), merged across shards by a maximum; shard_select: its
	// queries, histograms and keys.
	ArgShard Arg = 14
	// ArgDraft (buffer, float32): V draft probabilities per draft row (residual): row
	// topn of a launch row is the drafter's distribution at that row's position.
	ArgDraft Arg = 15
)

// NumArgs is the number of arguments of every kernel.
const NumArgs = 16

// Flags is RowParams word 9: the features of a row.
type Flags uint32

// Row flags. A kernel ignores the flags it has no use for; a reserved bit set is bad
// parameters.
const (
	// FlagLogprobs: write the log-probability record of every output slot of the row.
	FlagLogprobs Flags = 1 << 0
	// FlagAdvance: after all D draws of the row, add D to its step in params.
	FlagAdvance Flags = 1 << 1
	// FlagRecord: after all D draws, count each token drawn with status 0 in the row's
	// counts.
	FlagRecord Flags = 1 << 2
	// FlagRouted: the row's kernel is chosen on the device; the other kernel leaves it
	// alone.
	FlagRouted Flags = 1 << 3
	// FlagCategorical: with FlagRouted, the row belongs to the categorical kernel.
	FlagCategorical Flags = 1 << 4
	// FlagBias: add the row's logit bias.
	FlagBias Flags = 1 << 5
	// FlagMask: apply the row's allowed-token bitmap.
	FlagMask Flags = 1 << 6
	// FlagPenalties: apply the repetition, frequency and presence penalties from the
	// row's counts.
	FlagPenalties Flags = 1 << 7
	// FlagPerturbed: the topn kernels rank Gumbel scores instead of raw logits (sampling
	// without replacement).
	FlagPerturbed Flags = 1 << 8
	// FlagFiltered: with FlagRouted, the row belongs to the filter_max and filtered
	// kernels.
	FlagFiltered Flags = 1 << 9
	// FlagBitmask: apply mask row BitmaskRow of the bitmask argument (a grammar's
	// allowed tokens), on top of FlagMask.
	FlagBitmask Flags = 1 << 10
	// FlagShard: the row is a vocabulary shard (gumbel_argmax and shard_select; status 3
	// elsewhere): element i is global token vocab_offset + i, noised there, and the draw
	// also writes its shard key.
	FlagShard Flags = 1 << 11
	// FlagChainEnd: the row is the last position of its chain (residual): it has no
	// draft token, and draws from p when every draft before it is accepted.
	FlagChainEnd Flags = 1 << 12
	// FlagKeptSet: with FlagLogprobs, a categorical or filtered row writes its kept set's
	// descriptor in place of the record, and a residual row takes its target law from the
	// descriptor at its slot (ABI.md, "The kept-set descriptor").
	FlagKeptSet Flags = 1 << 13
	// FlagsProcessors are the flags of the logit processors.
	FlagsProcessors = FlagBias | FlagMask | FlagPenalties | FlagBitmask
	// FlagsReserved are the bits a row must leave clear.
	FlagsReserved Flags = ^Flags(1<<14 - 1)
)

// Status is what a kernel reports for an output slot.
type Status int32

// Status codes.
const (
	// StatusOK: the token is the sampled index.
	StatusOK Status = 0
	// StatusNonFinite: the row holds NaN or +Inf (after bias and penalties); token -1.
	StatusNonFinite Status = 1
	// StatusNoFinite: every processed logit of the row is -Inf or masked; token -1.
	StatusNoFinite Status = 2
	// StatusBadParams: bad temperature, reserved flags, or buffers that cannot hold the
	// row; token -1.
	StatusBadParams Status = 3
	// StatusNotReached: the position lies past its chain's stop (residual); token -1.
	StatusNotReached Status = 4
	// StatusExact: the draw's winning score reached ExactLimit in magnitude, where a
	// float32 score may no longer hold the noise; gumbel_exact finishes it. Until then the
	// token is the float32 winner.
	StatusExact Status = 5
)

// Seen is what the blocks of a row observed, ORed into the row's flags counter.
type Seen uint32

// Observations.
const (
	// SeenNonFinite: a NaN or +Inf processed logit (before the mask).
	SeenNonFinite Seen = 1 << 0
	// SeenFinite: a finite processed logit that the mask lets through.
	SeenFinite Seen = 1 << 1
)

// The random stream's purposes and noise bounds (package philox, the stream contract).
const (
	// PurposeGumbel: the main word of an element's Gumbel noise.
	PurposeGumbel = uint32(philox.PurposeGumbel)
	// PurposeGumbelTail: the tail-extension word, read when the main word is below
	// TailThreshold.
	PurposeGumbelTail = uint32(philox.PurposeGumbelTail)
	// PurposeCategorical: the 64-bit uniform of the categorical draw.
	PurposeCategorical = uint32(philox.PurposeCategorical)
	// PurposeSpeculative: the acceptance uniform of a draft token at its position.
	PurposeSpeculative = uint32(philox.PurposeSpeculative)
	// TailThreshold: main words below it take the tail word.
	TailThreshold uint32 = philox.TailThreshold
	// MaxGumbel bounds the Gumbel noise from above.
	MaxGumbel float32 = philox.MaxGumbel
	// ExactScale: an element whose fl(x'·invT) has at least this magnitude is valued
	// x'·invT + g exactly, which a float32 score cannot hold (ABI.md, "Exact scores").
	ExactScale float32 = 4096
	// ExactLimit: a draw whose winning score has at least this magnitude (ExactScale less
	// the noise's range and a margin) needs the exact comparison: gumbel_argmax ends it
	// with StatusExact, greedy or not; filtered, perturbed topn and residual finish it
	// themselves.
	ExactLimit float32 = 4032
)

// Limits.
const (
	// MaxVocab is the largest V.
	MaxVocab = 1<<31 - 1
	// MaxDraws is the largest grid.z: draws per row in one launch.
	MaxDraws = 1 << 24
	// MaxTopN is the largest n of the topn kernels, and the stride of their outputs.
	MaxTopN = 20
	// TopNRefused is the token of every entry of a topn row with bad parameters (status
	// 3 in the sampling kernels); a row with NaN or +Inf gets -1 (both with value NaN).
	TopNRefused = -3
	// TopNStride is the uint64 words one topn block keeps in partials: MaxTopN keys, its
	// log-sum-exp pair and a spare word.
	TopNStride = MaxTopN + 2
	// MaxThreads is the largest block the kernels are compiled for.
	MaxThreads = 1024
	// MaxWarps is the most warps of a block: MaxThreads over 32 lanes.
	MaxWarps = 32
	// RecordWords is the float32 words of one log-probability record.
	RecordWords = 4
	// CountMask selects the output count of a counts word; bit 31 marks a prompt token.
	CountMask uint32 = 0x7FFFFFFF
	// FilterList is the candidates of one filtered row and draw, over all its blocks: a
	// block publishes FilterList/S of them, and at least FilterMinCands.
	FilterList = 4096
	// FilterMinCands is the fewest candidates a filtered block publishes.
	FilterMinCands = 32
	// FilterMeta is the uint64 words a filtered block publishes after its candidates.
	FilterMeta = 4
	// SelectBins is the bins of one shard_select histogram: one 8-bit digit of a key.
	SelectBins = 256
)

// Flags of a shard_select query's second word (ABI.md, "shard_select").
const (
	// SelectMinP: an element matches only with a weight of at least the row's min_p.
	SelectMinP uint64 = 1 << 48
	// SelectDraw: the row's Gumbel-max winner over the matching elements goes to its key
	// word.
	SelectDraw uint64 = 1 << 49
)

// Shard keys: what a FlagShard draw writes to ArgShard. The largest key over the shards
// of a row is the key of the unsharded row, so one all-reduce with max merges them.
const (
	// ShardKeyFailed marks a failed draw in the high word of its shard key; the low
	// word is its status (1, 3 or 5), so the worse failure wins the maximum. A draw with
	// no finite logit writes 0, which every other key beats.
	ShardKeyFailed uint64 = 0xFFFFFFFF << 32
)

// OrderKey maps a float32 to a uint32 whose unsigned order is the float order (ABI.md,
// gumbel_argmax): -0 maps to the key of +0 (they compare equal as floats, so they must
// tie and go to the lowest index in every reduction order); NaNs lie beyond the
// infinities.
func OrderKey(f float32) uint32 {
	b := math.Float32bits(f)
	if b == 0x80000000 {
		b = 0
	}
	if b>>31 != 0 {
		return ^b
	}
	return b | 0x80000000
}

// OrderKeyValue is the float32 whose order key is k (OrderKey inverted; -0 comes back as
// +0, which compares equal).
func OrderKeyValue(k uint32) float32 {
	if k>>31 != 0 {
		return math.Float32frombits(k &^ 0x80000000)
	}
	return math.Float32frombits(^k)
}

// Inexact reports whether a packed key's score has at least ExactLimit in magnitude,
// where a float32 score may no longer hold the noise (ABI.md, "Exact scores").
func Inexact(key uint64) bool {
	return !(math.Abs(float64(OrderKeyValue(uint32(key>>32)))) < float64(ExactLimit))
}

// TopPTarget is top-p's target mass of ABI.md "categorical" step 5 for a kept mass z:
// (z·P) >> 32 with P = uint32(topP·2^32), from the 128-bit product.
func TopPTarget(z uint64, topP float32) uint64 {
	hi, lo := bits.Mul64(z, uint64(uint32(topP*0x1p32)))
	return hi<<32 | lo>>32
}

// SelectDigit chooses one 8-bit digit of the radix selections of ABI.md "categorical"
// (steps 3 and 5) from a level's histogram of SelectBins counts and masses: the highest
// non-empty bin at which the mass from the top, *above included, reaches target (the
// lowest non-empty bin when none does), adding the mass of the bins above it to *above.
// With counts as masses it selects by count (top-k).
func SelectDigit(counts, masses []uint64, target uint64, above *uint64) uint32 {
	chosen := 0
	for d := SelectBins - 1; d >= 0; d-- {
		if counts[d] == 0 {
			continue
		}
		chosen = d
		if *above+masses[d] >= target {
			break
		}
		*above += masses[d]
	}
	return uint32(chosen)
}

// Pack is the packed (score, index) key of ABI.md: the largest packed value is the
// largest score, ties to the lowest index.
func Pack(score float32, index uint32) uint64 {
	return uint64(OrderKey(score))<<32 | uint64(^index)
}

// ShardKey is the shard key of a draw whose merge key (the packed score and global
// index of its winner) is key and whose status is st.
func ShardKey(key uint64, st Status) uint64 {
	switch st {
	case StatusOK:
		return key
	case StatusNoFinite:
		return 0
	}
	return ShardKeyFailed | uint64(uint32(st))
}

// ShardResult is the token and status a merged shard key stands for.
func ShardResult(k uint64) (token int32, st Status) {
	switch {
	case k == 0:
		return -1, StatusNoFinite
	case k&ShardKeyFailed == ShardKeyFailed:
		return -1, Status(uint32(k))
	}
	return int32(^uint32(k)), StatusOK
}
