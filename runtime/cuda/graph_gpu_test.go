//go:build gpu

package cuda

import (
	"testing"

	"github.com/gumbel-go/gumbel/runtime"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const addOneSource = `
extern "C" __global__ void add_one(unsigned int* p, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] += 1u;
}
`

// TestGPUGraphCapture records two launches into a graph, replays it 500 times and checks
// that every replay ran both launches.
func TestGPUGraphCapture(t *testing.T) {
	d := openGPU(t)
	mod, err := d.Load(&runtime.Program{Name: "add-one", CUDA: addOneSource})
	require.NoError(t, err)
	k, err := mod.Kernel("add_one")
	require.NoError(t, err)
	const n = 4096
	buf, err := d.Alloc(4 * n)
	require.NoError(t, err)
	st, err := d.NewStream()
	require.NoError(t, err)
	defer st.Close()
	require.NoError(t, st.Zero(buf, 0, 4*n))
	require.NoError(t, st.Synchronize())

	gc, ok := st.(runtime.GraphCapturer)
	require.True(t, ok)
	var args runtime.Args
	require.NoError(t, gc.BeginCapture())
	for range 2 {
		args.Reset().Buffer(buf).U32(n)
		require.NoError(t, st.Launch(k, runtime.Dim3{X: n / 256, Y: 1, Z: 1}, runtime.Dim3{X: 256, Y: 1, Z: 1}, &args))
	}
	g, err := gc.EndCapture()
	require.NoError(t, err)
	defer g.Close()

	got := make([]uint32, n)
	require.NoError(t, st.CopyToHost(runtime.BytesOf(got), buf, 0))
	require.NoError(t, st.Synchronize())
	assert.Equal(t, uint32(0), got[0], "capturing runs nothing")

	for range 500 {
		require.NoError(t, g.Launch(st))
	}
	require.NoError(t, st.CopyToHost(runtime.BytesOf(got), buf, 0))
	require.NoError(t, st.Synchronize())
	for i, v := range got {
		require.Equal(t, uint32(1000), v, "element %d", i)
	}
	assert.Zero(t, testing.AllocsPerRun(100, func() { _ = g.Launch(st) }), "a replay allocates nothing")
	require.NoError(t, st.Synchronize())
	require.NoError(t, g.Close())
	assert.ErrorIs(t, g.Launch(st), runtime.ErrClosed)
}
