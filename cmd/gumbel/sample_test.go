package main

import (
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/half"
	"github.com/gumbel-go/gumbel/tests/statistical"
)

// countsJSON is the shape `gumbel sample --counts` promises.
type countsJSON struct {
	Backend string `json:"backend"`
	Vocab   int    `json:"vocab"`
	Draws   int    `json:"draws"`
	Rows    []struct {
		Counts map[string]int `json:"counts"`
		Error  string         `json:"error"`
	} `json:"rows"`
}

// sampleCounts runs `gumbel sample --counts` on a backend ("auto" for the default).
func sampleCounts(t *testing.T, backend string, args ...string) countsJSON {
	t.Helper()
	code, stdout, stderr := runCLI(append([]string{"sample", "--backend", backend, "--counts"}, args...)...)
	require.Equal(t, exitOK, code, stderr)
	var got countsJSON
	require.NoError(t, json.Unmarshal([]byte(stdout), &got), stdout)
	return got
}

// softmax returns softmax(x / t) over the k largest entries (all when k is 0), in
// float64; the other entries get 0.
func softmax(x []float32, t float64, k int) []float64 {
	keep := math.Inf(-1)
	if k > 0 && k < len(x) {
		sorted := slices.Clone(x)
		slices.Sort(sorted)
		keep = float64(sorted[len(x)-k])
	}
	p := make([]float64, len(x))
	var z float64
	for i, v := range x {
		if float64(v) >= keep && !math.IsInf(float64(v), -1) {
			p[i] = math.Exp(float64(v) / t)
			z += p[i]
		}
	}
	for i := range p {
		p[i] /= z
	}
	return p
}

// chiSquareP returns the p-value of counts against probabilities p. Tokens of
// probability 0 must not be drawn at all.
func chiSquareP(t *testing.T, counts map[string]int, p []float64, draws int) float64 {
	t.Helper()
	got := make([]float64, len(p))
	for tok, n := range counts {
		i, err := strconv.Atoi(tok)
		require.NoError(t, err)
		require.True(t, i >= 0 && i < len(p), "token %d outside the vocabulary", i)
		require.Positive(t, p[i], "token %d has probability 0 and was drawn %d times", i, n)
		got[i] = float64(n)
	}
	var stat float64
	bins := 0
	for i, pi := range p {
		if pi == 0 {
			continue
		}
		e := pi * float64(draws)
		require.GreaterOrEqual(t, e, 5.0, "test setup: every bin needs an expected count of 5 or more")
		stat += (got[i] - e) * (got[i] - e) / e
		bins++
	}
	return statistical.ChiSquareSurvival(bins-1, stat)
}

func TestSampleCountsMatchSoftmax(t *testing.T) {
	testCountsMatchSoftmax(t, "cpu")
}

// testCountsMatchSoftmax draws from a small two-row file on a backend and compares the
// counts with the exact softmax; the gpu-tagged tests run it on the GPU.
func testCountsMatchSoftmax(t *testing.T, backend string) {
	logits := [2][6]float32{
		{2, 1, 0.5, float32(math.Inf(-1)), -1, 0},
		{0, 0, 0, 3, 3, -2},
	}
	path := writeNPY(t, logits)
	const draws = 20000
	tests := []struct {
		name  string
		flags []string
		temp  float64
		topK  int
	}{
		{name: "gumbel T=1", flags: []string{"--temperature", "1"}, temp: 1},
		{name: "gumbel T=0.8", flags: []string{"--temperature", "0.8"}, temp: 0.8},
		{name: "categorical top-k 3", flags: []string{"--temperature", "1.5", "--top-k", "3"}, temp: 1.5, topK: 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := sampleCounts(t, backend, append(tc.flags, path, "--draws", strconv.Itoa(draws), "--seed", "11")...)
			if backend == "cpu" {
				assert.Equal(t, "cpu", got.Backend)
			} else {
				assert.NotEqual(t, "cpu", got.Backend, "a GPU run must not fall back to the CPU")
			}
			assert.Equal(t, 6, got.Vocab)
			assert.Equal(t, draws, got.Draws)
			require.Len(t, got.Rows, 2)
			for r, row := range got.Rows {
				assert.Empty(t, row.Error)
				sum := 0
				for _, n := range row.Counts {
					sum += n
				}
				assert.Equal(t, draws, sum, "row %d: counts add up to the draws", r)
				p := softmax(logits[r][:], tc.temp, tc.topK)
				// A loose threshold: the test is deterministic (fixed seed), and only a
				// grossly wrong distribution or batching mistake should fail it.
				pv := chiSquareP(t, row.Counts, p, draws)
				assert.Greater(t, pv, 1e-4, "row %d: counts %v against %v", r, row.Counts, p)
				// The check has power: the same counts fail against the distribution of
				// a temperature half as large again.
				wrong := chiSquareP(t, row.Counts, softmax(logits[r][:], 1.5*tc.temp, tc.topK), draws)
				assert.Less(t, wrong, 1e-4, "row %d: a wrong temperature must be rejected", r)
				t.Logf("row %d: p = %.3g (against T x 1.5: p = %.3g)", r, pv, wrong)
			}
		})
	}
}

func TestSampleGreedyCounts(t *testing.T) {
	path := writeNPY(t, [2][4]float32{{1, 5, 5, 2}, {-1, -2, -3, -4}})
	got := sampleCounts(t, "cpu", path, "--temperature", "0", "--draws", "50")
	require.Len(t, got.Rows, 2)
	assert.Equal(t, map[string]int{"1": 50}, got.Rows[0].Counts, "ties go to the lowest index")
	assert.Equal(t, map[string]int{"0": 50}, got.Rows[1].Counts)
}

// tokenLines runs `gumbel sample` and returns its output as tokens per row.
func tokenLines(t *testing.T, args ...string) [][]string {
	t.Helper()
	code, stdout, stderr := runCLI(append([]string{"sample", "--backend", "cpu"}, args...)...)
	require.Equal(t, exitOK, code, stderr)
	var rows [][]string
	for _, line := range strings.Split(strings.TrimSuffix(stdout, "\n"), "\n") {
		rows = append(rows, strings.Fields(line))
	}
	return rows
}

func TestSampleTokensFollowSteps(t *testing.T) {
	// Many draws of a 2-row file cross several calls (each call holds at most
	// maxRowsPerCall rows); draw i must still be the token of step+i, whichever call
	// drew it.
	logits := [2][5]float32{{0, 0.5, 1, 0.2, 0.1}, {1, 1, 1, 1, 1}}
	path := writeNPY(t, logits)
	draws := maxRowsPerCall + 100 // two full calls and a short third
	all := tokenLines(t, path, "--draws", strconv.Itoa(draws), "--step", "1000", "--seed", "5")
	require.Len(t, all, 2)
	for r := range all {
		require.Len(t, all[r], draws)
	}
	for _, i := range []int{0, 1, maxRowsPerCall/2 - 1, maxRowsPerCall / 2, maxRowsPerCall, draws - 1} {
		one := tokenLines(t, path, "--draws", "1", "--step", strconv.Itoa(1000+i), "--seed", "5")
		require.Len(t, one, 2)
		for r := range one {
			assert.Equal(t, []string{all[r][i]}, one[r], "row %d, draw %d", r, i)
		}
	}
	again := tokenLines(t, path, "--draws", "3", "--step", "1000", "--seed", "5")
	other := tokenLines(t, path, "--draws", "64", "--step", "1000", "--seed", "6")
	for r := range again {
		assert.Equal(t, all[r][:3], again[r], "same seed and steps, same tokens")
	}
	assert.NotEqual(t, all[1][:64], other[1], "another seed draws other tokens")
}

func TestSampleFloat16MatchesFloat32(t *testing.T) {
	// Values that float16 holds exactly give the tokens of their float32 file.
	values := []float32{0.5, -1, 2.25, 0, 1.5, -3, 2, 0.75}
	bits := make([]uint16, len(values))
	for i, v := range values {
		bits[i] = half.Float16(v)
		require.Equal(t, v, half.Float16ToFloat32(bits[i]))
	}
	f16 := writeFile(t, "h.npy", rawNPY("<f2", false, "(2, 4)", bits))
	f32 := writeFile(t, "f.npy", rawNPY("<f4", false, "(2, 4)", values))
	for _, flags := range [][]string{{"--temperature", "0.8"}, {"--top-p", "0.7"}, {"--temperature", "0"}} {
		args := append(flags, "--draws", "40", "--seed", "3")
		assert.Equal(t, tokenLines(t, append(args, f32)...), tokenLines(t, append(args, f16)...), "%v", flags)
	}
}

func TestSampleBadInput(t *testing.T) {
	good := writeNPY(t, [2][3]float32{{1, 2, 3}, {3, 2, 1}})
	nan := float32(math.NaN())
	withNaN := writeNPY(t, [2][3]float32{{1, nan, 3}, {3, 2, 1}})
	tests := []struct {
		name   string
		args   []string
		code   int
		stderr string
		stdout string
	}{
		{name: "missing file", args: []string{"no-such.npy"}, code: exitFailure, stderr: "no such file"},
		{name: "no file", args: nil, code: exitUsage, stderr: "missing the .npy file"},
		{name: "wrong shape", args: []string{writeFile(t, "3d.npy", rawNPY("<f4", false, "(1, 1, 2)", []float32{1, 2}))}, code: exitFailure, stderr: "want [V] or [B, V]"},
		{name: "wrong dtype", args: []string{writeFile(t, "i.npy", rawNPY("<i8", false, "(2,)", []int64{1, 2}))}, code: exitFailure, stderr: "is not supported"},
		{name: "zero draws", args: []string{good, "--draws", "0"}, code: exitUsage, stderr: "--draws 0"},
		{name: "negative temperature", args: []string{good, "--temperature", "-1"}, code: exitUsage, stderr: "--temperature: gumbel/sampler: temperature must be finite and >= 0"},
		{name: "infinite temperature", args: []string{good, "--temperature", "+Inf"}, code: exitUsage, stderr: "--temperature: gumbel/sampler: temperature must be finite and >= 0"},
		{name: "top-p above 1", args: []string{good, "--top-p", "2"}, code: exitUsage, stderr: "--top-p: gumbel/sampler: top-p must be in (0, 1]"},
		{name: "negative top-k", args: []string{good, "--top-k", "-3"}, code: exitUsage, stderr: "--top-k: gumbel/sampler: top-k must be >= 0"},
		{name: "min-p above 1", args: []string{good, "--min-p", "1.5"}, code: exitUsage, stderr: "--min-p: gumbel/sampler: min-p must be in [0, 1]"},
		{name: "unknown backend", args: []string{good, "--backend", "tpu"}, code: exitUsage, stderr: `--backend "tpu": gumbel/runtime: unknown backend`},
		{
			name: "NaN row fails, the other row is sampled", args: []string{withNaN, "--temperature", "0", "--draws", "2"},
			code: exitFailure, stderr: "1 of 2 rows could not be sampled:\n  row 0: gumbel/sampler: row holds NaN or +Inf", stdout: "error: row 0: gumbel/sampler: row holds NaN or +Inf\n0 0\n",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"sample"}, tc.args...)
			if !slices.Contains(args, "--backend") {
				args = append(args, "--backend", "cpu")
			}
			code, stdout, stderr := runCLI(args...)
			assert.Equal(t, tc.code, code, "stderr: %s", stderr)
			assert.Contains(t, stderr, tc.stderr)
			assert.Equal(t, tc.stdout, stdout)
		})
	}
}

func TestSampleCountsReportRowError(t *testing.T) {
	inf := float32(math.Inf(-1))
	path := writeNPY(t, [2][3]float32{{inf, inf, inf}, {0, 1, 0}})
	code, stdout, stderr := runCLI("sample", "--backend", "cpu", "--counts", "--draws", "10", "--temperature", "0", path)
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, stderr, "row 0: gumbel/sampler: row holds no finite logit")
	var got countsJSON
	require.NoError(t, json.Unmarshal([]byte(stdout), &got), stdout)
	require.Len(t, got.Rows, 2)
	assert.Contains(t, got.Rows[0].Error, "no finite logit")
	assert.Empty(t, got.Rows[0].Counts)
	assert.Empty(t, got.Rows[1].Error)
	assert.Equal(t, map[string]int{"1": 10}, got.Rows[1].Counts)
}
