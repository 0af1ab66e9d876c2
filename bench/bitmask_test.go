package bench

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/half"
	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/runtime/cpu"
	"github.com/gumbel-go/gumbel/sampler"
)

// allows reports whether mask row r of words per row allows token t.
func allows(mask []int32, w, r, t int) bool { return uint32(mask[r*w+t/32])>>(t%32)&1 == 1 }

func TestGrammarMask(t *testing.T) {
	const rows, vocab = 4, 151936
	m := GrammarMask(rows, vocab, maskSeed)
	w := (vocab + 31) / 32
	require.Len(t, m, rows*w)
	assert.Equal(t, m, GrammarMask(rows, vocab, maskSeed), "a fixed seed gives fixed masks")
	for r := range rows {
		n := 0
		for _, x := range m[r*w : (r+1)*w] {
			n += bits.OnesCount32(uint32(x))
		}
		assert.InDelta(t, 0.5, float64(n)/vocab, 0.01, "row %d: about half the tokens allowed", r)
	}
	assert.NotEqual(t, m[:w], m[w:2*w], "every row its own mask")

	m = GrammarMask(50, 33, 7)
	for r := range 50 {
		assert.Zero(t, uint32(m[r*2+1])>>1, "row %d: no bit beyond the vocabulary", r)
	}
	m = GrammarMask(40, 1, 7)
	for r := range 40 {
		assert.Equal(t, int32(1), m[r], "row %d: a one-token vocabulary keeps its token", r)
	}
}

// The Go edition of the mask pass writes -Inf into exactly the banned tokens of every
// row, in every type, leaves everything else (bits beyond the vocabulary included) as it
// was, and does the same when run again on its own output.
func TestApplyBitmaskGoKernel(t *testing.T) {
	dev, err := cpu.Open()
	require.NoError(t, err)
	defer dev.Close()
	testApplyBitmask(t, dev)
}

// testApplyBitmask checks dev's edition of the mask pass against the host.
func testApplyBitmask(t *testing.T, dev runtime.Device) {
	mod, err := dev.Load(bitmaskProgram)
	require.NoError(t, err)
	defer mod.Close()
	const rows, vocab, guard = 3, 3000, 64 // 3000: neither a whole number of words nor of blocks
	w := (vocab + 31) / 32
	rng := rand.New(rand.NewPCG(1, 2))
	mask := make([]int32, rows*w)
	for i := range mask {
		mask[i] = int32(rng.Uint32()) // the bits beyond the vocabulary too: they must be ignored
	}
	vals := make([]float32, rows*vocab+guard)
	for i := range vals {
		vals[i] = float32(rng.NormFloat64())
	}
	for _, tc := range []struct {
		dt   sampler.DType
		ninf uint32
	}{{sampler.Float32, 0xff800000}, {sampler.BFloat16, 0xff80}, {sampler.Float16, 0xfc00}} {
		t.Run(tc.dt.String(), func(t *testing.T) {
			size := tc.dt.Size()
			src := make([]byte, size*len(vals))
			for i, v := range vals {
				switch tc.dt {
				case sampler.Float32:
					binary.LittleEndian.PutUint32(src[4*i:], math.Float32bits(v))
				case sampler.BFloat16:
					binary.LittleEndian.PutUint16(src[2*i:], half.BFloat16(v))
				default:
					binary.LittleEndian.PutUint16(src[2*i:], half.Float16(v))
				}
			}
			logits, err := uploadBytes(dev, src)
			require.NoError(t, err)
			defer logits.Free()
			masks, err := uploadBytes(dev, runtime.BytesOf(mask))
			require.NoError(t, err)
			defer masks.Free()
			k, err := mod.Kernel(bitmaskKernel(tc.dt))
			require.NoError(t, err)
			var args runtime.Args
			args.Buffer(logits).Buffer(masks).U32(vocab).U32(uint32(w))
			st := dev.DefaultStream()
			for pass := range 2 {
				require.NoError(t, st.Launch(k, bitmaskGrid(rows, vocab), runtime.Dim3{X: bitmaskBlock, Y: 1, Z: 1}, &args))
				got := make([]byte, len(src))
				require.NoError(t, st.CopyToHost(got, logits, 0))
				require.NoError(t, st.Synchronize())
				for i := range len(vals) {
					want := src[size*i : size*(i+1)]
					if r, j := i/vocab, i%vocab; r < rows && !allows(mask, w, r, j) {
						want = make([]byte, size)
						if size == 4 {
							binary.LittleEndian.PutUint32(want, tc.ninf)
						} else {
							binary.LittleEndian.PutUint16(want, uint16(tc.ninf))
						}
					}
					require.Equal(t, want, got[size*i:size*(i+1)], "pass %d, element %d (row %d, token %d)", pass, i, i/vocab, i%vocab)
				}
			}
		})
	}
}

// Every bitmask route measures on the CPU device without a steady-state allocation and
// samples a token its mask allows; greedy takes the best allowed token; the fused, host
// and unfused forms of the Gumbel step draw the same token (the same noise over the same
// allowed logits); the table sets each masked route against its unmasked one.
func TestBitmaskRoutesOnCPU(t *testing.T) {
	dev, err := cpu.Open()
	require.NoError(t, err)
	defer dev.Close()
	// 20 host calls, as in TestMatrixOnCPU: a CPU worker that first runs a kernel while
	// timed allocates its scratch once (a few allocations), which must not read as one
	// per call.
	testBitmaskRoutes(t, dev, 3000, Config{Groups: 2, Repeats: 2, HostCalls: 20, Warmup: 20})
}

// testBitmaskRoutes measures every bitmask route on dev at vocab, float32 and bfloat16,
// batches 1 and 3, and checks the tokens and the table.
func testBitmaskRoutes(t *testing.T, dev runtime.Device, vocab int, cfg Config) []Measurement {
	mx := Matrix{Routes: BitmaskRoutes, DTypes: []sampler.DType{sampler.Float32, sampler.BFloat16}, Vocabs: []int{vocab}, Batches: []int{1, 3}}
	ms, err := mx.Run(dev, cfg, nil)
	require.NoError(t, err)
	require.Len(t, ms, len(BitmaskRoutes)*2*2)
	w := (vocab + 31) / 32
	tokens := map[key]map[Route]int32{}
	for _, m := range ms {
		assert.Greater(t, m.DeviceUs, 0.0, "%+v", m)
		assert.Less(t, m.AllocsPerCall, 0.5, "%+v", m)
		require.True(t, m.Token >= 0 && int(m.Token) < m.Vocab, "%+v", m)
		if _, masked := bitmaskBase[m.Route]; masked {
			assert.True(t, allows(GrammarMask(m.Batch, vocab, maskSeed), w, 0, int(m.Token)), "%s: token %d is banned", m.Route, m.Token)
		}
		k := key{m.DTypeName, m.Vocab, m.Batch}
		if tokens[k] == nil {
			tokens[k] = map[Route]int32{}
		}
		tokens[k][m.Route] = m.Token
	}
	for k, tok := range tokens {
		assert.Equal(t, tok[GumbelBitmask], tok[GumbelBitmaskHost], "%+v", k)
		assert.Equal(t, tok[GumbelBitmask], tok[GumbelBitmaskUnfused], "%+v", k)
		if k.dtype == "float32" {
			lg, mask, best := LLMLogits(k.batch, vocab, uint64(vocab*1000+k.batch)), GrammarMask(k.batch, vocab, maskSeed), -1
			for j := range vocab {
				if allows(mask, w, 0, j) && (best < 0 || lg[j] > lg[best]) {
					best = j
				}
			}
			assert.Equal(t, int32(best), tok[GreedyBitmask], "%+v: greedy takes the best allowed token", k)
		}
	}
	md := BitmaskMarkdown(ms)
	assert.Contains(t, md, "| dtype | vocab | batch | greedy+bitmask | gumbel+bitmask | gumbel+bitmask-host | gumbel+bitmask-unfused | "+
		"topk50-topp0.9+bitmask | categorical+bitmask | gumbel-batch-launch+bitmask | gumbel+bitmask-unfused / gumbel+bitmask |")
	assert.Regexp(t, fmt.Sprintf(`\| bfloat16 \| %d \| 3 \|( [0-9.]+ \([+-][0-9.]+%%\) \|){7} [0-9.]+x \|`, vocab), md)
	assert.Contains(t, md, "Host-observed latency")
	return ms
}

func TestBitmaskMarkdown(t *testing.T) {
	assert.Empty(t, BitmaskMarkdown([]Measurement{meas(GumbelSplit, "float32", 4096, 1, 4)}), "no masked route, no table")
	ms := []Measurement{
		meas(GumbelSplit, "float32", 4096, 1, 4),
		meas(GumbelBitmask, "float32", 4096, 1, 4.1),
		meas(GumbelBitmaskUnfused, "float32", 4096, 1, 6.15),
		meas(GreedyBitmask, "float32", 4096, 1, 3), // without its unmasked greedy: no ratio
		meas(GumbelBitmask, "float32", 4096, 8, 9),
	}
	md := BitmaskMarkdown(ms)
	heading := "Device time per step with a token bitmask"
	assert.Equal(t, []string{"dtype", "vocab", "batch", "greedy+bitmask", "gumbel+bitmask", "gumbel+bitmask-unfused", "gumbel+bitmask-unfused / gumbel+bitmask"},
		tableRow(t, md, heading, "| dtype |"))
	assert.Equal(t, []string{"float32", "4096", "1", "3.00", "4.10 (+2.5%)", "6.15 (+53.8%)", "1.50x"}, tableRow(t, md, heading, "| float32 | 4096 | 1 |"))
	assert.Equal(t, []string{"float32", "4096", "8", "–", "9.00", "–", "–"}, tableRow(t, md, heading, "| float32 | 4096 | 8 |"))
	assert.NotContains(t, md, "CUDA graph", "no graph table without graph times")
}

// A masked route's rows are its unmasked route's; the mask comes from setupBitmask.
func TestBitmaskRouteParams(t *testing.T) {
	for m, base := range bitmaskBase {
		assert.Equal(t, params(base, 3, 5), params(m, 3, 5), m)
		info := runtime.DeviceInfo{Backend: runtime.CUDA}
		assert.Equal(t, options(Point{Route: base, Batch: 3}, info), options(Point{Route: m, Batch: 3}, info), m)
		assert.True(t, IsOwn(m), m)
		assert.Contains(t, BitmaskRoutes, m)
		i := slices.Index(BitmaskRoutes, m)
		assert.Less(t, slices.Index(BitmaskRoutes, base), i, "%s follows %s", m, base)
	}
	assert.Equal(t, sampler.Off, options(Point{Route: CategoricalBitmask, Batch: 1}, runtime.DeviceInfo{}).Gumbel, "the kill switch")
	assert.Len(t, bitmaskBase, 7)
}
