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

// TestHandlesCloseTwice: a stream, an event and a module close once and then do
// nothing: every handle follows the device's rule, and stays closed.
func TestHandlesCloseTwice(t *testing.T) {
	d, err := cpu.Open()
	require.NoError(t, err)
	defer d.Close()
	s, err := d.NewStream()
	require.NoError(t, err)
	e, err := d.NewEvent()
	require.NoError(t, err)
	m, err := d.Load(&runtime.Program{Name: "close-twice", Go: map[string]runtime.GoKernel{"k": func(*runtime.BlockContext) {}}})
	require.NoError(t, err)
	for name, c := range map[string]interface{ Close() error }{"stream": s, "event": e, "module": m} {
		require.NoError(t, c.Close(), name)
		assert.NoError(t, c.Close(), "%s: a second Close does nothing", name)
	}
	assert.ErrorIs(t, s.Synchronize(), runtime.ErrClosed, "the stream stays closed")
	_, err = m.Kernel("k")
	assert.ErrorIs(t, err, runtime.ErrClosed, "the module stays closed")
}
