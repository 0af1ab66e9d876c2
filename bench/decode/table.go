package decode

import (
	"fmt"
	"strings"

	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/sampler"
)

// Batches and Routes are the rows of the benchmark table.
var (
	Batches = []int{1, 4}
	Routes  = []sampler.Route{sampler.RouteGreedy, sampler.RouteGumbel, sampler.RouteCategorical}
)

// Matrix runs base at every batch of Batches and every route of Routes, in table order.
// progress, if not nil, is called after each run.
func Matrix(dev runtime.Device, base Config, progress func(Result)) ([]Result, error) {
	var out []Result
	for _, b := range Batches {
		for _, r := range Routes {
			cfg := base
			cfg.Batch, cfg.Route = b, r
			res, err := Run(dev, cfg)
			if err != nil {
				return out, fmt.Errorf("batch %d, %s: %w", b, r, err)
			}
			out = append(out, res)
			if progress != nil {
				progress(res)
			}
		}
	}
	return out, nil
}

// Table renders results as a Markdown table.
func Table(results []Result) string {
	var sb strings.Builder
	sb.WriteString("| batch | route | tokens/s | µs/step | model µs/step | sampling share | LM-head GB/s |\n")
	sb.WriteString("|---:|---|---:|---:|---:|---:|---:|\n")
	for _, r := range results {
		fmt.Fprintf(&sb, "| %d | %s | %.0f | %.1f | %.1f | %.1f%% | %.0f |\n",
			r.Config.Batch, r.Config.Route, r.TokensPerSec, r.StepUs, r.ModelUs, 100*r.SamplingShare(), r.LMHeadGBps)
	}
	return sb.String()
}
