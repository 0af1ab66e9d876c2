package main

import (
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/runtime"
)

// TestUnknownBackendIsUsageError: a --backend no backend answers to is a usage error
// (exit 2) naming the flag, in every command that opens a device, before any work.
func TestUnknownBackendIsUsageError(t *testing.T) {
	good := writeNPY(t, [1][3]float32{{1, 2, 3}})
	for _, args := range [][]string{
		{"sample", good, "--backend", "nonsense"},
		{"sample", "--backend=nonsense", good},
		{"run", "--backend", "nonsense"},
		{"--backend", "nonsense"},
		{"selftest", "--backend", "nonsense"},
		{"bench", "--backend", "nonsense"},
	} {
		code, stdout, stderr := runCLI(args...)
		assert.Equal(t, exitUsage, code, "%v: %s", args, stderr)
		assert.Empty(t, stdout, "%v", args)
		first, _, _ := strings.Cut(stderr, "\n")
		assert.Contains(t, first, `--backend "nonsense"`, "%v: the first line names the flag and its value", args)
		assert.Contains(t, first, "cpu", "%v: and the values it takes", args)
	}
}

// TestUnknownBackendFromEnvIsUsageError: the same for $GUMBEL_BACKEND, named as such.
func TestUnknownBackendFromEnvIsUsageError(t *testing.T) {
	t.Setenv(runtime.EnvBackend, "nonsense")
	code, stdout, stderr := runCLI("run")
	assert.Equal(t, exitUsage, code, stderr)
	assert.Empty(t, stdout)
	first, _, _ := strings.Cut(stderr, "\n")
	assert.Contains(t, first, "$GUMBEL_BACKEND")
	assert.Contains(t, first, `"nonsense"`)

	// --backend overrides the variable.
	code, _, stderr = runCLI("run", "--backend", "cpu", "--steps", "1", "--calls", "1")
	assert.Equal(t, exitOK, code, stderr)
}

// TestSampleFailedRowLine: a row that cannot be sampled prints its row number and
// error on its line of stdout, not an empty line.
func TestSampleFailedRowLine(t *testing.T) {
	nan := float32(math.NaN())
	inf := float32(math.Inf(-1))
	path := writeNPY(t, [3][3]float32{{1, nan, 3}, {3, 2, 1}, {inf, inf, inf}})
	code, stdout, stderr := runCLI("sample", "--backend", "cpu", "--temperature", "0", "--draws", "2", path)
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, stderr, "2 of 3 rows could not be sampled")
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	require.Len(t, lines, 3, "one line per row:\n%s", stdout)
	assert.Equal(t, "error: row 0: gumbel/sampler: row holds NaN or +Inf", lines[0])
	assert.Equal(t, "0 0", lines[1])
	assert.Equal(t, "error: row 2: gumbel/sampler: row holds no finite logit", lines[2])
}
