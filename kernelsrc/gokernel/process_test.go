package gokernel

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
)

// TestProcessedMatchesReference: bias, penalties and masks on the greedy, Gumbel and
// categorical paths, against the reference applied to the float64-rounded processed
// row.
func TestProcessedMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 11))
	for _, categorical := range []bool{false, true} {
		for _, d := range dtypes {
			for _, shape := range rowShapes {
				for _, v := range []int{1, 5, 64, 257, 1500} {
					t.Run(fmt.Sprintf("categorical=%v/%s/%s/V=%d", categorical, dtypeName(d), shape.name, v), func(t *testing.T) {
						for _, s := range []int{1, 3, 64} {
							params, fn := gumbelParams, gumbelArgmaxKernel(d, r.IntN(2) == 0)
							if categorical {
								params, fn, s = categoricalParams(v), categoricalKernel(d), 1
							}
							p := randomProblem(r, d, v, shape.make, params)
							randomInputs(r, p)
							order := launchOrder(r.IntN(3))
							b := p.run(t, fn, s, order, r)
							p.checkSlots(t, b, categorical, fmt.Sprintf("S=%d %s", s, order))
						}
					})
				}
			}
		}
	}
}

// TestMaskGroupMatchesElementwise: the branch-free mask pass gives, for every chunk
// offset and length, the processed values and the observation of the element-by-element
// definition: masked elements -Inf, and SeenNonFinite when a NaN or +Inf is masked away
// (never for a masked -Inf, nor for an allowed NaN, which the scans see themselves).
func TestMaskGroupMatchesElementwise(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 4))
	specials := []float32{negInf, float32(math.Inf(1)), float32(math.NaN()), -float32(math.NaN()), 0, -0.0, math.MaxFloat32}
	const v = 200
	for trial := range 200 {
		xs := make([]float32, v)
		for i := range xs {
			xs[i] = float32(r.NormFloat64())
			if r.IntN(20) == 0 {
				xs[i] = specials[r.IntN(len(specials))]
			}
		}
		p := processor{active: true}
		words := make([][]uint32, 2)
		for k := range words {
			words[k] = make([]uint32, (v+31)/32)
			for i := range words[k] {
				switch r.IntN(4) { // whole words allowed or not take their own paths
				case 0:
					words[k][i] = ^uint32(0)
				case 1:
					words[k][i] = 0
				default:
					words[k][i] = r.Uint32() | r.Uint32()<<uint(r.IntN(2)*16)
				}
			}
		}
		switch trial % 3 {
		case 0:
			p.mask = words[0]
		case 1:
			p.bitmask = words[1]
		default:
			p.mask, p.bitmask = words[0], words[1]
		}
		base := 4 * r.IntN(v/4)
		n := r.IntN(v - base + 1)
		got := make([]float32, n)
		s := p.maskGroup(xs[base:base+n], base, got)
		var want abi.Seen
		for k := range n {
			x, i := xs[base+k], base+k
			if !p.allowed(i) {
				want |= seen(x) & abi.SeenNonFinite
				x = negInf
			}
			require.Equal(t, math.Float32bits(x), math.Float32bits(got[k]), "trial %d element %d", trial, i)
		}
		require.Equal(t, want, s, "trial %d", trial)
	}
}

// TestScanGreedyMaskedMatchesTwoPasses: the fused greedy scan of a masked row finds the
// key and the observations of processGroup followed by scanGreedy, chunk after chunk.
func TestScanGreedyMaskedMatchesTwoPasses(t *testing.T) {
	r := rand.New(rand.NewPCG(6, 6))
	specials := []float32{negInf, float32(math.Inf(1)), float32(math.NaN()), 0, -0.0, math.MaxFloat32, -math.MaxFloat32}
	const v = 3000
	for trial := range 100 {
		xs := make([]float32, v)
		for i := range xs {
			xs[i] = float32(r.NormFloat64())
			if r.IntN(300) == 0 {
				xs[i] = specials[r.IntN(len(specials))]
			}
		}
		words := make([]uint32, (v+31)/32)
		for i := range words {
			words[i] = []uint32{0, ^uint32(0), r.Uint32(), 1 << r.IntN(32)}[r.IntN(4)]
		}
		p := processor{active: true, bitmask: words}
		if trial%2 == 0 {
			p.mask = make([]uint32, len(words))
			for i := range p.mask {
				p.mask[i] = r.Uint32() | r.Uint32()
			}
		}
		fused := gumbelScan{bestScore: negInf}
		split := gumbelScan{bestScore: negInf}
		var buf [convertChunk]float32
		for i := 0; i < v; i += convertChunk {
			chunk := xs[i:min(v, i+convertChunk)]
			fused.scanGreedyMasked(chunk, i, 0, &p)
			split.seen |= p.processGroup(chunk, i, buf[:])
			split.scanGreedy(buf[:len(chunk)], i)
		}
		require.Equal(t, split.best, fused.best, "trial %d", trial)
		require.Equal(t, split.seen, fused.seen, "trial %d", trial)
	}
}

// refGreedyScan is the greedy scan by its definition, element by element: the largest finite
// element above the best so far (lowest index first), NaN and +Inf noted; base is the
// row index of xs[0], offset what makes it global.
func refGreedyScan(sc *gumbelScan, xs []float32, base, offset int) {
	bestX, bestI := sc.bestScore, -1
	for k, x := range xs {
		if x > bestX {
			if x > math.MaxFloat32 {
				sc.seen |= abi.SeenNonFinite
				continue
			}
			bestX, bestI = x, base+k
		} else if x != x {
			sc.seen |= abi.SeenNonFinite
		}
	}
	if bestI >= 0 {
		sc.seen |= abi.SeenFinite
		sc.best, sc.bestScore = pack(bestX, offset+bestI), bestX
	}
}

// TestScanGreedyMatchesPlainLoop: the greedy scan, which passes groups below the best so
// far in vector code, finds the key and the observations of the element-by-element
// loop, chunk after chunk: ties at the best (the lowest index wins), NaN, +Inf and -Inf
// before and after it, signed zeros, rows of one value, lengths not a multiple of four.
func TestScanGreedyMatchesPlainLoop(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 13))
	specials := []float32{negInf, float32(math.Inf(1)), float32(math.NaN()), 0, -0.0, math.MaxFloat32,
		-math.MaxFloat32, math.SmallestNonzeroFloat32}
	for trial := range 300 {
		v := 1 + r.IntN(3000)
		xs := make([]float32, v)
		flat := trial%10 == 0
		for i := range xs {
			switch {
			case flat:
				xs[i] = 1.5
			case r.IntN(200) == 0:
				xs[i] = specials[r.IntN(len(specials))]
			default:
				xs[i] = float32(math.Round(r.NormFloat64()*8) / 4) // coarse: ties at the best
			}
		}
		got := gumbelScan{bestScore: negInf}
		want := gumbelScan{bestScore: negInf}
		for i := 0; i < v; i += convertChunk {
			chunk := xs[i:min(v, i+convertChunk)]
			got.scanGreedy(chunk, i)
			refGreedyScan(&want, chunk, i, 0)
		}
		require.Equal(t, want.best, got.best, "trial %d", trial)
		require.Equal(t, want.seen, got.seen, "trial %d", trial)
	}
}
