//go:build linux

package cuda

import (
	"errors"
	"strings"
	"testing"

	"github.com/gumbel-go/gumbel/runtime"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLoadDriverRefusesWrongLibrary points the driver search at a library that exists
// but is not libcuda: a clear error naming the missing functions, not a crash.
func TestLoadDriverRefusesWrongLibrary(t *testing.T) {
	_, err := loadDriver(runtime.LibrarySearch{What: "libcuda", Names: []string{"libc.so.6"}})
	require.Error(t, err)
	assert.ErrorIs(t, err, runtime.ErrUnavailable)
	assert.Contains(t, err.Error(), "lacks cuInit")
	_, err = loadNVRTC(runtime.LibrarySearch{What: "libnvrtc", Names: []string{"libc.so.6"}})
	require.Error(t, err)
	assert.True(t, strings.Contains(err.Error(), "lacks nvrtcGetErrorString"), err.Error())
	assert.True(t, errors.Is(err, runtime.ErrUnavailable))
}
