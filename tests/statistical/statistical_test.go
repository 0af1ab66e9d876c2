package statistical

import (
	"testing"

	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/runtime/cpu"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The CPU suite: every case of SizeCI and every property check, on the CPU device. The
// cases run one after another: the device already spreads each batch over every core.
// With -short the draw counts drop to a tenth (a smoke test, not the suite).

func openCPU(t testing.TB) runtime.Device {
	t.Helper()
	dev, err := cpu.Open()
	require.NoError(t, err)
	t.Cleanup(func() { _ = dev.Close() })
	return dev
}

func ciConfig() Config {
	cfg := Config{Size: SizeCI}
	if testing.Short() {
		cfg.DrawScale = 0.1
	}
	return cfg
}

func TestSuiteCPU(t *testing.T) {
	dev := openCPU(t)
	runSuite(t, dev, ciConfig())
}

func TestChecksCPU(t *testing.T) {
	dev := openCPU(t)
	runChecks(t, dev)
}

func TestTrackedCPU(t *testing.T) {
	dev := openCPU(t)
	runTrackedSuite(t, dev, ciConfig())
}

// TestLogprobErrorsCPU checks the log-probability records at Qwen2's vocabulary against
// the float64 reference, within LogprobTolerance (the logprobs check runs at
// probeVocab), and logs the largest errors.
func TestLogprobErrorsCPU(t *testing.T) {
	dev := openCPU(t)
	measureLogprobs(t, dev)
}

// runTrackedSuite runs every tracked penalty case of cfg on dev, one subtest each, and
// checks that each could have caught a sampler that ignores its penalties or never
// counts its tokens.
func runTrackedSuite(t *testing.T, dev runtime.Device, cfg Config) {
	for _, tc := range TrackedCases(cfg) {
		t.Run(tc.Name, func(t *testing.T) {
			out, rep := RunTracked(dev, tc)
			require.Equal(t, tc.Draws, out.Draws, out.Message)
			assert.True(t, out.Pass, "%s: %s", tc.Name, out.Message)
			assert.Positive(t, rep.CountsCompared, out.Message)
			assert.Less(t, rep.Ambiguous*100, tc.Draws, "at most 1%% of the draws may be too close to call")
			if !testing.Short() {
				// Each broken sampler must be caught by one of the two tests.
				caught := func(tokens, counts float64) bool {
					return tokens > rep.Tokens.Detectable || counts > rep.Counts.Detectable
				}
				assert.True(t, caught(rep.Tokens.Ignored, rep.Counts.Ignored), "the case must be able to see ignored penalties")
				assert.True(t, caught(rep.Tokens.Unrecorded, rep.Counts.Unrecorded), "the case must be able to see uncounted outputs")
				assert.True(t, caught(rep.Tokens.CountedOnce, rep.Counts.CountedOnce), "the case must be able to see a frequency penalty that counts once")
			}
			t.Logf("%d draws, %d bins: %s", out.Draws, out.Bins, out.Message)
		})
	}
}

// measureLogprobs runs MeasureLogprobs at LargeVocab on dev, which fails on a record
// beyond LogprobTolerance, and logs what it saw.
func measureLogprobs(t *testing.T, dev runtime.Device) {
	rep, err := MeasureLogprobs(dev, LargeVocab)
	require.NoError(t, err)
	assert.Equal(t, 16, rep.Records+rep.Ambiguous)
	t.Logf("V %d, %d records (%d rows too close to a filter boundary to compare): largest absolute errors raw %.3g, processed %.3g, log-normalisers %.3g; "+
		"relative to the tolerance raw %.3f, processed %.3f, raw LSE %.3f, processed LSE %.3f",
		LargeVocab, rep.Records, rep.Ambiguous, rep.AbsRaw, rep.AbsProcessed, rep.AbsLSE, rep.RelRaw, rep.RelProcessed, rep.RelRawLSE, rep.RelProcessedLSE)
}

// runSuite runs every case of cfg on dev, one subtest each.
func runSuite(t *testing.T, dev runtime.Device, cfg Config) {
	for _, c := range Cases(cfg) {
		t.Run(c.Name, func(t *testing.T) {
			out := Run(dev, c, nil)
			require.Equal(t, c.Draws, out.Draws, out.Message)
			assert.True(t, out.Pass, "%s: %s", c.Name, out.Message)
			t.Logf("%d draws, %d bins: %s", out.Draws, out.Bins, out.Message)
			if c.Detects != "" {
				t.Logf("detects: %s", c.Detects)
			}
		})
	}
}

// runChecks runs every property check on dev, one subtest each.
func runChecks(t *testing.T, dev runtime.Device) {
	for _, ch := range Checks() {
		t.Run(ch.Name, func(t *testing.T) {
			require.NoError(t, ch.Run(dev), ch.About)
		})
	}
}

// BenchmarkDraw measures what the CI draw counts are planned from: the cost of one draw
// of each kind of case on the CPU device (see the Draw counts in cases.go). Compare
// ns/element against the CPU time (not the wall time) when the machine is shared.
func BenchmarkDraw(b *testing.B) {
	dev := openCPU(b)
	for _, name := range []string{
		"bimodal/V128/T1.0/gumbel", "bimodal/V128/T1.0/categorical", "flat/V128/T1.0/topk50-topp0.9",
		"flat/V128/T1.0/categorical-topk50-topp0.9", "bimodal/V128/T1.5/minp0.05",
		"tail/V151936/T1.0/gumbel", "tail/V151936/T1.0/categorical",
	} {
		var c Case
		for _, cc := range Cases(Config{Size: SizeCI}) {
			if cc.Name == name {
				c = cc
			}
		}
		require.NotEmpty(b, c.Name, name)
		b.Run(name, func(b *testing.B) {
			d, err := NewSamplerDrawer(dev, &c)
			require.NoError(b, err)
			defer d.Close()
			tokens := make([]int32, d.Batch())
			b.ResetTimer()
			draws := 0
			for i := 0; i < b.N; i++ {
				require.NoError(b, d.Draw(uint64(draws), tokens))
				draws += len(tokens)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(draws), "ns/draw")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(draws)/float64(c.Vocab()), "ns/element")
		})
	}
}
