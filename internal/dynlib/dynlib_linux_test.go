//go:build linux

package dynlib

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestOpenSymbolLoadedPath(t *testing.T) {
	h, err := Open("libc.so.6")
	require.NoError(t, err)
	p := Symbol(h, "sched_yield")
	require.NotZero(t, p)
	assert.Zero(t, Symbol(h, "no_such_function_here"))
	assert.True(t, strings.Contains(LoadedPath(p), "libc"), "the mapped file of libc: %q", LoadedPath(p))
	assert.Empty(t, LoadedPath(1), "an unmapped address")
	_, err = Open("/nonexistent/libnothing.so")
	assert.Error(t, err)
}
