//go:build gpu

package sampler_test

import (
	"fmt"
	"testing"

	"github.com/gumbel-go/gumbel/bench"
	"github.com/gumbel-go/gumbel/runtime/cpu"
	"github.com/gumbel-go/gumbel/sampler"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGPUAgreementRate draws over 1e5 tokens from LLM-shaped logits on the GPU and on the
// CPU device with equal seeds and steps, and measures how often they agree. The editions
// compute identical integer streams and identical float32 arithmetic except expf, logf
// and log1pf, whose last-place rounding may differ (CUDA's are within 1-2 ulp, the Go
// edition rounds float64 results); a token changes only when two candidates' scores fall
// within those few ulps of each other. Required: at least 99.99% agreement.
func TestGPUAgreementRate(t *testing.T) {
	dev := openGPU(t)
	cpuDev, err := cpu.Open()
	require.NoError(t, err)
	t.Cleanup(func() { _ = cpuDev.Close() })

	cases := []struct {
		name   string
		vocab  int
		steps  int
		params sampler.Params
	}{
		{"gumbel T=1", qwenVocab, 1000, sampler.Params{Temperature: 1}},
		{"gumbel T=0.7", qwenVocab, 400, sampler.Params{Temperature: 0.7}},
		{"categorical T=1", 32768, 200, sampler.Params{Temperature: 1}},
		{"top-k 50 top-p 0.9", 32768, 200, sampler.Params{Temperature: 0.9, TopK: 50, TopP: 0.9}},
		{"min-p 0.05", 32768, 200, sampler.Params{Temperature: 1.1, MinP: 0.05}},
	}
	const rows = 64
	var total, agree int
	for ci, c := range cases {
		opts := sampler.Options{Seed: 99}
		if c.name == "categorical T=1" {
			opts.Gumbel = sampler.Off
		}
		gs := gpuSampler(t, dev, opts)
		cs := gpuSampler(t, cpuDev, opts)
		logits := bench.LLMLogits(rows, c.vocab, uint64(ci))
		params := make([]sampler.Params, rows)
		var gr, cr sampler.Result
		n, same := 0, 0
		for step := range c.steps {
			for i := range params {
				p := c.params
				p.RequestID, p.Step = uint64(i), uint64(step)
				params[i] = p
			}
			require.NoError(t, gs.SampleFloat32(logits, c.vocab, params, &gr))
			require.NoError(t, cs.SampleFloat32(logits, c.vocab, params, &cr))
			for i := range params {
				require.NoError(t, gr.Errs[i])
				require.NoError(t, cr.Errs[i])
				n++
				if gr.Tokens[i] == cr.Tokens[i] {
					same++
				} else {
					t.Logf("%s: row %d step %d: GPU %d, CPU %d", c.name, i, step, gr.Tokens[i], cr.Tokens[i])
				}
			}
		}
		t.Logf("%-20s V=%-6d %6d draws, %6d agree (%.4f%%)", c.name, c.vocab, n, same, 100*float64(same)/float64(n))
		total += n
		agree += same
	}
	rate := float64(agree) / float64(total)
	t.Logf("all: %d draws, %d agree: %s", total, agree, fmt.Sprintf("%.5f%%", 100*rate))
	require.GreaterOrEqual(t, total, 100000)
	assert.GreaterOrEqual(t, rate, 0.9999)
}
