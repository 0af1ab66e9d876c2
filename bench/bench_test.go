package bench

import (
	"testing"

	"github.com/gumbel-go/gumbel/runtime/cpu"
	"github.com/gumbel-go/gumbel/sampler"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A small matrix on the CPU device: every route measures, samples a valid token, and the
// steady state allocates nothing.
func TestMatrixOnCPU(t *testing.T) {
	dev, err := cpu.Open()
	require.NoError(t, err)
	defer dev.Close()
	mx := Matrix{Routes: Routes, DTypes: []sampler.DType{sampler.Float32, sampler.BFloat16}, Vocabs: []int{4096}, Batches: []int{1, 3}}
	ms, err := mx.Run(dev, Config{Groups: 3, Repeats: 3, HostCalls: 20, Warmup: 20}, nil)
	require.NoError(t, err)
	require.Len(t, ms, len(Routes)*2*2)
	for _, m := range ms {
		assert.Greater(t, m.DeviceUs, 0.0, "%+v", m)
		assert.Greater(t, m.HostUs, 0.0, "%+v", m)
		// The count is process-wide (runtime.MemStats), so an occasional allocation by
		// the test framework or the runtime shows as a fraction; one allocation on
		// every call would show as 1. sampler's AllocsPerRun tests hold the strict zero.
		assert.Less(t, m.AllocsPerCall, 0.5, "%+v", m)
		assert.True(t, m.Token >= 0 && int(m.Token) < m.Vocab, "%+v", m)
	}
	md := Markdown(ms)
	assert.Contains(t, md, "| bfloat16 | 4096 | 3 |")
	assert.Contains(t, md, "categorical / gumbel")
}

func TestSplitSweepOnCPU(t *testing.T) {
	dev, err := cpu.Open()
	require.NoError(t, err)
	defer dev.Close()
	pts, err := SplitSweep(dev, sampler.Float32, []int{8192}, []int{2}, []int{1, 4}, Config{Groups: 2, Repeats: 2, HostCalls: 2, Warmup: 1})
	require.NoError(t, err)
	require.Len(t, pts, 2)
	for _, p := range pts {
		assert.Greater(t, p.DeviceUs, 0.0)
	}
}
