package emu

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/stretchr/testify/require"
)

// This file tests the serving features in the emulated CUDA edition against the Go
// edition: logit processors, several draws per row, device-side RECORD and ADVANCE,
// device routing, log-probability records and the topn kernels.

// withProcessors gives the launch bias, counts and mask buffers with LLM-like contents:
// sparse biases (a few strong ones), counts of tokens seen in the prompt and sampled a
// few times (and some at the saturation point of RECORD), and masks that mostly allow,
// some that allow only a few tokens, and one that allows nothing.
func (l *launch) withProcessors(r *rand.Rand) {
	n := l.slots * l.vocab
	l.bias = make([]float32, n)
	l.counts = make([]uint32, n)
	for i := range n {
		switch r.IntN(12) {
		case 0:
			l.bias[i] = float32(r.NormFloat64() * 3)
		case 1:
			l.bias[i] = []float32{-100, 30, 5}[r.IntN(3)]
		}
		switch r.IntN(10) {
		case 0:
			l.counts[i] = 1 << 31 // prompt token
		case 1:
			l.counts[i] = uint32(1 + r.IntN(4))
		case 2:
			l.counts[i] = 1<<31 | uint32(1+r.IntN(3))
		case 3:
			l.counts[i] = []uint32{0x7FFFFFFF, 0xFFFFFFFF, 0x7FFFFFFE}[r.IntN(3)]
		}
	}
	words := (l.vocab + 31) / 32
	l.mask = make([]uint32, l.slots*words)
	for s := range l.slots {
		kind := r.IntN(6)
		for w := range words {
			var m uint32
			switch kind {
			case 0: // a few allowed tokens
				m = 1 << r.IntN(32)
				if r.IntN(3) != 0 {
					m = 0
				}
			case 1: // nothing allowed
				m = 0
			default: // most allowed
				m = ^(r.Uint32() & r.Uint32() & r.Uint32())
			}
			l.mask[s*words+w] = m
		}
	}
}

// featureFlags picks a row's feature flags: processors, records, RECORD and ADVANCE.
func featureFlags(r *rand.Rand, p *rowParams) {
	for _, f := range []abi.Flags{abi.FlagLogprobs, abi.FlagLogprobs, abi.FlagBias, abi.FlagMask, abi.FlagPenalties, abi.FlagRecord, abi.FlagAdvance} {
		if r.IntN(2) == 0 {
			p.Flags |= f
		}
	}
	p.RepetitionPenalty = []float32{1, 1, 1.3, 0.7}[r.IntN(4)]
	p.FrequencyPenalty = []float32{0, 0.5, -0.25}[r.IntN(3)]
	p.PresencePenalty = []float32{0, 0.4}[r.IntN(2)]
}

// featureLaunches is the workload of the serving features.
func featureLaunches(r *rand.Rand) []*launch {
	var ls []*launch
	add := func(l *launch, fill func(p *rowParams)) {
		l.fill(r)
		l.withProcessors(r)
		l.logprobs = true
		l.rows(r, fill)
		ls = append(ls, l)
	}
	vocabs := []int{5, 37, 255, 1001}
	// gumbel_argmax: every dtype, split and not, one and several draws.
	for dt := range 3 {
		for _, s := range []int{1, 3} {
			for _, d := range []int{1, 3} {
				v := vocabs[r.IntN(len(vocabs))]
				block, warp := emuShape(r, s)
				l := &launch{kernel: kernelGumbel, dtype: dt, gridX: s, gridZ: d, block: block, warp: warp, vocab: v,
					stride: stride(r, v), slack: r.IntN(16), slots: 4 + r.IntN(2)}
				l.name = fmt.Sprintf("gumbel dtype=%d S=%d D=%d V=%d T=%d warp=%d", dt, s, d, v, block, warp)
				add(l, func(p *rowParams) { featureFlags(r, p) })
			}
		}
	}
	// Log-probabilities alone: temperature 1 (raw and processed are one log-sum-exp),
	// other temperatures and greedy, on a larger row split over many blocks.
	for _, s := range []int{1, 16} {
		l := &launch{kernel: kernelGumbel, dtype: dtF32, gridX: s, block: 16, warp: 8, vocab: 4099, stride: 4099, slots: 5}
		l.name = fmt.Sprintf("gumbel logprobs only S=%d V=4099", s)
		temps := []float32{1, 1, 0.7, 0, 1.5}
		add(l, func(p *rowParams) { p.Flags = abi.FlagLogprobs; p.Temperature = temps[r.IntN(len(temps))] })
	}
	// categorical: every dtype, with filters, processors and draws.
	ks := []uint32{0, 0, 1, 3, 20}
	ps := []float32{0, 0, 0.5, 0.9}
	mps := []float32{0, 0, 0.05}
	for dt := range 3 {
		for _, d := range []int{1, 2} {
			v := vocabs[1+r.IntN(len(vocabs)-1)]
			block, warp := emuShape(r, 1)
			l := &launch{kernel: kernelCategorical, dtype: dt, gridX: 1, gridZ: d, block: block, warp: warp, vocab: v,
				stride: stride(r, v), slack: r.IntN(16), slots: 4 + r.IntN(2)}
			l.name = fmt.Sprintf("categorical dtype=%d D=%d V=%d T=%d warp=%d", dt, d, v, block, warp)
			add(l, func(p *rowParams) {
				featureFlags(r, p)
				p.TopK, p.TopP, p.MinP = ks[r.IntN(len(ks))], ps[r.IntN(len(ps))], mps[r.IntN(len(mps))]
			})
		}
	}
	// Device routing: each kernel takes only its own rows of a mixed launch.
	for k := range 2 {
		for _, d := range []int{1, 2} {
			l := &launch{kernel: k, dtype: dtBF16, gridX: 2 - k, gridZ: d, block: 32, warp: 16, vocab: 130, stride: 131,
				slots: 6}
			l.name = fmt.Sprintf("routed %s D=%d", kernelNames[k], d)
			add(l, func(p *rowParams) {
				featureFlags(r, p)
				p.Flags |= abi.FlagRouted
				if r.IntN(2) == 0 {
					p.Flags |= abi.FlagCategorical
				}
				p.TopP = 0.9
			})
		}
	}
	// topn: plain and perturbed, every dtype, one block or split, every n and bad ones.
	ns := []uint32{1, 3, 20, 20, 7, 0, 21}
	for dt := range 3 {
		for _, s := range []int{1, 3, 16} {
			v := []int{5, 37, 1001}[r.IntN(3)]
			block, warp := emuShape(r, s)
			l := &launch{kernel: kernelTopN, dtype: dt, gridX: s, block: block, warp: warp, vocab: v,
				stride: stride(r, v), slack: r.IntN(16), slots: 4 + r.IntN(2)}
			l.name = fmt.Sprintf("topn dtype=%d S=%d V=%d T=%d warp=%d", dt, s, v, block, warp)
			add(l, func(p *rowParams) {
				p.TopN = ns[r.IntN(len(ns))]
				if r.IntN(2) == 0 {
					p.Flags |= abi.FlagPerturbed
					for _, f := range []abi.Flags{abi.FlagBias, abi.FlagMask, abi.FlagPenalties} {
						if r.IntN(2) == 0 {
							p.Flags |= f
						}
					}
					p.RepetitionPenalty, p.FrequencyPenalty, p.PresencePenalty = 1.2, 0.5, 0.25
				}
			})
			l.logprobs = false
		}
	}
	return ls
}

// featureCoverage counts what the workload exercised, from outcomes that match the Go edition.
func featureCoverage(ls []*launch, got []outcome) map[string]int {
	c := map[string]int{}
	for i, l := range ls {
		o := got[i]
		if l.kernel == kernelTopN {
			for _, p := range l.params {
				for j := range maxTopN {
					slot := int(p.Row)*maxTopN + j
					v := math.Float32frombits(uint32(o.status[slot]))
					switch {
					case o.tokens[slot] >= 0 && p.Flags&abi.FlagPerturbed != 0 && p.Temperature != 0:
						c["topn perturbed token"]++
					case o.tokens[slot] >= 0:
						c["topn token"]++
					case o.status[slot] != untouched && v != v:
						c["topn NaN slot"]++
					case math.IsInf(float64(v), -1):
						c["topn empty slot"]++
					}
				}
			}
			continue
		}
		d := l.draws()
		params := l.paramBytes()
		for y, p := range l.params {
			routedAway := p.Flags&abi.FlagRouted != 0 && (p.Flags&abi.FlagCategorical != 0) != (l.kernel == kernelCategorical)
			for z := range d {
				slot := int(p.Row)*d + z
				switch {
				case routedAway:
					if o.status[slot] == untouched {
						c["routed row left alone"]++
					}
				case o.status[slot] == 0 && p.Flags&abi.FlagLogprobs != 0:
					c[fmt.Sprintf("%s record", kernelNames[l.kernel])]++
					if p.Flags&(abi.FlagBias|abi.FlagMask|abi.FlagPenalties) != 0 {
						c["record of a processed row"]++
					}
					if d > 1 {
						c["record of a later draw"]++
					}
				case o.status[slot] > 0 && p.Flags&abi.FlagLogprobs != 0:
					c["NaN record"]++
				}
			}
			before := binary.LittleEndian.Uint64(params[y*paramsBytes+16:])
			after := binary.LittleEndian.Uint64(o.params[y*paramsBytes+16:])
			if after != before {
				c["step advanced"]++
			}
		}
		for k := range o.counts {
			if o.counts[k] != l.counts[k] {
				c["count recorded"]++
			}
		}
	}
	return c
}

// TestCUDAFeaturesMatchGoEdition runs the features workload and requires the Go edition's
// outputs.
func TestCUDAFeaturesMatchGoEdition(t *testing.T) {
	ls := featureLaunches(rand.New(rand.NewPCG(20261130, 2)))
	got := decodeResults(t, runDriver(t, encodeJob(t, ls)), ls)
	seen, kinds := matchGo(t, ls, got)
	cov := featureCoverage(ls, got)
	t.Logf("slots by status %v; sampled by path %v; coverage %v", seen, kinds, cov)
	for s, n := range seen {
		require.Positive(t, n, "no slot ended with status %d", s)
	}
	for _, k := range []string{"gumbel_argmax record", "categorical record", "record of a processed row",
		"record of a later draw", "NaN record", "routed row left alone", "step advanced", "count recorded",
		"topn token", "topn perturbed token", "topn NaN slot", "topn empty slot"} {
		require.Positive(t, cov[k], "the workload never reached %q", k)
	}
	for _, k := range []string{"greedy", "gumbel split", "gumbel", "categorical"} {
		require.Positive(t, kinds[k], "no slot sampled a token on the %s path", k)
	}
}
