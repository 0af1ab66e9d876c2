package main

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/bench"
	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/sampler"
)

func TestParseBenchFlags(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		matrix bench.Matrix
		// sweep is the split sweep, nil for a matrix.
		sweep  *bench.Sweep
		timing bench.Config
		// compare are the --compare files, chart the --chart file, out the --out folder.
		compare    []string
		chart, out string
		wantErr    string
	}{
		{name: "defaults: the full matrix, the device's timing", matrix: bench.FullMatrix, timing: bench.Config{Warmup: -1}},
		{
			name: "every flag",
			args: []string{"--route", "greedy, gumbel-split", "--dtype", "float16", "--vocab", "1000,2000", "--batch", "3",
				"--groups", "2", "--repeats", "4", "--calls", "5", "--warmup", "0", "--json", "--backend", "cpu"},
			matrix: bench.Matrix{Routes: []bench.Route{bench.Greedy, bench.GumbelSplit}, DTypes: []sampler.DType{sampler.Float16}, Vocabs: []int{1000, 2000}, Batches: []int{3}},
			timing: bench.Config{Groups: 2, Repeats: 4, HostCalls: 5, Warmup: 0},
		},
		{name: "compare and chart", args: []string{"--compare", "peers.json", "--chart", "out.svg"},
			matrix: bench.FullMatrix, timing: bench.Config{Warmup: -1}, compare: []string{"peers.json"}, chart: "out.svg"},
		{name: "compare: a list and the flag repeated", args: []string{"--compare", "peers.json, fi.json", "--compare", "more.json"},
			matrix: bench.FullMatrix, timing: bench.Config{Warmup: -1}, compare: []string{"peers.json", "fi.json", "more.json"}},
		{name: "compare: no file", args: []string{"--compare", " , "}, wantErr: "no file named"},
		{name: "filter routes", args: []string{"--route", "filters"},
			matrix: withRoutes(bench.FilterRoutes...), timing: bench.Config{Warmup: -1}},
		{name: "filter routes alone", args: []string{"--route", "topk50,topp0.95"},
			matrix: withRoutes(bench.TopK50, bench.TopP095), timing: bench.Config{Warmup: -1}},
		{name: "filters after a route: each route once", args: []string{"--route", "greedy,minp0.05,filters,greedy"},
			matrix: withRoutes(bench.Greedy, bench.MinP, bench.TopKTopP, bench.TopK40TopP09, bench.TopK50, bench.TopP095, bench.GumbelSplit, bench.Categorical),
			timing: bench.Config{Warmup: -1}},
		{name: "feature route", args: []string{"--route", "gumbel+logprobs"},
			matrix: withRoutes(bench.GumbelLogprobs), timing: bench.Config{Warmup: -1}},
		{name: "features: the feature matrix", args: []string{"--features", "--out", "results"},
			matrix: bench.Matrix{Routes: bench.FeatureMatrix.Routes, DTypes: bench.FullMatrix.DTypes, Vocabs: bench.FeatureMatrix.Vocabs, Batches: bench.FeatureMatrix.Batches},
			timing: bench.Config{Warmup: -1}, out: "results"},
		{name: "split sweep: its own defaults", args: []string{"--split-sweep"}, sweep: &bench.DefaultSweep, timing: bench.Config{Warmup: -1}},
		{name: "split sweep, every list given", args: []string{"--split-sweep", "--dtype", "bfloat16", "--vocab", "4096", "--batch", "1,2", "--splits", "1,8"},
			sweep: &bench.Sweep{DType: sampler.BFloat16, Vocabs: []int{4096}, Batches: []int{1, 2}, Splits: []int{1, 8}}, timing: bench.Config{Warmup: -1}},
		{name: "split sweep and features", args: []string{"--split-sweep", "--features"}, wantErr: "--features and --split-sweep: choose one"},
		{name: "split sweep of two dtypes", args: []string{"--split-sweep", "--dtype", "float32,bfloat16"}, wantErr: "--split-sweep takes one --dtype, not 2"},
		{name: "split sweep of a route", args: []string{"--split-sweep", "--route", "greedy"}, wantErr: "--route does not apply to --split-sweep"},
		{name: "split sweep compared", args: []string{"--split-sweep", "--compare", "peers.json"}, wantErr: "--compare does not apply to --split-sweep"},
		{name: "splits without the sweep", args: []string{"--splits", "4"}, wantErr: "--splits needs --split-sweep"},
		{name: "zero splits", args: []string{"--split-sweep", "--splits", "0"}, wantErr: `--splits "0"`},
		{name: "chart without extension", args: []string{"--chart", "out"}, wantErr: `--chart "out": only .svg charts are written`},
		{name: "chart as png", args: []string{"--chart", "out.png"}, wantErr: `--chart "out.png": only .svg charts are written`},
		{name: "chart: the extension in capitals", args: []string{"--chart", "OUT.SVG"},
			matrix: bench.FullMatrix, timing: bench.Config{Warmup: -1}, chart: "OUT.SVG"},
		{name: "unknown route", args: []string{"--route", "greedy,fast"}, wantErr: `--route "fast": not one of greedy,categorical`},
		{name: "unknown route: the list", args: []string{"--route", "topk40"}, wantErr: `minp0.05,topk40-topp0.9,topk50,topp0.95,gumbel+logprobs`},
		{name: "unknown route: the keywords", args: []string{"--route", "filter"}, wantErr: `gumbel-batch-launch+bitmask, filters or bitmask`},
		{name: "bitmask routes", args: []string{"--route", "bitmask", "--vocab", "151936", "--batch", "1,8,64", "--dtype", "float32"},
			matrix: bench.Matrix{Routes: bench.BitmaskRoutes, DTypes: []sampler.DType{sampler.Float32}, Vocabs: []int{151936}, Batches: []int{1, 8, 64}},
			timing: bench.Config{Warmup: -1}},
		{name: "bitmask after its routes: each route once", args: []string{"--route", "gumbel-split,gumbel+bitmask-unfused,bitmask"},
			matrix: withRoutes(slices.Concat([]bench.Route{bench.GumbelSplit, bench.GumbelBitmaskUnfused},
				slices.DeleteFunc(slices.Clone(bench.BitmaskRoutes), func(r bench.Route) bool { return r == bench.GumbelSplit || r == bench.GumbelBitmaskUnfused }))...),
			timing: bench.Config{Warmup: -1}},
		{name: "bitmask route", args: []string{"--route", "topk50-topp0.9+bitmask"},
			matrix: withRoutes(bench.TopKTopPBitmask), timing: bench.Config{Warmup: -1}},
		{name: "unknown dtype", args: []string{"--dtype", "float8"}, wantErr: `--dtype "float8": not one of float32,float16,bfloat16`},
		{name: "zero vocab", args: []string{"--vocab", "0"}, wantErr: `--vocab "0": want whole numbers from 1 to 2147483647`},
		{name: "vocab too large", args: []string{"--vocab", "2147483648"}, wantErr: `--vocab "2147483648"`},
		{name: "batch not a number", args: []string{"--batch", "4,x"}, wantErr: `--batch "x"`},
		{name: "empty batch list", args: []string{"--batch", ","}, wantErr: "--batch: empty"},
		{name: "negative groups", args: []string{"--groups", "-1"}, wantErr: "--groups -1: must be between 0 and 1000000"},
		{name: "warmup below -1", args: []string{"--warmup", "-2"}, wantErr: "--warmup -2"},
		{name: "stray argument", args: []string{"now"}, wantErr: `unexpected argument "now"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseBenchFlags(tc.args, io.Discard)
			if tc.wantErr != "" {
				require.Error(t, err)
				assert.ErrorAs(t, err, new(usageError))
				assert.Contains(t, err.Error(), tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.matrix, got.matrix)
			assert.Equal(t, tc.sweep, got.sweep)
			assert.Equal(t, tc.timing, got.timing)
			assert.Equal(t, tc.compare, got.compare)
			assert.Equal(t, tc.chart, got.chart)
			assert.Equal(t, tc.out, got.out)
		})
	}
}

// withRoutes is the full matrix with other routes.
func withRoutes(rs ...bench.Route) bench.Matrix {
	mx := bench.FullMatrix
	mx.Routes = rs
	return mx
}

func TestTimingFor(t *testing.T) {
	cpu := runtime.DeviceInfo{Backend: runtime.CPU}
	gpu := runtime.DeviceInfo{Backend: runtime.CUDA}
	assert.Equal(t, cpuBenchConfig, timingFor(bench.Config{Warmup: -1}, cpu, bench.DefaultConfig))
	assert.Equal(t, cpuBenchConfig, timingFor(bench.Config{Warmup: -1}, cpu, bench.SweepConfig))
	assert.Equal(t, bench.DefaultConfig, timingFor(bench.Config{Warmup: -1}, gpu, bench.DefaultConfig))
	assert.Equal(t, bench.SweepConfig, timingFor(bench.Config{Warmup: -1}, gpu, bench.SweepConfig))
	assert.Equal(t, bench.Config{Groups: 7, Repeats: bench.DefaultConfig.Repeats, HostCalls: bench.DefaultConfig.HostCalls, Warmup: 0},
		timingFor(bench.Config{Groups: 7, Warmup: 0}, gpu, bench.DefaultConfig), "set fields are kept")
}

// tinyBench is a matrix small enough for the CPU device in a unit test.
var tinyBench = []string{"bench", "--backend", "cpu", "--route", "greedy,gumbel-split,topk50-topp0.9", "--dtype", "float32,bfloat16",
	"--vocab", "2048", "--batch", "1,3", "--groups", "2", "--repeats", "2", "--calls", "3", "--warmup", "1"}

func TestBenchMarkdownOnCPU(t *testing.T) {
	code, stdout, stderr := runCLI(tinyBench...)
	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	assert.Contains(t, stdout, "(cpu, go, ")
	assert.Contains(t, stdout, "2 groups of 2 launches, 3 host calls, 1 warm-up calls per point")
	assert.Contains(t, stdout, "| dtype | vocab | batch | greedy | gumbel-split | topk50-topp0.9 |")
	for _, cell := range []string{"| float32 | 2048 | 1 |", "| float32 | 2048 | 3 |", "| bfloat16 | 2048 | 1 |", "| bfloat16 | 2048 | 3 |"} {
		assert.Contains(t, stdout, cell)
	}
	assert.Contains(t, stderr, "[12/12] topk50-topp0.9 bfloat16 V=2048 B=3 ... device ")
}

func TestBenchJSONOnCPU(t *testing.T) {
	code, stdout, stderr := runCLI(append(tinyBench, "--json")...)
	require.Equal(t, exitOK, code, stderr)
	var rep struct {
		Backend      string `json:"backend"`
		Config       bench.Config
		Measurements []struct {
			Route    string  `json:"route"`
			DType    string  `json:"dtype"`
			Vocab    int     `json:"vocab"`
			Batch    int     `json:"batch"`
			DeviceUs float64 `json:"device_us"`
			HostUs   float64 `json:"host_us"`
			Token    int32   `json:"token"`
		} `json:"measurements"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep), stdout)
	assert.Equal(t, "cpu", rep.Backend)
	assert.Equal(t, bench.Config{Groups: 2, Repeats: 2, HostCalls: 3, Warmup: 1}, rep.Config)
	require.Len(t, rep.Measurements, 3*2*2)
	for _, m := range rep.Measurements {
		assert.Positive(t, m.DeviceUs, "%+v", m)
		assert.Positive(t, m.HostUs, "%+v", m)
		assert.True(t, m.Token >= 0 && m.Token < 2048, "%+v", m)
		assert.Equal(t, 2048, m.Vocab)
	}
}

// The split sweep on the CPU device: a table of each split's time with the fastest
// split, and with --out the same tables and the JSON report written to a folder.
func TestBenchSplitSweepOnCPU(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "results")
	code, stdout, stderr := runCLI("bench", "--backend", "cpu", "--split-sweep", "--vocab", "4096", "--batch", "1,2", "--splits", "1,2",
		"--groups", "2", "--repeats", "2", "--calls", "1", "--warmup", "1", "--out", dir)
	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	assert.Contains(t, stdout, "| vocab | batch | S=1 | S=2 | best |")
	assert.Regexp(t, `\| 4096 \| 2 \| [0-9.]+ \| [0-9.]+ \| S=[12] \|`, stdout)
	assert.Contains(t, stderr, "[4/4] gumbel-split float32 V=4096 B=2 S=2 ... device ")
	md, err := os.ReadFile(filepath.Join(dir, "split-sweep.md"))
	require.NoError(t, err)
	assert.Equal(t, stdout, string(md), "the markdown file holds what was printed")
	js, err := os.ReadFile(filepath.Join(dir, "split-sweep.json"))
	require.NoError(t, err)
	var rep benchReport
	require.NoError(t, json.Unmarshal(js, &rep))
	assert.Equal(t, "split-sweep", rep.Mode)
	require.Len(t, rep.Measurements, 4)
	for i, m := range rep.Measurements {
		assert.Equal(t, 1+i%2, m.BlocksPerRow, "%+v", m)
		assert.Positive(t, m.DeviceUs, "%+v", m)
	}
}

// --out writes what --json prints, whichever of the two stdout shows.
func TestBenchOutOnCPU(t *testing.T) {
	dir := t.TempDir()
	code, stdout, stderr := runCLI(append(tinyBench, "--json", "--out", dir)...)
	require.Equal(t, exitOK, code, stderr)
	js, err := os.ReadFile(filepath.Join(dir, "matrix.json"))
	require.NoError(t, err)
	assert.JSONEq(t, stdout, string(js))
	md, err := os.ReadFile(filepath.Join(dir, "matrix.md"))
	require.NoError(t, err)
	assert.Contains(t, string(md), "| dtype | vocab | batch | greedy | gumbel-split | topk50-topp0.9 |")
	assert.Contains(t, stderr, "wrote "+filepath.Join(dir, "matrix.json"))
}
