package decode

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/half"
	"github.com/gumbel-go/gumbel/runtime"
)

// kernelFixture is a loaded program with random bf16 weights and f32 activations.
type kernelFixture struct {
	dev     runtime.Device
	mod     runtime.Module
	n, h, b int
	m       []uint16
	act     []float32
}

func newKernelFixture(t *testing.T, dev runtime.Device, n, h, b int) *kernelFixture {
	mod, err := dev.Load(Program)
	require.NoError(t, err)
	t.Cleanup(func() { mod.Close() })
	rng := rand.New(rand.NewPCG(uint64(n), uint64(h*b)))
	f := &kernelFixture{dev: dev, mod: mod, n: n, h: h, b: b, m: make([]uint16, n*h), act: make([]float32, b*h)}
	for i := range f.m {
		f.m[i] = half.BFloat16(float32(rng.NormFloat64()))
	}
	for i := range f.act {
		f.act[i] = float32(rng.NormFloat64())
	}
	return f
}

func (f *kernelFixture) buffer(t *testing.T, src []byte) runtime.Buffer {
	buf, err := f.dev.Alloc(len(src))
	require.NoError(t, err)
	t.Cleanup(func() { buf.Free() })
	require.NoError(t, f.dev.DefaultStream().CopyToDevice(buf, 0, src))
	return buf
}

// launchGEMV runs a GEMV kernel over grid blocks and returns its [b, n] output.
func (f *kernelFixture) launchGEMV(t *testing.T, name string, grid int) []float32 {
	k, err := f.mod.Kernel(name)
	require.NoError(t, err)
	out := make([]float32, f.b*f.n)
	mb, ab, ob := f.buffer(t, runtime.BytesOf(f.m)), f.buffer(t, runtime.BytesOf(f.act)), f.buffer(t, runtime.BytesOf(out))
	var args runtime.Args
	args.Buffer(mb).Buffer(ab).Buffer(ob).U32(uint32(f.n)).U32(uint32(f.h)).U32(uint32(f.b))
	st := f.dev.DefaultStream()
	require.NoError(t, st.Launch(k, runtime.Dim3{X: grid, Y: 1, Z: 1}, runtime.Dim3{X: gemvBlock, Y: 1, Z: 1}, &args))
	require.NoError(t, st.CopyToHost(runtime.BytesOf(out), ob, 0))
	require.NoError(t, st.Synchronize())
	return out
}

// hostDot is the package's reference order: float32 products summed from column 0.
func (f *kernelFixture) hostDot(n, b int) float32 {
	var acc float32
	for j := range f.h {
		acc += float32(half.BFloat16ToFloat32(f.m[n*f.h+j]) * f.act[b*f.h+j])
	}
	return acc
}

func (f *kernelFixture) hostDot64(n, b int) (sum, abs float64) {
	for j := range f.h {
		p := float64(half.BFloat16ToFloat32(f.m[n*f.h+j])) * float64(f.act[b*f.h+j])
		sum += p
		abs += math.Abs(p)
	}
	return sum, abs
}

func TestLMHeadGoKernelMatchesHostGEMV(t *testing.T) {
	for _, tc := range []struct{ n, h, b, grid int }{
		{4096, 64, 1, 1}, {4096, 64, 4, 7}, {1000, 24, 8, 64}, {37, 128, 3, 100},
	} {
		f := newKernelFixture(t, openCPU(t), tc.n, tc.h, tc.b)
		got := f.launchGEMV(t, "lm_head_bf16", tc.grid)
		for b := range tc.b {
			for n := range tc.n {
				require.Equalf(t, f.hostDot(n, b), got[b*tc.n+n], "%+v: logits[%d, %d]", tc, b, n)
				ref, abs := f.hostDot64(n, b)
				require.InDeltaf(t, ref, float64(got[b*tc.n+n]), 1e-6*abs*float64(tc.h), "%+v: logits[%d, %d] against float64", tc, b, n)
			}
		}
	}
}

func TestHiddenGoKernel(t *testing.T) {
	for _, tc := range []struct{ h, b, grid int }{{64, 1, 1}, {64, 4, 5}, {256, 8, 300}} {
		f := newKernelFixture(t, openCPU(t), tc.h, tc.h, tc.b)
		got := f.launchGEMV(t, "hidden_bf16", tc.grid)
		for b := range tc.b {
			for i := range tc.h {
				want := float32(math.Tanh(float64(f.hostDot(i, b)))) + f.act[b*tc.h+i]
				require.Equalf(t, want, got[b*tc.h+i], "%+v: h[%d, %d]", tc, b, i)
			}
		}
	}
}

// TestGEMVRejectsBadSizes: a launch whose sizes disagree with its buffers writes
// nothing rather than reading out of bounds.
func TestGEMVRejectsBadSizes(t *testing.T) {
	f := newKernelFixture(t, openCPU(t), 64, 64, 2)
	for _, tc := range []struct {
		name    string
		n, h, b uint32
	}{{"lm_head_bf16", 65, 64, 2}, {"lm_head_bf16", 64, 64, 3}, {"lm_head_bf16", 64, 60, 2}, {"lm_head_bf16", 64, 64, 0},
		{"hidden_bf16", 64, 64, 9}, {"hidden_bf16", 32, 64, 2}} {
		k, err := f.mod.Kernel(tc.name)
		require.NoError(t, err)
		out := []float32{-7, -7}
		ob := f.buffer(t, runtime.BytesOf(out))
		var args runtime.Args
		args.Buffer(f.buffer(t, runtime.BytesOf(f.m))).Buffer(f.buffer(t, runtime.BytesOf(f.act))).Buffer(ob).U32(tc.n).U32(tc.h).U32(tc.b)
		st := f.dev.DefaultStream()
		require.NoError(t, st.Launch(k, runtime.Dim3{X: 3, Y: 1, Z: 1}, runtime.Dim3{X: gemvBlock, Y: 1, Z: 1}, &args))
		require.NoError(t, st.CopyToHost(runtime.BytesOf(out), ob, 0))
		require.NoError(t, st.Synchronize())
		assert.Equalf(t, []float32{-7, -7}, out, "%+v", tc)
	}
}

func TestEmbedGoKernel(t *testing.T) {
	f := newKernelFixture(t, openCPU(t), 50, 16, 1)
	k, err := f.mod.Kernel("embed_bf16")
	require.NoError(t, err)
	tokens := []int32{3, 49, 0, -1, 50}
	x := make([]float32, len(tokens)*f.h)
	xb := f.buffer(t, runtime.BytesOf(x))
	var args runtime.Args
	args.Buffer(f.buffer(t, runtime.BytesOf(f.m))).Buffer(f.buffer(t, runtime.BytesOf(tokens))).Buffer(xb).U32(uint32(f.n)).U32(uint32(f.h))
	st := f.dev.DefaultStream()
	require.NoError(t, st.Launch(k, runtime.Dim3{X: len(tokens), Y: 1, Z: 1}, runtime.Dim3{X: 64, Y: 1, Z: 1}, &args))
	require.NoError(t, st.CopyToHost(runtime.BytesOf(x), xb, 0))
	require.NoError(t, st.Synchronize())
	for b, tok := range tokens {
		for j := range f.h {
			var want float32
			if tok >= 0 && int(tok) < f.n {
				want = half.BFloat16ToFloat32(f.m[int(tok)*f.h+j])
			}
			require.Equalf(t, want, x[b*f.h+j], "token %d column %d", tok, j)
		}
	}
}

func TestGEMVGrid(t *testing.T) {
	for _, tc := range []struct{ rows, block, warp, sms, want int }{
		{151936, 256, 32, 132, 132 * blocksPerSM},
		{1024, 256, 32, 132, 32},
		{4096, 256, 1, 2, 4}, // a CPU "warp" is one thread: 1024 rows per block
		{4096, 32, 1, 2, 2 * blocksPerSM},
		{5, 256, 32, 132, 1},
		{10, 256, 32, 0, 1},
	} {
		assert.Equalf(t, tc.want, gemvGrid(tc.rows, tc.block, tc.warp, tc.sms).X, "%+v", tc)
	}
}

func TestHeadKernelGrid(t *testing.T) {
	k := headKernel
	assert.Equal(t, "lm_head_bf16", k.name)
	assert.Equal(t, 2, k.blocksPerSM)
	assert.Equal(t, 8, k.rowsPerWarp(1))
	assert.Equal(t, 8, k.rowsPerWarp(4))
	assert.Equal(t, 4, k.rowsPerWarp(8))
	// V = 151936, 256 threads, 132 SMs, batch 4: two blocks per SM; a tiny head one block.
	assert.Equal(t, 132*2, gemvGridFor(151936, 256, 32, 132, k.rowsPerWarp(4), k.blocksPerSM).X)
	assert.Equal(t, 1, gemvGridFor(5, 256, 32, 132, k.rowsPerWarp(4), k.blocksPerSM).X)
}
