package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGeneratedFilesUpToDate fails while `go generate ./kernelsrc/abi` would change a
// file: the header and ABI.md's tables must say what package abi says.
func TestGeneratedFilesUpToDate(t *testing.T) {
	root := filepath.Join("..", "..")
	files, err := render(root)
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(root, name))
		require.NoError(t, err)
		assert.Equal(t, string(want), string(got), "%s is out of date: run go generate ./kernelsrc/abi", name)
	}
}

func TestCNames(t *testing.T) {
	for goName, want := range map[string]string{
		"FlagLogprobs":      "GB_FLAG_LOGPROBS",
		"StatusNonFinite":   "GB_STATUS_NONFINITE",
		"StatusNoFinite":    "GB_STATUS_NO_FINITE",
		"TopNStride":        "GB_TOPN_STRIDE",
		"MaxTopN":           "GB_MAX_TOPN",
		"PurposeGumbelTail": "GB_PURPOSE_GUMBEL_TAIL",
		"BF16":              "GB_BF16",
		"F32":               "GB_F32",
		"RowParamsSize":     "GB_ROW_PARAMS_SIZE",
	} {
		assert.Equal(t, want, CName(goName), goName)
	}
	for goName, want := range map[string]string{"TopK": "top_k", "TopN": "topn", "RepetitionPenalty": "repetition_penalty", "Row": "row"} {
		assert.Equal(t, want, fieldName(goName), goName)
	}
}
