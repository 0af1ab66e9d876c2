package decode

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/gumbel-go/gumbel"
	"github.com/gumbel-go/gumbel/runtime"
)

// fullConfig is a Qwen-sized vocabulary with a 1024-wide hidden state.
func fullConfig() Config {
	return Config{Vocab: 151936, Hidden: 1024, Steps: 300, Warmup: 10, Seed: 7, LMHeadRepeats: 200}
}

// BenchmarkDecode runs the decode loop at every batch of Batches and route of Routes on
// the device gumbel.Open picks ($GUMBEL_BACKEND, else a GPU if one opens, else the CPU
// device, with a V = 4096, H = 64 model): b.N timed steps per sub-benchmark, reporting
// the host time of a step as ns/op, tokens/s, the model's device time per step, the
// sampling share of the step and the LM head's bandwidth. With GUMBEL_BENCH_OUT set it
// writes the table of the last run of each sub-benchmark to $GUMBEL_BENCH_OUT/decode.md.
//
//	GUMBEL_BENCH_OUT=/tmp/bench go test -tags gpu -run '^$' -bench Decode -benchtime 300x ./bench/decode/
func BenchmarkDecode(b *testing.B) {
	dev, err := gumbel.Open(runtime.OpenOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer dev.Close()
	base := fullConfig()
	if dev.Info().Backend == runtime.CPU {
		base.Vocab, base.Hidden, base.Warmup, base.LMHeadRepeats = 4096, 64, 2, 3
	}
	var results []Result
	for _, batch := range Batches {
		for _, route := range Routes {
			var last Result
			b.Run(fmt.Sprintf("B=%d/%s", batch, route), func(b *testing.B) {
				cfg := base
				cfg.Batch, cfg.Route, cfg.Steps = batch, route, b.N
				r, err := Run(dev, cfg)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(r.StepUs*1e3, "ns/op")
				b.ReportMetric(r.TokensPerSec, "tokens/s")
				b.ReportMetric(r.ModelUs, "model-µs/step")
				b.ReportMetric(100*r.SamplingShare(), "sampling-%")
				b.ReportMetric(r.LMHeadGBps, "lm-head-GB/s")
				last = r
			})
			results = append(results, last)
		}
	}
	dir := os.Getenv("GUMBEL_BENCH_OUT")
	if dir == "" {
		return
	}
	info := dev.Info()
	md := fmt.Sprintf("Decode loop, V=%d H=%d: %s (%s, %d SMs)\n\n", base.Vocab, base.Hidden, info.Name, info.Arch, info.Multiprocessors) + Table(results)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "decode.md"), []byte(md), 0o644); err != nil {
		b.Fatal(err)
	}
}
