// Package gokernel is the Go edition of the sampling kernel set (see ../ABI.md), run by
// the CPU device: the readable reference for the GPU editions, which are checked against
// it bit for bit.
//
// A Go kernel is called once per block of the grid, blocks of one launch running
// concurrently on goroutines. Every argument is checked before it is used: a buffer that
// is too short, misaligned or missing makes the row report status 3 (or, when not even
// the row's slot can be found, leaves everything untouched); no input makes a kernel
// read or write out of bounds or panic.
package gokernel

import (
	"encoding/binary"
	"math"
	"unsafe"

	"github.com/gumbel-go/gumbel/half"
	"github.com/gumbel-go/gumbel/runtime"
)

// Status codes written to status[row] (ABI.md).
const (
	// StatusOK: the token is the sampled index.
	StatusOK int32 = 0
	// StatusNonFinite: the row holds NaN or +Inf.
	StatusNonFinite int32 = 1
	// StatusNoFinite: every logit of the row is -Inf.
	StatusNoFinite int32 = 2
	// StatusBadParams: bad temperature, or arguments that cannot hold the row.
	StatusBadParams int32 = 3
)

const (
	paramsBytes = 64 // one RowParams: 16 little-endian 32-bit words
	numArgs     = 8
	// Argument positions (ABI.md).
	argLogits    = 0
	argParams    = 1
	argTokens    = 2
	argStatus    = 3
	argPartials  = 4
	argCounters  = 5
	argRowStride = 6
	argVocab     = 7
	maxVocab     = 1<<31 - 1
	convertChunk = 512 // elements converted from 16-bit floats per step
)

// Row flags, ORed into counters[2y+1].
const (
	flagNonFinite uint32 = 1 << 0 // a NaN or +Inf was seen
	flagFinite    uint32 = 1 << 1 // a finite logit was seen
)

// dtype is the logits element type a kernel is built for.
type dtype uint8

const (
	f32 dtype = iota
	f16
	bf16
)

func (d dtype) size() uint64 {
	if d == f32 {
		return 4
	}
	return 2
}

var suffixes = [...]string{f32: "_f32", f16: "_f16", bf16: "_bf16"}

// Kernels returns the Go edition: kernel name to function.
func Kernels() map[string]runtime.GoKernel {
	m := make(map[string]runtime.GoKernel, 2*len(suffixes))
	for d, s := range suffixes {
		m["gumbel_argmax"+s] = gumbelKernel(dtype(d), true)
		m["categorical"+s] = categoricalKernel(dtype(d))
	}
	return m
}

// rowParams is one decoded RowParams entry.
type rowParams struct {
	row         uint32
	temperature float32
	seed, step  uint64
	topK        uint32
	topP, minP  float32
}

func readRowParams(b []byte, y int) (rowParams, bool) {
	if y < 0 || uint64(len(b))/paramsBytes <= uint64(y) {
		return rowParams{}, false
	}
	w := b[y*paramsBytes : (y+1)*paramsBytes]
	word := func(i int) uint32 { return binary.LittleEndian.Uint32(w[4*i:]) }
	return rowParams{
		row:         word(0),
		temperature: math.Float32frombits(word(1)),
		seed:        uint64(word(2)) | uint64(word(3))<<32,
		step:        uint64(word(4)) | uint64(word(5))<<32,
		topK:        word(6),
		topP:        math.Float32frombits(word(7)),
		minP:        math.Float32frombits(word(8)),
	}, true
}

// launchRow is what one block knows about its launch row after checking the arguments.
type launchRow struct {
	args     *runtime.Args
	p        rowParams
	y, s, x  int // launch row, blocks per row, this block
	vocab    int
	tokens   []byte
	status   []byte
	logits   rowView
	partials []byte
	counters []uint32
}

// rowView is one row of logits, typed.
type rowView struct {
	d   dtype
	f   []float32
	u16 []uint16
}

// load returns elements [start, start+n) as float32: the row itself for f32, or dst
// filled with the exact conversions of the 16-bit values.
func (v *rowView) load(dst *[convertChunk]float32, start, n int) []float32 {
	switch v.d {
	case f32:
		return v.f[start : start+n]
	case f16:
		src := v.u16[start : start+n]
		out := dst[:len(src)]
		for i, h := range src {
			out[i] = half.Float16ToFloat32(h)
		}
		return out
	default:
		src := v.u16[start : start+n]
		out := dst[:len(src)]
		for i, h := range src {
			out[i] = half.BFloat16ToFloat32(h)
		}
		return out
	}
}

// setup decodes the launch arguments for block b. ok is false when the row's slot cannot
// be found (too few arguments, no RowParams for this launch row): nothing can be written.
// bad is true when the row cannot be sampled (status 3); every block of the row reaches
// the same verdict, since it depends only on the row and the arguments.
func setup(b *runtime.BlockContext, d dtype, needScratch bool) (l launchRow, ok, bad bool) {
	a := b.Args
	if a == nil || a.Len() < numArgs {
		return l, false, false
	}
	l.args = a
	l.y, l.x, l.s = b.Block.Y, b.Block.X, max(b.Grid.X, 1)
	if l.y < 0 || l.x < 0 || l.x >= l.s || l.s > maxVocab {
		return l, false, false
	}
	p, found := readRowParams(a.HostBytesArg(argParams), l.y)
	if !found {
		return l, false, false
	}
	l.p = p
	l.tokens = a.HostBytesArg(argTokens)
	l.status = a.HostBytesArg(argStatus)

	t := p.temperature
	if !(t >= 0) || t > math.MaxFloat32 || (t > 0 && float32(1/t) > math.MaxFloat32) {
		// Negative, NaN, infinite, or so small that 1/T overflows (then x·invT
		// would be NaN for x = 0).
		return l, true, true
	}
	vocab := uint64(a.U32Arg(argVocab))
	if vocab == 0 || vocab > maxVocab {
		return l, true, true
	}
	l.vocab = int(vocab)
	view, good := rowOf(a.HostBytesArg(argLogits), d, a.U64Arg(argRowStride), uint64(p.row), vocab)
	if !good {
		return l, true, true
	}
	l.logits = view
	if needScratch && l.s > 1 {
		counters := a.HostBytesArg(argCounters)
		need := 2 * (uint64(l.y) + 1) * 4
		if uint64(len(counters)) < need || uintptr(unsafe.Pointer(unsafe.SliceData(counters)))%4 != 0 {
			return l, true, true
		}
		l.counters = unsafe.Slice((*uint32)(unsafe.Pointer(unsafe.SliceData(counters))), 2*(l.y+1))
		partials := a.HostBytesArg(argPartials)
		if uint64(len(partials))/8 < (uint64(l.y)+1)*uint64(l.s) {
			return l, true, true
		}
		l.partials = partials
	}
	return l, true, false
}

// rowOf views row r of the logits, or reports that the buffer cannot hold it.
func rowOf(b []byte, d dtype, stride, r, vocab uint64) (rowView, bool) {
	es := d.size()
	n := uint64(len(b)) / es
	if stride != 0 && r > math.MaxUint64/stride {
		return rowView{}, false
	}
	start := r * stride
	if start > n || n-start < vocab {
		return rowView{}, false
	}
	if len(b) == 0 || uintptr(unsafe.Pointer(unsafe.SliceData(b)))%uintptr(es) != 0 {
		return rowView{}, false
	}
	v := rowView{d: d}
	p := unsafe.Pointer(&b[start*es])
	if d == f32 {
		v.f = unsafe.Slice((*float32)(p), int(vocab))
	} else {
		v.u16 = unsafe.Slice((*uint16)(p), int(vocab))
	}
	return v, true
}

// finish writes the row's token and status into whichever of the two slots exist.
func (l *launchRow) finish(token, status int32) {
	r := uint64(l.p.row)
	if uint64(len(l.tokens))/4 > r {
		binary.LittleEndian.PutUint32(l.tokens[4*r:], uint32(token))
	}
	if uint64(len(l.status))/4 > r {
		binary.LittleEndian.PutUint32(l.status[4*r:], uint32(status))
	}
}

// orderKey maps a float32 to a uint32 whose unsigned order is the float order: -0 maps
// to the key of +0 (they compare equal as floats, so they must tie and go to the lowest
// index in every reduction order); NaNs lie beyond the infinities.
func orderKey(f float32) uint32 {
	b := math.Float32bits(f)
	if b == 0x80000000 {
		b = 0
	}
	if b>>31 != 0 {
		return ^b
	}
	return b | 0x80000000
}

// pack is the ABI's packed (score, index) partial: the largest packed value is the
// largest score, ties to the lowest index.
func pack(score float32, index int) uint64 {
	return uint64(orderKey(score))<<32 | uint64(^uint32(index))
}
