package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
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

// Two peer files, the torch script's and the FlashInfer harness's (bench/testdata), given
// as a list: the filter routes meet their FlashInfer counterparts in a table of their own.
func TestBenchCompareFlashInferOnCPU(t *testing.T) {
	torch := filepath.Join(t.TempDir(), "peers.json")
	require.NoError(t, os.WriteFile(torch, []byte(peerJSON), 0o644))
	fi := filepath.Join("..", "..", "bench", "testdata", "flashinfer_peers.json")
	args := []string{"bench", "--backend", "cpu", "--route", "greedy,filters", "--dtype", "float32",
		"--vocab", "2048", "--batch", "1,3", "--groups", "2", "--repeats", "2", "--calls", "3", "--warmup", "1",
		"--compare", torch + "," + fi}

	code, stdout, stderr := runCLI(args...)
	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	assert.Contains(t, stderr, "[16/16] ", "greedy and the seven filter routes, two batches")
	assert.Contains(t, stdout, "| dtype | vocab | batch | greedy | topk50-topp0.9 | topk40-topp0.9 | topk50 | topp0.95 | minp0.05 | gumbel-split | categorical |")
	assert.Contains(t, stdout, ", torch peers\n\n| vocab | batch | gumbel-split | greedy | topk50-topp0.9 | torch.gumbel-eager | torch.sort-topk50-topp0.9 |")
	assert.Contains(t, stdout, ", flashinfer peers\n\n| vocab | batch | gumbel-split | greedy | topk50-topp0.9 | topk50 | topp0.95 | minp0.05 | "+
		"flashinfer:sampling_from_logits | flashinfer:softmax+sampling_from_probs | flashinfer:softmax+top_k_top_p | "+
		"flashinfer:softmax+top_k | flashinfer:softmax+top_p | flashinfer:softmax+min_p | flashinfer:sampling_from_logits / gumbel-split |")
	num, ratio := `[0-9.]+`, `[0-9.]+x`
	row := `\| 2048 \| 1 \|` + strings.Repeat(` `+num+` \|`, 6) + ` 20\.00 \| 12\.00 \| 15\.00 \| 14\.00 \| 13\.00 \| 12\.50 \|` + strings.Repeat(` `+ratio+` \|`, 6)
	assert.Regexp(t, row, stdout)

	code, stdout, stderr = runCLI(append(args, "--json", "--compare", torch)...)
	require.Equal(t, exitOK, code, stderr)
	var rep benchReport
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep), stdout)
	assert.Len(t, rep.Measurements, 16)
	assert.Len(t, rep.Peers, 2+8+2, "every file's measurements, the repeated flag's too")
}

// cpuPeersJSON is what bench/peers/cpu/llamacpp.sh and bench/peers/cpu/ollama write, for
// one point.
const cpuPeersJSON = `{"backend": "cpu", "peer": "llama.cpp-style", "threads": 1, "temperature": 0.8, "measurements": [
  {"route": "llamacpp:greedy", "vocab": 2048, "batch": 1, "dtype": "float32", "device_us": 1.5, "host_us": 1.5, "allocs_per_call": 0, "token": 3},
  {"route": "llamacpp:temp+dist", "vocab": 2048, "batch": 1, "dtype": "float32", "device_us": 14, "host_us": 14, "allocs_per_call": 0, "token": 3},
  {"route": "llamacpp:topk40-topp0.9", "vocab": 2048, "batch": 1, "dtype": "float32", "device_us": 2.5, "host_us": 2.5, "allocs_per_call": 0, "token": 3},
  {"route": "llamacpp:minp0.05", "vocab": 2048, "batch": 1, "dtype": "float32", "device_us": 3.5, "host_us": 3.5, "allocs_per_call": 0, "token": 3},
  {"route": "ollama:greedy", "vocab": 2048, "batch": 1, "dtype": "float32", "device_us": 1.25, "host_us": 1.25, "allocs_per_call": 0, "token": 3},
  {"route": "ollama:topk40-topp0.9", "vocab": 2048, "batch": 1, "dtype": "float32", "device_us": 4.5, "host_us": 4.5, "allocs_per_call": 2, "token": 3}]}`

// The CPU device against the llama.cpp-style and ollama-style CPU samplers: each family
// gets its table, each peer its ratio to the gumbel route of its filter.
func TestBenchCompareCPUPeers(t *testing.T) {
	peers := filepath.Join(t.TempDir(), "cpu.json")
	require.NoError(t, os.WriteFile(peers, []byte(cpuPeersJSON), 0o644))
	code, stdout, stderr := runCLI("bench", "--backend", "cpu", "--route", "greedy,gumbel-split,topk40-topp0.9,minp0.05",
		"--dtype", "float32", "--vocab", "2048", "--batch", "1", "--groups", "2", "--repeats", "2", "--calls", "3", "--warmup", "1",
		"--compare", peers)
	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	assert.Contains(t, stdout, ", llamacpp peers\n\n| vocab | batch | gumbel-split | greedy | topk40-topp0.9 | minp0.05 | "+
		"llamacpp:greedy | llamacpp:temp+dist | llamacpp:topk40-topp0.9 | llamacpp:minp0.05 | "+
		"llamacpp:greedy / greedy | llamacpp:temp+dist / gumbel-split | llamacpp:topk40-topp0.9 / topk40-topp0.9 | llamacpp:minp0.05 / minp0.05 |")
	assert.Contains(t, stdout, ", ollama peers\n\n| vocab | batch | gumbel-split | greedy | topk40-topp0.9 | "+
		"ollama:greedy | ollama:topk40-topp0.9 | ollama:greedy / greedy | ollama:topk40-topp0.9 / topk40-topp0.9 |")
	num, ratio := `[0-9.]+`, `[0-9.]+x`
	assert.Regexp(t, `\| 2048 \| 1 \| `+num+` \| `+num+` \| `+num+` \| `+num+` \| 1\.50 \| 14\.00 \| 2\.50 \| 3\.50 \|`+
		strings.Repeat(` `+ratio+` \|`, 4), stdout)
	assert.Regexp(t, `\| 2048 \| 1 \| `+num+` \| `+num+` \| `+num+` \| 1\.25 \| 4\.50 \| `+ratio+` \| `+ratio+` \|`, stdout)
}

// The bitmask routes on the CPU device: the matrix, the table of each mask's cost against
// its unmasked route, and the PyTorch bitmask peer set against the fused masked step with
// the unfused form beside it.
func TestBenchBitmaskOnCPU(t *testing.T) {
	dir := t.TempDir()
	peers := filepath.Join(dir, "peers.json")
	require.NoError(t, os.WriteFile(peers, []byte(`{"backend": "torch", "measurements": [
 {"route": "torch.exponential-race", "dtype": "float32", "vocab": 2048, "batch": 3, "device_us": 40, "host_us": 90, "allocs_per_call": 0, "token": 5, "graph": true},
 {"route": "torch.bitmask-exponential-race", "dtype": "float32", "vocab": 2048, "batch": 3, "device_us": 95, "host_us": 150, "allocs_per_call": 0, "token": 5, "graph": true}]}`), 0o644))
	code, stdout, stderr := runCLI("bench", "--backend", "cpu", "--route", "bitmask", "--dtype", "float32", "--vocab", "2048", "--batch", "1,3",
		"--groups", "2", "--repeats", "2", "--calls", "3", "--warmup", "1", "--compare", peers, "--out", dir)
	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	assert.Contains(t, stdout, "| dtype | vocab | batch | greedy | greedy+bitmask | gumbel-split | gumbel+bitmask |")
	assert.Contains(t, stdout, "\nDevice time per step with a token bitmask (µs, median; in brackets the cost against the unmasked route)\n\n"+
		"| dtype | vocab | batch | greedy+bitmask | gumbel+bitmask | gumbel+bitmask-host | gumbel+bitmask-unfused | topk50-topp0.9+bitmask | "+
		"categorical+bitmask | gumbel-batch-launch+bitmask | gumbel+bitmask-unfused / gumbel+bitmask |")
	assert.Regexp(t, `\| float32 \| 2048 \| 3 \|( [0-9.]+ \([+-][0-9.]+%\) \|){7} [0-9.]+x \|`, stdout)
	assert.Contains(t, stdout, "| vocab | batch | gumbel-split | greedy | topk50-topp0.9 | gumbel+bitmask | gumbel+bitmask-unfused | "+
		"torch.exponential-race | torch.bitmask-exponential-race | torch.exponential-race / gumbel-split | torch.bitmask-exponential-race / gumbel+bitmask |")
	assert.Regexp(t, `\| 2048 \| 3 \|( [0-9.]+ \|){5} 40\.00 \| 95\.00 \| [0-9.]+x \| [0-9.]+x \|`, stdout)
	assert.Contains(t, stderr, "[24/24] gumbel-batch-launch+bitmask float32 V=2048 B=3 ... device ")
	md, err := os.ReadFile(filepath.Join(dir, "matrix.md"))
	require.NoError(t, err)
	assert.Equal(t, stdout, string(md))
}
