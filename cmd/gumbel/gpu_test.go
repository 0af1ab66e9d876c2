//go:build gpu

package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// These tests expect a GPU that "auto" opens: they fail, rather than skip, on the CPU.

func TestInfoFindsGPU(t *testing.T) {
	code, stdout, stderr := runCLI("info", "--json")
	require.Equal(t, exitOK, code, stderr)
	var rep infoReport
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep))
	var gpus []string
	for _, b := range rep.Backends {
		if b.Backend != "cpu" && b.Available {
			gpus = append(gpus, b.Backend)
			for _, d := range b.Devices {
				assert.NotEmpty(t, d.Name)
				assert.NotEmpty(t, d.Arch)
				assert.Positive(t, d.Multiprocessors)
				assert.Positive(t, d.WarpSize)
				t.Logf("%s: %s, %s, %d SMs, %d bytes, warp %d", b.Backend, d.Name, d.Arch, d.Multiprocessors, d.TotalMemory, d.WarpSize)
			}
			assert.NotEmpty(t, b.Libraries, "%s: the loaded libraries are listed", b.Backend)
		}
	}
	require.NotEmpty(t, gpus, "no GPU backend available:\n%s", stdout)
}

func TestRunJobOnGPU(t *testing.T) {
	code, stdout, stderr := runCLI("run", "--calls", "21")
	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	assert.NotContains(t, stdout, "device: cpu", "auto must open the GPU")
	assert.Contains(t, stdout, "checks: greedy matches the host argmax")
	t.Log("\n" + stdout)
}

func TestSampleCountsMatchSoftmaxOnGPU(t *testing.T) {
	testCountsMatchSoftmax(t, "auto")
}
