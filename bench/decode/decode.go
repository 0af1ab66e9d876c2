// Package decode benchmarks sampling inside a model-shaped decode loop: each step embeds
// the batch's tokens, runs one hidden layer and a tied-embedding LM head on the device
// (bfloat16 weights, float32 activations), then samples the next tokens from the logits
// buffer in place with package sampler. It reports tokens per second, the step time, the
// model's share of it and the LM head's memory bandwidth, to show what sampling costs in
// a real loop rather than alone.
//
// The model kernels (see [Program]) have a CUDA edition and a Go edition for the CPU
// device; there is no Metal or HIP edition.
package decode

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/gumbel-go/gumbel/half"
	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/sampler"
)

// Config sizes one decode run.
type Config struct {
	// Vocab and Hidden are the model's sizes; Hidden must be a multiple of 8.
	Vocab, Hidden int
	// Batch is the number of sequences decoded together, 1..MaxBatch.
	Batch int
	// Steps is how many timed steps run after Warmup untimed ones.
	Steps, Warmup int
	// Route is the sampling path every row takes: greedy (temperature 0), gumbel
	// (temperature 0.8) or categorical (temperature 0.8 with Gumbel-max switched off).
	Route sampler.Route
	// Seed fixes the weights, the first tokens and the sampling streams.
	Seed uint64
	// LMHeadRepeats is how many back-to-back LM-head launches the bandwidth figure is
	// timed over (0: no bandwidth measurement).
	LMHeadRepeats int
}

// Result is what one decode run measured.
type Result struct {
	Config Config
	// Tokens holds every step's tokens, warm-up steps included: step s, row b at
	// Tokens[s*Batch+b]. Step s samples from the logits of Start (s = 0) or of step s-1.
	Tokens []int32
	// Start is the tokens the first step embeds.
	Start []int32
	// TokensPerSec is Batch·Steps over the host time of the timed steps.
	TokensPerSec float64
	// StepUs is the host time of one step (model, sampling, tokens back on the host).
	StepUs float64
	// ModelUs is the device time of embed, hidden and LM head in one step (events).
	ModelUs float64
	// LMHeadUs is the device time of one LM-head launch, over LMHeadRepeats launches.
	LMHeadUs float64
	// LMHeadGBps is the LM head's bandwidth: bytes of the embedding read per launch
	// over LMHeadUs.
	LMHeadGBps float64
}

// SamplingShare is the fraction of a step not spent in the model kernels: sampling,
// the token round trip and launch overheads.
func (r Result) SamplingShare() float64 {
	if r.StepUs <= 0 {
		return math.NaN()
	}
	return 1 - r.ModelUs/r.StepUs
}

// ErrConfig is returned for a Config the model kernels cannot run.
var ErrConfig = errors.New("gumbel/bench/decode: invalid config")

// Validate reports why cfg cannot run, or nil.
func (cfg Config) Validate() error {
	switch {
	case cfg.Vocab < 2 || cfg.Vocab >= math.MaxInt32/2:
		return fmt.Errorf("%w: vocab %d", ErrConfig, cfg.Vocab)
	case cfg.Hidden < 8 || cfg.Hidden%8 != 0:
		return fmt.Errorf("%w: hidden %d must be a positive multiple of 8", ErrConfig, cfg.Hidden)
	case cfg.Batch < 1 || cfg.Batch > MaxBatch:
		return fmt.Errorf("%w: batch %d must be in 1..%d", ErrConfig, cfg.Batch, MaxBatch)
	case cfg.Batch*paddedHidden(cfg.Hidden) > maxActivations:
		return fmt.Errorf("%w: batch %d x hidden %d exceeds the kernels' %d staged activations", ErrConfig, cfg.Batch, cfg.Hidden, maxActivations)
	case int64(cfg.Vocab)*int64(cfg.Hidden) >= math.MaxInt32:
		return fmt.Errorf("%w: vocab x hidden %d too large", ErrConfig, int64(cfg.Vocab)*int64(cfg.Hidden))
	case cfg.Steps < 1 || cfg.Warmup < 0 || cfg.LMHeadRepeats < 0:
		return fmt.Errorf("%w: steps %d, warmup %d, lm-head repeats %d", ErrConfig, cfg.Steps, cfg.Warmup, cfg.LMHeadRepeats)
	case cfg.Route >= sampler.NumRoutes:
		return fmt.Errorf("%w: route %d", ErrConfig, cfg.Route)
	}
	return nil
}

// Weights returns the model's bfloat16 weights for a config: the embedding E [Vocab,
// Hidden] and the hidden layer W [Hidden, Hidden], row-major. E is normal with standard
// deviation 3.84/sqrt(Hidden) (0.12 at 1024), so that logits spread over a few nats at
// any width, as an LLM's do; W is -I plus normal noise of deviation 0.25, so that
// tanh(W x) cancels much of the residual x and the next logits are not dominated by the
// current token's own row.
func Weights(cfg Config) (e, w []uint16) {
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x6465636f6465))
	e = make([]uint16, cfg.Vocab*cfg.Hidden)
	es := embedScale / math.Sqrt(float64(cfg.Hidden))
	for i := range e {
		e[i] = half.BFloat16(float32(rng.NormFloat64() * es))
	}
	w = make([]uint16, cfg.Hidden*cfg.Hidden)
	for i := range cfg.Hidden {
		for j := range cfg.Hidden {
			v := rng.NormFloat64() * hiddenNoise
			if i == j {
				v--
			}
			w[i*cfg.Hidden+j] = half.BFloat16(float32(v))
		}
	}
	return e, w
}

// Scales of Weights.
const (
	embedScale  = 3.84
	hiddenNoise = 0.25
)

// StartTokens returns the tokens the first step embeds.
func StartTokens(cfg Config) []int32 {
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x7374617274))
	t := make([]int32, cfg.Batch)
	for i := range t {
		t[i] = int32(rng.IntN(cfg.Vocab))
	}
	return t
}

// RowParams returns the sampling parameters of row b at a step for a route: the
// filtered route's rows carry top-k 50 and top-p 0.9.
func RowParams(route sampler.Route, seed uint64, b int, step uint64) sampler.Params {
	p := sampler.Params{Temperature: 0.8, Seed: seed + uint64(b), HasSeed: true, Step: step}
	switch route {
	case sampler.RouteGreedy:
		p.Temperature = 0
	case sampler.RouteFiltered:
		p.TopK, p.TopP = 50, 0.9
	}
	return p
}

// Options returns the sampler options of a route.
func Options(route sampler.Route, seed uint64) sampler.Options {
	o := sampler.Options{Seed: seed, Gumbel: sampler.On}
	if route == sampler.RouteCategorical {
		o.Gumbel = sampler.Off
	}
	return o
}

// Run uploads the model for cfg to dev, decodes cfg.Warmup + cfg.Steps steps and
// measures them.
func Run(dev runtime.Device, cfg Config) (res Result, err error) {
	res.Config = cfg
	if dev == nil {
		return res, fmt.Errorf("%w: nil device", ErrConfig)
	}
	if err := cfg.Validate(); err != nil {
		return res, err
	}
	m, err := newModel(dev, cfg)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, m.close()) }()

	s, err := sampler.New(dev, Options(cfg.Route, cfg.Seed))
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, s.Close()) }()
	st := s.Stream()

	start, err := dev.NewEvent()
	if err != nil {
		return res, err
	}
	defer start.Close()
	stop, err := dev.NewEvent()
	if err != nil {
		return res, err
	}
	defer stop.Close()

	total := cfg.Warmup + cfg.Steps
	res.Start = StartTokens(cfg)
	res.Tokens = make([]int32, total*cfg.Batch)
	tokens := append([]int32(nil), res.Start...)
	params := make([]sampler.Params, cfg.Batch)
	lg := sampler.Logits{Data: m.logits, DType: sampler.Float32, Rows: cfg.Batch, Vocab: cfg.Vocab}
	var out sampler.Result
	var modelMs float64
	var t0 time.Time
	for step := range total {
		if step == cfg.Warmup {
			t0 = time.Now()
		}
		if err := st.CopyToDevice(m.tokens, 0, runtime.BytesOf(tokens)); err != nil {
			return res, err
		}
		if err := st.Record(start); err != nil {
			return res, err
		}
		if err := m.forward(st); err != nil {
			return res, err
		}
		if err := st.Record(stop); err != nil {
			return res, err
		}
		for b := range params {
			params[b] = RowParams(cfg.Route, cfg.Seed, b, uint64(step))
		}
		if err := s.Sample(lg, params, &out); err != nil {
			return res, err
		}
		for b, e := range out.Errs {
			if e != nil {
				return res, fmt.Errorf("step %d row %d: %w", step, b, e)
			}
		}
		copy(tokens, out.Tokens)
		copy(res.Tokens[step*cfg.Batch:], out.Tokens)
		if step >= cfg.Warmup {
			// Sample returned the tokens, so both events have been reached.
			ms, err := stop.ElapsedSince(start)
			if err != nil {
				return res, err
			}
			modelMs += float64(ms)
		}
	}
	elapsed := time.Since(t0)
	res.StepUs = float64(elapsed.Nanoseconds()) / 1e3 / float64(cfg.Steps)
	res.TokensPerSec = float64(cfg.Batch*cfg.Steps) / elapsed.Seconds()
	res.ModelUs = modelMs * 1e3 / float64(cfg.Steps)

	if cfg.LMHeadRepeats > 0 {
		if err := st.Record(start); err != nil {
			return res, err
		}
		for range cfg.LMHeadRepeats {
			if err := m.lmHead(st); err != nil {
				return res, err
			}
		}
		if err := st.Record(stop); err != nil {
			return res, err
		}
		if err := stop.Synchronize(); err != nil {
			return res, err
		}
		ms, err := stop.ElapsedSince(start)
		if err != nil {
			return res, err
		}
		res.LMHeadUs = float64(ms) * 1e3 / float64(cfg.LMHeadRepeats)
		if res.LMHeadUs > 0 {
			res.LMHeadGBps = float64(2*cfg.Vocab*cfg.Hidden) / (res.LMHeadUs * 1e3)
		}
	}
	return res, nil
}
