package bench

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/sampler"
)

// Sweep is a split sweep: the Gumbel route of one dtype at every vocabulary, batch and
// forced number of blocks per row, the measurements the split policy's thresholds are
// chosen from (the fastest split for each vocabulary and batch).
type Sweep struct {
	DType   sampler.DType
	Vocabs  []int
	Batches []int
	// Splits are the blocks per row forced on gumbel_argmax launches.
	Splits []int
}

// DefaultSweep is the sweep that sampler.DefaultSplitPolicy's GPU thresholds were
// chosen from.
var DefaultSweep = Sweep{
	DType:   sampler.Float32,
	Vocabs:  []int{8192, 16384, 32768, 65536, 151936},
	Batches: []int{1, 4, 8, 16, 32, 64, 128},
	Splits:  []int{1, 2, 4, 8, 16, 32, 64, 128, 256},
}

// SweepConfig sizes a sweep's points on a GPU: fewer launches per point than
// DefaultConfig, since a sweep has hundreds of points and reads only device time.
var SweepConfig = Config{Groups: 9, Repeats: 50, HostCalls: 1, Warmup: 5}

// Run measures every point of the sweep (route GumbelSplit, Point.BlocksPerRow set),
// reporting progress after each.
func (sw Sweep) Run(dev runtime.Device, cfg Config, progress func(done, total int, m Measurement)) ([]Measurement, error) {
	total := len(sw.Vocabs) * len(sw.Batches) * len(sw.Splits)
	out := make([]Measurement, 0, total)
	for _, v := range sw.Vocabs {
		for _, b := range sw.Batches {
			buf, err := Upload(dev, LLMLogits(b, v, uint64(v+b)), sw.DType)
			if err != nil {
				return out, err
			}
			for _, s := range sw.Splits {
				m, err := Measure(dev, Point{Route: GumbelSplit, DType: sw.DType, Vocab: v, Batch: b, BlocksPerRow: s}, buf, cfg)
				if err != nil {
					buf.Free()
					return out, fmt.Errorf("%s V=%d B=%d S=%d: %w", sw.DType, v, b, s, err)
				}
				out = append(out, m)
				if progress != nil {
					progress(len(out), total, m)
				}
			}
			buf.Free()
		}
	}
	return out, nil
}

// SweepMarkdown renders sweep measurements as one table: a row per vocabulary and batch,
// the device time per step (µs, median) at each split, and the fastest split.
func SweepMarkdown(ms []Measurement) string {
	type cell struct{ vocab, batch int }
	var order []cell
	var splits []int
	times := map[cell]map[int]float64{}
	for _, m := range ms {
		c := cell{m.Vocab, m.Batch}
		if times[c] == nil {
			times[c] = map[int]float64{}
			order = append(order, c)
		}
		times[c][m.BlocksPerRow] = m.DeviceUs
		if !slices.Contains(splits, m.BlocksPerRow) {
			splits = append(splits, m.BlocksPerRow)
		}
	}
	var sb strings.Builder
	sb.WriteString("\nDevice time per step of the Gumbel route by blocks per row S (µs, median)\n\n| vocab | batch |")
	for _, s := range splits {
		fmt.Fprintf(&sb, " S=%d |", s)
	}
	sb.WriteString(" best |\n|---:|---:|")
	for range splits {
		sb.WriteString("---:|")
	}
	sb.WriteString("---:|\n")
	for _, c := range order {
		fmt.Fprintf(&sb, "| %d | %d |", c.vocab, c.batch)
		best, bestUs := 0, 0.0
		for _, s := range splits {
			us, ok := times[c][s]
			if !ok {
				sb.WriteString(" – |")
				continue
			}
			fmt.Fprintf(&sb, " %.2f |", us)
			if best == 0 || us < bestUs {
				best, bestUs = s, us
			}
		}
		if best == 0 {
			sb.WriteString(" – |\n")
			continue
		}
		fmt.Fprintf(&sb, " S=%d |\n", best)
	}
	return sb.String()
}
