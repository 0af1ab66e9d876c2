package mslemu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/gumbel-go/gumbel/kernelsrc/gokernel"
)

// TestExactScoresMatchGoEdition: Gumbel rows whose |x'/T| reaches the float32 score's
// limits (huge constant rows, a tie of two logits at tiny temperatures, values near
// ±MaxFloat32, rows huge in part), where threadgroups find their winners by the exact
// comparison (ABI.md, "Exact scores"), give the Go edition's tokens and statuses in the
// emulated Metal edition, one threadgroup and several, one and several draws.
func TestExactScoresMatchGoEdition(t *testing.T) {
	bin := buildDriver(t)
	r := rand.New(rand.NewPCG(2026, 21))
	shapes := []func(v int) []float32{
		func(v int) []float32 { return constant(v, []float32{1e7, -1e9, 3e38, 6e4}[r.IntN(4)]) },
		func(v int) []float32 {
			row := constant(v, 1)
			row[r.IntN(v)], row[r.IntN(v)] = 25, 25
			return row
		},
		func(v int) []float32 {
			row := make([]float32, v)
			for i := range row {
				row[i] = float32(math.MaxFloat32) * float32(1-r.Float64()*1e-6) * []float32{1, -1}[r.IntN(2)]
			}
			return row
		},
		func(v int) []float32 {
			row := constant(v, 0)
			for i := range row {
				row[i] = float32(r.NormFloat64())
			}
			for i := range v / 3 {
				row[i] = 6e4 - float32(r.IntN(3))
			}
			return row
		},
	}
	temps := []float32{1, 0.3, 1e-3, 1e-5, 1e-7, 1e-30}
	var cases []*launchCase
	for dtype := range abi.Suffixes {
		for _, S := range []int{1, 3, 16} {
			v := []int{33, 1000, 4099}[r.IntN(3)]
			c := newCase(r, fmt.Sprintf("exact%s/S=%d/V=%d", abi.Suffixes[dtype], S, v), gumbelArgmax, dtype, 64, S, 7, v)
			c.draws = 1 + r.IntN(2)
			esize := len(c.logits) / ((c.outRows-1)*c.stride + v)
			for row := range c.outRows {
				if r.IntN(5) != 0 {
					encodeRow(dtype, shapes[r.IntN(len(shapes))](v), c.logits[row*c.stride*esize:])
				}
			}
			for y := range c.launchRows() {
				p := c.rowParams(y)
				p.Temperature = temps[r.IntN(len(temps))]
				c.setRowParams(y, p)
			}
			cases = append(cases, c)
		}
	}
	got := runDriver(t, bin, cases)
	kernels := gokernel.Kernels()
	var statuses [4]int
	for i, c := range cases {
		want := runGoEdition(t, c, kernels, r)
		assert.Equal(t, want.tokens, got[i].tokens, "%s: tokens", c.name)
		assert.Equal(t, want.status, got[i].status, "%s: status", c.name)
		assert.Zero(t, got[i].countersLeft, "%s: counters not left at zero", c.name)
		for _, st := range want.status {
			if st >= 0 && st < 4 {
				statuses[st]++
			}
		}
	}
	t.Logf("%d cases; slots by status %v", len(cases), statuses)
	require.Greater(t, statuses[0], 40, "too few sampled slots")
}

func constant(v int, c float32) []float32 {
	row := make([]float32, v)
	for i := range row {
		row[i] = c
	}
	return row
}
