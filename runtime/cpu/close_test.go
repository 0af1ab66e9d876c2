package cpu_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/runtime/cpu"
)

// TestCloseTwice: closing a device is idempotent, as runtime.Device documents; a second
// Close returns nil and the device stays closed.
func TestCloseTwice(t *testing.T) {
	d, err := cpu.Open()
	require.NoError(t, err)
	require.NoError(t, d.Close())
	assert.NoError(t, d.Close(), "a second Close does nothing")
	assert.NoError(t, d.Close(), "nor does a third")
	_, err = d.Alloc(8)
	assert.ErrorIs(t, err, runtime.ErrClosed, "the device stays closed")
}

// TestCloseConcurrently: of many Close calls at once, none fails.
func TestCloseConcurrently(t *testing.T) {
	d, err := cpu.Open()
	require.NoError(t, err)
	errs := make(chan error, 8)
	for range cap(errs) {
		go func() { errs <- d.Close() }()
	}
	for range cap(errs) {
		assert.NoError(t, <-errs)
	}
}
