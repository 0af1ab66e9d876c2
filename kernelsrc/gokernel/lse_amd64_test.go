//go:build amd64 && !purego

package gokernel

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSumExpAVX2TermsMatchGo: each term of the AVX2 sum is sumExpGo's, bit for bit (one
// element per call, the other three lanes -Inf), for differences from 0 down past -64,
// -Inf among them, scaled or not; and whole sums agree with sumExpGo to float64 rounding.
func TestSumExpAVX2TermsMatchGo(t *testing.T) {
	if !useSumExpAVX2 {
		t.Skip("no AVX2 on this CPU")
	}
	r := rand.New(rand.NewPCG(17, 17))
	ms := []float64{0, 1.5, -3.25, 17, 1e30, -1e30}
	ds := []float64{0, -1e-30, -0.5, -math.Ln2 / 128, -1, -63.99, -64, -64.01, -70, math.Inf(-1)}
	for range 20000 {
		ds = append(ds, -r.ExpFloat64()*10)
	}
	for _, m := range ms {
		for _, d := range ds {
			x := float32(m + d)
			if float64(x) > m {
				continue // rounding put it above the maximum: not a member
			}
			for lane := range 4 {
				for _, invT := range []float32{1, 1.25} {
					xs := []float32{negInf, negInf, negInf, negInf}
					xs[lane] = x
					mt := max(m, float64(float32(x*invT))) // the member at most m
					want := expNonPositive(float64(float32(x*invT)) - mt)
					got := sumExpAVX2(&xs[0], 4, invT, mt, &exp2Sixty4th)
					require.Equal(t, math.Float64bits(want), math.Float64bits(got), "m %g x %g invT %g lane %d", mt, x, invT, lane)
				}
			}
		}
	}
	for trial := range 200 {
		v := 4 * (1 + r.IntN(1000))
		xs := make([]float32, v)
		for i := range xs {
			xs[i] = float32(r.NormFloat64() * 4)
			if r.IntN(50) == 0 {
				xs[i] = negInf
			}
		}
		m := float64(negInf)
		for _, x := range xs {
			m = max(m, float64(x))
		}
		invT := []float32{1, 1.25, 0.7}[trial%3]
		ms := float64(float32(float32(m) * invT))
		want, got := sumExpGo(xs, ms, invT), sumExpAVX2(&xs[0], v, invT, ms, &exp2Sixty4th)
		require.InEpsilon(t, want, got, 1e-13, "trial %d", trial)
	}
}

// BenchmarkSumExp compares the log-sum-exps' sum in AVX2 with the Go loop, one row of
// V = 151936.
func BenchmarkSumExp(b *testing.B) {
	xs := llmLogits(rand.New(rand.NewPCG(18, 18)), benchVocab)
	m := float64(negInf)
	for _, x := range xs {
		m = max(m, float64(x))
	}
	var sink float64
	b.Run("avx2", func(b *testing.B) {
		if !useSumExpAVX2 {
			b.Skip("no AVX2 on this CPU")
		}
		for b.Loop() {
			sink += sumExpAVX2(&xs[0], benchVocab&^3, 1, m, &exp2Sixty4th)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/benchVocab, "ns/elem")
	})
	b.Run("go", func(b *testing.B) {
		for b.Loop() {
			sink += sumExpGo(xs, m, 1)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/benchVocab, "ns/elem")
	})
	_ = sink
}
