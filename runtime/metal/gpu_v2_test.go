//go:build gpu && darwin

package metal

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/half"
	"github.com/gumbel-go/gumbel/kernelsrc"
	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/gumbel-go/gumbel/kernelsrc/gokernel"
	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/runtime/cpu"
)

// Buffer arguments of the version-2 kernel set (ABI.md); 6 and 7 are the scalars.
const (
	argParams   = 1
	argTokens   = 2
	argStatus   = 3 // topn: out_values
	argPartials = 4
	argCounters = 5
	argLogprobs = 8
	argCounts   = 10
	numArgsV2   = 12
)

// v2Launch is one launch of the version-2 kernel set: host copies of every buffer
// argument (an empty one is bound as an 8-byte buffer that no row uses).
type v2Launch struct {
	name   string
	grid   runtime.Dim3
	T      int
	stride uint64
	vocab  uint32
	bufs   [numArgsV2][]byte
}

// args binds buffer(i) at every buffer position i and the scalars at 6 and 7.
func (l *v2Launch) args(buffer func(i int) runtime.Buffer) *runtime.Args {
	var a runtime.Args
	for i := range numArgsV2 {
		switch i {
		case 6:
			a.U64(l.stride)
		case 7:
			a.U32(l.vocab)
		default:
			a.Buffer(buffer(i))
		}
	}
	return &a
}

// sized returns b, or 8 zero bytes for an argument the launch does not use.
func sized(b []byte) []byte {
	if len(b) == 0 {
		return make([]byte, 8)
	}
	return b
}

// runOnMetal launches l on the GPU and returns every buffer as the launch left it.
func (l *v2Launch) runOnMetal(t *testing.T, d *Device, s runtime.Stream, k runtime.Kernel) [numArgsV2][]byte {
	t.Helper()
	var dev [numArgsV2]runtime.Buffer
	for i, b := range l.bufs {
		if i == 6 || i == 7 {
			continue
		}
		b = sized(b)
		buf, err := d.Alloc(len(b))
		require.NoError(t, err)
		t.Cleanup(func() { _ = buf.Free() })
		require.NoError(t, s.CopyToDevice(buf, 0, b))
		dev[i] = buf
	}
	a := l.args(func(i int) runtime.Buffer { return dev[i] })
	require.NoError(t, s.Launch(k, l.grid, runtime.Dim3{X: l.T, Y: 1, Z: 1}, a))
	var out [numArgsV2][]byte
	for i, buf := range dev {
		if buf == nil || len(l.bufs[i]) == 0 {
			continue
		}
		out[i] = make([]byte, len(l.bufs[i]))
		require.NoError(t, s.CopyToHost(out[i], buf, 0))
	}
	require.NoError(t, s.Synchronize())
	return out
}

// runOnGo runs l on the Go edition, block by block in a shuffled order.
func (l *v2Launch) runOnGo(fn runtime.GoKernel, r *rand.Rand) [numArgsV2][]byte {
	var out [numArgsV2][]byte
	for i, b := range l.bufs {
		out[i] = slices.Clone(b)
	}
	a := l.args(func(i int) runtime.Buffer { return cpu.Wrap(sized(out[i])) })
	g := l.grid
	for _, i := range r.Perm(g.X * g.Y * g.Z) {
		fn(&runtime.BlockContext{
			Block: runtime.Dim3{X: i % g.X, Y: (i / g.X) % g.Y, Z: i / (g.X * g.Y)}, Grid: g,
			BlockDim: runtime.Dim3{X: l.T, Y: 1, Z: 1}, Args: a,
		})
	}
	return out
}

// newV2Launch builds a launch of kernel base (gumbel_argmax, categorical or topn) over
// rows rows of vocab logits, n = rows launch rows in reverse order, S blocks per row and
// D draws, with random processors, records, routing, advance and recording.
func newV2Launch(r *rand.Rand, base string, dtype, vocab, rows, S, D, T int) *v2Launch {
	es := 4
	if dtype != 0 {
		es = 2
	}
	if base == abi.Categorical {
		S = 1
	}
	if base == abi.TopN {
		D = 1
	}
	l := &v2Launch{
		name: fmt.Sprintf("%s%s/T=%d/S=%d/D=%d/V=%d", base, abi.Suffixes[dtype], T, S, D, vocab),
		grid: runtime.Dim3{X: S, Y: rows, Z: D}, T: T, stride: uint64(vocab), vocab: uint32(vocab),
	}
	logits := make([]byte, rows*vocab*es)
	for i := range rows * vocab {
		x := float32(r.NormFloat64() * 2)
		switch r.IntN(50) {
		case 0:
			x = float32(math.Inf(-1))
		case 1:
			x = 10 + 10*r.Float32()
		}
		switch dtype {
		case 0:
			binary.LittleEndian.PutUint32(logits[4*i:], math.Float32bits(x))
		case 1:
			binary.LittleEndian.PutUint16(logits[2*i:], half.Float16(x))
		default:
			binary.LittleEndian.PutUint16(logits[2*i:], half.BFloat16(x))
		}
	}
	l.bufs[0] = logits
	params := make([]byte, abi.RowParamsSize*rows)
	var all abi.Flags
	for y := range rows {
		var flags abi.Flags
		for _, f := range []abi.Flags{abi.FlagBias, abi.FlagMask, abi.FlagPenalties} {
			if r.IntN(2) == 0 {
				flags |= f
			}
		}
		if base == abi.TopN {
			if r.IntN(2) == 0 {
				flags |= abi.FlagPerturbed
			}
		} else {
			for _, f := range []abi.Flags{abi.FlagLogprobs, abi.FlagLogprobs, abi.FlagAdvance, abi.FlagRecord} {
				if r.IntN(2) == 0 {
					flags |= f
				}
			}
			if r.IntN(4) == 0 {
				flags |= abi.FlagRouted | abi.Flags(r.IntN(2))*abi.FlagCategorical
			}
		}
		all |= flags
		temps := []float32{0, 0.5, 1, 2}
		p := abi.RowParams{Row: uint32(rows - 1 - y), Temperature: temps[r.IntN(4)], Seed: r.Uint64(), Step: r.Uint64(),
			TopK: []uint32{0, 1, 40, uint32(vocab)}[r.IntN(4)], TopP: []float32{0, 0.5, 0.95}[r.IntN(3)],
			MinP: []float32{0, 0.05}[r.IntN(2)], Flags: flags,
			RepetitionPenalty: []float32{1, 1.3, 0.8}[r.IntN(3)], FrequencyPenalty: []float32{0, 0.5, -0.25}[r.IntN(3)],
			PresencePenalty: []float32{0, 0.2, -1}[r.IntN(3)], TopN: []uint32{1, 5, 20}[r.IntN(3)]}
		p.Encode(params[abi.RowParamsSize*y:])
	}
	l.bufs[argParams] = params
	slots := rows * D
	if base == abi.TopN {
		slots = rows * abi.MaxTopN
	}
	l.bufs[argTokens] = make([]byte, 4*slots)
	l.bufs[argStatus] = make([]byte, 4*slots)
	for o := range slots {
		binary.LittleEndian.PutUint32(l.bufs[argTokens][4*o:], 0x7EEEEEEE)
		binary.LittleEndian.PutUint32(l.bufs[argStatus][4*o:], 0x7EEEEEEE)
	}
	switch base {
	case abi.GumbelArgmax:
		l.bufs[argPartials] = make([]byte, 8*3*rows*D*S)
		l.bufs[argCounters] = make([]byte, 4*(2*rows*D+rows))
	case abi.Categorical:
		l.bufs[argCounters] = make([]byte, 4*(2*rows*D+rows))
	default:
		l.bufs[argPartials] = make([]byte, 8*22*rows*S)
		l.bufs[argCounters] = make([]byte, 4*2*rows)
	}
	if base != abi.TopN && all&abi.FlagLogprobs != 0 {
		l.bufs[argLogprobs] = make([]byte, 4*4*slots)
	}
	if all&abi.FlagBias != 0 {
		bias := make([]byte, 4*rows*vocab)
		for i := range rows * vocab {
			binary.LittleEndian.PutUint32(bias[4*i:], math.Float32bits(float32(r.NormFloat64())))
		}
		l.bufs[9] = bias
	}
	if all&(abi.FlagPenalties|abi.FlagRecord) != 0 {
		counts := make([]byte, 4*rows*vocab)
		for i := range rows * vocab {
			c := []uint32{0, 0, 0, 1, 2, 1 << 31, 1<<31 | 1}[r.IntN(7)]
			binary.LittleEndian.PutUint32(counts[4*i:], c)
		}
		l.bufs[argCounts] = counts
	}
	if all&abi.FlagMask != 0 {
		w := (vocab + 31) / 32
		mask := make([]byte, 4*rows*w)
		for i := range mask {
			mask[i] = byte(r.Uint32()) | byte(r.Uint32()) // about 3 bits in 4 allowed
		}
		l.bufs[11] = mask
	}
	return l
}

// v2Close reports whether a log-probability word (or topn value) of the GPU lies
// within 1e-5 of the Go edition's, relative to scale (ABI.md: the log-sum-exps may
// use any order and an exp of relative error 2^-20).
func v2Close(want, got, scale float32) bool {
	if want != want || got != got {
		return want != want && got != got
	}
	if math.IsInf(float64(want), 0) || math.IsInf(float64(got), 0) {
		return want == got
	}
	return math.Abs(float64(want-got)) <= 1e-5*float64(scale)
}

func f32At(b []byte, i int) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])) }

// TestVersion2KernelsMatchGoEdition runs every kernel of ABI version 2 on the GPU and on
// the Go edition, over every dtype, threadgroups of 256 and 1024, 1 and 4 threadgroups
// per row and 1 and 3 draws, with logit processors, records, device routing, step
// advance and token recording, and requires the same tokens, status, counts and steps,
// counters left at zero, and records and topn values within 1e-5 of the normaliser.
// Tokens may differ only where Apple's precise::log or precise::exp differs from the
// correctly rounded value in the last place and that decides a draw.
func TestVersion2KernelsMatchGoEdition(t *testing.T) {
	d := openDevice(t)
	mod, err := d.Load(kernelsrc.Sampling())
	require.NoError(t, err)
	goKernels := gokernel.Kernels()
	r := rand.New(rand.NewPCG(8, 2))
	s := d.DefaultStream()
	var records int
	for dtype, suffix := range abi.Suffixes {
		for _, base := range []string{abi.GumbelArgmax, abi.Categorical, abi.TopN} {
			k, err := mod.Kernel(base + suffix)
			require.NoError(t, err)
			for _, T := range []int{256, 1024} {
				for _, S := range []int{1, 4} {
					for _, D := range []int{1, 3} {
						vocab := []int{7, 1000, 4099, 32000, 151936}[r.IntN(5)]
						l := newV2Launch(r, base, dtype, vocab, 6, S, D, T)
						got := l.runOnMetal(t, d, s, k)
						want := l.runOnGo(goKernels[base+suffix], r)
						records += compareV2Launch(t, l, base == abi.TopN, want, got)
					}
				}
			}
		}
	}
	t.Logf("%d records and topn values compared", records)
	assert.Positive(t, records)
}

// compareV2Launch compares the outputs of one launch and returns the number of records
// (or topn values) compared.
func compareV2Launch(t *testing.T, l *v2Launch, topn bool, want, got [numArgsV2][]byte) int {
	t.Helper()
	assert.Equal(t, want[argTokens], got[argTokens], "%s: tokens", l.name)
	assert.Equal(t, want[argParams], got[argParams], "%s: params (ADVANCE)", l.name)
	assert.Equal(t, want[argCounts], got[argCounts], "%s: counts (RECORD)", l.name)
	assert.Equal(t, make([]byte, len(got[argCounters])), got[argCounters], "%s: counters left set", l.name)
	compared := 0
	if topn {
		for o := range len(want[argStatus]) / 4 {
			w, g := f32At(want[argStatus], o), f32At(got[argStatus], o)
			if !v2Close(w, g, max(1, float32(math.Abs(float64(w))))) {
				assert.Failf(t, "topn value differs", "%s: slot %d: Go %g, Metal %g", l.name, o, w, g)
			}
			compared++
		}
		return compared
	}
	assert.Equal(t, want[argStatus], got[argStatus], "%s: status", l.name)
	for o := range len(want[argLogprobs]) / 16 {
		scale := float32(1)
		for k := 2; k < 4; k++ {
			if v := f32At(want[argLogprobs], 4*o+k); v == v && !math.IsInf(float64(v), 0) {
				scale = max(scale, float32(math.Abs(float64(v))))
			}
		}
		for k := range 4 {
			w, g := f32At(want[argLogprobs], 4*o+k), f32At(got[argLogprobs], 4*o+k)
			if !v2Close(w, g, scale) {
				assert.Failf(t, "record differs", "%s: slot %d word %d: Go %g, Metal %g", l.name, o, k, w, g)
			}
		}
		compared++
	}
	return compared
}
