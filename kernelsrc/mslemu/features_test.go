package mslemu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/gumbel-go/gumbel/kernelsrc/gokernel"
)

// bitmaskRows is the number of mask rows in the bitmask argument of a feature case (see
// featureBuffers for what each allows).
const bitmaskRows = 5

// randomFeatures draws the features of one launch row of kernel k: flags (processors;
// for the sampling kernels also records, ADVANCE, RECORD and routing to any of the
// three; for topn PERTURBED), penalties, the bitmask row and, for topn, N. A few rows
// set a reserved flag. bitmask_row is set on rows without BITMASK too, where it must be
// ignored (the bitmask argument may then be 8 bytes of poison).
func randomFeatures(r *rand.Rand, k kernelKind, p *abi.RowParams) {
	chance := func(pct int) bool { return r.IntN(100) < pct }
	set := func(f abi.Flags, pct int) {
		if chance(pct) {
			p.Flags |= f
		}
	}
	set(abi.FlagBias, 40)
	set(abi.FlagMask, 40)
	set(abi.FlagPenalties, 40)
	set(abi.FlagBitmask, 30)
	p.BitmaskRow = pick[uint32](r, 0, 1, 2, 2, 3, 3, 4, 4) // row 0 (nothing allowed) rarely
	if k == topN {
		set(abi.FlagPerturbed, 60)
		p.TopN = pick[uint32](r, 1, 2, 5, 20, 20, 7, 3, 0, 21)
	} else {
		set(abi.FlagLogprobs, 75)
		set(abi.FlagAdvance, 50)
		set(abi.FlagRecord, 50)
		if chance(25) {
			// Routed to gumbel_argmax, categorical, filtered, or (both flags) categorical.
			p.Flags |= abi.FlagRouted
			set(abi.FlagCategorical, 50)
			set(abi.FlagFiltered, 50)
		}
	}
	if chance(3) {
		p.Flags |= 1 << 14 // reserved: status 3
	}
	p.RepetitionPenalty = pick[float32](r, 1, 1.1, 1.3, 0.8, 2)
	p.FrequencyPenalty = pick[float32](r, 0, 0.5, -0.25, 1)
	p.PresencePenalty = pick[float32](r, 0, 0.2, -1, 0.7)
}

// featureBuffers fills the bias, counts and mask buffers of the case's rows, and the
// bitmask argument's bitmaskRows mask rows, when a launch row uses them: biases large and
// small, counts of prompt-only, drawn and saturated tokens, masks that allow nothing, one
// token or most. Bitmask row 0 allows nothing, row 1 one token, the others most, half or
// a few; every bitmask row sets the bits past V in its last word, which must be ignored.
func featureBuffers(r *rand.Rand, c *launchCase, params []abi.RowParams) {
	var flags abi.Flags
	for _, p := range params {
		flags |= p.Flags
	}
	v, rows := c.vocab, c.outRows
	if flags&abi.FlagBias != 0 {
		c.bias = make([]float32, rows*v)
		for i := range c.bias {
			switch k := r.IntN(20); {
			case k < 8:
				// no bias
			case k == 8:
				c.bias[i] = float32(40 * (r.Float64() - 0.5))
			default:
				c.bias[i] = float32(r.NormFloat64() * 2)
			}
		}
	}
	if flags&(abi.FlagPenalties|abi.FlagRecord) != 0 {
		c.counts = make([]uint32, rows*v)
		for i := range c.counts {
			switch k := r.IntN(100); {
			case k < 55:
			case k < 80:
				c.counts[i] = 1 + uint32(r.IntN(4))
			case k < 88:
				c.counts[i] = 1 << 31 // prompt only
			case k < 94:
				c.counts[i] = 1<<31 | uint32(1+r.IntN(3))
			case k < 97:
				c.counts[i] = abi.CountMask // saturated
			default:
				c.counts[i] = 0xFFFFFFFF
			}
		}
	}
	if flags&abi.FlagMask != 0 {
		w := (v + 31) / 32
		c.mask = make([]uint32, rows*w)
		for row := range rows {
			words := c.mask[row*w : (row+1)*w]
			switch k := r.IntN(10); {
			case k == 0:
				// nothing allowed: status 2
			case k == 1:
				i := r.IntN(v)
				words[i/32] = 1 << (i % 32)
			default:
				for i := range v {
					if r.IntN(10) < 7 {
						words[i/32] |= 1 << (i % 32)
					}
				}
			}
		}
	}
	if flags&abi.FlagBitmask != 0 {
		c.bitmask = newBitmask(r, v, bitmaskRows)
	}
}

// newBitmask returns rows mask rows of ceil(v/32) words in the layout of the bitmask
// argument: row 0 allows nothing, row 1 one token, the others each a random share of the
// tokens (most, half or a few). Every row sets the bits past v of its last word, which
// the kernels must ignore.
func newBitmask(r *rand.Rand, v, rows int) []uint32 {
	w := (v + 31) / 32
	bm := make([]uint32, rows*w)
	for row := range rows {
		words := bm[row*w : (row+1)*w]
		switch row {
		case 0:
		case 1:
			i := r.IntN(v)
			words[i/32] = 1 << (i % 32)
		default:
			pct := pick(r, 90, 50, 5)
			for i := range v {
				if r.IntN(100) < pct {
					words[i/32] |= 1 << (i % 32)
				}
			}
		}
		if v%32 != 0 {
			words[w-1] |= ^uint32(0) << (v % 32)
		}
	}
	return bm
}

// newFeatureCase is newCase with D draws and rows that use the row features: processors,
// log-probabilities, routing, step advance (some across the 2^64 wrap) and token
// recording (topn: N and PERTURBED).
func newFeatureCase(r *rand.Rand, name string, kernel kernelKind, dtype, T, S, draws, n, vocab int) *launchCase {
	c := newCase(r, name, kernel, dtype, T, S, n, vocab)
	c.draws = draws
	params := make([]abi.RowParams, n)
	for y := range params {
		old := c.rowParams(y)
		p := &params[y]
		p.Row, p.Temperature = old.Row, old.Temperature
		p.Seed, p.Step = r.Uint64(), r.Uint64()
		if r.IntN(8) == 0 {
			p.Step = math.MaxUint64 - uint64(r.IntN(2)) // draws wrap the step
		}
		if kernel == categorical || kernel == filtered {
			p.TopK = pick[uint32](r, 0, 0, 1, 2, 5, 50, uint32(max(vocab-1, 0)))
			p.TopP = pick[float32](r, 0, 0, 0.01, 0.5, 0.9, 0.999, 1)
			p.MinP = pick[float32](r, 0, 0, 0, 0.05, 0.5, 1)
		}
		randomFeatures(r, kernel, p)
		if kernel == categorical && r.IntN(4) == 0 {
			// The kept set's descriptor in place of the record.
			p.Flags |= abi.FlagLogprobs | abi.FlagKeptSet
			p.Token = uint32(r.IntN(vocab + 1))
		}
		c.setRowParams(y, *p)
	}
	featureBuffers(r, c, params)
	return c
}

// featureCaseName names a launch of newFeatureCase.
func featureCaseName(kernel kernelKind, dtype, T, S, D, vocab, width int) string {
	family := abi.GumbelArgmax
	switch kernel {
	case categorical:
		family = abi.Categorical
	case topN:
		family = abi.TopN
	case filtered:
		family = abi.Filtered
	case score:
		family = abi.Score
	case residual:
		family = abi.Residual
	}
	return fmt.Sprintf("%s%s/T=%d/S=%d/D=%d/V=%d/width=%d", family, abi.Suffixes[dtype], T, S, D, vocab, width)
}

// TestRowFeaturesMatchGoEdition runs gumbel_argmax and categorical in the emulator with
// the row features, over every dtype, threadgroups of 32, 256 and 1024, 1, 3 and 16
// threadgroups per row, 1 to 3 draws and SIMD widths of 8 to 64: processed logits (bias,
// penalties with prompt and saturated counts, masks and token bitmasks with nothing or
// one token allowed, alone and together), log-probability records, device routing, step
// advance (across the 2^64 wrap) and token recording. Tokens, status, counts and params
// must equal the Go edition's; log-probability records must agree within recordTolerance.
func TestRowFeaturesMatchGoEdition(t *testing.T) {
	bin := buildDriver(t)
	r := rand.New(rand.NewPCG(2026, 7))
	var cases []*launchCase
	add := func(kernel kernelKind, dtype, T, S, D, width int) {
		v := vocabs[r.IntN(len(vocabs))]
		c := newFeatureCase(r, featureCaseName(kernel, dtype, T, S, D, v, width), kernel, dtype, T, S, D, 5, v)
		c.simdWidth = width
		cases = append(cases, c)
	}
	for dtype := range abi.Suffixes {
		for _, T := range []int{32, 256, 1024} {
			for _, S := range []int{1, 3, 16} {
				add(gumbelArgmax, dtype, T, S, 1+r.IntN(3), 0)
			}
			for range 3 {
				add(categorical, dtype, T, 1, 1+r.IntN(3), 0)
			}
		}
	}
	for _, width := range []int{8, 16, 64} {
		for _, T := range []int{64, 512} {
			add(gumbelArgmax, 0, T, 3, 2, width)
			add(categorical, 0, T, 1, 2, width)
		}
	}
	got := runDriver(t, bin, cases)
	kernels := gokernel.Kernels()
	var records, okSlots, untouchedSlots int
	var worst float64
	var statusCounts [4]int
	for i, c := range cases {
		want := runGoEdition(t, c, kernels, r)
		n, w := compareOutputs(t, c, want, got[i])
		records += n
		worst = max(worst, w)
		for o := range c.slots() {
			switch st := want.status[o]; {
			case st == untouched:
				untouchedSlots++
			case st >= 0 && st < 4:
				statusCounts[st]++
				okSlots++
			}
		}
	}
	t.Logf("%d launches: %d slots with a status (0/1/2/3: %v), %d left alone (routed away or unnamed); "+
		"%d records compared, largest deviation %.3g of the normaliser",
		len(cases), okSlots, statusCounts, untouchedSlots, records, worst)
	for st, n := range statusCounts {
		assert.Positive(t, n, "no slot ended with status %d", st)
	}
	assert.Greater(t, records, 200, "too few log-probability records compared")
}
