package gokernel

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/gumbel-go/gumbel/runtime"
)

// TestRoutedRowsAreLeftAlone: a routed batch launched on both kernels. Each kernel
// samples its own rows and leaves the other's entirely alone: no token, status or
// record, no count, no step, no counter.
func TestRoutedRowsAreLeftAlone(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 15))
	const v = 300
	for _, draws := range []int{1, 2} {
		for trial := range 8 {
			p := randomProblem(r, abi.F32, v, llmRow, categoricalParams(v))
			randomInputs(r, p)
			p.draws = draws
			for y := range p.params {
				p.params[y].Flags |= abi.FlagRouted | abi.FlagLogprobs | abi.FlagAdvance | abi.FlagRecord
				if r.IntN(2) == 0 {
					p.params[y].Flags |= abi.FlagCategorical
				}
			}
			for _, categorical := range []bool{false, true} {
				fn, s := gumbelArgmaxKernel(abi.F32, true), 3
				if categorical {
					fn, s = categoricalKernel(abi.F32), 1
				}
				b := p.layout(s)
				before := *b
				before.params, before.counts = slices.Clone(b.params), slices.Clone(b.counts)
				before.logprobs = slices.Clone(b.logprobs)
				launch(t, fn, runtime.Dim3{X: s, Y: len(p.params), Z: draws}, b.args(p.stride, p.vocab), launchOrder(r.IntN(3)), r)
				for y, rp := range p.params {
					mine := rp.Flags&abi.FlagCategorical != 0 == categorical
					what := fmt.Sprintf("trial %d D=%d categorical=%v launch row %d", trial, draws, categorical, y)
					param := func(b []byte) []byte { return b[y*abi.RowParamsSize : (y+1)*abi.RowParamsSize] }
					counts := func(b []uint32) []uint32 { return b[int(rp.Row)*v : int(rp.Row+1)*v] }
					for z := range draws {
						o := int(rp.Row)*draws + z
						if mine {
							tok, status := refSample(categorical, p.rows[rp.Row][:v], rp, p.inputs(rp.Row), z)
							require.Equal(t, status, b.status[o], what)
							require.Equal(t, tok, b.tokens[o], what)
						} else {
							require.Equal(t, abi.Status(untouched), b.status[o], what)
							require.Equal(t, int32(untouched), b.tokens[o], what)
							require.Equal(t, before.logprobs[abi.RecordWords*o:abi.RecordWords*(o+1)], b.logprobs[abi.RecordWords*o:abi.RecordWords*(o+1)], what)
						}
					}
					if mine && !refBadTemperature(rp.Temperature) {
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
