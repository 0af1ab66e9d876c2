package mslemu

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
)

// TestDrawsEqualAdvancedLaunches runs the emulated kernels (gumbel_argmax with 3
// threadgroups per row, categorical, and filter_max then filtered with 3) the way a
// captured graph replays them: one launch of D draws (ADVANCE | RECORD | PENALTIES |
// LOGPROBS) must give the same tokens and records as D one-draw launches that each read
// the step the previous one advanced on the device, end with the same step, and add
// every drawn token to the counts once.
func TestDrawsEqualAdvancedLaunches(t *testing.T) {
	bin := buildDriver(t)
	r := rand.New(rand.NewPCG(5, 9))
	const draws = 4
	for _, kernel := range []kernelKind{gumbelArgmax, categorical, filtered} {
		whole := newFeatureCase(r, fmt.Sprintf("whole/%d", kernel), kernel, 0, 256, 3, draws, 4, 1000)
		whole.bias, whole.mask, whole.bitmask = nil, nil, nil
		whole.counts = make([]uint32, whole.outRows*whole.vocab)
		for i := range whole.counts {
			whole.counts[i] = uint32(r.IntN(3)) // penalties that move the draws
		}
		single := *whole
		single.draws = 1
		single.name = fmt.Sprintf("single/%d", kernel)
		single.params = slices.Clone(whole.params)
		for y := range whole.launchRows() {
			p := abi.RowParams{Row: whole.rowParams(y).Row, Temperature: 1.5, Seed: r.Uint64(), Step: r.Uint64(),
				Flags:             abi.FlagAdvance | abi.FlagRecord | abi.FlagPenalties | abi.FlagLogprobs,
				RepetitionPenalty: 1.5, FrequencyPenalty: 0.5, PresencePenalty: 0.25}
			switch kernel {
			case categorical:
				p.TopK = 50
			case filtered:
				p.TopK, p.TopP, p.MinP = 50, 0.9, 0.01
			}
			whole.setRowParams(y, p)
			p.Flags &^= abi.FlagRecord // the one-draw launches keep the counts fixed
			single.setRowParams(y, p)
		}
		got := runDriver(t, bin, []*launchCase{whole})[0]

		wantCounts := slices.Clone(whole.counts)
		var last result
		for z := range draws {
			res := runDriver(t, bin, []*launchCase{&single})[0]
			single.params = res.params
			last = res
			for row := range whole.outRows {
				o := row*draws + z
				assert.Equal(t, res.status[row], got.status[o], "%s: row %d draw %d status", whole.name, row, z)
				assert.Equal(t, res.tokens[row], got.tokens[o], "%s: row %d draw %d token", whole.name, row, z)
				assert.Equal(t, bitsOf(res.logprobs[4*row:4*row+4]), bitsOf(got.logprobs[4*o:4*o+4]),
					"%s: row %d draw %d record", whole.name, row, z)
				if abi.Status(res.status[row]) == abi.StatusOK {
					wantCounts[row*whole.vocab+int(res.tokens[row])]++
				}
			}
		}
		for y := range whole.launchRows() {
			assert.Equal(t, last.rowParams(y).Step, got.rowParams(y).Step, "%s: launch row %d: the step after D draws",
				whole.name, y)
		}
		assert.Equal(t, wantCounts, got.counts, "%s: counts after RECORD", whole.name)
		assert.NotEqual(t, whole.params, got.params, "%s: ADVANCE moved no step", whole.name)
	}
}
