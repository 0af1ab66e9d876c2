// Package sampler turns a batch of logits into tokens on any gumbel device.
//
// Each row of a batch carries its own [Params]. Rows are routed (see [Route]):
// temperature 0 or top-k 1 take the greedy argmax; temperature > 0 with no filter takes
// Gumbel-max (one index-carrying max reduction: no softmax, no sort); a filter (top-k,
// top-p, min-p) takes the filtered route (the thresholds found across blocks, then
// Gumbel-max over the kept set); the switch MLXCEL_SAMPLING_GUMBEL=0 sends every sampled
// row to the categorical path (one block per row, an inverse-CDF draw). Rows
// of one route go to the device in one launch, spread over many blocks per row (the
// split phase, VT_SAMPLE_SPLIT) when that is faster. Scratch memory grows when a batch
// needs more and is reused; a steady-state call allocates nothing.
//
// A row's tokens depend only on its logits, its Params (seed and step) and the stream
// contract of package philox: never on the batch it shares, its position, or the
// switches that choose launch shapes.
//
// Serving features: a row can ask for the log-probability of its token (Params.Logprobs)
// and its top raw log-probabilities (Params.TopLogprobs), computed beside the sampling
// pass; logit processors ([Sampler.SetLogitBias], [Sampler.SetAllowedTokens],
// [Sampler.SetBannedTokens], and penalties from the token counts [Sampler.TrackTokens]
// keeps on the device) and token bitmasks for structured output ([Params.Bitmask],
// [Logits.Bitmask]) change the distribution a row is sampled from, exactly, inside the
// sampling pass;
// [Sampler.SampleN] draws several tokens per row with replacement and
// [Sampler.SampleDistinct] without; a [Batch] keeps its row parameters on the device and
// advances their steps there, so its Launch can be captured in a CUDA graph and
// replayed.
package sampler

import (
	"errors"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/gumbel-go/gumbel/runtime"
)

// DType is the element type of logits.
type DType uint8

// Logit element types.
const (
	Float32 DType = iota
	Float16
	BFloat16
)

// Size returns the element size in bytes.
func (d DType) Size() int {
	if d == Float32 {
		return 4
	}
	return 2
}

// String returns "float32", "float16" or "bfloat16".
func (d DType) String() string {
	switch d {
	case Float32:
		return "float32"
	case Float16:
		return "float16"
	case BFloat16:
		return "bfloat16"
	}
	return "dtype(?)"
}

// Params are one row's sampling parameters. The zero value of each filter turns it off,
// so Params{Temperature: 0.7, Seed: s} is plain temperature sampling, reproducible for
// s != 0.
//
// A row's random stream comes from, in order: its own seed (Seed nonzero, or HasSeed);
// else its RequestID (nonzero) under the sampler seed ([Options.Seed]); else fresh
// randomness: every such row gets a stream of its own, so identical rows of one batch
// (n completions of one prompt) draw independently, and their tokens are not
// reproducible across calls. Rows with a seed or request id reproduce their tokens
// whatever batch they share; give each completion its own seed or request id to
// reproduce it.
type Params struct {
	// Temperature divides the logits; 0 means greedy. Negative, NaN or infinite is an
	// error for the row.
	Temperature float32
	// TopK keeps the K most likely tokens (ties at the K-th logit kept); 0 (or >= V)
	// turns it off, 1 is greedy. Negative is an error.
	TopK int
	// TopP keeps the smallest set of most likely tokens whose probability (after
	// top-k) reaches TopP; 0 or 1 turns it off. Outside [0, 1] or NaN is an error.
	TopP float32
	// MinP keeps tokens whose probability is at least MinP times the top token's; 0
	// turns it off. Outside [0, 1] or NaN is an error.
	MinP float32
	// Seed is the row's own seed. A nonzero Seed is always used; a row without one
	// samples with philox.RowSeed(Options.Seed, RequestID), or with fresh randomness
	// when RequestID is 0.
	Seed uint64
	// HasSeed asks for Seed even when it is 0 (seed 0 is a seed like any other). It is
	// not needed for a nonzero Seed; it is kept for compatibility with code written when
	// Seed was ignored without it.
	HasSeed bool
	// RequestID names the request the row belongs to; it chooses the stream of a row
	// without its own seed. 0 means none: such a row draws fresh randomness.
	RequestID uint64
	// Step is the decode step: the same (seed, step) draws the same token.
	Step uint64

	// Logprobs asks for the log-probability record of every token the row draws
	// (Result.Logprobs), computed in the sampling pass itself.
	Logprobs bool
	// TopLogprobs asks for the row's TopLogprobs most likely tokens under the raw
	// logits (no processors, no temperature) with their raw log-probabilities
	// (Result.Top); 0 turns it off. Outside [0, MaxTopLogprobs] is an error.
	TopLogprobs int
	// RepetitionPenalty divides the positive logits (and multiplies the negative
	// ones) of every token the row has seen, in its prompt or its output; 0 or 1
	// turns it off. Otherwise it must be finite and > 0. Penalties read the counts
	// kept by [Sampler.TrackTokens]: a row that is not tracked has zero counts, so
	// its penalties change nothing.
	RepetitionPenalty float32
	// FrequencyPenalty is subtracted from a token's logit once per time the row
	// has sampled it; PresencePenalty once if it has sampled it at all. Both must be
	// finite; 0 turns them off. Prompt tokens count for neither.
	FrequencyPenalty, PresencePenalty float32

	// Bitmask is the row's token bitmask (structured output; see [Bitmask]): ceil(V/32)
	// words, bit j%32 of word j/32 allowing token j, in the layout grammar libraries
	// fill. nil turns it off. Another length is an error for the row (ErrBitmask). The
	// call copies it; the caller may reuse the slice when the call returns.
	Bitmask []int32
}

// MaxTopLogprobs is the most top log-probabilities a row can ask for (Params.TopLogprobs)
// and the most distinct tokens [Sampler.SampleDistinct] draws per row: the topn kernels'
// limit.
const MaxTopLogprobs = abi.MaxTopN

// Logprob is the log-probability record of one drawn token. Fields that a call did not
// compute are NaN.
type Logprob struct {
	// Raw is the token's log-probability under the raw logits: no processors, no
	// temperature (log-softmax of the logits as given).
	Raw float32
	// Processed is its log-probability under the distribution it was drawn from:
	// the processed logits (bias, penalties, mask) scaled by 1/temperature, softmax
	// at temperature 1 for greedy rows, and the kept set of the filters renormalised
	// for filtered rows.
	Processed float32
	// RawLSE is the raw log-normaliser: any token t's raw log-probability is
	// logit[t] - RawLSE.
	RawLSE float32
	// ProcessedLSE is the log-normaliser of the processed distribution.
	ProcessedLSE float32
}

// TopLogprobs is one row's most likely tokens under the raw logits, most likely first
// (ties to the lowest index).
type TopLogprobs struct {
	// Count is the number of valid entries: Params.TopLogprobs, or fewer when the row
	// has fewer finite logits; 0 for a row that did not ask or failed.
	Count int
	// Tokens[j] and Logprobs[j], j < Count, are the j-th token and its raw
	// log-probability.
	Tokens   [MaxTopLogprobs]int32
	Logprobs [MaxTopLogprobs]float32
}

// Route is the path a row takes.
type Route uint8

// Routes.
const (
	RouteGreedy Route = iota
	RouteGumbel
	RouteCategorical
	// RouteFiltered: top-k, top-p or min-p with the Gumbel switch on: the filters'
	// thresholds found across blocks, then Gumbel-max over the kept set.
	RouteFiltered
	// NumRoutes counts the routes.
	NumRoutes
)

// String returns the route's name.
func (r Route) String() string {
	switch r {
	case RouteGreedy:
		return "greedy"
	case RouteGumbel:
		return "gumbel"
	case RouteCategorical:
		return "categorical"
	case RouteFiltered:
		return "filtered"
	}
	return "route(?)"
}

// Logits is a [Rows, Vocab] matrix in device memory.
type Logits struct {
	// Data holds the matrix; row r starts at byte Offset + r*RowStride*DType.Size().
	Data   runtime.Buffer
	Offset int
	DType  DType
	Rows   int
	Vocab  int
	// RowStride is the distance between rows in elements; 0 means Vocab.
	RowStride int
	// Bitmask, when not nil, holds token bitmasks in device memory for these rows (see
	// [Bitmask]); rows may instead carry host masks in Params.Bitmask, but one call
	// takes only one of the two.
	Bitmask *Bitmask
}

// Result receives Draws tokens and one error per row. Reuse a Result across calls: its
// slices grow when a batch is larger and are not reallocated otherwise.
type Result struct {
	// Draws is the number of tokens per row: 1 for Sample, n for SampleN and
	// SampleDistinct, the batch's draws for Batch.Read.
	Draws int
	// Tokens[i*Draws+z] is row i's z-th token (Tokens[i] when Draws is 1), or -1 when
	// Errs[i] is not nil.
	Tokens []int32
	// Errs[i] is row i's error (wrapping one of the Err* row errors), or nil.
	Errs []error
	// Routes[i] is the route row i took.
	Routes []Route
	// Logprobs[i*Draws+z] is the log-probability record of Tokens[i*Draws+z]; all NaN
	// when row i did not ask for it (Params.Logprobs) or failed. It is empty when no
	// row of the call asked.
	Logprobs []Logprob
	// Top[i] holds row i's top log-probabilities (Params.TopLogprobs). It is empty
	// when no row of the call asked.
	Top []TopLogprobs
}

// Switch is an on/off option that can defer to an environment variable.
type Switch uint8

// Switch values.
const (
	// FromEnv reads the switch's environment variable ("0" is off; unset or anything
	// else is on).
	FromEnv Switch = iota
	On
	Off
)

// Environment variables read by Switch FromEnv.
const (
	// EnvGumbel set to 0 sends every sampled row to the categorical path.
	EnvGumbel = "MLXCEL_SAMPLING_GUMBEL"
	// EnvSplit set to 0 keeps every row in one block (no split phase).
	EnvSplit = "VT_SAMPLE_SPLIT"
)

// Errors. Call errors are returned by Sample; row errors appear in Result.Errs.
var (
	// ErrClosed: the sampler was closed.
	ErrClosed = errors.New("gumbel/sampler: sampler closed")
	// ErrShape: sizes do not agree (rows against params, vocab, stride, buffer size).
	ErrShape = errors.New("gumbel/sampler: shape mismatch")

	// ErrNonFiniteLogit: the row holds NaN or +Inf.
	ErrNonFiniteLogit = errors.New("gumbel/sampler: row holds NaN or +Inf")
	// ErrNoFiniteLogit: every logit of the row is -Inf.
	ErrNoFiniteLogit = errors.New("gumbel/sampler: row holds no finite logit")
	// ErrTemperature: temperature negative, NaN or infinite.
	ErrTemperature = errors.New("gumbel/sampler: temperature must be finite and >= 0")
	// ErrTopK: top-k negative.
	ErrTopK = errors.New("gumbel/sampler: top-k must be >= 0")
	// ErrTopP: top-p outside [0, 1] or NaN.
	ErrTopP = errors.New("gumbel/sampler: top-p must be in (0, 1] (0 turns it off)")
	// ErrMinP: min-p outside [0, 1] or NaN.
	ErrMinP = errors.New("gumbel/sampler: min-p must be in [0, 1]")
	// ErrTopLogprobs: Params.TopLogprobs outside [0, MaxTopLogprobs].
	ErrTopLogprobs = errors.New("gumbel/sampler: top log-probabilities must be in [0, 20]")
	// ErrPenalty: a repetition penalty that is negative, NaN or infinite, or a
	// frequency or presence penalty that is NaN or infinite.
	ErrPenalty = errors.New("gumbel/sampler: penalties must be finite (repetition > 0, or 0 for off)")
	// ErrDistinctFiltered: SampleDistinct was asked for a row with top-k, top-p or
	// min-p; draws without replacement exist for greedy and unfiltered rows only.
	ErrDistinctFiltered = errors.New("gumbel/sampler: draws without replacement need a row without top-k, top-p or min-p")
	// ErrBitmask: a row's token bitmask does not fit: a host mask whose length is not
	// ceil(V/32) words, or a mask row index outside the device bitmask.
	ErrBitmask = errors.New("gumbel/sampler: token bitmask does not fit the row")
	// ErrTooFewTokens: SampleDistinct asked for more distinct tokens than the row has
	// with a finite processed logit.
	ErrTooFewTokens = errors.New("gumbel/sampler: fewer tokens with a finite logit than distinct draws asked for")

	// ErrRow: a logits row index out of range (processor setters, Batch.SetRow).
	ErrRow = errors.New("gumbel/sampler: row index out of range")
	// ErrToken: a token id outside [0, vocab), or listed twice.
	ErrToken = errors.New("gumbel/sampler: token id out of range or repeated")
	// ErrBias: a logit bias that is NaN or infinite, or a bias list whose length
	// differs from its token list.
	ErrBias = errors.New("gumbel/sampler: logit bias must be finite, one per token")
	// ErrDraws: a draw count out of range (SampleN, SampleDistinct, NewBatch).
	ErrDraws = errors.New("gumbel/sampler: draw count out of range")
	// ErrRowNotSet: Batch.Launch before every row was given its Params.
	ErrRowNotSet = errors.New("gumbel/sampler: batch row has no parameters")

	// ErrDevice: the device returned a result the ABI does not allow (a token outside
	// the vocabulary, an unknown status code); a bug in a kernel edition.
	ErrDevice = errors.New("gumbel/sampler: invalid result from the device")
)
