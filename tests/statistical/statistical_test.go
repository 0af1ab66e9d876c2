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
