package emu

// Vocabulary shards (FlagShard): gumbel_argmax rows whose element 0 is global token
// vocab_offset, noised there, writing their shard keys; the other kernels refusing them.

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/stretchr/testify/require"
)

// shardOffsets are the offsets the workload tries: aligned ones (the first shard, a
// later one, the last that fits any vocabulary of the workload) and misaligned or
// oversized ones, which fail every shard row of the launch. The emulation is slow per
// block, so the split launches take a few of them.
var shardOffsets = []int{0, 4, abi.MaxVocab - 4100&^3, 2, abi.MaxVocab - 3}

// shardLaunches is the workload of vocabulary shards: gumbel_argmax over every dtype,
// one block and split, one and several draws, with processors and bitmasks; shard rows
// beside ordinary ones; and a categorical launch whose shard rows it must refuse.
func shardLaunches(r *rand.Rand) []*launch {
	var ls []*launch
	for dt := range 3 {
		for _, s := range []int{1, 3, 16} {
			for k, off := range shardOffsets {
				if s == 16 && k%2 != 0 {
					continue
				}
				v := []int{37, 1001, 4099}[r.IntN(3)]
				block, warp := emuShape(r, s)
				d := 1 + r.IntN(2)
				l := &launch{kernel: kernelGumbel, dtype: dt, gridX: s, gridZ: d, block: block, warp: warp, vocab: v,
					stride: stride(r, v), slack: r.IntN(16), slots: 5, vocabOffset: off, shard: true}
				l.name = fmt.Sprintf("shard dtype=%d S=%d D=%d V=%d offset=%d", dt, s, d, v, off)
				l.fill(r)
				if r.IntN(2) == 0 {
					l.withProcessors(r)
				}
				l.withBitmask(r)
				l.rows(r, func(p *rowParams) {
					if r.IntN(5) != 0 {
						p.Flags |= abi.FlagShard
					}
					if r.IntN(8) == 0 {
						p.Flags |= abi.FlagLogprobs // a shard writes no record: status 3
					}
					if l.bias != nil && r.IntN(2) == 0 {
						p.Flags |= abi.FlagBias | abi.FlagMask
					}
					l.bitmaskFlag(r, p)
				})
				l.logprobs = true
				ls = append(ls, l)
			}
		}
	}
	l := &launch{kernel: kernelCategorical, dtype: dtF32, gridX: 1, block: 32, warp: 16, vocab: 130, stride: 130,
		slots: 5, vocabOffset: 4, shard: true, name: "categorical refuses shard rows"}
	l.fill(r)
	l.rows(r, func(p *rowParams) { p.Flags |= abi.FlagShard; p.TopK = 5 })
	return append(ls, l)
}

// checkShardKeys requires the Go edition's keys to follow its tokens and statuses
// (ABI.md, "Vocabulary shards") and every kind of key to occur, and returns the coverage.
func checkShardKeys(t *testing.T, ls []*launch, wants []outcome) map[string]int {
	t.Helper()
	cov := map[string]int{}
	for i, l := range ls {
		for _, p := range l.params {
			for z := range l.draws() {
				o := int(p.Row)*l.draws() + z
				key, tok, st := wants[i].keys[o], wants[i].tokens[o], wants[i].status[o]
				if p.Flags&abi.FlagShard == 0 || l.kernel != kernelGumbel {
					require.Equal(t, uint64(untouchedKey), key, "%s: slot %d is no shard's", l.name, o)
					if p.Flags&abi.FlagShard != 0 {
						require.Equal(t, int32(abi.StatusBadParams), st, "%s: a shard row outside gumbel_argmax", l.name)
						cov["refused elsewhere"]++
					}
					continue
				}
				gotTok, gotSt := abi.ShardResult(key)
				require.Equal(t, abi.Status(st), gotSt, "%s: slot %d key %#x", l.name, o, key)
				if abi.Status(st) != abi.StatusExact { // its slot keeps the float32 winner, its key no token
					require.Equal(t, tok, gotTok, "%s: slot %d key %#x", l.name, o, key)
				}
				if st == 0 {
					require.GreaterOrEqual(t, int(tok), l.vocabOffset, "%s: a global index", l.name)
					require.Less(t, int(tok), l.vocabOffset+l.vocab, "%s: a global index", l.name)
				}
				cov[fmt.Sprintf("status %d", st)]++
			}
		}
	}
	for _, k := range []string{"status 0", "status 1", "status 2", "status 3", "refused elsewhere"} {
		require.Positive(t, cov[k], "no shard slot with %s", k)
	}
	return cov
}

// TestCUDAShardsMatchGoEdition: the emulated CUDA edition writes the Go edition's shard
// keys, tokens (global indices) and statuses.
func TestCUDAShardsMatchGoEdition(t *testing.T) {
	ls := shardLaunches(rand.New(rand.NewPCG(20261201, 24)))
	got := decodeResults(t, runDriver(t, encodeJob(t, ls)), ls)
	wants := goEdition(t, ls)
	cov := checkShardKeys(t, ls, wants)
	matchOutcomes(t, ls, wants, got)
	t.Logf("%d launches; shard slots %v", len(ls), cov)
}
