//go:build gpu && darwin

package metal

// The GPU tests of the Metal backend, for a Mac with a Metal GPU:
//
//	CGO_ENABLED=0 go test -tags gpu -count=1 -v ./runtime/metal/
//
// and the statistical suite on Metal:
//
//	GUMBEL_BACKEND=metal CGO_ENABLED=0 go test -tags gpu -timeout 60m -v ./tests/statistical/

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/half"
	"github.com/gumbel-go/gumbel/kernelsrc"
	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/gumbel-go/gumbel/kernelsrc/gokernel"
	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/runtime/cpu"
	"github.com/gumbel-go/gumbel/sampler"
)

func openDevice(t testing.TB) *Device {
	t.Helper()
	d, err := Open(0)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, d.Close()) })
	return d.(*Device)
}

// testProgram adds one to each of n uints and stores a float scalar after them.
var testProgram = &runtime.Program{Name: "metal-test", Metal: `
#include <metal_stdlib>
using namespace metal;
kernel void add_one(device uint* a [[buffer(0)]], constant uint& n [[buffer(1)]],
                    constant float& f [[buffer(2)]], uint i [[thread_position_in_grid]]) {
    if (i < n) { a[i] += 1u; }
    if (i == 0) { a[n] = as_type<uint>(f); }
}
`}

func TestDeviceInfo(t *testing.T) {
	d := openDevice(t)
	info := d.Info()
	t.Logf("%+v, MSL %s", info, d.LanguageVersion())
	assert.Equal(t, runtime.Metal, info.Backend)
	assert.NotEmpty(t, info.Name)
	assert.NotEqual(t, "metal", info.Arch, "no GPU family matched")
	assert.Positive(t, info.Multiprocessors)
	assert.Equal(t, 32, info.WarpSize)
	assert.Equal(t, 1024, info.MaxThreadsPerBlock)
	assert.Positive(t, info.TotalMemory)
	assert.Len(t, info.Libraries, len(libraryPaths))
	assert.NotZero(t, d.Handle())

	p := probe()
	require.NoError(t, p.Err)
	require.Len(t, p.Devices, 1)
	assert.Equal(t, info.Name, p.Devices[0].Name)
}

func TestBuffersAndCopies(t *testing.T) {
	d := openDevice(t)
	s := d.DefaultStream()
	buf, err := d.Alloc(4096)
	require.NoError(t, err)
	defer buf.Free()
	assert.Equal(t, 4096, buf.Size())
	assert.Len(t, runtime.HostBytes(buf), 4096)

	src := make([]byte, 100)
	for i := range src {
		src[i] = byte(i + 1)
	}
	require.NoError(t, s.CopyToDevice(buf, 10, src))
	got := make([]byte, 100)
	require.NoError(t, s.CopyToHost(got, buf, 10))
	require.NoError(t, s.Synchronize())
	assert.Equal(t, src, got)
	require.NoError(t, s.Zero(buf, 20, 10))
	require.NoError(t, s.CopyToHost(got, buf, 10))
	assert.Equal(t, make([]byte, 10), got[10:20])
	assert.Equal(t, src[:10], got[:10])

	for _, bad := range []struct{ off, n int }{{-1, 1}, {4096, 1}, {4000, 97}} {
		assert.ErrorIs(t, s.CopyToDevice(buf, bad.off, make([]byte, bad.n)), runtime.ErrInvalidArgument)
	}
	_, err = d.Alloc(0)
	assert.ErrorIs(t, err, runtime.ErrInvalidArgument)
	assert.ErrorIs(t, s.Zero(cpu.Wrap(make([]byte, 8)), 0, 8), runtime.ErrInvalidArgument)
	require.NoError(t, buf.Free())
	require.NoError(t, buf.Free(), "a second Free does nothing")
}

func TestCompileLaunchAndWrap(t *testing.T) {
	d := openDevice(t)
	mod, err := d.Load(testProgram)
	require.NoError(t, err)
	defer mod.Close()
	again, err := d.Load(testProgram)
	require.NoError(t, err)
	assert.Same(t, mod.(*moduleHandle).mod, again.(*moduleHandle).mod, "the second Load reuses the library")
	k, err := mod.Kernel("add_one")
	require.NoError(t, err)
	assert.Positive(t, k.MaxThreadsPerBlock())
	assert.Equal(t, 32, k.(*kernel).SIMDWidth())
	_, err = mod.Kernel("missing")
	assert.ErrorIs(t, err, runtime.ErrNoKernel)

	host, err := d.AllocHost(2 * pageSize)
	require.NoError(t, err)
	mem := host.Bytes()[:2*pageSize]
	buf, aliased, err := d.WrapBytes(mem)
	require.NoError(t, err)
	require.True(t, aliased, "page-aligned whole pages are used in place")
	defer buf.Free()
	n := uint32(1000)
	for i := range n {
		binary.LittleEndian.PutUint32(mem[4*i:], i)
	}
	var a runtime.Args
	a.Buffer(buf).U32(n).F32(2.5)
	s := d.DefaultStream()
	require.NoError(t, s.Launch(k, runtime.Dim3{X: 4, Y: 1, Z: 1}, runtime.Dim3{X: 256, Y: 1, Z: 1}, &a))
	require.NoError(t, s.Synchronize())
	for i := range n {
		require.Equal(t, i+1, binary.LittleEndian.Uint32(mem[4*i:]), "element %d", i)
	}
	assert.Equal(t, float32(2.5), math.Float32frombits(binary.LittleEndian.Uint32(mem[4*n:])))

	copied, aliased, err := d.WrapBytes(make([]byte, 100))
	require.NoError(t, err)
	assert.False(t, aliased)
	require.NoError(t, copied.Free())

	err = s.Launch(k, runtime.Dim3{X: 1, Y: 1, Z: 1}, runtime.Dim3{X: k.MaxThreadsPerBlock() + 32, Y: 1, Z: 1}, &a)
	assert.ErrorIs(t, err, runtime.ErrInvalidArgument)
	var foreign runtime.Args
	foreign.Buffer(cpu.Wrap(make([]byte, 16))).U32(1).F32(0)
	assert.ErrorIs(t, s.Launch(k, runtime.Dim3{X: 1}, runtime.Dim3{X: 32}, &foreign), runtime.ErrInvalidArgument)

	// The launch path allocates nothing.
	allocs := testing.AllocsPerRun(50, func() {
		_ = s.Launch(k, runtime.Dim3{X: 4, Y: 1, Z: 1}, runtime.Dim3{X: 256, Y: 1, Z: 1}, &a)
		_ = s.Synchronize()
	})
	assert.Zero(t, allocs, "allocations per Launch and Synchronize")
}

func TestCompileErrorCarriesLog(t *testing.T) {
	d := openDevice(t)
	_, err := d.Load(&runtime.Program{Name: "broken", Metal: "kernel void f( { }"})
	require.ErrorIs(t, err, runtime.ErrCompile)
	var ce *runtime.CompileError
	require.ErrorAs(t, err, &ce)
	assert.NotEmpty(t, ce.Log)
	t.Log(err)
}

func TestEventsTime(t *testing.T) {
	d := openDevice(t)
	mod, err := d.Load(testProgram)
	require.NoError(t, err)
	k, err := mod.Kernel("add_one")
	require.NoError(t, err)
	buf, err := d.Alloc(1 << 20)
	require.NoError(t, err)
	defer buf.Free()
	start, err := d.NewEvent()
	require.NoError(t, err)
	defer start.Close()
	end, err := d.NewEvent()
	require.NoError(t, err)
	defer end.Close()
	s := d.DefaultStream()
	require.NoError(t, s.Zero(buf, 0, buf.Size()))
	var a runtime.Args
	a.Buffer(buf).U32(1<<18 - 1).F32(1)
	require.NoError(t, s.Record(start))
	for range 10 {
		require.NoError(t, s.Launch(k, runtime.Dim3{X: 1024}, runtime.Dim3{X: 256}, &a))
	}
	require.NoError(t, s.Record(end))
	require.NoError(t, end.Synchronize())
	ms, err := end.ElapsedSince(start)
	require.NoError(t, err)
	t.Logf("10 launches: %.3f ms of GPU time", ms)
	assert.GreaterOrEqual(t, ms, float32(0))
	require.NoError(t, s.Synchronize())
	assert.Equal(t, uint32(10), binary.LittleEndian.Uint32(runtime.HostBytes(buf)[4:]))
}

// TestSamplingKernelsMatchGoEdition runs the sampling kernels on the GPU and on the Go
// edition over every dtype, threadgroups of 32, 256 and 1024, and 1, 3 and 16 blocks
// per row. Tokens may differ only where Apple's precise::log or precise::exp differs
// from the correctly rounded value in the last place and that decides a draw: rare
// enough at these sizes that an exact comparison is the test.
func TestSamplingKernelsMatchGoEdition(t *testing.T) {
	d := openDevice(t)
	mod, err := d.Load(kernelsrc.Sampling())
	require.NoError(t, err)
	goKernels := gokernel.Kernels()
	r := rand.New(rand.NewPCG(5, 6))
	s := d.DefaultStream()
	for dtype, suffix := range abi.Suffixes {
		for _, base := range []string{abi.GumbelArgmax, abi.Categorical} {
			name := base + suffix
			k, err := mod.Kernel(name)
			require.NoError(t, err)
			for _, T := range []int{32, 256, 1024} {
				for _, S := range []int{1, 3, 16} {
					if base == abi.Categorical && S > 1 {
						continue
					}
					vocab := []int{1, 7, 1000, 4099, 32000}[r.IntN(5)]
					c := newGPUCase(r, dtype, vocab, 6)
					gotTok, gotSt := c.run(t, d, s, k, S, T)
					wantTok, wantSt := c.runGo(t, goKernels[name], S, T)
					assert.Equal(t, wantSt, gotSt, "%s T=%d S=%d V=%d: status", name, T, S, vocab)
					assert.Equal(t, wantTok, gotTok, "%s T=%d S=%d V=%d: tokens", name, T, S, vocab)
				}
			}
		}
	}
}

// gpuCase is one launch's inputs.
type gpuCase struct {
	dtype, vocab, rows int
	logits, params     []byte
}

func newGPUCase(r *rand.Rand, dtype, vocab, rows int) *gpuCase {
	es := 4
	if dtype != 0 {
		es = 2
	}
	c := &gpuCase{dtype: dtype, vocab: vocab, rows: rows, logits: make([]byte, rows*vocab*es),
		params: make([]byte, abi.RowParamsSize*rows)}
	for i := range rows * vocab {
		x := float32(r.NormFloat64() * 2)
		switch r.IntN(50) {
		case 0:
			x = float32(math.Inf(-1))
		case 1:
			x = 10 + 10*r.Float32()
		}
		switch dtype {
		case 0:
			binary.LittleEndian.PutUint32(c.logits[4*i:], math.Float32bits(x))
		case 1:
			binary.LittleEndian.PutUint16(c.logits[2*i:], half.Float16(x))
		default:
			binary.LittleEndian.PutUint16(c.logits[2*i:], half.BFloat16(x))
		}
	}
	for y := range rows {
		temps := []float32{0, 0.5, 1, 2}
		// Seed and step from two 32-bit draws each, low word first.
		p := abi.RowParams{Row: uint32(rows - 1 - y), Temperature: temps[r.IntN(4)],
			Seed: uint64(r.Uint32()) | uint64(r.Uint32())<<32, Step: uint64(r.Uint32()) | uint64(r.Uint32())<<32,
			TopK: []uint32{0, 1, 40, uint32(vocab)}[r.IntN(4)], TopP: []float32{0, 0.5, 0.95}[r.IntN(3)],
			MinP: []float32{0, 0.05}[r.IntN(2)]}
		p.Encode(c.params[abi.RowParamsSize*y:])
	}
	return c
}

func (c *gpuCase) run(t *testing.T, d *Device, s runtime.Stream, k runtime.Kernel, S, T int) ([]int32, []int32) {
	t.Helper()
	// Buffers 0-5, then 8-12, 14 and 15 (unused by these rows: 8 bytes each).
	sizes := []int{len(c.logits), len(c.params), 4 * c.rows, 4 * c.rows, 8 * c.rows * S, 12 * c.rows}
	for len(sizes) < abi.NumArgs-3 {
		sizes = append(sizes, 8)
	}
	bufs := make([]runtime.Buffer, len(sizes))
	for i, n := range sizes {
		b, err := d.Alloc(n)
		require.NoError(t, err)
		defer b.Free()
		require.NoError(t, s.Zero(b, 0, n))
		bufs[i] = b
	}
	require.NoError(t, s.CopyToDevice(bufs[0], 0, c.logits))
	require.NoError(t, s.CopyToDevice(bufs[1], 0, c.params))
	var a runtime.Args
	for _, b := range bufs[:6] {
		a.Buffer(b)
	}
	a.U64(uint64(c.vocab)).U32(uint32(c.vocab))
	for _, b := range bufs[6:11] {
		a.Buffer(b)
	}
	a.U32(0).Buffer(bufs[11]) // no vocabulary shard
	a.Buffer(bufs[12])        // no draft probabilities
	grid := runtime.Dim3{X: S, Y: c.rows, Z: 1}
	require.NoError(t, s.Launch(k, grid, runtime.Dim3{X: T, Y: 1, Z: 1}, &a))
	out := make([]byte, 8*c.rows)
	require.NoError(t, s.CopyToHost(out[:4*c.rows], bufs[2], 0))
	require.NoError(t, s.CopyToHost(out[4*c.rows:], bufs[3], 0))
	counters := make([]byte, 12*c.rows)
	require.NoError(t, s.CopyToHost(counters, bufs[5], 0))
	require.NoError(t, s.Synchronize())
	assert.Equal(t, make([]byte, len(counters)), counters, "counters left set")
	tok, st := make([]int32, c.rows), make([]int32, c.rows)
	for i := range c.rows {
		tok[i] = int32(binary.LittleEndian.Uint32(out[4*i:]))
		st[i] = int32(binary.LittleEndian.Uint32(out[4*(c.rows+i):]))
	}
	return tok, st
}

func (c *gpuCase) runGo(t *testing.T, fn runtime.GoKernel, S, T int) ([]int32, []int32) {
	t.Helper()
	tok, st := make([]int32, c.rows), make([]int32, c.rows)
	partials := make([]uint64, c.rows*S)
	counters := make([]uint32, 3*c.rows)
	var a runtime.Args
	a.Buffer(cpu.Wrap(c.logits)).Buffer(cpu.Wrap(c.params)).
		Buffer(cpu.Wrap(runtime.BytesOf(tok))).Buffer(cpu.Wrap(runtime.BytesOf(st))).
		Buffer(cpu.Wrap(runtime.BytesOf(partials))).Buffer(cpu.Wrap(runtime.BytesOf(counters))).
		U64(uint64(c.vocab)).U32(uint32(c.vocab))
	for i := abi.Arg(8); i < abi.NumArgs; i++ {
		if i == abi.ArgVocabOffset {
			a.U32(0)
			continue
		}
		a.Buffer(cpu.Wrap(make([]byte, 8)))
	}
	grid := runtime.Dim3{X: S, Y: c.rows, Z: 1}
	for y := range c.rows {
		for x := range S {
			fn(&runtime.BlockContext{Block: runtime.Dim3{X: x, Y: y}, Grid: grid, BlockDim: runtime.Dim3{X: T, Y: 1, Z: 1}, Args: &a})
		}
	}
	return tok, st
}

// TestSamplerOnMetal runs the sampler on Metal and on the CPU device with the same
// requests and requires the same tokens; a steady-state call allocates nothing.
func TestSamplerOnMetal(t *testing.T) {
	d := openDevice(t)
	host, err := cpu.Open()
	require.NoError(t, err)
	defer host.Close()
	onGPU, err := sampler.New(d, sampler.Options{Seed: 9})
	require.NoError(t, err)
	defer onGPU.Close()
	onCPU, err := sampler.New(host, sampler.Options{Seed: 9})
	require.NoError(t, err)
	defer onCPU.Close()

	r := rand.New(rand.NewPCG(1, 2))
	const rows, vocab = 8, 32000
	logits := make([]float32, rows*vocab)
	for i := range logits {
		logits[i] = float32(r.NormFloat64() * 3)
	}
	params := []sampler.Params{
		{Temperature: 0},
		{Temperature: 0.8, RequestID: 1},
		{Temperature: 1, Seed: 42, HasSeed: true, Step: 3},
		{Temperature: 0.7, TopK: 50, RequestID: 2},
		{Temperature: 0.9, TopP: 0.9, RequestID: 3},
		{Temperature: 1.2, MinP: 0.05, RequestID: 4},
		{Temperature: 0.6, TopK: 40, TopP: 0.8, MinP: 0.02, RequestID: 5},
		{Temperature: -1},
	}
	var got, want sampler.Result
	for step := range uint64(5) {
		for i := range params {
			params[i].Step = step
		}
		require.NoError(t, onGPU.SampleFloat32(logits, vocab, params, &got))
		require.NoError(t, onCPU.SampleFloat32(logits, vocab, params, &want))
		assert.Equal(t, want.Tokens, got.Tokens, "step %d", step)
		for i := range params {
			assert.Equal(t, want.Errs[i] == nil, got.Errs[i] == nil, "step %d row %d: %v / %v", step, i, want.Errs[i], got.Errs[i])
		}
	}
	allocs := testing.AllocsPerRun(20, func() {
		_ = onGPU.SampleFloat32(logits, vocab, params[:7], &got)
	})
	assert.Zero(t, allocs, "allocations per steady-state SampleFloat32")
}
