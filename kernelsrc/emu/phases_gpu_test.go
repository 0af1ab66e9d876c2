//go:build gpu

package emu

import (
	"encoding/binary"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/bench"
	"github.com/gumbel-go/gumbel/kernelsrc"
	"github.com/gumbel-go/gumbel/kernelsrc/gokernel"
	"github.com/gumbel-go/gumbel/runtime"
)

// BenchmarkGPUPhases times the phases of one gumbel_argmax_f32 launch (V = 151936,
// LLM-shaped logits, temperature 0.8, with and without log-probabilities, at the split
// policy's blocks per row for batch 1 and 8) from the timestamps a -DGB_TRACE=1 build
// writes (sampling.cu, "GB_TRACE"): where the time of a step goes, and what a feature
// adds to each phase. It needs that build:
//
//	GUMBEL_NVRTC_OPTIONS=-DGB_TRACE=1 kernelsrc_emu.test -test.run '^$' -test.bench GPUPhases
//
// Metrics (medians over the launches): scan-cyc and merge-cyc, a block's scan and block
// merge (median block); arrive-ns, the last block's arrival after the first block's
// start; tail-ns, the draw's end after the last arrival; final-merge-cyc, the finishing
// block's merge of the partials.
func BenchmarkGPUPhases(b *testing.B) {
	if !strings.Contains(os.Getenv("GUMBEL_NVRTC_OPTIONS"), "-DGB_TRACE=1") {
		b.Skip("needs GUMBEL_NVRTC_OPTIONS=-DGB_TRACE=1")
	}
	dev, mod := openCUDA(b)
	k, err := mod.Kernel(kernelNames[kernelGumbel] + kernelsrc.Suffixes[dtF32])
	require.NoError(b, err)
	const vocab = 151936
	for _, c := range []struct{ batch, split int }{{1, 132}, {8, 16}} {
		for _, lp := range []bool{false, true} {
			b.Run(fmt.Sprintf("B=%d/S=%d/logprobs=%v", c.batch, c.split, lp), func(b *testing.B) {
				phases(b, dev, k, c.batch, c.split, vocab, lp)
			})
		}
	}
}

// phases launches the traced kernel b.N times and reports the medians of its phases.
func phases(b *testing.B, dev runtime.Device, k runtime.Kernel, batch, split, vocab int, lp bool) {
	l := &launch{kernel: kernelGumbel, dtype: dtF32, vocab: vocab, stride: vocab, slots: batch,
		gridX: split, gridZ: 1, block: 1024, logprobs: lp}
	l.logits = make([]byte, batch*vocab*4)
	for i, v := range bench.LLMLogits(batch, vocab, 3) {
		l.store(i, v)
	}
	var flags uint32
	if lp {
		flags = gokernel.FlagLogprobs
	}
	l.params = make([]rowParams, batch)
	for y := range l.params {
		l.params[y] = rowParams{row: uint32(y), temperature: 0.8, seed: uint64(y), step: 9, flags: flags}
	}
	s := dev.DefaultStream()
	const traceWords = 8
	blocks, partialWords := batch*split, l.numPartials()
	a, partials, free := deviceArgs(b, dev, l, traceWords*blocks)
	defer free()
	grid, block := runtime.Dim3{X: split, Y: batch, Z: 1}, runtime.Dim3{X: 1024, Y: 1, Z: 1}
	for range 5 { // warm-up
		require.NoError(b, s.Launch(k, grid, block, a))
	}
	raw := make([]byte, 8*traceWords*blocks)
	var scan, merge, arrive, tail, final []float64
	b.ResetTimer()
	for range b.N {
		require.NoError(b, s.Zero(partials, 8*partialWords, len(raw)))
		require.NoError(b, s.Launch(k, grid, block, a))
		require.NoError(b, s.CopyToHost(raw, partials, 8*partialWords))
		require.NoError(b, s.Synchronize())
		word := func(p, i int) float64 { return float64(binary.LittleEndian.Uint64(raw[8*(traceWords*p+i):])) }
		var bs, bm []float64
		first, last, end := word(0, 0), 0.0, 0.0
		for p := range blocks {
			first = min(first, word(p, 0))
			last = max(last, word(p, 4))
			bs = append(bs, word(p, 2)-word(p, 1))
			bm = append(bm, word(p, 3)-word(p, 2))
			if w := word(p, 7); w != 0 {
				end = max(end, w)
				final = append(final, word(p, 6)-word(p, 5))
			}
		}
		require.NotZero(b, end, "no block wrote the end of a draw: is the build traced?")
		scan, merge = append(scan, median(bs)), append(merge, median(bm))
		arrive, tail = append(arrive, last-first), append(tail, end-last)
	}
	b.ReportMetric(median(scan), "scan-cyc")
	b.ReportMetric(median(merge), "merge-cyc")
	b.ReportMetric(median(arrive), "arrive-ns")
	b.ReportMetric(median(tail), "tail-ns")
	b.ReportMetric(median(final), "final-merge-cyc")
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
