package gokernel

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/runtime"
)

// TestVersion2LaunchesAllocateNothing: once warm, launches that use every version-2
// feature (processors, draws, ADVANCE, RECORD, LOGPROBS, split partials, topn) allocate
// nothing on the Go heap.
func TestVersion2LaunchesAllocateNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector")
	}
	const v, draws, split = 3000, 2, 4
	r := rand.New(rand.NewPCG(41, 41))
	mod, err := testDevice.Load(&runtime.Program{Name: "alloc", Go: Kernels()})
	require.NoError(t, err)
	for _, c := range []struct {
		kernel string
		grid   runtime.Dim3
		p      refParams
	}{
		{"gumbel_argmax_f32", runtime.Dim3{X: split, Y: 3, Z: draws}, refParams{temperature: 0.8}},
		{"gumbel_argmax_bf16", runtime.Dim3{X: 1, Y: 3, Z: draws}, refParams{}},
		{"categorical_f16", runtime.Dim3{X: 1, Y: 3, Z: draws}, refParams{temperature: 0.8, topK: 40, topP: 0.9}},
		{"topn_f32", runtime.Dim3{X: split, Y: 3, Z: 1}, refParams{temperature: 0.8, topN: 20}},
	} {
		d := map[byte]dtype{'2': f32, '6': f16}[c.kernel[len(c.kernel)-1]]
		if c.kernel[len(c.kernel)-4:] == "bf16" {
			d = bf16
		}
		p := &problem{d: d, vocab: v, stride: v, draws: c.grid.Z}
		for row := range 3 {
			p.rows = append(p.rows, llmRow(r, v))
			rp := c.p
			rp.row = uint32(row)
			p.params = append(p.params, rp)
		}
		randomInputs(r, p)
		for y := range p.params {
			p.params[y].flags = FlagBias | FlagMask | FlagPenalties | FlagLogprobs | FlagAdvance | FlagRecord | FlagPerturbed
			p.params[y].repetition = 1.2
		}
		for row := range p.mask {
			for i := range p.mask[row] {
				p.mask[row][i] = 0xFFFF0FFF
			}
		}
		b := p.layout(c.grid.X)
		args := b.args(p.stride, p.vocab)
		if c.kernel[:4] == "topn" {
			// topn writes its lists over tokens and status: give it room for 20 a row.
			args = b.topnArgs(p.stride, p.vocab, make([]int32, 3*MaxTopN), make([]float32, 3*MaxTopN))
		}
		k, err := mod.Kernel(c.kernel)
		require.NoError(t, err)
		s := testDevice.DefaultStream()
		launch := func() {
			if err := s.Launch(k, c.grid, runtime.Dim3{X: 1024, Y: 1, Z: 1}, args); err != nil {
				panic(err)
			}
		}
		launch() // warm the scratch (AllocsPerRun adds one more warm-up run)
		assert.Zero(t, testing.AllocsPerRun(20, launch), c.kernel)
		if c.kernel[:4] != "topn" {
			for o, st := range b.status {
				assert.Equal(t, StatusOK, st, "%s: status of slot %d", c.kernel, o)
			}
			assert.Equal(t, p.params[0].step+uint64(22*draws), uint64(binary.LittleEndian.Uint32(b.params[16:])), "%s: the step advances", c.kernel)
		}
	}
}
