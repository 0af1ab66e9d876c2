package emu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// This file tests gumbel_argmax's skipping on rows where it decides most of the work: strong logits inside one block's chunk only,
// flat rows whose winner the noise alone picks, and blocks with no finite logit at all.

// chunkOf returns block k's chunk [start, end) of a row of vocab elements split over
// blocks blocks, as gumbel_argmax cuts it (ABI.md: a multiple of 4 elements per block).
func chunkOf(vocab, blocks, k int) (start, end int) {
	per := (vocab + blocks - 1) / blocks
	per = (per + 3) &^ 3
	return min(k*per, vocab), min((k+1)*per, vocab)
}

// skipRow makes one row of a skipping workload for a launch of the given shape.
type skipRow func(r *rand.Rand, vocab, blocks int) []float32

// bodyRow is an LLM-shaped body: normal logits of standard deviation 2.5.
func bodyRow(r *rand.Rand, vocab int) []float32 {
	row := make([]float32, vocab)
	for i := range row {
		row[i] = float32(r.NormFloat64() * 2.5)
	}
	return row
}

// strongInOneBlock puts up to eight strong logits (12 to 18) in one block's chunk; the
// other blocks hold only the body, so their bound comes from the body alone.
func strongInOneBlock(r *rand.Rand, vocab, blocks int) []float32 {
	row := bodyRow(r, vocab)
	start, end := chunkOf(vocab, blocks, r.IntN(blocks))
	for range 1 + r.IntN(8) {
		row[start+r.IntN(end-start)] = 12 + 6*r.Float32()
	}
	return row
}

// flatRow is constant or nearly so: every element is a candidate and the noise decides.
func flatRow(r *rand.Rand, vocab, _ int) []float32 {
	row := make([]float32, vocab)
	c := float32(r.NormFloat64() * 4)
	spread := []float64{0, 0, 1e-3, 0.05}[r.IntN(4)]
	for i := range row {
		row[i] = c + float32(r.NormFloat64()*spread)
	}
	return row
}

// negInfBlocks leaves whole blocks at -Inf (all but one, or every other one); one block
// may hold a single finite logit among -Inf.
func negInfBlocks(r *rand.Rand, vocab, blocks int) []float32 {
	row := strongInOneBlock(r, vocab, blocks)
	keep := r.IntN(blocks)
	every := r.IntN(2) == 0
	for k := range blocks {
		if k == keep || (every && k%2 == 0) {
			continue
		}
		start, end := chunkOf(vocab, blocks, k)
		for i := start; i < end; i++ {
			row[i] = float32(math.Inf(-1))
		}
	}
	if r.IntN(3) == 0 {
		start, end := chunkOf(vocab, blocks, keep)
		if end > start {
			for i := start; i < end; i++ {
				row[i] = float32(math.Inf(-1))
			}
			row[start+r.IntN(end-start)] = float32(r.NormFloat64())
		}
	}
	return row
}

// skipLaunches is the skipping workload: each row shape on split and unsplit launches of
// every emulated warp width, f32 and bf16, at sampling temperatures only.
func skipLaunches(r *rand.Rand) []*launch {
	shapes := []struct {
		name string
		row  skipRow
	}{{"strong in one block", strongInOneBlock}, {"flat", flatRow}, {"-Inf blocks", negInfBlocks}}
	widths := [][2]int{{16, 8}, {32, 16}, {64, 32}, {128, 64}}
	temps := []float32{0.25, 0.8, 1, 1.8}
	var ls []*launch
	for _, sh := range shapes {
		for _, blocks := range []int{1, 2, 3} {
			w := widths[r.IntN(len(widths))]
			dt := []int{dtF32, dtF32, dtBF16}[r.IntN(3)]
			vocab := []int{1501, 4099}[r.IntN(2)]
			l := &launch{kernel: kernelGumbel, dtype: dt, gridX: blocks, block: w[0], warp: w[1],
				vocab: vocab, stride: vocab, slack: r.IntN(16), slots: 5}
			l.name = fmt.Sprintf("gumbel %s dtype=%d S=%d V=%d T=%d warp=%d", sh.name, dt, blocks, vocab, w[0], w[1])
			l.logits = make([]byte, l.slots*l.stride*l.elemSize())
			for s := range l.slots {
				for i, v := range sh.row(r, vocab, blocks) {
					l.store(s*l.stride+i, v)
				}
			}
			l.rows(r, func(p *rowParams) { p.Temperature = temps[r.IntN(len(temps))] })
			ls = append(ls, l)
		}
	}
	return ls
}

// TestGumbelSkippingMatchesGoEdition runs the skipping workload and requires the Go
// edition's tokens.
func TestGumbelSkippingMatchesGoEdition(t *testing.T) {
	ls := skipLaunches(rand.New(rand.NewPCG(20261130, 1)))
	job := encodeJob(t, ls)
	rows := 0
	for _, l := range ls {
		rows += len(l.params)
	}
	got := decodeResults(t, runDriver(t, job), ls)
	seen, kinds := matchGo(t, ls, got)
	// Every row holds a finite logit and a sampling temperature.
	require.Equal(t, [4]int{rows, 0, 0, 0}, seen, "rows by status")
	require.Positive(t, kinds["gumbel"])
	require.Positive(t, kinds["gumbel split"])
}

// TestFlatRowsAreDecidedByNoise proves that the flat rows of the skipping workload test
// the noise: their winners spread over the vocabulary instead of sitting on one element.
func TestFlatRowsAreDecidedByNoise(t *testing.T) {
	ls := skipLaunches(rand.New(rand.NewPCG(20261130, 1)))
	got := decodeResults(t, runDriver(t, encodeJob(t, ls)), ls)
	tokens := map[int32]bool{}
	for i, l := range ls {
		if !strings.Contains(l.name, " flat ") {
			continue
		}
		for _, p := range l.params {
			tokens[got[i].tokens[p.Row]] = true
		}
	}
	require.Greater(t, len(tokens), 8, "distinct winners of the flat rows")
}
