package cuda

// Test cases that run against any *Device: the fake driver on every Linux machine
// (fake_device_linux_test.go) and a real GPU with -tags gpu (gpu_test.go).

import (
	"encoding/binary"
	"errors"
	"math"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/runtime/internal/gpurt"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testSource holds the test kernels. scale's launch bound gives it a smaller block limit
// than the device's, so launches can be checked against the kernel's own limit.
const testSource = `
extern "C" __global__ void add_one(float* x, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += 1.0f;
}
extern "C" __global__ void __launch_bounds__(256) scale(float* x, float a, unsigned long long n) {
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}
`

func testProgram() *runtime.Program { return &runtime.Program{Name: "cuda_test", CUDA: testSource} }

func loadKernels(t *testing.T, d *Device) (runtime.Module, runtime.Kernel, runtime.Kernel) {
	t.Helper()
	m, err := d.Load(testProgram())
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, m.Close()) })
	addOne, err := m.Kernel("add_one")
	require.NoError(t, err)
	scale, err := m.Kernel("scale")
	require.NoError(t, err)
	return m, addOne, scale
}

func floats(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

func floatBytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return b
}

func newStream(t *testing.T, d *Device) runtime.Stream {
	t.Helper()
	s, err := d.NewStream()
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, s.Close()) })
	return s
}

func alloc(t *testing.T, d *Device, n int) runtime.Buffer {
	t.Helper()
	b, err := d.Alloc(n)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, b.Free()) })
	return b
}

func caseAllocCopyZero(t *testing.T, d *Device) {
	s := newStream(t, d)
	b := alloc(t, d, 64)
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

	// Pinned host memory round trip, through the default stream.
	h, err := d.AllocHost(64)
	require.NoError(t, err)
	defer func() { assert.NoError(t, h.Free()) }()
	require.NoError(t, d.DefaultStream().CopyToHost(h.Bytes(), b, 0))
	require.NoError(t, d.DefaultStream().Synchronize())
	assert.Equal(t, want, h.Bytes())

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
		{"foreign buffer", func() error { return s.Zero(notCUDABuffer{}, 0, 4) }},
		{"negative alloc", func() error { _, err := d.Alloc(-1); return err }},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			err := c.op()
			require.Error(t, err)
			assert.ErrorIs(t, err, runtime.ErrInvalidArgument)
		})
	}

	empty, err := d.Alloc(0)
	require.NoError(t, err)
	assert.Zero(t, empty.Size())
	assert.NoError(t, s.CopyToDevice(empty, 0, nil))
	assert.NoError(t, empty.Free())

	freed, err := d.Alloc(16)
	require.NoError(t, err)
	require.NoError(t, freed.Free())
	assert.NoError(t, freed.Free(), "a second Free does nothing")
	assert.ErrorIs(t, s.Zero(freed, 0, 4), runtime.ErrClosed)
}

// notCUDABuffer is a Buffer of some other backend.
type notCUDABuffer struct{}

func (notCUDABuffer) Size() int          { return 64 }
func (notCUDABuffer) DevicePtr() uintptr { return 0x1000 }
func (notCUDABuffer) Free() error        { return nil }

func caseLaunch(t *testing.T, d *Device) {
	_, addOne, scale := loadKernels(t, d)
	assert.Equal(t, "add_one", addOne.Name())
	assert.Equal(t, 1024, addOne.MaxThreadsPerBlock())
	assert.Equal(t, 256, scale.MaxThreadsPerBlock())
	require.Equal(t, []int{8, 4}, addOne.(*kernel).core.ParamSizes, "cuFuncGetParamInfo must describe the kernel")
	require.Equal(t, []int{8, 4, 8}, scale.(*kernel).core.ParamSizes)

	const n = 3000
	in := make([]float32, n)
	for i := range in {
		in[i] = float32(i) - 100
	}
	s := newStream(t, d)
	b := alloc(t, d, 4*n+64)
	require.NoError(t, s.CopyToDevice(b, 0, floatBytes(in)))
	var args runtime.Args
	args.Buffer(b).U32(n)
	require.NoError(t, s.Launch(addOne, runtime.Dim3{X: (n + 1023) / 1024}, runtime.Dim3{X: 1024}, &args))
	// Scale only the second half, through an offset pointer: a float and a u64 argument.
	args.Reset().BufferAt(b, 4*(n/2)).F32(0.5).U64(n - n/2)
	require.NoError(t, s.Launch(scale, runtime.Dim3{X: (n + 255) / 256}, runtime.Dim3{X: 256}, &args))
	out := make([]byte, 4*n)
	require.NoError(t, s.CopyToHost(out, b, 0))
	require.NoError(t, s.Synchronize())
	got := floats(out)
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

func caseLaunchErrors(t *testing.T, d *Device) {
	m, addOne, scale := loadKernels(t, d)
	s := newStream(t, d)
	b := alloc(t, d, 4096)
	freed, err := d.Alloc(64)
	require.NoError(t, err)
	require.NoError(t, freed.Free())
	one := runtime.Dim3{X: 1}
	cases := []struct {
		name        string
		k           runtime.Kernel
		grid, block runtime.Dim3
		build       func(a *runtime.Args)
		nilArgs     bool
		want        error
	}{
		{name: "too few arguments", k: addOne, grid: one, block: one, build: func(a *runtime.Args) { a.Buffer(b) }, want: runtime.ErrInvalidArgument},
		{name: "too many arguments", k: addOne, grid: one, block: one, build: func(a *runtime.Args) { a.Buffer(b).U32(1).U32(2) }, want: runtime.ErrInvalidArgument},
		{name: "u64 for a u32", k: addOne, grid: one, block: one, build: func(a *runtime.Args) { a.Buffer(b).U64(1) }, want: runtime.ErrInvalidArgument},
		{name: "u32 for a pointer", k: addOne, grid: one, block: one, build: func(a *runtime.Args) { a.U32(0).U32(1) }, want: runtime.ErrInvalidArgument},
		{name: "freed buffer", k: addOne, grid: one, block: one, build: func(a *runtime.Args) { a.Buffer(freed).U32(1) }, want: runtime.ErrClosed},
		{name: "other backend's buffer", k: addOne, grid: one, block: one, build: func(a *runtime.Args) { a.Buffer(notCUDABuffer{}).U32(1) }, want: runtime.ErrInvalidArgument},
		{name: "nil buffer", k: addOne, grid: one, block: one, build: func(a *runtime.Args) { a.Buffer(nil).U32(1) }, want: runtime.ErrInvalidArgument},
		{name: "nil args", k: addOne, grid: one, block: one, nilArgs: true, want: runtime.ErrInvalidArgument},
		{name: "block over the device limit", k: addOne, grid: one, block: runtime.Dim3{X: 2048}, build: func(a *runtime.Args) { a.Buffer(b).U32(1) }, want: runtime.ErrInvalidArgument},
		{name: "block over the kernel limit", k: scale, grid: one, block: runtime.Dim3{X: 512}, build: func(a *runtime.Args) { a.Buffer(b).F32(1).U64(1) }, want: runtime.ErrInvalidArgument},
		{name: "block of 32x32x2", k: addOne, grid: one, block: runtime.Dim3{X: 32, Y: 32, Z: 2}, build: func(a *runtime.Args) { a.Buffer(b).U32(1) }, want: runtime.ErrInvalidArgument},
		{name: "negative grid", k: addOne, grid: runtime.Dim3{X: -1}, block: one, build: func(a *runtime.Args) { a.Buffer(b).U32(1) }, want: runtime.ErrInvalidArgument},
		{name: "grid y too large", k: addOne, grid: runtime.Dim3{X: 1, Y: 70000}, block: one, build: func(a *runtime.Args) { a.Buffer(b).U32(1) }, want: runtime.ErrInvalidArgument},
		{name: "not a CUDA kernel", k: otherKernel{}, grid: one, block: one, build: func(a *runtime.Args) { a.Buffer(b).U32(1) }, want: runtime.ErrInvalidArgument},
		{name: "nil kernel", k: nil, grid: one, block: one, build: func(a *runtime.Args) { a.Buffer(b).U32(1) }, want: runtime.ErrInvalidArgument},
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
			err := s.Launch(c.k, c.grid, c.block, ap)
			require.Error(t, err)
			assert.ErrorIs(t, err, c.want)
		})
	}

	var many runtime.Args
	for i := 0; i <= runtime.MaxArgs; i++ {
		many.U32(uint32(i))
	}
	assert.ErrorIs(t, s.Launch(addOne, one, one, &many), runtime.ErrInvalidArgument)

	_, err = m.Kernel("no_such_kernel")
	assert.ErrorIs(t, err, runtime.ErrNoKernel)

	// The stream still works after refused launches.
	var ok runtime.Args
	ok.Buffer(b).U32(4)
	require.NoError(t, s.Launch(addOne, one, runtime.Dim3{X: 32}, &ok))
	require.NoError(t, s.Synchronize())

	require.NoError(t, m.Close())
	assert.ErrorIs(t, s.Launch(addOne, one, one, &ok), runtime.ErrClosed)
	_, err = m.Kernel("add_one")
	assert.ErrorIs(t, err, runtime.ErrClosed)
}

// otherKernel is a Kernel of some other backend.
type otherKernel struct{}

func (otherKernel) Name() string            { return "other" }
func (otherKernel) MaxThreadsPerBlock() int { return 1024 }

func caseCompileError(t *testing.T, d *Device) {
	t.Setenv(EnvCacheDir, "off")
	_, err := d.Load(&runtime.Program{Name: "broken", CUDA: "#error gumbel wants this to fail\n"})
	require.Error(t, err)
	assert.ErrorIs(t, err, runtime.ErrCompile)
	var ce *runtime.CompileError
	require.True(t, errors.As(err, &ce))
	assert.Equal(t, runtime.CUDA, ce.Backend)
	assert.Equal(t, "broken", ce.Program)
	assert.Contains(t, ce.Log, "gumbel wants this to fail")
	var nr NVRTCResult
	require.True(t, errors.As(err, &nr))
	assert.Equal(t, NVRTCErrorCompilation, nr)
	assert.Contains(t, err.Error(), "NVRTC_ERROR_COMPILATION")

	_, err = d.Load(&runtime.Program{Name: "empty"})
	assert.ErrorIs(t, err, runtime.ErrInvalidArgument)
	_, err = d.Load(nil)
	assert.ErrorIs(t, err, runtime.ErrInvalidArgument)
}

func caseEvents(t *testing.T, d *Device) float32 {
	_, addOne, _ := loadKernels(t, d)
	s := newStream(t, d)
	const n = 1 << 22
	b := alloc(t, d, 4*n)
	require.NoError(t, s.Zero(b, 0, 4*n))
	start, err := d.NewEvent()
	require.NoError(t, err)
	defer func() { assert.NoError(t, start.Close()) }()
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
	assert.ErrorIs(t, s.Record(nil), runtime.ErrInvalidArgument)
	return ms
}

// rawStream creates a CUstream outside the package's wrappers, as an engine would.
func rawStream(t *testing.T, d *Device) uintptr {
	var h uintptr
	require.NoError(t, d.core.WithDevice(func() error {
		if r := Result(gpurt.CallN(d.drv.cuStreamCreate, uintptr(unsafe.Pointer(&h)), streamNonBlocking)); r != Success {
			return r
		}
		return nil
	}))
	return h
}

func caseWrap(t *testing.T, d *Device) {
	// Memory the "engine" owns.
	var raw uintptr
	require.NoError(t, d.core.WithDevice(func() error {
		if r := Result(gpurt.CallN(d.drv.cuMemAlloc, uintptr(unsafe.Pointer(&raw)), 1024)); r != Success {
			return r
		}
		return nil
	}))
	h := rawStream(t, d)

	ws, err := WrapStream(d, h)
	require.NoError(t, err)
	assert.Equal(t, h, ws.Handle())
	wb, err := WrapDevicePointer(d, raw+256, 512)
	require.NoError(t, err)
	assert.Equal(t, 512, wb.Size())
	assert.Equal(t, raw+256, wb.DevicePtr())

	require.NoError(t, ws.CopyToDevice(wb, 0, floatBytes([]float32{1, 2, 3, 4})))
	_, addOne, _ := loadKernels(t, d)
	var args runtime.Args
	args.Buffer(wb).U32(4)
	require.NoError(t, ws.Launch(addOne, runtime.Dim3{X: 1}, runtime.Dim3{X: 32}, &args))
	out := make([]byte, 16)
	require.NoError(t, ws.CopyToHost(out, wb, 0))
	require.NoError(t, ws.Synchronize())
	assert.Equal(t, []float32{2, 3, 4, 5}, floats(out))

	require.NoError(t, wb.Free())
	require.NoError(t, ws.Close())
	// Both still belong to the engine: releasing them succeeds exactly once, there.
	require.NoError(t, d.core.WithDevice(func() error {
		if r := Result(gpurt.CallN(d.drv.cuStreamDestroy, h)); r != Success {
			return failed("cuStreamDestroy_v2 of the engine's stream", r)
		}
		if r := Result(gpurt.CallN(d.drv.cuMemFree, raw)); r != Success {
			return failed("cuMemFree_v2 of the engine's memory", r)
		}
		return nil
	}))

	owned := alloc(t, d, 256)
	bad := []struct {
		name string
		ptr  uintptr
		n    int
	}{
		{"runs a terabyte past its allocation", owned.DevicePtr() + 128, 1 << 40},
		{"larger than the address space", owned.DevicePtr(), math.MaxInt},
		{"negative size", owned.DevicePtr(), -1},
		{"null pointer", 0, 16},
	}
	for _, c := range bad {
		_, err := WrapDevicePointer(d, c.ptr, c.n)
		assert.ErrorIs(t, err, runtime.ErrInvalidArgument, c.name)
	}
	_, err = WrapDevicePointer(nil, owned.DevicePtr(), 16)
	assert.ErrorIs(t, err, runtime.ErrInvalidArgument)
	_, err = WrapStream(nil, 0)
	assert.ErrorIs(t, err, runtime.ErrInvalidArgument)
	whole, err := WrapDevicePointer(d, owned.DevicePtr(), 256)
	require.NoError(t, err)
	assert.NoError(t, whole.Free())
}

// caseHotPathAllocs checks that a sampling step's calls allocate nothing on the Go heap.
func caseHotPathAllocs(t *testing.T, d *Device, m runtime.Module) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own; run without -race")
	}
	addOne, err := m.Kernel("add_one")
	require.NoError(t, err)
	var s runtime.Stream = newStream(t, d)
	const n = 1024
	b := alloc(t, d, 4*n)
	host := make([]byte, 4*n)
	pinned, err := d.AllocHost(4 * n)
	require.NoError(t, err)
	defer func() { assert.NoError(t, pinned.Free()) }()
	pin := pinned.Bytes()
	ev, err := d.NewEvent()
	require.NoError(t, err)
	defer func() { assert.NoError(t, ev.Close()) }()
	var args runtime.Args
	grid, block := runtime.Dim3{X: 1}, runtime.Dim3{X: 1024}
	var failure atomic.Pointer[error]
	check := func(err error) {
		if err != nil {
			e := err // declared here, so that only a failure allocates
			failure.CompareAndSwap(nil, &e)
		}
	}
	step := func() {
		check(s.CopyToDevice(b, 0, host))
		check(s.CopyToDevice(b, 0, pin))
		args.Reset().Buffer(b).U32(n)
		check(s.Launch(addOne, grid, block, &args))
		check(s.Zero(b, 0, 64))
		check(s.CopyToHost(host, b, 0))
		check(s.CopyToHost(pin, b, 0))
		check(s.Record(ev))
		check(s.Synchronize())
		check(ev.Synchronize())
	}
	step() // the first calls may set up lazily
	allocs := testing.AllocsPerRun(200, step)
	if e := failure.Load(); e != nil {
		t.Fatal(*e)
	}
	assert.Zero(t, allocs, "allocations per step (copies, launch, zero, record, synchronize)")
}

// caseGoroutineHopping runs launches on many goroutines while others clear the current
// context on whatever threads they land on: a driver call that ran without the device's
// context made current on its own locked thread fails with CUDA_ERROR_INVALID_CONTEXT.
func caseGoroutineHopping(t *testing.T, d *Device, m runtime.Module, workers, iterations int) {
	addOne, err := m.Kernel("add_one")
	require.NoError(t, err)
	const n = 256
	done := make(chan struct{})
	var scrambles atomic.Int64
	var scramblers sync.WaitGroup
	for i := 0; i < 4; i++ {
		scramblers.Add(1)
		go func() {
			defer scramblers.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				goruntime.LockOSThread()
				gpurt.CallN(d.drv.cuCtxSetCurrent, 0)
				goruntime.UnlockOSThread()
				scrambles.Add(1)
				goruntime.Gosched()
			}
		}()
	}
	errs := make(chan error, workers)
	results := make([][]float32, workers)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			errs <- func() error {
				s, err := d.NewStream()
				if err != nil {
					return err
				}
				defer s.Close()
				b, err := d.Alloc(4 * n)
				if err != nil {
					return err
				}
				defer b.Free()
				if err := s.Zero(b, 0, 4*n); err != nil {
					return err
				}
				var args runtime.Args
				for i := 0; i < iterations; i++ {
					args.Reset().Buffer(b).U32(n)
					if err := s.Launch(addOne, runtime.Dim3{X: 1}, runtime.Dim3{X: n}, &args); err != nil {
						return err
					}
					if err := s.Synchronize(); err != nil {
						return err
					}
					goruntime.Gosched()
				}
				out := make([]byte, 4*n)
				if err := s.CopyToHost(out, b, 0); err != nil {
					return err
				}
				results[w] = floats(out)
				return s.Synchronize()
			}()
		}(w)
	}
	wg.Wait()
	close(done)
	scramblers.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	assert.Positive(t, scrambles.Load(), "the scramblers ran")
	for w, r := range results {
		for i, v := range r {
			if v != float32(iterations) {
				t.Fatalf("worker %d element %d: %v after %d launches", w, i, v, iterations)
			}
		}
	}
	t.Logf("%d workers x %d launches, %d context scrambles", workers, iterations, scrambles.Load())
}

// caseLoadCache loads a program cold (NVRTC), warm from disk and warm from memory, and
// then from a corrupted disk entry, which must be recompiled.
func caseLoadCache(t *testing.T, d *Device) {
	dir := t.TempDir()
	t.Setenv(EnvCacheDir, dir)
	memoryCache.forget()
	p := &runtime.Program{Name: "cache_test", CUDA: testSource + "\n// " + t.Name() + "\n"}
	load := func(want LoadSource) LoadStats {
		t.Helper()
		m, err := d.Load(p)
		require.NoError(t, err)
		k, err := m.Kernel("add_one")
		require.NoError(t, err)
		assert.Equal(t, "add_one", k.Name())
		require.NoError(t, m.Close())
		st := d.LastLoad()
		assert.Equal(t, want, st.Source)
		assert.Equal(t, "cache_test", st.Program)
		assert.Equal(t, d.Target(), st.Target)
		return st
	}
	cold := load(Compiled)
	require.NoError(t, cold.CacheErr)
	assert.Positive(t, cold.Compile)
	memoryCache.forget()
	disk := load(DiskCache)
	require.NoError(t, disk.CacheErr)
	assert.Zero(t, disk.Compile)
	warm := load(MemoryCache)
	assert.Equal(t, cold.Key, warm.Key)
	t.Logf("Load of %s for %s: cold (NVRTC %v) %v, disk cache %v, memory cache %v",
		p.Name, cold.Target, cold.Compile.Round(time.Microsecond), cold.Total.Round(time.Microsecond),
		disk.Total.Round(time.Microsecond), warm.Total.Round(time.Microsecond))

	// Corrupt the one entry: it must be recompiled and rewritten, never loaded.
	matches := glob(dir + "/cuda/*.bin")
	require.Len(t, matches, 1)
	corruptFile(t, matches[0])
	memoryCache.forget()
	again := load(Compiled)
	require.Error(t, again.CacheErr)
	assert.Contains(t, again.CacheErr.Error(), "checksum")
	memoryCache.forget()
	load(DiskCache)
	assert.Empty(t, glob(dir+"/cuda/*.tmp"), "no temporary files are left behind")
}
