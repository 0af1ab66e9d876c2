package bench

import (
	"fmt"
	"strings"

	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/sampler"
)

// Matrix is a set of points: every route x dtype x vocab x batch.
type Matrix struct {
	Routes  []Route
	DTypes  []sampler.DType
	Vocabs  []int
	Batches []int
}

// FullMatrix is the matrix of the CUDA and benchmark issues.
var FullMatrix = Matrix{
	Routes:  Routes,
	DTypes:  []sampler.DType{sampler.Float32, sampler.BFloat16},
	Vocabs:  []int{32768, 65536, 151936},
	Batches: []int{1, 4, 8, 64},
}

// Run measures every point, reporting progress after each.
func (mx Matrix) Run(dev runtime.Device, cfg Config, progress func(done, total int, m Measurement)) ([]Measurement, error) {
	total := len(mx.Routes) * len(mx.DTypes) * len(mx.Vocabs) * len(mx.Batches)
	out := make([]Measurement, 0, total)
	for _, dt := range mx.DTypes {
		for _, v := range mx.Vocabs {
			for _, b := range mx.Batches {
				buf, err := Upload(dev, LLMLogits(b, v, uint64(v*1000+b)), dt)
				if err != nil {
					return out, err
				}
				for _, r := range mx.Routes {
					m, err := Measure(dev, Point{Route: r, DType: dt, Vocab: v, Batch: b}, buf, cfg)
					if err != nil {
						buf.Free()
						return out, fmt.Errorf("%s %s V=%d B=%d: %w", r, dt, v, b, err)
					}
					out = append(out, m)
					if progress != nil {
						progress(len(out), total, m)
					}
				}
				buf.Free()
			}
		}
	}
	return out, nil
}

// key identifies a cell across routes.
type key struct {
	dtype        string
	vocab, batch int
}

// byCell groups measurements by cell (dtype, vocabulary, batch): each cell's measurement
// per route, the cells and the routes in the order they first appear.
func byCell(ms []Measurement) (cells map[key]map[Route]Measurement, order []key, routes []Route) {
	cells = map[key]map[Route]Measurement{}
	seenRoute := map[Route]bool{}
	for _, m := range ms {
		k := key{m.DTypeName, m.Vocab, m.Batch}
		if cells[k] == nil {
			cells[k] = map[Route]Measurement{}
			order = append(order, k)
		}
		cells[k][m.Route] = m
		if !seenRoute[m.Route] {
			seenRoute[m.Route] = true
			routes = append(routes, m.Route)
		}
	}
	return cells, order, routes
}

// Markdown renders measurements as one table per dtype (rows: vocab x batch; columns:
// device µs per step for each route, then the ratios the targets are stated in), and a
// host-latency table.
func Markdown(ms []Measurement) string {
	cells, order, routes := byCell(ms)
	var sb strings.Builder
	write := func(title string, val func(Measurement) string, ratioOf func(Measurement) float64) {
		ratios := ratioOf != nil
		fmt.Fprintf(&sb, "\n%s\n\n| dtype | vocab | batch |", title)
		for _, r := range routes {
			fmt.Fprintf(&sb, " %s |", r)
		}
		if ratios {
			sb.WriteString(" categorical / gumbel | gumbel / greedy | single / split |")
		}
		sb.WriteString("\n|---|---:|---:|")
		for range routes {
			sb.WriteString("---:|")
		}
		if ratios {
			sb.WriteString("---:|---:|---:|")
		}
		sb.WriteString("\n")
		for _, k := range order {
			c := cells[k]
			fmt.Fprintf(&sb, "| %s | %d | %d |", k.dtype, k.vocab, k.batch)
			for _, r := range routes {
				if m, ok := c[r]; ok {
					fmt.Fprintf(&sb, " %s |", val(m))
				} else {
					sb.WriteString(" – |")
				}
			}
			if ratios {
				fmt.Fprintf(&sb, " %s | %s | %s |",
					ratio(c, Categorical, GumbelSplit, ratioOf), ratio(c, GumbelSplit, Greedy, ratioOf), ratio(c, GumbelOne, GumbelSplit, ratioOf))
			}
			sb.WriteString("\n")
		}
	}
	write("Device time per sampling step (µs, median; events around back-to-back launches)",
		func(m Measurement) string { return fmt.Sprintf("%.2f", m.DeviceUs) }, func(m Measurement) float64 { return m.DeviceUs })
	if hasGraph(ms) {
		write("Device time per step replayed from a CUDA graph (µs, median; launch overhead removed)",
			func(m Measurement) string { return fmt.Sprintf("%.2f", m.GraphUs) }, func(m Measurement) float64 { return m.GraphUs })
	}
	write("Host-observed latency of one Sample call, tokens on the host (µs, median)",
		func(m Measurement) string { return fmt.Sprintf("%.1f", m.HostUs) }, nil)
	write("Go heap allocations per Sample call (mean)",
		func(m Measurement) string { return fmt.Sprintf("%.2f", m.AllocsPerCall) }, nil)
	return sb.String()
}

func hasGraph(ms []Measurement) bool {
	for _, m := range ms {
		if m.GraphUs > 0 {
			return true
		}
	}
	return false
}

// ratio is the ratio of two routes' values of one measure in one cell, as "1.23x".
func ratio(c map[Route]Measurement, num, den Route, of func(Measurement) float64) string {
	a, okA := c[num]
	b, okB := c[den]
	if !okA || !okB || of(b) <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.2fx", of(a)/of(b))
}
