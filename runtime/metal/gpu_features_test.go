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

// featureLaunch is one launch of a sampling or score kernel with the row features (ABI.md): host
// copies of every buffer argument, indexed by abi.Arg (an empty one is bound as an
// 8-byte buffer that no row uses; topn's status buffer holds its values).
type featureLaunch struct {
	name   string
	grid   runtime.Dim3
	T      int
	stride uint64
	vocab  uint32
	bufs   [abi.NumArgs][]byte
}

// args binds buffer(i) at every buffer position i and the scalars at their positions.
func (l *featureLaunch) args(buffer func(i int) runtime.Buffer) *runtime.Args {
	var a runtime.Args
	for i := range abi.NumArgs {
		switch abi.Arg(i) {
		case abi.ArgRowStride:
			a.U64(l.stride)
		case abi.ArgVocab:
			a.U32(l.vocab)
		case abi.ArgVocabOffset:
			a.U32(0) // no vocabulary shards here
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
func (l *featureLaunch) runOnMetal(t *testing.T, d *Device, s runtime.Stream, k runtime.Kernel) [abi.NumArgs][]byte {
	t.Helper()
	var dev [abi.NumArgs]runtime.Buffer
	for i, b := range l.bufs {
		if abi.Arg(i) == abi.ArgRowStride || abi.Arg(i) == abi.ArgVocab || abi.Arg(i) == abi.ArgVocabOffset {
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
	var out [abi.NumArgs][]byte
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
func (l *featureLaunch) runOnGo(fn runtime.GoKernel, r *rand.Rand) [abi.NumArgs][]byte {
	var out [abi.NumArgs][]byte
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

// bitmaskRows is the number of mask rows in the bitmask argument of a feature launch.
const bitmaskRows = 4

// newFeatureLaunch builds a launch of kernel base (gumbel_argmax, categorical, topn or
// score) over rows rows of vocab logits, n = rows launch rows in reverse order, S blocks
// per row and D draws, with random processors (the token bitmask among them), records,
// routing, advance and recording (score: random tokens, some past V, and no routing,
// which it ignores and the Go edition does not).
func newFeatureLaunch(r *rand.Rand, base string, dtype, vocab, rows, S, D, T int) *featureLaunch {
	es := 4
	if dtype != 0 {
		es = 2
	}
	if base == abi.Categorical {
		S = 1
	}
	if base == abi.TopN || base == abi.Score {
		D = 1
	}
	l := &featureLaunch{
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
	l.bufs[abi.ArgLogits] = logits
	params := make([]byte, abi.RowParamsSize*rows)
	var all abi.Flags
	for y := range rows {
		var flags abi.Flags
		for _, f := range []abi.Flags{abi.FlagBias, abi.FlagMask, abi.FlagPenalties, abi.FlagBitmask} {
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
			if r.IntN(4) == 0 && base != abi.Score {
				flags |= abi.FlagRouted | abi.Flags(r.IntN(2))*abi.FlagCategorical
			}
		}
		all |= flags
		temps := []float32{0, 0.5, 1, 2}
		p := abi.RowParams{Row: uint32(rows - 1 - y), Temperature: temps[r.IntN(4)], Seed: r.Uint64(), Step: r.Uint64(),
			TopK: []uint32{0, 1, 40, uint32(vocab)}[r.IntN(4)], TopP: []float32{0, 0.5, 0.95}[r.IntN(3)],
			MinP: []float32{0, 0.05}[r.IntN(2)], Flags: flags,
			RepetitionPenalty: []float32{1, 1.3, 0.8}[r.IntN(3)], FrequencyPenalty: []float32{0, 0.5, -0.25}[r.IntN(3)],
			PresencePenalty: []float32{0, 0.2, -1}[r.IntN(3)], TopN: []uint32{1, 5, 20}[r.IntN(3)],
			BitmaskRow: uint32(r.IntN(bitmaskRows)), Token: uint32(r.IntN(vocab))}
		if base == abi.Score && r.IntN(8) == 0 {
			p.Token = uint32(vocab) // status 3
		}
		p.Encode(params[abi.RowParamsSize*y:])
	}
	l.bufs[abi.ArgParams] = params
	slots := abi.Slots(rows, D)
	if base == abi.TopN {
		slots = abi.TopNSlots(rows)
	}
	l.bufs[abi.ArgTokens] = make([]byte, 4*slots)
	l.bufs[abi.ArgStatus] = make([]byte, 4*slots)
	for o := range slots {
		binary.LittleEndian.PutUint32(l.bufs[abi.ArgTokens][4*o:], 0x7EEEEEEE)
		binary.LittleEndian.PutUint32(l.bufs[abi.ArgStatus][4*o:], 0x7EEEEEEE)
	}
	// gumbel_argmax's partials end before the payload words of ABI.md, which the Metal
	// edition does not use.
	shape := abi.Launch{Rows: rows, Split: S, Draws: D}
	switch base {
	case abi.GumbelArgmax:
		l.bufs[abi.ArgPartials] = make([]byte, 8*shape.PayloadWord(0, 0, 0))
	case abi.TopN, abi.Score:
		l.bufs[abi.ArgPartials] = make([]byte, 8*shape.PartialsWords(base))
	}
	l.bufs[abi.ArgCounters] = make([]byte, 4*shape.CountersWords(base))
	if base == abi.Score || base != abi.TopN && all&abi.FlagLogprobs != 0 {
		l.bufs[abi.ArgLogprobs] = make([]byte, 4*abi.RecordWords*slots)
	}
	if all&abi.FlagBias != 0 {
		bias := make([]byte, 4*rows*vocab)
		for i := range rows * vocab {
			binary.LittleEndian.PutUint32(bias[4*i:], math.Float32bits(float32(r.NormFloat64())))
		}
		l.bufs[abi.ArgBias] = bias
	}
	if all&(abi.FlagPenalties|abi.FlagRecord) != 0 {
		counts := make([]byte, 4*rows*vocab)
		for i := range rows * vocab {
			c := []uint32{0, 0, 0, 1, 2, 1 << 31, 1<<31 | 1}[r.IntN(7)]
			binary.LittleEndian.PutUint32(counts[4*i:], c)
		}
		l.bufs[abi.ArgCounts] = counts
	}
	if all&abi.FlagMask != 0 {
		w := (vocab + 31) / 32
		mask := make([]byte, 4*rows*w)
		for i := range mask {
			mask[i] = byte(r.Uint32()) | byte(r.Uint32()) // about 3 bits in 4 allowed
		}
		l.bufs[abi.ArgMask] = mask
	}
	if all&abi.FlagBitmask != 0 {
		l.bufs[abi.ArgBitmask] = newBitmask(r, vocab)
	}
	return l
}

// newBitmask returns the bitmask argument: bitmaskRows mask rows of ceil(vocab/32) words.
// Row 0 allows nothing (status 2 unless the row holds NaN or +Inf), row 1 one token, the
// others about 3 tokens in 4. Every row sets the bits past vocab in its last word, which
// the kernels must ignore.
func newBitmask(r *rand.Rand, vocab int) []byte {
	w := (vocab + 31) / 32
	words := make([]uint32, bitmaskRows*w)
	for row := range bitmaskRows {
		m := words[row*w : (row+1)*w]
		switch row {
		case 0:
		case 1:
			i := r.IntN(vocab)
			m[i/32] = 1 << (i % 32)
		default:
			for i := range m {
				m[i] = r.Uint32() | r.Uint32()
			}
		}
		if vocab%32 != 0 {
			m[w-1] |= ^uint32(0) << (vocab % 32)
		}
	}
	b := make([]byte, 4*len(words))
	for i, v := range words {
		binary.LittleEndian.PutUint32(b[4*i:], v)
	}
	return b
}

// recordClose reports whether a log-probability word (or topn value) of the GPU lies
// within 1e-5 of the Go edition's, relative to scale (ABI.md: the log-sum-exps may
// use any order and an exp of relative error 2^-20).
func recordClose(want, got, scale float32) bool {
	if want != want || got != got {
		return want != want && got != got
	}
	if math.IsInf(float64(want), 0) || math.IsInf(float64(got), 0) {
		return want == got
	}
	return math.Abs(float64(want-got)) <= 1e-5*float64(scale)
}

func f32At(b []byte, i int) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])) }

// TestRowFeaturesMatchGoEdition runs every sampling kernel and score on the GPU and on
// the Go edition, over every dtype, threadgroups of 256 and 1024, 1 and 4 threadgroups
// per row and 1 and 3 draws, with logit processors (bias, penalties, mask and token
// bitmasks, alone and together), records, device routing, step advance, token recording,
// topn (PERTURBED or not) and score's ranks, and requires the same tokens, status, counts
// and steps, counters left at zero, and records and topn values within 1e-5 of the
// normaliser. Tokens may differ only where Apple's precise::log or precise::exp differs
// from the correctly rounded value in the last place and that decides a draw.
func TestRowFeaturesMatchGoEdition(t *testing.T) {
	d := openDevice(t)
	mod, err := d.Load(kernelsrc.Sampling())
	require.NoError(t, err)
	goKernels := gokernel.Kernels()
	r := rand.New(rand.NewPCG(8, 2))
	s := d.DefaultStream()
	var records int
	for dtype, suffix := range abi.Suffixes {
		for _, base := range []string{abi.GumbelArgmax, abi.Categorical, abi.TopN, abi.Score} {
			k, err := mod.Kernel(base + suffix)
			require.NoError(t, err)
			for _, T := range []int{256, 1024} {
				for _, S := range []int{1, 4} {
					for _, D := range []int{1, 3} {
						vocab := []int{7, 1000, 4099, 32000, 151936}[r.IntN(5)]
						l := newFeatureLaunch(r, base, dtype, vocab, 6, S, D, T)
						got := l.runOnMetal(t, d, s, k)
						want := l.runOnGo(goKernels[base+suffix], r)
						records += compareFeatureLaunch(t, l, base == abi.TopN, want, got)
					}
				}
			}
		}
	}
	t.Logf("%d records and topn values compared", records)
	assert.Positive(t, records)
}

// compareFeatureLaunch compares the outputs of one launch and returns the number of
// records (or topn values) compared.
func compareFeatureLaunch(t *testing.T, l *featureLaunch, topn bool, want, got [abi.NumArgs][]byte) int {
	t.Helper()
	assert.Equal(t, want[abi.ArgTokens], got[abi.ArgTokens], "%s: tokens", l.name)
	assert.Equal(t, want[abi.ArgParams], got[abi.ArgParams], "%s: params (ADVANCE)", l.name)
	assert.Equal(t, want[abi.ArgCounts], got[abi.ArgCounts], "%s: counts (RECORD)", l.name)
	assert.Equal(t, make([]byte, len(got[abi.ArgCounters])), got[abi.ArgCounters], "%s: counters left set", l.name)
	compared := 0
	if topn {
		for o := range len(want[abi.ArgStatus]) / 4 {
			w, g := f32At(want[abi.ArgStatus], o), f32At(got[abi.ArgStatus], o)
			if !recordClose(w, g, max(1, float32(math.Abs(float64(w))))) {
				assert.Failf(t, "topn value differs", "%s: slot %d: Go %g, Metal %g", l.name, o, w, g)
			}
			compared++
		}
		return compared
	}
	assert.Equal(t, want[abi.ArgStatus], got[abi.ArgStatus], "%s: status", l.name)
	for o := range len(want[abi.ArgLogprobs]) / 16 {
		scale := float32(1)
		for k := 2; k < 4; k++ {
			if v := f32At(want[abi.ArgLogprobs], 4*o+k); v == v && !math.IsInf(float64(v), 0) {
				scale = max(scale, float32(math.Abs(float64(v))))
			}
		}
		for k := range 4 {
			w, g := f32At(want[abi.ArgLogprobs], 4*o+k), f32At(got[abi.ArgLogprobs], 4*o+k)
			if !recordClose(w, g, scale) {
				assert.Failf(t, "record differs", "%s: slot %d word %d: Go %g, Metal %g", l.name, o, k, w, g)
			}
		}
		compared++
	}
	return compared
}
