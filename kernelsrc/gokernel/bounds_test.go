package gokernel

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/runtime/cpu"
)

// expect is what a bounds case expects of one row's slots.
type expect int

const (
	asReference    expect = iota // token and status as the reference says
	badParams                    // status 3, token -1
	untouchedSlots               // nothing written
)

// TestShortAndBadBuffers runs both kernels with arguments that are too short,
// misaligned, missing or out of range: every row gets its reference answer, status 3,
// or no write at all, and nothing panics.
func TestShortAndBadBuffers(t *testing.T) {
	const v, s = 10, 3
	type bufs struct {
		logits, params, tokens, status, partials, counters runtime.Buffer
		logitsOff, countersOff                             int
		stride                                             uint64
		vocab                                              uint32
		nArgs                                              int
	}
	cases := []struct {
		name string
		edit func(b *bufs)
		// want[y] for launch rows y = 0, 1, 2 (naming rows 2, 0, 1).
		gumbel, categorical [3]expect
	}{
		{"intact", func(b *bufs) {}, [3]expect{}, [3]expect{}},
		{"logits cut inside row 2", func(b *bufs) { b.logits = shorten(b.logits, (2*v+5)*4) }, [3]expect{badParams}, [3]expect{badParams}},
		{"params for two launch rows", func(b *bufs) { b.params = shorten(b.params, 2*paramsBytes+63) },
			[3]expect{0, 0, untouchedSlots}, [3]expect{0, 0, untouchedSlots}},
		{"partials for two launch rows", func(b *bufs) { b.partials = shorten(b.partials, 2*s*8+7) },
			[3]expect{0, 0, badParams}, [3]expect{}},
		{"counters for one launch row", func(b *bufs) { b.counters = shorten(b.counters, 2*4+3) },
			[3]expect{0, badParams, badParams}, [3]expect{}},
		{"misaligned logits", func(b *bufs) { b.logitsOff = 1 },
			[3]expect{badParams, badParams, badParams}, [3]expect{badParams, badParams, badParams}},
		{"misaligned counters", func(b *bufs) { b.countersOff = 2 },
			[3]expect{badParams, badParams, badParams}, [3]expect{}},
		{"vocab 0", func(b *bufs) { b.vocab = 0 },
			[3]expect{badParams, badParams, badParams}, [3]expect{badParams, badParams, badParams}},
		{"vocab 2^31", func(b *bufs) { b.vocab = 1 << 31 },
			[3]expect{badParams, badParams, badParams}, [3]expect{badParams, badParams, badParams}},
		{"vocab past the buffer", func(b *bufs) { b.vocab = 3*v + 1 },
			[3]expect{badParams, badParams, badParams}, [3]expect{badParams, badParams, badParams}},
		{"stride overflows", func(b *bufs) { b.stride = 1 << 63 },
			[3]expect{badParams, 0, badParams}, [3]expect{badParams, 0, badParams}},
		{"seven arguments", func(b *bufs) { b.nArgs = 7 },
			[3]expect{untouchedSlots, untouchedSlots, untouchedSlots}, [3]expect{untouchedSlots, untouchedSlots, untouchedSlots}},
		{"no params", func(b *bufs) { b.params = nil },
			[3]expect{untouchedSlots, untouchedSlots, untouchedSlots}, [3]expect{untouchedSlots, untouchedSlots, untouchedSlots}},
		{"no logits", func(b *bufs) { b.logits = nil },
			[3]expect{badParams, badParams, badParams}, [3]expect{badParams, badParams, badParams}},
		{"no counters or partials", func(b *bufs) { b.counters, b.partials = nil, nil },
			[3]expect{badParams, badParams, badParams}, [3]expect{}},
	}
	r := rand.New(rand.NewPCG(7, 7))
	for _, c := range cases {
		for _, kernel := range []string{"gumbel_argmax", "categorical"} {
			t.Run(c.name+"/"+kernel, func(t *testing.T) {
				p := &problem{d: f32, vocab: v, stride: v}
				for range 3 {
					p.rows = append(p.rows, llmRow(r, v))
				}
				for _, row := range []uint32{2, 0, 1} {
					p.params = append(p.params, refParams{row: row, temperature: 1, seed: r.Uint64(), topK: 3})
				}
				lb := p.layout(s)
				b := bufs{
					logits: cpu.Wrap(lb.logits), params: cpu.Wrap(lb.params),
					tokens: cpu.Wrap(runtime.BytesOf(lb.tokens)), status: cpu.Wrap(runtime.BytesOf(lb.status)),
					partials: cpu.Wrap(runtime.BytesOf(lb.partials)), counters: cpu.Wrap(runtime.BytesOf(lb.counters)),
					stride: v, vocab: v, nArgs: numArgsV1,
				}
				c.edit(&b)
				var a runtime.Args
				// Built by hand: a nil buffer must reach the kernel as a missing one.
				for i, buf := range []runtime.Buffer{b.logits, b.params, b.tokens, b.status, b.partials, b.counters} {
					if i >= b.nArgs {
						break
					}
					off := map[int]int{0: b.logitsOff, 5: b.countersOff}[i]
					if buf == nil {
						a.U64(0) // the slot exists but holds no buffer
						continue
					}
					a.BufferAt(buf, off)
				}
				if b.nArgs > 6 {
					a.U64(b.stride)
				}
				if b.nArgs > 7 {
					a.U32(b.vocab)
				}
				fn, want := gumbelKernel(f32, true), c.gumbel
				if kernel == "categorical" {
					fn, want = categoricalKernel(f32), c.categorical
				}
				grid := runtime.Dim3{X: s, Y: 3, Z: 1}
				if kernel == "categorical" {
					grid.X = 1
				}
				for _, order := range []launchOrder{reversed, shuffled} {
					for i := range lb.tokens {
						lb.tokens[i], lb.status[i] = untouched, untouched
					}
					launch(t, fn, grid, &a, order, r)
					for y, rp := range p.params {
						ref := refGumbelArgmax
						if kernel == "categorical" {
							ref = refCategorical
						}
						wantTok, wantStatus := ref(p.rows[rp.row], rp)
						switch want[y] {
						case badParams:
							wantTok, wantStatus = -1, StatusBadParams
						case untouchedSlots:
							wantTok, wantStatus = untouched, untouched
						}
						what := fmt.Sprintf("launch row %d (row %d), %s", y, rp.row, order)
						require.Equal(t, wantStatus, lb.status[rp.row], "status: "+what)
						require.Equal(t, wantTok, lb.tokens[rp.row], "token: "+what)
					}
					for i, x := range lb.counters {
						require.Zero(t, x, "counters[%d]", i)
					}
				}
			})
		}
	}
}

// TestShortTokenAndStatus: slots past the end of a short tokens or status buffer are not
// written, the others are.
func TestShortTokenAndStatus(t *testing.T) {
	for _, kernel := range []runtime.GoKernel{gumbelKernel(f32, true), categoricalKernel(f32)} {
		rows := [][]float32{{1, 5, 2}, {4, 1, 0}}
		tokens, status := []int32{untouched}, []int32{untouched, untouched}
		params := make([]byte, 2*paramsBytes)
		params[paramsBytes] = 1 // launch row 1 samples row 1
		var logits []float32
		for _, r := range rows {
			logits = append(logits, r...)
		}
		var a runtime.Args
		a.Buffer(cpu.Wrap(runtime.BytesOf(logits))).Buffer(cpu.Wrap(params)).
			Buffer(cpu.Wrap(runtime.BytesOf(tokens))).Buffer(cpu.Wrap(runtime.BytesOf(status)[:5])).
			Buffer(cpu.Wrap(make([]byte, 64))).Buffer(cpu.Wrap(make([]byte, 64))).U64(3).U32(3)
		launch(t, kernel, runtime.Dim3{X: 1, Y: 2, Z: 1}, &a, reversed, nil)
		require.Equal(t, []int32{1}, tokens, "greedy token of row 0; row 1's slot is past the end")
		require.Equal(t, []int32{StatusOK, untouched}, status, "the status buffer holds one whole slot")
	}
}

func shorten(b runtime.Buffer, n int) runtime.Buffer {
	return cpu.Wrap(runtime.HostBytes(b)[:n])
}
