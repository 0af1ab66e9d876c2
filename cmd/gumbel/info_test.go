package main

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/runtime"
)

func TestInfoJSON(t *testing.T) {
	code, stdout, stderr := runCLI("info", "--json")
	require.Equal(t, exitOK, code, stderr)

	var rep struct {
		GOOS           string `json:"goos"`
		GOARCH         string `json:"goarch"`
		StreamContract int    `json:"stream_contract"`
		Backends       []struct {
			Backend   string   `json:"backend"`
			Available bool     `json:"available"`
			Error     string   `json:"error"`
			Libraries []string `json:"libraries"`
			Devices   []struct {
				Name               string `json:"name"`
				Arch               string `json:"arch"`
				Multiprocessors    int    `json:"multiprocessors"`
				MaxThreadsPerBlock int    `json:"max_threads_per_block"`
				WarpSize           int    `json:"warp_size"`
				TotalMemory        uint64 `json:"total_memory_bytes"`
				UnifiedMemory      bool   `json:"unified_memory"`
			} `json:"devices"`
		} `json:"backends"`
	}
	// Strict decoding: the output has exactly the fields above, no more.
	dec := json.NewDecoder(strings.NewReader(stdout))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&rep), stdout)
	assert.NotEmpty(t, rep.GOOS)
	assert.NotEmpty(t, rep.GOARCH)
	assert.Equal(t, 2, rep.StreamContract)

	// Every registered backend appears, in "auto" order, and the CPU device is found.
	var names []string
	for _, b := range rep.Backends {
		names = append(names, b.Backend)
		if b.Available {
			assert.Empty(t, b.Error, b.Backend)
			assert.NotEmpty(t, b.Devices, b.Backend)
		} else {
			assert.NotEmpty(t, b.Error, "%s: an unavailable backend says why", b.Backend)
		}
		assert.NotNil(t, b.Libraries, "libraries is a list, never null")
	}
	var want []string
	for _, b := range runtime.Backends() {
		want = append(want, string(b))
	}
	assert.Equal(t, want, names)
	require.Contains(t, names, "cpu")
	for _, b := range rep.Backends {
		if b.Backend != "cpu" {
			continue
		}
		require.True(t, b.Available, b.Error)
		require.Len(t, b.Devices, 1)
		d := b.Devices[0]
		assert.Equal(t, "go", d.Arch)
		assert.Equal(t, 1, d.WarpSize)
		assert.True(t, d.UnifiedMemory)
		assert.Positive(t, d.Multiprocessors)
		assert.Positive(t, d.MaxThreadsPerBlock)
		assert.NotEmpty(t, d.Name)
	}
}

func TestInfoTable(t *testing.T) {
	code, stdout, stderr := runCLI("info")
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, stdout, "random stream contract v2")
	assert.Contains(t, stdout, "cpu: 1 device(s)")
}

func TestCollectInfo(t *testing.T) {
	probes := []runtime.ProbeResult{
		{Backend: runtime.CUDA, Err: errors.New("libcuda not found;\n  tried libcuda.so.1")},
		{Backend: runtime.HIP},
		{
			Backend:   runtime.Metal,
			Libraries: []string{"/a/Metal"},
			Devices: []runtime.DeviceInfo{
				{Name: "GPU 0", Arch: "apple9", Multiprocessors: 10, WarpSize: 32, MaxThreadsPerBlock: 1024, Libraries: []string{"/a/Metal", "/b/Foundation"}},
				{Name: "GPU 1", Arch: "apple9", Libraries: []string{"/b/Foundation"}},
			},
		},
	}
	rep := collectInfo(probes)
	require.Len(t, rep.Backends, 3)

	cuda, hip, metal := rep.Backends[0], rep.Backends[1], rep.Backends[2]
	assert.False(t, cuda.Available)
	assert.Contains(t, cuda.Error, "libcuda not found")
	assert.Equal(t, []string{}, cuda.Libraries)
	assert.Equal(t, []deviceReport{}, cuda.Devices)

	assert.False(t, hip.Available, "no error but no devices is not available")
	assert.Equal(t, "no devices", hip.Error)

	assert.True(t, metal.Available)
	assert.Equal(t, []string{"/a/Metal", "/b/Foundation"}, metal.Libraries, "libraries of the backend and its devices, once each")
	require.Len(t, metal.Devices, 2)
	assert.Equal(t, deviceReport{Name: "GPU 0", Arch: "apple9", Multiprocessors: 10, WarpSize: 32, MaxThreadsPerBlock: 1024}, metal.Devices[0])

	var table strings.Builder
	require.NoError(t, printInfo(&table, rep))
	out := table.String()
	assert.Contains(t, out, "cuda: not available: libcuda not found; tried libcuda.so.1", "a multi-line reason is printed on one line")
	assert.Contains(t, out, "hip: not available: no devices")
	assert.Contains(t, out, "metal: 2 device(s)")
	assert.Contains(t, out, "GPU 0")
	assert.Contains(t, out, "library /b/Foundation")
}
