package emu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
)

// This file tests gumbel_argmax's whole trips on rows whose only processors are masks:
// aligned rows long enough for several trips a thread, where the scans run without
// bounds or feature tests and the greedy scan takes a row's finite-logit observation from
// its best instead of from every group.

// maskedTripRow is one kind of row of the workload: its logits, the tokens it allows, and
// the status its slot must end with.
type maskedTripRow struct {
	name   string
	status int32
	make   func(r *rand.Rand, vocab int) (logits []float32, allowed []int)
}

// maskedTripRows are the row kinds. The allowed tokens sit away from the row's ends, in
// the trips that run whole, so that the tail trips cannot settle the observations.
var maskedTripRows = []maskedTripRow{
	{"one allowed token", 0, func(r *rand.Rand, v int) ([]float32, []int) {
		return bodyRow(r, v), []int{v/4 + r.IntN(v/2)}
	}},
	{"grammar terminals", 0, func(r *rand.Rand, v int) ([]float32, []int) {
		return bodyRow(r, v), middleTokens(r, v, 10)
	}},
	{"the middle half", 0, func(r *rand.Rand, v int) ([]float32, []int) {
		return bodyRow(r, v), middleTokens(r, v, v/2)
	}},
	{"allowed tokens at -Inf", 2, func(r *rand.Rand, v int) ([]float32, []int) {
		row := bodyRow(r, v)
		allowed := middleTokens(r, v, 10)
		for _, i := range allowed {
			row[i] = float32(math.Inf(-1))
		}
		return row, allowed
	}},
	{"one finite among -Inf", 0, func(r *rand.Rand, v int) ([]float32, []int) {
		row := bodyRow(r, v)
		allowed := middleTokens(r, v, 10)
		for _, i := range allowed[1:] {
			row[i] = float32(math.Inf(-1))
		}
		return row, allowed
	}},
	{"banned NaN", 1, func(r *rand.Rand, v int) ([]float32, []int) {
		row := bodyRow(r, v)
		row[v/4-1] = float32(math.NaN()) // below the middle half, in a whole trip
		return row, middleTokens(r, v, 10)
	}},
	{"banned +Inf", 1, func(r *rand.Rand, v int) ([]float32, []int) {
		row := bodyRow(r, v)
		row[v/3] = float32(math.Inf(1))
		return row, []int{v / 2}
	}},
}

// middleTokens is n distinct tokens of the row's middle half.
func middleTokens(r *rand.Rand, vocab, n int) []int {
	perm := r.Perm(vocab / 2)[:n]
	for i := range perm {
		perm[i] += vocab / 4
	}
	return perm
}

// tripShape is a launch shape of the workload: blocks of block threads in warps of warp
// lanes, S blocks a row.
type tripShape struct{ block, warp, blocks int }

// maskedTripLaunches is the workload: each row kind under the bitmask, the mask, or both
// (whose AND is the allowed set), greedy and at a sampling temperature, with and without
// log-probability records, in aligned rows (stride a multiple of 4) of several whole
// trips a thread, one launch a shape, dtypes in turn.
func maskedTripLaunches(r *rand.Rand, vocab, stride int, shapes []tripShape) []*launch {
	var ls []*launch
	for i, sh := range shapes {
		dt := []int{dtF32, dtBF16, dtF32, dtF16}[i%4]
		l := &launch{kernel: kernelGumbel, dtype: dt, gridX: sh.blocks, block: sh.block, warp: sh.warp, vocab: vocab,
			stride: stride, slots: 3 * len(maskedTripRows)}
		l.name = fmt.Sprintf("gumbel masks-only trips dtype=%d S=%d V=%d T=%d warp=%d", dt, sh.blocks, vocab, sh.block,
			sh.warp)
		words := (vocab + 31) / 32
		l.logits = make([]byte, l.slots*l.stride*l.elemSize())
		l.mask = make([]uint32, l.slots*words)
		l.bitmask = make([]uint32, l.slots*words)
		l.params = make([]rowParams, l.slots)
		for s := range l.slots {
			kind := maskedTripRows[s%len(maskedTripRows)]
			row, allowed := kind.make(r, vocab)
			for j, x := range row {
				l.store(s*l.stride+j, x)
			}
			// The arrays a row applies allow exactly the set between them: alone, the set
			// itself; together, the set plus tokens that only one of them allows. An
			// array the row does not apply holds other tokens too. The bits beyond V
			// are set, where there are any.
			m, b := l.mask[s*words:(s+1)*words], l.bitmask[s*words:(s+1)*words]
			for _, j := range allowed {
				m[j/32] |= 1 << (j % 32)
				b[j/32] |= 1 << (j % 32)
			}
			p := rowParams{Row: uint32(s), Seed: r.Uint64(), Step: r.Uint64(), BitmaskRow: uint32(s)}
			switch s / len(maskedTripRows) {
			case 0:
				p.Flags = abi.FlagBitmask
			case 1:
				p.Flags = abi.FlagMask
			default:
				p.Flags = abi.FlagMask | abi.FlagBitmask
			}
			both := abi.FlagMask | abi.FlagBitmask
			for range 20 {
				j := r.IntN(vocab)
				bit := uint32(1) << (j % 32)
				into, other := m, b
				if p.Flags&abi.FlagMask != 0 && (p.Flags&abi.FlagBitmask == 0 || r.IntN(2) == 0) {
					into, other = b, m
				}
				if p.Flags&both != both || other[j/32]&bit == 0 {
					into[j/32] |= bit
				}
			}
			if tail := vocab % 32; tail != 0 {
				m[words-1] |= ^uint32(0) << tail
				b[words-1] |= ^uint32(0) << tail
			}
			if r.IntN(3) != 0 {
				p.Temperature = 0
			} else {
				p.Temperature = 0.8
			}
			if r.IntN(3) == 0 {
				p.Flags |= abi.FlagLogprobs
			}
			l.params[s] = p
		}
		l.logprobs = true
		ls = append(ls, l)
	}
	return ls
}

// TestMaskedTripsMatchGoEdition runs the masks-only workload and requires the Go
// edition's tokens, statuses and records, and each kind's status. The block of 24
// threads makes trips of 96 elements, not a multiple of 32, so its scans run their
// general trips.
func TestMaskedTripsMatchGoEdition(t *testing.T) {
	shapes := []tripShape{{16, 8, 1}, {32, 16, 2}, {64, 32, 1}, {24, 8, 1}}
	ls := maskedTripLaunches(rand.New(rand.NewPCG(20261204, 1)), 4099, 4104, shapes)
	requireMaskedTripStatuses(t, ls, decodeResults(t, runDriver(t, encodeJob(t, ls)), ls))
}

// requireMaskedTripStatuses requires the Go edition's outcomes and each row kind's status.
func requireMaskedTripStatuses(t *testing.T, ls []*launch, got []outcome) {
	t.Helper()
	matchGo(t, ls, got)
	for i, l := range ls {
		for _, p := range l.params {
			kind := maskedTripRows[int(p.Row)%len(maskedTripRows)]
			require.Equal(t, kind.status, got[i].status[p.Row], "%s: row %d (%s), flags %#x", l.name, p.Row, kind.name,
				p.Flags)
		}
	}
}
