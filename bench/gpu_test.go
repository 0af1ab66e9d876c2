//go:build gpu

package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gumbel-go/gumbel"
	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/sampler"
	"github.com/stretchr/testify/require"
)

func openGPU(t *testing.T) runtime.Device {
	d, err := gumbel.Open(runtime.OpenOptions{})
	require.NoError(t, err)
	if d.Info().Backend == runtime.CPU {
		d.Close()
		t.Fatalf("a gpu-tagged run needs a GPU; auto chose the CPU device: %v", d.Skipped)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// TestGPUMatrix measures the full matrix and writes it to $GUMBEL_BENCH_OUT.
func TestGPUMatrix(t *testing.T) {
	dev := openGPU(t)
	info := dev.Info()
	ms, err := FullMatrix.Run(dev, DefaultConfig, func(done, total int, m Measurement) {
		t.Logf("%3d/%d %-20s %-8s V=%-6d B=%-3d device %8.2f us  host %8.1f us  allocs %.2f",
			done, total, m.Route, m.DTypeName, m.Vocab, m.Batch, m.DeviceUs, m.HostUs, m.AllocsPerCall)
	})
	require.NoError(t, err)
	md := fmt.Sprintf("Device: %s (%s, %d SMs)\n", info.Name, info.Arch, info.Multiprocessors) + Markdown(ms)
	t.Log("\n" + md)
	writeResults(t, "matrix", ms, md)
}

// TestGPUSplitSweep times gumbel_argmax at every blocks-per-row value, the measurement
// the GPU split policy is chosen from.
func TestGPUSplitSweep(t *testing.T) {
	dev := openGPU(t)
	splits := []int{1, 2, 4, 8, 16, 32, 64, 128, 256}
	pts, err := SplitSweep(dev, sampler.Float32, []int{8192, 16384, 32768, 65536, 151936}, []int{1, 4, 8, 16, 32, 64, 128}, splits,
		Config{Groups: 9, Repeats: 50, HostCalls: 1, Warmup: 5})
	require.NoError(t, err)
	var sb strings.Builder
	sb.WriteString("| vocab | batch |")
	for _, s := range splits {
		fmt.Fprintf(&sb, " S=%d |", s)
	}
	sb.WriteString(" best |\n|---:|---:|")
	for range splits {
		sb.WriteString("---:|")
	}
	sb.WriteString("---:|\n")
	for i := 0; i < len(pts); i += len(splits) {
		row := pts[i : i+len(splits)]
		fmt.Fprintf(&sb, "| %d | %d |", row[0].Vocab, row[0].Batch)
		best := row[0]
		for _, p := range row {
			fmt.Fprintf(&sb, " %.2f |", p.DeviceUs)
			if p.DeviceUs < best.DeviceUs {
				best = p
			}
		}
		fmt.Fprintf(&sb, " S=%d |\n", best.BlocksPerRow)
	}
	t.Log("\n" + sb.String())
	writeResults(t, "split-sweep", pts, sb.String())
}

// writeResults stores measurements as JSON and markdown under $GUMBEL_BENCH_OUT, when set.
func writeResults(t *testing.T, name string, v any, md string) {
	dir := os.Getenv("GUMBEL_BENCH_OUT")
	if dir == "" {
		return
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	js, err := json.MarshalIndent(v, "", " ")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, name+".json"), js, 0o644))
	if md != "" {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name+".md"), []byte(md), 0o644))
	}
}

// TestGPUFeatures measures each serving feature against the plain Gumbel step (the
// serving-feature issue's matrix) and writes it to $GUMBEL_BENCH_OUT.
func TestGPUFeatures(t *testing.T) {
	dev := openGPU(t)
	info := dev.Info()
	ms, err := FeatureMatrix.Run(dev, DefaultConfig, func(done, total int, m Measurement) {
		t.Logf("%3d/%d %-20s %-8s V=%-6d B=%-3d device %8.2f us  graph %8.2f us  host %8.1f us  allocs %.2f",
			done, total, m.Route, m.DTypeName, m.Vocab, m.Batch, m.DeviceUs, m.GraphUs, m.HostUs, m.AllocsPerCall)
	})
	require.NoError(t, err)
	md := fmt.Sprintf("Device: %s (%s, %d SMs)\n", info.Name, info.Arch, info.Multiprocessors) + FeatureMarkdown(ms)
	t.Log("\n" + md)
	writeResults(t, "features", ms, md)
}
