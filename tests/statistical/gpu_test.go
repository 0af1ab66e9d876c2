//go:build gpu

package statistical

import (
	"testing"

	"github.com/gumbel-go/gumbel"
	"github.com/gumbel-go/gumbel/runtime"
	"github.com/stretchr/testify/require"
)

// The GPU suite: every case of SizeFull (the processor and pair cases included), the
// tracked penalty cases at full size, the log-probability errors at V = 151936, and
// every property check, on the device that gumbel.Open picks ($GUMBEL_BACKEND, else the
// first GPU backend that opens). A gpu-tagged run expects a GPU: landing on the CPU
// device is a failure, not a skip.
//
//	go test -tags gpu -timeout 90m -v ./tests/statistical/

func openGPU(t *testing.T) runtime.Device {
	t.Helper()
	opened, err := gumbel.Open(runtime.OpenOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = opened.Close() })
	info := opened.Info()
	require.NotEqual(t, runtime.CPU, info.Backend,
		"the gpu tag expects a GPU, but only the CPU device opened; skipped backends: %v", opened.Skipped)
	t.Logf("device: %s %s (%s, %d multiprocessors)", info.Backend, info.Name, info.Arch, info.Multiprocessors)
	return opened.Device
}

func TestSuiteGPU(t *testing.T) {
	dev := openGPU(t)
	runSuite(t, dev, Config{Size: SizeFull})
}

func TestTrackedGPU(t *testing.T) {
	dev := openGPU(t)
	runTrackedSuite(t, dev, Config{Size: SizeFull})
}

func TestLogprobErrorsGPU(t *testing.T) {
	dev := openGPU(t)
	measureLogprobs(t, dev)
}

func TestChecksGPU(t *testing.T) {
	dev := openGPU(t)
	runChecks(t, dev)
}
