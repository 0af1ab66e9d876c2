package gokernel

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/gumbel-go/gumbel/runtime"
)

// TestStatusCases pins each status code with a hand-written case.
func TestStatusCases(t *testing.T) {
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	cases := []struct {
		name   string
		row    []float32
		p      abi.RowParams
		tok    int32
		status abi.Status
	}{
		{"greedy", []float32{1, 3, 2, 3}, abi.RowParams{}, 1, abi.StatusOK},
		{"greedy ignores -Inf", []float32{-inf, -5, -inf}, abi.RowParams{}, 1, abi.StatusOK},
		{"NaN", []float32{1, nan, 2}, abi.RowParams{Temperature: 1}, -1, abi.StatusNonFinite},
		{"+Inf", []float32{1, inf, 2}, abi.RowParams{Temperature: 1}, -1, abi.StatusNonFinite},
		{"+Inf greedy", []float32{1, inf, 2}, abi.RowParams{}, -1, abi.StatusNonFinite},
		{"all -Inf", []float32{-inf, -inf}, abi.RowParams{Temperature: 1}, -1, abi.StatusNoFinite},
		{"negative temperature", []float32{1, 2}, abi.RowParams{Temperature: -1}, -1, abi.StatusBadParams},
		{"NaN temperature", []float32{1, 2}, abi.RowParams{Temperature: nan}, -1, abi.StatusBadParams},
		{"infinite temperature", []float32{1, 2}, abi.RowParams{Temperature: inf}, -1, abi.StatusBadParams},
		{"temperature whose inverse overflows", []float32{1, 2}, abi.RowParams{Temperature: 1e-40}, -1, abi.StatusBadParams},
		{"sole finite logit", []float32{-inf, -inf, 7, -inf}, abi.RowParams{Temperature: 1, Seed: 3}, 2, abi.StatusOK},
	}
	for _, c := range cases {
		for _, d := range dtypes {
			for _, kernel := range []struct {
				name string
				fn   runtime.GoKernel
			}{{"gumbel_argmax", gumbelArgmaxKernel(d, true)}, {"categorical", categoricalKernel(d)}} {
				t.Run(c.name+"/"+kernel.name+"/"+dtypeName(d), func(t *testing.T) {
					p := &problem{d: d, vocab: len(c.row), stride: len(c.row), rows: [][]float32{slices.Clone(c.row)}, params: []abi.RowParams{c.p}}
					for _, s := range []int{1, 3} {
						b := p.run(t, kernel.fn, s, onDevice, nil)
						assert.Equal(t, c.status, b.status[0], "status, S=%d", s)
						assert.Equal(t, c.tok, b.tokens[0], "token, S=%d", s)
					}
				})
			}
		}
	}
}

// TestLogprobRecords: the record of every route and element type, single-block and split,
// with and without processors, against float64 log-softmaxes.
func TestLogprobRecords(t *testing.T) {
	r := rand.New(rand.NewPCG(12, 12))
	for _, categorical := range []bool{false, true} {
		for _, d := range dtypes {
			for _, shape := range rowShapes {
				for _, v := range []int{1, 7, 300, 3000} {
					t.Run(fmt.Sprintf("categorical=%v/%s/%s/V=%d", categorical, dtypeName(d), shape.name, v), func(t *testing.T) {
						for _, s := range []int{1, 4, 33} {
							params, fn := gumbelParams, gumbelArgmaxKernel(d, true)
							if categorical {
								params, fn, s = categoricalParams(v), categoricalKernel(d), 1
							}
							p := randomProblem(r, d, v, shape.make, params)
							if r.IntN(2) == 0 {
								randomInputs(r, p)
							}
							for y := range p.params {
								p.params[y].Flags |= abi.FlagLogprobs
							}
							p.draws = pick(r, 1, 1, 2)
							b := p.run(t, fn, s, launchOrder(r.IntN(3)), r)
							p.checkSlots(t, b, categorical, fmt.Sprintf("S=%d D=%d", s, p.draws))
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
		p    abi.RowParams
		bias []float32
		want [4]float64 // for the greedy token
	}{
		{"uniform", []float32{0, 0, 0, 0}, abi.RowParams{}, nil, [4]float64{-ln(4), -ln(4), ln(4), ln(4)}},
		{"one -Inf", []float32{1, -inf, 1}, abi.RowParams{}, nil, [4]float64{-ln(2), -ln(2), 1 + ln(2), 1 + ln(2)}},
		{"bias moves only the processed side", []float32{0, 0}, abi.RowParams{Flags: abi.FlagBias}, []float32{0, -inf},
			[4]float64{-ln(2), 0, ln(2), 0}},
	}
	for _, c := range cases {
		for _, d := range dtypes {
			t.Run(c.name+"/"+dtypeName(d), func(t *testing.T) {
				p := &problem{d: d, vocab: len(c.row), stride: len(c.row), rows: [][]float32{slices.Clone(c.row)}, params: []abi.RowParams{c.p}}
				p.params[0].Flags |= abi.FlagLogprobs
				if c.bias != nil {
					p.bias = [][]float32{c.bias}
				}
				for _, s := range []int{1, 2} {
					b := p.run(t, gumbelArgmaxKernel(d, true), s, onDevice, nil)
					require.Equal(t, abi.StatusOK, b.status[0])
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
				t.Run(fmt.Sprintf("categorical=%v/%s/V=%d", categorical, dtypeName(d), v), func(t *testing.T) {
					for _, s := range []int{1, 5} {
						params, fn := gumbelParams, gumbelArgmaxKernel(d, true)
						if categorical {
							params, fn, s = categoricalParams(v), categoricalKernel(d), 1
						}
						p := randomProblem(r, d, v, llmRow, params)
						randomInputs(r, p)
						for y := range p.params {
							p.params[y].Flags |= abi.FlagLogprobs
							if r.IntN(3) == 0 {
								p.params[y].Step = math.MaxUint64 - 1 // the draws wrap around
							}
						}
						p.draws = 4
						all := p.run(t, fn, s, launchOrder(r.IntN(3)), r)
						for z := range p.draws {
							one := *p
							one.draws = 1
							one.params = slices.Clone(p.params)
							for y := range one.params {
								one.params[y].Step += uint64(z)
							}
							b := one.run(t, fn, s, onDevice, r)
							for _, rp := range p.params {
								o := int(rp.Row)*p.draws + z
								require.Equal(t, b.tokens[rp.Row], all.tokens[o], "draw %d of row %d: token", z, rp.Row)
								require.Equal(t, b.status[rp.Row], all.status[o], "draw %d of row %d: status", z, rp.Row)
								require.Equal(t, bitsOf(b.logprobs[abi.RecordWords*rp.Row:abi.RecordWords*(rp.Row+1)]), bitsOf(all.logprobs[abi.RecordWords*o:abi.RecordWords*(o+1)]),
									"draw %d of row %d: record", z, rp.Row)
							}
						}
						p.checkSlots(t, all, categorical, fmt.Sprintf("S=%d", s))
					}
				})
			}
		}
	}
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
					params, fn := gumbelParams, gumbelArgmaxKernel(abi.F32, true)
					if categorical {
						params, fn = categoricalParams(v), categoricalKernel(abi.F32)
					}
					p := randomProblem(r, abi.F32, v, tiedRow, params)
					randomInputs(r, p)
					p.draws = draws
					for y := range p.params {
						rp := &p.params[y]
						rp.Flags |= abi.FlagAdvance | abi.FlagRecord | abi.FlagPenalties | abi.FlagLogprobs
						rp.RepetitionPenalty, rp.FrequencyPenalty, rp.PresencePenalty = 1.5, 0.7, 0.3
						if y == 0 {
							saturateCounts(p, rp.Row, r) // some counts already at the limit
						}
					}
					b := p.layout(s)
					args := b.args(p.stride, p.vocab)
					grid := runtime.Dim3{X: s, Y: len(p.params), Z: draws}
					// The host's copy of the state.
					steps := make([]uint64, len(p.params))
					for y, rp := range p.params {
						steps[y] = rp.Step
					}
					counts := make([][]uint32, len(p.rows))
					for row := range counts {
						counts[row] = slices.Clone(b.counts[row*v : (row+1)*v])
					}
					for launchNo := range 6 {
						for o := range b.tokens {
							b.tokens[o], b.status[o] = untouched, untouched
						}
						order := launchOrder(r.IntN(3))
						launch(t, fn, grid, args, order, r)
						finishExact(t, p.d, b, grid, args, order, r)
						for y, rp := range p.params {
							rp.Step = steps[y]
							in := p.inputs(rp.Row)
							in.counts = counts[rp.Row]
							row := p.rows[rp.Row][:v]
							advanced := false
							var drawn []int32
							for z := range draws {
								o := int(rp.Row)*draws + z
								tok, status := refSample(categorical, row, rp, in, z)
								where := fmt.Sprintf("launch %d, launch row %d, draw %d", launchNo, y, z)
								require.Equal(t, status, b.status[o], "status: "+where)
								require.Equal(t, tok, b.tokens[o], "token: "+where)
								if status == abi.StatusOK {
									want := refRecord(categorical, row, rp, in, z, tok)
									requireClose(t, want[1], b.logprobs[abi.RecordWords*o+1], "processed log-probability: "+where)
									drawn = append(drawn, tok)
								}
								advanced = status != abi.StatusBadParams
							}
							for _, tok := range drawn {
								if c := &counts[rp.Row][tok]; *c&abi.CountMask != abi.CountMask {
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

// saturateCounts sets some of row's counts to the saturation limit, with and without
// the prompt bit, so that RECORD must leave them alone.
func saturateCounts(p *problem, row uint32, r *rand.Rand) {
	c := p.counts[row]
	for i := range c {
		if r.IntN(2) == 0 {
			c[i] = abi.CountMask | uint32(r.IntN(2))<<31
		}
	}
}
