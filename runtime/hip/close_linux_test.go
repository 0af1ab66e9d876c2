//go:build linux && (amd64 || arm64)

package hip

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/runtime/internal/fakegpu"
)

// TestFakeCloseTwice: closing a device is idempotent, as runtime.Device documents.
func TestFakeCloseTwice(t *testing.T) {
	d, err := openFake(t, fakegpu.New(fakegpu.MI210()), 0)
	require.NoError(t, err)
	require.NoError(t, d.Close())
	assert.NoError(t, d.Close(), "a second Close does nothing")
	assert.NoError(t, d.Close(), "nor does a third")
	_, err = d.Alloc(8)
	assert.ErrorIs(t, err, runtime.ErrClosed, "the device stays closed")
}
