package mslemu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/gumbel-go/gumbel/kernelsrc/gokernel"
)

// TestShardsMatchGoEdition: gumbel_argmax rows that are vocabulary shards (FlagShard) at
// aligned, misaligned and oversized offsets, one threadgroup and several, one and several
// draws, write the Go edition's tokens (global indices), statuses and shard keys in the
// emulated Metal edition; categorical refuses them.
func TestShardsMatchGoEdition(t *testing.T) {
	bin := buildDriver(t)
	r := rand.New(rand.NewPCG(2026, 1201))
	offsets := []uint32{0, 4, 1 << 20, abi.MaxVocab - 4100&^3, 2, abi.MaxVocab - 3}
	var cases []*launchCase
	for dtype := range abi.Suffixes {
		for _, S := range []int{1, 3} {
			for _, off := range offsets {
				v := vocabs[r.IntN(len(vocabs))]
				name := fmt.Sprintf("shard%s/S=%d/V=%d/offset=%d", abi.Suffixes[dtype], S, v, off)
				c := newCase(r, name, gumbelArgmax, dtype, 64, S, 7, v)
				c.draws = 1 + r.IntN(2)
				c.vocabOffset, c.shard = off, true
				for y := range c.launchRows() {
					p := c.rowParams(y)
					if r.IntN(5) != 0 {
						p.Flags |= abi.FlagShard
					}
					c.setRowParams(y, p)
				}
				cases = append(cases, c)
			}
		}
	}
	cat := newCase(r, "categorical refuses shard rows", categorical, 0, 64, 1, 7, 130)
	cat.vocabOffset, cat.shard = 4, true
	for y := range cat.launchRows() {
		p := cat.rowParams(y)
		p.Flags |= abi.FlagShard
		cat.setRowParams(y, p)
	}
	cases = append(cases, cat)

	got := runDriver(t, bin, cases)
	kernels := gokernel.Kernels()
	var statuses [abi.StatusExact + 1]int
	for i, c := range cases {
		want := runGoEdition(t, c, kernels, r)
		assert.Equal(t, want.tokens, got[i].tokens, "%s: tokens", c.name)
		assert.Equal(t, want.status, got[i].status, "%s: status", c.name)
		assert.Equal(t, want.keys, got[i].keys, "%s: shard keys", c.name)
		assert.Zero(t, got[i].countersLeft, "%s: counters not left at zero", c.name)
		for y := range c.launchRows() {
			p := c.rowParams(y)
			for z := range c.numDraws() {
				o := int(p.Row)*c.numDraws() + z
				if p.Flags&abi.FlagShard == 0 || c.kernel != gumbelArgmax {
					require.Equal(t, uint64(0xA5A5A5A5A5A5A5A5), want.keys[o], "%s: slot %d is no shard's", c.name, o)
					continue
				}
				tok, st := abi.ShardResult(want.keys[o])
				require.Equal(t, want.status[o], int32(st), "%s: slot %d", c.name, o)
				if st != abi.StatusExact { // its slot keeps the float32 winner, its key no token
					require.Equal(t, want.tokens[o], tok, "%s: slot %d", c.name, o)
				}
				statuses[st]++
			}
		}
	}
	t.Logf("%d cases; shard slots by status %v", len(cases), statuses)
	for st, n := range statuses {
		if abi.Status(st) != abi.StatusNotReached { // residual's alone
			require.Positive(t, n, "no shard slot with status %d", st)
		}
	}
}
