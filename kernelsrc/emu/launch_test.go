package emu

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/half"
	"github.com/gumbel-go/gumbel/kernelsrc"
	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/runtime/cpu"
)

// This file describes launches of the sampling kernels and runs them through the Go
// edition, the reference that the emulated (emu_test.go) and real-GPU (gpu_test.go) runs
// of the CUDA edition must match.

// Kernel and dtype numbers of the job file (testdata/emu_driver.cpp).
const (
	kernelGumbel      = 0
	kernelCategorical = 1
	kernelTopN        = 2
	kernelFiltered    = 3 // filter_max, then filtered on the same buffers
	kernelScore       = 4
	kernelResidual    = 5
	kernelShardSelect = 6

	dtF32  = 0
	dtF16  = 1
	dtBF16 = 2

	jobMagic    = 0x38454247 // "GBE8"
	paramsBytes = 64
	untouched   = -7 // what the driver and the Go run put in every slot beforehand
	// untouchedKey is what they put in every shard key slot beforehand.
	untouchedKey = 0xA5A5A5A5A5A5A5A5
	maxTopN      = 20 // the topn kernels' output stride
	topnStride   = 22 // uint64 partials per topn block
)

// kernelNames are the kernel families; the filtered route launches filter_max first.
var kernelNames = [7]string{abi.GumbelArgmax, abi.Categorical, abi.TopN, abi.Filtered, abi.Score, abi.Residual, abi.ShardSelect}

type rowParams = abi.RowParams

// launch is one kernel launch, run by the emulated CUDA edition and by the Go edition.
type launch struct {
	name   string
	kernel int
	dtype  int
	gridX  int
	gridZ  int // draws per row; 0 reads as 1
	// gridY is the launch rows (grid.y) where they are not one per RowParams record
	// (residual: a launch row per chain); 0 reads as len(params).
	gridY  int
	block  int
	warp   int // the emulated warp size: 32 (NVIDIA, RDNA) or 64 (CDNA)
	vocab  int
	stride int
	slack  int // bytes between the logits' end and the guard page (varies alignment)
	slots  int // logits rows, token and status slots
	logits []byte
	params []rowParams
	// Feature buffers, one entry per logits row and element (mask: per 32 elements);
	// nil passes an 8-byte buffer, as ABI.md allows when no row uses the feature.
	bias   []float32
	counts []uint32
	mask   []uint32
	// bitmask is the token bitmasks of kernel argument 12: ceil(V/32) words per mask row,
	// as many mask rows as the launch likes (not one per logits row); nil passes 8 bytes.
	bitmask  []uint32
	logprobs bool // pass a logprobs buffer (score needs one: its records go there)
	// vocabOffset is kernel argument 13 and shard passes the shard keys (argument 14),
	// one per output slot; without it, 8 bytes. selectWords, when set, is what argument 14
	// holds before a shard_select launch instead: its queries, histograms and key words.
	vocabOffset int
	shard       bool
	selectWords []uint64
	// draft is kernel argument 15, the draft probabilities residual reads (V per draft
	// row); nil passes 8 bytes. records, when set, is what the logprobs buffer holds
	// before the launch (residual reads score's records there), in place of untouched.
	draft, records []float32
	// The filtered route's candidate lists in the emulation (GB_FILTER_LIST and
	// GB_FILTER_MIN_CANDS, testdata/shadow/abi.h); 0 is the ABI's.
	filterList, filterMinCands int
}

// outcome is what a launch leaves behind.
type outcome struct {
	tokens, status []int32   // topn: status holds the values' bits; score: tokens the ranks
	logprobs       []float32 // records, when the launch passes a logprobs buffer
	keys           []uint64  // shard keys, when the launch passes them (shard_select: its whole shard argument)
	counters       []uint32
	counts         []uint32 // the counts buffer afterwards (RECORD)
	params         []byte   // the params buffer afterwards (ADVANCE)
	// paths is what the emulated filtered kernel's last block did for draw z of launch
	// row y, at z·n + y: pathNone, pathList or pathRow (emulation only).
	paths []uint32
	// partials is the filtered launch's partials buffer afterwards: filter_max's words,
	// then each block's published candidates and meta words (ABI.md, "filtered";
	// emulation only).
	partials []uint64
	// passes is what the emulated topn kernel's blocks did for launch row y: at 4y the
	// passes over their chunks beyond the first (summed over the blocks), at 4y + 1 the
	// last block's passes over the published lists beyond the first, at 4y + 2 and 4y + 3
	// the thresholded selections that placed a chunk's and the published lists' top N
	// (emulation only).
	passes []uint32
}

// The filtered kernel's ways to a draw, as the emulation driver reports them.
const (
	pathNone = 0 // no list decision: greedy, min-p alone, bad, skipped or non-finite rows
	pathList = 1 // drawn on the published candidates
	pathRow  = 2 // the one-block path over the row
)

func (l *launch) elemSize() int {
	if l.dtype == dtF32 {
		return 4
	}
	return 2
}

// draws is grid.z.
func (l *launch) draws() int { return max(l.gridZ, 1) }

// launchRows is grid.y: gridY, or a launch row per RowParams record.
func (l *launch) launchRows() int {
	if l.gridY != 0 {
		return l.gridY
	}
	return len(l.params)
}

// slotDraws is the output slots per logits row of the sampling kernels, score, residual
// and shard_select: grid.z, but one for score, residual and shard_select, which draw once
// whatever the grid.
func (l *launch) slotDraws() int {
	if l.kernel == kernelScore || l.kernel == kernelResidual || l.kernel == kernelShardSelect {
		return 1
	}
	return l.draws()
}

// outSlots is the number of token (and status) slots of the launch.
func (l *launch) outSlots() int {
	if l.kernel == kernelTopN {
		return l.slots * maxTopN
	}
	return l.slots * l.slotDraws()
}

// shape is the launch's grid as package abi sizes scratch by.
func (l *launch) shape() abi.Launch {
	return abi.Launch{Rows: l.launchRows(), Split: l.gridX, Draws: l.draws()}
}

// numCounters and numPartials are the scratch sizes of ABI.md.
func (l *launch) numCounters() int {
	n := l.launchRows()
	switch l.kernel {
	case kernelTopN:
		return 2 * n
	case kernelScore:
		return l.shape().CountersWords(abi.Score)
	case kernelResidual:
		return l.shape().CountersWords(abi.Residual)
	case kernelShardSelect:
		return l.shape().CountersWords(abi.ShardSelect)
	}
	return 2*n*l.draws() + n
}

func (l *launch) numPartials() int {
	n := l.launchRows()
	switch l.kernel {
	case kernelTopN:
		return topnStride * n * l.gridX
	case kernelFiltered:
		return l.shape().PartialsWords(abi.Filtered)
	case kernelScore:
		return l.shape().PartialsWords(abi.Score)
	case kernelResidual:
		return l.shape().PartialsWords(abi.Residual)
	case kernelShardSelect:
		return l.shape().PartialsWords(abi.ShardSelect)
	}
	return 4 * n * l.draws() * l.gridX
}

// filterLists is the candidate-list sizes the emulation runs the launch with.
func (l *launch) filterLists() (list, minCands int) {
	list, minCands = abi.FilterList, abi.FilterMinCands
	if l.filterList != 0 || l.filterMinCands != 0 {
		list, minCands = l.filterList, l.filterMinCands
	}
	return list, minCands
}

// driverPartials is numPartials for the emulation's candidate lists: ABI.md's layout with
// C = max(minCands, list/S).
func (l *launch) driverPartials() int {
	if l.kernel != kernelFiltered {
		return l.numPartials()
	}
	list, minCands := l.filterLists()
	n, s := l.launchRows(), l.gridX
	return n*s + n*l.draws()*s*(max(minCands, list/s)+abi.FilterMeta)
}

func (l *launch) paramBytes() []byte {
	b := make([]byte, len(l.params)*abi.RowParamsSize)
	for y := range l.params {
		l.params[y].Encode(b[y*abi.RowParamsSize:])
	}
	return b
}

// auxBuffer is a feature buffer's bytes, or 8 bytes when the launch has none.
func auxBuffer[T uint32 | float32](s []T) []byte {
	if len(s) == 0 {
		return make([]byte, 8)
	}
	return append([]byte(nil), runtime.BytesOf(s)...)
}

// newOutcome is an outcome whose slots hold untouched beforehand, and its logprobs the
// launch's records (else untouched).
func (l *launch) newOutcome() outcome {
	o := outcome{
		tokens:   make([]int32, l.outSlots()),
		status:   make([]int32, l.outSlots()),
		counters: make([]uint32, l.numCounters()),
	}
	for i := range o.tokens {
		o.tokens[i], o.status[i] = untouched, untouched
	}
	if l.logprobs && l.kernel != kernelTopN {
		o.logprobs = make([]float32, 4*l.outSlots())
		for i := range o.logprobs {
			o.logprobs[i] = untouched
		}
		copy(o.logprobs, l.records)
	}
	if l.selectWords != nil {
		o.keys = slices.Clone(l.selectWords)
	} else if l.shard && l.kernel != kernelTopN {
		o.keys = make([]uint64, l.outSlots())
		for i := range o.keys {
			o.keys[i] = untouchedKey
		}
	}
	return o
}

// runGo runs the launch through the Go edition on the CPU device.
func runGo(t *testing.T, dev runtime.Device, mod runtime.Module, l *launch) outcome {
	t.Helper()
	k, err := mod.Kernel(kernelNames[l.kernel] + abi.Suffixes[l.dtype])
	require.NoError(t, err)
	n := l.launchRows()
	o := l.newOutcome()
	partials := make([]uint64, max(l.numPartials(), 1)) // shard_select uses none: 8 bytes
	logits := append([]byte(nil), l.logits...)
	params := l.paramBytes()
	logprobs := make([]byte, 8)
	if o.logprobs != nil {
		logprobs = runtime.BytesOf(o.logprobs)
	}
	counts := auxBuffer(l.counts)
	keys := make([]byte, 8)
	if o.keys != nil {
		keys = runtime.BytesOf(o.keys)
	}
	counters := runtime.BytesOf(o.counters)
	if counters == nil {
		counters = make([]byte, 8) // shard_select uses none
	}
	var a runtime.Args
	a.Buffer(cpu.Wrap(logits)).
		Buffer(cpu.Wrap(params)).
		Buffer(cpu.Wrap(runtime.BytesOf(o.tokens))).
		Buffer(cpu.Wrap(runtime.BytesOf(o.status))).
		Buffer(cpu.Wrap(runtime.BytesOf(partials))).
		Buffer(cpu.Wrap(counters)).
		U64(uint64(l.stride)).
		U32(uint32(l.vocab)).
		Buffer(cpu.Wrap(logprobs)).
		Buffer(cpu.Wrap(auxBuffer(l.bias))).
		Buffer(cpu.Wrap(counts)).
		Buffer(cpu.Wrap(auxBuffer(l.mask))).
		Buffer(cpu.Wrap(auxBuffer(l.bitmask))).
		U32(uint32(l.vocabOffset)).
		Buffer(cpu.Wrap(keys)).
		Buffer(cpu.Wrap(auxBuffer(l.draft)))
	s := dev.DefaultStream()
	grid := runtime.Dim3{X: l.gridX, Y: n, Z: l.draws()}
	if l.kernel == kernelFiltered {
		fm, err := mod.Kernel(abi.FilterMax + abi.Suffixes[l.dtype])
		require.NoError(t, err)
		require.NoError(t, s.Launch(fm, runtime.Dim3{X: l.gridX, Y: n, Z: 1}, runtime.Dim3{X: l.block, Y: 1, Z: 1}, &a))
	}
	require.NoError(t, s.Launch(k, grid, runtime.Dim3{X: l.block, Y: 1, Z: 1}, &a))
	require.NoError(t, s.Synchronize())
	if l.kernel == kernelGumbel && slices.Contains(o.status, int32(abi.StatusExact)) {
		// As the sampler (and the driver) do: gumbel_exact finishes the draws left with
		// status 5.
		ek, err := mod.Kernel(abi.KernelName(abi.GumbelExact, abi.DType(l.dtype)))
		require.NoError(t, err)
		grid.X = 1
		require.NoError(t, s.Launch(ek, grid, runtime.Dim3{X: l.block, Y: 1, Z: 1}, &a))
		require.NoError(t, s.Synchronize())
	}
	if l.kernel != kernelTopN {
		if len(l.counts) > 0 {
			o.counts = make([]uint32, len(l.counts))
			copy(runtime.BytesOf(o.counts), counts)
		}
		o.params = params
	}
	return o
}

// compareWithGo runs every launch through the Go edition on the CPU device and requires
// got (what another edition left) to match it: tokens, statuses, untouched slots and
// zeroed counters. It also requires that every status and every sampling path occurred,
// so that the comparison cannot pass by testing nothing.
func compareWithGo(t *testing.T, what string, ls []*launch, got []outcome) {
	t.Helper()
	seen, kinds := matchGo(t, ls, got)
	// The comparison means something only if every outcome and every path occurred.
	t.Logf("%s: %d launches; rows by status (ok, NaN/+Inf, no finite, bad params): %v; sampled rows by path: %v",
		what, len(ls), seen, kinds)
	for s, n := range seen {
		require.Positive(t, n, "no row ended with status %d", s)
	}
	require.GreaterOrEqual(t, 2*seen[0], seen[0]+seen[1]+seen[2]+seen[3], "fewer than half the rows sampled a token")
	for _, k := range []string{"greedy", "gumbel split", "gumbel", "categorical", "top-k", "top-p", "min-p", "top-k+top-p+min-p"} {
		require.Positive(t, kinds[k], "no row sampled a token on the %s path", k)
	}
}

// goEdition runs every launch through the Go edition on the CPU device.
func goEdition(t *testing.T, ls []*launch) []outcome {
	t.Helper()
	dev, err := cpu.Open()
	require.NoError(t, err)
	defer dev.Close()
	mod, err := dev.Load(kernelsrc.Sampling())
	require.NoError(t, err)
	defer mod.Close()
	want := make([]outcome, len(ls))
	for i, l := range ls {
		want[i] = runGo(t, dev, mod, l)
	}
	return want
}

// matchGo runs every launch through the Go edition (goEdition) and asserts that got
// matches it (matchOutcomes).
func matchGo(t *testing.T, ls []*launch, got []outcome) (seen [4]int, kinds map[string]int) {
	t.Helper()
	return matchOutcomes(t, ls, goEdition(t, ls), got)
}

// matchOutcomes asserts that got matches the Go edition's outcomes wants: tokens (score:
// ranks) and statuses exactly (untouched slots included), log-probability records and
// topn values within recordTolerance, counts and params (RECORD, ADVANCE) exactly, and
// zeroed counters; and that the Go edition drew no token its row's mask or bitmask masks
// (requireAllowedTokens). It returns the Go edition's output slots by status and its
// sampled slots by path (score: "score").
func matchOutcomes(t *testing.T, ls []*launch, wants, got []outcome) (seen [4]int, kinds map[string]int) {
	t.Helper()
	kinds = map[string]int{}
	for i, l := range ls {
		want := wants[i]
		if l.kernel == kernelTopN {
			matchTopN(t, l, want, got[i], kinds)
			continue
		}
		d := l.slotDraws()
		for y, p := range l.params {
			for z := range d {
				o := int(p.Row)*d + z
				assert.Equal(t, want.status[o], got[i].status[o],
					"%s: launch row %d draw %d (slot %d, %+v): status", l.name, y, z, o, p)
				assert.Equal(t, want.tokens[o], got[i].tokens[o],
					"%s: launch row %d draw %d (slot %d, %+v): token", l.name, y, z, o, p)
				if st := want.status[o]; st >= 0 && int(st) < len(seen) {
					seen[st]++
					if st == 0 {
						kinds[rowKind(l, p)]++
					}
				}
			}
		}
		assert.Equal(t, want.tokens, got[i].tokens, "%s: tokens (unnamed slots untouched)", l.name)
		assert.Equal(t, want.status, got[i].status, "%s: status", l.name)
		wantLP, gotLP := matchDescriptors(t, l, want, got[i])
		matchRecords(t, l.name+": logprobs", wantLP, gotLP, 4)
		matchKeys(t, l.name, want.keys, got[i].keys)
		assert.Equal(t, make([]uint32, l.numCounters()), got[i].counters, "%s: counters left non-zero", l.name)
		assert.Equal(t, want.counts, got[i].counts, "%s: counts after RECORD", l.name)
		assert.Equal(t, want.params, got[i].params, "%s: params after ADVANCE", l.name)
	}
	requireAllowedTokens(t, ls, wants)
	return seen, kinds
}

// matchDescriptors requires the kept-set descriptors of l's status-0 FlagKeptSet slots
// to match the Go edition's: the threshold bit for bit, m exactly, the two logarithms within
// recordTolerance of their own magnitudes. It returns the logprobs of both outcomes with
// those slots cleared, for matchRecords to compare the rest.
func matchDescriptors(t *testing.T, l *launch, want, got outcome) (wantLP, gotLP []float32) {
	t.Helper()
	wantLP, gotLP = slices.Clone(want.logprobs), slices.Clone(got.logprobs)
	if l.kernel != kernelFiltered && l.kernel != kernelCategorical {
		return wantLP, gotLP
	}
	d := l.slotDraws()
	for y, p := range l.params {
		if p.Flags&abi.FlagKeptSet == 0 || p.Flags&abi.FlagLogprobs == 0 || p.Temperature == 0 {
			continue
		}
		for z := range d {
			o := int(p.Row)*d + z
			if want.status[o] != int32(abi.StatusOK) || 4*o+4 > len(wantLP) {
				continue
			}
			w, g := wantLP[4*o:4*o+4], gotLP[4*o:4*o+4]
			what := fmt.Sprintf("%s: launch row %d draw %d (%+v): kept-set descriptor %v, want %v", l.name, y, z, p, g, w)
			assert.Equal(t, math.Float32bits(w[0]), math.Float32bits(g[0]), "%s: threshold", what)
			assert.True(t, w[2] == g[2], "%s: m", what) // +0 and -0 weigh alike
			for _, k := range []int{1, 3} {
				if w[k] != w[k] || math.IsInf(float64(w[k]), 0) {
					assert.Equal(t, fmt.Sprint(w[k]), fmt.Sprint(g[k]), "%s: word %d", what, k)
				} else {
					assert.InDelta(t, w[k], g[k], recordTolerance(w[k]), "%s: word %d", what, k)
				}
			}
			clear(w)
			clear(g)
		}
	}
	return wantLP, gotLP
}

// matchKeys requires shard keys to name the Go edition's token and status, with the
// score in the high word within a few float32 steps of the Go edition's: the winner's
// noise comes from the device's logf and log1pf, which may differ from Go's in the last
// place (ABI.md, "Numerics"), as the records may. The emulation matches exactly.
func matchKeys(t *testing.T, what string, want, got []uint64) {
	t.Helper()
	if !assert.Len(t, got, len(want), "%s: shard keys", what) {
		return
	}
	for o, w := range want {
		g := got[o]
		wt, ws := abi.ShardResult(w)
		gt, gs := abi.ShardResult(g)
		near := int64(w>>32)-int64(g>>32) <= 4 && int64(g>>32)-int64(w>>32) <= 4
		if w == untouchedKey || ws != abi.StatusOK {
			near = w == g
		}
		assert.True(t, wt == gt && ws == gs && near, "%s: shard key of slot %d: got %#x, want %#x", what, o, g, w)
	}
}

// recordTolerance is how far a log-probability word may lie from the Go edition's:
// 1e-5 relative to the record's own magnitudes (the log-sum-exps are float32 sums of
// fast exponentials on the GPU, float64 sums in Go).
func recordTolerance(words ...float32) float64 {
	m := 1.0
	for _, w := range words {
		if a := math.Abs(float64(w)); a > m && !math.IsInf(a, 0) {
			m = a
		}
	}
	return 1e-5 * m
}

// matchRecords compares float32 words group by group (a record of 4 words, or one topn
// value): NaN, infinities and the untouched marker exactly, other values within
// recordTolerance of the group's words.
func matchRecords(t *testing.T, what string, want, got []float32, group int) {
	t.Helper()
	require.Len(t, got, len(want), "%s", what)
	for g := 0; g < len(want); g += group {
		w, h := want[g:g+group], got[g:g+group]
		tol := recordTolerance(w...)
		for k := range w {
			switch {
			case w[k] != w[k]:
				assert.True(t, h[k] != h[k], "%s: word %d is %v, want NaN", what, g+k, h[k])
			case math.IsInf(float64(w[k]), 0) || w[k] == untouched:
				assert.Equal(t, w[k], h[k], "%s: word %d", what, g+k)
			default:
				assert.InDelta(t, w[k], h[k], tol, "%s: word %d (record %v, want %v)", what, g+k, h, w)
			}
		}
	}
}

// matchTopN compares a topn launch: tokens exactly, values as records of one word.
func matchTopN(t *testing.T, l *launch, want, got outcome, kinds map[string]int) {
	t.Helper()
	assert.Equal(t, want.tokens, got.tokens, "%s: topn tokens", l.name)
	values := func(bits []int32) []float32 {
		v := make([]float32, len(bits))
		for i, b := range bits {
			if b == untouched {
				v[i] = untouched
			} else {
				v[i] = math.Float32frombits(uint32(b))
			}
		}
		return v
	}
	matchRecords(t, l.name+": topn values", values(want.status), values(got.status), 1)
	assert.Equal(t, make([]uint32, l.numCounters()), got.counters, "%s: counters left non-zero", l.name)
	for _, p := range l.params {
		for j := range maxTopN {
			if want.tokens[int(p.Row)*maxTopN+j] >= 0 {
				if p.Flags&abi.FlagPerturbed != 0 {
					kinds["topn perturbed"]++
				} else {
					kinds["topn"]++
				}
			}
		}
	}
}

// rowKind names the path a sampled row took, for the coverage check.
func rowKind(l *launch, p rowParams) string {
	switch l.kernel {
	case kernelScore:
		return "score"
	case kernelResidual:
		return "residual"
	}
	if p.Temperature == 0 {
		return "greedy"
	}
	if l.kernel == kernelGumbel {
		if l.gridX > 1 {
			return "gumbel split"
		}
		return "gumbel"
	}
	k := p.TopK > 0 && int(p.TopK) < l.vocab
	tp := p.TopP > 0 && p.TopP < 1
	mp := p.MinP > 0
	switch {
	case k && tp && mp:
		return "top-k+top-p+min-p"
	case k && !tp && !mp:
		return "top-k"
	case tp && !k && !mp:
		return "top-p"
	case mp && !k && !tp:
		return "min-p"
	case !k && !tp && !mp:
		return "categorical"
	}
	return "combined filters"
}

// Row shapes: the float32 values a row should hold before it is stored in its dtype.

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

// tiedRow has few distinct values: top-k and top-p meet ties at their bounds, and the
// greedy and Gumbel winners meet equal scores.
func tiedRow(r *rand.Rand, v int) []float32 {
	row := make([]float32, v)
	for i := range row {
		row[i] = float32(r.IntN(5) - 2)
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

// farRow has one dominant logit, so that most noise is skipped and some elements sit
// right at the skip bounds.
func farRow(r *rand.Rand, v int) []float32 {
	row := make([]float32, v)
	for i := range row {
		row[i] = -60 * r.Float32()
	}
	row[r.IntN(v)] = 0
	return row
}

// hugeRow holds magnitudes whose scaled values overflow at small temperatures.
func hugeRow(r *rand.Rand, v int) []float32 {
	row := llmRow(r, v)
	for range 1 + r.IntN(3) {
		row[r.IntN(v)] = float32(math.Copysign(3e38, r.Float64()-0.7))
	}
	return row
}

// soleRow has one or two equal finite logits among -Inf.
func soleRow(r *rand.Rand, v int) []float32 {
	row := negInfRow(r, v)
	row[r.IntN(v)] = 1
	row[r.IntN(v)] = 1
	return row
}

// tinyRow holds subnormal values of every dtype (f16 subnormals below 6.1e-5).
func tinyRow(r *rand.Rand, v int) []float32 {
	row := make([]float32, v)
	for i := range row {
		row[i] = float32(math.Ldexp(r.Float64()-0.3, -14-r.IntN(130)))
	}
	return row
}

// zeroRow's largest logits are zeros of both signs, which tie (ABI.md's order key).
func zeroRow(r *rand.Rand, v int) []float32 {
	row := make([]float32, v)
	for i := range row {
		row[i] = -1 - r.Float32()
	}
	for range 1 + r.IntN(4) {
		row[r.IntN(v)] = float32(math.Copysign(0, r.Float64()-0.5))
	}
	return row
}

func negInfRow(_ *rand.Rand, v int) []float32 {
	row := make([]float32, v)
	for i := range row {
		row[i] = float32(math.Inf(-1))
	}
	return row
}

func nanRow(r *rand.Rand, v int) []float32 {
	row := llmRow(r, v)
	row[r.IntN(v)] = float32(math.NaN())
	return row
}

func posInfRow(r *rand.Rand, v int) []float32 {
	row := maskedRow(r, v)
	row[r.IntN(v)] = float32(math.Inf(1))
	return row
}

// rowShapes is weighted towards rows that sample a token.
var rowShapes = []func(*rand.Rand, int) []float32{
	llmRow, llmRow, llmRow, tiedRow, tiedRow, maskedRow, farRow, hugeRow, soleRow, tinyRow, tinyRow,
	zeroRow, negInfRow, nanRow, posInfRow,
}

// store writes v in the launch's dtype at element i.
func (l *launch) store(i int, v float32) {
	b := l.logits[i*l.elemSize():]
	switch l.dtype {
	case dtF16:
		binary.LittleEndian.PutUint16(b, half.Float16(v))
	case dtBF16:
		binary.LittleEndian.PutUint16(b, half.BFloat16(v))
	default:
		binary.LittleEndian.PutUint32(b, math.Float32bits(v))
	}
}

// fill lays out slots random rows; the last row ends the buffer (no stride padding), so
// the guard page right after it catches reads past the vocabulary.
func (l *launch) fill(r *rand.Rand) {
	if l.vocab == 0 {
		l.logits = make([]byte, l.elemSize())
		return
	}
	n := (l.slots-1)*l.stride + l.vocab
	l.logits = make([]byte, n*l.elemSize())
	for i := range n {
		l.store(i, float32(math.NaN())) // stride padding: never read
	}
	for s := range l.slots {
		row := rowShapes[r.IntN(len(rowShapes))](r, l.vocab)
		for i, v := range row {
			l.store(s*l.stride+i, v)
		}
	}
}

var (
	temperatures    = []float32{0, 0.25, 0.7, 1, 1.8}
	badTemperatures = []float32{-1, float32(math.NaN()), float32(math.Inf(1)), 1e-40}
)

func temperature(r *rand.Rand) float32 {
	if r.IntN(12) == 0 {
		return badTemperatures[r.IntN(len(badTemperatures))]
	}
	return temperatures[r.IntN(len(temperatures))]
}

// rows names slots-1 of the slots in a random order: one slot stays untouched.
func (l *launch) rows(r *rand.Rand, fill func(p *rowParams)) {
	perm := r.Perm(l.slots)[:l.slots-1]
	l.params = make([]rowParams, len(perm))
	for y, s := range perm {
		p := rowParams{Row: uint32(s), Temperature: temperature(r), Seed: r.Uint64(), Step: r.Uint64() >> r.IntN(64)}
		if fill != nil {
			fill(&p)
		}
		l.params[y] = p
	}
}

// shaper picks the block size and the (emulated) warp size of a launch with the given
// number of blocks per row.
type shaper func(r *rand.Rand, blocks int) (block, warp int)

// emuShape is the emulation's shaper. Every emulated CUDA thread is an OS thread and each
// barrier phase wakes all of them, so most launches use narrow warps (8 and 16 lanes:
// the kernels take any power-of-two warp size) with two or more warps per block; some use
// the real widths, 32 (NVIDIA, RDNA) and 64 (CDNA), and a block that is not a power of two.
func emuShape(r *rand.Rand, blocks int) (block, warp int) {
	if blocks > 4 {
		return 16, 8 // many blocks per row: keep each one cheap
	}
	switch r.IntN(10) {
	case 0:
		return 128, 64
	case 1:
		return 96, 32
	case 2:
		return 64, 32
	case 3, 4:
		return 32, 16
	case 5:
		return 24, 8
	default:
		return 16, 8
	}
}

func stride(r *rand.Rand, vocab int) int {
	return vocab + []int{0, 0, 1, 3, 8}[r.IntN(5)]
}

// pick returns one element of each group: every launch shape meets a tiny, a small and a
// larger vocabulary (4099: not a multiple of 4, and more chunks than a block has threads).
func pick(r *rand.Rand, groups ...[]int) []int {
	out := make([]int, len(groups))
	for i, g := range groups {
		out[i] = g[r.IntN(len(g))]
	}
	return out
}

var (
	tinyVocabs  = []int{1, 2, 3, 5}
	smallVocabs = []int{37, 130, 255}
	largeVocabs = []int{1001, 4099}
)

// testLaunches is the comparison's workload: every kernel and dtype, split and not,
// tiny to mid-sized vocabularies, odd strides and alignments, every row shape and filter,
// bad parameters, and a few fixed cases (full-width blocks, signed zeros, vocab 0).
func testLaunches(r *rand.Rand, shape shaper) []*launch {
	var ls []*launch
	add := func(l *launch) {
		l.fill(r)
		ls = append(ls, l)
	}
	topKs := func(v int) []uint32 { return []uint32{0, 0, 0, 1, 2, 5, uint32(max(v-1, 0)), uint32(v), uint32(v + 3)} }
	topPs := []float32{0, 0, 0, 0.05, 0.5, 0.9, 0.999, 1}
	minPs := []float32{0, 0, 0, 0.02, 0.3, 1}
	for dt := range 3 {
		for _, s := range []int{1, 3, 16} {
			for _, v := range pick(r, tinyVocabs, smallVocabs, largeVocabs) {
				block, warp := shape(r, s)
				l := &launch{kernel: kernelGumbel, dtype: dt, gridX: s, block: block, warp: warp,
					vocab: v, stride: stride(r, v), slack: r.IntN(16), slots: 3 + r.IntN(3)}
				l.name = fmt.Sprintf("gumbel dtype=%d S=%d V=%d stride=%d T=%d warp=%d", dt, s, v, l.stride, block, warp)
				l.rows(r, nil)
				add(l)
			}
		}
		for _, v := range append(pick(r, tinyVocabs, tinyVocabs, smallVocabs, smallVocabs), largeVocabs...) {
			block, warp := shape(r, 1)
			l := &launch{kernel: kernelCategorical, dtype: dt, gridX: 1, block: block, warp: warp,
				vocab: v, stride: stride(r, v), slack: r.IntN(16), slots: 4 + r.IntN(3)}
			l.name = fmt.Sprintf("categorical dtype=%d V=%d stride=%d T=%d warp=%d", dt, v, l.stride, block, warp)
			ks := topKs(v)
			l.rows(r, func(p *rowParams) {
				p.TopK = ks[r.IntN(len(ks))]
				p.TopP = topPs[r.IntN(len(topPs))]
				p.MinP = minPs[r.IntN(len(minPs))]
			})
			add(l)
		}
	}
	// Full-width blocks (1024 threads: slow to emulate, so one launch per kernel); a grid wider than one block per row for categorical (the extra blocks must
	// do nothing); vocab 0.
	l := &launch{kernel: kernelGumbel, dtype: dtF32, gridX: 1, block: 1024, warp: 32, vocab: 6007,
		stride: 6008, slots: 2}
	l.name = "gumbel dtype=0 S=1 V=6007 T=1024"
	l.rows(r, func(p *rowParams) { p.Temperature = 1 })
	add(l)
	l = &launch{kernel: kernelCategorical, dtype: dtF16, gridX: 1, block: 1024, warp: 32, vocab: 3001,
		stride: 3001, slots: 2}
	l.name = "categorical dtype=1 V=3001 T=1024"
	l.rows(r, func(p *rowParams) { p.Temperature, p.TopK, p.TopP, p.MinP = 1, 40, 0.9, 0.01 })
	add(l)
	// More chunks than the draw has tiles (GB_MAX_TILES): tiles of two chunks.
	l = &launch{kernel: kernelCategorical, dtype: dtF32, gridX: 1, block: 16, warp: 8, vocab: 20011, stride: 20011, slots: 5}
	l.name = "categorical V=20011 T=16"
	filters := [][3]float32{{0, 0, 0}, {7, 0, 0}, {0, 0.7, 0}, {0, 0, 0.05}}
	l.rows(r, func(p *rowParams) {
		f := filters[r.IntN(len(filters))]
		p.Temperature, p.TopK, p.TopP, p.MinP = 0.9, uint32(f[0]), f[1], f[2]
	})
	add(l)
	l = &launch{kernel: kernelCategorical, dtype: dtF32, gridX: 3, block: 64, warp: 32, vocab: 300, stride: 301, slots: 4}
	l.name = "categorical grid.x=3"
	l.rows(r, func(p *rowParams) { p.TopP = 0.8 })
	add(l)
	// Rows whose largest logits are -0 then +0 (equal: the lowest index wins), in one
	// block and split.
	for _, s := range []int{1, 2} {
		l = &launch{kernel: kernelGumbel, dtype: dtF32, gridX: s, block: 16, warp: 8, vocab: 8, stride: 8, slots: 2}
		l.name = fmt.Sprintf("gumbel signed zeros S=%d", s)
		l.logits = make([]byte, 2*8*4)
		for i, v := range []float32{-1, float32(math.Copysign(0, -1)), -2, -3, -1, 0, -1, -2} {
			l.store(i, v)
			l.store(8+i, v)
		}
		l.params = []rowParams{{Row: 0}, {Row: 1, Temperature: 1}}
		ls = append(ls, l)
	}
	for k := range 2 {
		l = &launch{kernel: k, dtype: dtF32, gridX: 2, block: 64, warp: 32, vocab: 0, stride: 4, slots: 2}
		l.name = fmt.Sprintf("%s vocab=0", kernelNames[k])
		l.rows(r, nil)
		add(l)
	}
	return ls
}
