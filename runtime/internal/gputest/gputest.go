// Package gputest holds the test cases the CUDA and HIP backends share: what every
// device of the code in runtime/internal/gpurt must do, checked through the runtime
// interfaces on the fake driver (runtime/internal/fakegpu) and on real GPUs alike. Only
// tests import it.
package gputest

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/runtime/internal/fakegpu"
	"github.com/gumbel-go/gumbel/runtime/internal/gpurt"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Target is a device under test and what the cases need of its backend.
type Target struct {
	Dev runtime.Device
	// Core is the device's shared part, for calls an engine would make around the
	// backend (its own streams and memory).
	Core *gpurt.Device
	// Other is a second device of the same backend, for the cases that mix devices; nil
	// when there is none.
	Other runtime.Device
	// DescribesParams: the driver describes kernels' parameters, so launches are checked
	// against them (CUDA 12.4 and later; HIP cannot).
	DescribesParams   bool
	WrapStream        func(dev runtime.Device, handle uintptr) (runtime.Stream, error)
	WrapDevicePointer func(dev runtime.Device, ptr uintptr, bytes int) (runtime.Buffer, error)
	// Elsewhere is a word for API.SetCurrent that makes another device, or none,
	// current: what a call that escaped the device's locked thread would find there.
	Elsewhere uintptr
	// Nop, when not 0, is a C function that returns 0, which the per-step calls go to
	// while their allocations are counted: a fake driver's Go callbacks allocate.
	Nop uintptr
}

// Run runs every shared case on a device that open opens afresh for it.
func Run(t *testing.T, open func(t testing.TB) Target) {
	for _, c := range []struct {
		name string
		run  func(t *testing.T, tg Target)
	}{
		{"Memory", Memory},
		{"Launch", Launch},
		{"LaunchErrors", LaunchErrors},
		{"CompileError", CompileError},
		{"Events", func(t *testing.T, tg Target) { Events(t, tg) }},
		{"Wrap", Wrap},
		{"HotPathAllocs", HotPathAllocs},
		{"GoroutineHopping", func(t *testing.T, tg Target) { GoroutineHopping(t, tg, 16, 200) }},
		{"Closed", Closed},
	} {
		t.Run(c.name, func(t *testing.T) { c.run(t, open(t)) })
	}
}

// Program has the kernels of fakegpu.Source.
func Program() *runtime.Program { return &runtime.Program{Name: "gputest", CUDA: fakegpu.Source} }

// Kernels loads Program and returns its module and kernels add_one and scale; the module
// is closed when the test ends.
func Kernels(t testing.TB, d runtime.Device) (runtime.Module, runtime.Kernel, runtime.Kernel) {
	t.Helper()
	m, err := d.Load(Program())
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, m.Close()) })
	addOne, err := m.Kernel("add_one")
	require.NoError(t, err)
	scale, err := m.Kernel("scale")
	require.NoError(t, err)
	return m, addOne, scale
}

// Stream makes a stream that is closed when the test ends.
func Stream(t testing.TB, d runtime.Device) runtime.Stream {
	t.Helper()
	s, err := d.NewStream()
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, s.Close()) })
	return s
}

// Alloc allocates device memory that is freed when the test ends.
func Alloc(t testing.TB, d runtime.Device, n int) runtime.Buffer {
	t.Helper()
	b, err := d.Alloc(n)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, b.Free()) })
	return b
}

// Floats reads little-endian float32s.
func Floats(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

// FloatBytes writes little-endian float32s.
func FloatBytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return b
}

// notOurs is a buffer, kernel and event of some other backend.
type notOurs struct{}

func (notOurs) Size() int                                   { return 64 }
func (notOurs) DevicePtr() uintptr                          { return 0x1000 }
func (notOurs) Free() error                                 { return nil }
func (notOurs) Name() string                                { return "other" }
func (notOurs) MaxThreadsPerBlock() int                     { return 1024 }
func (notOurs) Synchronize() error                          { return nil }
func (notOurs) ElapsedSince(runtime.Event) (float32, error) { return 0, nil }
func (notOurs) Close() error                                { return nil }

// Memory checks copies and Zero on a stream and through pinned memory, and that bad
// ranges and buffers are refused.
func Memory(t *testing.T, tg Target) {
	d := tg.Dev
	s := Stream(t, d)
	b := Alloc(t, d, 64)
	src := make([]byte, 64)
	for i := range src {
		src[i] = byte(i + 1)
	}
	require.NoError(t, s.CopyToDevice(b, 0, src))
	require.NoError(t, s.CopyToDevice(b, 60, []byte{0xA, 0xB, 0xC, 0xD}))
	require.NoError(t, s.Zero(b, 8, 8))
	got := make([]byte, 64)
	require.NoError(t, s.CopyToHost(got, b, 0))
	require.NoError(t, s.Synchronize())
	want := append([]byte(nil), src...)
	copy(want[60:], []byte{0xA, 0xB, 0xC, 0xD})
	clear(want[8:16])
	assert.Equal(t, want, got)

	part := make([]byte, 4)
	require.NoError(t, s.CopyToHost(part, b, 60))
	assert.Equal(t, []byte{0xA, 0xB, 0xC, 0xD}, part)

	// Pinned host memory both ways, through the default stream.
	h, err := d.AllocHost(64)
	require.NoError(t, err)
	require.NoError(t, d.DefaultStream().CopyToHost(h.Bytes(), b, 0))
	require.NoError(t, d.DefaultStream().Synchronize())
	assert.Equal(t, want, h.Bytes())
	b2 := Alloc(t, d, 64)
	require.NoError(t, d.DefaultStream().CopyToDevice(b2, 0, h.Bytes()[:32]))
	require.NoError(t, d.DefaultStream().CopyToHost(got[:32], b2, 0))
	require.NoError(t, d.DefaultStream().Synchronize())
	assert.Equal(t, want[:32], got[:32])
	require.NoError(t, h.Free())
	assert.Nil(t, h.Bytes(), "no memory after Free")
	assert.NoError(t, h.Free(), "a second Free does nothing")

	bad := []struct {
		name string
		op   func() error
	}{
		{"copy past the end", func() error { return s.CopyToDevice(b, 61, make([]byte, 4)) }},
		{"negative offset", func() error { return s.CopyToDevice(b, -1, make([]byte, 4)) }},
		{"offset past the end", func() error { return s.CopyToDevice(b, 65, nil) }},
		{"read past the end", func() error { return s.CopyToHost(make([]byte, 65), b, 0) }},
		{"read huge offset", func() error { return s.CopyToHost(make([]byte, 4), b, math.MaxInt) }},
		{"zero past the end", func() error { return s.Zero(b, 32, 33) }},
		{"zero negative size", func() error { return s.Zero(b, 0, -1) }},
		{"nil buffer", func() error { return s.CopyToDevice(nil, 0, make([]byte, 4)) }},
		{"other backend's buffer", func() error { return s.Zero(notOurs{}, 0, 4) }},
		{"negative alloc", func() error { _, err := d.Alloc(-1); return err }},
		{"negative host alloc", func() error { _, err := d.AllocHost(-1); return err }},
	}
	if tg.Other != nil {
		foreign := Alloc(t, tg.Other, 16)
		bad = append(bad, struct {
			name string
			op   func() error
		}{"another device's buffer", func() error { return s.Zero(foreign, 0, 4) }})
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			assert.ErrorIs(t, c.op(), runtime.ErrInvalidArgument)
		})
	}
	assert.NoError(t, s.CopyToDevice(b, 64, nil), "an empty copy at the end is fine")

	empty, err := d.Alloc(0)
	require.NoError(t, err)
	assert.Zero(t, empty.Size())
	assert.Zero(t, empty.DevicePtr())
	assert.NoError(t, s.CopyToDevice(empty, 0, nil))
	assert.NoError(t, empty.Free())

	freed, err := d.Alloc(16)
	require.NoError(t, err)
	require.NoError(t, freed.Free())
	assert.NoError(t, freed.Free(), "a second Free does nothing")
	assert.ErrorIs(t, s.Zero(freed, 0, 4), runtime.ErrClosed)
	assert.ErrorIs(t, s.CopyToHost(part, freed, 0), runtime.ErrClosed)
}

// Launch runs add_one over a buffer, then scale over its second half through an offset
// pointer, and checks every element.
func Launch(t *testing.T, tg Target) {
	d := tg.Dev
	_, addOne, scale := Kernels(t, d)
	assert.Equal(t, "add_one", addOne.Name())
	assert.Equal(t, 1024, addOne.MaxThreadsPerBlock())
	assert.Equal(t, 256, scale.MaxThreadsPerBlock(), "the kernel's launch bound, below the device's limit")
	if tg.DescribesParams {
		require.Equal(t, []int{8, 4}, addOne.(*gpurt.Kernel).ParamSizes, "the driver must describe the kernel")
		require.Equal(t, []int{8, 4, 8}, scale.(*gpurt.Kernel).ParamSizes)
	}

	const n = 3000
	in := make([]float32, n)
	for i := range in {
		in[i] = float32(i) - 100
	}
	s := Stream(t, d)
	b := Alloc(t, d, 4*n+64)
	require.NoError(t, s.CopyToDevice(b, 0, FloatBytes(in)))
	var args runtime.Args
	args.Buffer(b).U32(n)
	require.NoError(t, s.Launch(addOne, runtime.Dim3{X: (n + 1023) / 1024}, runtime.Dim3{X: 1024}, &args))
	// A float and a u64 argument, and an offset pointer.
	args.Reset().BufferAt(b, 4*(n/2)).F32(0.5).U64(n - n/2)
	require.NoError(t, s.Launch(scale, runtime.Dim3{X: (n + 255) / 256}, runtime.Dim3{X: 256}, &args))
	out := make([]byte, 4*n)
	require.NoError(t, s.CopyToHost(out, b, 0))
	require.NoError(t, s.Synchronize())
	got := Floats(out)
	for i, x := range in {
		want := x + 1
		if i >= n/2 {
			want *= 0.5
		}
		if got[i] != want {
			t.Fatalf("element %d: got %v, want %v", i, got[i], want)
		}
	}
}

// LaunchErrors checks that bad launches are refused before they reach the driver, and
// that the stream works after them.
func LaunchErrors(t *testing.T, tg Target) {
	d := tg.Dev
	m, addOne, scale := Kernels(t, d)
	s := Stream(t, d)
	b := Alloc(t, d, 4096)
	freed, err := d.Alloc(64)
	require.NoError(t, err)
	require.NoError(t, freed.Free())
	one := runtime.Dim3{X: 1}
	type launch struct {
		name        string
		k           runtime.Kernel
		grid, block runtime.Dim3
		build       func(a *runtime.Args)
		nilArgs     bool
		want        error
	}
	ok := func(a *runtime.Args) { a.Buffer(b).U32(1) }
	cases := []launch{
		{name: "freed buffer", k: addOne, grid: one, block: one, build: func(a *runtime.Args) { a.Buffer(freed).U32(1) }, want: runtime.ErrClosed},
		{name: "other backend's buffer", k: addOne, grid: one, block: one, build: func(a *runtime.Args) { a.Buffer(notOurs{}).U32(1) }, want: runtime.ErrInvalidArgument},
		{name: "nil buffer", k: addOne, grid: one, block: one, build: func(a *runtime.Args) { a.Buffer(nil).U32(1) }, want: runtime.ErrInvalidArgument},
		{name: "nil args", k: addOne, grid: one, block: one, nilArgs: true, want: runtime.ErrInvalidArgument},
		{name: "block over the device limit", k: addOne, grid: one, block: runtime.Dim3{X: 2048}, build: ok, want: runtime.ErrInvalidArgument},
		{name: "block over the kernel limit", k: scale, grid: one, block: runtime.Dim3{X: 512}, build: func(a *runtime.Args) { a.Buffer(b).F32(1).U64(1) }, want: runtime.ErrInvalidArgument},
		{name: "block of 32x32x2", k: addOne, grid: one, block: runtime.Dim3{X: 32, Y: 32, Z: 2}, build: ok, want: runtime.ErrInvalidArgument},
		{name: "negative grid", k: addOne, grid: runtime.Dim3{X: -1}, block: one, build: ok, want: runtime.ErrInvalidArgument},
		{name: "grid y too large", k: addOne, grid: runtime.Dim3{X: 1, Y: 70000}, block: one, build: ok, want: runtime.ErrInvalidArgument},
		{name: "not a kernel of the backend", k: notOurs{}, grid: one, block: one, build: ok, want: runtime.ErrInvalidArgument},
		{name: "nil kernel", k: nil, grid: one, block: one, build: ok, want: runtime.ErrInvalidArgument},
		{name: "more arguments than a launch carries", k: addOne, grid: one, block: one, build: func(a *runtime.Args) {
			for i := 0; i <= runtime.MaxArgs; i++ {
				a.U32(uint32(i))
			}
		}, want: runtime.ErrInvalidArgument},
	}
	if tg.DescribesParams {
		cases = append(cases,
			launch{name: "too few arguments", k: addOne, grid: one, block: one, build: func(a *runtime.Args) { a.Buffer(b) }, want: runtime.ErrInvalidArgument},
			launch{name: "too many arguments", k: addOne, grid: one, block: one, build: func(a *runtime.Args) { a.Buffer(b).U32(1).U32(2) }, want: runtime.ErrInvalidArgument},
			launch{name: "u64 for a u32", k: addOne, grid: one, block: one, build: func(a *runtime.Args) { a.Buffer(b).U64(1) }, want: runtime.ErrInvalidArgument},
			launch{name: "u32 for a pointer", k: addOne, grid: one, block: one, build: func(a *runtime.Args) { a.U32(0).U32(1) }, want: runtime.ErrInvalidArgument})
	}
	if tg.Other != nil {
		_, foreignKernel, _ := Kernels(t, tg.Other)
		foreign := Alloc(t, tg.Other, 16)
		cases = append(cases,
			launch{name: "kernel of another device", k: foreignKernel, grid: one, block: one, build: ok, want: runtime.ErrInvalidArgument},
			launch{name: "buffer of another device", k: addOne, grid: one, block: one, build: func(a *runtime.Args) { a.Buffer(foreign).U32(1) }, want: runtime.ErrInvalidArgument})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var a runtime.Args
			ap := &a
			if c.nilArgs {
				ap = nil
			} else {
				c.build(ap)
			}
			assert.ErrorIs(t, s.Launch(c.k, c.grid, c.block, ap), c.want)
		})
	}

	_, err = m.Kernel("no_such_kernel")
	assert.ErrorIs(t, err, runtime.ErrNoKernel)
	again, err := m.Kernel("add_one")
	require.NoError(t, err)
	assert.Same(t, addOne, again, "kernels are looked up once")

	// The stream still works after refused launches.
	var good runtime.Args
	good.Buffer(b).U32(4)
	require.NoError(t, s.Launch(addOne, one, runtime.Dim3{X: 32}, &good))
	require.NoError(t, s.Synchronize())

	require.NoError(t, m.Close())
	assert.NoError(t, m.Close(), "a second Close does nothing")
	assert.ErrorIs(t, s.Launch(addOne, one, one, &good), runtime.ErrClosed)
	_, err = m.Kernel("add_one")
	assert.ErrorIs(t, err, runtime.ErrClosed)
}

// CompileError checks that a program that does not compile fails Load with a
// runtime.CompileError that carries the compiler's log, and that a program without
// source is refused.
func CompileError(t *testing.T, tg Target) {
	d := tg.Dev
	_, err := d.Load(&runtime.Program{Name: "broken", CUDA: "#error gumbel wants this to fail\n"})
	require.Error(t, err)
	assert.ErrorIs(t, err, runtime.ErrCompile)
	var ce *runtime.CompileError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, d.Info().Backend, ce.Backend)
	assert.Contains(t, ce.Program, "broken")
	assert.Contains(t, ce.Log, "gumbel wants this to fail")

	_, err = d.Load(&runtime.Program{Name: "empty"})
	assert.ErrorIs(t, err, runtime.ErrInvalidArgument)
	_, err = d.Load(&runtime.Program{Name: "metal only", Metal: "kernel void k() {}"})
	assert.ErrorIs(t, err, runtime.ErrInvalidArgument)
	_, err = d.Load(nil)
	assert.ErrorIs(t, err, runtime.ErrInvalidArgument)
}

// Events times a launch between two events and returns the milliseconds.
func Events(t *testing.T, tg Target) float32 {
	d := tg.Dev
	_, addOne, _ := Kernels(t, d)
	s := Stream(t, d)
	const n = 1 << 22
	b := Alloc(t, d, 4*n)
	require.NoError(t, s.Zero(b, 0, 4*n))
	start, err := d.NewEvent()
	require.NoError(t, err)
	end, err := d.NewEvent()
	require.NoError(t, err)
	defer func() { assert.NoError(t, end.Close()) }()
	var args runtime.Args
	args.Buffer(b).U32(n)
	require.NoError(t, s.Record(start))
	require.NoError(t, s.Launch(addOne, runtime.Dim3{X: n / 1024}, runtime.Dim3{X: 1024}, &args))
	require.NoError(t, s.Record(end))
	require.NoError(t, end.Synchronize())
	ms, err := end.ElapsedSince(start)
	require.NoError(t, err)
	assert.Greater(t, ms, float32(0))
	assert.False(t, math.IsInf(float64(ms), 0) || math.IsNaN(float64(ms)))
	t.Logf("add_one over %d floats: %.3f ms by events", n, ms)

	_, err = end.ElapsedSince(nil)
	assert.ErrorIs(t, err, runtime.ErrInvalidArgument)
	_, err = end.ElapsedSince(notOurs{})
	assert.ErrorIs(t, err, runtime.ErrInvalidArgument)
	assert.ErrorIs(t, s.Record(nil), runtime.ErrInvalidArgument)

	require.NoError(t, start.Close())
	assert.NoError(t, start.Close(), "a second Close does nothing")
	assert.ErrorIs(t, s.Record(start), runtime.ErrClosed)
	_, err = end.ElapsedSince(start)
	assert.ErrorIs(t, err, runtime.ErrClosed)
	return ms
}
