//go:build gpu

// Run on an NVIDIA GPU with:
//
//	go test -tags gpu -run 'GPU' -v ./bench/
package bench

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel"
	"github.com/gumbel-go/gumbel/runtime"
)

// openGPU opens the device "auto" chooses, failing rather than skipping on the CPU.
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

// The CUDA edition of the mask pass writes -Inf into exactly the banned tokens, as the
// Go edition does.
func TestGPUApplyBitmask(t *testing.T) {
	testApplyBitmask(t, openGPU(t))
}

// Every bitmask route runs on the GPU at the vocabulary, samples allowed
// tokens, and is timed by graph replay.
func TestGPUBitmaskRoutes(t *testing.T) {
	ms := testBitmaskRoutes(t, openGPU(t), 151936, Config{Groups: 3, Repeats: 10, HostCalls: 10, Warmup: 5})
	for _, m := range ms {
		assert.Positive(t, m.GraphUs, "%+v", m)
	}
	t.Log("\n" + BitmaskMarkdown(ms))
}
