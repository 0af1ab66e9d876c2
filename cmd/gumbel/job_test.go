package main

import (
	"io"
	"math"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel"
	"github.com/gumbel-go/gumbel/bench"
	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/sampler"
)

func TestArgmax(t *testing.T) {
	tests := []struct {
		row  []float32
		want int32
	}{
		{[]float32{1, 3, 3, float32(math.Inf(-1))}, 1}, // lowest index on ties
		{[]float32{-1}, 0},
		{[]float32{float32(math.Inf(-1)), -5, -2}, 2},
	}
	for _, tc := range tests {
		assert.Equal(t, tc.want, argmax(tc.row), "%v", tc.row)
	}
}

func TestRunJobOnCPU(t *testing.T) {
	code, stdout, stderr := runCLI("run", "--backend", "cpu", "--steps", "2", "--calls", "1")
	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	assert.Empty(t, stderr)
	assert.Contains(t, stdout, "device: cpu 0: Go CPU")
	assert.Contains(t, stdout, "chosen by --backend")
	assert.Contains(t, stdout, "checks: greedy matches the host argmax")
	lines := strings.Split(stdout, "\n")
	// The step table: a header and one line per row with its route and two tokens.
	var table []string
	for i, l := range lines {
		if strings.HasPrefix(l, "row ") {
			table = lines[i+1 : i+1+jobRows]
			break
		}
	}
	require.Len(t, table, jobRows)
	wantRoutes := []string{"greedy", "gumbel", "gumbel", "gumbel", "filtered", "filtered", "filtered", "filtered"}
	for r, l := range table {
		f := strings.Fields(l)
		require.GreaterOrEqual(t, len(f), 4, l)
		assert.Equal(t, wantRoutes[r], f[len(f)-3], "row %d: %s", r, l)
	}
	for _, route := range bench.Routes {
		assert.Regexp(t, `(?m)^`+regexp.QuoteMeta(string(route))+`\s+[0-9.]+ (µs|ms)\s+[0-9.]+\s+[0-9.]+ (µs|ms)$`, stdout, "timing line of %s", route)
	}
}

func TestCheckJobCatchesWrongTokens(t *testing.T) {
	dev, err := gumbel.Open(runtime.OpenOptions{Backend: "cpu"})
	require.NoError(t, err)
	defer dev.Close()
	s, err := sampler.New(dev, sampler.Options{Seed: 1})
	require.NoError(t, err)
	defer s.Close()

	const vocab = 1000
	host := bench.LLMLogits(jobRows, vocab, 1)
	buf, err := bench.Upload(dev, host, sampler.Float32)
	require.NoError(t, err)
	defer buf.Free()
	logits := sampler.Logits{Data: buf, DType: sampler.Float32, Rows: jobRows, Vocab: vocab}
	params := jobParams()
	for r := range params {
		params[r].RequestID = uint64(r) + 1 // reproducible: checkJob samples again
	}

	tokens, _, err := sampleSteps(s, logits, params, 1)
	require.NoError(t, err)
	require.NoError(t, checkJob(io.Discard, dev, s, host, logits, params, tokens[0]), "the sampler's own tokens pass")

	for _, r := range []int{0, 3} {
		wrong := slices.Clone(tokens[0])
		wrong[r] = (wrong[r] + 1) % vocab
		err := checkJob(io.Discard, dev, s, host, logits, params, wrong)
		require.Error(t, err, "row %d altered", r)
		assert.Contains(t, err.Error(), "checks failed on cpu")
	}
}
