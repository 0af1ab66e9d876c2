package bench

import (
	"testing"

	"github.com/gumbel-go/gumbel/runtime/cpu"
	"github.com/gumbel-go/gumbel/sampler"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every serving-feature route measures on the CPU device, samples a valid token without
// a steady-state allocation, and reads as a cost against the plain Gumbel step.
func TestFeaturesOnCPU(t *testing.T) {
	dev, err := cpu.Open()
	require.NoError(t, err)
	defer dev.Close()
	mx := Matrix{Routes: FeatureRoutes, DTypes: []sampler.DType{sampler.BFloat16}, Vocabs: []int{4096}, Batches: []int{1, 3}}
	// 20 host calls, as in TestMatrixOnCPU: a CPU worker that first runs a kernel while
	// timed allocates its scratch once (a few allocations), which must not read as one
	// per call.
	ms, err := mx.Run(dev, Config{Groups: 2, Repeats: 2, HostCalls: 20, Warmup: 5}, nil)
	require.NoError(t, err)
	require.Len(t, ms, len(FeatureRoutes)*2)
	for _, m := range ms {
		assert.Greater(t, m.DeviceUs, 0.0, "%+v", m)
		assert.Less(t, m.AllocsPerCall, 0.5, "%+v", m)
		assert.True(t, m.Token >= 0 && int(m.Token) < m.Vocab, "%+v", m)
	}
	md := FeatureMarkdown(ms)
	assert.Contains(t, md, "| bfloat16 | 4096 | 3 |")
	assert.Contains(t, md, string(GumbelLogprobs))
	assert.Regexp(t, `\| [0-9.]+ \([+-][0-9]+%\) \|`, md, "feature cells carry their cost against the plain step")
}

func TestFeatureRoutesAreDistinct(t *testing.T) {
	seen := map[Route]bool{}
	for _, r := range append(append([]Route{}, Routes...), FeatureRoutes[1:]...) {
		assert.False(t, seen[r], "route %q listed twice", r)
		seen[r] = true
	}
	assert.Equal(t, GumbelSplit, FeatureRoutes[0], "the plain step leads the feature table")
}
