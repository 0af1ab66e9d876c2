//go:build linux && (amd64 || arm64)

package cuda

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/runtime/internal/fakegpu"
)

// TestFakeCloseTwice: closing a device is idempotent, as runtime.Device documents, and
// the primary context is released once.
func TestFakeCloseTwice(t *testing.T) {
	g := fakegpu.New(fakegpu.H200())
	d, err := openFake(t, g, 0)
	require.NoError(t, err)
	require.NoError(t, d.Close())
	assert.NoError(t, d.Close(), "a second Close does nothing")
	assert.NoError(t, d.Close(), "nor does a third")
	assert.Zero(t, g.Retained(0), "the primary context is released once")
	_, err = d.Alloc(8)
	assert.ErrorIs(t, err, runtime.ErrClosed, "the device stays closed")
}
