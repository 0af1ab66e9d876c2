//go:build amd64 && !purego

package gokernel

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/gumbel-go/gumbel/runtime"
)

// scanBelowForms are this build's editions of scanBelow, which the tests compare with
// scanBelowGo: the SSE and AVX2 routines on their own (every length, from 0), and
// scanBelow, which picks one.
func scanBelowForms() []scanBelowForm {
	forms := []scanBelowForm{{"sse", func(row []float32, floor float32) (int, float32) {
		return scanBelowSSE(unsafe.SliceData(row), len(row), floor)
	}}}
	if useScanAVX2 {
		forms = append(forms, scanBelowForm{"avx2", func(row []float32, floor float32) (int, float32) {
			return scanBelowAVX2(unsafe.SliceData(row), len(row), floor)
		}})
	}
	return append(forms, scanBelowForm{"scanBelow", scanBelow})
}

// checkScanExact: scanBelow returns what the SSE routine returns, the maximum's bits
// included where it is a zero, so that no caller's result depends on whether the CPU
// has AVX2.
func checkScanExact(t *testing.T, row []float32, floor float32, what string, args ...any) {
	t.Helper()
	gotN, gotTop := scanBelow(row, floor)
	wantN, wantTop := scanBelowSSE(unsafe.SliceData(row), len(row), floor)
	if gotN != wantN || math.Float32bits(gotTop) != math.Float32bits(wantTop) {
		t.Fatalf("%s: scanBelow gives (%d, %#x), SSE (%d, %#x); floor %v, length %d, row %v", fmt.Sprintf(what, args...),
			gotN, math.Float32bits(gotTop), wantN, math.Float32bits(wantTop), floor, len(row), row[:min(len(row), 256)])
	}
}

// TestScanBelowAVX2Runs: with AVX2, scanBelow takes the AVX2 routine on a long row, and
// a row whose largest passed value is a zero gets the SSE routine's zero back.
func TestScanBelowAVX2Runs(t *testing.T) {
	if !useScanAVX2 {
		t.Skip("no AVX2 on this CPU")
	}
	row := make([]float32, 64)
	for i := range row {
		row[i] = -1
	}
	row[5], row[44] = 0, float32(math.Copysign(0, -1))
	n, top := scanBelowAVX2(&row[0], len(row), 1)
	require.Equal(t, 64, n)
	require.Zero(t, top)
	_, sse := scanBelowSSE(&row[0], len(row), 1)
	_, got := scanBelow(row, 1)
	require.Equal(t, math.Float32bits(sse), math.Float32bits(got))
	require.Zero(t, testing.AllocsPerRun(100, func() { scanBelow(row, 1) }))
}

// zerosRow is signed zeros among negative values, with runs of -0 and +0 longer than a
// chunk: the largest value the scans pass is often a zero of either sign.
func zerosRow(r *rand.Rand, v int) []float32 {
	row := make([]float32, v)
	negZero := float32(math.Copysign(0, -1))
	for i := range row {
		row[i] = pick(r, negZero, negZero, 0, -1, -0.5, -7)
	}
	for range r.IntN(3) {
		z, at := pick(r, negZero, 0), r.IntN(v)
		for i := at; i < min(v, at+r.IntN(2*convertChunk)); i++ {
			row[i] = z
		}
	}
	return row
}

// TestScanBelowAVX2SameResults: every kernel whose passes call scanBelow (the greedy
// scan, the log-sum-exps, the row maximum, the top-k, top-p and min-p candidate passes)
// gives the same tokens, statuses, records and partials bit for bit with the AVX2
// routine as with SSE alone, on every row shape, rows of signed zeros included.
func TestScanBelowAVX2SameResults(t *testing.T) {
	if !useScanAVX2 {
		t.Skip("no AVX2 on this CPU")
	}
	defer func() { useScanAVX2 = true }()
	r := rand.New(rand.NewPCG(18, 18))
	shapes := append(rowShapes[:len(rowShapes):len(rowShapes)], struct {
		name string
		make func(*rand.Rand, int) []float32
	}{"zeros", zerosRow})
	trials := 6
	if testing.Short() {
		trials = 2
	}
	for _, shape := range shapes {
		for trial := range trials {
			v := pick(r, 3, 31, 33, 700, 2000+r.IntN(600))
			d := dtypes[r.IntN(len(dtypes))]
			s := pick(r, 1, 3)
			kernels := []struct {
				name   string
				fn     runtime.GoKernel
				params func(*rand.Rand) abi.RowParams
			}{
				{"gumbel_argmax", gumbelArgmaxKernel(d, true), gumbelParams},
				{"categorical", categoricalKernel(d), categoricalParams(v)},
				{"filtered", filteredKernel(d), categoricalParams(v)},
				{"score", func(b *runtime.BlockContext) { score(b, d) }, func(r *rand.Rand) abi.RowParams {
					p := gumbelParams(r)
					p.Token = uint32(r.IntN(v))
					return p
				}},
			}
			for _, k := range kernels {
				p := randomProblem(r, d, v, shape.make, k.params)
				if r.IntN(3) == 0 {
					randomInputs(r, p)
				}
				for y := range p.params {
					if r.IntN(2) == 0 {
						p.params[y].Flags |= abi.FlagLogprobs
					}
				}
				what := fmt.Sprintf("%s %s trial %d %s v %d S=%d", k.name, shape.name, trial, dtypeName(d), v, s)
				useScanAVX2 = true
				with := p.run(t, k.fn, s, reversed, nil)
				useScanAVX2 = false
				without := p.run(t, k.fn, s, reversed, nil)
				require.Equal(t, without.tokens, with.tokens, what)
				require.Equal(t, without.status, with.status, what)
				require.Equal(t, bitsOf(without.logprobs), bitsOf(with.logprobs), what)
				require.Equal(t, without.partials, with.partials, what)
			}
			p := randomProblem(r, d, v, shape.make, func(r *rand.Rand) abi.RowParams {
				p := gumbelParams(r)
				p.TopN = uint32(1 + r.IntN(abi.MaxTopN))
				if r.IntN(2) == 0 {
					p.Flags |= abi.FlagPerturbed
				}
				return p
			})
			useScanAVX2 = true
			with := p.runTopN(t, d, s, 1024, reversed, nil)
			useScanAVX2 = false
			without := p.runTopN(t, d, s, 1024, reversed, nil)
			what := fmt.Sprintf("topn %s trial %d", shape.name, trial)
			require.Equal(t, without.outTokens, with.outTokens, what)
			require.Equal(t, bitsOf(without.outValues), bitsOf(with.outValues), what)
		}
	}
}
