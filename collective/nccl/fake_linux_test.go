//go:build linux && (amd64 || arm64)

package nccl

// The package's tests on testdata/fake_nccl.c, a fake libnccl built with g++ and loaded
// through GUMBEL_NCCL_LIBRARY, on the CPU device (the test hook anyDevice): its
// buffers are host memory, which the fake reduces across the ranks' threads.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/collective"
	"github.com/gumbel-go/gumbel/internal/dynlib"
	"github.com/gumbel-go/gumbel/internal/testenv"
	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/runtime/cpu"
)

const fakeVersion = 22703

var fakeBuild struct {
	once sync.Once
	path string
	log  string
	err  error
}

// fakePath builds testdata/fake_nccl.c into a shared library on first use.
func fakePath(t *testing.T) string {
	t.Helper()
	gxx := testenv.GXX(t, "the fake libnccl")
	fakeBuild.once.Do(func() {
		dir, err := os.MkdirTemp("", "gumbel-fake-nccl-")
		if err != nil {
			fakeBuild.err = err
			return
		}
		fakeBuild.path = filepath.Join(dir, "libnccl.so.2")
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		args := []string{"-x", "c++", "-shared", "-fPIC", "-O1", "-pthread", "-Wall", "-Wextra",
			"-o", fakeBuild.path, filepath.Join("testdata", "fake_nccl.c")}
		msg, err := exec.CommandContext(ctx, gxx, args...).CombinedOutput()
		fakeBuild.log, fakeBuild.err = string(msg), err
	})
	require.NoError(t, fakeBuild.err, "building the fake libnccl:\n%s", fakeBuild.log)
	require.Empty(t, fakeBuild.log, "g++ warnings")
	return fakeBuild.path
}

// fake is the loaded fake library and its controls.
type fake struct {
	*Library
	t                           *testing.T
	fail, live, comm, devlistFn uintptr
}

// openFake opens the fake through GUMBEL_NCCL_LIBRARY, as Open finds the real one, with
// the test hook that lets it run on the CPU device.
func openFake(t *testing.T) *fake {
	t.Helper()
	t.Setenv(EnvLibrary, fakePath(t))
	l, err := Open()
	require.NoError(t, err)
	l.anyDevice = true
	f := &fake{Library: l, t: t}
	for _, s := range []struct {
		dst  *uintptr
		name string
	}{{&f.fail, "fake_nccl_fail"}, {&f.live, "fake_nccl_live"}, {&f.comm, "fake_nccl_comm"}, {&f.devlistFn, "fake_nccl_devlist"}} {
		*s.dst = dynlib.Symbol(l.handle, s.name)
		require.NotZero(t, *s.dst, s.name)
	}
	t.Cleanup(func() { f.failNext("", Success, "", 0) })
	return f
}

// failNext makes the next times calls of the C function name fail with r, and msg the
// library's last error.
func (f *fake) failNext(name string, r Result, msg string, times int) {
	cname, cmsg := append([]byte(name), 0), append([]byte(msg), 0)
	callN(f.fail, uintptr(unsafe.Pointer(&cname[0])), uintptr(r), uintptr(unsafe.Pointer(&cmsg[0])), uintptr(times))
}

// liveComms is the number of communicators made and not destroyed.
func (f *fake) liveComms() int { return int(int32(callN(f.live))) }

// commRecord is what the fake recorded of a communicator.
type commRecord struct {
	id                   UniqueID
	nranks, rank, device int
	// last are the words of its last ncclAllReduce.
	last [7]uint64
}

func (f *fake) record(c *Comm) commRecord {
	var rec commRecord
	var nranks, rank, device int32
	callN(f.comm, c.handle, uintptr(unsafe.Pointer(&rec.id)), uintptr(unsafe.Pointer(&nranks)),
		uintptr(unsafe.Pointer(&rank)), uintptr(unsafe.Pointer(&device)), uintptr(unsafe.Pointer(&rec.last)))
	rec.nranks, rec.rank, rec.device = int(nranks), int(rank), int(device)
	return rec
}

// devlist is the device list of the last ncclCommInitAll.
func (f *fake) devlist() []int32 {
	out := make([]int32, 16)
	n := int(int32(callN(f.devlistFn, uintptr(unsafe.Pointer(&out[0])), uintptr(len(out)))))
	return out[:n]
}

// cpuDevices opens n CPU devices.
func cpuDevices(t *testing.T, n int) []runtime.Device {
	t.Helper()
	devs := make([]runtime.Device, n)
	for i := range devs {
		d, err := cpu.Open()
		require.NoError(t, err)
		t.Cleanup(func() { assert.NoError(t, d.Close()) })
		devs[i] = d
	}
	return devs
}

// initAll makes a communicator over n CPU devices, closed when the test ends.
func (f *fake) initAll(n int) ([]*Comm, []runtime.Device) {
	f.t.Helper()
	devs := cpuDevices(f.t, n)
	comms, err := f.InitAll(devs)
	require.NoError(f.t, err)
	require.Len(f.t, comms, n)
	f.t.Cleanup(func() {
		for _, c := range comms {
			assert.NoError(f.t, c.Close())
		}
	})
	return comms, devs
}

// onRanks is testenv.OnRanks within 10 s.
func onRanks(t *testing.T, n int, f func(rank int) error) []error {
	t.Helper()
	return testenv.OnRanks(t, n, 10*time.Second, f)
}

// buffer returns a CPU buffer holding b.
func buffer(t *testing.T, d runtime.Device, b []byte) runtime.Buffer {
	t.Helper()
	buf, err := d.Alloc(len(b))
	require.NoError(t, err)
	copy(runtime.HostBytes(buf), b)
	return buf
}

func TestFakeOpen(t *testing.T) {
	f := openFake(t)
	v, err := f.Version()
	require.NoError(t, err)
	assert.Equal(t, fakeVersion, v)
	a, err := f.UniqueID()
	require.NoError(t, err)
	b, err := f.UniqueID()
	require.NoError(t, err)
	assert.Regexp(t, `^fake-nccl-id-\d+$`, string(a[:clen(a[:])]))
	assert.NotEqual(t, a, b, "each id is new")
	assert.Equal(t, byte(0xff-127), a[127], "the fake's id is recognisable to its last byte")
	assert.Equal(t, "ncclInvalidUsage: invalid usage (run with NCCL_DEBUG=WARN for details)", InvalidUsage.Error(),
		"statuses are described by the loaded library")
}

// clen is the length of the C string in b.
func clen(b []byte) int {
	for i, c := range b {
		if c == 0 {
			return i
		}
	}
	return len(b)
}

// TestFakeOpenWrongLibrary: a library that is not libnccl is refused, naming what it lacks.
func TestFakeOpenWrongLibrary(t *testing.T) {
	t.Setenv(EnvLibrary, "libc.so.6")
	_, err := Open()
	require.ErrorIs(t, err, runtime.ErrUnavailable)
	assert.Contains(t, err.Error(), "libc.so.6 lacks ncclGetVersion, ncclGetUniqueId, ncclCommInitRank, ncclCommInitAll, ncclCommDestroy, ncclAllReduce, ncclGetErrorString (too old, or not libnccl)")
}

// TestFakeInitRankPassesIDByValue: the 128-byte id reaches ncclCommInitRank byte for
// byte, and the arguments around it (nranks before, rank after) too.
func TestFakeInitRankPassesIDByValue(t *testing.T) {
	f := openFake(t)
	for _, n := range []int{1, 2, 4} {
		t.Run(fmt.Sprintf("%d ranks", n), func(t *testing.T) {
			var id UniqueID
			for i := range id {
				// Every byte distinct from its neighbours, none zero, some above 0x7f.
				id[i] = byte(251 - i)
			}
			id[0] = byte(n)
			devs := cpuDevices(t, n)
			comms := make([]*Comm, n)
			errs := onRanks(t, n, func(rank int) (err error) {
				comms[rank], err = f.InitRank(devs[rank], id, n, rank)
				return err
			})
			for rank, c := range comms {
				require.NoError(t, errs[rank])
				t.Cleanup(func() { assert.NoError(t, c.Close()) })
				assert.Equal(t, rank, c.Rank())
				assert.Equal(t, n, c.Size())
				rec := f.record(c)
				assert.Equal(t, id, rec.id, "rank %d: the id as the C function received it", rank)
				assert.Equal(t, [2]int{n, rank}, [2]int{rec.nranks, rec.rank})
			}
			// The ranks made one group: they reduce together.
			bufs := make([]runtime.Buffer, n)
			for rank := range bufs {
				bufs[rank] = buffer(t, devs[rank], runtime.BytesOf([]uint64{uint64(rank)<<60 | 7}))
			}
			errs = onRanks(t, n, func(rank int) error {
				return comms[rank].AllReduce(bufs[rank], 0, 1, collective.Uint64, collective.OpMax, devs[rank].DefaultStream())
			})
			for rank := range n {
				require.NoError(t, errs[rank])
				assert.Equal(t, uint64(n-1)<<60|7, binary.LittleEndian.Uint64(runtime.HostBytes(bufs[rank])))
			}
		})
	}
}

func TestFakeInitRankArguments(t *testing.T) {
	f := openFake(t)
	d := cpuDevices(t, 1)[0]
	live := f.liveComms()
	cases := []struct{ nranks, rank int }{{0, 0}, {-1, 0}, {2, 2}, {2, -1}, {1 << 31, 0}}
	for _, c := range cases {
		_, err := f.InitRank(d, UniqueID{1}, c.nranks, c.rank)
		assert.ErrorIs(t, err, collective.ErrArgument, "nranks %d rank %d", c.nranks, c.rank)
		assert.Contains(t, err.Error(), fmt.Sprintf("nccl: ncclCommInitRank(nranks %d, rank %d): ", c.nranks, c.rank))
	}
	assert.Equal(t, live, f.liveComms(), "nothing reached the library")
}

// TestFakeAllReduce reduces over communicators of 1 to 4 ranks from InitAll.
func TestFakeAllReduce(t *testing.T) {
	f := openFake(t)
	for n := 1; n <= 4; n++ {
		t.Run(fmt.Sprintf("%d ranks", n), func(t *testing.T) {
			comms, devs := f.initAll(n)
			assert.Equal(t, []int32{0, 1, 2, 3}[:n], f.devlist(), "the CPU devices go by their index")
			for rank, c := range comms {
				assert.Equal(t, [2]int{rank, n}, [2]int{c.Rank(), c.Size()})
			}
			keys := func(rank int) []uint64 {
				return []uint64{uint64(rank) << 61, math.MaxUint64 - uint64(rank), uint64(rank)}
			}
			f32 := []float32{1e8, 1, -1e8, 3}
			cases := []struct {
				name string
				dt   collective.DType
				op   collective.Op
				off  int
				in   func(rank int) []byte
				want func() []byte
			}{
				{"max uint64", collective.Uint64, collective.OpMax, 0, func(rank int) []byte { return runtime.BytesOf(keys(rank)) },
					func() []byte { return runtime.BytesOf([]uint64{uint64(n-1) << 61, math.MaxUint64, uint64(n - 1)}) }},
				{"sum float32 at an offset", collective.Float32, collective.OpSum, 8, func(rank int) []byte {
					return runtime.BytesOf([]float32{-1, -1, f32[rank], 0.5})
				}, func() []byte {
					var s float32
					for rank := range n {
						s += f32[rank]
					}
					return runtime.BytesOf([]float32{s, 0.5 * float32(n)})
				}},
				{"sum float64", collective.Float64, collective.OpSum, 0, func(rank int) []byte { return runtime.BytesOf([]float64{float64(rank), 1}) },
					func() []byte { return runtime.BytesOf([]float64{float64(n * (n - 1) / 2), float64(n)}) }},
			}
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					bufs := make([]runtime.Buffer, n)
					for rank := range bufs {
						bufs[rank] = buffer(t, devs[rank], c.in(rank))
					}
					want := c.want()
					count := len(want) / c.dt.Size()
					errs := onRanks(t, n, func(rank int) error {
						return comms[rank].AllReduce(bufs[rank], c.off, count, c.dt, c.op, devs[rank].DefaultStream())
					})
					for rank := range n {
						require.NoError(t, errs[rank])
						h := runtime.HostBytes(bufs[rank])
						assert.Equal(t, want, h[c.off:], "rank %d", rank)
						assert.Equal(t, c.in(rank)[:c.off], h[:c.off], "rank %d: the bytes before the offset", rank)
					}
				})
			}
		})
	}
}

// TestFakeAllReduceWords: what ncclAllReduce receives, word for word: the same buffer
// address (at the offset) to send and receive, the count, NCCL's numbers for the element
// type and operation, the communicator and the stream.
func TestFakeAllReduceWords(t *testing.T) {
	f := openFake(t)
	comms, devs := f.initAll(1)
	c, d := comms[0], devs[0]
	buf := buffer(t, d, make([]byte, 64))
	cases := []struct {
		dt         collective.DType
		op         collective.Op
		off, count int
		dtype, red uint64
	}{
		{collective.Uint64, collective.OpMax, 0, 8, 5, 2},
		{collective.Float32, collective.OpSum, 4, 15, 7, 0},
		{collective.Float64, collective.OpMax, 16, 6, 8, 2},
		{collective.Uint64, collective.OpSum, 64, 0, 5, 0},
	}
	for _, tc := range cases {
		require.NoError(t, c.AllReduce(buf, tc.off, tc.count, tc.dt, tc.op, d.DefaultStream()))
		p := uint64(buf.DevicePtr()) + uint64(tc.off)
		assert.Equal(t, [7]uint64{p, p, uint64(tc.count), tc.dtype, tc.red, uint64(c.handle), 0}, f.record(c).last, "%v %v", tc.dt, tc.op)
	}
}

// TestFakeAllReduceArguments: bad arguments are refused before NCCL is called.
func TestFakeAllReduceArguments(t *testing.T) {
	f := openFake(t)
	comms, devs := f.initAll(1)
	c, d := comms[0], devs[0]
	good := buffer(t, d, make([]byte, 32))
	freed := buffer(t, d, make([]byte, 32))
	require.NoError(t, freed.Free())
	s := d.DefaultStream()
	cases := []struct {
		name   string
		buf    runtime.Buffer
		off    int
		count  int
		dt     collective.DType
		op     collective.Op
		stream runtime.Stream
		want   string
	}{
		{"nil buffer", nil, 0, 1, collective.Uint64, collective.OpMax, s, "nil buffer"},
		{"nil stream", good, 0, 1, collective.Uint64, collective.OpMax, nil, "nil stream"},
		{"no element type", good, 0, 1, 0, collective.OpMax, s, "unknown element type"},
		{"no operation", good, 0, 1, collective.Uint64, 9, s, "unknown operation"},
		{"negative offset", good, -4, 1, collective.Float32, collective.OpMax, s, "negative"},
		{"past the end", good, 8, 4, collective.Uint64, collective.OpMax, s, "pass the end of a 32-byte buffer"},
		{"huge count", good, 0, math.MaxInt, collective.Float32, collective.OpSum, s, "pass the end"},
		{"freed buffer", freed, 0, 1, collective.Uint64, collective.OpMax, s, "freed"},
	}
	before := f.record(c).last
	for _, tc := range cases {
		err := c.AllReduce(tc.buf, tc.off, tc.count, tc.dt, tc.op, tc.stream)
		require.ErrorIs(t, err, collective.ErrArgument, tc.name)
		assert.ErrorIs(t, err, runtime.ErrInvalidArgument, tc.name)
		assert.Contains(t, err.Error(), "nccl: rank 0 of 1: AllReduce(", tc.name)
		assert.Contains(t, err.Error(), tc.want, tc.name)
	}
	assert.Equal(t, before, f.record(c).last, "no call reached the library")
}

// TestFakeErrors: a failing C call's error names the call, wraps its status (with the
// library's words for it and its last error message) and matches the sentinels.
func TestFakeErrors(t *testing.T) {
	f := openFake(t)
	d := cpuDevices(t, 1)[0]
	comms, devs := f.initAll(1)
	buf := buffer(t, devs[0], make([]byte, 8))
	cases := []struct {
		fn     string
		r      Result
		call   func() error
		prefix string
	}{
		{"ncclGetVersion", SystemError, func() error { _, err := f.Version(); return err }, "nccl: ncclGetVersion: "},
		{"ncclGetUniqueId", InternalError, func() error { _, err := f.UniqueID(); return err }, "nccl: ncclGetUniqueId: "},
		{"ncclCommInitRank", RemoteError, func() error { return closed(f.InitRank(d, UniqueID{9}, 1, 0)) },
			"nccl: ncclCommInitRank(nranks 1, rank 0): "},
		{"ncclCommInitAll", InvalidArgument, func() error { return closedAll(f.InitAll([]runtime.Device{d})) },
			"nccl: ncclCommInitAll(1 devices [0]): "},
		{"ncclAllReduce", InvalidUsage, func() error {
			return comms[0].AllReduce(buf, 0, 1, collective.Uint64, collective.OpMax, devs[0].DefaultStream())
		}, "nccl: ncclAllReduce(count 1, ncclUint64, ncclMax, rank 0 of 1): "},
	}
	for _, c := range cases {
		t.Run(c.fn, func(t *testing.T) {
			live := f.liveComms()
			f.failNext(c.fn, c.r, "injected by the test", 1)
			err := c.call()
			require.ErrorIs(t, err, c.r)
			assert.Equal(t, c.prefix+c.r.String()+": "+goStringOf(f, c.r)+"; NCCL's last error: injected by the test", err.Error())
			assert.Equal(t, c.r == InvalidArgument, errors.Is(err, collective.ErrArgument), "only ncclInvalidArgument is a bad argument")
			assert.Equal(t, live, f.liveComms(), "no communicator made")
			require.NoError(t, c.call(), "the next call succeeds")
		})
	}
}

// closed closes the communicator a call made, if it made one, and returns its error.
func closed(c *Comm, err error) error {
	if err != nil {
		return err
	}
	return c.Close()
}

// closedAll is closed for the communicators of InitAll.
func closedAll(comms []*Comm, err error) error {
	for _, c := range comms {
		err = errors.Join(err, c.Close())
	}
	return err
}

// goStringOf is the fake's description of r.
func goStringOf(f *fake, r Result) string {
	return goString(callN(f.ncclGetErrorString, uintptr(r)), 512)
}

// TestFakeClose: Close destroys the communicator once; later calls fail with ErrClosed.
func TestFakeClose(t *testing.T) {
	f := openFake(t)
	live := f.liveComms()
	devs := cpuDevices(t, 2)
	comms, err := f.InitAll(devs)
	require.NoError(t, err)
	assert.Equal(t, live+2, f.liveComms())
	require.NoError(t, comms[0].Close())
	assert.Equal(t, live+1, f.liveComms())
	assert.NoError(t, comms[0].Close(), "a second Close does nothing")
	assert.Equal(t, live+1, f.liveComms(), "and destroys nothing")
	buf := buffer(t, devs[0], make([]byte, 8))
	err = comms[0].AllReduce(buf, 0, 1, collective.Uint64, collective.OpMax, devs[0].DefaultStream())
	require.ErrorIs(t, err, collective.ErrClosed)
	assert.ErrorIs(t, err, runtime.ErrClosed)
	assert.Equal(t, "nccl: rank 0 of 2: AllReduce: collective: closed", err.Error())

	f.failNext("ncclCommDestroy", InternalError, "destroy failed", 1)
	err = comms[1].Close()
	require.ErrorIs(t, err, InternalError)
	assert.Contains(t, err.Error(), "nccl: ncclCommDestroy(rank 1 of 2): ncclInternalError")
	assert.NoError(t, comms[1].Close(), "closed even so: a second Close does nothing")
}

// TestFakeAllReduceAllocatesNothing: the per-step call allocates nothing on the Go heap.
func TestFakeAllReduceAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector")
	}
	f := openFake(t)
	comms, devs := f.initAll(1)
	buf := buffer(t, devs[0], make([]byte, 64))
	s := devs[0].DefaultStream()
	allocs := testing.AllocsPerRun(200, func() {
		if err := comms[0].AllReduce(buf, 0, 8, collective.Uint64, collective.OpMax, s); err != nil {
			panic(err)
		}
	})
	assert.Zero(t, allocs)
}

// fakeCUDA is a CPU device that passes for a device of runtime/cuda: its buffers are host
// memory the fake library reduces, and it counts the calls made on its "context".
type fakeCUDA struct {
	runtime.Device
	ordinal int
	calls   atomic.Int32
	closed  atomic.Bool
}

func (d *fakeCUDA) Info() runtime.DeviceInfo {
	info := d.Device.Info()
	info.Backend = runtime.CUDA
	return info
}

func (d *fakeCUDA) Ordinal() int { return d.ordinal }

func (d *fakeCUDA) WithContext(f func() error) error {
	if d.closed.Load() {
		return fmt.Errorf("cuda device %d: %w", d.ordinal, runtime.ErrClosed)
	}
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	d.calls.Add(1)
	return f()
}

// TestFakeCUDAPlacement: with CUDA devices (the public path, without the test hook),
// every call goes through the device's context, InitAll names the devices by their
// ordinals, and a closed device fails the calls with ErrClosed.
func TestFakeCUDAPlacement(t *testing.T) {
	f := openFake(t)
	f.anyDevice = false
	cpus := cpuDevices(t, 3)
	a, b := &fakeCUDA{Device: cpus[0], ordinal: 3}, &fakeCUDA{Device: cpus[1], ordinal: 5}
	comms, err := f.InitAll([]runtime.Device{a, b})
	require.NoError(t, err)
	assert.Equal(t, []int32{3, 5}, f.devlist())
	assert.Equal(t, [2]int32{1, 0}, [2]int32{a.calls.Load(), b.calls.Load()}, "InitAll runs on the first device's context")

	devs := []*fakeCUDA{a, b}
	bufs := []runtime.Buffer{buffer(t, a, runtime.BytesOf([]uint64{1 << 63})), buffer(t, b, runtime.BytesOf([]uint64{2}))}
	errs := onRanks(t, 2, func(rank int) error {
		return comms[rank].AllReduce(bufs[rank], 0, 1, collective.Uint64, collective.OpMax, devs[rank].DefaultStream())
	})
	require.NoError(t, errors.Join(errs...))
	assert.Equal(t, [2]int32{2, 1}, [2]int32{a.calls.Load(), b.calls.Load()}, "each rank on its own device's context")
	assert.Equal(t, uint64(1<<63), binary.LittleEndian.Uint64(runtime.HostBytes(bufs[1])))

	c := &fakeCUDA{Device: cpus[2], ordinal: 7}
	one, err := f.InitRank(c, UniqueID{7, 7, 7}, 1, 0)
	require.NoError(t, err)
	assert.Equal(t, int32(1), c.calls.Load(), "InitRank on the device's context")
	require.NoError(t, one.Close())
	assert.Equal(t, int32(2), c.calls.Load(), "Close too")

	b.closed.Store(true)
	err = comms[1].AllReduce(bufs[1], 0, 1, collective.Uint64, collective.OpMax, b.DefaultStream())
	require.ErrorIs(t, err, collective.ErrClosed)
	assert.ErrorIs(t, err, runtime.ErrClosed)
	assert.Equal(t, "nccl: rank 1 of 2: AllReduce: collective: closed: cuda device 5: gumbel/runtime: closed", err.Error())
	live := f.liveComms()
	err = comms[1].Close()
	assert.ErrorIs(t, err, collective.ErrClosed, "a closed device's communicator cannot be destroyed")
	assert.Equal(t, live, f.liveComms())
	assert.NoError(t, comms[1].Close(), "a second Close does nothing")
	require.NoError(t, comms[0].Close())
	assert.Equal(t, live-1, f.liveComms())
}
