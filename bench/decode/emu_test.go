package decode

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gumbel-go/gumbel/internal/testenv"
	"github.com/stretchr/testify/require"
)

// TestCUDAEditionUnderEmulation builds testdata/emu_driver.cpp with the CUDA edition
// under kernelsrc/emu/cuda_emu.h (CUDA threads, shared memory and warp shuffles on CPU
// threads) and requires every kernel to agree with a float64 host computation.
func TestCUDAEditionUnderEmulation(t *testing.T) {
	gxx := testenv.GXX(t, "the decode kernels' CPU emulation")
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "decode.cu"), []byte(cudaSource), 0o644))
	emu, err := filepath.Abs(filepath.Join("..", "..", "kernelsrc", "emu"))
	require.NoError(t, err)
	exe := filepath.Join(dir, "emu_driver")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, gxx, "-std=c++20", "-O1", "-ffp-contract=off", "-pthread",
		"-Wall", "-Wno-unknown-pragmas", "-I", dir, "-I", emu, "-o", exe, filepath.Join("testdata", "emu_driver.cpp")).CombinedOutput()
	require.NoError(t, err, "g++:\n%s", out)
	require.Empty(t, string(out), "g++ warnings")
	out, err = exec.CommandContext(ctx, exe).CombinedOutput()
	require.NoError(t, err, "emulation driver:\n%s", out)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	t.Log("\n" + string(out))
	require.Len(t, lines, 20, "one ok line per case")
	for _, l := range lines {
		require.True(t, strings.HasPrefix(l, "ok "), l)
	}
}
