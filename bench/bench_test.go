package bench

import (
	"runtime/debug"
	"testing"

	"github.com/gumbel-go/gumbel/runtime/cpu"
	"github.com/gumbel-go/gumbel/sampler"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A small matrix on the CPU device: every route measures, samples a valid token, and the
// steady state allocates nothing.
func TestMatrixOnCPU(t *testing.T) {
	// Collections are held off: one landing in a timed window empties the Go kernels'
	// pooled scratch, whose buffers then count as that window's allocations.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
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

// Without warm-up calls a point still has its token; a config that cannot time anything
// is an error, not a panic.
func TestMeasureConfig(t *testing.T) {
	dev, err := cpu.Open()
	require.NoError(t, err)
	defer dev.Close()
	p := Point{Route: TopK50, DType: sampler.Float32, Vocab: 1024, Batch: 2}
	lg, err := Upload(dev, LLMLogits(p.Batch, p.Vocab, 1), p.DType)
	require.NoError(t, err)
	defer lg.Free()
	for _, c := range []struct {
		cfg Config
		ok  bool
	}{
		{Config{Groups: 1, Repeats: 1, HostCalls: 1, Warmup: 0}, true},
		{Config{Groups: 0, Repeats: 1, HostCalls: 1}, false},
		{Config{Groups: 1, Repeats: 0, HostCalls: 1}, false},
		{Config{Groups: 1, Repeats: 1, HostCalls: 0}, false},
		{Config{Groups: 1, Repeats: 1, HostCalls: 1, Warmup: -1}, false},
	} {
		m, err := Measure(dev, p, lg, c.cfg)
		if !c.ok {
			assert.Error(t, err, "%+v", c.cfg)
			continue
		}
		require.NoError(t, err, "%+v", c.cfg)
		assert.True(t, m.Token >= 0 && int(m.Token) < m.Vocab, "%+v", m)
	}
}

// AllocsPerCall is the fewest allocations per call over the windows: a one-time burst
// (a CPU worker growing its scratch) in one window does not count, an allocation in
// every call does.
func TestFewestPerCall(t *testing.T) {
	for _, c := range []struct {
		name    string
		mallocs []uint64
		calls   int
		want    float64
	}{
		{"none", []uint64{100, 100, 100, 100, 100}, 20, 0},
		{"one burst", []uint64{100, 100, 110, 110, 110}, 20, 0},
		{"every call", []uint64{100, 105, 110, 115, 120}, 20, 1},
		{"uneven windows", []uint64{0, 0, 2, 4, 6}, 7, 0},
		{"one call", []uint64{7, 9}, 1, 2},
		{"no window", []uint64{7}, 1, 0},
	} {
		assert.Equal(t, c.want, fewestPerCall(c.mallocs, c.calls), c.name)
	}
}

// A small sweep on the CPU device: every split measures, and the table lists each
// split's time and the fastest one.
func TestSweepOnCPU(t *testing.T) {
	dev, err := cpu.Open()
	require.NoError(t, err)
	defer dev.Close()
	sw := Sweep{DType: sampler.Float32, Vocabs: []int{8192}, Batches: []int{1, 2}, Splits: []int{1, 4}}
	done := 0
	ms, err := sw.Run(dev, Config{Groups: 2, Repeats: 2, HostCalls: 2, Warmup: 1}, func(d, total int, m Measurement) {
		done = d
		assert.Equal(t, 4, total)
	})
	require.NoError(t, err)
	require.Len(t, ms, 4)
	assert.Equal(t, 4, done)
	for i, m := range ms {
		assert.Greater(t, m.DeviceUs, 0.0, "%+v", m)
		assert.Equal(t, GumbelSplit, m.Route)
		assert.Equal(t, sw.Splits[i%2], m.BlocksPerRow)
		assert.True(t, m.Token >= 0 && int(m.Token) < m.Vocab, "%+v", m)
	}
	for i := 0; i < len(ms); i += 2 {
		assert.Equal(t, ms[i].Token, ms[i+1].Token, "tokens never depend on the split")
	}
	md := SweepMarkdown(ms)
	assert.Contains(t, md, "| vocab | batch | S=1 | S=4 | best |")
	assert.Regexp(t, `\| 8192 \| 2 \| [0-9.]+ \| [0-9.]+ \| S=[14] \|`, md)
}

// Each filter route sets its filter alone, at temperature 0.8.
func TestFilterRouteParams(t *testing.T) {
	tests := []struct {
		route            Route
		topK             int
		topP, minP, temp float32
	}{
		{TopKTopP, 50, 0.9, 0, 0.8},
		{TopK40TopP09, 40, 0.9, 0, 0.8},
		{TopK50, 50, 0, 0, 0.8},
		{TopP095, 0, 0.95, 0, 0.8},
		{MinP, 0, 0, 0.05, 0.8},
		{GumbelSplit, 0, 0, 0, 0.8},
		{Categorical, 0, 0, 0, 0.8},
	}
	require.Len(t, tests, len(FilterRoutes))
	for _, tc := range tests {
		t.Run(string(tc.route), func(t *testing.T) {
			assert.Contains(t, FilterRoutes, tc.route)
			assert.True(t, IsOwn(tc.route))
			for i, p := range params(tc.route, 2, 7) {
				assert.Equal(t, []any{tc.topK, tc.topP, tc.minP, tc.temp, uint64(1000 + i), uint64(7)},
					[]any{p.TopK, p.TopP, p.MinP, p.Temperature, p.Seed, p.Step})
			}
		})
	}
	assert.False(t, IsOwn("flashinfer:softmax+top_k"))
	assert.NotContains(t, Routes, TopK50, "the default matrix is unchanged")
}
