package collective_test

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	goruntime "runtime"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/collective"
	"github.com/gumbel-go/gumbel/internal/testenv"
	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/runtime/cpu"
)

// guard bounds how long the ranks of a test may take: a hang fails the test instead of
// stalling the run.
const guard = 10 * time.Second

// cpuDevice opens the CPU device for the test.
func cpuDevice(t testing.TB) runtime.Device {
	t.Helper()
	d, err := cpu.Open()
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, d.Close()) })
	return d
}

// newLocal makes a local group of n ranks, closed when the test ends.
func newLocal(t testing.TB, n int) []collective.Comm {
	t.Helper()
	comms, err := collective.NewLocal(n)
	require.NoError(t, err)
	require.Len(t, comms, n)
	t.Cleanup(func() {
		for _, c := range comms {
			assert.NoError(t, c.Close())
		}
	})
	return comms
}

// onRanks is testenv.OnRanks within guard.
func onRanks(t testing.TB, n int, f func(rank int) error) []error {
	t.Helper()
	return testenv.OnRanks(t, n, guard, f)
}

// allocWords returns a CPU buffer holding words, little-endian.
func allocWords(t testing.TB, d runtime.Device, words []uint64) runtime.Buffer {
	t.Helper()
	b, err := d.Alloc(8 * len(words))
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Free() })
	copy(runtime.HostBytes(b), runtime.BytesOf(words))
	return b
}

// wordsOf reads the buffer back as 64-bit words.
func wordsOf(b runtime.Buffer) []uint64 {
	h := runtime.HostBytes(b)
	out := make([]uint64, len(h)/8)
	for i := range out {
		out[i] = binary.LittleEndian.Uint64(h[8*i:])
	}
	return out
}

func TestAllReduceMaxUint64(t *testing.T) {
	for n := 1; n <= 4; n++ {
		t.Run(fmt.Sprintf("%d ranks", n), func(t *testing.T) {
			d := cpuDevice(t)
			comms := newLocal(t, n)
			const count, rounds = 7, 5
			r := rand.New(rand.NewPCG(uint64(n), 7))
			for round := range rounds {
				in := make([][]uint64, n)
				want := make([]uint64, count)
				for rank := range in {
					in[rank] = make([]uint64, count)
					for i := range in[rank] {
						// About half the keys above 2^63, as packed keys of positive
						// scores are.
						v := r.Uint64()
						in[rank][i] = v
						want[i] = max(want[i], v)
					}
				}
				in[n-1][0] = math.MaxUint64 // the largest key wins however it reads signed
				want[0] = math.MaxUint64
				bufs := make([]runtime.Buffer, n)
				for rank := range bufs {
					bufs[rank] = allocWords(t, d, in[rank])
				}
				errs := onRanks(t, n, func(rank int) error {
					return comms[rank].AllReduce(bufs[rank], 0, count, collective.Uint64, collective.OpMax, d.DefaultStream())
				})
				for rank := range n {
					require.NoError(t, errs[rank], "round %d rank %d", round, rank)
					assert.Equal(t, want, wordsOf(bufs[rank]), "round %d rank %d", round, rank)
				}
			}
			for rank, c := range comms {
				assert.Equal(t, rank, c.Rank())
				assert.Equal(t, n, c.Size())
			}
		})
	}
}

// TestAllReduceSumDeterministic: float sums are added in rank order, whatever order the
// ranks arrive in: the values are chosen so that other orders round differently.
func TestAllReduceSumDeterministic(t *testing.T) {
	for n := 1; n <= 4; n++ {
		t.Run(fmt.Sprintf("%d ranks", n), func(t *testing.T) {
			d := cpuDevice(t)
			comms := newLocal(t, n)
			f32 := []float32{1e8, 1, -1e8, 3}[:n]
			f64 := []float64{1e17, 1, -1e17, 3}[:n]
			var want32 [2]float32
			var want64 [2]float64
			for rank := range n {
				want32[0] += f32[rank]
				want32[1] += -f32[rank]
				want64[0] += f64[rank]
				want64[1] += -f64[rank]
			}
			cases := []struct {
				dt   collective.DType
				fill func(rank int) []byte
				want []byte
			}{
				{collective.Float32, func(rank int) []byte { return runtime.BytesOf([]float32{f32[rank], -f32[rank]}) },
					runtime.BytesOf(want32[:])},
				{collective.Float64, func(rank int) []byte { return runtime.BytesOf([]float64{f64[rank], -f64[rank]}) },
					runtime.BytesOf(want64[:])},
			}
			for _, c := range cases {
				t.Run(c.dt.String(), func(t *testing.T) {
					for trial := range 20 {
						bufs := make([]runtime.Buffer, n)
						for rank := range n {
							b, err := d.Alloc(2 * c.dt.Size())
							require.NoError(t, err)
							copy(runtime.HostBytes(b), c.fill(rank))
							bufs[rank] = b
						}
						errs := onRanks(t, n, func(rank int) error {
							// Stagger the arrivals differently each trial.
							time.Sleep(time.Duration((rank*7+trial*3)%(n+1)) * 100 * time.Microsecond)
							return comms[rank].AllReduce(bufs[rank], 0, 2, c.dt, collective.OpSum, d.DefaultStream())
						})
						for rank := range n {
							require.NoError(t, errs[rank])
							assert.Equal(t, c.want, runtime.HostBytes(bufs[rank]), "trial %d rank %d: the sums in rank order, bit for bit", trial, rank)
						}
					}
				})
			}
		})
	}
}

func TestAllReduceFloatMax(t *testing.T) {
	nan := math.NaN()
	cases := []struct {
		name string
		in   [][]float64 // per rank
		want []float64
	}{
		{"largest", [][]float64{{1, -5, math.Inf(-1)}, {2, -7, -1}}, []float64{2, -5, -1}},
		{"NaN wins", [][]float64{{1, nan}, {nan, 2}}, []float64{nan, nan}},
		{"+0 over -0", [][]float64{{math.Copysign(0, -1)}, {0}}, []float64{0}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := cpuDevice(t)
			comms := newLocal(t, len(c.in))
			for _, dt := range []collective.DType{collective.Float32, collective.Float64} {
				bufs := make([]runtime.Buffer, len(c.in))
				for rank, vals := range c.in {
					b, err := d.Alloc(len(vals) * dt.Size())
					require.NoError(t, err)
					for i, v := range vals {
						if dt == collective.Float32 {
							binary.LittleEndian.PutUint32(runtime.HostBytes(b)[4*i:], math.Float32bits(float32(v)))
						} else {
							binary.LittleEndian.PutUint64(runtime.HostBytes(b)[8*i:], math.Float64bits(v))
						}
					}
					bufs[rank] = b
				}
				errs := onRanks(t, len(c.in), func(rank int) error {
					return comms[rank].AllReduce(bufs[rank], 0, len(c.want), dt, collective.OpMax, d.DefaultStream())
				})
				for rank := range c.in {
					require.NoError(t, errs[rank])
					for i, w := range c.want {
						var got float64
						if dt == collective.Float32 {
							got = float64(math.Float32frombits(binary.LittleEndian.Uint32(runtime.HostBytes(bufs[rank])[4*i:])))
						} else {
							got = math.Float64frombits(binary.LittleEndian.Uint64(runtime.HostBytes(bufs[rank])[8*i:]))
						}
						if math.IsNaN(w) {
							assert.True(t, math.IsNaN(got), "%v element %d", dt, i)
						} else {
							assert.Equal(t, math.Float64bits(w), math.Float64bits(got), "%v element %d: %v", dt, i, got)
						}
					}
				}
			}
		})
	}
}

// TestAllReduceOffsets: each rank reduces the elements at its own offset, and the bytes
// around them stay as they were.
func TestAllReduceOffsets(t *testing.T) {
	cases := []struct {
		name  string
		dt    collective.DType
		offs  []int // per rank, bytes
		count int
	}{
		{"uint64 same offsets", collective.Uint64, []int{16, 16, 16}, 3},
		{"uint64 different offsets", collective.Uint64, []int{0, 8, 40}, 2},
		{"float32 unaligned to 8", collective.Float32, []int{4, 12, 0, 28}, 5},
		{"empty", collective.Float64, []int{8, 0}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := cpuDevice(t)
			n := len(c.offs)
			comms := newLocal(t, n)
			const size = 64
			bufs := make([]runtime.Buffer, n)
			before := make([][]byte, n)
			for rank := range n {
				b, err := d.Alloc(size)
				require.NoError(t, err)
				h := runtime.HostBytes(b)
				for i := range h {
					// Every element positive and finite, and the higher rank's larger.
					h[i] = byte(16*rank + i%16)
				}
				before[rank] = slices.Clone(h)
				bufs[rank] = b
			}
			errs := onRanks(t, n, func(rank int) error {
				return comms[rank].AllReduce(bufs[rank], c.offs[rank], c.count, c.dt, collective.OpMax, d.DefaultStream())
			})
			span := c.count * c.dt.Size()
			// The last rank's elements are the largest as integers and as floats.
			want := before[n-1][c.offs[n-1] : c.offs[n-1]+span]
			for rank := range n {
				require.NoError(t, errs[rank])
				h, off := runtime.HostBytes(bufs[rank]), c.offs[rank]
				assert.Equal(t, want, h[off:off+span], "rank %d: the result", rank)
				assert.Equal(t, before[rank][:off], h[:off], "rank %d: bytes before", rank)
				assert.Equal(t, before[rank][off+span:], h[off+span:], "rank %d: bytes after", rank)
			}
		})
	}
}

// TestAllReduceMismatch: ranks that disagree on count, element type or operation all fail
// with ErrMismatch, and the group works again in the next round.
func TestAllReduceMismatch(t *testing.T) {
	type args struct {
		count int
		dt    collective.DType
		op    collective.Op
	}
	same := args{2, collective.Uint64, collective.OpMax}
	cases := []struct {
		name string
		odd  args // what the last rank asks
	}{
		{"count", args{1, collective.Uint64, collective.OpMax}},
		{"element type", args{2, collective.Float64, collective.OpMax}},
		{"operation", args{2, collective.Uint64, collective.OpSum}},
	}
	for _, c := range cases {
		for _, n := range []int{2, 3} {
			t.Run(fmt.Sprintf("%s/%d ranks", c.name, n), func(t *testing.T) {
				d := cpuDevice(t)
				comms := newLocal(t, n)
				bufs := make([]runtime.Buffer, n)
				for rank := range bufs {
					bufs[rank] = allocWords(t, d, []uint64{uint64(rank), 1})
				}
				errs := onRanks(t, n, func(rank int) error {
					a := same
					if rank == n-1 {
						a = c.odd
					}
					return comms[rank].AllReduce(bufs[rank], 0, a.count, a.dt, a.op, d.DefaultStream())
				})
				for rank, err := range errs {
					require.ErrorIs(t, err, collective.ErrMismatch, "rank %d", rank)
					assert.Contains(t, err.Error(), fmt.Sprintf("collective: local rank %d of %d: AllReduce(", rank, n))
					assert.Contains(t, err.Error(), "round 1")
					assert.Equal(t, []uint64{uint64(rank), 1}, wordsOf(bufs[rank]), "rank %d: the buffer is untouched", rank)
				}
				errs = onRanks(t, n, func(rank int) error {
					return comms[rank].AllReduce(bufs[rank], 0, same.count, same.dt, same.op, d.DefaultStream())
				})
				for rank, err := range errs {
					require.NoError(t, err, "the next round")
					assert.Equal(t, []uint64{uint64(n - 1), 1}, wordsOf(bufs[rank]))
				}
			})
		}
	}
}

// TestAllReduceBadArgument: a rank with a bad argument still joins its round, so every
// rank fails at once (no rank waits forever), each with an error wrapping ErrArgument;
// the group works again in the next round.
func TestAllReduceBadArgument(t *testing.T) {
	d := cpuDevice(t)
	good, err := d.Alloc(32)
	require.NoError(t, err)
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
		{"nil buffer", nil, 0, 1, collective.Uint64, collective.OpMax, d.DefaultStream(), "nil buffer"},
		{"nil stream", good, 0, 1, collective.Uint64, collective.OpMax, nil, "nil stream"},
		{"negative offset", good, -8, 1, collective.Uint64, collective.OpMax, d.DefaultStream(), "negative offset"},
		{"negative count", good, 0, -1, collective.Uint64, collective.OpMax, d.DefaultStream(), "negative"},
		{"past the end", good, 8, 4, collective.Uint64, collective.OpMax, d.DefaultStream(), "pass the end of a 32-byte buffer"},
		{"offset past the end", good, 40, 0, collective.Uint64, collective.OpMax, d.DefaultStream(), "pass the end"},
		{"huge count", good, 0, math.MaxInt, collective.Float32, collective.OpMax, d.DefaultStream(), "pass the end"},
		{"no element type", good, 0, 1, 0, collective.OpMax, d.DefaultStream(), "unknown element type DType(0)"},
		{"unknown element type", good, 0, 1, 9, collective.OpMax, d.DefaultStream(), "unknown element type DType(9)"},
		{"no operation", good, 0, 1, collective.Uint64, 0, d.DefaultStream(), "unknown operation Op(0)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			const n, bad = 3, 1
			comms := newLocal(t, n)
			bufs := make([]runtime.Buffer, n)
			for rank := range bufs {
				bufs[rank] = allocWords(t, d, []uint64{uint64(rank + 10)})
			}
			errs := onRanks(t, n, func(rank int) error {
				if rank == bad {
					return comms[rank].AllReduce(c.buf, c.off, c.count, c.dt, c.op, c.stream)
				}
				return comms[rank].AllReduce(bufs[rank], 0, 1, collective.Uint64, collective.OpMax, d.DefaultStream())
			})
			for rank, err := range errs {
				require.ErrorIs(t, err, collective.ErrArgument, "rank %d", rank)
				assert.ErrorIs(t, err, runtime.ErrInvalidArgument, "rank %d: the runtime's sentinel too", rank)
				assert.Contains(t, err.Error(), c.want, "rank %d", rank)
				if rank != bad {
					assert.Contains(t, err.Error(), fmt.Sprintf("rank %d could not take part", bad))
					assert.Equal(t, []uint64{uint64(rank + 10)}, wordsOf(bufs[rank]), "untouched")
				}
			}
			errs = onRanks(t, n, func(rank int) error {
				return comms[rank].AllReduce(bufs[rank], 0, 1, collective.Uint64, collective.OpMax, d.DefaultStream())
			})
			for rank, err := range errs {
				require.NoError(t, err, "the next round")
				assert.Equal(t, []uint64{12}, wordsOf(bufs[rank]))
			}
		})
	}
}

// TestCloseWhileWaiting: closing any rank releases the ranks waiting in a round with
// ErrClosed, and every later call fails the same way; Close is idempotent.
func TestCloseWhileWaiting(t *testing.T) {
	for _, closer := range []int{0, 2} {
		t.Run(fmt.Sprintf("rank %d closes", closer), func(t *testing.T) {
			d := cpuDevice(t)
			const n = 3
			comms := newLocal(t, n)
			bufs := make([]runtime.Buffer, n)
			for rank := range bufs {
				bufs[rank] = allocWords(t, d, []uint64{uint64(rank)})
			}
			entered := make(chan struct{}, n)
			errs := onRanks(t, n, func(rank int) error {
				if rank == closer {
					// Give the others time to reach the round, then close under them.
					for range n - 1 {
						<-entered
					}
					time.Sleep(20 * time.Millisecond)
					return comms[rank].Close()
				}
				entered <- struct{}{}
				return comms[rank].AllReduce(bufs[rank], 0, 1, collective.Uint64, collective.OpMax, d.DefaultStream())
			})
			for rank, err := range errs {
				if rank == closer {
					require.NoError(t, err, "Close")
					continue
				}
				require.ErrorIs(t, err, collective.ErrClosed, "rank %d", rank)
				assert.ErrorIs(t, err, runtime.ErrClosed, "the runtime's sentinel too")
				assert.Contains(t, err.Error(), fmt.Sprintf("rank %d closed the group", closer))
			}
			for rank, c := range comms {
				err := c.AllReduce(bufs[rank], 0, 1, collective.Uint64, collective.OpMax, d.DefaultStream())
				assert.ErrorIs(t, err, collective.ErrClosed, "a later call of rank %d", rank)
			}
			assert.NoError(t, comms[closer].Close(), "a second Close")
		})
	}
}

// TestCloseCompletedRound: a round that completed before the group closed gives its
// ranks their results, however late they wake.
func TestCloseCompletedRound(t *testing.T) {
	d := cpuDevice(t)
	comms := newLocal(t, 2)
	a, b := allocWords(t, d, []uint64{1}), allocWords(t, d, []uint64{2})
	errs := onRanks(t, 2, func(rank int) error {
		if rank == 0 {
			return comms[0].AllReduce(a, 0, 1, collective.Uint64, collective.OpMax, d.DefaultStream())
		}
		err := comms[1].AllReduce(b, 0, 1, collective.Uint64, collective.OpMax, d.DefaultStream())
		_ = comms[1].Close()
		return err
	})
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	assert.Equal(t, []uint64{2}, wordsOf(a))
	assert.Equal(t, []uint64{2}, wordsOf(b))
}

func TestNewLocalArgument(t *testing.T) {
	for _, n := range []int{0, -1} {
		_, err := collective.NewLocal(n)
		assert.ErrorIs(t, err, collective.ErrArgument, "NewLocal(%d)", n)
		assert.Contains(t, err.Error(), fmt.Sprintf("NewLocal(%d)", n))
	}
}

func TestNames(t *testing.T) {
	cases := []struct {
		v    fmt.Stringer
		want string
		size int
	}{
		{collective.OpMax, "max", -1},
		{collective.OpSum, "sum", -1},
		{collective.Op(0), "Op(0)", -1},
		{collective.Uint64, "uint64", 8},
		{collective.Float32, "float32", 4},
		{collective.Float64, "float64", 8},
		{collective.DType(0), "DType(0)", 0},
		{collective.DType(200), "DType(200)", 0},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, c.v.String())
		if dt, ok := c.v.(collective.DType); ok {
			assert.Equal(t, c.size, dt.Size(), "%v", dt)
		}
	}
}

// TestAllReduceAllocatesNothing: once the staging memory has grown, a round allocates
// nothing, on either rank.
func TestAllReduceAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector")
	}
	d := cpuDevice(t)
	comms := newLocal(t, 2)
	a, b := allocWords(t, d, make([]uint64, 16)), allocWords(t, d, make([]uint64, 16))
	const runs = 200
	var peerErr error
	peer := make(chan struct{})
	go func() {
		defer close(peer)
		for range runs + 1 { // AllocsPerRun calls once more to warm up
			if err := comms[1].AllReduce(b, 0, 16, collective.Uint64, collective.OpMax, d.DefaultStream()); err != nil {
				peerErr = err
				return
			}
		}
	}()
	goruntime.Gosched()
	allocs := testing.AllocsPerRun(runs, func() {
		if err := comms[0].AllReduce(a, 0, 16, collective.Uint64, collective.OpMax, d.DefaultStream()); err != nil {
			panic(err)
		}
	})
	<-peer
	require.NoError(t, peerErr)
	assert.Zero(t, allocs)
}

// TestLocalAllReduceHost: host memory reduces in place, in a round that may mix host and
// device calls; a bad host call fails the round on every rank.
func TestLocalAllReduceHost(t *testing.T) {
	dev := cpuDevice(t)
	comms := newLocal(t, 3)
	vals := [][]uint64{{1, 9, 1 << 63}, {5, 2, 3}, {4, 4, 4}}
	want := []uint64{5, 9, 1 << 63}
	got := make([][]uint64, 3)
	errs := onRanks(t, 3, func(rank int) error {
		data := append([]uint64(nil), vals[rank]...)
		got[rank] = data
		if rank == 2 { // this rank's elements are in device memory
			buf, err := dev.Alloc(24)
			if err != nil {
				return err
			}
			defer buf.Free()
			s := dev.DefaultStream()
			if err := s.CopyToDevice(buf, 0, runtime.BytesOf(data)); err != nil {
				return err
			}
			if err := comms[rank].AllReduce(buf, 0, 3, collective.Uint64, collective.OpMax, s); err != nil {
				return err
			}
			if err := s.CopyToHost(runtime.BytesOf(data), buf, 0); err != nil {
				return err
			}
			return s.Synchronize()
		}
		return comms[rank].(collective.HostReducer).AllReduceHost(runtime.BytesOf(data), 3, collective.Uint64, collective.OpMax)
	})
	for r := range 3 {
		require.NoError(t, errs[r], "rank %d", r)
		assert.Equal(t, want, got[r], "rank %d", r)
	}
	errs = onRanks(t, 3, func(rank int) error {
		count := 2
		if rank == 1 {
			count = 9 // more elements than its 16 bytes hold
		}
		return comms[rank].(collective.HostReducer).AllReduceHost(make([]byte, 16), count, collective.Uint64, collective.OpMax)
	})
	for r := range 3 {
		assert.Error(t, errs[r], "rank %d", r)
	}
	assert.ErrorIs(t, errs[1], collective.ErrArgument)
}
