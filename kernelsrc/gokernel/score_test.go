package gokernel

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/gumbel-go/gumbel/runtime"
)

// TestScoreSplitsAndBadRows: score gives the same rank and status for every split and
// launch order (records to rounding), leaves the counters at zero, and reports status 3
// with a NaN record for a token outside the vocabulary or a reserved flag, beside good
// rows.
func TestScoreSplitsAndBadRows(t *testing.T) {
	r := rand.New(rand.NewPCG(12, 12))
	const v = 700
	fn := func(b *runtime.BlockContext) { score(b, abi.F32) }
	var first *buffers
	for _, s := range []int{1, 2, 7, 64} {
		for _, order := range []launchOrder{onDevice, reversed, shuffled} {
			p := &problem{d: abi.F32, vocab: v, stride: v}
			rr := rand.New(rand.NewPCG(3, 3)) // the same problem every time
			for range 5 {
				p.rows = append(p.rows, llmRow(rr, v))
			}
			p.rows[2][9] = p.rows[2][10] // a tie at the token's logit
			for row, tok := range []uint32{0, 10, 9, v, 33} {
				p.params = append(p.params, abi.RowParams{Row: uint32(row), Temperature: 0.8, Token: tok})
			}
			p.params[4].Flags = 1 << 14
			b := p.run(t, fn, s, order, r)
			for row := range 5 {
				st, tok := b.status[row], b.tokens[row]
				rec := b.logprobs[4*row : 4*row+4]
				if row == 3 || row == 4 {
					assert.Equal(t, abi.StatusBadParams, st, "row %d", row)
					assert.Equal(t, int32(-1), tok)
					assert.True(t, math.IsNaN(float64(rec[0])), "row %d", row)
					continue
				}
				require.Equal(t, abi.StatusOK, st, "row %d", row)
				want := int32(0)
				xt := p.rows[row][p.params[row].Token]
				for _, x := range p.rows[row] {
					if x >= xt {
						want++
					}
				}
				assert.Equal(t, want, tok, "row %d S=%d %v: rank", row, s, order)
				if first == nil {
					continue
				}
				for j := range 4 {
					assert.InDelta(t, first.logprobs[4*row+j], rec[j], 1e-5, "row %d S=%d %v word %d", row, s, order, j)
				}
			}
			if first == nil {
				first = b
			}
		}
	}
}
