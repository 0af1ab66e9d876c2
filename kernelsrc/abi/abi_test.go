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
