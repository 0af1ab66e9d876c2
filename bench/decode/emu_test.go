package decode

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
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
	exe := buildEmulation(t, gxx)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, exe).CombinedOutput()
	require.NoError(t, err, "emulation driver:\n%s", out)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	t.Log("\n" + string(out))
	require.Len(t, lines, 20, "one ok line per case")
	for _, l := range lines {
		require.True(t, strings.HasPrefix(l, "ok "), l)
	}
}

// buildEmulation compiles testdata/emu_driver.cpp with the CUDA edition, or takes the
// binary of an earlier identical build from the user cache (testenv.CacheDir).
func buildEmulation(t *testing.T, gxx string) string {
	t.Helper()
	emu, err := filepath.Abs(filepath.Join("..", "..", "kernelsrc", "emu"))
	require.NoError(t, err)
	flags := []string{"-std=c++20", "-O1", "-ffp-contract=off", "-pthread", "-Wall", "-Wno-unknown-pragmas"}
	version, err := exec.Command(gxx, "--version").Output()
	require.NoError(t, err)
	h := sha256.New()
	h.Write(version)
	h.Write([]byte(strings.Join(flags, " ")))
	h.Write([]byte(cudaSource))
	for _, name := range []string{filepath.Join("testdata", "emu_driver.cpp"), filepath.Join(emu, "cuda_emu.h")} {
		b, err := os.ReadFile(name)
		require.NoError(t, err)
		h.Write(b)
	}
	dir := testenv.CacheDir("decode-emu", hex.EncodeToString(h.Sum(nil))[:24])
	if dir == "" {
		dir = t.TempDir()
	}
	exe := filepath.Join(dir, "emu_driver")
	if _, err := os.Stat(exe); err == nil {
		return exe
	}
	work := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(work, "decode.cu"), []byte(cudaSource), 0o644))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	args := append(flags, "-I", work, "-I", emu, "-o", filepath.Join(work, "emu_driver"), filepath.Join("testdata", "emu_driver.cpp"))
	out, err := exec.CommandContext(ctx, gxx, args...).CombinedOutput()
	require.NoError(t, err, "g++:\n%s", out)
	require.Empty(t, string(out), "g++ warnings")
	// Rename is atomic: a concurrent test run sees the whole binary or none.
	if err := os.Rename(filepath.Join(work, "emu_driver"), exe); err != nil {
		return filepath.Join(work, "emu_driver")
	}
	return exe
}
