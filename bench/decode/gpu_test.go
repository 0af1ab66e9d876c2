//go:build gpu

// Run on an NVIDIA GPU with:
//
//	go test -tags gpu -run 'TestGPU' -v -timeout 20m ./bench/decode/
package decode

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel"
	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/sampler"
)

// h200Bandwidth is the H200's datasheet memory bandwidth in GB/s; the LM head must reach
// lmHeadTarget of it.
const (
	h200Bandwidth = 4800
	lmHeadTarget  = 0.70
)

func openGPU(t *testing.T) runtime.Device {
	dev, err := gumbel.Open(runtime.OpenOptions{})
	require.NoError(t, err)
	if dev.Info().Backend == runtime.CPU {
		dev.Close()
		t.Fatalf("a gpu-tagged run needs a GPU; auto chose the CPU device: %v", dev.Skipped)
	}
	t.Cleanup(func() { dev.Close() })
	return dev
}

// TestGPULMHeadBandwidth runs every configuration of the decode table at full size for a
// few steps (every row sampled without error) and requires the LM head to read its
// embedding at lmHeadTarget of the H200's bandwidth. BenchmarkDecode times the same
// configurations.
func TestGPULMHeadBandwidth(t *testing.T) {
	dev := openGPU(t)
	base := fullConfig()
	base.Steps = 10
	rs, err := Matrix(dev, base, nil)
	require.NoError(t, err)
	for _, r := range rs {
		assert.GreaterOrEqualf(t, r.LMHeadGBps, lmHeadTarget*h200Bandwidth, "B=%d %s: LM head at %.0f GB/s (%.1f µs), below %.0f%% of %d GB/s",
			r.Config.Batch, r.Config.Route, r.LMHeadGBps, r.LMHeadUs, 100*lmHeadTarget, h200Bandwidth)
	}
}

// TestGPUGreedyMatchesHostReference checks the CUDA model on the first steps of a
// full-size greedy run against the float64 host forward pass.
func TestGPUGreedyMatchesHostReference(t *testing.T) {
	dev := openGPU(t)
	cfg := fullConfig()
	cfg.Batch, cfg.Route, cfg.Steps, cfg.Warmup, cfg.LMHeadRepeats = 4, sampler.RouteGreedy, 3, 0, 0
	res, err := Run(dev, cfg)
	require.NoError(t, err)
	hm := newHostModel(cfg)
	prev := append([]int32(nil), res.Start...)
	for step := range cfg.Steps {
		for b := range cfg.Batch {
			ref := hm.logits64(prev[b])
			got := res.Tokens[step*cfg.Batch+b]
			best := argmax(ref)
			assert.InDeltaf(t, ref[best], ref[got], 1e-3, "step %d row %d: token %d, host argmax %d", step, b, got, best)
			prev[b] = got
		}
	}
}

// TestGPUKernelsMatchHost compares the CUDA GEMV kernels with the host in float64 at
// every batch size, including ragged sizes.
func TestGPUKernelsMatchHost(t *testing.T) {
	dev := openGPU(t)
	for _, tc := range []struct{ n, h, b int }{{151936, 1024, 1}, {151936, 1024, 4}, {4099, 1024, 8}, {1000, 24, 3}, {37, 264, 5}} {
		f := newKernelFixture(t, dev, tc.n, tc.h, tc.b)
		k := headKernel
		info := dev.Info()
		grid := gemvGridFor(tc.n, gemvBlock, info.WarpSize, info.Multiprocessors, k.rowsPerWarp(tc.b), k.blocksPerSM).X
		got := f.launchGEMV(t, k.name, grid)
		for b := range tc.b {
			for n := range tc.n {
				ref, abs := f.hostDot64(n, b)
				require.InDeltaf(t, ref, float64(got[b*tc.n+n]), 1e-5*abs+1e-6, "%s %+v: logits[%d, %d]", k.name, tc, b, n)
			}
		}
	}
	f := newKernelFixture(t, dev, 1024, 1024, 4)
	got := f.launchGEMV(t, "hidden_bf16", gemvGrid(1024, gemvBlock, dev.Info().WarpSize, dev.Info().Multiprocessors).X)
	for b := range 4 {
		for i := range 1024 {
			want := math.Tanh(float64(f.hostDot(i, b)))
			assert.InDeltaf(t, want, float64(got[b*1024+i])-float64(f.act[b*1024+i]), 2e-3, "h[%d, %d] (tanh part)", b, i)
		}
	}
}
