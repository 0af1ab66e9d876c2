package philox

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestUnnamedRowSeed(t *testing.T) {
	tests := []struct {
		name        string
		samplerSeed uint64
	}{
		{"sampler seed 0", 0},
		{"sampler seed 77", 77},
		{"sampler seed all ones", ^uint64(0)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			seen := make(map[uint64]uint64)
			for n := uint64(0); n < 1<<12; n++ {
				s := UnnamedRowSeed(tc.samplerSeed, n)
				prev, dup := seen[s]
				assert.False(t, dup, "rows %d and %d share seed %#x", prev, n, s)
				seen[s] = n
				// Separate from the request-id seeds of the same sampler seed.
				assert.NotEqual(t, RowSeed(tc.samplerSeed, n), s, "row %d", n)
			}
			assert.NotEqual(t, UnnamedRowSeed(tc.samplerSeed, 1), UnnamedRowSeed(tc.samplerSeed+1, 1), "the sampler seed has no effect")
		})
	}
}

// RowSeed is part of the stream contract: request-id rows keep their streams.
func TestRowSeedUnchanged(t *testing.T) {
	assert.Equal(t, SplitMix64(77^SplitMix64(3)), RowSeed(77, 3))
}
