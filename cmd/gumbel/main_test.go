package main

import (
	"bytes"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/sampler"
)

// runCLI runs one command line in process and returns its exit status and output.
func runCLI(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(args, env{stdout: &out, stderr: &errb})
	return code, out.String(), errb.String()
}

func TestDispatch(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		code     int
		stdout   string
		stderr   string
		noStdout bool
	}{
		{name: "help", args: []string{"help"}, code: exitOK, stdout: "Commands:"},
		{name: "-h", args: []string{"-h"}, code: exitOK, stdout: "Run 'gumbel COMMAND -h' for a command's flags."},
		{name: "-h of run", args: []string{"run", "-h"}, code: exitOK, stderr: "-steps int"},
		{name: "unknown command", args: []string{"frobnicate"}, code: exitUsage, stderr: `unknown command "frobnicate"`, noStdout: true},
		{name: "unknown flag of run", args: []string{"--frobnicate"}, code: exitUsage, stderr: "flag provided but not defined: -frobnicate", noStdout: true},
		{name: "-h of a command", args: []string{"sample", "-h"}, code: exitOK, stderr: "Usage: gumbel sample"},
		{name: "stray argument to info", args: []string{"info", "extra"}, code: exitUsage, stderr: `unexpected argument "extra"`},
		{name: "stray argument to run", args: []string{"run", "extra"}, code: exitUsage, stderr: `unexpected argument "extra"`},
		{name: "bad --steps", args: []string{"run", "--steps", "0"}, code: exitUsage, stderr: "--steps 0: must be between 1 and 1000"},
		{name: "bad --calls", args: []string{"--calls", "-3"}, code: exitUsage, stderr: "--calls -3"},
		{name: "bad --device", args: []string{"run", "--device", "-1"}, code: exitUsage, stderr: "--device -1: must be >= 0"},
		{name: "unknown backend", args: []string{"run", "--backend", "tpu"}, code: exitUsage, stderr: `--backend "tpu": gumbel/runtime: unknown backend`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(tc.args...)
			assert.Equal(t, tc.code, code, "stderr: %s", stderr)
			assert.Contains(t, stdout, tc.stdout)
			assert.Contains(t, stderr, tc.stderr)
			if tc.noStdout {
				assert.Empty(t, stdout)
			}
		})
	}
}

func TestParseArgs(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		pos     []string
		verbose bool
		wantErr bool
	}{
		{name: "flags first", args: []string{"-v", "a", "b"}, pos: []string{"a", "b"}, verbose: true},
		{name: "flags after", args: []string{"a", "--v", "b"}, pos: []string{"a", "b"}, verbose: true},
		{name: "double dash ends flags", args: []string{"a", "--", "-v", "b"}, pos: []string{"a", "-v", "b"}},
		{name: "no arguments", args: nil, pos: nil},
		{name: "unknown flag", args: []string{"a", "-x"}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fs := newFlags("test", "test", io.Discard)
			verbose := fs.Bool("v", false, "")
			pos, err := parseArgs(fs, tc.args)
			if tc.wantErr {
				require.Error(t, err)
				assert.ErrorAs(t, err, new(usageError))
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.pos, pos)
			assert.Equal(t, tc.verbose, *verbose)
		})
	}
}

func TestParseSampleFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    sampleConfig
		wantErr string
	}{
		{
			name: "defaults",
			args: []string{"x.npy"},
			want: sampleConfig{file: "x.npy", draws: 1, params: sampler.Params{Temperature: 1, TopP: 1, HasSeed: true}},
		},
		{
			name: "every flag, after the file",
			args: []string{"x.npy", "--temperature", "0.7", "--top-k", "50", "--top-p=0.9", "--min-p", "0.05",
				"--seed", "18446744073709551615", "--step", "7", "--draws", "100", "--counts", "--backend", "cpu", "--device", "1"},
			want: sampleConfig{
				file: "x.npy", draws: 100, counts: true, device: deviceFlags{backend: "cpu", ordinal: 1},
				params: sampler.Params{Temperature: 0.7, TopK: 50, TopP: 0.9, MinP: 0.05, Seed: 1<<64 - 1, HasSeed: true, Step: 7},
			},
		},
		{name: "no file", args: []string{"--draws", "3"}, wantErr: "missing the .npy file"},
		{name: "two files", args: []string{"a.npy", "b.npy"}, wantErr: "one .npy file expected, got 2"},
		{name: "zero draws", args: []string{"a.npy", "--draws", "0"}, wantErr: "--draws 0: must be between 1 and"},
		{name: "negative draws", args: []string{"a.npy", "--draws", "-5"}, wantErr: "--draws -5"},
		{name: "draws not a number", args: []string{"a.npy", "--draws", "many"}, wantErr: `invalid value "many" for flag -draws`},
		{name: "negative seed", args: []string{"a.npy", "--seed", "-1"}, wantErr: `invalid value "-1" for flag -seed`},
		{name: "temperature not a number", args: []string{"a.npy", "--temperature", "hot"}, wantErr: `invalid value "hot" for flag -temperature`},
		{name: "negative device", args: []string{"a.npy", "--device", "-2"}, wantErr: "--device -2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseSampleFlags(tc.args, io.Discard)
			if tc.wantErr != "" {
				require.Error(t, err)
				assert.ErrorAs(t, err, new(usageError))
				assert.Contains(t, err.Error(), tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestParseJobFlags(t *testing.T) {
	got, err := parseJobFlags([]string{"--steps", "2", "--calls", "3", "--seed", "9", "--backend", "auto"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, jobConfig{steps: 2, calls: 3, seed: 9, device: deviceFlags{backend: "auto"}}, got)

	got, err = parseJobFlags(nil, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, jobConfig{steps: 4, calls: 7, seed: 2024}, got, "defaults")
}
