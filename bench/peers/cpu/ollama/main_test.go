package main

import (
	"bytes"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gumbel-go/gumbel/bench"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTopK(t *testing.T) {
	logits := bench.LLMLogits(1, 5000, 9)
	ts := make([]token, len(logits))
	for i, v := range logits {
		ts[i] = token{int32(i), v}
	}
	want := slices.Clone(logits)
	slices.Sort(want)
	slices.Reverse(want)
	got := topK(ts, 40)
	require.Len(t, got, 40)
	for i, tk := range got {
		assert.Equal(t, want[i], tk.value, "rank %d", i)
		assert.Equal(t, logits[tk.id], tk.value)
	}
}

func TestSample(t *testing.T) {
	logits := []float32{0, 3, 1, 9, 2, 8.5}
	rng := rand.New(rand.NewPCG(1, 2))
	tests := []struct {
		name string
		s    settings
		want []int32 // the tokens it may return
	}{
		{"greedy", settings{}, []int32{3}},
		{"top-k 1", settings{topK: 1, temperature: 0.8, topP: 1}, []int32{3}},
		{"top-k 2", settings{topK: 2, temperature: 0.8, topP: 1}, []int32{3, 5}},
		{"top-p 0.5: the first token passes it", settings{topK: 3, temperature: 1, topP: 0.5}, []int32{3}},
		{"min-p 0.5", settings{temperature: 1, topP: 1, minP: 0.5}, []int32{3, 5}},
		{"temperature alone", settings{temperature: 0.8, topP: 1}, []int32{0, 1, 2, 3, 4, 5}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			seen := map[int32]bool{}
			for range 2000 {
				tok := sample(logits, tc.s, rng)
				require.Contains(t, tc.want, tok)
				seen[tok] = true
			}
			if len(tc.want) == 2 {
				assert.Len(t, seen, 2, "both candidates drawn")
			}
		})
	}
}

// The JSON loads as bench measurements, and each route is paired with its gumbel route.
func TestRunJSON(t *testing.T) {
	out := filepath.Join(t.TempDir(), "ollama.json")
	var stderr bytes.Buffer
	require.NoError(t, run([]string{"--vocab", "300", "--batch", "1,2", "--groups", "2", "--repeats", "1", "--out", out},
		&bytes.Buffer{}, &stderr))
	ms, err := bench.LoadMeasurements(out)
	require.NoError(t, err)
	require.Len(t, ms, 8)
	logits := bench.LLMLogits(1, 300, 300*1000+1)
	assert.Equal(t, greedy(logits), ms[0].Token, "the logits of gumbel's matrix")

	var ours []bench.Measurement
	for _, r := range []bench.Route{bench.Greedy, bench.GumbelSplit, bench.TopK40TopP09, bench.MinP} {
		ours = append(ours, bench.Measurement{Point: bench.Point{Route: r, Vocab: 300, Batch: 1}, DTypeName: "float32", DeviceUs: 1})
	}
	md := bench.Compare(ours, ms)
	for _, pair := range []string{"ollama:greedy / greedy", "ollama:temp / gumbel-split",
		"ollama:topk40-topp0.9 / topk40-topp0.9", "ollama:minp0.05 / minp0.05"} {
		assert.Contains(t, md, pair)
	}

	for _, bad := range [][]string{{"--configs", "topk50"}, {"--vocab", "0"}, {"--groups", "0"}, {"extra"}} {
		err := run(bad, &bytes.Buffer{}, &bytes.Buffer{})
		assert.Error(t, err, strings.Join(bad, " "))
	}
}
