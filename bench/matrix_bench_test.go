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
// point, three groups of b.N back-to-back steps timed with device events (the median
// group), reporting device-µs/step, graph-µs/step (where the stream can capture),
// host-µs/call and allocs/call. On the CPU device it takes the smallest vocabulary and
// batches 1 and 8 only. `gumbel bench` prints the same matrix as tables or JSON.
//
//	go test -run '^$' -bench Matrix ./bench/                  # CPU, or a GPU with -tags gpu
func BenchmarkMatrix(b *testing.B) {
	benchmarkMatrix(b, FullMatrix, Matrix{Routes: Routes, DTypes: []sampler.DType{sampler.Float32}, Vocabs: []int{32768}, Batches: []int{1, 8}})
}

// BenchmarkFeatures is BenchmarkMatrix over FeatureMatrix: the plain Gumbel step and each
// serving feature (`gumbel bench --features` prints it with each feature's cost).
//
//	go test -tags gpu -run '^$' -bench Features ./bench/
func BenchmarkFeatures(b *testing.B) {
	benchmarkMatrix(b, FeatureMatrix, Matrix{Routes: FeatureRoutes, DTypes: []sampler.DType{sampler.Float32}, Vocabs: []int{32768}, Batches: []int{1, 8}})
}

// benchmarkMatrix runs mx on the device gumbel.Open picks, or onCPU on the CPU device.
func benchmarkMatrix(b *testing.B, mx, onCPU Matrix) {
	dev, err := gumbel.Open(runtime.OpenOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer dev.Close()
	if dev.Info().Backend == runtime.CPU {
		mx = onCPU
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
