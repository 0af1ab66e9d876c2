// Package gokernel is the Go edition of the sampling kernel set (see ../ABI.md), run by
// the CPU device: the readable reference for the GPU editions, which are checked against
// it (bit for bit for tokens, to about 1e-5 relative for log-probabilities).
//
// A Go kernel is called once per block of the grid, blocks of one launch running
// concurrently on goroutines. Every argument is checked before it is used: a buffer that
// is too short, misaligned or missing for a feature the row uses makes the row report
// status 3 (or, when not even the row's slot can be found, leaves everything untouched);
// no input makes a kernel read or write out of bounds or panic.
//
// A launch with the eight arguments of ABI version 1 is accepted as one whose rows use
// no version-2 buffer: a row that asks for one (BIAS, PENALTIES, RECORD, MASK, LOGPROBS)
// reports status 3.
package gokernel

import (
	"encoding/binary"
	"math"
	"unsafe"

	"github.com/gumbel-go/gumbel/half"
	"github.com/gumbel-go/gumbel/runtime"
)

// Status codes written to status[slot] (ABI.md).
const (
	// StatusOK: the token is the sampled index.
	StatusOK int32 = 0
	// StatusNonFinite: the row holds NaN or +Inf (after bias and penalties).
	StatusNonFinite int32 = 1
	// StatusNoFinite: every processed logit of the row is -Inf or masked.
	StatusNoFinite int32 = 2
	// StatusBadParams: bad temperature, reserved flags, or arguments that cannot hold
	// the row.
	StatusBadParams int32 = 3
)

// Row flags of RowParams word 9 (ABI.md, version 2).
const (
	// FlagLogprobs: write the log-probability record of every output slot.
	FlagLogprobs uint32 = 1 << 0
	// FlagAdvance: after all draws, add D to the row's step in params.
	FlagAdvance uint32 = 1 << 1
	// FlagRecord: after all draws, count each drawn token in the row's counts.
	FlagRecord uint32 = 1 << 2
	// FlagRouted: the row's kernel is chosen by FlagCategorical.
	FlagRouted uint32 = 1 << 3
	// FlagCategorical: with FlagRouted, the row belongs to the categorical kernel.
	FlagCategorical uint32 = 1 << 4
	// FlagBias: add the row's logit bias.
	FlagBias uint32 = 1 << 5
	// FlagMask: apply the row's allowed-token bitmap.
	FlagMask uint32 = 1 << 6
	// FlagPenalties: apply repetition, frequency and presence penalties.
	FlagPenalties uint32 = 1 << 7
	// FlagPerturbed: topn ranks Gumbel scores instead of raw logits.
	FlagPerturbed uint32 = 1 << 8
	// flagsReserved are the bits a row must leave clear.
	flagsReserved = ^uint32(1<<9 - 1)
)

// MaxTopN is the largest n of the topn kernels, and the stride of their outputs.
const MaxTopN = 20

const (
	paramsBytes = 64 // one RowParams: 16 little-endian 32-bit words
	numArgsV1   = 8
	numArgsV2   = 12
	// Argument positions (ABI.md).
	argLogits    = 0
	argParams    = 1
	argTokens    = 2
	argStatus    = 3
	argPartials  = 4
	argCounters  = 5
	argRowStride = 6
	argVocab     = 7
	argLogprobs  = 8
	argBias      = 9
	argCounts    = 10
	argMask      = 11
	maxVocab     = 1<<31 - 1
	convertChunk = 512 // elements converted from 16-bit floats per step
	// maxScratchWords bounds n·D·S: a grid beyond it (far beyond any device's) is
	// refused before any size arithmetic could overflow.
	maxScratchWords = 1 << 40
	// maxDraws bounds grid.z, so that slot arithmetic (row·D + z, in 4-word
	// records) stays far from overflow.
	maxDraws = 1 << 24
	// topnStride is the uint64 words one topn block keeps in partials.
	topnStride = MaxTopN + 2
)

// Row flags, ORed into counters[2c+1].
const (
	flagNonFinite uint32 = 1 << 0 // a NaN or +Inf was seen
	flagFinite    uint32 = 1 << 1 // a finite (unmasked) logit was seen
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
	m := make(map[string]runtime.GoKernel, 3*len(suffixes))
	for d, s := range suffixes {
		m["gumbel_argmax"+s] = gumbelKernel(dtype(d), true)
		m["categorical"+s] = categoricalKernel(dtype(d))
		m["topn"+s] = topnKernel(dtype(d))
	}
	return m
}

// kernelKind says which kernel family a block belongs to: routing and the scratch a row
// needs depend on it.
type kernelKind uint8

const (
	kindGumbel kernelKind = iota
	kindCategorical
	kindTopN
)

// rowParams is one decoded RowParams entry.
type rowParams struct {
	row         uint32
	temperature float32
	seed, step  uint64
	topK        uint32
	topP, minP  float32
	flags       uint32
	repetition  float32
	frequency   float32
	presence    float32
	topN        uint32
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
		flags:       word(9),
		repetition:  math.Float32frombits(word(10)),
		frequency:   math.Float32frombits(word(11)),
		presence:    math.Float32frombits(word(12)),
		topN:        word(13),
	}, true
}

// launchRow is what one block knows about its launch row after checking the arguments.
type launchRow struct {
	args    *runtime.Args
	p       rowParams
	params  []byte // the whole params buffer: ADVANCE writes the row's step back
	y, s, x int    // launch row, blocks per row, this block
	n       int    // launch rows (grid.y)
	z, d    int    // this draw, draws per row (grid.z)
	slot    uint64 // output slot of this draw: row·D + z
	vocab   int
	tokens  []byte
	status  []byte
	logits  rowView
	proc    processor
	// logprobs is the whole logprobs buffer when the row has LOGPROBS and the buffer
	// holds all of the row's records; counts the row's V counts when it has RECORD.
	logprobs []float32
	counts   []uint32
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

// at returns element i as float32.
func (v *rowView) at(i int) float32 {
	switch v.d {
	case f32:
		return v.f[i]
	case f16:
		return half.Float16ToFloat32(v.u16[i])
	default:
		return half.BFloat16ToFloat32(v.u16[i])
	}
}

// setup decodes the launch arguments for block b. ok is false when the block has nothing
// to do: the row's slot cannot be found (too few arguments, no RowParams for this launch
// row), the block lies outside the kernel's grid, or the row is routed to the other
// kernel. bad is true when the row cannot be sampled (status 3); every block of every
// draw of the row reaches the same verdict, since it depends only on the row, the grid
// shape and the arguments.
func setup(b *runtime.BlockContext, d dtype, kind kernelKind) (l launchRow, ok, bad bool) {
	a := b.Args
	if a == nil || a.Len() < numArgsV1 {
		return l, false, false
	}
	l.args = a
	l.y, l.x, l.z = b.Block.Y, b.Block.X, b.Block.Z
	l.s, l.n, l.d = max(b.Grid.X, 1), max(b.Grid.Y, 1), max(b.Grid.Z, 1)
	if kind == kindTopN {
		l.d = 1 // topn draws nothing: blocks with z > 0 have no work
	}
	if l.y < 0 || l.x < 0 || l.z < 0 || l.y >= l.n || l.x >= l.s || l.z >= l.d || l.d > maxDraws ||
		uint64(l.s)*uint64(l.n) > maxScratchWords || uint64(l.s)*uint64(l.n)*uint64(l.d) > maxScratchWords {
		return l, false, false
	}
	l.params = a.HostBytesArg(argParams)
	p, found := readRowParams(l.params, l.y)
	if !found {
		return l, false, false
	}
	l.p = p
	if kind != kindTopN && p.flags&FlagRouted != 0 && (p.flags&FlagCategorical != 0) != (kind == kindCategorical) {
		return l, false, false // the other kernel's row: leave it entirely alone
	}
	l.slot = uint64(p.row)*uint64(l.d) + uint64(l.z)
	l.tokens = a.HostBytesArg(argTokens)
	l.status = a.HostBytesArg(argStatus)
	feature := func(f uint32) bool { return p.flags&f != 0 }
	lastSlot := uint64(p.row)*uint64(l.d) + uint64(l.d) // one past the row's last slot
	if kind != kindTopN && feature(FlagLogprobs) {
		// Looked at first, so that a row found bad for another reason still gets
		// its NaN records.
		l.logprobs = f32Words(argBuffer(a, argLogprobs), 4*lastSlot)
		if l.logprobs == nil {
			return l, true, true
		}
	}

	if p.flags&flagsReserved != 0 {
		return l, true, true
	}
	t := p.temperature
	if !(t >= 0) || t > math.MaxFloat32 || (t > 0 && float32(1/t) > math.MaxFloat32) {
		// Negative, NaN, infinite, or so small that 1/T overflows (then x·invT
		// would be NaN for x = 0).
		return l, true, true
	}
	if kind == kindTopN && (p.topN < 1 || p.topN > MaxTopN) {
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

	// Logit processors: topn uses them only for Gumbel scores.
	if kind != kindTopN || feature(FlagPerturbed) {
		r := uint64(p.row)
		if feature(FlagBias) {
			if l.proc.bias = rowSlice(f32Words(argBuffer(a, argBias), (r+1)*vocab), r, vocab); l.proc.bias == nil {
				return l, true, true
			}
		}
		var counts []uint32
		if feature(FlagPenalties) || (kind != kindTopN && feature(FlagRecord)) {
			if counts = rowSlice(u32Words(argBuffer(a, argCounts), (r+1)*vocab), r, vocab); counts == nil {
				return l, true, true
			}
		}
		if feature(FlagPenalties) {
			l.proc.counts = counts
			l.proc.repetition, l.proc.frequency, l.proc.presence = p.repetition, p.frequency, p.presence
		}
		if kind != kindTopN && feature(FlagRecord) {
			l.counts = counts
			// The finishing draw reads every draw's token and status back.
			if uint64(len(l.tokens))/4 < lastSlot || uint64(len(l.status))/4 < lastSlot {
				return l, true, true
			}
		}
		if feature(FlagMask) {
			w := (vocab + 31) / 32
			if l.proc.mask = rowSlice(u32Words(argBuffer(a, argMask), (r+1)*w), r, w); l.proc.mask == nil {
				return l, true, true
			}
		}
		l.proc.active = l.proc.bias != nil || l.proc.counts != nil || l.proc.mask != nil
	}

	// Scratch, sized for the row's last draw so that every draw agrees.
	s, n, dd, y := uint64(l.s), uint64(l.n), uint64(l.d), uint64(l.y)
	var needCounters, needPartials uint64
	switch kind {
	case kindGumbel:
		if l.s > 1 {
			last := ((dd-1)*n + y) * s // the first block of the row's last draw
			needCounters = 2*((dd-1)*n+y) + 2
			needPartials = last + s
			if feature(FlagLogprobs) {
				needPartials = n*dd*s + 2*(last+s-1) + 2
			}
		}
	case kindTopN:
		if l.s > 1 {
			needCounters = 2*y + 2
			needPartials = topnStride * (y*s + s)
		}
	}
	if kind != kindTopN && l.d > 1 && feature(FlagAdvance|FlagRecord) {
		needCounters = max(needCounters, 2*n*dd+y+1)
	}
	if needCounters > 0 {
		if l.counters = u32Words(a.HostBytesArg(argCounters), needCounters); l.counters == nil {
			return l, true, true
		}
	}
	if needPartials > 0 {
		partials := a.HostBytesArg(argPartials)
		if uint64(len(partials))/8 < needPartials {
			return l, true, true
		}
		l.partials = partials
	}
	return l, true, false
}

// argBuffer returns the host memory of version-2 buffer argument i, or nil when the
// launch has the version-1 argument list.
func argBuffer(a *runtime.Args, i int) []byte {
	if a.Len() < numArgsV2 {
		return nil
	}
	return a.HostBytesArg(i)
}

// u32Words views b as uint32 when it is 4-byte aligned and holds at least need words;
// otherwise nil. The view covers all of b's whole words.
func u32Words(b []byte, need uint64) []uint32 {
	if need == 0 || uint64(len(b))/4 < need || uintptr(unsafe.Pointer(unsafe.SliceData(b)))%4 != 0 {
		return nil
	}
	return unsafe.Slice((*uint32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4)
}

// f32Words is u32Words for float32.
func f32Words(b []byte, need uint64) []float32 {
	if need == 0 || uint64(len(b))/4 < need || uintptr(unsafe.Pointer(unsafe.SliceData(b)))%4 != 0 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4)
}

// rowSlice returns entries [r·n, (r+1)·n) of s, which the caller has checked to hold
// them; nil stays nil.
func rowSlice[T any](s []T, r, n uint64) []T {
	if s == nil {
		return nil
	}
	return s[r*n : (r+1)*n]
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

// chunk is this block's contiguous part [start, end) of the row: a multiple of four
// elements long, so that each Philox block is computed by one block only.
func (l *launchRow) chunk() (start, end int) {
	n := ((l.vocab+l.s-1)/l.s + 3) &^ 3
	start = min(l.x*n, l.vocab)
	return start, min(start+n, l.vocab)
}

// finish writes the draw's token and status into whichever of the two slots exist.
func (l *launchRow) finish(token, status int32) {
	o := l.slot
	if uint64(len(l.tokens))/4 > o {
		binary.LittleEndian.PutUint32(l.tokens[4*o:], uint32(token))
	}
	if uint64(len(l.status))/4 > o {
		binary.LittleEndian.PutUint32(l.status[4*o:], uint32(status))
	}
}

// writeRecord stores the draw's log-probability record when the row asked for one.
func (l *launchRow) writeRecord(rec [4]float32) {
	if l.logprobs != nil && uint64(len(l.logprobs))/4 > l.slot {
		copy(l.logprobs[4*l.slot:4*l.slot+4], rec[:])
	}
}

// nanRecord is the record of a slot whose status is not 0.
var nanRecord = func() [4]float32 {
	nan := float32(math.NaN())
	return [4]float32{nan, nan, nan, nan}
}()

// fail reports a row that cannot be sampled: status 3 and a NaN record, and none of the
// row's end-of-draws work (no RECORD, no ADVANCE), since its arguments are not trusted.
func (l *launchRow) fail() {
	l.finish(-1, StatusBadParams)
	l.writeRecord(nanRecord)
}

// complete is called by the block that finished one draw, after its token, status and
// record are written. The last of the row's D draws to complete does the row's RECORD
// and ADVANCE work: every block of every draw has read the step and the counts by then.
func (l *launchRow) complete() {
	if l.p.flags&(FlagAdvance|FlagRecord) == 0 {
		return
	}
	if l.d > 1 {
		c := &l.counters[2*l.n*l.d+l.y]
		// The atomic increment orders this draw's writes before the finisher's reads.
		if atomicAdd(c, 1) != uint32(l.d) {
			return
		}
		atomicStore(c, 0)
	}
	if l.p.flags&FlagRecord != 0 {
		first := uint64(l.p.row) * uint64(l.d)
		for o := first; o < first+uint64(l.d); o++ {
			if int32(binary.LittleEndian.Uint32(l.status[4*o:])) != StatusOK {
				continue
			}
			tok := int32(binary.LittleEndian.Uint32(l.tokens[4*o:]))
			if tok >= 0 && int(tok) < l.vocab {
				recordToken(&l.counts[tok])
			}
		}
	}
	if l.p.flags&FlagAdvance != 0 {
		w := l.params[l.y*paramsBytes:]
		step := l.p.step + uint64(l.d)
		binary.LittleEndian.PutUint32(w[16:], uint32(step))
		binary.LittleEndian.PutUint32(w[20:], uint32(step>>32))
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

// keyFloat inverts orderKey.
func keyFloat(k uint32) float32 {
	if k>>31 != 0 {
		return math.Float32frombits(k &^ 0x80000000)
	}
	return math.Float32frombits(^k)
}

// pack is the ABI's packed (score, index) partial: the largest packed value is the
// largest score, ties to the lowest index.
func pack(score float32, index int) uint64 {
	return uint64(orderKey(score))<<32 | uint64(^uint32(index))
}
