package gokernel

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/half"
	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/runtime/cpu"
)

// dtypes are the logits element types, in abi order.
var dtypes = abi.DTypes[:]

// dtypeName is the suffix of d's kernels without its underscore: "f32", "f16", "bf16".
func dtypeName(d abi.DType) string { return d.Suffix()[1:] }

// launchOrder says how the test runs a grid's blocks.
type launchOrder int

const (
	onDevice launchOrder = iota // the CPU device: blocks concurrently on its workers
	reversed                    // one at a time, last block first
	shuffled                    // one at a time, in a random order
)

func (o launchOrder) String() string {
	return [...]string{"device", "reversed", "shuffled"}[o]
}

// problem is one launch: the logits of nRows rows and the launch rows that sample them.
type problem struct {
	d      abi.DType
	vocab  int
	stride int
	rows   [][]float32     // the exact float32 value of every stored logit
	params []abi.RowParams // one per launch row
	draws  int             // grid.z; 0 reads as 1
	// Per logits row, the processors' inputs (nil: none; the buffer then holds zeros).
	bias   [][]float32
	counts [][]uint32
	mask   [][]uint32
	// bitmask holds the token bitmask rows launch rows pick with BitmaskRow.
	bitmask [][]uint32
}

func (p *problem) numDraws() int { return max(p.draws, 1) }

// buffers is a problem laid out as the kernels' arguments.
type buffers struct {
	logits   []byte
	params   []byte
	tokens   []int32
	status   []abi.Status
	partials []uint64
	counters []uint32
	logprobs []float32
	bias     []float32
	counts   []uint32
	mask     []uint32
	bitmask  []uint32
	// shard holds one shard key per output slot of FlagShard rows, whose element 0 is
	// global token vocabOffset.
	shard []uint64
	// draft holds the draft probabilities residual rows read (row topn of a launch row).
	draft       []float32
	vocabOffset uint32
}

const untouched = -7 // the value of token and status slots no launch row writes

// untouchedRecord fills the logprobs buffer before a launch.
const untouchedRecord float32 = -77

// encode stores v in element type d and returns the stored value's exact float32.
func encode(d abi.DType, v float32, dst []byte) float32 {
	switch d {
	case abi.F16:
		h := half.Float16(v)
		binary.LittleEndian.PutUint16(dst, h)
		return half.Float16ToFloat32(h)
	case abi.BF16:
		h := half.BFloat16(v)
		binary.LittleEndian.PutUint16(dst, h)
		return half.BFloat16ToFloat32(h)
	}
	binary.LittleEndian.PutUint32(dst, math.Float32bits(v))
	return v
}

// layout encodes the problem's rows (replacing them by their stored values) and builds
// the argument buffers for s blocks per row, sized as package abi says.
func (p *problem) layout(s int) *buffers {
	es := p.d.Size()
	n, nd := len(p.params), p.numDraws()
	words := (p.vocab + 31) / 32
	shape := abi.Launch{Rows: n, Split: s, Draws: nd}
	slots := abi.Slots(len(p.rows), nd)
	b := &buffers{
		logits:   make([]byte, (len(p.rows)*p.stride)*es),
		params:   make([]byte, n*abi.RowParamsSize),
		tokens:   make([]int32, slots),
		status:   make([]abi.Status, slots),
		partials: make([]uint64, max(shape.PartialsWords(abi.GumbelArgmax), shape.PartialsWords(abi.TopN), shape.PartialsWords(abi.Filtered))),
		counters: make([]uint32, shape.CountersWords(abi.GumbelArgmax)),
		logprobs: make([]float32, abi.RecordWords*slots),
		bias:     make([]float32, len(p.rows)*p.vocab),
		counts:   make([]uint32, len(p.rows)*p.vocab),
		mask:     make([]uint32, len(p.rows)*words),
		bitmask:  make([]uint32, len(p.bitmask)*words),
	}
	for m, row := range p.bitmask {
		copy(b.bitmask[m*words:], row)
	}
	for r := range p.rows {
		if r < len(p.bias) && p.bias[r] != nil {
			copy(b.bias[r*p.vocab:], p.bias[r])
		}
		if r < len(p.counts) && p.counts[r] != nil {
			copy(b.counts[r*p.vocab:], p.counts[r])
		}
		if r < len(p.mask) && p.mask[r] != nil {
			copy(b.mask[r*words:], p.mask[r])
		}
	}
	for i := range b.logprobs {
		b.logprobs[i] = untouchedRecord
	}
	for r, row := range p.rows {
		for i, x := range row {
			row[i] = encode(p.d, x, b.logits[(r*p.stride+i)*es:])
		}
	}
	for o := range b.tokens {
		b.tokens[o], b.status[o] = untouched, untouched
	}
	for y := range p.params {
		p.params[y].Encode(b.params[y*abi.RowParamsSize:])
	}
	return b
}

func (b *buffers) args(stride, vocab int) *runtime.Args {
	var a runtime.Args
	a.Buffer(cpu.Wrap(b.logits)).
		Buffer(cpu.Wrap(b.params)).
		Buffer(cpu.Wrap(runtime.BytesOf(b.tokens))).
		Buffer(cpu.Wrap(runtime.BytesOf(b.status))).
		Buffer(cpu.Wrap(runtime.BytesOf(b.partials))).
		Buffer(cpu.Wrap(runtime.BytesOf(b.counters))).
		U64(uint64(stride)).
		U32(uint32(vocab)).
		Buffer(wrapAtLeast8(runtime.BytesOf(b.logprobs))).
		Buffer(wrapAtLeast8(runtime.BytesOf(b.bias))).
		Buffer(wrapAtLeast8(runtime.BytesOf(b.counts))).
		Buffer(wrapAtLeast8(runtime.BytesOf(b.mask))).
		Buffer(wrapAtLeast8(runtime.BytesOf(b.bitmask))).
		U32(b.vocabOffset).
		Buffer(wrapAtLeast8(runtime.BytesOf(b.shard))).
		Buffer(wrapAtLeast8(runtime.BytesOf(b.draft)))
	return &a
}

// wrapAtLeast8 wraps b, or 8 zero bytes when b is shorter: ABI.md lets a buffer no row
// uses be any valid buffer of at least 8 bytes.
func wrapAtLeast8(b []byte) runtime.Buffer {
	if len(b) < 8 {
		b = make([]byte, 8)
	}
	return cpu.Wrap(b)
}

// argsWith builds the first nArgs arguments of a laid-out problem with some replaced:
// repl maps an argument position to its memory (nil: a slot that holds no buffer); offs
// shifts a buffer argument by that many bytes.
func argsWith(b *buffers, stride, vocab, nArgs int, repl map[abi.Arg][]byte, offs map[abi.Arg]int) *runtime.Args {
	full := b.args(stride, vocab)
	var a runtime.Args
	for i := range abi.Arg(min(nArgs, abi.NumArgs)) {
		switch i {
		case abi.ArgRowStride:
			a.U64(uint64(stride))
		case abi.ArgVocab:
			a.U32(uint32(vocab))
		case abi.ArgVocabOffset:
			a.U32(b.vocabOffset)
		default:
			if mem, ok := repl[i]; ok {
				if mem == nil {
					a.U64(0)
					continue
				}
				a.BufferAt(cpu.Wrap(mem), offs[i])
				continue
			}
			buf, _ := full.BufferArg(int(i))
			a.BufferAt(buf, offs[i])
		}
	}
	return &a
}

func bytesOf[T ~uint32 | ~int32 | ~float32 | ~uint64](s []T) []byte { return runtime.BytesOf(s) }

var testDevice = func() runtime.Device {
	d, err := cpu.Open()
	if err != nil {
		panic(err)
	}
	return d
}()

// launch runs fn over grid in the given order, with blocks of 1024 threads.
func launch(t testing.TB, fn runtime.GoKernel, grid runtime.Dim3, args *runtime.Args, order launchOrder, r *rand.Rand) {
	t.Helper()
	launchT(t, fn, grid, 1024, args, order, r)
}

// launchT runs fn over grid in the given order, with blocks of threads threads.
func launchT(t testing.TB, fn runtime.GoKernel, grid runtime.Dim3, threads int, args *runtime.Args, order launchOrder, r *rand.Rand) {
	t.Helper()
	if order == onDevice {
		mod, err := testDevice.Load(&runtime.Program{Name: "test", Go: map[string]runtime.GoKernel{"k": fn}})
		require.NoError(t, err)
		k, err := mod.Kernel("k")
		require.NoError(t, err)
		require.NoError(t, testDevice.DefaultStream().Launch(k, grid, runtime.Dim3{X: threads, Y: 1, Z: 1}, args))
		return
	}
	total := grid.X * grid.Y * max(grid.Z, 1)
	idx := make([]int, total)
	for i := range idx {
		idx[i] = total - 1 - i
	}
	if order == shuffled {
		r.Shuffle(total, func(i, j int) { idx[i], idx[j] = idx[j], idx[i] })
	}
	for _, i := range idx {
		fn(&runtime.BlockContext{
			Block:    runtime.Dim3{X: i % grid.X, Y: i / grid.X % grid.Y, Z: i / (grid.X * grid.Y)},
			Grid:     grid,
			BlockDim: runtime.Dim3{X: threads, Y: 1, Z: 1},
			Args:     args,
		})
	}
}

// run lays out the problem, launches fn with s blocks per row (then gumbel_exact where
// a draw needs it) and returns the buffers.
func (p *problem) run(t testing.TB, fn runtime.GoKernel, s int, order launchOrder, r *rand.Rand) *buffers {
	b := p.layout(s)
	grid := runtime.Dim3{X: s, Y: len(p.params), Z: p.numDraws()}
	args := b.args(p.stride, p.vocab)
	launch(t, fn, grid, args, order, r)
	finishExact(t, p.d, b, grid, args, order, r)
	for i, c := range b.counters {
		require.Zero(t, c, "counters[%d] after the launch", i)
	}
	return b
}

// finishExact launches gumbel_exact after a launch of grid that left draws with status 5,
// as the sampler does.
func finishExact(t testing.TB, d abi.DType, b *buffers, grid runtime.Dim3, args *runtime.Args, order launchOrder, r *rand.Rand) {
	t.Helper()
	if slices.Contains(b.status, abi.StatusExact) {
		grid.X = 1
		launch(t, func(c *runtime.BlockContext) { gumbelExact(c, d) }, grid, args, order, r)
	}
}

// check compares every launch row's token and status with ref, and every slot that no
// launch row names with its untouched value.
func (p *problem) check(t testing.TB, b *buffers, ref func([]float32, abi.RowParams) (int32, abi.Status), what string) {
	t.Helper()
	named := make([]bool, len(p.rows))
	for y, rp := range p.params {
		named[rp.Row] = true
		wantTok, wantStatus := ref(p.rows[rp.Row][:p.vocab], rp)
		require.Equal(t, wantStatus, b.status[rp.Row], "%s: launch row %d (row %d, %+v): status", what, y, rp.Row, rp)
		require.Equal(t, wantTok, b.tokens[rp.Row], "%s: launch row %d (row %d, %+v): token", what, y, rp.Row, rp)
	}
	for r, n := range named {
		if !n {
			require.Equal(t, int32(untouched), b.tokens[r], "%s: row %d is named by no launch row", what, r)
			require.Equal(t, abi.Status(untouched), b.status[r], "%s: row %d is named by no launch row", what, r)
		}
	}
}

// checkSlots compares every slot of every launch row with the reference: token, status,
// record; slots no launch row names stay untouched.
func (p *problem) checkSlots(t testing.TB, b *buffers, categorical bool, what string) {
	t.Helper()
	nd := p.numDraws()
	named := make([]bool, len(b.tokens))
	for y, rp := range p.params {
		for z := range nd {
			o := int(rp.Row)*nd + z
			named[o] = true
			in := p.inputs(rp.Row)
			row := p.rows[rp.Row][:p.vocab]
			tok, status := refSample(categorical, row, rp, in, z)
			where := fmt.Sprintf("%s: launch row %d (row %d, draw %d, flags %#x, %+v)", what, y, rp.Row, z, rp.Flags, rp)
			require.Equal(t, status, b.status[o], "status: %s", where)
			require.Equal(t, tok, b.tokens[o], "token: %s", where)
			rec := b.logprobs[abi.RecordWords*o : abi.RecordWords*(o+1)]
			switch {
			case rp.Flags&abi.FlagLogprobs == 0:
				require.Equal(t, slices.Repeat([]float32{untouchedRecord}, abi.RecordWords), rec, "record without LOGPROBS: %s", where)
			case status != abi.StatusOK:
				for k, w := range rec {
					require.True(t, math.IsNaN(float64(w)), "record word %d of a failed slot is %v: %s", k, w, where)
				}
			default:
				want := refRecord(categorical, row, rp, in, z, tok)
				for k := range want {
					requireClose(t, want[k], rec[k], "record word %d: %s", k, where)
				}
			}
		}
	}
	for o, n := range named {
		if !n {
			require.Equal(t, int32(untouched), b.tokens[o], "%s: slot %d is named by no launch row", what, o)
			require.Equal(t, abi.Status(untouched), b.status[o], "%s: slot %d is named by no launch row", what, o)
		}
	}
}

// requireClose checks got against a float64 reference to 1e-5 relative (absolute below
// magnitude 1, where log-probabilities near 0 make relative error meaningless); a
// reference that is not finite in float32 must match exactly.
func requireClose(t testing.TB, want float64, got float32, msg string, args ...any) {
	t.Helper()
	if w := float64(float32(want)); math.IsInf(w, 0) || math.IsNaN(w) {
		require.Equal(t, fmt.Sprint(float32(want)), fmt.Sprint(got), append([]any{msg}, args...)...)
		return
	}
	require.InDelta(t, want, float64(got), 1e-5*max(1, math.Abs(want)), append([]any{msg}, args...)...)
}

// bitsOf is the bit patterns of fs, so that records compare bit for bit (NaN included).
func bitsOf(fs []float32) []uint32 {
	out := make([]uint32, len(fs))
	for i, f := range fs {
		out[i] = math.Float32bits(f)
	}
	return out
}

// stepOf reads launch row y's step back from the params buffer.
func (b *buffers) stepOf(y int) uint64 {
	return abi.DecodeRowParams(b.params[y*abi.RowParamsSize:]).Step
}
