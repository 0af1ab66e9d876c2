package gokernel

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestWeightsMatchGo: weights (the vector form where there is one) gives weightsGo's
// weights, fixed-point weights and Z bit for bit on rows holding -Inf, NaN, signed
// zeros, elements above m (d > 0), elements at and past the cutoff, with F on both
// sides of the vector form's limit of 52, at every length mod 4.
func TestWeightsMatchGo(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 2026))
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	for _, f := range []int{45, 52, 53, 62} {
		twoPowF := float32(math.Ldexp(1, f))
		cutoff := weightCutoff(f)
		for _, c := range []struct {
			name string
			m    float32
			invT float32
			x    func() float32
		}{
			{"llm", 20, 1, func() float32 { return float32(r.NormFloat64() * 2) }},
			{"llm-cold", 20, 1.25, func() float32 { return float32(r.NormFloat64() * 2) }},
			{"near-cutoff", 0, 1, func() float32 { return cutoff + float32(r.NormFloat64()) }},
			{"hot", 3, 0.01, func() float32 { return float32(-r.ExpFloat64() * 1000) }},
			{"tiny-d", 1, 1, func() float32 { return 1 - float32(r.ExpFloat64()*1e-7) }},
			{"edges", 2, 1, func() float32 {
				return []float32{2, 0, float32(math.Copysign(0, -1)), negInf, nan, inf, 3, 2 + cutoff,
					math.Nextafter32(2+cutoff, 0), math.Nextafter32(2+cutoff, negInf), 1e-45, -1e30}[r.IntN(12)]
			}},
		} {
			for _, n := range []int{0, 1, 3, 4, 7, 64, 1001, 4096} {
				xs := make([]float32, n)
				for i := range xs {
					xs[i] = c.x()
				}
				wt := weigher{m: c.m, invT: c.invT, cutoff: cutoff}
				w, q := make([]float32, n), make([]uint64, n)
				wantW, wantQ := make([]float32, n), make([]uint64, n)
				z := weights(w, q, xs, wt, twoPowF)
				wantZ := weightsGo(wantW, wantQ, xs, wt, twoPowF)
				for i := range xs {
					require.Equal(t, math.Float32bits(wantW[i]), math.Float32bits(w[i]), "%s F %d n %d x %g", c.name, f, n, xs[i])
					require.Equal(t, wantQ[i], q[i], "%s F %d n %d x %g", c.name, f, n, xs[i])
				}
				require.Equal(t, wantZ, z, "%s F %d n %d", c.name, f, n)
			}
		}
	}
}

// BenchmarkWeights reports ns per element of the weights and Z of one LLM row
// (V = 151936, T = 1), in vector code where there is one and in Go.
func BenchmarkWeights(b *testing.B) {
	xs := llmLogits(rand.New(rand.NewPCG(32, 32)), benchVocab)
	m := negInf
	for _, x := range xs {
		m = max(m, x)
	}
	f := 63 - 18
	wt := weigher{m: m, invT: 1, cutoff: weightCutoff(f)}
	twoPowF := float32(math.Ldexp(1, f))
	w, q := make([]float32, benchVocab), make([]uint64, benchVocab)
	var sink uint64
	for _, c := range []struct {
		name string
		fn   func([]float32, []uint64, []float32, weigher, float32) uint64
	}{{"weights", weights}, {"go", weightsGo}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				sink += c.fn(w, q, xs, wt, twoPowF)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/benchVocab, "ns/elem")
		})
	}
	_ = sink
}
