package gokernel

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/runtime/cpu"
)

// Bad input: arguments too short, misaligned, missing or out of range give the rows that
// use them status 3 (or, when not even a row's slot can be found, no write at all), and
// nothing reads or writes out of bounds.

// expect is what a bounds case expects of one row's slots.
type expect int

const (
	asReference    expect = iota // token and status as the reference says
	badParams                    // status 3, token -1
	untouchedSlots               // nothing written
)

// argList is an argument list built by hand, so that a nil buffer reaches the kernel as
// a slot that holds no buffer and the list can be cut short.
type argList struct {
	buf    [abi.NumArgs]runtime.Buffer // at the buffer positions; nil: no buffer
	off    [abi.NumArgs]int
	stride uint64
	vocab  uint32
	n      int // the arguments passed
}

func (l *argList) args() *runtime.Args {
	var a runtime.Args
	for i := range abi.Arg(l.n) {
		switch {
		case i == abi.ArgRowStride:
			a.U64(l.stride)
		case i == abi.ArgVocab:
			a.U32(l.vocab)
		case i == abi.ArgVocabOffset:
			a.U32(0)
		case l.buf[i] == nil:
			a.U64(0)
		default:
			a.BufferAt(l.buf[i], l.off[i])
		}
	}
	return &a
}

func shorten(b runtime.Buffer, n int) runtime.Buffer {
	return cpu.Wrap(runtime.HostBytes(b)[:n])
}

// TestShortAndBadBuffers runs both kernels with arguments that are too short,
// misaligned, missing or out of range, or too few of them: every row gets its reference
// answer, status 3, or no write at all, and nothing panics.
func TestShortAndBadBuffers(t *testing.T) {
	const v, s = 10, 3
	all := func(e expect) [3]expect { return [3]expect{e, e, e} }
	cases := []struct {
		name string
		edit func(l *argList)
		// want[y] for launch rows y = 0, 1, 2 (naming rows 2, 0, 1).
		gumbel, categorical [3]expect
	}{
		{"intact", func(l *argList) {}, [3]expect{}, [3]expect{}},
		{"logits cut inside row 2", func(l *argList) { l.buf[abi.ArgLogits] = shorten(l.buf[abi.ArgLogits], (2*v+5)*4) },
			[3]expect{badParams}, [3]expect{badParams}},
		{"params for two launch rows", func(l *argList) { l.buf[abi.ArgParams] = shorten(l.buf[abi.ArgParams], 2*abi.RowParamsSize+63) },
			[3]expect{0, 0, untouchedSlots}, [3]expect{0, 0, untouchedSlots}},
		{"partials for two launch rows", func(l *argList) { l.buf[abi.ArgPartials] = shorten(l.buf[abi.ArgPartials], 2*s*8+7) },
			[3]expect{0, 0, badParams}, [3]expect{}},
		{"counters for one launch row", func(l *argList) { l.buf[abi.ArgCounters] = shorten(l.buf[abi.ArgCounters], 2*4+3) },
			[3]expect{0, badParams, badParams}, [3]expect{}},
		{"misaligned logits", func(l *argList) { l.off[abi.ArgLogits] = 1 }, all(badParams), all(badParams)},
		{"misaligned counters", func(l *argList) { l.off[abi.ArgCounters] = 2 }, all(badParams), [3]expect{}},
		{"vocab 0", func(l *argList) { l.vocab = 0 }, all(badParams), all(badParams)},
		{"vocab 2^31", func(l *argList) { l.vocab = 1 << 31 }, all(badParams), all(badParams)},
		{"vocab past the buffer", func(l *argList) { l.vocab = 3*v + 1 }, all(badParams), all(badParams)},
		{"stride overflows", func(l *argList) { l.stride = 1 << 63 },
			[3]expect{badParams, 0, badParams}, [3]expect{badParams, 0, badParams}},
		{"seven arguments", func(l *argList) { l.n = 7 }, all(untouchedSlots), all(untouchedSlots)},
		{"eight arguments", func(l *argList) { l.n = 8 }, all(untouchedSlots), all(untouchedSlots)},
		{"one argument short", func(l *argList) { l.n = abi.NumArgs - 1 }, all(untouchedSlots), all(untouchedSlots)},
		{"no params", func(l *argList) { l.buf[abi.ArgParams] = nil }, all(untouchedSlots), all(untouchedSlots)},
		{"no logits", func(l *argList) { l.buf[abi.ArgLogits] = nil }, all(badParams), all(badParams)},
		{"no counters or partials", func(l *argList) { l.buf[abi.ArgCounters], l.buf[abi.ArgPartials] = nil, nil },
			all(badParams), [3]expect{}},
	}
	r := rand.New(rand.NewPCG(7, 7))
	for _, c := range cases {
		for _, kernel := range []string{abi.GumbelArgmax, abi.Categorical} {
			t.Run(c.name+"/"+kernel, func(t *testing.T) {
				p := &problem{d: abi.F32, vocab: v, stride: v}
				for range 3 {
					p.rows = append(p.rows, llmRow(r, v))
				}
				for _, row := range []uint32{2, 0, 1} {
					p.params = append(p.params, abi.RowParams{Row: row, Temperature: 1, Seed: r.Uint64(), TopK: 3})
				}
				lb := p.layout(s)
				l := argList{stride: v, vocab: v, n: abi.NumArgs}
				for i, mem := range map[abi.Arg][]byte{
					abi.ArgLogits: lb.logits, abi.ArgParams: lb.params, abi.ArgTokens: bytesOf(lb.tokens),
					abi.ArgStatus: bytesOf(lb.status), abi.ArgPartials: bytesOf(lb.partials), abi.ArgCounters: bytesOf(lb.counters),
					// No row uses these: any buffer of 8 bytes will do.
					abi.ArgLogprobs: nil, abi.ArgBias: nil, abi.ArgCounts: nil, abi.ArgMask: nil,
				} {
					l.buf[i] = wrapAtLeast8(mem)
				}
				c.edit(&l)
				a := l.args()
				fn, want, ref, grid := gumbelArgmaxKernel(abi.F32, true), c.gumbel, refGumbelArgmax, runtime.Dim3{X: s, Y: 3, Z: 1}
				if kernel == abi.Categorical {
					fn, want, ref, grid.X = categoricalKernel(abi.F32), c.categorical, refCategorical, 1
				}
				for _, order := range []launchOrder{reversed, shuffled} {
					for i := range lb.tokens {
						lb.tokens[i], lb.status[i] = untouched, untouched
					}
					launch(t, fn, grid, a, order, r)
					for y, rp := range p.params {
						wantTok, wantStatus := ref(p.rows[rp.Row], rp)
						switch want[y] {
						case badParams:
							wantTok, wantStatus = -1, abi.StatusBadParams
						case untouchedSlots:
							wantTok, wantStatus = untouched, untouched
						}
						what := fmt.Sprintf("launch row %d (row %d), %s", y, rp.Row, order)
						require.Equal(t, wantStatus, lb.status[rp.Row], "status: "+what)
						require.Equal(t, wantTok, lb.tokens[rp.Row], "token: "+what)
					}
					for i, x := range lb.counters {
						require.Zero(t, x, "counters[%d]", i)
					}
				}
			})
		}
	}
}

// TestShortTokenAndStatus: slots past the end of a short tokens or status buffer are not
// written, the others are.
func TestShortTokenAndStatus(t *testing.T) {
	for _, kernel := range []runtime.GoKernel{gumbelArgmaxKernel(abi.F32, true), categoricalKernel(abi.F32)} {
		rows := [][]float32{{1, 5, 2}, {4, 1, 0}}
		tokens, status := []int32{untouched}, []abi.Status{untouched, untouched}
		params := make([]byte, 2*abi.RowParamsSize)
		(&abi.RowParams{Row: 1}).Encode(params[abi.RowParamsSize:]) // launch row 1 samples row 1
		var logits []float32
		for _, r := range rows {
			logits = append(logits, r...)
		}
		var a runtime.Args
		a.Buffer(cpu.Wrap(runtime.BytesOf(logits))).Buffer(cpu.Wrap(params)).
			Buffer(cpu.Wrap(runtime.BytesOf(tokens))).Buffer(cpu.Wrap(runtime.BytesOf(status)[:5])).
			Buffer(cpu.Wrap(make([]byte, 64))).Buffer(cpu.Wrap(make([]byte, 64))).U64(3).U32(3)
		for a.Len() < abi.NumArgs {
			if abi.Arg(a.Len()) == abi.ArgVocabOffset {
				a.U32(0)
				continue
			}
			a.Buffer(wrapAtLeast8(nil))
		}
		launch(t, kernel, runtime.Dim3{X: 1, Y: 2, Z: 1}, &a, reversed, nil)
		require.Equal(t, []int32{1}, tokens, "greedy token of row 0; row 1's slot is past the end")
		require.Equal(t, []abi.Status{abi.StatusOK, untouched}, status, "the status buffer holds one whole slot")
	}
}

// TestShortArgumentLists: a launch with fewer than abi.NumArgs arguments writes nothing
// at all: no token, status or record, no step,
// no count, no counter, on every kernel.
func TestShortArgumentLists(t *testing.T) {
	const v, s = 40, 2
	r := rand.New(rand.NewPCG(34, 34))
	for _, nArgs := range []int{0, 6, 8, abi.NumArgs - 1} {
		for _, kernel := range []string{abi.GumbelArgmax, abi.Categorical, abi.TopN} {
			t.Run(fmt.Sprintf("%s/%d arguments", kernel, nArgs), func(t *testing.T) {
				p := &problem{d: abi.F32, vocab: v, stride: v, draws: 2}
				fn, grid := gumbelArgmaxKernel(abi.F32, true), runtime.Dim3{X: s, Y: 2, Z: 2}
				switch kernel {
				case abi.Categorical:
					fn, grid.X = categoricalKernel(abi.F32), 1
				case abi.TopN:
					fn, grid.Z, p.draws = topnKernel(abi.F32), 1, 1
				}
				for row := range 2 {
					p.rows = append(p.rows, llmRow(r, v))
					p.params = append(p.params, abi.RowParams{Row: uint32(row), Temperature: 1, Seed: r.Uint64(), TopN: 3,
						Flags: abi.FlagLogprobs | abi.FlagAdvance | abi.FlagRecord | abi.FlagPerturbed})
				}
				b := p.layout(s)
				if kernel == abi.TopN {
					// topn's lists of 20 a row go over tokens and status.
					b.tokens, b.status = slices.Repeat([]int32{untouched}, 2*abi.MaxTopN), slices.Repeat([]abi.Status{untouched}, 2*abi.MaxTopN)
				}
				before := *b
				before.params, before.counts, before.logprobs = slices.Clone(b.params), slices.Clone(b.counts), slices.Clone(b.logprobs)
				before.tokens, before.status = slices.Clone(b.tokens), slices.Clone(b.status)
				launch(t, fn, grid, argsWith(b, v, v, nArgs, nil, nil), shuffled, r)
				require.Equal(t, before.tokens, b.tokens, "tokens")
				require.Equal(t, before.status, b.status, "status")
				require.Equal(t, before.logprobs, b.logprobs, "records")
				require.Equal(t, before.params, b.params, "params: no step advances")
				require.Equal(t, before.counts, b.counts, "counts: nothing is recorded")
				for i, x := range b.counters {
					require.Zero(t, x, "counters[%d]", i)
				}
			})
		}
	}
}

// TestFeatureBuffers: each buffer of a row feature too short, misaligned or missing for
// the feature that needs it, reserved flags, short scratch, and a short argument list.
// The rows using the feature report status 3 (with a NaN record where the
// logprobs buffer holds one), neither advance nor record, and leave the counters at zero;
// the others are sampled as usual. A short argument list leaves everything untouched.
// Nothing panics.
func TestFeatureBuffers(t *testing.T) {
	const v, s, draws, w = 40, 3, 2, (40 + 31) / 32
	shape := abi.Launch{Rows: 3, Split: s, Draws: draws}
	r := rand.New(rand.NewPCG(31, 31))
	type edit struct {
		repl  map[abi.Arg][]byte
		offs  map[abi.Arg]int
		nArgs int
	}
	none := func(b *buffers) edit { return edit{} }
	cut := func(arg abi.Arg, mem []byte) edit { return edit{repl: map[abi.Arg][]byte{arg: mem}} }
	row1 := [3]bool{false, true, false}
	cases := []struct {
		name  string
		flags abi.Flags // given to launch row 1 (row 2); every row has LOGPROBS
		edit  func(b *buffers) edit
		fail  [3]bool // the launch rows that must report status 3
		// untouched: nothing at all may be written; gumbelOnly: the case is about
		// gumbel_argmax's split scratch.
		untouched, gumbelOnly bool
		// noRecord: the failed rows' records cannot be written (no usable logprobs
		// buffer); countsCut: the counts buffer itself is the short one.
		noRecord, countsCut bool
	}{
		{name: "intact", flags: abi.FlagBias | abi.FlagMask | abi.FlagPenalties | abi.FlagRecord | abi.FlagAdvance, edit: none},
		{name: "bias short of the row", flags: abi.FlagBias, fail: row1,
			edit: func(b *buffers) edit { return cut(abi.ArgBias, bytesOf(b.bias)[:4*(3*v-1)]) }},
		{name: "bias misaligned", flags: abi.FlagBias, fail: row1,
			edit: func(b *buffers) edit { return edit{offs: map[abi.Arg]int{abi.ArgBias: 2}} }},
		{name: "bias missing", flags: abi.FlagBias, fail: row1,
			edit: func(b *buffers) edit { return cut(abi.ArgBias, nil) }},
		{name: "counts short for PENALTIES", flags: abi.FlagPenalties, fail: row1, countsCut: true,
			edit: func(b *buffers) edit { return cut(abi.ArgCounts, bytesOf(b.counts)[:4*(2*v+1)]) }},
		{name: "counts short for RECORD", flags: abi.FlagRecord, fail: row1, countsCut: true,
			edit: func(b *buffers) edit { return cut(abi.ArgCounts, bytesOf(b.counts)[:4*(2*v+1)]) }},
		{name: "mask short", flags: abi.FlagMask, fail: row1,
			edit: func(b *buffers) edit { return cut(abi.ArgMask, bytesOf(b.mask)[:4*(3*w-1)]) }},
		{name: "mask misaligned", flags: abi.FlagMask, fail: row1,
			edit: func(b *buffers) edit { return edit{offs: map[abi.Arg]int{abi.ArgMask: 1}} }},
		{name: "logprobs short of row 2's draws", fail: row1, noRecord: true,
			edit: func(b *buffers) edit {
				return cut(abi.ArgLogprobs, bytesOf(b.logprobs)[:4*abi.RecordWords*(abi.Slots(3, draws)-1)])
			}},
		{name: "bitmask short of its row", flags: abi.FlagBitmask, fail: row1,
			edit: func(b *buffers) edit { return cut(abi.ArgBitmask, bytesOf(b.bitmask)[:4*(len(b.bitmask)-1)]) }},
		{name: "bitmask misaligned", flags: abi.FlagBitmask, fail: row1,
			edit: func(b *buffers) edit { return edit{offs: map[abi.Arg]int{abi.ArgBitmask: 2}} }},
		{name: "bitmask missing", flags: abi.FlagBitmask, fail: row1,
			edit: func(b *buffers) edit { return cut(abi.ArgBitmask, nil) }},
		{name: "reserved flag", flags: 1 << 11, fail: row1, edit: none},
		{name: "eight arguments", flags: abi.FlagBias, untouched: true,
			edit: func(b *buffers) edit { return edit{nArgs: 8} }},
		{name: "counters without room for the draws' row counter", flags: abi.FlagAdvance, fail: row1,
			edit: func(b *buffers) edit { return cut(abi.ArgCounters, bytesOf(b.counters)[:4*shape.RowCounter(1)]) }},
		{name: "tokens without room for RECORD", flags: abi.FlagRecord, fail: row1,
			edit: func(b *buffers) edit { return cut(abi.ArgTokens, bytesOf(b.tokens)[:4*(abi.Slots(3, draws)-1)]) }},
		{name: "partials without room for the split records", fail: [3]bool{false, true, true}, gumbelOnly: true,
			edit: func(b *buffers) edit {
				return cut(abi.ArgPartials, bytesOf(b.partials)[:8*(shape.PairWord(0, draws-1, s-1, 1)+1)])
			}},
	}
	for _, c := range cases {
		for _, kernel := range []string{abi.GumbelArgmax, abi.Categorical} {
			if c.gumbelOnly && kernel != abi.GumbelArgmax {
				continue
			}
			t.Run(c.name+"/"+kernel, func(t *testing.T) {
				categorical := kernel == abi.Categorical
				fn, split := gumbelArgmaxKernel(abi.F32, true), s
				if categorical {
					fn, split = categoricalKernel(abi.F32), 1
				}
				p := &problem{d: abi.F32, vocab: v, stride: v, draws: draws}
				for range 3 {
					p.rows = append(p.rows, llmRow(r, v))
				}
				for _, row := range []uint32{0, 2, 1} {
					p.params = append(p.params, abi.RowParams{Row: row, Temperature: 1, Seed: r.Uint64(), Step: 5, TopK: 3, Flags: abi.FlagLogprobs})
				}
				randomInputs(r, p)
				for y := range p.params {
					p.params[y].Flags &^= abi.FlagsProcessors
				}
				p.params[1].Flags |= c.flags
				p.params[1].BitmaskRow = uint32(len(p.bitmask) - 1) // the last: a short buffer misses it
				b := p.layout(split)
				e := c.edit(b)
				tokensCut := e.repl[abi.ArgTokens]
				if e.nArgs == 0 {
					e.nArgs = abi.NumArgs
				}
				a := argsWith(b, p.stride, p.vocab, e.nArgs, e.repl, e.offs)
				countsBefore, recordsBefore := slices.Clone(b.counts), slices.Clone(b.logprobs)
				for _, order := range []launchOrder{onDevice, reversed, shuffled} {
					for o := range b.tokens {
						b.tokens[o], b.status[o] = untouched, untouched
					}
					copy(b.counts, countsBefore)
					stepsBefore := []uint64{b.stepOf(0), b.stepOf(1), b.stepOf(2)}
					launch(t, fn, runtime.Dim3{X: split, Y: 3, Z: draws}, a, order, r)
					if c.untouched {
						require.Equal(t, slices.Repeat([]int32{untouched}, len(b.tokens)), b.tokens, "%s: tokens", order)
						require.Equal(t, slices.Repeat([]abi.Status{untouched}, len(b.status)), b.status, "%s: status", order)
						require.Equal(t, recordsBefore, b.logprobs, "%s: records", order)
						require.Equal(t, stepsBefore, []uint64{b.stepOf(0), b.stepOf(1), b.stepOf(2)}, "%s: steps", order)
						require.Equal(t, countsBefore, b.counts, "%s: counts", order)
					}
					for y, rp := range p.params {
						if c.untouched {
							break
						}
						for z := range draws {
							o := int(rp.Row)*draws + z
							what := fmt.Sprintf("%s: launch row %d draw %d", order, y, z)
							if c.fail[y] {
								require.Equal(t, abi.StatusBadParams, b.status[o], what)
								if tokensCut == nil || 4*o < len(tokensCut) {
									require.Equal(t, int32(-1), b.tokens[o], what)
								}
								continue
							}
							tok, status := refSample(categorical, p.rows[rp.Row], rp, p.inputs(rp.Row), z)
							require.Equal(t, status, b.status[o], what)
							require.Equal(t, tok, b.tokens[o], what)
						}
						if c.fail[y] {
							require.Equal(t, stepsBefore[y], b.stepOf(y), "%s: a failed row does not advance", order)
							if !c.countsCut {
								require.Equal(t, countsBefore, b.counts, "%s: a failed row records nothing", order)
							}
							if !c.noRecord {
								for k := range abi.RecordWords * draws {
									require.True(t, math.IsNaN(float64(b.logprobs[abi.RecordWords*int(rp.Row)*draws+k])), "%s: NaN record of a failed row", order)
								}
							}
						}
					}
					for i, x := range b.counters {
						require.Zero(t, x, "counters[%d]", i)
					}
				}
			})
		}
	}
}

// TestTopNBadBuffers: topn with short scratch or processor buffers fails the row
// (token -1, NaN), and never reads or writes out of bounds.
func TestTopNBadBuffers(t *testing.T) {
	const v, s = 30, 4
	r := rand.New(rand.NewPCG(32, 32))
	p := &problem{d: abi.F32, vocab: v, stride: v}
	for range 2 {
		p.rows = append(p.rows, llmRow(r, v))
	}
	p.params = []abi.RowParams{{Row: 1, Temperature: 1, TopN: 5, Flags: abi.FlagPerturbed | abi.FlagBias | abi.FlagMask}, {Row: 0, Temperature: 1, TopN: 3}}
	randomInputs(r, p)
	p.params[0].Flags = abi.FlagPerturbed | abi.FlagBias | abi.FlagMask
	p.params[1].Flags = 0
	for _, c := range []struct {
		name    string
		arg     abi.Arg
		cut     func(b *buffers) []byte
		failRow [2]bool
	}{
		{"partials for one launch row", abi.ArgPartials, func(b *buffers) []byte { return bytesOf(b.partials)[:8*abi.TopNStride*s] }, [2]bool{false, true}},
		{"counters for one launch row", abi.ArgCounters, func(b *buffers) []byte { return bytesOf(b.counters)[:4*3] }, [2]bool{false, true}},
		{"bias short", abi.ArgBias, func(b *buffers) []byte { return bytesOf(b.bias)[:4*(2*v-1)] }, [2]bool{true, false}},
		{"mask missing", abi.ArgMask, func(b *buffers) []byte { return nil }, [2]bool{true, false}},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := p.layout(s)
			outTok, outVal := make([]int32, abi.TopNSlots(2)), make([]float32, abi.TopNSlots(2))
			a := argsWith(b, v, v, abi.NumArgs, map[abi.Arg][]byte{
				abi.ArgTokens: bytesOf(outTok), abi.ArgStatus: bytesOf(outVal), c.arg: c.cut(b),
			}, nil)
			launch(t, topnKernel(abi.F32), runtime.Dim3{X: s, Y: 2, Z: 1}, a, shuffled, r)
			for y, rp := range p.params {
				first := int(rp.Row) * abi.MaxTopN
				if c.failRow[y] {
					require.Equal(t, int32(abi.TopNRefused), outTok[first], "launch row %d", y)
					require.True(t, math.IsNaN(float64(outVal[first])), "launch row %d", y)
				} else {
					toks, _ := refTopN(p.rows[rp.Row], rp, p.inputs(rp.Row))
					require.Equal(t, toks, outTok[first:first+int(rp.TopN)], "launch row %d", y)
				}
			}
		})
	}
}

// TestAbsurdGrids: grid shapes far beyond any device's (a block context can claim
// anything) leave every output untouched instead of overflowing the slot arithmetic.
func TestAbsurdGrids(t *testing.T) {
	r := rand.New(rand.NewPCG(33, 33))
	for _, grid := range []runtime.Dim3{
		{X: 1, Y: 1, Z: abi.MaxDraws + 1},
		{X: 1 << 21, Y: 1 << 21, Z: 1},
		{X: 1, Y: 1 << 30, Z: 1 << 20},
	} {
		p := &problem{d: abi.F32, vocab: 8, stride: 8, rows: [][]float32{llmRow(r, 8)},
			params: []abi.RowParams{{Row: 0, Temperature: 1, TopN: 2, Flags: abi.FlagLogprobs | abi.FlagAdvance}}}
		b := p.layout(1)
		kernels := []runtime.GoKernel{gumbelArgmaxKernel(abi.F32, true), categoricalKernel(abi.F32)}
		if grid.Z == 1 {
			kernels = append(kernels, topnKernel(abi.F32)) // topn ignores grid.z
		}
		for _, fn := range kernels {
			fn(&runtime.BlockContext{Grid: grid, BlockDim: runtime.Dim3{X: 1024, Y: 1, Z: 1}, Args: b.args(8, 8)})
			require.Equal(t, []int32{untouched}, b.tokens, "grid %v", grid)
			require.Equal(t, []abi.Status{untouched}, b.status, "grid %v", grid)
			require.Equal(t, uint64(0), b.stepOf(0), "grid %v", grid)
		}
	}
}
