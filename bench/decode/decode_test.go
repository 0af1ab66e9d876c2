package decode

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/half"
	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/runtime/cpu"
	"github.com/gumbel-go/gumbel/sampler"
)

func openCPU(t *testing.T) runtime.Device {
	t.Helper()
	dev, err := cpu.Open()
	require.NoError(t, err)
	t.Cleanup(func() { dev.Close() })
	return dev
}

// smallConfig is the CPU tests' model: V=4096, H=64.
func smallConfig(batch int, route sampler.Route) Config {
	return Config{Vocab: 4096, Hidden: 64, Batch: batch, Steps: 20, Warmup: 2, Route: route, Seed: 11, LMHeadRepeats: 3}
}

// hostModel is the model's weights as float64, for host references.
type hostModel struct {
	v, h int
	e, w []float64
}

func newHostModel(cfg Config) *hostModel {
	e, w := Weights(cfg)
	hm := &hostModel{v: cfg.Vocab, h: cfg.Hidden, e: make([]float64, len(e)), w: make([]float64, len(w))}
	for i, b := range e {
		hm.e[i] = float64(half.BFloat16ToFloat32(b))
	}
	for i, b := range w {
		hm.w[i] = float64(half.BFloat16ToFloat32(b))
	}
	return hm
}

// logits64 is the forward pass for one token in float64.
func (hm *hostModel) logits64(token int32) []float64 {
	x := hm.e[int(token)*hm.h : (int(token)+1)*hm.h]
	hid := make([]float64, hm.h)
	for i := range hid {
		var z float64
		for j, xj := range x {
			z += hm.w[i*hm.h+j] * xj
		}
		hid[i] = math.Tanh(z) + x[i]
	}
	out := make([]float64, hm.v)
	for v := range out {
		var d float64
		for j, hj := range hid {
			d += hm.e[v*hm.h+j] * hj
		}
		out[v] = d
	}
	return out
}

func argmax(v []float64) int {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return best
}

func TestRunCPU(t *testing.T) {
	dev := openCPU(t)
	for _, batch := range []int{1, 4} {
		for _, route := range Routes {
			t.Run(fmt.Sprintf("%s/batch%d", route, batch), func(t *testing.T) {
				cfg := smallConfig(batch, route)
				a, err := Run(dev, cfg)
				require.NoError(t, err)
				b, err := Run(dev, cfg)
				require.NoError(t, err)

				require.Len(t, a.Tokens, (cfg.Warmup+cfg.Steps)*batch)
				for i, tok := range a.Tokens {
					require.Truef(t, tok >= 0 && int(tok) < cfg.Vocab, "token %d = %d", i, tok)
				}
				assert.Equal(t, a.Tokens, b.Tokens, "equal seeds must decode equal tokens")
				assert.Equal(t, a.Start, b.Start)
				assert.Greater(t, a.TokensPerSec, 0.0)
				assert.Greater(t, a.StepUs, 0.0)
				assert.GreaterOrEqual(t, a.ModelUs, 0.0)
				assert.Greater(t, a.LMHeadGBps, 0.0)
				assert.False(t, math.IsNaN(a.SamplingShare()))

				if route != sampler.RouteGreedy {
					other := cfg
					other.Seed++
					c, err := Run(dev, other)
					require.NoError(t, err)
					assert.NotEqual(t, a.Tokens, c.Tokens, "another seed should decode other tokens")
					distinct := map[int32]bool{}
					for _, tok := range a.Tokens {
						distinct[tok] = true
					}
					assert.Greater(t, len(distinct), len(a.Tokens)/4, "sampling should not collapse onto a few tokens")
				}
			})
		}
	}
}

// TestGreedyMatchesHostReference follows the device's own trajectory: every step's
// greedy token must be the argmax of the float64 forward pass of the previous token
// (up to a near-tie within float32 rounding).
func TestGreedyMatchesHostReference(t *testing.T) {
	dev := openCPU(t)
	cfg := smallConfig(4, sampler.RouteGreedy)
	cfg.Steps, cfg.Warmup = 8, 0
	res, err := Run(dev, cfg)
	require.NoError(t, err)
	hm := newHostModel(cfg)
	prev := append([]int32(nil), res.Start...)
	distinct := map[int32]bool{}
	for step := range cfg.Steps {
		for b := range cfg.Batch {
			ref := hm.logits64(prev[b])
			got := res.Tokens[step*cfg.Batch+b]
			best := argmax(ref)
			assert.InDeltaf(t, ref[best], ref[got], 1e-4, "step %d row %d: token %d (logit %.6f), host argmax %d (%.6f)", step, b, got, ref[got], best, ref[best])
			prev[b] = got
			distinct[got] = true
		}
	}
	assert.Greater(t, len(distinct), 2, "the greedy trajectory should move between tokens")
}

// TestLogitsAreLLMLike checks the weights give logits with a spread of a few nats.
func TestLogitsAreLLMLike(t *testing.T) {
	for _, cfg := range []Config{smallConfig(1, sampler.RouteGreedy), {Vocab: 8192, Hidden: 1024, Seed: 3}} {
		hm := newHostModel(cfg)
		for _, tok := range StartTokens(Config{Vocab: cfg.Vocab, Batch: 3, Seed: 5}) {
			l := hm.logits64(tok)
			var sum, sq float64
			for _, v := range l {
				sum += v
				sq += v * v
			}
			mean := sum / float64(len(l))
			sd := math.Sqrt(sq/float64(len(l)) - mean*mean)
			top := l[argmax(l)]
			t.Logf("H=%d token %d: sd %.2f, top %.2f above the mean, own logit %.2f", cfg.Hidden, tok, sd, top-mean, l[tok]-mean)
			assert.Truef(t, sd > 1 && sd < 6, "logit sd %.3f", sd)
			assert.Greater(t, top-mean, 2*sd)
		}
	}
}

func TestValidate(t *testing.T) {
	good := smallConfig(4, sampler.RouteGumbel)
	require.NoError(t, good.Validate())
	for name, mutate := range map[string]func(*Config){
		"vocab":       func(c *Config) { c.Vocab = 1 },
		"hidden0":     func(c *Config) { c.Hidden = 0 },
		"hidden%8":    func(c *Config) { c.Hidden = 60 },
		"batch0":      func(c *Config) { c.Batch = 0 },
		"batch9":      func(c *Config) { c.Batch = 9 },
		"activations": func(c *Config) { c.Hidden, c.Batch = 2048, 8 },
		"steps":       func(c *Config) { c.Steps = 0 },
		"warmup":      func(c *Config) { c.Warmup = -1 },
		"repeats":     func(c *Config) { c.LMHeadRepeats = -1 },
		"route":       func(c *Config) { c.Route = sampler.NumRoutes },
		"huge":        func(c *Config) { c.Vocab, c.Hidden = 1<<22, 1024 },
	} {
		c := good
		mutate(&c)
		err := c.Validate()
		assert.ErrorIsf(t, err, ErrConfig, "%s", name)
		_, err = Run(openCPU(t), c)
		assert.ErrorIsf(t, err, ErrConfig, "%s via Run", name)
	}
	_, err := Run(nil, good)
	assert.ErrorIs(t, err, ErrConfig)
}

// TestStepDoesNotAllocate: a steady-state step (model launches and Sample) allocates
// nothing on the Go heap.
func TestStepDoesNotAllocate(t *testing.T) {
	dev := openCPU(t)
	cfg := smallConfig(4, sampler.RouteGumbel)
	m, err := newModel(dev, cfg)
	require.NoError(t, err)
	defer m.close()
	s, err := sampler.New(dev, Options(cfg.Route, cfg.Seed))
	require.NoError(t, err)
	defer s.Close()
	tokens := StartTokens(cfg)
	params := make([]sampler.Params, cfg.Batch)
	lg := sampler.Logits{Data: m.logits, DType: sampler.Float32, Rows: cfg.Batch, Vocab: cfg.Vocab}
	var out sampler.Result
	st := s.Stream()
	step := uint64(0)
	run := func() {
		require.NoError(t, st.CopyToDevice(m.tokens, 0, runtime.BytesOf(tokens)))
		require.NoError(t, m.forward(st))
		for b := range params {
			params[b] = RowParams(cfg.Route, cfg.Seed, b, step)
		}
		require.NoError(t, s.Sample(lg, params, &out))
		copy(tokens, out.Tokens)
		step++
	}
	run()
	assert.Zero(t, testing.AllocsPerRun(5, run))
}

func TestTable(t *testing.T) {
	rs := []Result{
		{Config: Config{Batch: 1, Route: sampler.RouteGreedy}, TokensPerSec: 5000, StepUs: 200, ModelUs: 150, LMHeadGBps: 3500},
		{Config: Config{Batch: 4, Route: sampler.RouteCategorical}, TokensPerSec: 16000, StepUs: 250, ModelUs: 150, LMHeadGBps: 3400},
	}
	md := Table(rs)
	assert.Contains(t, md, "| 1 | greedy | 5000 | 200.0 | 150.0 | 25.0% | 3500 |")
	assert.Contains(t, md, "| 4 | categorical | 16000 | 250.0 | 150.0 | 40.0% | 3400 |")
	assert.Contains(t, md, "tokens/s")
}

func TestMatrixCPU(t *testing.T) {
	dev := openCPU(t)
	base := smallConfig(1, sampler.RouteGreedy)
	base.Steps, base.Warmup = 3, 1
	var seen int
	rs, err := Matrix(dev, base, func(Result) { seen++ })
	require.NoError(t, err)
	require.Len(t, rs, len(Batches)*len(Routes))
	assert.Equal(t, len(rs), seen)
	for i, r := range rs {
		assert.Equal(t, Batches[i/len(Routes)], r.Config.Batch)
		assert.Equal(t, Routes[i%len(Routes)], r.Config.Route)
	}
}
