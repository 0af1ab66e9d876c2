package sampler

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"os"
	"strings"

	"github.com/gumbel-go/gumbel/runtime"
)

// Options configure a [Sampler]. The zero value is a working configuration: switches
// from the environment, the device's default stream, the device's default split policy
// and the widest block the kernels allow (up to 1024 threads).
type Options struct {
	// Seed is the sampler seed: a row without its own seed samples with
	// philox.RowSeed(Seed, Params.RequestID), and a row with neither a seed nor a
	// request id with philox.UnnamedRowSeed(Seed, n), n counting such rows of the
	// sampler. 0 (the default) means fresh randomness: New draws the sampler seed from
	// crypto/rand, so two samplers, and two runs of a program, draw different tokens for
	// rows without their own seed. Settings().Seed reports the seed drawn; pass it back
	// as Seed to reproduce a run (for tests, or to replay a bug), or set any nonzero
	// Seed to fix it. Rows with their own seed (Params.Seed) never depend on it.
	Seed uint64
	// HasSeed fixes the sampler seed to Seed even when Seed is 0 (the default sampler
	// seed of earlier versions, whose streams it reproduces). A nonzero Seed is fixed
	// without it.
	HasSeed bool
	// Gumbel chooses Gumbel-max for rows with temperature > 0 and no filter. FromEnv
	// (the default) reads MLXCEL_SAMPLING_GUMBEL, where "0" means off. Off sends those
	// rows to the categorical path (the kill switch); greedy rows stay greedy.
	Gumbel Switch
	// Split allows the split phase: several blocks per row for gumbel_argmax launches,
	// as many as Policy says. FromEnv (the default) reads VT_SAMPLE_SPLIT, where "0"
	// means off. Off launches one block per row. Tokens never depend on it.
	Split Switch
	// Stream is the stream the sampler queues its work on; nil means the device's
	// default stream. The sampler never closes it.
	Stream runtime.Stream
	// Policy decides how many blocks share a row in the split phase; nil means
	// DefaultSplitPolicy(dev.Info()).
	Policy *SplitPolicy
	// BlockSize is the threads per block of every launch; 0 means min(1024, the
	// kernel's MaxThreadsPerBlock). A non-zero value must be a multiple of the device's
	// warp size; it is lowered to a kernel's MaxThreadsPerBlock where that is smaller.
	// Tokens never depend on it.
	BlockSize int
}

// DefaultBlockSize is the block width the sampler asks for: wide per-row blocks (one
// small block per row leaves most of a GPU idle).
const DefaultBlockSize = 1024

// Settings are the sampler's resolved options: what the switches, policy and block size
// became once the environment and the device were consulted.
type Settings struct {
	// Seed is the sampler seed in force: Options.Seed when it is fixed (nonzero, or
	// Options.HasSeed), else the fresh seed New drew, which is never 0, so that
	// Options{Seed: Settings().Seed} reproduces this sampler's streams.
	Seed uint64
	// Gumbel is true when unfiltered sampled rows take Gumbel-max.
	Gumbel bool
	// Split is true when the split phase may spread a row over several blocks.
	Split bool
	// Policy is the split policy in force.
	Policy SplitPolicy
	// GumbelBlockSize and CategoricalBlockSize are the threads per block of each
	// kernel's launches.
	GumbelBlockSize, CategoricalBlockSize int
}

// resolveSeed returns the sampler seed: Options.Seed when it is fixed, else a fresh
// nonzero seed from crypto/rand. It is called once, by New: the hot path draws no
// randomness from the system.
func (o Options) resolveSeed() (uint64, error) {
	if o.Seed != 0 || o.HasSeed {
		return o.Seed, nil
	}
	var b [8]byte
	for {
		if _, err := rand.Read(b[:]); err != nil {
			return 0, fmt.Errorf("gumbel/sampler: drawing a fresh sampler seed: %w", err)
		}
		if seed := binary.LittleEndian.Uint64(b[:]); seed != 0 {
			return seed, nil
		}
	}
}

// resolve turns a Switch into on or off, consulting env for FromEnv.
func (sw Switch) resolve(env string) (bool, error) {
	switch sw {
	case On:
		return true, nil
	case Off:
		return false, nil
	case FromEnv:
		return strings.TrimSpace(os.Getenv(env)) != "0", nil
	}
	return false, fmt.Errorf("gumbel/sampler: switch for %s has unknown value %d (want FromEnv, On or Off)", env, sw)
}

// blockSize returns the block width for a kernel whose limit is kernelMax on a device
// with the given warp size: the requested width (or DefaultBlockSize), lowered to the
// kernel's limit and rounded down to a whole number of warps.
func blockSize(requested, kernelMax, warp int) (int, error) {
	if warp < 1 {
		warp = 1
	}
	if requested < 0 || requested%warp != 0 {
		return 0, fmt.Errorf("gumbel/sampler: block size %d must be a positive multiple of the warp size %d (or 0 for the default)", requested, warp)
	}
	want := requested
	if want == 0 {
		want = DefaultBlockSize
	}
	want = min(want, kernelMax)
	want -= want % warp
	if want < 1 {
		return 0, fmt.Errorf("gumbel/sampler: kernel allows %d threads per block, less than one warp of %d", kernelMax, warp)
	}
	return want, nil
}
