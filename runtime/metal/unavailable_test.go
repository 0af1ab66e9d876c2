//go:build !darwin

package metal

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/runtime"
)

// TestUnavailableOffMacOS checks that the backend registers itself everywhere and
// reports itself unavailable, as an error and not a panic, off macOS.
func TestUnavailableOffMacOS(t *testing.T) {
	assert.Contains(t, runtime.Backends(), runtime.Metal)
	for _, ordinal := range []int{0, 1, -1} {
		d, err := Open(ordinal)
		require.ErrorIs(t, err, runtime.ErrUnavailable, "ordinal %d", ordinal)
		assert.Nil(t, d)
	}
	p := probe()
	assert.Equal(t, runtime.Metal, p.Backend)
	assert.ErrorIs(t, p.Err, runtime.ErrUnavailable)
	assert.Empty(t, p.Devices)

	_, err := runtime.Open(runtime.OpenOptions{Backend: "metal"})
	assert.ErrorIs(t, err, runtime.ErrUnavailable)
}
