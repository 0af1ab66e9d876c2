package main

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/tests/statistical"
)

func TestParseSelftestFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		full    bool
		scale   float64
		match   string
		seed    uint64
		backend string
		wantErr string
	}{
		{name: "defaults", scale: 1},
		{name: "every flag", args: []string{"--full", "--scale", "0.5", "--run", "V128/.*gumbel", "--seed", "3", "--backend", "cuda"},
			full: true, scale: 0.5, match: "V128/.*gumbel", seed: 3, backend: "cuda"},
		{name: "zero scale", args: []string{"--scale", "0"}, wantErr: "--scale 0: must be in (0, 100]"},
		{name: "NaN scale", args: []string{"--scale", "NaN"}, wantErr: "--scale NaN"},
		{name: "bad regexp", args: []string{"--run", "(["}, wantErr: "--run: error parsing regexp"},
		{name: "stray argument", args: []string{"now"}, wantErr: `unexpected argument "now"`},
		{name: "unknown flag", args: []string{"--fast"}, wantErr: "flag provided but not defined: -fast"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseSelftestFlags(tc.args, io.Discard)
			if tc.wantErr != "" {
				require.Error(t, err)
				assert.ErrorAs(t, err, new(usageError))
				assert.Contains(t, err.Error(), tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.full, got.full)
			assert.Equal(t, tc.scale, got.scale)
			assert.Equal(t, tc.match, got.match.String())
			assert.Equal(t, tc.seed, got.seed)
			assert.Equal(t, tc.backend, got.device.backend)
		})
	}
}

func TestSelftestOnCPU(t *testing.T) {
	// Two small cases at a fiftieth of their draws: the real suite, end to end.
	code, stdout, stderr := runCLI("selftest", "--backend", "cpu", "--scale", "0.02", "--run", "^(peaked|masked)/V128/T1.0/gumbel$")
	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	assert.Contains(t, stdout, "device: cpu 0:")
	assert.Contains(t, stdout, "ci suite: 2 cases, 40000 draws, reject at p < 1e-06")
	assert.Regexp(t, `peaked/V128/T1\.0/gumbel\s+gumbel\s+20000\s.*\spass\n`, stdout)
	assert.Regexp(t, `masked/V128/T1\.0/gumbel\s+gumbel\s+20000\s.*\spass\n`, stdout)
	assert.Contains(t, stdout, "2 of 2 cases passed")
	// stderr is not a terminal here: one progress line per case.
	assert.Contains(t, stderr, "[1/2] peaked/V128/T1.0/gumbel ... pass")
	assert.Contains(t, stderr, "[2/2] masked/V128/T1.0/gumbel ... pass")
}

func TestSelftestFailureExits1(t *testing.T) {
	var ran []string
	st := selfTest{
		run: func(dev runtime.Device, c statistical.Case, progress func(done, total int)) statistical.Outcome {
			ran = append(ran, c.Name)
			progress(c.Draws, c.Draws)
			pass := !strings.Contains(c.Name, "flat")
			return statistical.Outcome{Case: c.Name, Draws: c.Draws, ChiSquare: 99, DF: 3, PValue: 1e-9, Pass: pass, Message: "chi2 = 99.0 on 3 df: p = 1e-09 < 1e-06"}
		},
		progress: func(int64) caseProgress { return lineProgress{w: io.Discard} },
	}
	var out, errb bytes.Buffer
	err := st.main(env{stdout: &out, stderr: &errb}, []string{"--backend", "cpu", "--run", "^(peaked|flat)/V128/T0.5/gumbel$"})
	require.Error(t, err)
	assert.Equal(t, "1 of 2 cases failed on cpu", err.Error())
	assert.Equal(t, []string{"peaked/V128/T0.5/gumbel", "flat/V128/T0.5/gumbel"}, ran)
	assert.Regexp(t, `flat/V128/T0\.5/gumbel\s.*\sFAIL\n`, out.String())
	assert.Contains(t, out.String(), "failures:\n  flat/V128/T0.5/gumbel: chi2 = 99.0 on 3 df: p = 1e-09 < 1e-06")
	assert.Contains(t, out.String(), "1 of 2 cases passed")
}

func TestSelftestNoCase(t *testing.T) {
	code, _, stderr := runCLI("selftest", "--backend", "cpu", "--run", "no-such-case")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, stderr, `--run "no-such-case" matches no case of the ci suite`)
}
