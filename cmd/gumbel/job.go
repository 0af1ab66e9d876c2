package main

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/gumbel-go/gumbel/bench"
	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/sampler"
)

// The main job's batch: LLM-shaped (Qwen-sized vocabulary), one row per kind of
// sampling a serving engine mixes in one step.
const (
	jobRows  = 8
	jobVocab = 151936
)

// jobConfig is the parsed command line of `gumbel run`.
type jobConfig struct {
	steps  int
	calls  int
	seed   uint64
	device deviceFlags
}

func parseJobFlags(args []string, w io.Writer) (jobConfig, error) {
	var c jobConfig
	fs := newFlags("run", "[run] [flags]", w)
	fs.IntVar(&c.steps, "steps", 4, "decode steps to sample and print")
	fs.IntVar(&c.calls, "calls", 7, "timed calls per route (the median is reported)")
	fs.Uint64Var(&c.seed, "seed", 2024, "sampler seed (rows derive theirs from it and their request id)")
	c.device.register(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return c, err
	}
	if len(pos) > 0 {
		return c, usagef("unexpected argument %q", pos[0])
	}
	if c.steps < 1 || c.steps > 1000 {
		return c, usagef("--steps %d: must be between 1 and 1000", c.steps)
	}
	if c.calls < 1 || c.calls > 1000 {
		return c, usagef("--calls %d: must be between 1 and 1000", c.calls)
	}
	return c, c.device.validate()
}

// jobParams are the rows' sampling parameters: every route, several settings each.
func jobParams() []sampler.Params {
	return []sampler.Params{
		{Temperature: 0},
		{Temperature: 0.7},
		{Temperature: 1.0},
		{Temperature: 1.5},
		{Temperature: 0.8, TopK: 50},
		{Temperature: 1.0, TopP: 0.9},
		{Temperature: 0.7, TopK: 40, TopP: 0.95},
		{Temperature: 1.0, MinP: 0.05},
	}
}

func describeParams(p sampler.Params) string {
	if p.Temperature == 0 {
		return "greedy"
	}
	parts := []string{fmt.Sprintf("T=%g", p.Temperature)}
	if p.TopK != 0 {
		parts = append(parts, fmt.Sprintf("top-k=%d", p.TopK))
	}
	if p.TopP != 0 && p.TopP != 1 {
		parts = append(parts, fmt.Sprintf("top-p=%g", p.TopP))
	}
	if p.MinP != 0 {
		parts = append(parts, fmt.Sprintf("min-p=%g", p.MinP))
	}
	return strings.Join(parts, " ")
}

// argmax returns the index of the largest value, the lowest index among equals.
func argmax(row []float32) int32 {
	best := 0
	for i, v := range row {
		if v > row[best] {
			best = i
		}
	}
	return int32(best)
}

func runJob(e env, args []string) error {
	cfg, err := parseJobFlags(args, e.stderr)
	if err != nil {
		return err
	}
	dev, err := cfg.device.open()
	if err != nil {
		return err
	}
	defer dev.Close()
	fmt.Fprintln(e.stdout, cfg.device.choice(dev))

	s, err := sampler.New(dev, sampler.Options{Seed: cfg.seed})
	if err != nil {
		return err
	}
	defer s.Close()

	host := bench.LLMLogits(jobRows, jobVocab, cfg.seed)
	buf, err := bench.Upload(dev, host, sampler.Float32)
	if err != nil {
		return err
	}
	defer buf.Free()
	logits := sampler.Logits{Data: buf, DType: sampler.Float32, Rows: jobRows, Vocab: jobVocab}
	fmt.Fprintf(e.stdout, "logits: %d rows x %d synthetic LLM-shaped float32 logits (normal body, a few strong tokens per row), in device memory\n\n", jobRows, jobVocab)

	params := jobParams()
	for r := range params {
		params[r].RequestID = uint64(r) + 1 // 0 is no request id
	}
	tokens, routes, err := sampleSteps(s, logits, params, cfg.steps)
	if err != nil {
		return err
	}
	if err := printSteps(e.stdout, params, routes, tokens); err != nil {
		return err
	}

	if err := checkJob(e.stdout, dev, s, host, logits, params, tokens[0]); err != nil {
		return err
	}
	fmt.Fprintln(e.stdout)
	return timeRoutes(e.stdout, dev, buf, cfg.calls)
}

// sampleSteps samples the batch at steps 0..steps-1: tokens[step][row], and the route
// each row took (the same at every step).
func sampleSteps(s *sampler.Sampler, logits sampler.Logits, params []sampler.Params, steps int) ([][]int32, []sampler.Route, error) {
	var res sampler.Result
	out := make([][]int32, steps)
	for step := range steps {
		for r := range params {
			params[r].Step = uint64(step)
		}
		if err := s.Sample(logits, params, &res); err != nil {
			return nil, nil, err
		}
		if err := errors.Join(res.Errs...); err != nil {
			return nil, nil, err
		}
		out[step] = slices.Clone(res.Tokens[:len(params)])
	}
	return out, slices.Clone(res.Routes[:len(params)]), nil
}

func printSteps(w io.Writer, params []sampler.Params, routes []sampler.Route, tokens [][]int32) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "row\tparams\troute")
	for step := range tokens {
		fmt.Fprintf(tw, "\tstep %d", step)
	}
	fmt.Fprintln(tw)
	for r, p := range params {
		fmt.Fprintf(tw, "%d\t%s\t%s", r, describeParams(p), routes[r])
		for step := range tokens {
			fmt.Fprintf(tw, "\t%d", tokens[step][r])
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

// checkJob verifies what can be verified cheaply on any device, so a GPU run proves
// more than that it did not crash: the greedy row matches the host's argmax, a repeated
// call draws the same tokens, and a row sampled alone draws the token it drew in the
// batch (the stream contract).
func checkJob(w io.Writer, dev runtime.Device, s *sampler.Sampler, host []float32, logits sampler.Logits, params []sampler.Params, step0 []int32) error {
	vocab := logits.Vocab
	for r := range params {
		params[r].Step = 0
	}
	var res sampler.Result
	var failed []string
	for r, p := range params {
		if s.RouteFor(p, vocab) != sampler.RouteGreedy {
			continue
		}
		if want := argmax(host[r*vocab : (r+1)*vocab]); step0[r] != want {
			failed = append(failed, fmt.Sprintf("row %d (greedy) drew %d, the host's argmax is %d", r, step0[r], want))
		}
	}
	if err := s.Sample(logits, params, &res); err != nil {
		return err
	}
	if !slices.Equal(res.Tokens[:len(params)], step0) {
		failed = append(failed, fmt.Sprintf("step 0 sampled again drew %v, first %v", res.Tokens[:len(params)], step0))
	}
	for r := range params {
		alone := logits
		alone.Offset = r * vocab * logits.DType.Size()
		alone.Rows = 1
		if err := s.Sample(alone, params[r:r+1], &res); err != nil {
			return err
		}
		if res.Tokens[0] != step0[r] {
			failed = append(failed, fmt.Sprintf("row %d sampled alone drew %d, in the batch %d", r, res.Tokens[0], step0[r]))
		}
	}
	if failed != nil {
		return fmt.Errorf("checks failed on %s:\n  %s", dev.Info().Backend, strings.Join(failed, "\n  "))
	}
	fmt.Fprintln(w, "\nchecks: greedy matches the host argmax; a repeated step draws the same tokens; each row alone draws what it drew in the batch")
	return nil
}

// timeRoutes measures one sampling step of the batch on every route of package bench:
// the host's view (median wall time of a Sample call, tokens back on the host) and the
// device's (events around back-to-back launches).
func timeRoutes(w io.Writer, dev runtime.Device, buf runtime.Buffer, calls int) error {
	cfg := bench.Config{Groups: 5, Repeats: 5, HostCalls: calls, Warmup: 1}
	fmt.Fprintf(w, "one sampling step of %d rows x %d on each route (medians: host over %d calls, device over %d groups of %d launches):\n",
		jobRows, jobVocab, calls, cfg.Groups, cfg.Repeats)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "route\t%12s\t%10s\t%12s\n", "host/call", "ns/element", "device/step")
	for _, r := range bench.Routes {
		m, err := bench.Measure(dev, bench.Point{Route: r, DType: sampler.Float32, Vocab: jobVocab, Batch: jobRows}, buf, cfg)
		if err != nil {
			return fmt.Errorf("timing %s: %w", r, err)
		}
		perElement := m.HostUs * 1e3 / float64(jobRows*jobVocab)
		fmt.Fprintf(tw, "%s\t%12s\t%10.3f\t%12s\n", r, formatMicros(m.HostUs), perElement, formatMicros(m.DeviceUs))
	}
	return tw.Flush()
}

func formatMicros(us float64) string {
	if us < 1000 {
		return fmt.Sprintf("%.1f µs", us)
	}
	return fmt.Sprintf("%.3f ms", us/1e3)
}
