package sampler

import "github.com/gumbel-go/gumbel/runtime"

// SplitPolicy decides how many blocks share one row of a gumbel_argmax launch (the split
// phase). Every threshold of that decision lives here. Tokens never depend on the
// answer: partials carry global indices, so any split gives the bit-identical token.
//
// A field at zero (or negative) imposes nothing, except TargetBlocks, whose zero means
// one block in all: the zero SplitPolicy never splits.
type SplitPolicy struct {
	// MinVocab is the smallest vocabulary that is split; smaller rows take one block,
	// because the extra partial pass costs more than the block saves.
	MinVocab int
	// MaxRows is the batch size from which rows are no longer split: the batch alone
	// fills the device with one block per row.
	MaxRows int
	// TargetBlocks is how many blocks a launch aims for in all (rows x blocks per
	// row): enough to occupy the whole device.
	TargetBlocks int
	// MinElementsPerBlock is the fewest vocabulary elements worth one block; a row is
	// never cut into pieces smaller than this.
	MinElementsPerBlock int
	// MaxBlocksPerRow caps the blocks of one row.
	MaxBlocksPerRow int
}

// Thresholds of the GPU policy, chosen from a sweep of blocks per row (1 to 256) over
// vocab {8K, 16K, 32K, 64K, 152K} x batch {1 ... 128} on an NVIDIA H200 (132 SMs;
// `gumbel bench --split-sweep` measures it again).
// The sampling kernel runs one 1024-thread block per SM, and the fastest split was,
// at every vocabulary from 8K up, the one that gives the launch about one block per
// SM: batch 1 -> 128 blocks per row, 4 -> 32, 8 -> 16, 16 -> 8, 32 -> 4, 64 -> 2,
// 128 -> 1 (a second wave of blocks costs more than it spreads). Splitting paid even at
// V = 8192 (7.4 µs against 8.6 at batch 1); pieces under about 1024 elements (one per
// thread) stopped paying.
const (
	gpuMinVocab            = 4096
	gpuBlocksPerSM         = 1
	gpuMinElementsPerBlock = 1024
	gpuMaxBlocksPerRow     = 1024
)

// Thresholds of the HIP policy: the tuning measured on an AMD RX 7900 XTX (96 CUs,
// RDNA3, wave32) that the HIP backend starts from (not re-measured here: no AMD GPU):
// 128 blocks of 1024 threads per row, one block per row when V < 4096 or the batch
// exceeds 64 rows.
const (
	hipMinVocab     = 4096
	hipMaxSplitRows = 64
	hipBlocksPerRow = 128
)

// Thresholds of the CPU device policy: one block per worker goroutine (more blocks only
// queue behind each other), no block under 256K elements, and no split once the batch
// gives every worker a row of its own: waking a helper goroutine costs more than the
// vector scans take for half an LLM-sized row (docs/benchmark_results/cpu.md, "One block
// per row on the CPU").
const (
	cpuMinElementsPerBlock = 262144
	cpuMinVocab            = 2 * cpuMinElementsPerBlock
)

// DefaultSplitPolicy returns the split policy for a device: the CPU device's from its
// worker count, HIP's from the RX 7900 XTX tuning, every other GPU's from its
// multiprocessor count.
func DefaultSplitPolicy(info runtime.DeviceInfo) SplitPolicy {
	units := max(info.Multiprocessors, 1)
	if info.Backend == runtime.CPU {
		return SplitPolicy{
			MinVocab:            cpuMinVocab,
			MaxRows:             units,
			TargetBlocks:        units,
			MinElementsPerBlock: cpuMinElementsPerBlock,
			MaxBlocksPerRow:     units,
		}
	}
	if info.Backend == runtime.HIP {
		return SplitPolicy{
			MinVocab:            hipMinVocab,
			MaxRows:             hipMaxSplitRows + 1,
			TargetBlocks:        hipBlocksPerRow * hipMaxSplitRows,
			MinElementsPerBlock: gpuMinElementsPerBlock,
			MaxBlocksPerRow:     hipBlocksPerRow,
		}
	}
	return SplitPolicy{
		MinVocab:            gpuMinVocab,
		MaxRows:             units,
		TargetBlocks:        gpuBlocksPerSM * units,
		MinElementsPerBlock: gpuMinElementsPerBlock,
		MaxBlocksPerRow:     gpuMaxBlocksPerRow,
	}
}

// BlocksPerRow returns how many blocks each of rows rows of vocab elements gets: one
// when the vocabulary is small or the batch alone fills the device; otherwise enough
// to reach TargetBlocks in all without passing it, within MinElementsPerBlock and MaxBlocksPerRow. The
// answer is at least 1 and at most vocab.
func (p SplitPolicy) BlocksPerRow(rows, vocab int) int {
	if rows < 1 || vocab < 1 || vocab < p.MinVocab || (p.MaxRows > 0 && rows >= p.MaxRows) {
		return 1
	}
	// Round down: blocks past TargetBlocks form a second wave that finishes later
	// than the first (measured: batch 64 at V = 152K took 43 µs with 2 blocks per row
	// on 132 SMs and 52 µs with 4).
	s := max(p.TargetBlocks, 1) / rows
	if p.MinElementsPerBlock > 0 {
		s = min(s, vocab/p.MinElementsPerBlock)
	}
	if p.MaxBlocksPerRow > 0 {
		s = min(s, p.MaxBlocksPerRow)
	}
	return max(min(s, vocab), 1)
}
