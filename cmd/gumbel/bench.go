package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/gumbel-go/gumbel/bench"
	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/sampler"
)

// benchConfig is the parsed command line of `gumbel bench`.
type benchConfig struct {
	matrix bench.Matrix
	// timing is the measurement size; zero fields take the device's default.
	timing bench.Config
	asJSON bool
	// features measures the serving features against the plain Gumbel step.
	features bool
	// sweep, when set, is the split sweep to run instead of the matrix.
	sweep *bench.Sweep
	// compare names peers' measurements (bench/peers/torch_peers.py --out,
	// bench/peers/flashinfer.sh --out, bench/peers/cpu's llamacpp.sh --out and
	// ollama --out) to set against this run's.
	compare []string
	// chart names an image of this run's measurements and the peers'.
	chart string
	// out is a folder to write the results to (NAME.json and NAME.md), or "".
	out    string
	device deviceFlags
}

// name names the measurement set: the files --out writes are NAME.json and NAME.md.
func (c benchConfig) name() string {
	switch {
	case c.sweep != nil:
		return "split-sweep"
	case c.features:
		return "features"
	}
	return "matrix"
}

// cpuBenchConfig sizes measurements on the CPU device, where one step at V = 151936
// takes milliseconds rather than microseconds: bench.DefaultConfig's few thousand steps
// per point would take minutes there.
var cpuBenchConfig = bench.Config{Groups: 3, Repeats: 3, HostCalls: 5, Warmup: 2}

func parseBenchFlags(args []string, w io.Writer) (benchConfig, error) {
	c := benchConfig{matrix: bench.FullMatrix}
	fs := newFlags("bench", "bench [flags]", w)
	routes := fs.String("route", joinRoutes(bench.FullMatrix.Routes), fmt.Sprintf("routes to measure, comma-separated: %s; %q stands for %s; "+
		"%q stands for %s: routes each followed by their forms with a token bitmask (about half the tokens allowed; +bitmask: masks in device memory, "+
		"-host: host masks copied by each call, -unfused: a separate mask kernel, then the unmasked step), and adds a table of the masks' cost",
		joinRoutes(ownRoutes()), filterRoutesName, joinRoutes(bench.FilterRoutes), bitmaskRoutesName, joinRoutes(bench.BitmaskRoutes)))
	dtypes := fs.String("dtype", joinDTypes(bench.FullMatrix.DTypes), "logits types, comma-separated: float32, float16, bfloat16")
	vocabs := fs.String("vocab", joinInts(bench.FullMatrix.Vocabs), "vocabulary sizes, comma-separated")
	batches := fs.String("batch", joinInts(bench.FullMatrix.Batches), "batch sizes, comma-separated")
	fs.IntVar(&c.timing.Groups, "groups", 0, fmt.Sprintf("timed groups of launches per point; the median group is reported (0: %d on a GPU, %d on the CPU)", bench.DefaultConfig.Groups, cpuBenchConfig.Groups))
	fs.IntVar(&c.timing.Repeats, "repeats", 0, fmt.Sprintf("back-to-back launches per group (0: %d on a GPU, %d on the CPU)", bench.DefaultConfig.Repeats, cpuBenchConfig.Repeats))
	fs.IntVar(&c.timing.HostCalls, "calls", 0, fmt.Sprintf("Sample calls timed one by one per point (0: %d on a GPU, %d on the CPU)", bench.DefaultConfig.HostCalls, cpuBenchConfig.HostCalls))
	fs.IntVar(&c.timing.Warmup, "warmup", -1, fmt.Sprintf("untimed calls first (-1: %d on a GPU, %d on the CPU)", bench.DefaultConfig.Warmup, cpuBenchConfig.Warmup))
	fs.BoolVar(&c.features, "features", false, fmt.Sprintf("measure the serving features (log-probabilities, processors, draws, batch launches) against the plain Gumbel step: routes default to %s, vocab to %s, batch to %s", joinRoutes(bench.FeatureMatrix.Routes), joinInts(bench.FeatureMatrix.Vocabs), joinInts(bench.FeatureMatrix.Batches)))
	sweep := fs.Bool("split-sweep", false, fmt.Sprintf("time the Gumbel route at every blocks-per-row value of --splits, the measurements the split policy is chosen from: dtype defaults to %s, vocab to %s, batch to %s; on a GPU %d groups of %d launches per point", bench.DefaultSweep.DType, joinInts(bench.DefaultSweep.Vocabs), joinInts(bench.DefaultSweep.Batches), bench.SweepConfig.Groups, bench.SweepConfig.Repeats))
	splits := fs.String("splits", joinInts(bench.DefaultSweep.Splits), "blocks per row of --split-sweep, comma-separated")
	fs.BoolVar(&c.asJSON, "json", false, "print the measurements as JSON instead of markdown tables")
	fs.Func("compare", "peer measurements to compare with this run's: JSON files from bench/peers/torch_peers.py, bench/peers/flashinfer.sh or the CPU peers of bench/peers/cpu, comma-separated or the flag repeated", func(s string) error {
		files := splitList(s)
		if files == nil {
			return fmt.Errorf("no file named")
		}
		c.compare = append(c.compare, files...)
		return nil
	})
	fs.StringVar(&c.chart, "chart", "", "write an SVG chart of device time against vocabulary size to this .svg file")
	fs.StringVar(&c.out, "out", "", "also write the results to this folder: NAME.json (what --json prints) and NAME.md (the tables), NAME being matrix, features or split-sweep")
	c.device.register(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return c, err
	}
	if len(pos) > 0 {
		return c, usagef("unexpected argument %q", pos[0])
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if c.features && *sweep {
		return c, usagef("--features and --split-sweep: choose one")
	}
	if given["splits"] && !*sweep {
		return c, usagef("--splits needs --split-sweep")
	}
	if *sweep {
		for _, f := range []string{"route", "compare", "chart"} {
			if given[f] {
				return c, usagef("--%s does not apply to --split-sweep, which times the %s route alone", f, bench.GumbelSplit)
			}
		}
		// The sweep's defaults, for the list flags not given.
		if !given["dtype"] {
			*dtypes = bench.DefaultSweep.DType.String()
		}
		if !given["vocab"] {
			*vocabs = joinInts(bench.DefaultSweep.Vocabs)
		}
		if !given["batch"] {
			*batches = joinInts(bench.DefaultSweep.Batches)
		}
	}
	if c.features {
		// The feature matrix's defaults, for the list flags not given.
		if !given["route"] {
			*routes = joinRoutes(bench.FeatureMatrix.Routes)
		}
		if !given["vocab"] {
			*vocabs = joinInts(bench.FeatureMatrix.Vocabs)
		}
		if !given["batch"] {
			*batches = joinInts(bench.FeatureMatrix.Batches)
		}
	}
	if c.matrix.Routes, err = parseRoutes(*routes); err != nil {
		return c, err
	}
	if c.matrix.DTypes, err = parseDTypes(*dtypes); err != nil {
		return c, err
	}
	if c.matrix.Vocabs, err = parseInts("--vocab", *vocabs, 1, maxVocab); err != nil {
		return c, err
	}
	if c.matrix.Batches, err = parseInts("--batch", *batches, 1, 1<<16); err != nil {
		return c, err
	}
	if *sweep {
		if len(c.matrix.DTypes) != 1 {
			return c, usagef("--split-sweep takes one --dtype, not %d", len(c.matrix.DTypes))
		}
		sw := bench.Sweep{DType: c.matrix.DTypes[0], Vocabs: c.matrix.Vocabs, Batches: c.matrix.Batches}
		if sw.Splits, err = parseInts("--splits", *splits, 1, 1<<16); err != nil {
			return c, err
		}
		c.sweep, c.matrix = &sw, bench.Matrix{}
	}
	for _, f := range []struct {
		name string
		v    int
		min  int
	}{{"--groups", c.timing.Groups, 0}, {"--repeats", c.timing.Repeats, 0}, {"--calls", c.timing.HostCalls, 0}, {"--warmup", c.timing.Warmup, -1}} {
		if f.v < f.min || f.v > 1_000_000 {
			return c, usagef("%s %d: must be between %d and 1000000", f.name, f.v, f.min)
		}
	}
	if c.chart != "" {
		if err := bench.CheckChartPath(c.chart); err != nil {
			return c, usagef("--chart %q: %v", c.chart, err) // before the run, not after it
		}
	}
	return c, c.device.validate()
}

// timingFor fills the zero (and, for Warmup, negative) fields of t from the device's
// default: gpu on a GPU, cpuBenchConfig on the CPU device.
func timingFor(t bench.Config, info runtime.DeviceInfo, gpu bench.Config) bench.Config {
	def := gpu
	if info.Backend == runtime.CPU {
		def = cpuBenchConfig
	}
	if t.Groups == 0 {
		t.Groups = def.Groups
	}
	if t.Repeats == 0 {
		t.Repeats = def.Repeats
	}
	if t.HostCalls == 0 {
		t.HostCalls = def.HostCalls
	}
	if t.Warmup < 0 {
		t.Warmup = def.Warmup
	}
	return t
}

// benchReport is what `gumbel bench --json` prints.
type benchReport struct {
	// Mode is matrix, features or split-sweep.
	Mode            string              `json:"mode"`
	Backend         string              `json:"backend"`
	Device          string              `json:"device"`
	Arch            string              `json:"arch"`
	Multiprocessors int                 `json:"multiprocessors"`
	Config          bench.Config        `json:"config"`
	Measurements    []bench.Measurement `json:"measurements"`
	// Peers are the --compare files' measurements.
	Peers []bench.Measurement `json:"peers,omitempty"`
}

func runBench(e env, args []string) error {
	cfg, err := parseBenchFlags(args, e.stderr)
	if err != nil {
		return err
	}
	// The peer files are read first, so that a bad one fails before minutes of measuring.
	var peers []bench.Measurement
	for _, f := range cfg.compare {
		ms, err := bench.LoadMeasurements(f)
		if err != nil {
			return fmt.Errorf("--compare: %w", err)
		}
		peers = append(peers, ms...)
	}
	dev, err := cfg.device.open()
	if err != nil {
		return err
	}
	defer dev.Close()
	info := dev.Info()
	gpuTiming := bench.DefaultConfig
	if cfg.sweep != nil {
		gpuTiming = bench.SweepConfig
	}
	timing := timingFor(cfg.timing, info, gpuTiming)
	fmt.Fprintln(e.stderr, cfg.device.choice(dev))

	ms, err := measure(e, dev, cfg, timing)
	if err != nil {
		return err
	}
	if cfg.chart != "" {
		if err := bench.Chart(slices.Concat(ms, peers), cfg.chart); err != nil {
			return err
		}
		fmt.Fprintf(e.stderr, "wrote %s\n", cfg.chart)
	}
	report := benchReport{
		Mode: cfg.name(), Backend: string(info.Backend), Device: info.Name, Arch: info.Arch, Multiprocessors: info.Multiprocessors,
		Config: timing, Measurements: ms, Peers: peers,
	}
	js, err := json.MarshalIndent(report, "", "  ")
	if err != nil {
		return err
	}
	js = append(js, '\n')
	md := fmt.Sprintf("Device: %s (%s, %s, %d SMs); %d groups of %d launches, %d host calls, %d warm-up calls per point\n",
		info.Name, info.Backend, info.Arch, info.Multiprocessors, timing.Groups, timing.Repeats, timing.HostCalls, timing.Warmup)
	switch {
	case cfg.sweep != nil:
		md += bench.SweepMarkdown(ms) + "\n"
	case cfg.features:
		md += bench.FeatureMarkdown(ms) + "\n"
	default:
		md += bench.Markdown(ms) + "\n"
	}
	if cfg.sweep == nil {
		if t := bench.BitmaskMarkdown(ms); t != "" {
			md += t + "\n"
		}
	}
	if cfg.compare != nil {
		md += "\n" + bench.Compare(ms, peers) + "\n"
	}
	if cfg.out != "" {
		if err := writeResults(cfg.out, cfg.name(), js, md); err != nil {
			return err
		}
		fmt.Fprintf(e.stderr, "wrote %s and %s\n", filepath.Join(cfg.out, cfg.name()+".json"), filepath.Join(cfg.out, cfg.name()+".md"))
	}
	if cfg.asJSON {
		_, err = e.stdout.Write(js)
		return err
	}
	_, err = io.WriteString(e.stdout, md)
	return err
}

// measure runs the matrix or the sweep of cfg on dev, showing progress on e.stderr.
func measure(e env, dev runtime.Device, cfg benchConfig, timing bench.Config) ([]bench.Measurement, error) {
	mx := cfg.matrix
	total := len(mx.Routes) * len(mx.DTypes) * len(mx.Vocabs) * len(mx.Batches)
	if cfg.sweep != nil {
		total = len(cfg.sweep.Vocabs) * len(cfg.sweep.Batches) * len(cfg.sweep.Splits)
	}
	prog := newProgress(e.stderr, int64(total))
	defer prog.close()
	show := func(done, total int, m bench.Measurement) {
		label := fmt.Sprintf("%s %s V=%d B=%d", m.Route, m.DTypeName, m.Vocab, m.Batch)
		if cfg.sweep != nil {
			label += fmt.Sprintf(" S=%d", m.BlocksPerRow)
		}
		prog.start(done-1, total, label)
		prog.set(int64(done))
		prog.finished(fmt.Sprintf("device %s, host %s", formatMicros(m.DeviceUs), formatMicros(m.HostUs)))
	}
	if cfg.sweep != nil {
		return cfg.sweep.Run(dev, timing, show)
	}
	return mx.Run(dev, timing, show)
}

// writeResults writes a run's JSON report and markdown tables to dir/name.json and
// dir/name.md, making dir if needed.
func writeResults(dir, name string, js []byte, md string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".json"), js, 0o644); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".md"), []byte(md), 0o644); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	return nil
}

// The names --route takes for groups of routes: filterRoutesName stands for
// bench.FilterRoutes, bitmaskRoutesName for bench.BitmaskRoutes.
const (
	filterRoutesName  = "filters"
	bitmaskRoutesName = "bitmask"
)

// ownRoutes lists every route --route takes by name: bench.Routes, then the filter,
// feature and bitmask routes not among them, each once.
func ownRoutes() []bench.Route {
	var out []bench.Route
	for _, r := range slices.Concat(bench.Routes, bench.FilterRoutes, bench.FeatureRoutes, bench.BitmaskRoutes) {
		if !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	return out
}

// parseRoutes parses --route: route names, "filters" and "bitmask", in order, each route
// once.
func parseRoutes(s string) ([]bench.Route, error) {
	var out []bench.Route
	for _, f := range splitList(s) {
		rs := []bench.Route{bench.Route(f)}
		switch {
		case f == filterRoutesName:
			rs = bench.FilterRoutes
		case f == bitmaskRoutesName:
			rs = bench.BitmaskRoutes
		case !bench.IsOwn(rs[0]):
			return nil, usagef("--route %q: not one of %s, %s or %s", f, joinRoutes(ownRoutes()), filterRoutesName, bitmaskRoutesName)
		}
		for _, r := range rs {
			if !slices.Contains(out, r) {
				out = append(out, r)
			}
		}
	}
	if out == nil {
		return nil, usagef("--route: empty")
	}
	return out, nil
}

var dtypeNames = []sampler.DType{sampler.Float32, sampler.Float16, sampler.BFloat16}

func parseDTypes(s string) ([]sampler.DType, error) {
	var out []sampler.DType
	for _, f := range splitList(s) {
		i := slices.IndexFunc(dtypeNames, func(d sampler.DType) bool { return d.String() == f })
		if i < 0 {
			return nil, usagef("--dtype %q: not one of %s", f, joinDTypes(dtypeNames))
		}
		out = append(out, dtypeNames[i])
	}
	if out == nil {
		return nil, usagef("--dtype: empty")
	}
	return out, nil
}

func parseInts(flag, s string, lo, hi int) ([]int, error) {
	var out []int
	for _, f := range splitList(s) {
		n, err := strconv.Atoi(f)
		if err != nil || n < lo || n > hi {
			return nil, usagef("%s %q: want whole numbers from %d to %d", flag, f, lo, hi)
		}
		out = append(out, n)
	}
	if out == nil {
		return nil, usagef("%s: empty", flag)
	}
	return out, nil
}

// splitList splits a comma-separated flag value, dropping blanks.
func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func joinRoutes(rs []bench.Route) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = string(r)
	}
	return strings.Join(s, ",")
}

func joinDTypes(ds []sampler.DType) string {
	s := make([]string, len(ds))
	for i, d := range ds {
		s[i] = d.String()
	}
	return strings.Join(s, ",")
}

func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}
