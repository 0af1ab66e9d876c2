//go:build amd64 && !purego

package gokernel

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestMaskVectorRuns: with AVX2 the vector code takes every whole word of a chunk (so
// the other tests check it, not only the Go loops), and on an LLM row with random bits
// the skip passes nearly every word once the best is found, ties included; the scan with
// it finds what the Go loop alone finds.
func TestMaskVectorRuns(t *testing.T) {
	if !useMaskAVX2 {
		t.Skip("no AVX2 on this CPU")
	}
	r := rand.New(rand.NewPCG(58, 58))
	const v = 20000
	xs := llmLogits(r, v)
	p := maskedProcessor(r, (v+31)/32, 1, 8)
	var dst [convertChunk]float32
	n, _ := p.maskApply(xs[32:32+convertChunk], 1, dst[:])
	require.Equal(t, convertChunk, n)

	skipped, scanned := 0, 0
	best := negInf
	for j := 0; j < v; {
		if k := p.maskSkip(xs[j:], j>>5, best); k > 0 {
			skipped += k
			j += k
			continue
		}
		end := min(j+32, v)
		for i := j; i < end; i++ {
			if p.allowed(i) && xs[i] > best {
				best = xs[i]
			}
		}
		scanned += end - j
		j = end
	}
	require.Greater(t, skipped, 9*scanned, "skipped %d, scanned %d", skipped, scanned)

	// The skip passes what changes nothing, not only what lies below: ties at the best,
	// and banned values up to MaxFloat32 over a best of -Inf.
	ties := make([]float32, 256)
	for i := range ties {
		ties[i] = 1.5
	}
	require.Equal(t, len(ties), p.maskSkip(ties, 0, 1.5))
	for i := range ties {
		ties[i] = negInf
		if !p.allowed(i) {
			ties[i] = math.MaxFloat32
		}
	}
	require.Equal(t, len(ties), p.maskSkip(ties, 0, negInf))

	with, without := gumbelScan{bestScore: negInf}, gumbelScan{bestScore: negInf}
	for i := 0; i < v; i += convertChunk {
		with.scanGreedyMasked(xs[i:min(v, i+convertChunk)], i, 0, &p)
	}
	useMaskAVX2 = false
	defer func() { useMaskAVX2 = true }()
	for i := 0; i < v; i += convertChunk {
		without.scanGreedyMasked(xs[i:min(v, i+convertChunk)], i, 0, &p)
	}
	require.Equal(t, without, with)
}
