package emu

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// gumbelVariants are the -D settings of sampling.cu's gumbel_argmax variants (see the
// GB_* macros there) that the lead times on the GPU; each must give the Go edition's
// tokens. GB_MIN_BLOCKS only changes __launch_bounds__, which the emulation ignores.
var gumbelVariants = []struct {
	name    string
	defines []string
}{
	{"one group, warp bound (closest to the previous kernel)", []string{"-DGB_BLOCK_BOUND=0"}},
	{"two groups, block bound, prefetch", []string{"-DGB_GROUPS=2"}},
	{"two groups, warp bound", []string{"-DGB_GROUPS=2", "-DGB_BLOCK_BOUND=0"}},
	{"two groups, no prefetch", []string{"-DGB_GROUPS=2", "-DGB_PREFETCH=0"}},
	{"three groups", []string{"-DGB_GROUPS=3"}},
	{"four groups, no prefetch", []string{"-DGB_GROUPS=4", "-DGB_PREFETCH=0"}},
	{"four groups, prefetch, warp bound", []string{"-DGB_GROUPS=4", "-DGB_BLOCK_BOUND=0"}},
	{"tile bound", []string{"-DGB_TILE_BOUND=1"}},
	{"log loop", []string{"-DGB_LOG_LOOP=1"}},
	{"tile bound, log loop", []string{"-DGB_TILE_BOUND=1", "-DGB_LOG_LOOP=1"}},
	{"tile bound, log loop, two groups", []string{"-DGB_TILE_BOUND=1", "-DGB_LOG_LOOP=1", "-DGB_GROUPS=2"}},
	{"tile bound, four groups, no prefetch", []string{"-DGB_TILE_BOUND=1", "-DGB_GROUPS=4", "-DGB_PREFETCH=0"}},
}

// TestGumbelVariantsMatchGoEdition runs the comparison workload under every variant (the
// default build, TestCUDAEditionMatchesGoEdition, covers the defaults).
func TestGumbelVariantsMatchGoEdition(t *testing.T) {
	// The whole workload: the comparison also checks that every path was taken.
	ls := testLaunches(rand.New(rand.NewPCG(20240601, 8)), emuShape)
	job := encodeJob(t, ls)
	for _, v := range gumbelVariants {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			exe, log, err := buildDriver(t, v.defines...)
			require.NoError(t, err, "building the emulation driver with %v:\n%s", v.defines, log)
			require.Empty(t, log, "g++ warnings with %v", v.defines)
			got := decodeResults(t, runDriverExe(t, exe, job), ls)
			compareWithGo(t, "emulated CUDA edition "+strings.Join(v.defines, " "), ls, got)
		})
	}
}

// TestGumbelVariantMacrosReachTheSource proves that the variant builds above really
// compile sampling.cu under their macros: an out-of-range value is refused by name.
func TestGumbelVariantMacrosReachTheSource(t *testing.T) {
	for _, groups := range []string{"0", "5"} {
		_, log, err := buildDriver(t, "-DGB_GROUPS="+groups)
		require.Error(t, err, "GB_GROUPS=%s compiled", groups)
		require.Contains(t, log, "GB_GROUPS must be 1, 2, 3 or 4")
	}
	_, log, err := buildDriver(t, "-DGB_TILE_BOUND=1", "-DGB_BLOCK_BOUND=0")
	require.Error(t, err, "GB_TILE_BOUND without GB_BLOCK_BOUND compiled")
	require.Contains(t, log, "GB_TILE_BOUND needs GB_BLOCK_BOUND")
}
