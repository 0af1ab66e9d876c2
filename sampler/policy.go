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

// Thresholds of the GPU policy.
//
// INITIAL GUESS, to be replaced by H200 measurements (the lead measures
// BenchmarkSample and the bench/ sweeps on the H200 and updates these numbers and this
// comment). The reasoning behind the guess: a 1024-thread block per SM pair of
// residency slots (2048 threads per SM on Hopper and Ampere), so two blocks per SM
// fill the chip; a block should get at least two elements per thread before its
// partial and reduction overhead pays for itself; a row smaller than 16K elements is
// done by one block in about the time of a launch.
const (
	gpuMinVocab            = 16384
	gpuBlocksPerSM         = 2
	gpuMinElementsPerBlock = 2048
	gpuMaxBlocksPerRow     = 1024
)

// Thresholds of the CPU device policy: one block per worker goroutine (more blocks only
// queue behind each other), no block under about 16K elements (below that the
// goroutine hand-off and the partial pass cost more than the noise of the elements
// saved), and no split once the batch gives every worker a row of its own.
const (
	cpuMinElementsPerBlock = 16384
	cpuMinVocab            = 2 * cpuMinElementsPerBlock
)

// DefaultSplitPolicy returns the split policy for a device: the CPU device's from its
// worker count, every GPU's from its multiprocessor count.
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
// to reach TargetBlocks in all, within MinElementsPerBlock and MaxBlocksPerRow. The
// answer is at least 1 and at most vocab.
func (p SplitPolicy) BlocksPerRow(rows, vocab int) int {
	if rows < 1 || vocab < 1 || vocab < p.MinVocab || (p.MaxRows > 0 && rows >= p.MaxRows) {
		return 1
	}
	s := (max(p.TargetBlocks, 1) + rows - 1) / rows
	if p.MinElementsPerBlock > 0 {
		s = min(s, vocab/p.MinElementsPerBlock)
	}
	if p.MaxBlocksPerRow > 0 {
		s = min(s, p.MaxBlocksPerRow)
	}
	return max(min(s, vocab), 1)
}
