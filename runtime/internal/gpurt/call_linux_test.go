//go:build linux && (amd64 || arm64)

package gpurt

import (
	"testing"

	"github.com/ebitengine/purego"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// noopC returns libm's fegetround: a C function that ignores its arguments and returns
// 0 (FE_TONEAREST on x86-64 and arm64), the success status of both drivers.
func noopC(t *testing.T) uintptr {
	t.Helper()
	libm, err := purego.Dlopen("libm.so.6", purego.RTLD_NOW|purego.RTLD_LOCAL)
	require.NoError(t, err)
	fn, err := purego.Dlsym(libm, "fegetround")
	require.NoError(t, err)
	return fn
}

func TestFrameCallDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own; run without -race")
	}
	fn := noopC(t)
	f := new(Frame)
	for _, n := range []int{0, 1, 4, 11} {
		words := make([]uintptr, n)
		assert.Zero(t, f.Call(fn, words...))
		assert.Zero(t, testing.AllocsPerRun(100, func() { f.Call(fn, words...) }), "%d words", n)
	}
	assert.Zero(t, testing.AllocsPerRun(100, func() { f.Call(fn, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11) }), "a literal argument list stays on the stack")
	assert.Zero(t, CallN(fn, 1, 2, 3), "CallN reaches C too")
}
