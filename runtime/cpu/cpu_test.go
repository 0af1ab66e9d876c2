package cpu_test

import (
	"fmt"
	goruntime "runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/kernelsrc"
	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/runtime/cpu"
)

func open(t testing.TB) runtime.Device {
	t.Helper()
	d, err := cpu.Open()
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// load loads a program of the given Go kernels and returns its kernels by name.
func load(t testing.TB, d runtime.Device, kernels map[string]runtime.GoKernel) map[string]runtime.Kernel {
	t.Helper()
	m, err := d.Load(&runtime.Program{Name: "test", Go: kernels})
	require.NoError(t, err)
	out := map[string]runtime.Kernel{}
	for name := range kernels {
		k, err := m.Kernel(name)
		require.NoError(t, err)
		out[name] = k
	}
	return out
}

var one = runtime.Dim3{X: 1, Y: 1, Z: 1}

func TestInfo(t *testing.T) {
	info := open(t).Info()
	assert.Equal(t, runtime.CPU, info.Backend)
	assert.Equal(t, "go", info.Arch)
	assert.Equal(t, goruntime.GOMAXPROCS(0), info.Multiprocessors)
	assert.Equal(t, 1024, info.MaxThreadsPerBlock)
	assert.Equal(t, 1, info.WarpSize)
	assert.True(t, info.UnifiedMemory)
	assert.Equal(t, fmt.Sprintf("Go CPU (%d workers, %s)", goruntime.GOMAXPROCS(0), goruntime.GOARCH), info.Name)
}

func TestRegistered(t *testing.T) {
	assert.Contains(t, runtime.Backends(), runtime.CPU)
	d, err := runtime.Open(runtime.OpenOptions{Backend: "cpu"})
	require.NoError(t, err)
	assert.Equal(t, runtime.CPU, d.Info().Backend)
	require.NoError(t, d.Close())
	_, err = runtime.Open(runtime.OpenOptions{Backend: "cpu", Ordinal: 1})
	assert.ErrorIs(t, err, runtime.ErrInvalidArgument)
	found := false
	for _, p := range runtime.ProbeAll() {
		if p.Backend == runtime.CPU {
			found = true
			assert.NoError(t, p.Err)
			assert.Len(t, p.Devices, 1)
		}
	}
	assert.True(t, found, "the CPU backend answers a probe")
}

func TestAllocAlignedAndZeroed(t *testing.T) {
	d := open(t)
	for _, n := range []int{0, 1, 3, 64, 1000, 1 << 20} {
		b, err := d.Alloc(n)
		require.NoError(t, err)
		assert.Equal(t, n, b.Size())
		mem := runtime.HostBytes(b)
		require.Len(t, mem, n)
		if n > 0 {
			assert.Equal(t, uintptr(unsafe.Pointer(&mem[0])), b.DevicePtr(), "DevicePtr is the address")
			assert.Zero(t, b.DevicePtr()%64, "64-byte aligned")
			assert.Equal(t, make([]byte, n), mem, "zeroed")
		}
		require.NoError(t, b.Free())
		assert.ErrorIs(t, b.Free(), runtime.ErrInvalidArgument, "double free")
	}
	_, err := d.Alloc(-1)
	assert.ErrorIs(t, err, runtime.ErrInvalidArgument)
	_, err = d.Alloc(1 << 62)
	assert.ErrorIs(t, err, runtime.ErrOutOfMemory)

	h, err := d.AllocHost(100)
	require.NoError(t, err)
	assert.Len(t, h.Bytes(), 100)
	require.NoError(t, h.Free())
	assert.Nil(t, h.Bytes())
	_, err = d.AllocHost(-5)
	assert.ErrorIs(t, err, runtime.ErrInvalidArgument)
}

func TestCopyRoundTrip(t *testing.T) {
	d := open(t)
	s := d.DefaultStream()
	b, err := d.Alloc(64)
	require.NoError(t, err)
	src := []byte("abcdefghijklmnopqrstuvwxyz")
	require.NoError(t, s.CopyToDevice(b, 10, src))
	require.NoError(t, s.Zero(b, 12, 3))
	got := make([]byte, len(src))
	require.NoError(t, s.CopyToHost(got, b, 10))
	require.NoError(t, s.Synchronize())
	assert.Equal(t, "ab\x00\x00\x00fghijklmnopqrstuvwxyz", string(got))
	// Empty copies at the very end are in bounds.
	require.NoError(t, s.CopyToDevice(b, 64, nil))
	require.NoError(t, s.Zero(b, 64, 0))
}

func TestCopyBounds(t *testing.T) {
	d := open(t)
	s := d.DefaultStream()
	b, err := d.Alloc(16)
	require.NoError(t, err)
	cases := []struct {
		name string
		call func() error
		in   string
	}{
		{"to device past the end", func() error { return s.CopyToDevice(b, 10, make([]byte, 7)) }, "CopyToDevice"},
		{"to device negative offset", func() error { return s.CopyToDevice(b, -1, make([]byte, 1)) }, "CopyToDevice"},
		{"to device offset past the end", func() error { return s.CopyToDevice(b, 17, nil) }, "CopyToDevice"},
		{"to host past the end", func() error { return s.CopyToHost(make([]byte, 17), b, 0) }, "CopyToHost"},
		{"to host negative offset", func() error { return s.CopyToHost(make([]byte, 1), b, -3) }, "CopyToHost"},
		{"zero past the end", func() error { return s.Zero(b, 8, 9) }, "Zero"},
		{"zero negative count", func() error { return s.Zero(b, 0, -1) }, "Zero"},
		{"zero nil buffer", func() error { return s.Zero(nil, 0, 0) }, "Zero"},
		{"to host from a foreign buffer", func() error { return s.CopyToHost(make([]byte, 1), foreign{}, 0) }, "CopyToHost"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.call()
			require.ErrorIs(t, err, runtime.ErrInvalidArgument)
			assert.Contains(t, err.Error(), c.in)
		})
	}
	require.NoError(t, b.Free())
	assert.ErrorIs(t, s.Zero(b, 0, 1), runtime.ErrInvalidArgument, "freed buffer")
}

// foreign is a buffer of some other device: no host memory.
type foreign struct{}

func (foreign) Size() int          { return 8 }
func (foreign) DevicePtr() uintptr { return 1 }
func (foreign) Free() error        { return nil }

func TestWrap(t *testing.T) {
	d := open(t)
	mem := make([]byte, 8)
	b := cpu.Wrap(mem)
	assert.Equal(t, 8, b.Size())
	assert.Equal(t, uintptr(unsafe.Pointer(&mem[0])), b.DevicePtr())
	require.NoError(t, d.DefaultStream().CopyToDevice(b, 2, []byte{7, 8}))
	assert.Equal(t, []byte{0, 0, 7, 8, 0, 0, 0, 0}, mem, "the copy lands in the caller's memory")
	require.NoError(t, b.Free())
	assert.Equal(t, []byte{0, 0, 7, 8, 0, 0, 0, 0}, mem, "Free leaves the caller's memory alone")
	assert.Zero(t, cpu.Wrap(nil).DevicePtr())
}

func TestLoad(t *testing.T) {
	d := open(t)
	_, err := d.Load(nil)
	assert.ErrorIs(t, err, runtime.ErrInvalidArgument)
	_, err = d.Load(&runtime.Program{Name: "cuda only", CUDA: "__global__ void k() {}"})
	assert.ErrorIs(t, err, runtime.ErrInvalidArgument)
	_, err = d.Load(&runtime.Program{Name: "nil kernel", Go: map[string]runtime.GoKernel{"k": nil}})
	assert.ErrorIs(t, err, runtime.ErrInvalidArgument)

	m, err := d.Load(kernelsrc.Sampling())
	require.NoError(t, err)
	k, err := m.Kernel("gumbel_argmax_f32")
	require.NoError(t, err)
	assert.Equal(t, "gumbel_argmax_f32", k.Name())
	assert.Equal(t, 1024, k.MaxThreadsPerBlock())
	_, err = m.Kernel("nope")
	assert.ErrorIs(t, err, runtime.ErrNoKernel)
	require.NoError(t, m.Close())
	_, err = m.Kernel("gumbel_argmax_f32")
	assert.ErrorIs(t, err, runtime.ErrClosed)
	var a runtime.Args
	assert.ErrorIs(t, d.DefaultStream().Launch(k, one, one, &a), runtime.ErrClosed, "kernel of a closed module")
}

// TestLaunchRunsEveryBlockOnce checks the grid walk: each block once, with its index, the
// grid, the block shape and the arguments.
func TestLaunchRunsEveryBlockOnce(t *testing.T) {
	d := open(t)
	grids := []runtime.Dim3{{X: 1, Y: 1, Z: 1}, {X: 7, Y: 1, Z: 1}, {X: 3, Y: 5, Z: 2}, {X: 1, Y: 100, Z: 1}, {X: 257, Y: 3, Z: 1}}
	for _, grid := range grids {
		t.Run(fmt.Sprintf("%v", grid), func(t *testing.T) {
			total := grid.X * grid.Y * grid.Z
			seen := make([]atomic.Int32, total)
			var bad atomic.Int32
			var args runtime.Args
			args.U32(42)
			block := runtime.Dim3{X: 256, Y: 2, Z: 1}
			k := load(t, d, map[string]runtime.GoKernel{"count": func(b *runtime.BlockContext) {
				if b.Grid != grid || b.BlockDim != block || b.Args.U32Arg(0) != 42 {
					bad.Add(1)
				}
				seen[(b.Block.Z*grid.Y+b.Block.Y)*grid.X+b.Block.X].Add(1)
			}})["count"]
			require.NoError(t, d.DefaultStream().Launch(k, grid, block, &args))
			for i := range seen {
				require.EqualValues(t, 1, seen[i].Load(), "block %d", i)
			}
			assert.Zero(t, bad.Load())
		})
	}
}

func TestLaunchValidates(t *testing.T) {
	d := open(t)
	other := open(t)
	k := load(t, d, map[string]runtime.GoKernel{"k": func(*runtime.BlockContext) {}})["k"]
	foreignK := load(t, other, map[string]runtime.GoKernel{"k": func(*runtime.BlockContext) {}})["k"]
	var good, broken runtime.Args
	broken.Buffer(nil)
	s := d.DefaultStream()
	cases := []struct {
		name        string
		k           runtime.Kernel
		grid, block runtime.Dim3
		args        *runtime.Args
	}{
		{"zero grid", k, runtime.Dim3{X: 0, Y: 1, Z: 1}, one, &good},
		{"negative grid", k, runtime.Dim3{X: 1, Y: -2, Z: 1}, one, &good},
		{"zero grid z", k, runtime.Dim3{X: 1, Y: 1}, one, &good},
		{"huge grid", k, runtime.Dim3{X: 1 << 20, Y: 1 << 20, Z: 1}, one, &good},
		{"zero block", k, one, runtime.Dim3{X: 0, Y: 1, Z: 1}, &good},
		{"block over 1024 threads", k, one, runtime.Dim3{X: 512, Y: 4, Z: 1}, &good},
		{"argument error", k, one, one, &broken},
		{"nil arguments", k, one, one, nil},
		{"kernel of another device", foreignK, one, one, &good},
		{"nil kernel", nil, one, one, &good},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assert.ErrorIs(t, s.Launch(c.k, c.grid, c.block, c.args), runtime.ErrInvalidArgument)
		})
	}
	require.NoError(t, s.Launch(k, one, runtime.Dim3{X: 1024, Y: 1, Z: 1}, &good))
}

func TestLaunchRecoversPanics(t *testing.T) {
	d := open(t)
	var ran atomic.Int32
	ks := load(t, d, map[string]runtime.GoKernel{
		"boom": func(b *runtime.BlockContext) {
			ran.Add(1)
			if b.Block.X%3 == 1 {
				panic("block failed")
			}
		},
		"fine": func(*runtime.BlockContext) { ran.Add(1) },
	})
	var a runtime.Args
	err := d.DefaultStream().Launch(ks["boom"], runtime.Dim3{X: 10, Y: 1, Z: 1}, one, &a)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "block failed")
	assert.Contains(t, err.Error(), "boom")
	assert.EqualValues(t, 10, ran.Load(), "the other blocks still run")
	// The device keeps working.
	ran.Store(0)
	require.NoError(t, d.DefaultStream().Launch(ks["fine"], runtime.Dim3{X: 10, Y: 1, Z: 1}, one, &a))
	assert.EqualValues(t, 10, ran.Load())
}

// TestBlocksRunConcurrently: two blocks of one launch meet, which needs them on two
// goroutines at once (GPU blocks may wait on each other's progress in this way).
func TestBlocksRunConcurrently(t *testing.T) {
	d := open(t)
	if d.Info().Multiprocessors < 2 {
		t.Skip("needs GOMAXPROCS >= 2")
	}
	arrived := make(chan int, 2)
	met := make(chan struct{})
	k := load(t, d, map[string]runtime.GoKernel{"meet": func(b *runtime.BlockContext) {
		arrived <- b.Block.X
		if len(arrived) == 2 {
			close(met)
		}
		select {
		case <-met:
		case <-time.After(30 * time.Second): // fail rather than hang
		}
	}})["meet"]
	var a runtime.Args
	require.NoError(t, d.DefaultStream().Launch(k, runtime.Dim3{X: 2, Y: 1, Z: 1}, one, &a))
	select {
	case <-met:
	default:
		t.Fatal("the two blocks never ran at the same time")
	}
}

func TestConcurrentStreams(t *testing.T) {
	d := open(t)
	var total atomic.Int64
	k := load(t, d, map[string]runtime.GoKernel{"add": func(b *runtime.BlockContext) {
		total.Add(int64(b.Args.U32Arg(0)))
	}})["add"]
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := d.NewStream()
			if !assert.NoError(t, err) {
				return
			}
			defer s.Close()
			var a runtime.Args
			for range 50 {
				a.Reset().U32(uint32(g + 1))
				assert.NoError(t, s.Launch(k, runtime.Dim3{X: 3, Y: 2, Z: 1}, one, &a))
			}
		}()
	}
	wg.Wait()
	assert.EqualValues(t, 50*6*(1+2+3+4), total.Load())
}

func TestEvents(t *testing.T) {
	d := open(t)
	s := d.DefaultStream()
	start, err := d.NewEvent()
	require.NoError(t, err)
	end, err := d.NewEvent()
	require.NoError(t, err)
	_, err = end.ElapsedSince(start)
	assert.ErrorIs(t, err, runtime.ErrInvalidArgument, "not recorded yet")
	require.NoError(t, s.Record(start))
	require.NoError(t, s.Record(end))
	require.NoError(t, end.Synchronize())
	ms, err := end.ElapsedSince(start)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, ms, float32(0), "monotonic")
	_, err = end.ElapsedSince(nil)
	assert.ErrorIs(t, err, runtime.ErrInvalidArgument)
	assert.ErrorIs(t, s.Record(nil), runtime.ErrInvalidArgument)
	require.NoError(t, start.Close())
	_, err = end.ElapsedSince(start)
	assert.ErrorIs(t, err, runtime.ErrClosed)
	assert.ErrorIs(t, s.Record(start), runtime.ErrClosed)
}

func TestStreams(t *testing.T) {
	d := open(t)
	s, err := d.NewStream()
	require.NoError(t, err)
	assert.Zero(t, s.Handle())
	require.NoError(t, s.Synchronize())
	require.NoError(t, s.Close())
	assert.ErrorIs(t, s.Synchronize(), runtime.ErrClosed)
	assert.NoError(t, s.Close(), "a second Close does nothing")
	b, err := d.Alloc(4)
	require.NoError(t, err)
	assert.ErrorIs(t, s.Zero(b, 0, 4), runtime.ErrClosed)
	// The default stream outlives Close.
	require.NoError(t, d.DefaultStream().Close())
	require.NoError(t, d.DefaultStream().Zero(b, 0, 4))
}

// TestClosedDevice: after Close, every method reports ErrClosed.
func TestClosedDevice(t *testing.T) {
	d, err := cpu.Open()
	require.NoError(t, err)
	b, err := d.Alloc(8)
	require.NoError(t, err)
	s, err := d.NewStream()
	require.NoError(t, err)
	e, err := d.NewEvent()
	require.NoError(t, err)
	require.NoError(t, d.DefaultStream().Record(e))
	m, err := d.Load(kernelsrc.Sampling())
	require.NoError(t, err)
	k, err := m.Kernel("categorical_f16")
	require.NoError(t, err)
	require.NoError(t, d.Close())

	var a runtime.Args
	calls := map[string]func() error{
		"Alloc":             func() error { _, err := d.Alloc(1); return err },
		"AllocHost":         func() error { _, err := d.AllocHost(1); return err },
		"Load":              func() error { _, err := d.Load(kernelsrc.Sampling()); return err },
		"NewStream":         func() error { _, err := d.NewStream(); return err },
		"NewEvent":          func() error { _, err := d.NewEvent(); return err },
		"Buffer.Free":       b.Free,
		"Module.Kernel":     func() error { _, err := m.Kernel("categorical_f16"); return err },
		"Module.Close":      m.Close,
		"Launch":            func() error { return s.Launch(k, one, one, &a) },
		"default Launch":    func() error { return d.DefaultStream().Launch(k, one, one, &a) },
		"CopyToDevice":      func() error { return s.CopyToDevice(b, 0, []byte{1}) },
		"CopyToHost":        func() error { return s.CopyToHost(make([]byte, 1), b, 0) },
		"Zero":              func() error { return s.Zero(b, 0, 1) },
		"Record":            func() error { return s.Record(e) },
		"Synchronize":       s.Synchronize,
		"Stream.Close":      s.Close,
		"default Close":     d.DefaultStream().Close,
		"Event.Synchronize": e.Synchronize,
		"ElapsedSince":      func() error { _, err := e.ElapsedSince(e); return err },
		"Event.Close":       e.Close,
	}
	for name, call := range calls {
		err := call()
		assert.ErrorIs(t, err, runtime.ErrClosed, name)
		if err != nil {
			assert.True(t, strings.HasPrefix(err.Error(), "cpu: "), "%s: %v", name, err)
		}
	}
	assert.NoError(t, d.Close(), "a second Close does nothing")
}
