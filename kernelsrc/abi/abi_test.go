package abi

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func sampleParams() RowParams {
	return RowParams{Row: 7, Temperature: 0.7, Seed: 0x0123456789ABCDEF, Step: 1<<40 + 3, TopK: 50, TopP: 0.9,
		MinP: 0.05, Flags: FlagLogprobs | FlagPenalties, RepetitionPenalty: 1.1, FrequencyPenalty: -0.5,
		PresencePenalty: 0.25, TopN: 20, BitmaskRow: 5, Token: 1234}
}

// TestRowParamsLayout checks Encode against the struct's own layout: the Go struct is
// the wire format, 64 bytes, fields in word order.
func TestRowParamsLayout(t *testing.T) {
	require.Equal(t, uintptr(RowParamsSize), unsafe.Sizeof(RowParams{}))
	p := sampleParams()
	var want bytes.Buffer
	require.NoError(t, binary.Write(&want, binary.LittleEndian, p))
	got := make([]byte, RowParamsSize)
	for i := range got {
		got[i] = 0xAA // Encode writes every byte, the reserved words included
	}
	p.Encode(got)
	assert.Equal(t, want.Bytes(), got)
	assert.Equal(t, p.Step, binary.LittleEndian.Uint64(got[StepOffset:]))
	assert.Equal(t, uint32(p.Flags), binary.LittleEndian.Uint32(got[FlagsOffset:]))
	assert.Equal(t, p.BitmaskRow, binary.LittleEndian.Uint32(got[BitmaskRowOffset:]))
	assert.Equal(t, p, DecodeRowParams(got))
}

func TestRowParamsRoundTripKeepsBits(t *testing.T) {
	p := RowParams{Temperature: float32(math.Inf(1)), TopP: float32(math.NaN()), Flags: FlagsReserved}
	b := make([]byte, RowParamsSize)
	p.Encode(b)
	q := DecodeRowParams(b)
	assert.Equal(t, math.Float32bits(p.TopP), math.Float32bits(q.TopP))
	assert.Equal(t, p.Temperature, q.Temperature)
	assert.Equal(t, p.Flags, q.Flags)
}

func TestKernelNames(t *testing.T) {
	assert.Equal(t, "gumbel_argmax_f32", KernelName(GumbelArgmax, F32))
	assert.Equal(t, "categorical_f16", KernelName(Categorical, F16))
	assert.Equal(t, "topn_bf16", KernelName(TopN, BF16))
	for _, d := range DTypes {
		assert.Equal(t, map[DType]int{F32: 4, F16: 2, BF16: 2}[d], d.Size())
	}
}

func TestFlagsAreDistinctBitsBelowTheReserved(t *testing.T) {
	all := []Flags{FlagLogprobs, FlagAdvance, FlagRecord, FlagRouted, FlagCategorical, FlagBias, FlagMask,
		FlagPenalties, FlagPerturbed, FlagFiltered, FlagBitmask, FlagShard, FlagChainEnd, FlagKeptSet}
	var seen Flags
	for _, f := range all {
		assert.Equal(t, 1, bitsSet(uint32(f)), "flag %#x", f)
		assert.Zero(t, seen&f, "flag %#x twice", f)
		assert.Zero(t, f&FlagsReserved, "flag %#x reserved", f)
		seen |= f
	}
	assert.Equal(t, ^Flags(0), seen|FlagsReserved)
}

func bitsSet(v uint32) int {
	n := 0
	for ; v != 0; v &= v - 1 {
		n++
	}
	return n
}

// TestScratchLayout checks that the partials and counters words of every block, draw
// and set are distinct and inside the sizes.
func TestScratchLayout(t *testing.T) {
	for _, l := range []Launch{{Rows: 1, Split: 1, Draws: 1}, {Rows: 3, Split: 5, Draws: 2}, {Rows: 4, Split: 1, Draws: 3}} {
		words := map[int]string{}
		put := func(w int, what string) {
			require.Less(t, w, l.PartialsWords(GumbelArgmax), what)
			require.NotContains(t, words, w, "%s and %s", what, words[w])
			words[w] = what
		}
		counters := map[int]bool{}
		for y := range l.Rows {
			for z := range l.Draws {
				for x := range l.Split {
					put(l.KeyWord(y, z, x), "key")
					put(l.PairWord(y, z, x, 0), "raw pair")
					put(l.PairWord(y, z, x, 1), "processed pair")
					put(l.PayloadWord(y, z, x), "payload")
				}
				c := l.DrawCounter(y, z)
				require.Less(t, c+1, l.CountersWords(GumbelArgmax))
				require.False(t, counters[c] || counters[c+1])
				counters[c], counters[c+1] = true, true
			}
			c := l.RowCounter(y)
			require.Less(t, c, l.CountersWords(Categorical))
			require.False(t, counters[c])
			counters[c] = true
		}
		assert.Len(t, words, l.PartialsWords(GumbelArgmax))
		assert.Zero(t, l.PartialsWords(Categorical))
		topn := map[int]bool{}
		for y := range l.Rows {
			for x := range l.Split {
				for j := range TopNStride {
					w := l.TopNWord(y, x, j)
					require.Less(t, w, l.PartialsWords(TopN))
					require.False(t, topn[w])
					topn[w] = true
				}
			}
		}
		assert.Equal(t, 2*l.Rows, l.CountersWords(TopN))
	}
	assert.Equal(t, 6, Slots(3, 2))
	assert.Equal(t, 60, TopNSlots(3))
}

func TestShardKeys(t *testing.T) {
	ok := uint64(0x80000001)<<32 | uint64(^uint32(7)) // score bits, token 7
	tests := []struct {
		name  string
		key   uint64
		st    Status
		token int32
	}{
		{"token", ok, StatusOK, 7},
		{"no finite logit", ok, StatusNoFinite, -1},
		{"NaN or +Inf", ok, StatusNonFinite, -1},
		{"bad parameters", 0, StatusBadParams, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok, st := ShardResult(ShardKey(tt.key, tt.st))
			assert.Equal(t, tt.token, tok)
			assert.Equal(t, tt.st, st)
		})
	}
	// The merge is a maximum: failures beat tokens (bad parameters beat NaN), tokens
	// beat a shard without a finite logit.
	assert.Greater(t, ShardKey(0, StatusBadParams), ShardKey(0, StatusNonFinite))
	assert.Greater(t, ShardKey(0, StatusNonFinite), ShardKey(^uint64(0)>>1, StatusOK))
	assert.Greater(t, ShardKey(1, StatusOK), ShardKey(ok, StatusNoFinite))
}

func TestOrderKeyValueInvertsOrderKey(t *testing.T) {
	for _, f := range []float32{0, 1, -1, 3.4e38, -3.4e38, 1e-45, -1e-45, float32(math.Inf(1)), float32(math.Inf(-1))} {
		assert.Equal(t, f, OrderKeyValue(OrderKey(f)), "%v", f)
	}
	assert.Equal(t, float32(0), OrderKeyValue(OrderKey(float32(math.Copysign(0, -1)))), "-0 comes back as +0")
	assert.True(t, math.Signbit(float64(OrderKeyValue(OrderKey(-1)))))
}

func TestInexact(t *testing.T) {
	for _, tt := range []struct {
		score float32
		want  bool
	}{{0, false}, {4031.9, false}, {-4031.9, false}, {ExactLimit, true}, {-ExactLimit, true},
		{float32(math.Inf(-1)), true}, {float32(math.NaN()), true}} {
		assert.Equal(t, tt.want, Inexact(Pack(tt.score, 7)), "%v", tt.score)
	}
}

// TestSelectDigit: the digit is the highest non-empty bin whose mass from the top reaches
// the target, empty bins skipped, and what lies above it is added up.
func TestSelectDigit(t *testing.T) {
	counts, masses := make([]uint64, SelectBins), make([]uint64, SelectBins)
	counts[200], masses[200] = 3, 30
	counts[150], masses[150] = 1, 0 // present, but no mass: never decides a mass target
	counts[100], masses[100] = 5, 50
	for _, tt := range []struct {
		target, above, wantAbove uint64
		want                     uint32
	}{
		{target: 10, want: 200, wantAbove: 0},
		{target: 30, want: 200, wantAbove: 0},
		{target: 31, want: 100, wantAbove: 30},
		{target: 80, want: 100, wantAbove: 30},
		{target: 81, want: 100, wantAbove: 80}, // beyond the total: the lowest non-empty bin
		{target: 40, above: 15, want: 200, wantAbove: 15},
	} {
		above := tt.above
		assert.Equal(t, tt.want, SelectDigit(counts, masses, tt.target, &above), "target %d", tt.target)
		assert.Equal(t, tt.wantAbove, above, "target %d", tt.target)
	}
	above := uint64(0)
	assert.Equal(t, uint32(150), SelectDigit(counts, counts, 4, &above), "by count: the 4th largest is in bin 150")
}
