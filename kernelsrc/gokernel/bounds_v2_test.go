package gokernel

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/runtime/cpu"
)

// v2Args builds the twelve arguments of a laid-out problem with some replaced: repl maps
// an argument position to its buffer (nil: a slot that holds no buffer); offs shifts a
// buffer argument by that many bytes; nArgs cuts the list short.
func v2Args(b *buffers, stride, vocab, nArgs int, repl map[int][]byte, offs map[int]int) *runtime.Args {
	full := b.args(stride, vocab)
	var a runtime.Args
	for i := range min(nArgs, numArgsV2) {
		switch i {
		case argRowStride:
			a.U64(uint64(stride))
		case argVocab:
			a.U32(uint32(vocab))
		default:
			if mem, ok := repl[i]; ok {
				if mem == nil {
					a.U64(0)
					continue
				}
				a.BufferAt(cpu.Wrap(mem), offs[i])
				continue
			}
			buf, _ := full.BufferArg(i)
			a.BufferAt(buf, offs[i])
		}
	}
	return &a
}

// TestV2BadBuffers: each version-2 buffer too short, misaligned or missing for the
// feature that needs it, reserved flags, and a version-1 argument list. The rows using
// the feature report status 3 (with a NaN record where the logprobs buffer holds one),
// neither advance nor record, and leave the counters at zero; the others are sampled as
// usual. Nothing panics.
func TestV2BadBuffers(t *testing.T) {
	const v, s, draws = 40, 3, 2
	r := rand.New(rand.NewPCG(31, 31))
	type edit struct {
		repl  map[int][]byte
		offs  map[int]int
		nArgs int
	}
	cases := []struct {
		name  string
		flags uint32 // given to launch row 1 (row 2); every row has LOGPROBS
		edit  func(b *buffers) edit
		bad   bool    // whether launch row 1 must fail
		other [3]bool // whether launch rows 0 and 2 must fail too
		skip  func(k string) bool
		// noRecord: the failed rows' records cannot be written (no usable logprobs
		// buffer); countsCut: the counts buffer itself is the short one.
		noRecord, countsCut bool
	}{
		{"intact", FlagBias | FlagMask | FlagPenalties | FlagRecord | FlagAdvance, func(b *buffers) edit { return edit{} }, false, [3]bool{}, nil, false, false},
		{"bias short of the row", FlagBias, func(b *buffers) edit {
			return edit{repl: map[int][]byte{argBias: bytesOf(b.bias)[:4*(3*v-1)]}}
		}, true, [3]bool{}, nil, false, false},
		{"bias misaligned", FlagBias, func(b *buffers) edit { return edit{offs: map[int]int{argBias: 2}} }, true, [3]bool{}, nil, false, false},
		{"bias missing", FlagBias, func(b *buffers) edit { return edit{repl: map[int][]byte{argBias: nil}} }, true, [3]bool{}, nil, false, false},
		{"counts short for PENALTIES", FlagPenalties, func(b *buffers) edit {
			return edit{repl: map[int][]byte{argCounts: bytesOf(b.counts)[:4*(2*v+1)]}}
		}, true, [3]bool{}, nil, false, true},
		{"counts short for RECORD", FlagRecord, func(b *buffers) edit {
			return edit{repl: map[int][]byte{argCounts: bytesOf(b.counts)[:4*(2*v+1)]}}
		}, true, [3]bool{}, nil, false, true},
		{"mask short", FlagMask, func(b *buffers) edit {
			return edit{repl: map[int][]byte{argMask: bytesOf(b.mask)[:4*(2*2+1)]}}
		}, true, [3]bool{}, nil, false, false},
		{"mask misaligned", FlagMask, func(b *buffers) edit { return edit{offs: map[int]int{argMask: 1}} }, true, [3]bool{}, nil, false, false},
		{"logprobs short of row 2's draws", 0, func(b *buffers) edit {
			return edit{repl: map[int][]byte{argLogprobs: bytesOf(b.logprobs)[:4*(4*(2*draws+1))]}}
		}, true, [3]bool{}, nil, true, false},
		{"reserved flag", 1 << 9, func(b *buffers) edit { return edit{} }, true, [3]bool{}, nil, false, false},
		{"version-1 argument list", FlagBias, func(b *buffers) edit { return edit{nArgs: numArgsV1} }, true, [3]bool{true, false, true}, nil, true, false},
		{"counters without room for the draws' row counter", FlagAdvance, func(b *buffers) edit {
			return edit{repl: map[int][]byte{argCounters: bytesOf(b.counters)[:4*(2*3*draws+1)]}}
		}, true, [3]bool{}, nil, false, false},
		{"tokens without room for RECORD", FlagRecord, func(b *buffers) edit {
			return edit{repl: map[int][]byte{argTokens: bytesOf(b.tokens)[:4*(2*draws+1)]}}
		}, true, [3]bool{}, nil, false, false},
		{"partials without room for the split records", 0, func(b *buffers) edit {
			return edit{repl: map[int][]byte{argPartials: bytesOf(b.partials)[:8*(3*draws*s+2*((draws-1)*3+1)*s)]}}
		}, true, [3]bool{false, false, true}, func(k string) bool { return k == "categorical" }, false, false},
	}
	for _, c := range cases {
		for _, kernel := range []string{"gumbel_argmax", "categorical"} {
			if c.skip != nil && c.skip(kernel) {
				continue
			}
			t.Run(c.name+"/"+kernel, func(t *testing.T) {
				categorical := kernel == "categorical"
				fn, split := gumbelKernel(f32, true), s
				if categorical {
					fn, split = categoricalKernel(f32), 1
				}
				p := &problem{d: f32, vocab: v, stride: v, draws: draws}
				for range 3 {
					p.rows = append(p.rows, llmRow(r, v))
				}
				for _, row := range []uint32{0, 2, 1} {
					p.params = append(p.params, refParams{row: row, temperature: 1, seed: r.Uint64(), step: 5, topK: 3, flags: FlagLogprobs})
				}
				p.params[1].flags |= c.flags
				randomInputs(r, p)
				p.params[1].flags &^= FlagBias | FlagMask | FlagPenalties
				p.params[1].flags |= c.flags
				for y := range p.params {
					if y != 1 {
						p.params[y].flags &^= FlagBias | FlagMask | FlagPenalties
					}
				}
				b := p.layout(split)
				e := c.edit(b)
				tokensCut := e.repl[argTokens]
				if e.nArgs == 0 {
					e.nArgs = numArgsV2
				}
				a := v2Args(b, p.stride, p.vocab, e.nArgs, e.repl, e.offs)
				countsBefore := append([]uint32(nil), b.counts...)
				for _, order := range []launchOrder{onDevice, reversed, shuffled} {
					for o := range b.tokens {
						b.tokens[o], b.status[o] = untouched, untouched
					}
					copy(b.counts, countsBefore)
					stepsBefore := []uint64{b.stepOf(0), b.stepOf(1), b.stepOf(2)}
					launch(t, fn, runtime.Dim3{X: split, Y: 3, Z: draws}, a, order, r)
					for y, rp := range p.params {
						mustFail := c.other[y] || (y == 1 && c.bad)
						for z := range draws {
							o := int(rp.row)*draws + z
							what := fmt.Sprintf("%s: launch row %d draw %d", order, y, z)
							if mustFail {
								require.Equal(t, StatusBadParams, b.status[o], what)
								if tokensCut == nil || 4*o < len(tokensCut) {
									require.Equal(t, int32(-1), b.tokens[o], what)
								}
								continue
							}
							tok, status := refSample(categorical, p.rows[rp.row], rp, p.inputs(rp.row), z)
							require.Equal(t, status, b.status[o], what)
							require.Equal(t, tok, b.tokens[o], what)
						}
						if mustFail {
							require.Equal(t, stepsBefore[y], b.stepOf(y), "%s: a failed row does not advance", order)
							if !c.countsCut {
								require.Equal(t, countsBefore, b.counts, "%s: a failed row records nothing", order)
							}
							if !c.noRecord {
								for k := 0; k < 4*draws; k++ {
									require.True(t, math.IsNaN(float64(b.logprobs[4*int(rp.row)*draws+k])), "%s: NaN record of a failed row", order)
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
	p := &problem{d: f32, vocab: v, stride: v}
	for range 2 {
		p.rows = append(p.rows, llmRow(r, v))
	}
	p.params = []refParams{{row: 1, temperature: 1, topN: 5, flags: FlagPerturbed | FlagBias | FlagMask}, {row: 0, temperature: 1, topN: 3}}
	randomInputs(r, p)
	p.params[0].flags = FlagPerturbed | FlagBias | FlagMask
	p.params[1].flags = 0
	for _, c := range []struct {
		name    string
		arg     int
		cut     func(b *buffers) []byte
		failRow [2]bool
	}{
		{"partials for one launch row", argPartials, func(b *buffers) []byte { return bytesOf(b.partials)[:8*topnStride*s] }, [2]bool{false, true}},
		{"counters for one launch row", argCounters, func(b *buffers) []byte { return bytesOf(b.counters)[:4*3] }, [2]bool{false, true}},
		{"bias short", argBias, func(b *buffers) []byte { return bytesOf(b.bias)[:4*(2*v-1)] }, [2]bool{true, false}},
		{"mask missing", argMask, func(b *buffers) []byte { return nil }, [2]bool{true, false}},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := p.layout(s)
			outTok, outVal := make([]int32, MaxTopN*2), make([]float32, MaxTopN*2)
			full := v2Args(b, v, v, numArgsV2, map[int][]byte{c.arg: c.cut(b)}, nil)
			var a runtime.Args
			a.Buffer(cpu.Wrap(b.logits)).Buffer(cpu.Wrap(b.params)).
				Buffer(cpu.Wrap(bytesOf(outTok))).Buffer(cpu.Wrap(bytesOf(outVal)))
			for i := argPartials; i < numArgsV2; i++ {
				switch i {
				case argRowStride:
					a.U64(v)
				case argVocab:
					a.U32(v)
				default:
					if buf, off := full.BufferArg(i); buf != nil {
						a.BufferAt(buf, off)
					} else {
						a.U64(0)
					}
				}
			}
			launch(t, topnKernel(f32), runtime.Dim3{X: s, Y: 2, Z: 1}, &a, shuffled, r)
			for y, rp := range p.params {
				first := int(rp.row) * MaxTopN
				if c.failRow[y] {
					require.Equal(t, int32(-1), outTok[first], "launch row %d", y)
					require.True(t, math.IsNaN(float64(outVal[first])), "launch row %d", y)
				} else {
					toks, _ := refTopN(p.rows[rp.row], rp, p.inputs(rp.row))
					require.Equal(t, toks, outTok[first:first+int(rp.topN)], "launch row %d", y)
				}
			}
		})
	}
}

func bytesOf[T ~uint32 | ~int32 | ~float32 | ~uint64](s []T) []byte { return runtime.BytesOf(s) }

// TestAbsurdGrids: grid shapes far beyond any device's (a block context can claim
// anything) leave every output untouched instead of overflowing the slot arithmetic.
func TestAbsurdGrids(t *testing.T) {
	r := rand.New(rand.NewPCG(33, 33))
	for _, grid := range []runtime.Dim3{
		{X: 1, Y: 1, Z: maxDraws + 1},
		{X: 1 << 21, Y: 1 << 21, Z: 1},
		{X: 1, Y: 1 << 30, Z: 1 << 20},
	} {
		p := &problem{d: f32, vocab: 8, stride: 8, rows: [][]float32{llmRow(r, 8)},
			params: []refParams{{row: 0, temperature: 1, topN: 2, flags: FlagLogprobs | FlagAdvance}}}
		b := p.layout(1)
		kernels := []runtime.GoKernel{gumbelKernel(f32, true), categoricalKernel(f32)}
		if grid.Z == 1 {
			kernels = append(kernels, topnKernel(f32)) // topn ignores grid.z
		}
		for _, fn := range kernels {
			fn(&runtime.BlockContext{Grid: grid, BlockDim: runtime.Dim3{X: 1024, Y: 1, Z: 1}, Args: b.args(8, 8)})
			require.Equal(t, []int32{untouched}, b.tokens, "grid %v", grid)
			require.Equal(t, []int32{untouched}, b.status, "grid %v", grid)
			require.Equal(t, uint64(0), b.stepOf(0), "grid %v", grid)
		}
	}
}
