package mslemu

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/gumbel-go/gumbel/kernelsrc/gokernel"
)

// The launch rows of a bitmask case, by launch row y, and the bitmask rows they use
// (newBitmask: row 0 allows nothing, row 1 one token, rows 2-4 a random share).
const (
	bmShare     = iota // BITMASK, row 2
	bmSingle           // BITMASK, row 1: the one token it allows is drawn
	bmNone             // BITMASK, row 0: nothing allowed, status 2
	bmBoth             // MASK and BITMASK row 3
	bmDisjoint         // MASK allowing all but row 1's token, BITMASK row 1: status 2
	bmMeet             // MASK allowing one token, BITMASK row 2, which allows it: that token
	bmProcessed        // BIAS, PENALTIES and BITMASK row 4
	bmIgnored          // MASK and a bitmask_row past the end, without BITMASK (topn: BITMASK, not PERTURBED)
	bmRoles
)

// bitmaskCase is a launch whose launch row y plays role y, with what the roles expect.
type bitmaskCase struct {
	*launchCase
	single, meet int // the token of bitmask row 1, and the one bmMeet's mask and bitmask share
}

// allowed reports whether element i of launch row y's logits row gets through the row's
// mask and bitmask (topn without PERTURBED applies neither).
func (c *bitmaskCase) allowed(y, i int) bool {
	p := c.rowParams(y)
	if i < 0 || i >= c.vocab {
		return false
	}
	if c.kernel == topN && p.Flags&abi.FlagPerturbed == 0 {
		return true
	}
	w := (c.vocab + 31) / 32
	bit := func(words []uint32, row int) bool { return words[row*w+i/32]>>(i%32)&1 != 0 }
	if p.Flags&abi.FlagMask != 0 && !bit(c.mask, int(p.Row)) {
		return false
	}
	return p.Flags&abi.FlagBitmask == 0 || bit(c.bitmask, int(p.BitmaskRow))
}

// newBitmaskCase builds a launch of kernel with bmRoles launch rows over finite logits
// (so that masks alone decide status 2), LOGPROBS on every row of the sampling kernels
// and PERTURBED on topn's (without it topn ranks raw logits and applies no processor).
func newBitmaskCase(r *rand.Rand, name string, kernel kernelKind, dtype, T, S, D, vocab int) *bitmaskCase {
	c := &bitmaskCase{launchCase: newCase(r, name, kernel, dtype, T, S, bmRoles, vocab)}
	c.draws = D
	finiteLogits(r, c.launchCase)
	w := (vocab + 31) / 32
	c.bitmask = newBitmask(r, vocab, bitmaskRows)
	for i := range vocab {
		if c.bitmask[w+i/32]>>(i%32)&1 != 0 {
			c.single = i
		}
	}
	c.meet = r.IntN(vocab)
	c.bitmask[2*w+c.meet/32] |= 1 << (c.meet % 32)
	c.mask = make([]uint32, c.outRows*w)
	for i := range c.mask {
		c.mask[i] = r.Uint32() | r.Uint32()
	}
	c.bias = make([]float32, c.outRows*vocab)
	c.counts = make([]uint32, c.outRows*vocab)
	for i := range c.bias {
		c.bias[i] = float32(r.NormFloat64())
		c.counts[i] = uint32(r.IntN(3))
	}
	for y := range bmRoles {
		p := abi.RowParams{Row: c.rowParams(y).Row, Temperature: pick[float32](r, 0, 0.7, 1, 1.5), Seed: r.Uint64(),
			Step: r.Uint64(), RepetitionPenalty: 1.3, FrequencyPenalty: 0.5, PresencePenalty: 0.25,
			TopN: pick[uint32](r, 1, 5, abi.MaxTopN)}
		if kernel == categorical || kernel == filtered {
			setFilters(r, &p, r.IntN(numCombos), vocab)
		}
		if kernel == topN {
			p.Flags |= abi.FlagPerturbed
		} else {
			p.Flags |= abi.FlagLogprobs
		}
		mask := c.mask[int(p.Row)*w : int(p.Row+1)*w]
		switch y {
		case bmShare:
			p.Flags, p.BitmaskRow = p.Flags|abi.FlagBitmask, 2
		case bmSingle:
			p.Flags, p.BitmaskRow = p.Flags|abi.FlagBitmask, 1
		case bmNone:
			p.Flags, p.BitmaskRow = p.Flags|abi.FlagBitmask, 0
		case bmBoth:
			p.Flags, p.BitmaskRow = p.Flags|abi.FlagMask|abi.FlagBitmask, 3
		case bmDisjoint:
			p.Flags, p.BitmaskRow = p.Flags|abi.FlagMask|abi.FlagBitmask, 1
			for i := range mask {
				mask[i] = ^uint32(0)
			}
			mask[c.single/32] &^= 1 << (c.single % 32)
		case bmMeet:
			p.Flags, p.BitmaskRow = p.Flags|abi.FlagMask|abi.FlagBitmask, 2
			clear(mask)
			mask[c.meet/32] = 1 << (c.meet % 32)
		case bmProcessed:
			p.Flags, p.BitmaskRow = p.Flags|abi.FlagBias|abi.FlagPenalties|abi.FlagBitmask, 4
		case bmIgnored:
			p.Flags, p.BitmaskRow = p.Flags|abi.FlagMask, math.MaxUint32
			if kernel == topN {
				p.Flags, p.BitmaskRow = abi.FlagBitmask, 0
			}
		}
		c.setRowParams(y, p)
	}
	return c
}

// finiteLogits rewrites every logits row of c with finite values (the padding after each
// row keeps its NaN).
func finiteLogits(r *rand.Rand, c *launchCase) {
	esize := 4
	if c.dtype != 0 {
		esize = 2
	}
	for row := range c.outRows {
		x := make([]float32, c.vocab)
		for i := range x {
			x[i] = float32(r.NormFloat64() * 2)
		}
		encodeRow(c.dtype, x, c.logits[row*c.stride*esize:])
	}
}

// TestBitmaskMatchesGoEdition runs every kernel (gumbel_argmax, categorical, topn and the
// filtered route) in the emulator over every dtype, threadgroups of 32, 256 and 1024,
// several threadgroups per row and 1 or 2 draws, on launches whose rows use the bitmask
// argument: rows picking different mask rows, a bitmask that allows one token, one that
// allows none (status 2), a mask and a bitmask that each allow tokens but none in common
// (status 2), a mask and a bitmask that share one token, a bitmask with bias and
// penalties, and bitmask_row set without BITMASK. Every bitmask row sets the bits past V,
// which must not let anything through. Outputs must equal the Go edition's (records and
// topn values within recordTolerance), and every drawn or listed token must be allowed by
// both the mask and the bitmask.
func TestBitmaskMatchesGoEdition(t *testing.T) {
	bin := buildDriver(t)
	r := rand.New(rand.NewPCG(2026, 12))
	var cases []*bitmaskCase
	for _, kernel := range []kernelKind{gumbelArgmax, categorical, topN, filtered} {
		for dtype := range abi.Suffixes {
			for _, T := range []int{32, 256, 1024} {
				S, D := pick(r, 1, 3, 16), pick(r, 1, 2)
				if kernel == topN {
					D = 1
				}
				v := pick(r, 1, 7, 33, 1000, 4099)
				name := featureCaseName(kernel, dtype, T, S, D, v, 0)
				cases = append(cases, newBitmaskCase(r, name, kernel, dtype, T, S, D, v))
			}
		}
		for _, width := range []int{8, 64} {
			v := pick(r, 33, 1000, 4099)
			D := 2
			if kernel == topN {
				D = 1
			}
			c := newBitmaskCase(r, featureCaseName(kernel, 0, 128, 3, D, v, width), kernel, 0, 128, 3, D, v)
			c.simdWidth = width
			cases = append(cases, c)
		}
	}
	plain := make([]*launchCase, len(cases))
	for i, c := range cases {
		plain[i] = c.launchCase
	}
	got := runDriver(t, bin, plain)
	kernels := gokernel.Kernels()
	var checked, none, wantNone int
	for i, c := range cases {
		if c.kernel != topN {
			wantNone += 2 * c.numDraws() // bmNone and bmDisjoint
		}
		want := runGoEdition(t, c.launchCase, kernels, r)
		compareOutputs(t, c.launchCase, want, got[i])
		for y := range bmRoles {
			checked += checkBitmaskRow(t, c, y, got[i])
		}
		for o := range c.slots() {
			if c.kernel != topN && got[i].status[o] == int32(abi.StatusNoFinite) {
				none++
			}
		}
	}
	t.Logf("%d launches: %d outputs checked against their row's mask and bitmask, %d slots with status 2",
		len(cases), checked, none)
	assert.GreaterOrEqual(t, none, wantNone, "too few slots whose masks allow nothing")
}

// checkBitmaskRow checks the outputs of launch row y of c against its role and returns
// how many it checked.
func checkBitmaskRow(t *testing.T, c *bitmaskCase, y int, res result) int {
	t.Helper()
	p := c.rowParams(y)
	where := func(z int) string { return fmt.Sprintf("%s: launch row %d output %d", c.name, y, z) }
	if c.kernel == topN {
		n := int(p.TopN)
		base := int(p.Row) * abi.MaxTopN
		for j := range n {
			tok := res.tokens[base+j]
			if tok >= 0 {
				assert.True(t, c.allowed(y, int(tok)), "%s: token %d is masked", where(j), tok)
			}
		}
		switch y {
		case bmSingle, bmMeet:
			want := c.single
			if y == bmMeet {
				want = c.meet
			}
			assert.Equal(t, int32(want), res.tokens[base], "%s: the one allowed token", where(0))
			for j := 1; j < n; j++ {
				assert.Equal(t, int32(-1), res.tokens[base+j], "%s: one token allowed", where(j))
			}
		case bmNone, bmDisjoint:
			for j := range n {
				assert.Equal(t, int32(-1), res.tokens[base+j], "%s: nothing allowed", where(j))
			}
		case bmIgnored:
			for j := range min(n, c.vocab) {
				assert.GreaterOrEqual(t, res.tokens[base+j], int32(0), "%s: raw logits, no bitmask", where(j))
			}
		}
		return n
	}
	d := c.numDraws()
	for z := range d {
		o := int(p.Row)*d + z
		tok, st := res.tokens[o], res.status[o]
		switch y {
		case bmSingle, bmMeet:
			want := c.single
			if y == bmMeet {
				want = c.meet
			}
			assert.Equal(t, int32(abi.StatusOK), st, "%s: status", where(z))
			assert.Equal(t, int32(want), tok, "%s: the one allowed token", where(z))
		case bmNone, bmDisjoint:
			assert.Equal(t, int32(abi.StatusNoFinite), st, "%s: nothing allowed", where(z))
		}
		if st == int32(abi.StatusOK) {
			assert.True(t, c.allowed(y, int(tok)), "%s: token %d is masked", where(z), tok)
		} else {
			assert.Equal(t, int32(-1), tok, "%s: status %d", where(z), st)
		}
	}
	return d
}

// TestBitmaskRowPastTheEnd gives launch row 1 a bitmask_row one past the last row of the
// bitmask argument. The Go edition sees the buffer is too short and gives that row status
// 3, leaving the others alone. A Metal kernel cannot know a buffer's length, so there the
// host must keep bitmask_row in range: the emulated kernel reads the row where it would
// lie, which here is the driver's guard page, and the emulator reports the fault in one of
// launch row 1's threadgroups.
func TestBitmaskRowPastTheEnd(t *testing.T) {
	bin := buildDriver(t)
	r := rand.New(rand.NewPCG(2026, 13))
	kernels := gokernel.Kernels()
	const vocab, rows = 1000, 2
	for _, kernel := range []kernelKind{gumbelArgmax, categorical, topN, filtered} {
		c := newCase(r, featureCaseName(kernel, 0, 256, 3, 1, vocab, 0), kernel, 0, 256, 3, 2, vocab)
		finiteLogits(r, c)
		c.bitmask = newBitmask(r, vocab, rows)
		for y, m := range []uint32{rows - 1, rows} {
			p := abi.RowParams{Row: c.rowParams(y).Row, Temperature: 1, Seed: r.Uint64(), Flags: abi.FlagBitmask,
				BitmaskRow: m, TopN: 3}
			if kernel == topN {
				p.Flags |= abi.FlagPerturbed
			}
			c.setRowParams(y, p)
		}

		want := runGoEdition(t, c, kernels, r)
		bad, good := c.rowParams(1).Row, c.rowParams(0).Row
		if kernel == topN {
			for j := range 3 {
				assert.Equal(t, int32(abi.TopNRefused), want.tokens[int(bad)*abi.MaxTopN+j], "%s: entry %d", c.name, j)
				assert.True(t, math.IsNaN(float64(math.Float32frombits(uint32(want.status[int(bad)*abi.MaxTopN+j])))),
					"%s: entry %d value", c.name, j)
			}
			assert.GreaterOrEqual(t, want.tokens[int(good)*abi.MaxTopN], int32(0), "%s: the row in range", c.name)
		} else {
			assert.Equal(t, int32(abi.StatusBadParams), want.status[bad], "%s: the row past the end", c.name)
			assert.Equal(t, int32(-1), want.tokens[bad], "%s: the row past the end", c.name)
			assert.Equal(t, int32(abi.StatusOK), want.status[good], "%s: the row in range", c.name)
		}

		msg, err := driverOutput(t, bin, []*launchCase{c})
		require.Error(t, err, "%s: the emulated kernel read a bitmask row past the buffer without faulting", c.name)
		assert.Regexp(t, regexp.MustCompile(`out of bounds\?\) in threadgroup \(\d+, 1, \d+\)`), string(msg),
			"%s: the fault is not launch row 1's", c.name)
	}
}

// driverOutput runs the emulator on the cases and returns what it printed and how it
// exited, for a test that expects it to fail.
func driverOutput(t *testing.T, bin string, cases []*launchCase) ([]byte, error) {
	t.Helper()
	dir := t.TempDir()
	in := filepath.Join(dir, "cases.bin")
	require.NoError(t, os.WriteFile(in, writeCases(cases), 0o644))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	return exec.CommandContext(ctx, bin, in, filepath.Join(dir, "results.bin")).CombinedOutput()
}
