package bench

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gumbel-go/gumbel/sampler"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func meas(route Route, dtype string, vocab, batch int, us float64) Measurement {
	return Measurement{Point: Point{Route: route, Vocab: vocab, Batch: batch}, DTypeName: dtype, DeviceUs: us}
}

// tableRow returns the markdown row that starts with prefix in the first table after a
// heading that starts with heading.
func tableRow(t *testing.T, md, heading, prefix string) []string {
	t.Helper()
	_, after, ok := strings.Cut(md, "\n"+heading)
	require.True(t, ok, "no %s table in\n%s", heading, md)
	_, after, _ = strings.Cut(after, "\n")
	for _, line := range strings.Split(after, "\n") {
		if strings.HasPrefix(line, prefix) {
			cells := strings.Split(strings.Trim(line, "|"), "|")
			for i := range cells {
				cells[i] = strings.TrimSpace(cells[i])
			}
			return cells
		}
		if line != "" && !strings.HasPrefix(line, "|") {
			break
		}
	}
	require.Failf(t, "row not found", "%q in %s table:\n%s", prefix, heading, md)
	return nil
}

func TestCompare(t *testing.T) {
	ours := []Measurement{
		meas(GumbelSplit, "float32", 32768, 1, 4),
		meas(Greedy, "float32", 32768, 1, 2),
		meas(TopKTopP, "float32", 32768, 1, 10),
		meas(Categorical, "float32", 32768, 1, 99), // not a comparison column
		meas(GumbelSplit, "float32", 151936, 64, 50),
		meas(GumbelSplit, "bfloat16", 32768, 1, 3),
	}
	peers := []Measurement{
		meas("torch.argmax", "float32", 32768, 1, 3),
		meas("torch.gumbel-eager", "float32", 32768, 1, 20),
		meas("torch.sort-topk50-topp0.9", "float32", 32768, 1, 250),
		meas("torch.gumbel-eager", "float32", 151936, 64, 125),
		meas("torch.gumbel-eager", "bfloat16", 65536, 8, 7), // no gumbel cell to compare
		meas(GumbelSplit, "float32", 32768, 1, 1000),        // ours in a peer file: ignored
	}
	md := Compare(ours, peers)
	header := "| vocab | batch | gumbel-split | greedy | topk50-topp0.9 | torch.argmax | torch.gumbel-eager | torch.sort-topk50-topp0.9 | " +
		"torch.argmax / gumbel-split | torch.gumbel-eager / gumbel-split | torch.sort-topk50-topp0.9 / topk50-topp0.9 |"
	assert.Contains(t, md, header)
	assert.NotContains(t, md, "categorical")
	assert.Less(t, strings.Index(md, "\nfloat32, device time"), strings.Index(md, "\nbfloat16, device time"), "dtypes in order of appearance")
	assert.NotContains(t, md, "CUDA-graph replay, both sides", "no graph tables without our graph times")

	tests := []struct {
		name, heading, prefix string
		want                  []string
	}{
		{"every column", "float32, device", "| 32768 | 1 |",
			[]string{"32768", "1", "4.00", "2.00", "10.00", "3.00", "20.00", "250.00", "0.75x", "5.00x", "25.00x"}},
		{"missing cells", "float32, device", "| 151936 | 64 |",
			[]string{"151936", "64", "50.00", "–", "–", "–", "125.00", "–", "–", "2.50x", "–"}},
		{"peer only row", "bfloat16, device", "| 65536 | 8 |",
			[]string{"65536", "8", "–", "–", "–", "–", "7.00", "–", "–", "–", "–"}},
		{"rows sorted by vocab", "bfloat16, device", "| 32768 | 1 |",
			[]string{"32768", "1", "3.00", "–", "–", "–", "–", "–", "–", "–", "–"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, tableRow(t, md, tc.heading, tc.prefix))
		})
	}
	_, bf, _ := strings.Cut(md, "\nbfloat16, device")
	assert.Less(t, strings.Index(bf, "| 32768 | 1 |"), strings.Index(bf, "| 65536 | 8 |"))
}

// With our graph-replay times, a second set of tables sets them against the peers'.
func TestCompareGraphTables(t *testing.T) {
	withGraph := func(m Measurement, graphUs float64) Measurement { m.GraphUs = graphUs; return m }
	ours := []Measurement{
		withGraph(meas(GumbelSplit, "float32", 32768, 4, 6), 5),
		withGraph(meas(TopKTopP, "float32", 32768, 4, 12), 0), // not captured
	}
	peers := []Measurement{
		withGraph(meas("torch.exponential-race", "float32", 32768, 4, 15), 15),
		withGraph(meas("torch.sort-topk50-topp0.9", "float32", 32768, 4, 300), 0), // eager fallback
	}
	md := Compare(ours, peers)
	tests := []struct {
		name, heading string
		want          []string
	}{
		{"device time", "float32, device time",
			[]string{"32768", "4", "6.00", "–", "12.00", "15.00", "300.00", "2.50x", "25.00x"}},
		{"graph replay", "float32, CUDA-graph replay, both sides",
			[]string{"32768", "4", "5.00", "–", "–", "15.00", "–", "3.00x", "–"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, tableRow(t, md, tc.heading, "| 32768 | 4 |"))
		})
	}
}

// Each peer is set against the gumbel route with the filter its name names.
func TestPeerBase(t *testing.T) {
	tests := []struct {
		peer Route
		want Route
	}{
		{"flashinfer:sampling_from_logits", GumbelSplit},
		{"flashinfer:softmax+sampling_from_probs", GumbelSplit},
		{"flashinfer:softmax+top_k_top_p", TopKTopP},
		{"flashinfer:softmax+top_k", TopK50},
		{"flashinfer:softmax+top_p", TopP095},
		{"flashinfer:softmax+min_p", MinP},
		{"torch.sort-topk50-topp0.9", TopKTopP},
		{"torch.exponential-race", GumbelSplit},
		{"vllm.Top-P", TopP095},
		{"sglang.minp", MinP},
		// The CPU peers (bench/peers/cpu).
		{"llamacpp:greedy", Greedy},
		{"ollama:greedy", Greedy},
		{"llamacpp:temp+dist", GumbelSplit},
		{"ollama:temp", GumbelSplit},
		{"llamacpp:topk40-topp0.9", TopK40TopP09},
		{"ollama:TOP_K40_TOP_P0.9", TopK40TopP09},
		{"other:top_k=40+top_p=0.9", TopK40TopP09},
		{"other:topk400-topp0.9", TopKTopP}, // k 400, not 40
		{"other:topk40", TopK50},            // top-k alone: the one top-k route
		{"llamacpp:minp0.05", MinP},
		{"ollama:minp0.05", MinP},
		{"torch.argmax", GumbelSplit}, // the floor, set against the sampler
		// Token-bitmask peers: the masked form of the route.
		{"torch.bitmask-exponential-race", GumbelBitmask},
		{"xgrammar:bitmask+greedy", GreedyBitmask},
		{"torch.bitmask-sort-topk50-topp0.9", TopKTopPBitmask},
		{"other:bitmask+minp0.05", MinP}, // no masked min-p route
	}
	for _, tc := range tests {
		t.Run(string(tc.peer), func(t *testing.T) {
			assert.Equal(t, tc.want, peerBase(tc.peer))
		})
	}
}

// The FlashInfer harness's output (bench/peers/flashinfer_peers.cu, written by hand here)
// loads, and each filtered route meets its FlashInfer counterpart in a flashinfer table
// of its own, apart from the torch peers' table.
func TestCompareFlashInfer(t *testing.T) {
	fi, err := LoadMeasurements(filepath.Join("testdata", "flashinfer_peers.json"))
	require.NoError(t, err)
	require.Len(t, fi, 8)
	assert.Equal(t, Measurement{Point: Point{Route: "flashinfer:softmax+top_k_top_p", DType: sampler.Float32, Vocab: 2048, Batch: 1},
		DTypeName: "float32", DeviceUs: 15, GraphUs: 15, Token: 402}, fi[2])

	withGraph := func(m Measurement) Measurement { m.GraphUs = m.DeviceUs / 2; return m }
	ours := []Measurement{
		withGraph(meas(GumbelSplit, "float32", 2048, 1, 4)),
		withGraph(meas(Greedy, "float32", 2048, 1, 2)),
		withGraph(meas(TopKTopP, "float32", 2048, 1, 10)),
		withGraph(meas(TopK50, "float32", 2048, 1, 7)),
		withGraph(meas(TopP095, "float32", 2048, 1, 6.5)),
		withGraph(meas(MinP, "float32", 2048, 1, 5)),
		withGraph(meas(Categorical, "float32", 2048, 1, 8)), // not a comparison column
		withGraph(meas(GumbelSplit, "float32", 2048, 3, 6)),
		withGraph(meas(TopKTopP, "float32", 2048, 3, 11)),
	}
	torch := []Measurement{meas("torch.sort-topk50-topp0.9", "float32", 2048, 1, 250)}
	md := Compare(ours, slices.Concat(torch, fi))

	fiHeader := "| vocab | batch | gumbel-split | greedy | topk50-topp0.9 | topk50 | topp0.95 | minp0.05 | " +
		"flashinfer:sampling_from_logits | flashinfer:softmax+sampling_from_probs | flashinfer:softmax+top_k_top_p | " +
		"flashinfer:softmax+top_k | flashinfer:softmax+top_p | flashinfer:softmax+min_p | " +
		"flashinfer:sampling_from_logits / gumbel-split | flashinfer:softmax+sampling_from_probs / gumbel-split | " +
		"flashinfer:softmax+top_k_top_p / topk50-topp0.9 | flashinfer:softmax+top_k / topk50 | " +
		"flashinfer:softmax+top_p / topp0.95 | flashinfer:softmax+min_p / minp0.05 |"
	assert.Contains(t, md, fiHeader)
	assert.Contains(t, md, "| vocab | batch | gumbel-split | greedy | topk50-topp0.9 | torch.sort-topk50-topp0.9 | "+
		"torch.sort-topk50-topp0.9 / topk50-topp0.9 |\n", "the torch table has no FlashInfer columns nor the routes only they need")
	assert.NotContains(t, md, "categorical")
	assert.Less(t, strings.Index(md, ", torch peers\n"), strings.Index(md, ", flashinfer peers\n"), "families in order of appearance")

	tests := []struct {
		name, heading, prefix string
		want                  []string
	}{
		{"device time", "float32, device time (gumbel: back-to-back launches; peers: their own timing, CUDA-graph replay for GPU peers, wall time for CPU peers), flashinfer peers", "| 2048 | 1 |",
			[]string{"2048", "1", "4.00", "2.00", "10.00", "7.00", "6.50", "5.00", "20.00", "12.00", "15.00", "14.00", "13.00", "12.50",
				"5.00x", "3.00x", "1.50x", "2.00x", "2.00x", "2.50x"}},
		{"device time, missing peers", "float32, device time (gumbel: back-to-back launches; peers: their own timing, CUDA-graph replay for GPU peers, wall time for CPU peers), flashinfer peers", "| 2048 | 3 |",
			[]string{"2048", "3", "6.00", "–", "11.00", "–", "–", "–", "21.00", "–", "16.50", "–", "–", "–",
				"3.50x", "–", "1.50x", "–", "–", "–"}},
		{"graph replay", "float32, CUDA-graph replay, both sides, flashinfer peers", "| 2048 | 1 |",
			[]string{"2048", "1", "2.00", "1.00", "5.00", "3.50", "3.25", "2.50", "20.00", "12.00", "15.00", "14.00", "13.00", "12.50",
				"10.00x", "6.00x", "3.00x", "4.00x", "4.00x", "5.00x"}},
		{"torch table", "float32, device time (gumbel: back-to-back launches; peers: their own timing, CUDA-graph replay for GPU peers, wall time for CPU peers), torch peers", "| 2048 | 1 |",
			[]string{"2048", "1", "4.00", "2.00", "10.00", "250.00", "25.00x"}},
		{"torch table: a row of ours alone", "float32, device time (gumbel: back-to-back launches; peers: their own timing, CUDA-graph replay for GPU peers, wall time for CPU peers), torch peers", "| 2048 | 3 |",
			[]string{"2048", "3", "6.00", "–", "11.00", "–", "–"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, tableRow(t, md, tc.heading, tc.prefix))
		})
	}
}

// A family's table is left out for a dtype it has no measurements of; a dtype without
// peers gets a table of gumbel's routes alone.
func TestCompareFamiliesByDType(t *testing.T) {
	ours := []Measurement{meas(GumbelSplit, "float32", 4096, 1, 4), meas(GumbelSplit, "bfloat16", 4096, 1, 3), meas(GumbelSplit, "float16", 4096, 1, 5)}
	peers := []Measurement{
		meas("torch.gumbel-eager", "float32", 4096, 1, 20),
		meas("torch.gumbel-eager", "bfloat16", 4096, 1, 9),
		meas("flashinfer:sampling_from_logits", "float32", 4096, 1, 8),
	}
	md := Compare(ours, peers)
	for _, tc := range []struct {
		heading string
		want    bool
	}{
		{"\nfloat32, device time (gumbel: back-to-back launches; peers: their own timing, CUDA-graph replay for GPU peers, wall time for CPU peers), torch peers\n", true},
		{"\nfloat32, device time (gumbel: back-to-back launches; peers: their own timing, CUDA-graph replay for GPU peers, wall time for CPU peers), flashinfer peers\n", true},
		{"\nbfloat16, device time (gumbel: back-to-back launches; peers: their own timing, CUDA-graph replay for GPU peers, wall time for CPU peers), torch peers\n", true},
		{"\nbfloat16, device time (gumbel: back-to-back launches; peers: their own timing, CUDA-graph replay for GPU peers, wall time for CPU peers), flashinfer peers\n", false},
		{"\nfloat16, device time (gumbel: back-to-back launches; peers: their own timing, CUDA-graph replay for GPU peers, wall time for CPU peers)\n", true},
	} {
		assert.Equal(t, tc.want, strings.Contains(md, tc.heading), "%q in\n%s", tc.heading, md)
	}
	assert.Equal(t, []string{"4096", "1", "5.00", "–"}, // no topk50-topp0.9 column: not measured
		tableRow(t, md, "float16, device time", "| 4096 | 1 |"))
}

func TestCompareEmpty(t *testing.T) {
	md := Compare(nil, nil)
	assert.NotContains(t, md, "| vocab |", "no tables without measurements")
}

func TestLoadMeasurements(t *testing.T) {
	tests := []struct {
		name, body string
		want       []Measurement // nil with wantErr
		wantErr    string
	}{
		{
			name: "peer report object",
			body: `{"backend": "torch", "notes": [], "measurements": [
				{"route": "torch.argmax", "dtype": "bfloat16", "vocab": 65536, "batch": 4, "device_us": 7.5, "graph_us": 7.5,
				 "host_us": 30.25, "allocs_per_call": 0, "token": 17, "graph": true, "eager_device_us": 9.0, "error": null}]}`,
			want: []Measurement{{Point: Point{Route: "torch.argmax", DType: sampler.BFloat16, Vocab: 65536, Batch: 4},
				DTypeName: "bfloat16", DeviceUs: 7.5, GraphUs: 7.5, HostUs: 30.25, Token: 17}},
		},
		{
			name: "bare array",
			body: `[{"route": "gumbel-split", "dtype": "float16", "vocab": 10, "batch": 1, "device_us": 1, "host_us": 2, "allocs_per_call": 0.5, "token": 3}]`,
			want: []Measurement{{Point: Point{Route: GumbelSplit, DType: sampler.Float16, Vocab: 10, Batch: 1},
				DTypeName: "float16", DeviceUs: 1, HostUs: 2, AllocsPerCall: 0.5, Token: 3}},
		},
		{name: "empty array", body: `[]`, want: []Measurement{}},
		{name: "not json", body: `device_us,1`, wantErr: "invalid character"},
		{name: "object without measurements", body: `{"backend": "torch"}`, wantErr: `no "measurements" array`},
		{name: "unknown dtype", body: `[{"route": "x", "dtype": "int8", "vocab": 1, "batch": 1}]`, wantErr: `dtype "int8"`},
		{name: "no route", body: `[{"dtype": "float32", "vocab": 1, "batch": 1}]`, wantErr: "no route"},
		{name: "zero vocab", body: `[{"route": "x", "dtype": "float32", "vocab": 0, "batch": 1}]`, wantErr: "must be positive"},
		{name: "negative time", body: `[{"route": "x", "dtype": "float32", "vocab": 1, "batch": 1, "device_us": -1}]`, wantErr: "non-negative"},
		{name: "NaN time", body: `[{"route": "x", "dtype": "float32", "vocab": 1, "batch": 1, "device_us": NaN}]`, wantErr: "invalid character"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "m.json")
			require.NoError(t, os.WriteFile(path, []byte(tc.body), 0o644))
			got, err := LoadMeasurements(path)
			if tc.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.wantErr)
				assert.Contains(t, err.Error(), path, "the error names the file")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
	_, err := LoadMeasurements(filepath.Join(t.TempDir(), "missing.json"))
	assert.ErrorIs(t, err, os.ErrNotExist)
}

func TestChart(t *testing.T) {
	var grid []Measurement // two dtypes by two batches, three routes in each panel
	for _, dt := range []string{"float32", "bfloat16"} {
		for _, b := range []int{1, 64} {
			for i, v := range []int{32768, 65536, 151936} {
				grid = append(grid,
					meas(GumbelSplit, dt, v, b, float64(3+i*b)),
					meas(Greedy, dt, v, b, float64(2+i)),
					meas("torch.gumbel-eager", dt, v, b, float64(20+10*i*b)))
			}
		}
	}
	grid = append(grid, meas("torch.failed", "float32", 32768, 1, 0)) // no time: left out
	tests := []struct {
		name string
		ms   []Measurement
		// lines is the number of route lines over all panels, legend is the routes.
		lines  int
		legend []string
		dashed int
		want   []string
	}{
		{name: "grid", ms: grid, lines: 4 * 3, legend: []string{"gumbel-split", "greedy", "torch.gumbel-eager"}, dashed: 4 + 1,
			want: []string{"float32, batch 64", "bfloat16, batch 1", "device time per step (µs)", "vocabulary size"}},
		{name: "one point: an own route solid", ms: []Measurement{meas(GumbelSplit, "float16", 2048, 3, 7.5)}, lines: 1,
			legend: []string{"gumbel-split"}, want: []string{"float16, batch 3", ">1</text>", ">10</text>"}},
		{name: "a peer missing from a panel", lines: 3, legend: []string{"greedy", "a&b<peer>"}, dashed: 2,
			ms:   []Measurement{meas(Greedy, "float32", 1000, 1, 0.5), meas(Greedy, "float32", 1000, 2, 0.5), meas("a&b<peer>", "float32", 1000, 2, 900)},
			want: []string{"a&amp;b&lt;peer&gt;", ">0.1</text>", ">1000</text>"}},
		{name: "a panel with no measurement", lines: 2, legend: []string{"greedy"},
			ms:   []Measurement{meas(Greedy, "float32", 1000, 1, 5), meas(Greedy, "bfloat16", 1000, 2, 5)},
			want: []string{"float32, batch 2", ">no measurement</text>", "bfloat16, batch 1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "chart.svg")
			require.NoError(t, Chart(tc.ms, path))
			data, err := os.ReadFile(path)
			require.NoError(t, err)
			svg := string(data)
			assert.True(t, strings.HasPrefix(svg, "<svg "), svg[:min(len(svg), 100)])
			assert.True(t, strings.HasSuffix(svg, "</svg>\n"))
			// A line per route and panel, a sample line per legend entry.
			assert.Equal(t, tc.lines+len(tc.legend), strings.Count(svg, "<polyline"))
			for _, name := range tc.legend {
				assert.Contains(t, svg, ">"+xmlText.Replace(name)+"</text>", "the legend names %s", name)
			}
			for _, want := range tc.want {
				assert.Contains(t, svg, want)
			}
			assert.NotContains(t, svg, "torch.failed")
			assert.NotContains(t, svg, "NaN")
			assert.NotContains(t, svg, "Inf")
			assert.Equal(t, strings.Count(svg, "<text"), strings.Count(svg, "</text>"))
			assert.Equal(t, tc.dashed, strings.Count(svg, `stroke-dasharray="6 3"`), "the peers' lines, in the panels and the legend, are dashed")
		})
	}
}

func TestChartErrors(t *testing.T) {
	dir := t.TempDir()
	ok := []Measurement{meas(GumbelSplit, "float32", 32768, 1, 3)}
	tests := []struct {
		name    string
		ms      []Measurement
		path    string
		wantErr string
	}{
		{"no measurements", nil, filepath.Join(dir, "a.svg"), "no measurement"},
		{"only zero times", []Measurement{meas(Greedy, "float32", 1, 1, 0)}, filepath.Join(dir, "b.svg"), "no measurement"},
		{"negative time", []Measurement{meas(Greedy, "float32", 1, 1, -2)}, filepath.Join(dir, "b.svg"), "no measurement"},
		{"no extension", ok, filepath.Join(dir, "chart"), "only .svg charts are written"},
		{"png", ok, filepath.Join(dir, "c.png"), "only .svg charts are written"},
		{"missing folder", ok, filepath.Join(dir, "nope", "d.svg"), "nope"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Chart(tc.ms, tc.path)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.wantErr)
			assert.Contains(t, err.Error(), tc.path, "the error names the file")
			assert.Equal(t, strings.Contains(tc.wantErr, ".svg"), errors.Is(err, ErrChartFormat))
			assert.Equal(t, errors.Is(err, ErrChartFormat), CheckChartPath(tc.path) != nil, "CheckChartPath agrees")
		})
	}
}

// The CPU peers' families each get a table with the greedy, topk40-topp0.9 and minp0.05
// columns their routes are set against, and no topk50-topp0.9 column: gumbel did not
// measure it and no peer is set against it.
func TestCompareCPUPeers(t *testing.T) {
	ours := []Measurement{
		meas(Greedy, "float32", 151936, 1, 200),
		meas(GumbelSplit, "float32", 151936, 1, 400),
		meas(TopK40TopP09, "float32", 151936, 1, 500),
		meas(MinP, "float32", 151936, 1, 800),
	}
	peers := []Measurement{
		meas("llamacpp:greedy", "float32", 151936, 1, 100),
		meas("llamacpp:temp+dist", "float32", 151936, 1, 1200),
		meas("llamacpp:topk40-topp0.9", "float32", 151936, 1, 100),
		meas("llamacpp:minp0.05", "float32", 151936, 1, 200),
		meas("ollama:greedy", "float32", 151936, 1, 100),
		meas("ollama:temp", "float32", 151936, 1, 2000),
		meas("ollama:topk40-topp0.9", "float32", 151936, 1, 150),
		meas("ollama:minp0.05", "float32", 151936, 1, 2400),
	}
	md := Compare(ours, peers)
	tests := []struct {
		family string
		want   []string
	}{
		{"llamacpp", []string{"151936", "1", "400.00", "200.00", "500.00", "800.00",
			"100.00", "1200.00", "100.00", "200.00", "0.50x", "3.00x", "0.20x", "0.25x"}},
		{"ollama", []string{"151936", "1", "400.00", "200.00", "500.00", "800.00",
			"100.00", "2000.00", "150.00", "2400.00", "0.50x", "5.00x", "0.30x", "3.00x"}},
	}
	for _, tc := range tests {
		t.Run(tc.family, func(t *testing.T) {
			f := tc.family
			assert.Contains(t, md, ", "+f+" peers\n\n| vocab | batch | gumbel-split | greedy | topk40-topp0.9 | minp0.05 | "+
				f+":greedy | ")
			assert.Contains(t, md, " | "+f+":greedy / greedy | ")
			assert.Contains(t, md, " / gumbel-split | "+f+":topk40-topp0.9 / topk40-topp0.9 | "+f+":minp0.05 / minp0.05 |\n")
			_, after, ok := strings.Cut(md, ", "+f+" peers")
			require.True(t, ok)
			assert.Equal(t, tc.want, tableRow(t, after, "|", "| 151936 | 1 |"))
		})
	}
}

// The bitmask peer goes against the fused masked step, with the unfused form beside it
// where it was measured, next to the unmasked peers and their own counterparts.
func TestCompareBitmaskPeer(t *testing.T) {
	ours := []Measurement{
		meas(GumbelSplit, "float32", 151936, 8, 10),
		meas(Greedy, "float32", 151936, 8, 5),
		meas(GumbelBitmask, "float32", 151936, 8, 10.4),
		meas(GumbelBitmaskUnfused, "float32", 151936, 8, 16),
		meas(GreedyBitmask, "float32", 151936, 8, 5.2), // no greedy bitmask peer: no column
		meas(CategoricalBitmask, "float32", 151936, 8, 50),
	}
	peers := []Measurement{
		meas("torch.exponential-race", "float32", 151936, 8, 40),
		meas("torch.bitmask-exponential-race", "float32", 151936, 8, 104),
	}
	md := Compare(ours, peers)
	assert.Contains(t, md, "| vocab | batch | gumbel-split | greedy | gumbel+bitmask | gumbel+bitmask-unfused | torch.exponential-race | "+
		"torch.bitmask-exponential-race | torch.exponential-race / gumbel-split | torch.bitmask-exponential-race / gumbel+bitmask |")
	assert.Equal(t, []string{"151936", "8", "10.00", "5.00", "10.40", "16.00", "40.00", "104.00", "4.00x", "10.00x"},
		tableRow(t, md, "float32, device time", "| 151936 | 8 |"))

	md = Compare(ours[:3], peers)
	assert.Contains(t, md, "| gumbel+bitmask | torch.exponential-race |", "no unfused column where it was not measured")
	md = Compare(ours, peers[:1])
	assert.NotContains(t, md, "bitmask", "no masked column without a bitmask peer")
}
