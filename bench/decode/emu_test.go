package decode

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
// binary of an earlier identical build from the user cache (testenv.CachedBinary).
func buildEmulation(t *testing.T, gxx string) string {
	t.Helper()
	emu, err := filepath.Abs(filepath.Join("..", "..", "kernelsrc", "emu"))
	require.NoError(t, err)
	flags := []string{"-std=c++20", "-O1", "-ffp-contract=off", "-pthread", "-Wall", "-Wno-unknown-pragmas"}
	key, err := testenv.BuildKey(gxx, flags, []string{filepath.Join("testdata", "emu_driver.cpp"),
		filepath.Join(emu, "cuda_emu.h")}, []byte(cudaSource))
	require.NoError(t, err)
	exe, err := testenv.CachedBinary("decode-emu", key, func(out string) error {
		work := filepath.Dir(out)
		if err := os.WriteFile(filepath.Join(work, "decode.cu"), []byte(cudaSource), 0o644); err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		args := append(slices.Clone(flags), "-I", work, "-I", emu, "-o", out, filepath.Join("testdata", "emu_driver.cpp"))
		msg, err := exec.CommandContext(ctx, gxx, args...).CombinedOutput()
		if err != nil || len(msg) > 0 {
			return fmt.Errorf("g++ (err %v):\n%s", err, msg)
		}
		return nil
	})
	require.NoError(t, err, "building the decode kernels' emulation")
	return exe
}
