//go:build linux && (amd64 || arm64)

package cuda

import (
	"errors"
	goruntime "runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/runtime/internal/fakegpu"
	"github.com/gumbel-go/gumbel/runtime/internal/gpurt"
)

// TestFakeWithContext: WithContext makes the device's context current on the thread that
// runs f, returns f's error, and refuses a closed device.
func TestFakeWithContext(t *testing.T) {
	d := fakeDevice(t, fakegpu.New(fakegpu.H200()))
	api, stream := d.core.API, d.DefaultStream().Handle()
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	require.Zero(t, gpurt.CallN(api.SetCurrent.Fn, 0), "no context current here")
	require.NotZero(t, gpurt.CallN(api.StreamSync.Fn, stream), "the fake refuses a stream of a context that is not current")

	require.NoError(t, d.WithContext(func() error {
		if r := Result(gpurt.CallN(api.StreamSync.Fn, stream)); r != Success {
			return failed("cuStreamSynchronize", r)
		}
		return nil
	}))
	mine := errors.New("f failed")
	assert.Same(t, mine, d.WithContext(func() error { return mine }))

	require.NoError(t, d.Close())
	ran := false
	err := d.WithContext(func() error { ran = true; return nil })
	assert.ErrorIs(t, err, runtime.ErrClosed)
	assert.False(t, ran, "f does not run on a closed device")
}
