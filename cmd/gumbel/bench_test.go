package main

import (
	"encoding/json"
	"io"
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
		timing bench.Config
		// compare and chart are the --compare and --chart files.
		compare, chart string
		wantErr        string
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
			matrix: bench.FullMatrix, timing: bench.Config{Warmup: -1}, compare: "peers.json", chart: "out.svg"},
		{name: "chart without extension", args: []string{"--chart", "out"}, wantErr: `--chart "out": no file extension`},
		{name: "unknown route", args: []string{"--route", "greedy,fast"}, wantErr: `--route "fast": not one of greedy,categorical`},
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
			assert.Equal(t, tc.timing, got.timing)
			assert.Equal(t, tc.compare, got.compare)
			assert.Equal(t, tc.chart, got.chart)
		})
	}
}

func TestTimingFor(t *testing.T) {
	cpu := runtime.DeviceInfo{Backend: runtime.CPU}
	gpu := runtime.DeviceInfo{Backend: runtime.CUDA}
	assert.Equal(t, cpuBenchConfig, timingFor(bench.Config{Warmup: -1}, cpu))
	assert.Equal(t, bench.DefaultConfig, timingFor(bench.Config{Warmup: -1}, gpu))
	assert.Equal(t, bench.Config{Groups: 7, Repeats: bench.DefaultConfig.Repeats, HostCalls: bench.DefaultConfig.HostCalls, Warmup: 0},
		timingFor(bench.Config{Groups: 7, Warmup: 0}, gpu), "set fields are kept")
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
