package mslemu

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/gumbel-go/gumbel/kernelsrc/gokernel"
)

// TestTopNMatchesGoEdition runs topn in the emulator over every dtype, threadgroups of 32,
// 256 and 1024, 1, 3 and 16 threadgroups per row and SIMD widths of 8 to 64, with and
// without PERTURBED, with processors, bad N and reserved flags. Tokens must equal the Go
// edition's and values agree within recordTolerance.
func TestTopNMatchesGoEdition(t *testing.T) {
	bin := buildDriver(t)
	r := rand.New(rand.NewPCG(2026, 8))
	var cases []*launchCase
	add := func(dtype, T, S, width int) {
		v := vocabs[r.IntN(len(vocabs))]
		c := newFeatureCase(r, featureCaseName(topN, dtype, T, S, 1, v, width), topN, dtype, T, S, 1, 5, v)
		c.simdWidth = width
		cases = append(cases, c)
	}
	for dtype := range abi.Suffixes {
		for _, T := range []int{32, 256, 1024} {
			for _, S := range []int{1, 3, 16} {
				add(dtype, T, S, 0)
			}
		}
	}
	for _, width := range []int{8, 16, 64} {
		for _, T := range []int{64, 512} {
			add(0, T, 3, width)
		}
	}
	got := runDriver(t, bin, cases)
	kernels := gokernel.Kernels()
	var values int
	var worst float64
	for i, c := range cases {
		want := runGoEdition(t, c, kernels, r)
		n, w := compareOutputs(t, c, want, got[i])
		values += n
		worst = max(worst, w)
	}
	t.Logf("%d launches: %d topn values compared, largest deviation %.3g of the normaliser", len(cases), values, worst)
	assert.Greater(t, values, 1500, "too few topn values compared")
}
