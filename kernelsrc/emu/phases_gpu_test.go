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
// Metrics (medians over the launches of the median block's spans, in clock cycles):
// scan-cyc and merge-cyc, a block's scan and block merge; publish-cyc, the stores of its
// partials; arrival-cyc, its fence and arrival. The finishing blocks' spans after their
// arrival: fin-sync-cyc (barrier and fence), fin-load-cyc (the partials' loads),
// fin-loop-cyc (the rest of the merge loop, or with a record and S <= 32 the lanes' own
// merges), final-merge-cyc (the warp or block merge), fin-write-cyc (the draw's outputs
// and record) and fin-fence-cyc (their fence); with a record and S <= 32, fin-flags-cyc
// and fin-log-cyc, the row flags and the record's values at hand after the final merge.
// Over a block's warps: warps-scan-cyc, its start to the last warp's scan end;
// warp-skew-cyc, the first warp's scan end to the last's; warp-merged-cyc, on to the last
// warp's own merge; second-level-cyc, on to the end of the block merge (the barrier and
// warp 0's merge of the warps' results). In ns: arrive-ns, the last block's arrival after
// the first block's start; tail-ns, the draw's end after the last arrival.
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

// traceSpans are the spans BenchmarkGPUPhases reports: from one trace word to another
// (sampling.cu, GB_TRACE), over every block or only those that finished a draw.
var traceSpans = []struct {
	name     string
	from, to int
	finish   bool
}{
	{"scan-cyc", 1, 2, false}, {"merge-cyc", 2, 3, false}, {"publish-cyc", 3, 8, false},
	{"arrival-cyc", 8, 9, false}, {"fin-sync-cyc", 9, 10, true}, {"fin-load-cyc", 10, 11, true},
	{"fin-loop-cyc", 11, 5, true}, {"final-merge-cyc", 5, 6, true}, {"fin-write-cyc", 6, 12, true},
	{"fin-fence-cyc", 12, 13, true}, {"fin-flags-cyc", 6, 14, true}, {"fin-log-cyc", 6, 15, true},
	{"warps-scan-cyc", 1, 16, false}, {"warp-skew-cyc", 17, 16, false}, {"warp-merged-cyc", 16, 18, false},
	{"second-level-cyc", 18, 3, false},
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
	const traceWords = 20 // sampling.cu, GB_TRACE_WORDS
	blocks, partialWords := batch*split, l.numPartials()
	a, partials, free := deviceArgs(b, dev, l, traceWords*blocks)
	defer free()
	grid, block := runtime.Dim3{X: split, Y: batch, Z: 1}, runtime.Dim3{X: 1024, Y: 1, Z: 1}
	for range 5 { // warm-up
		require.NoError(b, s.Launch(k, grid, block, a))
	}
	raw := make([]byte, 8*traceWords*blocks)
	perLaunch := make([][]float64, len(traceSpans)) // each launch's median of each span
	var arrive, tail []float64
	b.ResetTimer()
	for range b.N {
		require.NoError(b, s.Zero(partials, 8*partialWords, len(raw)))
		require.NoError(b, s.Launch(k, grid, block, a))
		require.NoError(b, s.CopyToHost(raw, partials, 8*partialWords))
		require.NoError(b, s.Synchronize())
		word := func(p, i int) float64 { return float64(binary.LittleEndian.Uint64(raw[8*(traceWords*p+i):])) }
		spans := make([][]float64, len(traceSpans))
		first, last, end := word(0, 0), 0.0, 0.0
		for p := range blocks {
			first = min(first, word(p, 0))
			last = max(last, word(p, 4))
			finished := word(p, 7) != 0
			end = max(end, word(p, 7))
			for i, sp := range traceSpans {
				// Words 14 and 15 exist only where a record's finishing warp wrote
				// them; a span with an unwritten end is left out.
				if (finished || !sp.finish) && word(p, sp.from) != 0 && word(p, sp.to) != 0 {
					spans[i] = append(spans[i], word(p, sp.to)-word(p, sp.from))
				}
			}
		}
		require.NotZero(b, end, "no block wrote the end of a draw: is the build traced?")
		for i := range spans {
			if len(spans[i]) > 0 {
				perLaunch[i] = append(perLaunch[i], median(spans[i]))
			}
		}
		arrive, tail = append(arrive, last-first), append(tail, end-last)
	}
	for i, sp := range traceSpans {
		if len(perLaunch[i]) > 0 {
			b.ReportMetric(median(perLaunch[i]), sp.name)
		}
	}
	b.ReportMetric(median(arrive), "arrive-ns")
	b.ReportMetric(median(tail), "tail-ns")
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
