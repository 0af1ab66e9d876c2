package gokernel

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/gumbel-go/gumbel/runtime"
)

// TestLaunchesAllocateNothing: once warm, launches that use every row feature
// (processors, draws, ADVANCE, RECORD, LOGPROBS, split partials, topn), or masks alone
// (the masks' own paths), allocate nothing on the Go heap.
func TestLaunchesAllocateNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector")
	}
	const v, draws, split = 3000, 2, 4
	r := rand.New(rand.NewPCG(41, 41))
	mod, err := testDevice.Load(&runtime.Program{Name: "alloc", Go: Kernels()})
	require.NoError(t, err)
	for _, c := range []struct {
		family string
		d      abi.DType
		grid   runtime.Dim3
		p      abi.RowParams
		// masksOnly: MASK and BITMASK (and ADVANCE) instead of every feature.
		masksOnly bool
	}{
		{abi.GumbelArgmax, abi.F32, runtime.Dim3{X: split, Y: 3, Z: draws}, abi.RowParams{Temperature: 0.8}, false},
		{abi.GumbelArgmax, abi.BF16, runtime.Dim3{X: 1, Y: 3, Z: draws}, abi.RowParams{}, false},
		{abi.Categorical, abi.F16, runtime.Dim3{X: 1, Y: 3, Z: draws}, abi.RowParams{Temperature: 0.8, TopK: 40, TopP: 0.9}, false},
		{abi.Categorical, abi.F32, runtime.Dim3{X: 1, Y: 3, Z: draws}, abi.RowParams{Temperature: 0.8, TopP: 0.9}, false},
		{abi.Filtered, abi.F32, runtime.Dim3{X: 1, Y: 3, Z: draws}, abi.RowParams{Temperature: 0.8, TopP: 0.95, MinP: 0.01}, false},
		{abi.TopN, abi.F32, runtime.Dim3{X: split, Y: 3, Z: 1}, abi.RowParams{Temperature: 0.8, TopN: 20}, false},
		{abi.GumbelArgmax, abi.F32, runtime.Dim3{X: split, Y: 3, Z: draws}, abi.RowParams{}, true},
		{abi.GumbelArgmax, abi.F32, runtime.Dim3{X: 1, Y: 3, Z: draws}, abi.RowParams{Temperature: 0.8}, true},
		{abi.Categorical, abi.F32, runtime.Dim3{X: 1, Y: 3, Z: draws}, abi.RowParams{Temperature: 0.8, TopK: 40, TopP: 0.9}, true},
	} {
		kernel := abi.KernelName(c.family, c.d)
		p := &problem{d: c.d, vocab: v, stride: v, draws: c.grid.Z}
		for row := range 3 {
			p.rows = append(p.rows, llmRow(r, v))
			rp := c.p
			rp.Row = uint32(row)
			p.params = append(p.params, rp)
		}
		randomInputs(r, p)
		for y := range p.params {
			p.params[y].Flags = abi.FlagBias | abi.FlagMask | abi.FlagBitmask | abi.FlagPenalties | abi.FlagLogprobs | abi.FlagAdvance | abi.FlagRecord | abi.FlagPerturbed
			if c.masksOnly {
				p.params[y].Flags = abi.FlagMask | abi.FlagBitmask | abi.FlagAdvance
			}
			p.params[y].BitmaskRow = uint32(y % len(p.bitmask))
			p.params[y].RepetitionPenalty = 1.2
		}
		for _, m := range append(p.mask, p.bitmask...) {
			for i := range m {
				m[i] = 0xFFFF0FFF
			}
		}
		b := p.layout(c.grid.X)
		args := b.args(p.stride, p.vocab)
		if c.family == abi.TopN {
			// topn writes its lists over tokens and status: give it room for 20 a row.
			args = b.topnArgs(p.stride, p.vocab, make([]int32, abi.TopNSlots(3)), make([]float32, abi.TopNSlots(3)))
		}
		k, err := mod.Kernel(kernel)
		require.NoError(t, err)
		s := testDevice.DefaultStream()
		launch := func() {
			if err := s.Launch(k, c.grid, runtime.Dim3{X: 1024, Y: 1, Z: 1}, args); err != nil {
				panic(err)
			}
		}
		launch() // warm the scratch (AllocsPerRun adds one more warm-up run)
		assert.Zero(t, testing.AllocsPerRun(20, launch), kernel)
		if c.family != abi.TopN {
			for o, st := range b.status {
				assert.Equal(t, abi.StatusOK, st, "%s: status of slot %d", kernel, o)
			}
			assert.Equal(t, p.params[0].Step+uint64(22*draws), b.stepOf(0), "%s: the step advances", kernel)
		}
	}
}
