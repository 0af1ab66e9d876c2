package gokernel

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestProcessedMatchesReference: bias, penalties and masks on the greedy, Gumbel and
// categorical paths, against the reference applied to the float64-rounded processed
// row.
func TestProcessedMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 11))
	for _, categorical := range []bool{false, true} {
		for _, d := range dtypes {
			for _, shape := range rowShapes {
				for _, v := range []int{1, 5, 64, 257, 1500} {
					t.Run(fmt.Sprintf("categorical=%v/%s/%s/V=%d", categorical, dtypeName(d), shape.name, v), func(t *testing.T) {
						for _, s := range []int{1, 3, 64} {
							params, fn := gumbelParams, gumbelArgmaxKernel(d, r.IntN(2) == 0)
							if categorical {
								params, fn, s = categoricalParams(v), categoricalKernel(d), 1
							}
							p := randomProblem(r, d, v, shape.make, params)
							randomInputs(r, p)
							order := launchOrder(r.IntN(3))
							b := p.run(t, fn, s, order, r)
							p.checkSlots(t, b, categorical, fmt.Sprintf("S=%d %s", s, order))
						}
					})
				}
			}
		}
	}
}
