package gokernel

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/half"
	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/runtime/cpu"
)

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
	d      dtype
	vocab  int
	stride int
	rows   [][]float32 // the exact float32 value of every stored logit
	params []refParams // one per launch row
	draws  int         // grid.z; 0 reads as 1
	// Per logits row, the version-2 inputs (nil: none; the buffer then holds zeros).
	bias   [][]float32
	counts [][]uint32
	mask   [][]uint32
}

func (p *problem) numDraws() int { return max(p.draws, 1) }

// buffers is a problem laid out as the kernels' arguments.
type buffers struct {
	logits   []byte
	params   []byte
	tokens   []int32
	status   []int32
	partials []uint64
	counters []uint32
	logprobs []float32
	bias     []float32
	counts   []uint32
	mask     []uint32
}

const untouched = -7 // the value of token and status slots no launch row writes

// untouchedRecord fills the logprobs buffer before a launch.
const untouchedRecord float32 = -77

// encode stores v in dtype d and returns the stored value's exact float32.
func encode(d dtype, v float32, dst []byte) float32 {
	switch d {
	case f16:
		h := half.Float16(v)
		binary.LittleEndian.PutUint16(dst, h)
		return half.Float16ToFloat32(h)
	case bf16:
		h := half.BFloat16(v)
		binary.LittleEndian.PutUint16(dst, h)
		return half.BFloat16ToFloat32(h)
	}
	binary.LittleEndian.PutUint32(dst, math.Float32bits(v))
	return v
}

// layout encodes the problem's rows (replacing them by their stored values) and builds
// the argument buffers for s blocks per row.
func (p *problem) layout(s int) *buffers {
	es := int(p.d.size())
	n, nd := len(p.params), p.numDraws()
	words := (p.vocab + 31) / 32
	b := &buffers{
		logits:   make([]byte, (len(p.rows)*p.stride)*es),
		params:   make([]byte, n*paramsBytes),
		tokens:   make([]int32, len(p.rows)*nd),
		status:   make([]int32, len(p.rows)*nd),
		partials: make([]uint64, max(3*n*nd*s, topnStride*n*s)),
		counters: make([]uint32, 2*n*nd+n),
		logprobs: make([]float32, 4*len(p.rows)*nd),
		bias:     make([]float32, len(p.rows)*p.vocab),
		counts:   make([]uint32, len(p.rows)*p.vocab),
		mask:     make([]uint32, len(p.rows)*words),
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
	for y, rp := range p.params {
		w := b.params[y*paramsBytes:]
		put := func(i int, v uint32) { binary.LittleEndian.PutUint32(w[4*i:], v) }
		put(0, rp.row)
		put(1, math.Float32bits(rp.temperature))
		put(2, uint32(rp.seed))
		put(3, uint32(rp.seed>>32))
		put(4, uint32(rp.step))
		put(5, uint32(rp.step>>32))
		put(6, rp.topK)
		put(7, math.Float32bits(rp.topP))
		put(8, math.Float32bits(rp.minP))
		put(9, rp.flags)
		put(10, math.Float32bits(rp.repetition))
		put(11, math.Float32bits(rp.frequency))
		put(12, math.Float32bits(rp.presence))
		put(13, rp.topN)
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
		Buffer(wrapAtLeast8(runtime.BytesOf(b.mask)))
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

// run lays out the problem, launches fn with s blocks per row and returns the buffers.
func (p *problem) run(t testing.TB, fn runtime.GoKernel, s int, order launchOrder, r *rand.Rand) *buffers {
	b := p.layout(s)
	grid := runtime.Dim3{X: s, Y: len(p.params), Z: p.numDraws()}
	launch(t, fn, grid, b.args(p.stride, p.vocab), order, r)
	for i, c := range b.counters {
		require.Zero(t, c, "counters[%d] after the launch", i)
	}
	return b
}

// check compares every launch row's token and status with ref, and every slot that no
// launch row names with its untouched value.
func (p *problem) check(t testing.TB, b *buffers, ref func([]float32, refParams) (int32, int32), what string) {
	t.Helper()
	named := make([]bool, len(p.rows))
	for y, rp := range p.params {
		named[rp.row] = true
		wantTok, wantStatus := ref(p.rows[rp.row][:p.vocab], rp)
		require.Equal(t, wantStatus, b.status[rp.row], "%s: launch row %d (row %d, %+v): status", what, y, rp.row, rp)
		require.Equal(t, wantTok, b.tokens[rp.row], "%s: launch row %d (row %d, %+v): token", what, y, rp.row, rp)
	}
	for r, n := range named {
		if !n {
			require.Equal(t, int32(untouched), b.tokens[r], "%s: row %d is named by no launch row", what, r)
			require.Equal(t, int32(untouched), b.status[r], "%s: row %d is named by no launch row", what, r)
		}
	}
}

// Row shapes.

func llmRow(r *rand.Rand, v int) []float32 {
	row := make([]float32, v)
	for i := range row {
		row[i] = float32(r.NormFloat64() * 2)
	}
	for range 1 + r.IntN(3) {
		row[r.IntN(v)] = 10 + 15*r.Float32()
	}
	return row
}

// tiedRow has few distinct values, so that top-k and top-p meet ties at their bounds.
func tiedRow(r *rand.Rand, v int) []float32 {
	row := make([]float32, v)
	for i := range row {
		row[i] = float32(r.IntN(7) - 3)
	}
	return row
}

func maskedRow(r *rand.Rand, v int) []float32 {
	row := llmRow(r, v)
	for i := range row {
		if r.IntN(3) == 0 {
			row[i] = float32(math.Inf(-1))
		}
	}
	return row
}

// farRow has one dominant logit: most other elements cannot win, so the skip paths
// run, some elements sitting just around the noise bounds.
func farRow(r *rand.Rand, v int) []float32 {
	row := make([]float32, v)
	for i := range row {
		row[i] = -50 * r.Float32()
	}
	row[r.IntN(v)] = 0
	return row
}

// hugeRow mixes magnitudes whose scaled values overflow at small temperatures.
func hugeRow(r *rand.Rand, v int) []float32 {
	row := llmRow(r, v)
	for range 1 + r.IntN(3) {
		row[r.IntN(v)] = float32(math.Copysign(3e38, r.Float64()-0.7))
	}
	return row
}

// soleRow has one finite logit (or two equal ones) among -Inf.
func soleRow(r *rand.Rand, v int) []float32 {
	row := make([]float32, v)
	for i := range row {
		row[i] = float32(math.Inf(-1))
	}
	row[r.IntN(v)] = 1
	row[r.IntN(v)] = 1
	return row
}

var rowShapes = []struct {
	name string
	make func(*rand.Rand, int) []float32
}{
	{"llm", llmRow}, {"tied", tiedRow}, {"masked", maskedRow}, {"far", farRow},
	{"huge", hugeRow}, {"sole", soleRow},
}
