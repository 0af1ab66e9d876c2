package gokernel

import (
	"math"
	"unsafe"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/gumbel-go/gumbel/runtime"
)

// maxScratchWords bounds n·D·S: a grid beyond it (far beyond any device's) is refused
// before any size arithmetic could overflow.
const maxScratchWords = 1 << 40

// launchRow is what one block knows about its launch row after checking the arguments.
type launchRow struct {
	p      abi.RowParams
	params []byte     // the whole params buffer: ADVANCE writes the row's step back
	shape  abi.Launch // n launch rows (grid.y), S blocks per row (grid.x), D draws (grid.z)
	y, x   int        // launch row, this block
	z      int        // this draw
	slot   uint64     // output slot of this draw: row·D + z
	vocab  int
	tokens []byte
	status []byte
	logits rowView
	proc   processor
	// logprobs is the whole logprobs buffer when the row has LOGPROBS and the buffer
	// holds all of the row's records; counts the row's V counts when it has RECORD.
	logprobs []float32
	counts   []uint32
	partials []byte
	counters []uint32
	// shard is the whole shard-key buffer and offset the global index of element 0,
	// for a FlagShard row.
	shard  []uint64
	offset int
}

// readRowParams decodes launch row y's RowParams, or reports that the buffer does not
// hold it.
func readRowParams(b []byte, y int) (abi.RowParams, bool) {
	if y < 0 || uint64(len(b))/abi.RowParamsSize <= uint64(y) {
		return abi.RowParams{}, false
	}
	return abi.DecodeRowParams(b[y*abi.RowParamsSize:]), true
}

// setup decodes the launch arguments for block b of a kernel of family. ok is false when
// the block has nothing to do: the row's slot cannot be found (fewer than abi.NumArgs
// arguments, no RowParams for this launch row), the block lies outside the kernel's grid,
// or the row is routed to the other kernel. bad is true when the row cannot be sampled
// (status 3); every block of every draw of the row reaches the same verdict, since it
// depends only on the row, the grid shape and the arguments.
func setup(b *runtime.BlockContext, d abi.DType, family string) (l launchRow, ok, bad bool) {
	return setupRecord(b, d, family, b.Block.Y)
}

// setupRecord is setup with the row's parameters read from RowParams record rec rather
// than from the launch row's own (residual: the stop of the launch row's chain).
func setupRecord(b *runtime.BlockContext, d abi.DType, family string, rec int) (l launchRow, ok, bad bool) {
	a := b.Args
	if a == nil || a.Len() < abi.NumArgs {
		return l, false, false
	}
	l.y, l.x, l.z = b.Block.Y, b.Block.X, b.Block.Z
	l.shape = abi.Launch{Rows: max(b.Grid.Y, 1), Split: max(b.Grid.X, 1), Draws: max(b.Grid.Z, 1)}
	if singleDraw(family) {
		l.shape.Draws = 1 // blocks with z > 0 have no work
	}
	n, s, dr := l.shape.Rows, l.shape.Split, l.shape.Draws
	if l.y < 0 || l.x < 0 || l.z < 0 || l.y >= n || l.x >= s || l.z >= dr || dr > abi.MaxDraws ||
		uint64(s)*uint64(n) > maxScratchWords || uint64(s)*uint64(n)*uint64(dr) > maxScratchWords {
		return l, false, false
	}
	l.params = a.HostBytesArg(int(abi.ArgParams))
	p, found := readRowParams(l.params, rec)
	if !found {
		return l, false, false
	}
	l.p = p
	if !singleDraw(family) && p.Flags&abi.FlagRouted != 0 && routedFamily(p.Flags) != rowsOf(family) {
		return l, false, false // another kernel's row: leave it entirely alone
	}
	l.slot = uint64(p.Row)*uint64(dr) + uint64(l.z)
	l.tokens = a.HostBytesArg(int(abi.ArgTokens))
	l.status = a.HostBytesArg(int(abi.ArgStatus))
	return l, true, !l.bind(a, d, family)
}

// singleDraw reports the families that draw once per row whatever grid.z (blocks with
// z > 0 have no work) and ignore LOGPROBS (score writes its records regardless), RECORD,
// ADVANCE and ROUTED.
func singleDraw(family string) bool {
	return family == abi.TopN || family == abi.Score || family == abi.Residual || family == abi.ShardSelect
}

// rowsOf is the family whose rows a kernel family serves: gumbel_exact finishes
// gumbel_argmax's.
func rowsOf(family string) string {
	if family == abi.GumbelExact {
		return abi.GumbelArgmax
	}
	return family
}

// routedFamily is the kernel family a ROUTED row belongs to (filter_max's rows are
// filtered's).
func routedFamily(f abi.Flags) string {
	switch {
	case f&abi.FlagCategorical != 0:
		return abi.Categorical
	case f&abi.FlagFiltered != 0:
		return abi.Filtered
	}
	return abi.GumbelArgmax
}

// bind checks the row's parameters and views the buffers its features use; false is
// status 3.
func (l *launchRow) bind(a *runtime.Args, d abi.DType, family string) bool {
	p := &l.p
	// One past the row's last output slot: sizes are checked for the last draw.
	lastSlot := uint64(p.Row)*uint64(l.shape.Draws) + uint64(l.shape.Draws)
	if family == abi.Score || !singleDraw(family) && p.Flags&abi.FlagLogprobs != 0 {
		// Looked at first, so that a row found bad for another reason still gets its
		// NaN records.
		l.logprobs = f32Words(a.HostBytesArg(int(abi.ArgLogprobs)), abi.RecordWords*lastSlot)
		if l.logprobs == nil {
			return false
		}
	}
	vocab := a.U32Arg(int(abi.ArgVocab))
	if p.Flags&abi.FlagShard != 0 && family != abi.GumbelExact && !l.bindShard(a, family, vocab, lastSlot) {
		return false
	}
	if p.Flags&abi.FlagsReserved != 0 || badRow(p.Temperature, vocab) {
		return false
	}
	if family == abi.TopN && (p.TopN < 1 || p.TopN > abi.MaxTopN) {
		return false
	}
	if family == abi.Score && p.Token >= vocab {
		return false
	}
	if family == abi.Residual && !goodChainRow(*p, vocab) {
		return false
	}
	l.vocab = int(vocab)
	view, good := rowOf(a.HostBytesArg(int(abi.ArgLogits)), d, a.U64Arg(int(abi.ArgRowStride)), uint64(p.Row), uint64(vocab))
	if !good {
		return false
	}
	l.logits = view
	// Logit processors: topn uses them only for Gumbel scores.
	if (family != abi.TopN || p.Flags&abi.FlagPerturbed != 0) && !l.bindProcessors(a, family, lastSlot) {
		return false
	}
	return l.bindScratch(a, family)
}

// bindShard views the shard keys of a FlagShard row (bound before the other checks, so
// that a row found bad still writes its failed key) and checks what a shard may do:
// only gumbel_argmax draws shards, at an offset that keeps Philox's groups of four
// aligned, and neither log-probability records nor token counts, which need the merged
// token, are written by a shard.
func (l *launchRow) bindShard(a *runtime.Args, family string, vocab uint32, lastSlot uint64) bool {
	switch family {
	case abi.GumbelArgmax:
		l.shard = u64Words(a.HostBytesArg(int(abi.ArgShard)), lastSlot)
	case abi.ShardSelect:
		l.shard = u64Words(a.HostBytesArg(int(abi.ArgShard)), uint64(abi.Launch{Rows: l.shape.Rows}.SelectWords()))
	default:
		return false // the other kernels write no shard keys
	}
	off := a.U32Arg(int(abi.ArgVocabOffset))
	l.offset = int(off)
	return l.shard != nil && off%4 == 0 &&
		uint64(off)+uint64(vocab) <= abi.MaxVocab && l.p.Flags&(abi.FlagLogprobs|abi.FlagRecord) == 0
}

// bindProcessors views the bias, counts, mask and bitmask rows of the row's processors,
// and the counts RECORD updates.
func (l *launchRow) bindProcessors(a *runtime.Args, family string, lastSlot uint64) bool {
	p := &l.p
	r, vocab := uint64(p.Row), uint64(l.vocab)
	if p.Flags&abi.FlagBias != 0 {
		l.proc.bias = rowSlice(f32Words(a.HostBytesArg(int(abi.ArgBias)), (r+1)*vocab), r, vocab)
		if l.proc.bias == nil {
			return false
		}
	}
	penalties := p.Flags&abi.FlagPenalties != 0
	record := !singleDraw(family) && p.Flags&abi.FlagRecord != 0
	var counts []uint32
	if penalties || record {
		counts = rowSlice(u32Words(a.HostBytesArg(int(abi.ArgCounts)), (r+1)*vocab), r, vocab)
		if counts == nil {
			return false
		}
	}
	if penalties {
		l.proc.counts = counts
		l.proc.repetition, l.proc.frequency, l.proc.presence = p.RepetitionPenalty, p.FrequencyPenalty, p.PresencePenalty
	}
	if record {
		l.counts = counts
		// The finishing draw reads every draw's token and status back.
		if uint64(len(l.tokens))/4 < lastSlot || uint64(len(l.status))/4 < lastSlot {
			return false
		}
	}
	if p.Flags&abi.FlagMask != 0 {
		w := (vocab + 31) / 32
		l.proc.mask = rowSlice(u32Words(a.HostBytesArg(int(abi.ArgMask)), (r+1)*w), r, w)
		if l.proc.mask == nil {
			return false
		}
	}
	if p.Flags&abi.FlagBitmask != 0 {
		w, m := (vocab+31)/32, uint64(p.BitmaskRow)
		l.proc.bitmask = rowSlice(u32Words(a.HostBytesArg(int(abi.ArgBitmask)), (m+1)*w), m, w)
		if l.proc.bitmask == nil {
			return false
		}
	}
	l.proc.active = l.proc.bias != nil || l.proc.counts != nil || l.proc.mask != nil || l.proc.bitmask != nil
	return true
}

// bindScratch views the partials and counters the row's blocks use, sized for the row's
// last draw so that every draw agrees.
func (l *launchRow) bindScratch(a *runtime.Args, family string) bool {
	sh, y, last := l.shape, l.y, l.shape.Draws-1
	var counters, partials int // words needed: one past the last one the row touches
	if sh.Split > 1 {
		switch family {
		case abi.GumbelArgmax:
			counters = sh.DrawCounter(y, last) + 2
			partials = sh.KeyWord(y, last, sh.Split-1) + 1
			if l.p.Flags&abi.FlagLogprobs != 0 {
				partials = sh.PairWord(y, last, sh.Split-1, 1) + 1
			}
		case abi.TopN:
			counters = sh.DrawCounter(y, 0) + 2
			partials = sh.TopNWord(y, sh.Split-1, abi.TopNStride-1) + 1
		case abi.Filtered:
			counters = sh.DrawCounter(y, last) + 2
		case abi.Score:
			counters = sh.DrawCounter(y, 0) + 2
			partials = sh.ScoreWord(y, sh.Split-1, abi.ScoreStride-1) + 1
		case abi.Residual:
			counters = sh.DrawCounter(y, 0) + 2
			partials = sh.ResidualWord(y, sh.Split-1, abi.ResidualStride-1) + 1
		}
	}
	if family == abi.Filtered {
		// Its blocks publish their words even alone (S = 1).
		partials = sh.FilterWord(y, last, sh.Split-1, sh.FilterStride()-1) + 1
	}
	if !singleDraw(family) && family != abi.GumbelExact && sh.Draws > 1 && l.p.Flags&(abi.FlagAdvance|abi.FlagRecord) != 0 {
		counters = max(counters, sh.RowCounter(y)+1)
	}
	if counters > 0 {
		if l.counters = u32Words(a.HostBytesArg(int(abi.ArgCounters)), uint64(counters)); l.counters == nil {
			return false
		}
	}
	if partials > 0 {
		b := a.HostBytesArg(int(abi.ArgPartials))
		if uint64(len(b))/8 < uint64(partials) {
			return false
		}
		l.partials = b
	}
	return true
}

// chunk is this block's contiguous part [start, end) of the row: a multiple of four
// elements long, so that each Philox block is computed by one block only.
func (l *launchRow) chunk() (start, end int) {
	s := l.shape.Split
	n := ((l.vocab+s-1)/s + 3) &^ 3
	start = min(l.x*n, l.vocab)
	return start, min(start+n, l.vocab)
}

// u32Words views b as uint32 when it is 4-byte aligned and holds at least need words;
// otherwise nil. The view covers all of b's whole words.
func u32Words(b []byte, need uint64) []uint32 {
	if need == 0 || uint64(len(b))/4 < need || uintptr(unsafe.Pointer(unsafe.SliceData(b)))%4 != 0 {
		return nil
	}
	return unsafe.Slice((*uint32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4)
}

// u64Words is u32Words for uint64.
func u64Words(b []byte, need uint64) []uint64 {
	if need == 0 || uint64(len(b))/8 < need || uintptr(unsafe.Pointer(unsafe.SliceData(b)))%8 != 0 {
		return nil
	}
	return unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/8)
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
func rowOf(b []byte, d abi.DType, stride, r, vocab uint64) (rowView, bool) {
	es := uint64(d.Size())
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
	if d == abi.F32 {
		v.f = unsafe.Slice((*float32)(p), int(vocab))
	} else {
		v.u16 = unsafe.Slice((*uint16)(p), int(vocab))
	}
	return v, true
}
