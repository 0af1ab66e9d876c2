//go:build amd64 && !purego

package gokernel

import (
	"math"
	"runtime"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestWeightsAVX2Exhaustive runs the vector weights over every float32 d in [-64, 0]
// (and +0): each weight it settles is exp32(d) bit for bit with q = fixed(w, 2^45), its
// sums are those q's, and weights (with the groups it leaves to weightsGo) agrees
// everywhere. -short takes one block in 64.
func TestWeightsAVX2Exhaustive(t *testing.T) {
	if !useWeightsAVX2 {
		t.Skip("no AVX2 on this CPU")
	}
	const block = 1 << 12
	lo, hi := uint32(0x80000000), math.Float32bits(-64) // -0 up to -64, by bits
	nblocks := int((hi-lo)/block) + 1
	every := 1
	if testing.Short() {
		every = 64
	}
	wt := weigher{m: 0, invT: 1, cutoff: -64}
	const twoPowF = 1 << 45
	var mu sync.Mutex
	var fallbacks, checked int
	var wg sync.WaitGroup
	workers := runtime.GOMAXPROCS(0)
	errs := make(chan string, workers)
	for g := range workers {
		wg.Go(func() {
			xs := make([]float32, block)
			w, q := make([]float32, block), make([]uint64, block)
			w2, q2 := make([]float32, block), make([]uint64, block)
			want := make([]float32, block)
			nf, nc := 0, 0
			for b := g * every; b < nblocks; b += workers * every {
				for j := range xs {
					bits := lo + uint32(b*block+j)
					if bits > hi {
						bits = 0 // +0 fills the last block
					}
					xs[j] = math.Float32frombits(bits)
					want[j] = exp32(xs[j])
				}
				for i := 0; i < block; {
					done, z := weightsAVX2(&w[i], &q[i], &xs[i], block-i, wt.m, wt.invT, wt.cutoff, twoPowF, &exp2Sixty4th)
					var sum uint64
					for j := i; j < i+done; j++ {
						if math.Float32bits(w[j]) != math.Float32bits(want[j]) || q[j] != fixed(want[j], twoPowF) {
							errs <- "d " + fmtF32(xs[j])
							return
						}
						sum += q[j]
					}
					if sum != z {
						errs <- "sum of q"
						return
					}
					nc += done
					if i += done; i < block {
						nf++
						i += 4
					}
				}
				z := weights(w2, q2, xs, wt, twoPowF)
				var sum uint64
				for j, x := range xs {
					if math.Float32bits(w2[j]) != math.Float32bits(want[j]) || q2[j] != fixed(want[j], twoPowF) {
						errs <- "weights, d " + fmtF32(x)
						return
					}
					sum += q2[j]
				}
				if sum != z {
					errs <- "weights' Z"
					return
				}
			}
			mu.Lock()
			fallbacks += nf
			checked += nc
			mu.Unlock()
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
	t.Logf("%d weights settled in vector code, %d groups of four left to weightsGo", checked, fallbacks)
	require.Positive(t, fallbacks, "the midpoint test never fired")
}

func fmtF32(x float32) string {
	return strconv.FormatFloat(float64(x), 'g', -1, 32) + " (" + strconv.FormatUint(uint64(math.Float32bits(x)), 16) + ")"
}
