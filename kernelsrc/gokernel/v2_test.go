package gokernel

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/runtime"
)

// Tests of ABI version 2: processors, draws, ADVANCE, RECORD, ROUTED and the
// log-probability record. topn has its own file.

// randomInputs gives each logits row a random mix of bias, counts and mask, and each
// launch row the flags and penalty values that use them.
func randomInputs(r *rand.Rand, p *problem) {
	v := p.vocab
	p.bias, p.counts, p.mask = make([][]float32, len(p.rows)), make([][]uint32, len(p.rows)), make([][]uint32, len(p.rows))
	for row := range p.rows {
		bias := make([]float32, v)
		for range 1 + r.IntN(4) {
			bias[r.IntN(v)] = pick[float32](r, -100, -3, 2.5, 8, 30)
		}
		counts := make([]uint32, v)
		for range r.IntN(v/2 + 1) {
			i := r.IntN(v)
			counts[i] = uint32(r.IntN(4))
			if r.IntN(3) == 0 {
				counts[i] |= 1 << 31 // a prompt token
			}
		}
		mask := make([]uint32, (v+31)/32)
		switch r.IntN(4) {
		case 0: // every token allowed
			for i := range mask {
				mask[i] = math.MaxUint32
			}
		case 1: // a single allowed token
			i := r.IntN(v)
			mask[i/32] = 1 << (i % 32)
		case 2: // nothing allowed
		default:
			for i := range mask {
				mask[i] = r.Uint32()
			}
		}
		p.bias[row], p.counts[row], p.mask[row] = bias, counts, mask
	}
	for y := range p.params {
		rp := &p.params[y]
		rp.flags |= uint32(r.IntN(8)) * FlagBias // some subset of BIAS, MASK, PENALTIES
		rp.repetition = pick[float32](r, 1, 1.3, 0.7)
		rp.frequency = pick[float32](r, 0, 0.5, -0.25)
		rp.presence = pick[float32](r, 0, 1.5, -1)
	}
}

// TestProcessedMatchesReference: bias, penalties and masks on the greedy, Gumbel and
// categorical paths, against the reference applied to the float64-rounded processed
// row.
func TestProcessedMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 11))
	for _, categorical := range []bool{false, true} {
		for _, d := range dtypes {
			for _, shape := range rowShapes {
				for _, v := range []int{1, 5, 64, 257, 1500} {
					t.Run(fmt.Sprintf("categorical=%v/%s/%s/V=%d", categorical, d, shape.name, v), func(t *testing.T) {
						for _, s := range []int{1, 3, 64} {
							params, fn := gumbelParams, gumbelKernel(d, r.IntN(2) == 0)
							if categorical {
								params, fn, s = categoricalParams(v), categoricalKernel(d), 1
							}
							p := randomProblem(r, d, v, shape.make, params)
							randomInputs(r, p)
							order := launchOrder(r.IntN(3))
							b := p.run(t, fn, s, order, r)
							p.checkV2(t, b, categorical, fmt.Sprintf("S=%d %s", s, order))
						}
					})
				}
			}
		}
	}
}

// checkV2 compares every slot of every launch row with the reference: token, status,
// record; slots no launch row names stay untouched.
func (p *problem) checkV2(t testing.TB, b *buffers, categorical bool, what string) {
	t.Helper()
	nd := p.numDraws()
	named := make([]bool, len(b.tokens))
	for y, rp := range p.params {
		for z := range nd {
			o := int(rp.row)*nd + z
			named[o] = true
			in := p.inputs(rp.row)
			row := p.rows[rp.row][:p.vocab]
			tok, status := refSample(categorical, row, rp, in, z)
			where := fmt.Sprintf("%s: launch row %d (row %d, draw %d, flags %#x, %+v)", what, y, rp.row, z, rp.flags, rp)
			require.Equal(t, status, b.status[o], "status: %s", where)
			require.Equal(t, tok, b.tokens[o], "token: %s", where)
			rec := b.logprobs[4*o : 4*o+4]
			switch {
			case rp.flags&FlagLogprobs == 0:
				require.Equal(t, []float32{untouchedRecord, untouchedRecord, untouchedRecord, untouchedRecord}, rec, "record without LOGPROBS: %s", where)
			case status != StatusOK:
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
			require.Equal(t, int32(untouched), b.status[o], "%s: slot %d is named by no launch row", what, o)
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

// TestLogprobRecords: the record of every route and dtype, single-block and split,
// with and without processors, against float64 log-softmaxes.
func TestLogprobRecords(t *testing.T) {
	r := rand.New(rand.NewPCG(12, 12))
	for _, categorical := range []bool{false, true} {
		for _, d := range dtypes {
			for _, shape := range rowShapes {
				for _, v := range []int{1, 7, 300, 3000} {
					t.Run(fmt.Sprintf("categorical=%v/%s/%s/V=%d", categorical, d, shape.name, v), func(t *testing.T) {
						for _, s := range []int{1, 4, 33} {
							params, fn := gumbelParams, gumbelKernel(d, true)
							if categorical {
								params, fn, s = categoricalParams(v), categoricalKernel(d), 1
							}
							p := randomProblem(r, d, v, shape.make, params)
							if r.IntN(2) == 0 {
								randomInputs(r, p)
							}
							for y := range p.params {
								p.params[y].flags |= FlagLogprobs
							}
							p.draws = pick(r, 1, 1, 2)
							b := p.run(t, fn, s, launchOrder(r.IntN(3)), r)
							p.checkV2(t, b, categorical, fmt.Sprintf("S=%d D=%d", s, p.draws))
						}
					})
				}
			}
		}
	}
}

// TestLogprobsHandCases pins the record with rows whose log-softmax is known in closed
// form.
func TestLogprobsHandCases(t *testing.T) {
	inf := float32(math.Inf(1))
	ln := func(x float64) float64 { return math.Log(x) }
	cases := []struct {
		name string
		row  []float32
		p    refParams
		bias []float32
		want [4]float64 // for the greedy token
	}{
		{"uniform", []float32{0, 0, 0, 0}, refParams{}, nil, [4]float64{-ln(4), -ln(4), ln(4), ln(4)}},
		{"one -Inf", []float32{1, -inf, 1}, refParams{}, nil, [4]float64{-ln(2), -ln(2), 1 + ln(2), 1 + ln(2)}},
		{"bias moves only the processed side", []float32{0, 0}, refParams{flags: FlagBias}, []float32{0, -inf},
			[4]float64{-ln(2), 0, ln(2), 0}},
	}
	for _, c := range cases {
		for _, d := range dtypes {
			t.Run(c.name+"/"+d.String(), func(t *testing.T) {
				p := &problem{d: d, vocab: len(c.row), stride: len(c.row), rows: [][]float32{slices.Clone(c.row)}, params: []refParams{c.p}}
				p.params[0].flags |= FlagLogprobs
				if c.bias != nil {
					p.bias = [][]float32{c.bias}
				}
				for _, s := range []int{1, 2} {
					b := p.run(t, gumbelKernel(d, true), s, onDevice, nil)
					require.Equal(t, StatusOK, b.status[0])
					for k, w := range c.want {
						requireClose(t, w, b.logprobs[k], "word %d, S=%d", k, s)
					}
				}
			})
		}
	}
}

// TestDrawsAreSeparateCalls: a launch of D draws gives each slot exactly what a one-draw
// launch at step + z gives (tokens, status and record), on both kernels.
func TestDrawsAreSeparateCalls(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 13))
	for _, categorical := range []bool{false, true} {
		for _, d := range dtypes {
			for _, v := range []int{3, 200, 2000} {
				t.Run(fmt.Sprintf("categorical=%v/%s/V=%d", categorical, d, v), func(t *testing.T) {
					for _, s := range []int{1, 5} {
						params, fn := gumbelParams, gumbelKernel(d, true)
						if categorical {
							params, fn, s = categoricalParams(v), categoricalKernel(d), 1
						}
						p := randomProblem(r, d, v, llmRow, params)
						randomInputs(r, p)
						for y := range p.params {
							p.params[y].flags |= FlagLogprobs
							if r.IntN(3) == 0 {
								p.params[y].step = math.MaxUint64 - 1 // the draws wrap around
							}
						}
						p.draws = 4
						all := p.run(t, fn, s, launchOrder(r.IntN(3)), r)
						for z := range p.draws {
							one := *p
							one.draws = 1
							one.params = slices.Clone(p.params)
							for y := range one.params {
								one.params[y].step += uint64(z)
							}
							b := one.run(t, fn, s, onDevice, r)
							for _, rp := range p.params {
								o := int(rp.row)*p.draws + z
								require.Equal(t, b.tokens[rp.row], all.tokens[o], "draw %d of row %d: token", z, rp.row)
								require.Equal(t, b.status[rp.row], all.status[o], "draw %d of row %d: status", z, rp.row)
								require.Equal(t, bitsOf(b.logprobs[4*rp.row:4*rp.row+4]), bitsOf(all.logprobs[4*o:4*o+4]),
									"draw %d of row %d: record", z, rp.row)
							}
						}
						p.checkV2(t, all, categorical, fmt.Sprintf("S=%d", s))
					}
				})
			}
		}
	}
}

func bitsOf(fs []float32) []uint32 {
	out := make([]uint32, len(fs))
	for i, f := range fs {
		out[i] = math.Float32bits(f)
	}
	return out
}

// stepOf reads launch row y's step back from the params buffer.
func (b *buffers) stepOf(y int) uint64 {
	w := b.params[y*paramsBytes:]
	return uint64(binary.LittleEndian.Uint32(w[16:])) | uint64(binary.LittleEndian.Uint32(w[20:]))<<32
}

// TestAdvanceAndRecord runs a decode loop of launches on the same buffers, with ADVANCE,
// RECORD and PENALTIES set, against a host loop that does the same work by hand: each
// launch must see the step and counts the previous one left.
func TestAdvanceAndRecord(t *testing.T) {
	r := rand.New(rand.NewPCG(14, 14))
	for _, categorical := range []bool{false, true} {
		for _, draws := range []int{1, 3} {
			for _, s := range []int{1, 4} {
				if categorical && s > 1 {
					continue
				}
				t.Run(fmt.Sprintf("categorical=%v/D=%d/S=%d", categorical, draws, s), func(t *testing.T) {
					const v = 40
					params, fn := gumbelParams, gumbelKernel(f32, true)
					if categorical {
						params, fn = categoricalParams(v), categoricalKernel(f32)
					}
					p := randomProblem(r, f32, v, tiedRow, params)
					randomInputs(r, p)
					p.draws = draws
					for y := range p.params {
						rp := &p.params[y]
						rp.flags |= FlagAdvance | FlagRecord | FlagPenalties | FlagLogprobs
						rp.repetition, rp.frequency, rp.presence = 1.5, 0.7, 0.3
						if y == 0 {
							rp.counts0Saturated(p, r) // one count already at the limit
						}
					}
					b := p.layout(s)
					args := b.args(p.stride, p.vocab)
					grid := runtime.Dim3{X: s, Y: len(p.params), Z: draws}
					// The host's copy of the state.
					steps := make([]uint64, len(p.params))
					for y, rp := range p.params {
						steps[y] = rp.step
					}
					counts := make([][]uint32, len(p.rows))
					for row := range counts {
						counts[row] = slices.Clone(b.counts[row*v : (row+1)*v])
					}
					for launchNo := range 6 {
						for o := range b.tokens {
							b.tokens[o], b.status[o] = untouched, untouched
						}
						launch(t, fn, grid, args, launchOrder(r.IntN(3)), r)
						for y, rp := range p.params {
							rp.step = steps[y]
							in := p.inputs(rp.row)
							in.counts = counts[rp.row]
							row := p.rows[rp.row][:v]
							advanced := false
							var drawn []int32
							for z := range draws {
								o := int(rp.row)*draws + z
								tok, status := refSample(categorical, row, rp, in, z)
								where := fmt.Sprintf("launch %d, launch row %d, draw %d", launchNo, y, z)
								require.Equal(t, status, b.status[o], "status: "+where)
								require.Equal(t, tok, b.tokens[o], "token: "+where)
								if status == StatusOK {
									want := refRecord(categorical, row, rp, in, z, tok)
									requireClose(t, want[1], b.logprobs[4*o+1], "processed log-probability: "+where)
									drawn = append(drawn, tok)
								}
								advanced = status != StatusBadParams
							}
							for _, tok := range drawn {
								if c := &counts[rp.row][tok]; *c&0x7FFFFFFF != 0x7FFFFFFF {
									*c++
								}
							}
							if advanced {
								steps[y] += uint64(draws)
							}
							require.Equal(t, steps[y], b.stepOf(y), "step of launch row %d after launch %d", y, launchNo)
						}
						for row := range counts {
							require.Equal(t, counts[row], b.counts[row*v:(row+1)*v], "counts of row %d after launch %d", row, launchNo)
						}
						for i, c := range b.counters {
							require.Zero(t, c, "counters[%d] after launch %d", i, launchNo)
						}
					}
				})
			}
		}
	}
}

// counts0Saturated sets one of the row's counts to the saturation limit, with and
// without the prompt bit, so that RECORD must leave it alone.
func (rp *refParams) counts0Saturated(p *problem, r *rand.Rand) {
	c := p.counts[rp.row]
	for i := range c {
		if r.IntN(2) == 0 {
			c[i] = 0x7FFFFFFF | uint32(r.IntN(2))<<31
		}
	}
}

// TestRoutedRowsAreLeftAlone: a routed batch launched on both kernels. Each kernel
// samples its own rows and leaves the other's entirely alone: no token, status or
// record, no count, no step, no counter.
func TestRoutedRowsAreLeftAlone(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 15))
	const v = 300
	for _, draws := range []int{1, 2} {
		for trial := range 8 {
			p := randomProblem(r, f32, v, llmRow, categoricalParams(v))
			randomInputs(r, p)
			p.draws = draws
			for y := range p.params {
				p.params[y].flags |= FlagRouted | FlagLogprobs | FlagAdvance | FlagRecord
				if r.IntN(2) == 0 {
					p.params[y].flags |= FlagCategorical
				}
			}
			for _, categorical := range []bool{false, true} {
				fn, s := gumbelKernel(f32, true), 3
				if categorical {
					fn, s = categoricalKernel(f32), 1
				}
				b := p.layout(s)
				before := *b
				before.params, before.counts = slices.Clone(b.params), slices.Clone(b.counts)
				before.logprobs = slices.Clone(b.logprobs)
				launch(t, fn, runtime.Dim3{X: s, Y: len(p.params), Z: draws}, b.args(p.stride, p.vocab), launchOrder(r.IntN(3)), r)
				for y, rp := range p.params {
					mine := rp.flags&FlagCategorical != 0 == categorical
					what := fmt.Sprintf("trial %d D=%d categorical=%v launch row %d", trial, draws, categorical, y)
					param := func(b []byte) []byte { return b[y*paramsBytes : (y+1)*paramsBytes] }
					counts := func(b []uint32) []uint32 { return b[int(rp.row)*v : int(rp.row+1)*v] }
					for z := range draws {
						o := int(rp.row)*draws + z
						if mine {
							tok, status := refSample(categorical, p.rows[rp.row][:v], rp, p.inputs(rp.row), z)
							require.Equal(t, status, b.status[o], what)
							require.Equal(t, tok, b.tokens[o], what)
						} else {
							require.Equal(t, int32(untouched), b.status[o], what)
							require.Equal(t, int32(untouched), b.tokens[o], what)
							require.Equal(t, before.logprobs[4*o:4*o+4], b.logprobs[4*o:4*o+4], what)
						}
					}
					if mine && !refBadTemperature(rp.temperature) {
						assert.NotEqual(t, param(before.params), param(b.params), "%s: the step advances", what)
					} else {
						require.Equal(t, param(before.params), param(b.params), what)
						require.Equal(t, counts(before.counts), counts(b.counts), what)
					}
				}
				for i, c := range b.counters {
					require.Zero(t, c, "counters[%d]", i)
				}
			}
		}
	}
}

// TestExpNonPositive bounds the log-sum-exps' exp against math.Exp.
func TestExpNonPositive(t *testing.T) {
	r := rand.New(rand.NewPCG(16, 16))
	worst := 0.0
	check := func(d float64) {
		want, got := math.Exp(d), expNonPositive(d)
		if d < -64 {
			require.Zero(t, got, "exp(%g)", d)
			return
		}
		worst = max(worst, math.Abs(got-want)/want)
	}
	for _, d := range []float64{0, -0.0, -1e-300, -0.34657359, -0.34657360, -math.Ln2, -1, -10, -63.999, -64, -64.001, -100, -1e300, math.Inf(-1)} {
		check(d)
	}
	for range 200000 {
		check(-r.ExpFloat64() * 8)
	}
	assert.Less(t, worst, 1e-14, "largest relative error")
	assert.True(t, math.IsNaN(expNonPositive(math.NaN())))
	t.Logf("largest relative error %.3g", worst)
}

// TestLSELogprob checks lse.logprob, the log-probability of a member taken from the set's
// maximum, where float64's v - value() cancels: members at float32's largest values,
// beyond 2^52, as well as ordinary ones and the non-finite sets that follow IEEE
// arithmetic.
func TestLSELogprob(t *testing.T) {
	const big = float32(3e38)
	inf := float32(math.Inf(1))
	cases := []struct {
		name    string
		members []float32
		v       float32
		want    float64
	}{
		{"two members at 3e38", []float32{big, big, -big, 1}, big, -math.Ln2},
		{"one member at 3e38", []float32{big, 5, -big}, big, 0},
		{"small member beside 3e38", []float32{big, 5}, 5, 5 - float64(big)},
		{"four members near 2^60", []float32{1 << 60, 1 << 60, 1 << 60, 1 << 60}, 1 << 60, -math.Log(4)},
		{"ordinary", []float32{0, 1, 2}, 2, 2 - math.Log(math.Exp(0)+math.Exp(1)+math.Exp(2))},
		{"set holding +Inf", []float32{inf, 1}, inf, math.NaN()},
		{"member of an empty set", []float32{float32(math.Inf(-1))}, 0, math.Inf(1)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := emptyLSE
			a.add(c.members)
			got := a.logprob(float64(c.v))
			switch {
			case math.IsNaN(c.want):
				assert.True(t, math.IsNaN(got), "got %v, want NaN", got)
			case math.IsInf(c.want, 0):
				assert.Equal(t, c.want, got)
			default:
				assert.InDelta(t, c.want, got, 1e-12*max(1, math.Abs(c.want)))
			}
		})
	}
}
