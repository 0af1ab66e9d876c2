package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// peerJSON is a peer report as bench/peers/torch_peers.py writes it, for the tiny matrix.
const peerJSON = `{"backend": "torch", "notes": [], "measurements": [
 {"route": "torch.gumbel-eager", "dtype": "float32", "vocab": 2048, "batch": 1, "device_us": 12.5, "host_us": 80, "allocs_per_call": 0, "token": 5, "graph": true},
 {"route": "torch.sort-topk50-topp0.9", "dtype": "bfloat16", "vocab": 2048, "batch": 3, "device_us": 90, "host_us": 300, "allocs_per_call": 0, "token": 7, "graph": false}]}`

func TestBenchCompareOnCPU(t *testing.T) {
	dir := t.TempDir()
	peers := filepath.Join(dir, "peers.json")
	require.NoError(t, os.WriteFile(peers, []byte(peerJSON), 0o644))
	chart := filepath.Join(dir, "chart.svg")

	code, stdout, stderr := runCLI(append(tinyBench, "--compare", peers, "--chart", chart)...)
	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	assert.Contains(t, stdout, "| dtype | vocab | batch | greedy | gumbel-split | topk50-topp0.9 |", "the run's own tables stay")
	assert.Contains(t, stdout, "| vocab | batch | gumbel-split | greedy | topk50-topp0.9 | torch.gumbel-eager | torch.sort-topk50-topp0.9 | "+
		"torch.gumbel-eager / gumbel-split | torch.sort-topk50-topp0.9 / topk50-topp0.9 |")
	assert.Regexp(t, `\| 2048 \| 1 \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| 12\.50 \| – \| [0-9.]+x \| – \|`, stdout)
	assert.Regexp(t, `\| 2048 \| 3 \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| – \| 90\.00 \| – \| [0-9.]+x \|`, stdout)
	assert.Contains(t, stderr, "wrote "+chart)
	svg, err := os.ReadFile(chart)
	require.NoError(t, err)
	assert.Contains(t, string(svg), "torch.gumbel-eager")
	assert.Contains(t, string(svg), "gumbel-split")

	code, stdout, stderr = runCLI(append(tinyBench, "--compare", peers, "--json")...)
	require.Equal(t, exitOK, code, stderr)
	var rep benchReport
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep), stdout)
	assert.Len(t, rep.Measurements, 12)
	require.Len(t, rep.Peers, 2)
	assert.Equal(t, 90.0, rep.Peers[1].DeviceUs)
}

func TestBenchCompareBadFile(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"backend": "torch"}`), 0o644))
	tests := []struct {
		name, file, wantErr string
	}{
		{"missing", filepath.Join(t.TempDir(), "none.json"), "--compare: open"},
		{"no measurements", bad, `--compare: ` + bad + `: no "measurements" array`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(append(tinyBench, "--compare", tc.file)...)
			assert.Equal(t, exitFailure, code)
			assert.Empty(t, stdout, "nothing measured before the file is read")
			assert.Contains(t, stderr, tc.wantErr)
		})
	}
}
