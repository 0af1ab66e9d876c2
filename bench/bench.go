// Package bench measures sampling steps on any gumbel device: the device time of a step
// (from device events around many back-to-back launches of the step's kernels), the
// host-observed latency of one Sample call with the tokens back on the host, and the Go
// heap allocations per call. The same code backs `go test -bench` here and the
// command-line tool's bench command.
package bench

import (
	"fmt"
	"math"
	"math/rand/v2"
	goruntime "runtime"
	"slices"
	"time"

	"github.com/gumbel-go/gumbel/half"
	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/sampler"
)

// Route is a benchmarked sampling configuration.
type Route string

// The routes of the matrix.
const (
	Greedy      Route = "greedy"
	Categorical Route = "categorical" // the baseline: MLXCEL_SAMPLING_GUMBEL=0, no filter
	GumbelSplit Route = "gumbel-split"
	GumbelOne   Route = "gumbel-single-block"
	TopKTopP    Route = "topk50-topp0.9"
	// TopK40TopP09 is llama.cpp's and ollama's default top-k 40 with top-p 0.9, the
	// configuration of the CPU peers (bench/peers/cpu).
	TopK40TopP09 Route = "topk40-topp0.9"
	MinP         Route = "minp0.05"
	TopK50       Route = "topk50"   // top-k 50 alone
	TopP095      Route = "topp0.95" // top-p 0.95 alone
)

// Routes lists every route of the default matrix in table order.
var Routes = []Route{Greedy, Categorical, GumbelSplit, GumbelOne, TopKTopP, MinP}

// FilterRoutes lists the filtered-sampling routes, each with a FlashInfer or CPU-peer
// counterpart in Compare, and the unfiltered Gumbel and categorical routes they are set
// against (`gumbel bench --route filters`).
var FilterRoutes = []Route{TopKTopP, TopK40TopP09, TopK50, TopP095, MinP, GumbelSplit, Categorical}

// IsOwn reports whether r is one of gumbel's routes (of Routes, FilterRoutes,
// FeatureRoutes or BitmaskRoutes) rather than a peer's.
func IsOwn(r Route) bool {
	return slices.Contains(Routes, r) || slices.Contains(FilterRoutes, r) || slices.Contains(FeatureRoutes, r) ||
		slices.Contains(BitmaskRoutes, r)
}

// Point is one cell of the matrix.
type Point struct {
	Route Route         `json:"route"`
	DType sampler.DType `json:"-"`
	Vocab int           `json:"vocab"`
	Batch int           `json:"batch"`
	// BlocksPerRow forces the split of gumbel_argmax launches (0: the route's own).
	BlocksPerRow int `json:"blocks_per_row,omitempty"`
}

// Measurement is what was measured at one point.
type Measurement struct {
	Point
	DTypeName string `json:"dtype"`
	// DeviceUs is the median device time of one step in microseconds: events around
	// Repeats back-to-back launches of the step's kernels, divided by Repeats.
	DeviceUs float64 `json:"device_us"`
	// GraphUs is the median device time of one step replayed from a CUDA graph that
	// captured ten steps' launches (0 where the stream cannot capture): host launch
	// overhead removed, so it is close to the kernels' own time.
	GraphUs float64 `json:"graph_us,omitempty"`
	// HostUs is the median wall time of one Sample call, tokens back on the host.
	HostUs float64 `json:"host_us"`
	// AllocsPerCall is the Go heap allocations per Sample call in the steady state: the
	// fewest per call over allocWindows windows of the host calls. A CPU worker grows its
	// scratch the first time it runs a kernel, which may fall in any call, once; spread
	// over the calls as a mean it would read as a per-call cost.
	AllocsPerCall float64 `json:"allocs_per_call"`
	// Tokens is the first row's token, to show the step did sample.
	Token int32 `json:"token"`
}

// Config sizes a measurement.
type Config struct {
	// Groups of Repeats launches each are timed; the median group gives DeviceUs.
	Groups, Repeats int
	// HostCalls is how many Sample calls are timed one by one.
	HostCalls int
	// Warmup calls run before anything is timed.
	Warmup int
}

// check reports a Config that cannot time anything.
func (c Config) check() error {
	if c.Groups < 1 || c.Repeats < 1 || c.HostCalls < 1 || c.Warmup < 0 {
		return fmt.Errorf("bench: config %+v: Groups, Repeats and HostCalls must be at least 1, Warmup at least 0", c)
	}
	return nil
}

// DefaultConfig suits a GPU: a few thousand steps per point.
var DefaultConfig = Config{Groups: 15, Repeats: 100, HostCalls: 200, Warmup: 20}

// params returns the row parameters of a route (a masked route's are those of the route
// it adds the mask to; setupBitmask adds the mask).
func params(r Route, batch int, step uint64) []sampler.Params {
	r = unmasked(r)
	ps := make([]sampler.Params, batch)
	for i := range ps {
		p := sampler.Params{Temperature: 0.8, Seed: uint64(1000 + i), HasSeed: true, Step: step}
		switch r {
		case Greedy:
			p.Temperature = 0
		case TopKTopP:
			p.TopK, p.TopP = 50, 0.9
		case TopK40TopP09:
			p.TopK, p.TopP = 40, 0.9
		case TopK50:
			p.TopK = 50
		case TopP095:
			p.TopP = 0.95
		case MinP:
			p.MinP = 0.05
		default:
			featureParams(r, &p)
		}
		ps[i] = p
	}
	return ps
}

// options returns the sampler options of a point.
func options(p Point, info runtime.DeviceInfo) sampler.Options {
	o := sampler.Options{Seed: 1, Gumbel: sampler.On, Split: sampler.On}
	switch unmasked(p.Route) {
	case Categorical:
		o.Gumbel = sampler.Off
	case GumbelOne:
		o.Split = sampler.Off
	}
	if p.BlocksPerRow > 0 {
		pol := sampler.SplitPolicy{TargetBlocks: p.BlocksPerRow * p.Batch, MaxBlocksPerRow: p.BlocksPerRow}
		o.Policy = &pol
	}
	return o
}

// LLMLogits returns rows of LLM-shaped logits: a normal body (sd 2.5) with a handful of
// strong tokens per row, different in every row; never zeros.
func LLMLogits(rows, vocab int, seed uint64) []float32 {
	rng := rand.New(rand.NewPCG(seed, 0x6c6f67697473))
	out := make([]float32, rows*vocab)
	for r := range rows {
		row := out[r*vocab : (r+1)*vocab]
		for i := range row {
			row[i] = float32(rng.NormFloat64() * 2.5)
		}
		for range 8 {
			row[rng.IntN(vocab)] = float32(12 + 6*rng.Float64())
		}
	}
	return out
}

// Upload copies logits to the device in the given type and returns the buffer.
func Upload(dev runtime.Device, logits []float32, dt sampler.DType) (runtime.Buffer, error) {
	var src []byte
	switch dt {
	case sampler.Float32:
		src = runtime.BytesOf(logits)
	default:
		bits := make([]uint16, len(logits))
		for i, v := range logits {
			if dt == sampler.Float16 {
				bits[i] = half.Float16(v)
			} else {
				bits[i] = half.BFloat16(v)
			}
		}
		src = runtime.BytesOf(bits)
	}
	return uploadBytes(dev, src)
}

// Measure times one point. logits must hold Batch rows of Vocab elements of the point's
// type.
func Measure(dev runtime.Device, p Point, logits runtime.Buffer, cfg Config) (Measurement, error) {
	m := Measurement{Point: p, DTypeName: p.DType.String()}
	if err := cfg.check(); err != nil {
		return m, err
	}
	s, err := sampler.New(dev, options(p, dev.Info()))
	if err != nil {
		return m, err
	}
	defer s.Close()
	lg := sampler.Logits{Data: logits, DType: p.DType, Rows: p.Batch, Vocab: p.Vocab}
	ps := params(p.Route, p.Batch, 0)
	var res sampler.Result
	if err := featureSetup(s, p.Route, p.Batch, p.Vocab); err != nil {
		return m, err
	}
	masks, err := setupBitmask(dev, s, p.Route, &lg, ps)
	if err != nil {
		return m, err
	}
	defer masks.close()
	// step is one sampling step; relaunch queues its device work again.
	step, relaunch := featureCall(s, p.Route, lg, ps, &res), s.Relaunch
	if unmasked(p.Route) == GumbelBatch {
		bs, err := newBatchStepper(s, lg, ps, &res)
		if err != nil {
			return m, err
		}
		defer bs.b.Close()
		step, relaunch = bs.call, bs.relaunch
	}
	if p.Route == GumbelBitmaskUnfused {
		step, relaunch = masks.unfused(step, relaunch)
	}
	call := func(n uint64) error {
		for i := range ps {
			ps[i].Step = n
		}
		if err := step(); err != nil {
			return err
		}
		for i, e := range res.Errs {
			if e != nil {
				return fmt.Errorf("row %d: %w", i, e)
			}
		}
		return nil
	}
	for i := range cfg.Warmup {
		if err := call(uint64(i)); err != nil {
			return m, err
		}
	}
	// The token of step Warmup's first row, which the first timed call draws.
	if err := call(uint64(cfg.Warmup)); err != nil {
		return m, err
	}
	m.Token = res.Tokens[0]

	// Host latency, one call at a time, and allocations by windows of calls.
	host := make([]float64, cfg.HostCalls)
	windows := min(allocWindows, cfg.HostCalls)
	mallocs := make([]uint64, windows+1)
	var ms goruntime.MemStats
	goruntime.ReadMemStats(&ms)
	mallocs[0] = ms.Mallocs
	for w := range windows {
		for i := w * cfg.HostCalls / windows; i < (w+1)*cfg.HostCalls/windows; i++ {
			t0 := time.Now()
			if err := call(uint64(cfg.Warmup + i)); err != nil {
				return m, err
			}
			host[i] = float64(time.Since(t0).Nanoseconds()) / 1e3
		}
		goruntime.ReadMemStats(&ms)
		mallocs[w+1] = ms.Mallocs
	}
	m.AllocsPerCall = fewestPerCall(mallocs, cfg.HostCalls)
	m.HostUs = median(host)

	m.DeviceUs, m.GraphUs, err = DeviceTime(dev, s.Stream(), relaunch, cfg)
	return m, err
}

// DeviceTime times the device work that relaunch queues on st: the median over
// cfg.Groups groups of events around cfg.Repeats back-to-back relaunches, and, where
// st can capture graphs, the median step of a graph of stepsPerGraph relaunches
// replayed (0 otherwise). Both are µs per relaunch.
func DeviceTime(dev runtime.Device, st runtime.Stream, relaunch func() error, cfg Config) (deviceUs, graphUs float64, err error) {
	start, err := dev.NewEvent()
	if err != nil {
		return 0, 0, err
	}
	defer start.Close()
	stop, err := dev.NewEvent()
	if err != nil {
		return 0, 0, err
	}
	defer stop.Close()
	groups := make([]float64, cfg.Groups)
	for g := range groups {
		if err := st.Record(start); err != nil {
			return 0, 0, err
		}
		for range cfg.Repeats {
			if err := relaunch(); err != nil {
				return 0, 0, err
			}
		}
		if err := st.Record(stop); err != nil {
			return 0, 0, err
		}
		if err := stop.Synchronize(); err != nil {
			return 0, 0, err
		}
		ms, err := stop.ElapsedSince(start)
		if err != nil {
			return 0, 0, err
		}
		groups[g] = float64(ms) * 1e3 / float64(cfg.Repeats)
	}
	deviceUs = median(groups)
	if gc, ok := st.(runtime.GraphCapturer); ok {
		graphUs, err = graphTime(st, relaunch, gc, start, stop, cfg)
	}
	return deviceUs, graphUs, err
}

// graphTime captures stepsPerGraph relaunches of a step into a graph on st and returns
// the median device time of one step, over cfg.Groups groups of cfg.Repeats replays.
func graphTime(st runtime.Stream, relaunch func() error, gc runtime.GraphCapturer, start, stop runtime.Event, cfg Config) (float64, error) {
	if err := gc.BeginCapture(); err != nil {
		return 0, err
	}
	for range stepsPerGraph {
		if err := relaunch(); err != nil {
			_, _ = gc.EndCapture()
			return 0, err
		}
	}
	g, err := gc.EndCapture()
	if err != nil {
		return 0, err
	}
	defer g.Close()
	groups := make([]float64, cfg.Groups)
	for i := range groups {
		if err := st.Record(start); err != nil {
			return 0, err
		}
		for range cfg.Repeats {
			if err := g.Launch(st); err != nil {
				return 0, err
			}
		}
		if err := st.Record(stop); err != nil {
			return 0, err
		}
		if err := stop.Synchronize(); err != nil {
			return 0, err
		}
		ms, err := stop.ElapsedSince(start)
		if err != nil {
			return 0, err
		}
		groups[i] = float64(ms) * 1e3 / float64(cfg.Repeats*stepsPerGraph)
	}
	return median(groups), nil
}

// stepsPerGraph is how many steps one captured graph holds, so that the graph's own
// launch is shared by several steps (as bench/peers/torch_peers.py does).
const stepsPerGraph = 10

// allocWindows is how many windows of host calls AllocsPerCall takes its fewest from.
const allocWindows = 4

// fewestPerCall is the fewest allocations per call over the windows that split calls
// calls evenly (as Measure's loop does), given the heap's malloc count at each window's
// edge.
func fewestPerCall(mallocs []uint64, calls int) float64 {
	windows := len(mallocs) - 1
	if windows < 1 || calls < 1 {
		return 0
	}
	fewest := math.Inf(1)
	for w := range windows {
		n := (w+1)*calls/windows - w*calls/windows
		if n > 0 {
			fewest = min(fewest, float64(mallocs[w+1]-mallocs[w])/float64(n))
		}
	}
	return fewest
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
