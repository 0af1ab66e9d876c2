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
)

// topnBuffers are the topn outputs of a problem laid out by layout: out_tokens in
// tokens-sized memory of 20 entries a row, out_values beside it.
type topnBuffers struct {
	*buffers
	outTokens []int32
	outValues []float32
}

const untouchedValue float32 = -55

// runTopN launches topn over s blocks per row and block threads, and returns the
// outputs; counters must be back to zero.
func (p *problem) runTopN(t testing.TB, d abi.DType, s, threads int, order launchOrder, r *rand.Rand) *topnBuffers {
	t.Helper()
	b := &topnBuffers{buffers: p.layout(s)}
	b.outTokens = make([]int32, abi.MaxTopN*len(p.rows))
	b.outValues = make([]float32, abi.MaxTopN*len(p.rows))
	for i := range b.outTokens {
		b.outTokens[i], b.outValues[i] = untouched, untouchedValue
	}
	ta := b.topnArgs(p.stride, p.vocab, b.outTokens, b.outValues)
	launchT(t, topnKernel(d), runtime.Dim3{X: s, Y: len(p.params), Z: 1}, threads, ta, order, r)
	for i, c := range b.counters {
		require.Zero(t, c, "counters[%d] after the launch", i)
	}
	return b
}

// topnArgs is the argument list of topn over the laid-out problem: the sampling
// kernels' arguments with out_tokens and out_values in place of tokens and status.
func (b *buffers) topnArgs(stride, vocab int, outTok []int32, outVal []float32) *runtime.Args {
	full := b.args(stride, vocab)
	var a runtime.Args
	for i := range abi.Arg(abi.NumArgs) {
		switch i {
		case abi.ArgTokens:
			a.Buffer(wrapAtLeast8(runtime.BytesOf(outTok)))
		case abi.ArgStatus:
			a.Buffer(wrapAtLeast8(runtime.BytesOf(outVal)))
		case abi.ArgRowStride:
			a.U64(uint64(stride))
		case abi.ArgVocab:
			a.U32(uint32(vocab))
		case abi.ArgVocabOffset:
			a.U32(0)
		default:
			buf, off := full.BufferArg(int(i))
			a.BufferAt(buf, off)
		}
	}
	return &a
}

func topnParams(r *rand.Rand) abi.RowParams {
	p := gumbelParams(r)
	p.TopN = uint32(pick(r, 1, 2, 5, 20, 20))
	if r.IntN(2) == 0 {
		p.Flags |= abi.FlagPerturbed
	}
	return p
}

// checkTopN compares each launch row's entries with the sort-based reference; entries
// past N and rows no launch row names stay untouched.
func (p *problem) checkTopN(t testing.TB, b *topnBuffers, what string) {
	t.Helper()
	named := make([]bool, len(p.rows))
	for y, rp := range p.params {
		named[rp.Row] = true
		out := func(j int) (int32, float32) {
			return b.outTokens[int(rp.Row)*abi.MaxTopN+j], b.outValues[int(rp.Row)*abi.MaxTopN+j]
		}
		where := fmt.Sprintf("%s: launch row %d (row %d, %+v)", what, y, rp.Row, rp)
		row := p.rows[rp.Row][:p.vocab]
		in := p.inputs(rp.Row)
		refused := refBadTemperature(rp.Temperature) || rp.TopN < 1 || rp.TopN > abi.MaxTopN
		failed := refused
		if !failed {
			if rp.Flags&abi.FlagPerturbed != 0 {
				_, st := refProcessed(row, rp, in)
				failed = st == abi.StatusNonFinite
			} else {
				failed = refStatus(row) == abi.StatusNonFinite
			}
		}
		n := int(rp.TopN)
		if failed {
			if n < 1 || n > abi.MaxTopN {
				n = abi.MaxTopN
			}
			want := int32(-1) // NaN or +Inf
			if refused {
				want = abi.TopNRefused
			}
			for j := range n {
				tok, val := out(j)
				require.Equal(t, want, tok, "failed row, entry %d: %s", j, where)
				require.True(t, math.IsNaN(float64(val)), "failed row, entry %d is %v: %s", j, val, where)
			}
		} else {
			toks, vals := refTopN(row, rp, in)
			for j := range n {
				tok, val := out(j)
				require.Equal(t, toks[j], tok, "entry %d: %s", j, where)
				requireClose(t, vals[j], val, "value %d: %s", j, where)
			}
		}
		for j := n; j < abi.MaxTopN; j++ {
			tok, val := out(j)
			require.Equal(t, int32(untouched), tok, "entry %d past N: %s", j, where)
			require.Equal(t, untouchedValue, val, "entry %d past N: %s", j, where)
		}
	}
	for row, n := range named {
		if !n {
			require.Equal(t, slices.Repeat([]int32{untouched}, abi.MaxTopN), b.outTokens[row*abi.MaxTopN:(row+1)*abi.MaxTopN], "%s: row %d", what, row)
		}
	}
}

// TestTopNMatchesReference: plain and perturbed rows, with and without processors, every
// element type and row shape, against a sort of the keys; the answer must not depend on S or T.
func TestTopNMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 21))
	for _, d := range dtypes {
		for _, shape := range rowShapes {
			for _, v := range []int{1, 3, 25, 257, 1500} {
				t.Run(fmt.Sprintf("%s/%s/V=%d", dtypeName(d), shape.name, v), func(t *testing.T) {
					p := randomProblem(r, d, v, shape.make, topnParams)
					if r.IntN(2) == 0 {
						randomInputs(r, p) // used by the perturbed rows only
					}
					var first *topnBuffers
					for _, s := range []int{1, 2, 3, 7, 64, v + 5} {
						threads := pick(r, 32, 256, 1024)
						order := launchOrder(r.IntN(3))
						b := p.runTopN(t, d, s, threads, order, r)
						what := fmt.Sprintf("S=%d T=%d %s", s, threads, order)
						p.checkTopN(t, b, what)
						if first == nil {
							first = b
							continue
						}
						// Values may differ in the last place (float32 partial sums); the
						// reference check above bounds them.
						require.Equal(t, first.outTokens, b.outTokens, what)
					}
				})
			}
		}
	}
}

// TestTopNPerturbedStartsWithTheSample: with PERTURBED, entry 0 is gumbel_argmax's token
// at the same step, processors included, and the list is a draw without replacement
// (distinct tokens).
func TestTopNPerturbedStartsWithTheSample(t *testing.T) {
	r := rand.New(rand.NewPCG(22, 22))
	for _, d := range dtypes {
		for trial := range 20 {
			const v = 2000
			p := randomProblem(r, d, v, llmRow, func(r *rand.Rand) abi.RowParams {
				return abi.RowParams{Temperature: pick[float32](r, 0, 0.5, 1, 2), Seed: r.Uint64(), Step: r.Uint64(), TopN: abi.MaxTopN, Flags: abi.FlagPerturbed}
			})
			randomInputs(r, p)
			for y := range p.params {
				p.params[y].Flags |= abi.FlagPerturbed
			}
			s := pick(r, 1, 4)
			top := p.runTopN(t, d, s, 1024, onDevice, r)
			sampled := p.run(t, gumbelArgmaxKernel(d, true), s, onDevice, r)
			for _, rp := range p.params {
				what := fmt.Sprintf("%s trial %d row %d", dtypeName(d), trial, rp.Row)
				list := top.outTokens[int(rp.Row)*abi.MaxTopN : int(rp.Row+1)*abi.MaxTopN]
				if sampled.status[rp.Row] != abi.StatusOK {
					if sampled.status[rp.Row] != abi.StatusNoFinite {
						require.Equal(t, int32(-1), list[0], what)
					}
					continue
				}
				require.Equal(t, sampled.tokens[rp.Row], list[0], what)
				seen := map[int32]bool{}
				for _, tok := range list {
					if tok >= 0 {
						require.False(t, seen[tok], "%s: token %d twice", what, tok)
						seen[tok] = true
					}
				}
			}
		}
	}
}

// TestTopNHandCases pins the plain list, padding and the failure cases.
func TestTopNHandCases(t *testing.T) {
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	lse4 := math.Log(math.E + 2*math.Exp(3) + math.Exp(2))
	cases := []struct {
		name  string
		row   []float32
		n     uint32
		toks  []int32
		value []float64 // nil: NaN in every entry
	}{
		{"ties to the lowest index", []float32{1, 3, 3, 2}, 3, []int32{1, 2, 3},
			[]float64{3 - lse4, 3 - lse4, 2 - lse4}},
		{"padding past the finite keys", []float32{-inf, 0, -inf}, 3, []int32{1, -1, -1}, []float64{0, math.Inf(-1), math.Inf(-1)}},
		{"nothing finite", []float32{-inf, -inf}, 2, []int32{-1, -1}, []float64{math.Inf(-1), math.Inf(-1)}},
		{"NaN", []float32{1, nan}, 2, []int32{-1, -1}, nil},
		{"+Inf", []float32{1, inf}, 1, []int32{-1}, nil},
		{"N = 0", []float32{1, 2}, 0, slices.Repeat([]int32{abi.TopNRefused}, abi.MaxTopN), nil},
		{"N = 21", []float32{1, 2}, 21, slices.Repeat([]int32{abi.TopNRefused}, abi.MaxTopN), nil},
	}
	for _, c := range cases {
		for _, s := range []int{1, 2} {
			t.Run(fmt.Sprintf("%s/S=%d", c.name, s), func(t *testing.T) {
				p := &problem{d: abi.F32, vocab: len(c.row), stride: len(c.row), rows: [][]float32{slices.Clone(c.row)},
					params: []abi.RowParams{{TopN: c.n, Temperature: 1}}}
				b := p.runTopN(t, abi.F32, s, 1024, onDevice, nil)
				require.Equal(t, c.toks, b.outTokens[:len(c.toks)])
				for j := range c.toks {
					if c.value == nil {
						require.True(t, math.IsNaN(float64(b.outValues[j])), "entry %d is %v", j, b.outValues[j])
					} else {
						requireClose(t, c.value[j], b.outValues[j], "entry %d", j)
					}
				}
			})
		}
	}
	// The values of a distinct row are its log-softmax.
	p := &problem{d: abi.F32, vocab: 3, stride: 3, rows: [][]float32{{0, math.Float32frombits(0x3f317218), 0}}, // ln 2
		params: []abi.RowParams{{TopN: 3}}}
	b := p.runTopN(t, abi.F32, 1, 1024, onDevice, nil)
	require.Equal(t, []int32{1, 0, 2}, b.outTokens[:3])
	for j, want := range []float64{math.Log(0.5), math.Log(0.25), math.Log(0.25)} {
		requireClose(t, want, b.outValues[j], "entry %d", j)
	}
}

// TestTopNPerturbedExact: with PERTURBED, rows whose |x'/T| lies beyond what a float32
// score resolves are ranked by their exact values (ABI.md, "topn"), with known answers:
// a flat row of 1e7 at T = 1 draws every order of its four tokens; a tie of two logits
// at T = 1e-30 puts the tied pair first, in either order, then the rest by logit; the
// logits ±MaxFloat32 rank the positive pair first at T = 1 and where x'/T overflows
// (their values then follow IEEE arithmetic: NaN and -Inf); a row whose scaled logits
// underflow to -Inf still draws those tokens, after any finite one and never the masked
// ones. Entry 0 is gumbel_argmax's token
// (finished by gumbel_exact), the lists equal the exact reference, and they do not
// depend on the split.
func TestTopNPerturbedExact(t *testing.T) {
	const draws = 400
	inf, maxF := math.Inf(1), float32(math.MaxFloat32)
	nan := math.NaN()
	lnq := -math.Log(4)
	cases := []struct {
		name   string
		row    []float32
		temp   float32
		groups [][]int32 // the entries hold these sets in turn, each in any order
		orders int       // distinct lists every run must show
		values []float64 // per entry (nil: not pinned)
	}{
		{"flat 1e7", []float32{1e7, 1e7, 1e7, 1e7}, 1, [][]int32{{0, 1, 2, 3}}, 24, []float64{lnq, lnq, lnq, lnq}},
		{"tie at T = 1e-30", []float32{3, 25, 1, 25}, 1e-30, [][]int32{{1, 3}, {0}, {2}}, 2, nil},
		{"±MaxFloat32", []float32{maxF, -maxF, maxF, -maxF}, 1, [][]int32{{0, 2}, {1, 3}}, 4, nil},
		{"±MaxFloat32 overflowing", []float32{maxF, -maxF, maxF, -maxF}, 0.5, [][]int32{{0, 2}, {1, 3}}, 4,
			[]float64{nan, nan, -inf, -inf}},
		{"-MaxFloat32 underflowing", []float32{-maxF, -maxF, -maxF, -maxF}, 0.25, [][]int32{{0, 1, 2, 3}}, 24,
			[]float64{nan, nan, nan, nan}},
		{"underflows beside a finite value", []float32{-maxF, 1, -maxF, float32(-inf)}, 0.25, [][]int32{{1}, {0, 2}, {-1}}, 2,
			[]float64{0, -inf, -inf, -inf}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(23, uint64(len(c.name))))
			p := &problem{d: abi.F32, vocab: len(c.row), stride: len(c.row)}
			for y := range draws {
				p.rows = append(p.rows, slices.Clone(c.row))
				p.params = append(p.params, abi.RowParams{Row: uint32(y), Temperature: c.temp, Seed: r.Uint64(),
					Step: r.Uint64(), TopN: uint32(len(c.row)), Flags: abi.FlagPerturbed})
			}
			sampled := p.run(t, gumbelArgmaxKernel(abi.F32, true), 1, onDevice, r)
			var first *topnBuffers
			for _, s := range []int{1, 3} {
				b := p.runTopN(t, abi.F32, s, 256, onDevice, r)
				p.checkTopN(t, b, fmt.Sprintf("S=%d", s))
				if first != nil {
					require.Equal(t, first.outTokens, b.outTokens, "S=%d", s)
					continue
				}
				first = b
				orders := map[string]bool{}
				for y := range draws {
					list := b.outTokens[y*abi.MaxTopN : y*abi.MaxTopN+len(c.row)]
					require.Equal(t, sampled.tokens[y], list[0], "row %d: entry 0 is the sample", y)
					at := 0
					for _, g := range c.groups {
						require.ElementsMatch(t, g, list[at:at+len(g)], "row %d: %v", y, list)
						at += len(g)
					}
					orders[fmt.Sprint(list)] = true
					for j, want := range c.values {
						requireClose(t, want, b.outValues[y*abi.MaxTopN+j], "row %d entry %d", y, j)
					}
				}
				require.Len(t, orders, c.orders, "the lists seen: %v", orders)
			}
		})
	}
}
