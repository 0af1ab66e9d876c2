// Package sampler turns a batch of logits into tokens on any gumbel device.
//
// Each row of a batch carries its own [Params]. Rows are routed (see [Route]):
// temperature 0 or top-k 1 take the greedy argmax; temperature > 0 with no filter takes
// Gumbel-max (one index-carrying max reduction: no softmax, no sort); a filter (top-k,
// top-p, min-p) or the switch MLXCEL_SAMPLING_GUMBEL=0 takes the categorical path. Rows
// of one route go to the device in one launch, spread over many blocks per row (the
// split phase, VT_SAMPLE_SPLIT) when that is faster. Scratch memory grows when a batch
// needs more and is reused; a steady-state call allocates nothing.
//
// A row's tokens depend only on its logits, its Params (seed and step) and the stream
// contract of package philox: never on the batch it shares, its position, or the
// switches that choose launch shapes.
package sampler

import (
	"errors"

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
// so Params{Temperature: 0.7, Seed: s, HasSeed: true} is plain temperature sampling.
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
	// Seed is the row's own seed, used when HasSeed is true. Otherwise the seed is
	// philox.RowSeed(Options.Seed, RequestID).
	Seed    uint64
	HasSeed bool
	// RequestID names the request the row belongs to (used only without HasSeed).
	RequestID uint64
	// Step is the decode step: the same (seed, step) draws the same token.
	Step uint64
}

// Route is the path a row takes.
type Route uint8

// Routes.
const (
	RouteGreedy Route = iota
	RouteGumbel
	RouteCategorical
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
}

// Result receives one token and one error per row. Reuse a Result across calls: its
// slices grow when a batch is larger and are not reallocated otherwise.
type Result struct {
	// Tokens[i] is row i's token, or -1 when Errs[i] is not nil.
	Tokens []int32
	// Errs[i] is row i's error (wrapping one of the Err* row errors), or nil.
	Errs []error
	// Routes[i] is the route row i took.
	Routes []Route
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
	// ErrDevice: the device returned a result the ABI does not allow (a token outside
	// the vocabulary, an unknown status code); a bug in a kernel edition.
	ErrDevice = errors.New("gumbel/sampler: invalid result from the device")
)
