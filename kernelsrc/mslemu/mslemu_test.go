package mslemu

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/half"
	"github.com/gumbel-go/gumbel/internal/testenv"
	"github.com/gumbel-go/gumbel/kernelsrc"
	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/gumbel-go/gumbel/kernelsrc/gokernel"
	"github.com/gumbel-go/gumbel/philox"
	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/runtime/cpu"
)

// cxxFlags compile the emulator: no fused multiply-add may appear where the kernels
// round twice, exactly as on Metal with contraction off.
var cxxFlags = []string{"-std=c++20", "-O2", "-ffp-contract=off", "-pthread", "-Wall", "-Wno-attributes",
	"-Wno-unknown-pragmas", "-Wno-unused-variable", "-Wno-unused-but-set-variable"}

// untouched fills tokens and status slots before a launch, in both editions.
const untouched = int32(0x7EEEEEEE)

// driver is the emulator binary, built (or found in the cache) once for every test of the
// package.
var driver struct {
	once sync.Once
	path string
	err  error
}

// buildDriver returns the emulator of the translated Metal edition (kernelsrc.Metal),
// built on first use or taken from an earlier identical build in the user cache.
func buildDriver(t *testing.T) string {
	t.Helper()
	cxx := testenv.GXX(t, "the Metal edition's CPU emulation")
	driver.once.Do(func() { driver.path, driver.err = compileDriver(cxx) })
	require.NoError(t, driver.err)
	return driver.path
}

// compileDriver compiles the emulator and the translated Metal edition, or returns the
// binary of an earlier identical build from the user cache (testenv.CachedBinary). Its
// translation units compile in parallel: the build is on the critical path of the
// package's tests.
func compileDriver(cxx string) (string, error) {
	kernels, n := Translate(kernelsrc.Metal)
	if n == 0 {
		return "", errors.New("the Metal kernels declare threadgroup memory; Translate found none")
	}
	kernels += "\n#include \"probes.inc\"\n"
	key, err := testenv.BuildKey(cxx, cxxFlags, Sources, []byte(kernels))
	if err != nil {
		return "", err
	}
	return testenv.CachedBinary("mslemu", key, func(out string) error {
		work := filepath.Dir(out)
		srcs := map[string][]byte{"kernels.cpp": []byte(kernels)}
		for _, name := range Sources {
			b, err := os.ReadFile(name)
			if err != nil {
				return err
			}
			srcs[name] = b
		}
		for name, b := range srcs {
			p := filepath.Join(work, name)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(p, b, 0o644); err != nil {
				return err
			}
		}
		cx := filepath.Join(work, "cxx")
		units := []string{filepath.Join(cx, "driver.cpp"), filepath.Join(cx, "mslemu.cpp"), filepath.Join(work, "kernels.cpp")}
		errs := make([]error, len(units))
		var wg sync.WaitGroup
		for i, u := range units {
			wg.Go(func() {
				args := append(slices.Clone(cxxFlags), "-I", filepath.Join(cx, "include"), "-I", cx, "-c", "-o", u+".o", u)
				if msg, err := exec.Command(cxx, args...).CombinedOutput(); err != nil {
					errs[i] = fmt.Errorf("compiling %s: %w\n%s", filepath.Base(u), err, msg)
				}
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return err
		}
		args := []string{"-pthread", "-o", out}
		for _, u := range units {
			args = append(args, u+".o")
		}
		if msg, err := exec.Command(cxx, args...).CombinedOutput(); err != nil {
			return fmt.Errorf("linking the emulated kernels: %w\n%s", err, msg)
		}
		return nil
	})
}

// kernelKind is one of the kernel families of the set, as driver.cpp numbers them.
type kernelKind uint32

const (
	gumbelArgmax kernelKind = 0
	categorical  kernelKind = 1
	topN         kernelKind = 2
	// filtered runs filter_max over an (S, n, 1) grid, then filtered over (S, n, D), on
	// the same buffers (as the sampler launches the filtered route).
	filtered kernelKind = 3
	// score writes one slot per row; a grid deeper than 1 (draws > 1) must leave the
	// threadgroups past z = 0 idle.
	score kernelKind = 4
	// residual, like score, writes one slot per row. (5 is filter_max, which driver.cpp
	// runs only as part of a filtered case.)
	residual kernelKind = 6
	// shardSelect writes nothing but its shard buffer (the case's shard0); its grid is
	// (S, n, D) with D usually 1, the threadgroups past z = 0 idle. (7 is gumbel_exact,
	// which driver.cpp runs only after a gumbel_argmax case.)
	shardSelect kernelKind = 8
)

// launchCase is one launch: logits of outRows rows, n launch rows sampling some of them.
type launchCase struct {
	name      string
	kernel    kernelKind
	dtype     int // index into abi.Suffixes
	T, S      int
	draws     int // grid.z; 0 means 1
	vocab     int
	stride    int
	outRows   int
	maxGroups int // threadgroups the emulator interleaves at a time
	yieldPct  int
	simdWidth int    // 0 means 32, Apple's
	seed      uint64 // emulator scheduling
	logits    []byte
	params    []byte // n RowParams
	// gridRows is grid.y when it is not one launch row per RowParams record (residual:
	// one per chain); 0 means launchRows().
	gridRows int
	// The processors' buffers, outRows rows each; nil when no row of the launch uses them.
	bias   []float32
	counts []uint32
	mask   []uint32
	// bitmask is the bitmask argument: mask rows of ceil(V/32) words that launch rows
	// pick by bitmask_row; nil when no row of the launch uses it.
	bitmask []uint32
	// vocabOffset is kernel argument 13; shard passes the shard keys (argument 14).
	vocabOffset uint32
	shard       bool
	// shard0, when set (with shard), is the shard buffer's contents before the launch
	// and its length (shard_select: queries, histograms and key words); otherwise the
	// buffer holds one key per slot, starting as 0xA5 bytes.
	shard0 []uint64
	// draft is argument 15, the draft probabilities; nil when no row of the launch
	// uses them.
	draft []float32
	// argmaxOnly runs gumbel_argmax without the gumbel_exact launch that finishes draws
	// left with status 5.
	argmaxOnly bool
	// records0, when set, is the logprobs buffer's contents before the launch (residual
	// reads score's records of the draft positions there); it holds records() floats.
	records0 []float32
}

func (c *launchCase) launchRows() int { return len(c.params) / abi.RowParamsSize }

// gridY is grid.y: the launch rows the kernel runs, which index the scratch.
func (c *launchCase) gridY() int {
	if c.gridRows > 0 {
		return c.gridRows
	}
	return c.launchRows()
}

func (c *launchCase) numDraws() int { return max(c.draws, 1) }

// keySlots is the length of the shard keys: one per slot when the case passes them.
func (c *launchCase) keySlots() int {
	if c.shard0 != nil {
		return len(c.shard0)
	}
	if !c.shard || c.kernel == topN {
		return 0
	}
	return c.slots()
}

// slots is the length of tokens and status (topn: out_tokens and out_values).
func (c *launchCase) slots() int {
	switch c.kernel {
	case topN:
		return abi.TopNSlots(c.outRows)
	case score, residual, shardSelect:
		return abi.Slots(c.outRows, 1)
	}
	return abi.Slots(c.outRows, c.numDraws())
}

// records is the number of float32 in the logprobs buffer.
func (c *launchCase) records() int {
	if c.kernel == topN {
		return 0
	}
	return abi.RecordWords * c.slots()
}

// blocksPerRow is grid.x.
func (c *launchCase) blocksPerRow() int {
	if c.kernel == categorical {
		return 1
	}
	return c.S
}

// launch is the case's shape as package abi sizes the scratch.
func (c *launchCase) launch() abi.Launch {
	return abi.Launch{Rows: c.gridY(), Split: c.blocksPerRow(), Draws: c.numDraws()}
}

// partialWords and counterWords size the scratch of both editions (driver.cpp takes
// them from the case). gumbel_argmax's partials end before the payload words of ABI.md,
// which the Metal and Go editions leave alone, so a write there hits the driver's guard
// page.
func (c *launchCase) partialWords() int {
	l := c.launch()
	switch c.kernel {
	case gumbelArgmax:
		return l.PayloadWord(0, 0, 0)
	case topN:
		return l.PartialsWords(abi.TopN)
	case filtered:
		return l.PartialsWords(abi.Filtered)
	case score:
		return l.PartialsWords(abi.Score)
	case residual:
		return l.PartialsWords(abi.Residual)
	}
	return 1
}

func (c *launchCase) counterWords() int {
	if c.kernel == shardSelect {
		return 2 // it uses none: an 8-byte buffer that it must not touch
	}
	return c.launch().CountersWords(c.family())
}

// family is the kernel family's name in package abi.
func (c *launchCase) family() string {
	switch c.kernel {
	case categorical:
		return abi.Categorical
	case topN:
		return abi.TopN
	case filtered:
		return abi.Filtered
	case score:
		return abi.Score
	case residual:
		return abi.Residual
	case shardSelect:
		return abi.ShardSelect
	}
	return abi.GumbelArgmax
}

func (c *launchCase) kernelName() string { return c.family() + abi.Suffixes[c.dtype] }

// rowParams returns launch row y's parameters.
func (c *launchCase) rowParams(y int) abi.RowParams {
	return abi.DecodeRowParams(c.params[abi.RowParamsSize*y:])
}

// setRowParams encodes launch row y's parameters.
func (c *launchCase) setRowParams(y int, p abi.RowParams) { p.Encode(c.params[abi.RowParamsSize*y:]) }

// Row shapes: each returns vocab float32 values (before narrowing to the dtype).
type rowShape struct {
	name string
	make func(r *rand.Rand, v int) []float32
}

var (
	negInf = float32(math.Inf(-1))
	posInf = float32(math.Inf(1))
	nan    = float32(math.NaN())
)

var rowShapes = []rowShape{
	{"llm", func(r *rand.Rand, v int) []float32 {
		row := make([]float32, v)
		for i := range row {
			row[i] = float32(r.NormFloat64() * 2)
		}
		for range 1 + r.IntN(3) {
			row[r.IntN(v)] = 8 + 12*r.Float32()
		}
		return row
	}},
	{"tied", func(r *rand.Rand, v int) []float32 {
		row := make([]float32, v)
		for i := range row {
			row[i] = float32(r.IntN(5) - 2)
		}
		return row
	}},
	{"masked", func(r *rand.Rand, v int) []float32 {
		row := make([]float32, v)
		for i := range row {
			row[i] = float32(r.NormFloat64() * 3)
			if r.IntN(3) == 0 {
				row[i] = negInf
			}
		}
		return row
	}},
	{"far", func(r *rand.Rand, v int) []float32 {
		row := make([]float32, v)
		for i := range row {
			row[i] = -60 * r.Float32()
		}
		row[r.IntN(v)] = 0
		return row
	}},
	{"huge", func(r *rand.Rand, v int) []float32 {
		row := make([]float32, v)
		for i := range row {
			row[i] = float32(r.NormFloat64())
		}
		for range 1 + r.IntN(3) {
			row[r.IntN(v)] = float32(math.Copysign(3e38, r.Float64()-0.7))
		}
		return row
	}},
	{"sole", func(r *rand.Rand, v int) []float32 {
		row := make([]float32, v)
		for i := range row {
			row[i] = negInf
		}
		row[r.IntN(v)] = 1
		row[r.IntN(v)] = 1
		return row
	}},
	{"nan", func(r *rand.Rand, v int) []float32 {
		row := make([]float32, v)
		for i := range row {
			row[i] = float32(r.NormFloat64())
		}
		row[r.IntN(v)] = nan
		return row
	}},
	{"posinf", func(r *rand.Rand, v int) []float32 {
		row := make([]float32, v)
		for i := range row {
			row[i] = float32(r.NormFloat64())
		}
		row[r.IntN(v)] = posInf
		return row
	}},
	{"flat", func(r *rand.Rand, v int) []float32 {
		// Mass spread over many tokens, so top-k, top-p and min-p cuts move the draw.
		row := make([]float32, v)
		for i := range row {
			row[i] = 2*r.Float32() - 1
		}
		return row
	}},
	{"steps", func(r *rand.Rand, v int) []float32 {
		// A few levels half a nat apart: ties with real mass at every filter bound.
		row := make([]float32, v)
		for i := range row {
			row[i] = 0.5 * float32(r.IntN(6))
		}
		return row
	}},
	{"zeros", func(r *rand.Rand, v int) []float32 {
		// The largest logit is a zero, repeated, of one sign per row. (Rows holding
		// both -0 and +0 are TestSignedZeroGreedy's.)
		zero := float32(math.Copysign(0, float64(r.IntN(2))-0.5))
		row := make([]float32, v)
		for i := range row {
			row[i] = -float32(r.IntN(3))
			if row[i] == 0 {
				row[i] = zero
			}
		}
		return row
	}},
	{"allneginf", func(r *rand.Rand, v int) []float32 {
		row := make([]float32, v)
		for i := range row {
			row[i] = negInf
		}
		return row
	}},
}

// temperatures of Gumbel and categorical rows, and the bad ones (status 3).
var (
	goodTemps = []float32{0.25, 0.7, 1, 1.5, 4, 16}
	badTemps  = []float32{-1, nan, posInf, 1e-40}
)

// encodeRow narrows a row to the dtype, little-endian, into dst.
func encodeRow(dtype int, row []float32, dst []byte) {
	for i, x := range row {
		switch dtype {
		case 0:
			binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(x))
		case 1:
			binary.LittleEndian.PutUint16(dst[2*i:], half.Float16(x))
		default:
			binary.LittleEndian.PutUint16(dst[2*i:], half.BFloat16(x))
		}
	}
}

var vocabs = []int{1, 2, 3, 7, 33, 64, 255, 1000, 4099, 12289}

// newCase builds a launch of n rows. Rows are written with a stride of vocab plus
// padding, the padding holding NaN, so a kernel that read past vocab would report the
// row non-finite; launch rows name the rows in a shuffled order and leave one row
// unnamed.
func newCase(r *rand.Rand, name string, kernel kernelKind, dtype, T, S, n, vocab int) *launchCase {
	esize := 4
	if dtype != 0 {
		esize = 2
	}
	pad := r.IntN(5)
	c := &launchCase{
		name: name, kernel: kernel, dtype: dtype, T: T, S: S, vocab: vocab,
		stride: vocab + pad, outRows: n + 1,
		maxGroups: 1 + r.IntN(8), yieldPct: r.IntN(40), seed: r.Uint64(),
	}
	// The last row ends the buffer (no padding after it), so an overrun hits the
	// driver's guard page.
	elems := (c.outRows-1)*c.stride + vocab
	c.logits = make([]byte, elems*esize)
	padding := make([]float32, pad)
	for i := range padding {
		padding[i] = nan
	}
	for row := 0; row < c.outRows; row++ {
		shape := rowShapes[r.IntN(len(rowShapes))]
		encodeRow(dtype, shape.make(r, vocab), c.logits[row*c.stride*esize:])
		if row < c.outRows-1 {
			encodeRow(dtype, padding, c.logits[(row*c.stride+vocab)*esize:])
		}
	}
	rows := r.Perm(c.outRows)[:n]
	c.params = make([]byte, abi.RowParamsSize*n)
	for y := range n {
		p := abi.RowParams{Row: uint32(rows[y]), Seed: r.Uint64(), Step: r.Uint64()}
		switch k := r.IntN(10); {
		case k == 0:
			p.Temperature = badTemps[r.IntN(len(badTemps))]
		case k <= 2:
			p.Temperature = 0
		default:
			p.Temperature = goodTemps[r.IntN(len(goodTemps))]
		}
		if kernel == categorical || kernel == filtered {
			p.TopK = pick[uint32](r, 0, 0, 1, 2, 5, 50, uint32(max(vocab-1, 0)), uint32(vocab), uint32(vocab+3))
			p.TopP = pick[float32](r, 0, 0, 1e-12, 0.01, 0.5, 0.9, 0.999, 1, 1.5)
			p.MinP = pick[float32](r, 0, 0, 0, 1e-30, 0.05, 0.5, 1, 1.5)
		}
		c.setRowParams(y, p)
	}
	return c
}

func pick[T any](r *rand.Rand, values ...T) T { return values[r.IntN(len(values))] }

// writeCases encodes the cases in the driver's input format (see driver.cpp).
func writeCases(cases []*launchCase) []byte {
	var b bytes.Buffer
	size := 0
	for _, c := range cases {
		size += len(c.logits) // most of the input: one allocation rather than a series of doublings
	}
	b.Grow(size)
	le := binary.LittleEndian
	b.WriteString("MSLEMU08")
	_ = binary.Write(&b, le, uint32(len(cases)))
	for _, c := range cases {
		for _, v := range []uint32{uint32(c.kernel), uint32(c.dtype), uint32(c.T), uint32(c.S),
			uint32(c.launchRows()), uint32(c.gridY()), uint32(c.numDraws()), uint32(c.vocab)} {
			_ = binary.Write(&b, le, v)
		}
		_ = binary.Write(&b, le, uint64(c.stride))
		for _, v := range []uint32{uint32(c.outRows), uint32(c.maxGroups), uint32(c.yieldPct), uint32(c.simdWidth)} {
			_ = binary.Write(&b, le, v)
		}
		_ = binary.Write(&b, le, c.seed)
		_ = binary.Write(&b, le, uint64(c.partialWords()))
		_ = binary.Write(&b, le, uint64(c.counterWords()))
		_ = binary.Write(&b, le, uint64(len(c.logits)))
		b.Write(c.logits)
		b.Write(c.params)
		for _, extra := range [][]byte{runtime.BytesOf(c.bias), runtime.BytesOf(c.counts), runtime.BytesOf(c.mask),
			runtime.BytesOf(c.bitmask)} {
			_ = binary.Write(&b, le, uint64(len(extra)))
			b.Write(extra)
		}
		sk := uint32(0)
		if c.shard {
			sk = 1
		}
		_ = binary.Write(&b, le, []uint32{c.vocabOffset, sk})
		_ = binary.Write(&b, le, uint64(8*len(c.shard0)))
		b.Write(runtime.BytesOf(c.shard0))
		for _, extra := range [][]byte{runtime.BytesOf(c.draft), runtime.BytesOf(c.records0)} {
			_ = binary.Write(&b, le, uint64(len(extra)))
			b.Write(extra)
		}
	}
	return b.Bytes()
}

// result is what one launch left behind.
type result struct {
	tokens, status []int32 // topn: out_tokens and the bits of out_values
	logprobs       []float32
	keys           []uint64 // shard keys, when the case passes them
	counts         []uint32
	params         []byte
	countersLeft   uint32
}

// rowParams returns launch row y's parameters as the launch left them.
func (res result) rowParams(y int) abi.RowParams {
	return abi.DecodeRowParams(res.params[abi.RowParamsSize*y:])
}

// readResults decodes the driver's output.
func readResults(t *testing.T, out []byte, cases []*launchCase) []result {
	t.Helper()
	require.True(t, bytes.HasPrefix(out, []byte("MSLEMU08")), "driver output has no header")
	rd := bytes.NewReader(out[8:])
	res := make([]result, len(cases))
	for i, c := range cases {
		res[i].tokens = make([]int32, c.slots())
		res[i].status = make([]int32, c.slots())
		res[i].logprobs = make([]float32, c.records())
		res[i].keys = make([]uint64, c.keySlots())
		if len(c.counts) > 0 {
			res[i].counts = make([]uint32, len(c.counts))
		}
		res[i].params = make([]byte, len(c.params))
		for _, dst := range []any{res[i].tokens, res[i].status, res[i].logprobs, res[i].keys, res[i].counts,
			res[i].params, &res[i].countersLeft} {
			require.NoError(t, binary.Read(rd, binary.LittleEndian, dst))
		}
	}
	require.Zero(t, rd.Len(), "driver output has trailing bytes")
	return res
}

// optional wraps an optional buffer, or an 8-byte stand-in that no kernel may touch
// (ABI.md: an unused buffer argument is any valid buffer of at least 8 bytes).
func optional(b []byte) runtime.Buffer {
	if len(b) == 0 {
		return cpu.Wrap(make([]byte, 8))
	}
	return cpu.Wrap(b)
}

// runGoEdition runs the case on the Go edition, one block at a time in a shuffled order
// (a filtered case: filter_max's blocks, then filtered's).
func runGoEdition(t *testing.T, c *launchCase, kernels map[string]runtime.GoKernel, r *rand.Rand) result {
	t.Helper()
	fn := kernels[c.kernelName()]
	require.NotNil(t, fn, "the Go edition has no kernel %s", c.kernelName())
	n, d, s := c.gridY(), c.numDraws(), c.blocksPerRow()
	res := result{
		tokens:   make([]int32, c.slots()),
		status:   make([]int32, c.slots()),
		logprobs: make([]float32, c.records()),
		keys:     make([]uint64, c.keySlots()),
		counts:   slices.Clone(c.counts),
		params:   slices.Clone(c.params),
	}
	for i := range res.keys {
		res.keys[i] = 0xA5A5A5A5A5A5A5A5 // as the driver leaves them
	}
	copy(res.keys, c.shard0)
	for i := range res.tokens {
		res.tokens[i], res.status[i] = untouched, untouched
	}
	for i := range res.logprobs {
		res.logprobs[i] = math.Float32frombits(uint32(untouched))
	}
	if c.records0 != nil {
		require.Len(t, c.records0, len(res.logprobs), "%s: the starting records must fill the buffer", c.name)
		copy(res.logprobs, c.records0)
	}
	partials := make([]uint64, c.partialWords())
	counters := make([]uint32, c.counterWords())
	args := func(logprobs runtime.Buffer) *runtime.Args {
		var a runtime.Args
		a.Buffer(cpu.Wrap(c.logits)).
			Buffer(cpu.Wrap(res.params)).
			Buffer(cpu.Wrap(runtime.BytesOf(res.tokens))).
			Buffer(cpu.Wrap(runtime.BytesOf(res.status))).
			Buffer(cpu.Wrap(runtime.BytesOf(partials))).
			Buffer(cpu.Wrap(runtime.BytesOf(counters))).
			U64(uint64(c.stride)).
			U32(uint32(c.vocab)).
			Buffer(logprobs).
			Buffer(optional(runtime.BytesOf(c.bias))).
			Buffer(optional(runtime.BytesOf(res.counts))).
			Buffer(optional(runtime.BytesOf(c.mask))).
			Buffer(optional(runtime.BytesOf(c.bitmask))).
			U32(c.vocabOffset).
			Buffer(optional(runtime.BytesOf(res.keys))).
			Buffer(optional(runtime.BytesOf(c.draft)))
		require.NoError(t, a.Err())
		return &a
	}
	launch := func(fn runtime.GoKernel, a *runtime.Args, s, d int) {
		grid := runtime.Dim3{X: s, Y: n, Z: d}
		for _, i := range r.Perm(s * n * d) {
			fn(&runtime.BlockContext{
				Block: runtime.Dim3{X: i % s, Y: (i / s) % n, Z: i / (s * n)}, Grid: grid,
				BlockDim: runtime.Dim3{X: c.T, Y: 1, Z: 1}, Args: a,
			})
		}
	}
	if c.kernel == filtered {
		// filter_max over (S, n, 1) with the same buffers, its records argument unused.
		name := abi.KernelName(abi.FilterMax, abi.DTypes[c.dtype])
		fm := kernels[name]
		require.NotNil(t, fm, "the Go edition has no kernel %s", name)
		launch(fm, args(optional(nil)), s, 1)
	}
	launch(fn, args(optional(runtime.BytesOf(res.logprobs))), s, d)
	if c.kernel == gumbelArgmax && !c.argmaxOnly && slices.Contains(res.status, int32(abi.StatusExact)) {
		// As the sampler (and driver.cpp) do: gumbel_exact finishes the draws left with
		// status 5.
		name := abi.KernelName(abi.GumbelExact, abi.DTypes[c.dtype])
		require.NotNil(t, kernels[name], "the Go edition has no kernel %s", name)
		launch(kernels[name], args(optional(runtime.BytesOf(res.logprobs))), 1, d)
	}
	for _, v := range counters {
		if v != 0 {
			res.countersLeft++
		}
	}
	return res
}

// runDriver runs the emulator on the cases.
func runDriver(t *testing.T, bin string, cases []*launchCase) []result {
	t.Helper()
	dir := t.TempDir()
	in, outPath := filepath.Join(dir, "cases.bin"), filepath.Join(dir, "results.bin")
	require.NoError(t, os.WriteFile(in, writeCases(cases), 0o644))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	msg, err := exec.CommandContext(ctx, bin, in, outPath).CombinedOutput()
	require.NoError(t, err, "the emulated kernels failed:\n%s", msg)
	out, err := os.ReadFile(outPath)
	require.NoError(t, err)
	return readResults(t, out, cases)
}

// TestKernelsMatchGoEdition runs the Metal kernels in the emulator over every dtype,
// threadgroups of 32, 256 and 1024 threads, 1, 3 and 16 threadgroups per row and SIMD
// widths of 32 (and 8, 16, 64 for some launches), on rows
// with masks, NaN, +Inf, all -Inf, ties and huge values, greedy, Gumbel, categorical
// (top-k, top-p, min-p) and bad-temperature rows, and requires the Go edition's tokens
// and status in every slot, and counters left at zero.
func TestKernelsMatchGoEdition(t *testing.T) {
	bin := buildDriver(t)
	r := rand.New(rand.NewPCG(2024, 11))
	var cases []*launchCase
	for dtype := range abi.Suffixes {
		for _, T := range []int{32, 256, 1024} {
			for _, S := range []int{1, 3, 16} {
				v := vocabs[r.IntN(len(vocabs))]
				name := fmt.Sprintf("gumbel_argmax%s/T=%d/S=%d/V=%d", abi.Suffixes[dtype], T, S, v)
				cases = append(cases, newCase(r, name, gumbelArgmax, dtype, T, S, 7, v))
			}
			for range 4 {
				v := vocabs[r.IntN(len(vocabs))]
				name := fmt.Sprintf("categorical%s/T=%d/V=%d", abi.Suffixes[dtype], T, v)
				cases = append(cases, newCase(r, name, categorical, dtype, T, 1, 7, v))
			}
		}
	}
	// Other SIMD-group widths (Intel and AMD Macs): more SIMD-groups than lanes, other
	// bin splits in the radix selection.
	for _, width := range []int{8, 16, 64} {
		for _, T := range []int{64, 1024} {
			v := vocabs[r.IntN(len(vocabs))]
			g := newCase(r, fmt.Sprintf("gumbel_argmax_f32/width=%d/T=%d/S=3/V=%d", width, T, v), gumbelArgmax, 0, T, 3, 7, v)
			c := newCase(r, fmt.Sprintf("categorical_f32/width=%d/T=%d/V=%d", width, T, v), categorical, 0, T, 1, 7, v)
			g.simdWidth, c.simdWidth = width, width
			cases = append(cases, g, c)
		}
	}
	got := runDriver(t, bin, cases)
	kernels := gokernel.Kernels()
	var ok [2]int
	var statusCounts [4]int
	for i, c := range cases {
		want := runGoEdition(t, c, kernels, r)
		assert.Zero(t, got[i].countersLeft, "%s: counters not left at zero", c.name)
		assert.Zero(t, want.countersLeft, "%s: the Go edition left counters set", c.name)
		for row := range c.outRows {
			if !assert.Equal(t, want.status[row], got[i].status[row], "%s: row %d status", c.name, row) ||
				!assert.Equal(t, want.tokens[row], got[i].tokens[row], "%s: row %d token", c.name, row) {
				continue
			}
			if st := want.status[row]; st >= 0 && st < 4 {
				statusCounts[st]++
				ok[c.kernel]++
			}
		}
	}
	t.Logf("%d launches; rows agreeing: gumbel_argmax %d, categorical %d; by status 0/1/2/3: %v",
		len(cases), ok[gumbelArgmax], ok[categorical], statusCounts)
	// Every status must have been exercised, or the inputs missed a path.
	for st, n := range statusCounts {
		assert.Positive(t, n, "no row ended with status %d", st)
	}
}

// TestSignedZeroGreedy pins the ABI's order on signed zeros: -0 and +0 compare equal, so
// they tie and the lowest index wins, whatever the split: the -0 at index 1 beats the +0
// at index 2.
func TestSignedZeroGreedy(t *testing.T) {
	bin := buildDriver(t)
	negZero := float32(math.Copysign(0, -1))
	row := []float32{-1, negZero, 0, negZero, 0, -2}
	var cases []*launchCase
	for _, T := range []int{32, 256} {
		for _, S := range []int{1, 2, 3} {
			c := &launchCase{
				name: fmt.Sprintf("T=%d/S=%d", T, S), kernel: gumbelArgmax, T: T, S: S,
				vocab: len(row), stride: len(row), outRows: 1, maxGroups: S, yieldPct: 20, seed: uint64(T + S),
				logits: make([]byte, 4*len(row)), params: make([]byte, abi.RowParamsSize),
			}
			encodeRow(0, row, c.logits)
			c.setRowParams(0, abi.RowParams{})
			cases = append(cases, c)
		}
	}
	for i, res := range runDriver(t, bin, cases) {
		assert.Equal(t, int32(0), res.status[0], "%s: status", cases[i].name)
		assert.Equal(t, int32(1), res.tokens[0], "%s: -0 at index 1 ties +0 at index 2 and wins by index", cases[i].name)
	}
}

// TestTailWordDecidesWinner builds a row whose winner depends on the tail-extension
// word: element 0 has a main word below 2^12, where the tail word moves the noise by
// more than 1e-4, and element 1 scores halfway between element 0's noise with its true
// tail word and with a zero one. Whole-row tests on random inputs almost never see such
// an element; a kernel that dropped or misread the tail word fails here.
func TestTailWordDecidesWinner(t *testing.T) {
	bin := buildDriver(t)
	var seed uint64
	var gTrue, gZero float32
	for s := uint64(1); ; s++ {
		if s >= 1<<26 { // checked by hand: require.Less on every seed would cost more than the search
			require.Fail(t, "no seed with a small main word found")
		}
		w := philox.Word(s, 0, 0, philox.PurposeGumbel)
		if w >= 1<<12 {
			continue
		}
		gTrue = philox.Gumbel(w, philox.Word(s, 0, 0, philox.PurposeGumbelTail))
		gZero = philox.Gumbel(w, 0)
		if math.Abs(float64(gTrue-gZero)) > 1e-4 {
			seed = s
			break
		}
	}
	mid := (gTrue + gZero) / 2
	g1 := philox.ElementGumbel(seed, 0, 1)
	wantToken := int32(0)
	if gTrue < gZero {
		wantToken = 1
	}
	const vocab = 4099
	row := make([]float32, vocab)
	for i := range row {
		row[i] = negInf
	}
	row[0], row[1] = 0, mid-g1
	var cases []*launchCase
	for _, T := range []int{32, 256, 1024} {
		for _, S := range []int{1, 3, 16} {
			c := &launchCase{
				name: fmt.Sprintf("T=%d/S=%d", T, S), kernel: gumbelArgmax, T: T, S: S,
				vocab: vocab, stride: vocab, outRows: 1, maxGroups: 4, yieldPct: 10, seed: uint64(T*S + 1),
				logits: make([]byte, 4*vocab), params: make([]byte, abi.RowParamsSize),
			}
			encodeRow(0, row, c.logits)
			c.setRowParams(0, abi.RowParams{Temperature: 1, Seed: seed})
			cases = append(cases, c)
		}
	}
	kernels := gokernel.Kernels()
	r := rand.New(rand.NewPCG(1, 1))
	for i, res := range runDriver(t, bin, cases) {
		want := runGoEdition(t, cases[i], kernels, r)
		require.Equal(t, wantToken, want.tokens[0], "the Go edition disagrees with philox")
		assert.Equal(t, int32(0), res.status[0], "%s: status", cases[i].name)
		assert.Equal(t, wantToken, res.tokens[0], "%s: the tail word decides this row", cases[i].name)
	}
}
