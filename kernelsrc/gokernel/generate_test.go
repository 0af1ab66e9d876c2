package gokernel

import (
	"math"
	"math/rand/v2"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
)

// Random problems: row shapes, parameters and processor inputs.

// llmRow is normal(0, 2) with a few clear favourites.
func llmRow(r *rand.Rand, v int) []float32 {
	row := make([]float32, v)
	for i := range row {
		row[i] = float32(r.NormFloat64() * 2)
	}
	for range 1 + r.IntN(3) {
		row[r.IntN(v)] = 10 + 15*r.Float32()
	}
	return row
}

// tiedRow has few distinct values, so that top-k and top-p meet ties at their bounds.
func tiedRow(r *rand.Rand, v int) []float32 {
	row := make([]float32, v)
	for i := range row {
		row[i] = float32(r.IntN(7) - 3)
	}
	return row
}

func maskedRow(r *rand.Rand, v int) []float32 {
	row := llmRow(r, v)
	for i := range row {
		if r.IntN(3) == 0 {
			row[i] = float32(math.Inf(-1))
		}
	}
	return row
}

// farRow has one dominant logit: most other elements cannot win, so the skip paths
// run, some elements sitting just around the noise bounds.
func farRow(r *rand.Rand, v int) []float32 {
	row := make([]float32, v)
	for i := range row {
		row[i] = -50 * r.Float32()
	}
	row[r.IntN(v)] = 0
	return row
}

// hugeRow mixes magnitudes whose scaled values overflow at small temperatures.
func hugeRow(r *rand.Rand, v int) []float32 {
	row := llmRow(r, v)
	for range 1 + r.IntN(3) {
		row[r.IntN(v)] = float32(math.Copysign(3e38, r.Float64()-0.7))
	}
	return row
}

// soleRow has one finite logit (or two equal ones) among -Inf.
func soleRow(r *rand.Rand, v int) []float32 {
	row := make([]float32, v)
	for i := range row {
		row[i] = float32(math.Inf(-1))
	}
	row[r.IntN(v)] = 1
	row[r.IntN(v)] = 1
	return row
}

var rowShapes = []struct {
	name string
	make func(*rand.Rand, int) []float32
}{
	{"llm", llmRow}, {"tied", tiedRow}, {"masked", maskedRow}, {"far", farRow},
	{"huge", hugeRow}, {"sole", soleRow},
}

// randomProblem builds nRows rows of one shape (some rows replaced by error rows) and
// launch rows that name a random subset of them in a random order.
func randomProblem(r *rand.Rand, d abi.DType, v int, shape func(*rand.Rand, int) []float32, params func(*rand.Rand) abi.RowParams) *problem {
	const nRows = 6
	p := &problem{d: d, vocab: v, stride: v + r.IntN(3)}
	for range nRows {
		row := shape(r, v)
		switch r.IntN(12) {
		case 0:
			row[r.IntN(v)] = float32(math.NaN())
		case 1:
			row[r.IntN(v)] = float32(math.Inf(1))
		case 2:
			for i := range row {
				row[i] = float32(math.Inf(-1))
			}
		}
		// The padding between rows holds values that must never be read.
		row = append(row, make([]float32, p.stride-v)...)
		for i := v; i < p.stride; i++ {
			row[i] = float32(math.NaN())
		}
		p.rows = append(p.rows, row)
	}
	perm := r.Perm(nRows)
	for _, row := range perm[:1+r.IntN(nRows)] {
		rp := params(r)
		rp.Row = uint32(row)
		p.params = append(p.params, rp)
	}
	return p
}

func pick[T any](r *rand.Rand, v ...T) T { return v[r.IntN(len(v))] }

func randomTemperature(r *rand.Rand) float32 {
	switch r.IntN(20) {
	case 0:
		return pick(r, -1, float32(math.NaN()), float32(math.Inf(1)), 1e-40)
	case 1, 2, 3:
		return 0
	}
	return pick[float32](r, 0.05, 0.3, 0.7, 1, 1.7, 4)
}

func gumbelParams(r *rand.Rand) abi.RowParams {
	return abi.RowParams{Temperature: randomTemperature(r), Seed: r.Uint64(), Step: r.Uint64() >> r.IntN(64)}
}

func categoricalParams(v int) func(*rand.Rand) abi.RowParams {
	return func(r *rand.Rand) abi.RowParams {
		p := gumbelParams(r)
		p.TopK = uint32(pick(r, 0, 0, 1, 2, 5, 50, v-1, v, v+3, math.MaxUint32))
		p.TopP = pick[float32](r, 0, 0, 0.01, 0.5, 0.9, 0.999, 1, 1.5, -0.5, float32(math.NaN()))
		p.MinP = pick[float32](r, 0, 0, 0.001, 0.05, 0.5, 1, 2, -1)
		return p
	}
}

// randomInputs gives each logits row a random mix of bias, counts and mask, makes a few
// token bitmask rows, and gives each launch row the flags, penalty values and bitmask
// row that use them.
func randomInputs(r *rand.Rand, p *problem) {
	v := p.vocab
	p.bias, p.counts, p.mask = make([][]float32, len(p.rows)), make([][]uint32, len(p.rows)), make([][]uint32, len(p.rows))
	for row := range p.rows {
		bias := make([]float32, v)
		for range 1 + r.IntN(4) {
			bias[r.IntN(v)] = pick[float32](r, -100, -3, 2.5, 8, 30)
		}
		counts := make([]uint32, v)
		for range r.IntN(v/2 + 1) {
			i := r.IntN(v)
			counts[i] = uint32(r.IntN(4))
			if r.IntN(3) == 0 {
				counts[i] |= 1 << 31 // a prompt token
			}
		}
		mask := make([]uint32, (v+31)/32)
		switch r.IntN(4) {
		case 0: // every token allowed
			for i := range mask {
				mask[i] = math.MaxUint32
			}
		case 1: // a single allowed token
			i := r.IntN(v)
			mask[i/32] = 1 << (i % 32)
		case 2: // nothing allowed
		default:
			for i := range mask {
				mask[i] = r.Uint32()
			}
		}
		p.bias[row], p.counts[row], p.mask[row] = bias, counts, mask
	}
	p.bitmask = randomBitmasks(r, v, len(p.rows)+1)
	for y := range p.params {
		rp := &p.params[y]
		rp.Flags |= abi.Flags(r.IntN(8)) * abi.FlagBias // some subset of BIAS, MASK, PENALTIES
		rp.RepetitionPenalty = pick[float32](r, 1, 1.3, 0.7)
		rp.FrequencyPenalty = pick[float32](r, 0, 0.5, -0.25)
		rp.PresencePenalty = pick[float32](r, 0, 1.5, -1)
		if r.IntN(3) == 0 {
			rp.Flags |= abi.FlagBitmask
			rp.BitmaskRow = uint32(r.IntN(len(p.bitmask)))
		}
	}
}

// randomBitmasks makes n token bitmask rows for vocab v as a grammar would fill them: a
// few allowed tokens (digits and a closing token), a single one, none, most tokens, and
// every bit set, the bits past v included (which the kernels ignore).
func randomBitmasks(r *rand.Rand, v, n int) [][]uint32 {
	rows := make([][]uint32, n)
	for m := range rows {
		row := make([]uint32, (v+31)/32)
		switch m % 5 {
		case 0: // a few allowed tokens
			for range 1 + r.IntN(10) {
				i := r.IntN(v)
				row[i/32] |= 1 << (i % 32)
			}
		case 1: // a single allowed token
			i := r.IntN(v)
			row[i/32] = 1 << (i % 32)
		case 2: // nothing allowed
		case 3: // most tokens
			for i := range row {
				row[i] = r.Uint32() | r.Uint32()
			}
		default: // every bit, past v too
			for i := range row {
				row[i] = math.MaxUint32
			}
		}
		rows[m] = row
	}
	return rows
}
