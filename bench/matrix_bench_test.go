package bench

import (
	"fmt"
	"testing"

	"github.com/gumbel-go/gumbel"
	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/sampler"
)

// BenchmarkMatrix runs the matrix as Go benchmarks on the device gumbel.Open picks
// ($GUMBEL_BACKEND, else a GPU if one opens, else the CPU device): one sub-benchmark per
// point, three groups of b.N back-to-back steps timed with device events (the median group), reporting device-µs/step,
// graph-µs/step (where the stream can capture), host-µs/call and allocs/call. On the
// CPU device it takes the smallest vocabulary and batches 1 and 8 only.
//
//	go test -run '^$' -bench Matrix ./bench/                  # CPU, or a GPU with -tags gpu
func BenchmarkMatrix(b *testing.B) {
	dev, err := gumbel.Open(runtime.OpenOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer dev.Close()
	mx := FullMatrix
	if dev.Info().Backend == runtime.CPU {
		mx = Matrix{Routes: Routes, DTypes: []sampler.DType{sampler.Float32}, Vocabs: []int{32768}, Batches: []int{1, 8}}
	}
	for _, dt := range mx.DTypes {
		for _, v := range mx.Vocabs {
			for _, batch := range mx.Batches {
				buf, err := Upload(dev, LLMLogits(batch, v, uint64(v*1000+batch)), dt)
				if err != nil {
					b.Fatal(err)
				}
				for _, r := range mx.Routes {
					p := Point{Route: r, DType: dt, Vocab: v, Batch: batch}
					b.Run(fmt.Sprintf("%s/%s/V=%d/B=%d", r, dt, v, batch), func(b *testing.B) {
						m, err := Measure(dev, p, buf, Config{Groups: 3, Repeats: max(b.N, 1), HostCalls: 10, Warmup: 3})
						if err != nil {
							b.Fatal(err)
						}
						b.ReportMetric(m.DeviceUs, "device-µs/step")
						if m.GraphUs > 0 {
							b.ReportMetric(m.GraphUs, "graph-µs/step")
						}
						b.ReportMetric(m.HostUs, "host-µs/call")
						b.ReportMetric(m.AllocsPerCall, "allocs/call")
					})
				}
				buf.Free()
			}
		}
	}
}
