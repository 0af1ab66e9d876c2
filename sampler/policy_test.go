package sampler

import (
	"testing"

	"github.com/gumbel-go/gumbel/runtime"
	"github.com/stretchr/testify/assert"
)

func TestBlocksPerRow(t *testing.T) {
	cpu8 := DefaultSplitPolicy(runtime.DeviceInfo{Backend: runtime.CPU, Multiprocessors: 8})
	h200 := DefaultSplitPolicy(runtime.DeviceInfo{Backend: runtime.CUDA, Multiprocessors: 132})
	hip := DefaultSplitPolicy(runtime.DeviceInfo{Backend: runtime.HIP, Multiprocessors: 96})
	tests := []struct {
		name        string
		policy      SplitPolicy
		rows, vocab int
		want        int
	}{
		{"zero policy never splits", SplitPolicy{}, 1, 151936, 1},
		{"cpu: one row, huge vocab: one block per worker", cpu8, 1, 1 << 22, 8},
		{"cpu: blocks of at least 256K elements", cpu8, 1, 5 * 262144, 5},
		{"cpu: an LLM vocabulary stays whole", cpu8, 1, 151936, 1},
		{"cpu: small vocab", cpu8, 1, 524287, 1},
		{"cpu: smallest split vocab", cpu8, 1, 524288, 2},
		{"cpu: two rows share the workers", cpu8, 2, 1 << 22, 4},
		{"cpu: three rows round down", cpu8, 3, 1 << 22, 2},
		{"cpu: batch fills the workers", cpu8, 8, 151936, 1},
		{"cpu: batch larger than the workers", cpu8, 100, 151936, 1},
		{"gpu: one row: a block per SM", h200, 1, 151936, 132},
		{"gpu: four rows", h200, 4, 151936, 33},
		{"gpu: eight rows", h200, 8, 151936, 16},
		{"gpu: 64 rows take two blocks each (H200 sweep)", h200, 64, 151936, 2},
		{"gpu: 67 rows: a second block per row would start a second wave", h200, 67, 151936, 1},
		{"gpu: sixteen rows", h200, 16, 151936, 8},
		{"gpu: batch fills the device", h200, 132, 151936, 1},
		{"gpu: small vocab", h200, 1, 4095, 1},
		{"gpu: 8K vocab still splits, 1024 elements a block", h200, 1, 8192, 8},
		{"gpu: large vocab: one block per SM", h200, 1, 1 << 30, 132},
		{"cap of 1024 blocks per row", SplitPolicy{TargetBlocks: 5000, MaxBlocksPerRow: gpuMaxBlocksPerRow}, 1, 1 << 30, 1024},
		{"hip: 128 blocks per row", hip, 8, 151936, 128},
		{"hip: 64 rows still split", hip, 64, 151936, 128},
		{"hip: 65 rows take one block each", hip, 65, 151936, 1},
		{"hip: V below 4096", hip, 1, 4095, 1},
		{"cap per row", SplitPolicy{TargetBlocks: 1000, MaxBlocksPerRow: 7}, 1, 1000, 7},
		{"no more blocks than elements", SplitPolicy{TargetBlocks: 1000}, 1, 10, 10},
		{"no rows", cpu8, 0, 151936, 1},
		{"negative rows", cpu8, -3, 151936, 1},
		{"no vocab", SplitPolicy{TargetBlocks: 10}, 1, 0, 1},
		{"negative fields impose nothing", SplitPolicy{MinVocab: -1, MaxRows: -1, TargetBlocks: 6, MinElementsPerBlock: -1, MaxBlocksPerRow: -1}, 2, 100, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, tc.policy.BlocksPerRow(tc.rows, tc.vocab))
		})
	}
}

func TestDefaultSplitPolicy(t *testing.T) {
	tests := []struct {
		name string
		info runtime.DeviceInfo
		want SplitPolicy
	}{
		{"cpu", runtime.DeviceInfo{Backend: runtime.CPU, Multiprocessors: 4},
			SplitPolicy{MinVocab: 524288, MaxRows: 4, TargetBlocks: 4, MinElementsPerBlock: 262144, MaxBlocksPerRow: 4}},
		{"cpu with unknown workers", runtime.DeviceInfo{Backend: runtime.CPU},
			SplitPolicy{MinVocab: 524288, MaxRows: 1, TargetBlocks: 1, MinElementsPerBlock: 262144, MaxBlocksPerRow: 1}},
		{"cuda", runtime.DeviceInfo{Backend: runtime.CUDA, Multiprocessors: 132},
			SplitPolicy{MinVocab: 4096, MaxRows: 132, TargetBlocks: 132, MinElementsPerBlock: 1024, MaxBlocksPerRow: 1024}},
		{"hip: the RX 7900 XTX tuning", runtime.DeviceInfo{Backend: runtime.HIP, Multiprocessors: 96},
			SplitPolicy{MinVocab: 4096, MaxRows: 65, TargetBlocks: 8192, MinElementsPerBlock: 1024, MaxBlocksPerRow: 128}},
		{"metal", runtime.DeviceInfo{Backend: runtime.Metal, Multiprocessors: 10},
			SplitPolicy{MinVocab: 4096, MaxRows: 10, TargetBlocks: 10, MinElementsPerBlock: 1024, MaxBlocksPerRow: 1024}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, DefaultSplitPolicy(tc.info))
		})
	}
}
