package mslemu

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/bits"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/half"
	"github.com/gumbel-go/gumbel/philox"
)

// Probe numbers of driver.cpp.
const (
	probeNoise   = 1
	probeLog1p   = 2
	probeRecip   = 3
	probePhilox  = 4
	probeFixed   = 5
	probeDecode  = 6
	probeMulHi64 = 7
	probeSweep   = 8
	probeDiv     = 9
)

// runProbe sends count inputs (already encoded) to one probe and returns its output,
// which must be exactly outBytes long.
func runProbe(t *testing.T, bin string, probe uint32, count int, input []byte, outBytes int) []byte {
	t.Helper()
	var b bytes.Buffer
	b.WriteString("MSLPROBE")
	_ = binary.Write(&b, binary.LittleEndian, probe)
	_ = binary.Write(&b, binary.LittleEndian, uint32(count))
	b.Write(input)
	dir := t.TempDir()
	in, out := filepath.Join(dir, "in"), filepath.Join(dir, "out")
	require.NoError(t, os.WriteFile(in, b.Bytes(), 0o644))
	msg, err := exec.Command(bin, in, out).CombinedOutput()
	require.NoError(t, err, "probe %d failed:\n%s", probe, msg)
	res, err := os.ReadFile(out)
	require.NoError(t, err)
	require.True(t, bytes.HasPrefix(res, []byte("MSLPROBE")))
	require.Len(t, res[8:], outBytes, "probe %d output size", probe)
	return res[8:]
}

func le32(b []byte, i int) uint32 { return binary.LittleEndian.Uint32(b[4*i:]) }

// TestNoiseMatchesPhilox compares the MSL Exponential and Gumbel noise with package
// philox bit for bit: every branch (u >= 1/2, the 32-bit branch, the tail-extended
// branch), their edges, and random words weighted toward small ones, where log1p and the
// tail word decide the winner.
func TestNoiseMatchesPhilox(t *testing.T) {
	bin := buildDriver(t)
	r := rand.New(rand.NewPCG(7, 7))
	type pair struct{ w, tail uint32 }
	var in []pair
	edges := []uint32{0, 1, 2, 3, 0xFF, 0xFFFF, philox.TailThreshold - 1, philox.TailThreshold,
		philox.TailThreshold + 1, 1<<31 - 1, 1 << 31, 1<<31 + 1, 0xFFFFFFFE, 0xFFFFFFFF}
	for _, w := range edges {
		for _, tail := range []uint32{0, 1, 1 << 31, 0xFFFFFFFF} {
			in = append(in, pair{w, tail})
		}
	}
	for range 100000 {
		in = append(in, pair{r.Uint32(), r.Uint32()})
		in = append(in, pair{r.Uint32() >> (8 + r.IntN(24)), r.Uint32()})
	}
	var enc bytes.Buffer
	for _, p := range in {
		_ = binary.Write(&enc, binary.LittleEndian, [2]uint32{p.w, p.tail})
	}
	out := runProbe(t, bin, probeNoise, len(in), enc.Bytes(), 8*len(in))
	mismatches := 0
	for i, p := range in {
		wantE := philox.Exponential(p.w, p.tail)
		wantG := philox.Gumbel(p.w, p.tail)
		gotE, gotG := math.Float32frombits(le32(out, 2*i)), math.Float32frombits(le32(out, 2*i+1))
		if gotE != wantE || gotG != wantG {
			mismatches++
			if mismatches <= 5 {
				t.Errorf("w=%#x tail=%#x: E %g (want %g), g %g (want %g)", p.w, p.tail, gotE, wantE, gotG, wantG)
			}
		}
	}
	assert.Zero(t, mismatches, "of %d (w, tail) pairs", len(in))
}

// The magnitudes u whose log1p(-u) the noise takes: every float32 in [2^-65, 1/2]
// (philox.Exponential's u is at least 2^-65).
const (
	log1pFirst = 0x1F000000 // 2^-65
	log1pLast  = 0x3F000000 // 1/2
)

// TestLog1pMatchesFloat64 compares gb_log1p_neg_half with the contract's
// float32(math.Log1p(float64(x))) on a regular sample of every float32 in [-1/2, 0),
// bit for bit, and has the emulator check a denser sample against C's log1p in double
// and long double.
func TestLog1pMatchesFloat64(t *testing.T) {
	bin := buildDriver(t)
	var xs []float32
	for b := uint32(log1pFirst); b <= log1pLast; b += 523 {
		xs = append(xs, -math.Float32frombits(b))
	}
	xs = append(xs, -0.5, -0.29289323, -0.2928932, float32(-0x1p-24), float32(-0x1p-25), float32(-0x1p-65))
	var enc bytes.Buffer
	for _, x := range xs {
		_ = binary.Write(&enc, binary.LittleEndian, math.Float32bits(x))
	}
	out := runProbe(t, bin, probeLog1p, len(xs), enc.Bytes(), 4*len(xs))
	mismatches := 0
	for i, x := range xs {
		want := float32(math.Log1p(float64(x)))
		if got := math.Float32frombits(le32(out, i)); got != want {
			mismatches++
			if mismatches <= 5 {
				t.Errorf("log1p(%g) = %g, want %g", x, got, want)
			}
		}
	}
	assert.Zero(t, mismatches, "of %d samples", len(xs))

	// The denser sweep runs inside the emulator: every 61st pattern, about 9 million.
	var sweep bytes.Buffer
	_ = binary.Write(&sweep, binary.LittleEndian, [3]uint32{log1pFirst, log1pLast, 61})
	res := runProbe(t, bin, probeSweep, 1, sweep.Bytes(), 8+8+8+4+4)
	checked := binary.LittleEndian.Uint64(res[0:])
	vsDouble := binary.LittleEndian.Uint64(res[8:])
	vsLong := binary.LittleEndian.Uint64(res[16:])
	worst := binary.LittleEndian.Uint32(res[24:])
	t.Logf("log1p sweep: %d values, %d differ from double log1p, %d from long double (largest difference %d ulp)",
		checked, vsDouble, vsLong, worst)
	assert.Equal(t, uint64((log1pLast-log1pFirst)/61+1), checked)
	assert.LessOrEqual(t, worst, uint32(1), "a difference beyond the last place")
	// The double-float result is good to about 2^-46, so it may round differently only
	// when the exact value lies that close to a halfway point: about one value in 2^21.
	assert.LessOrEqual(t, vsLong, checked>>20, "too many last-place differences")
}

// TestRecipMatchesDivision checks gb_recip_rn against float32(1/t), which Go rounds
// correctly.
func TestRecipMatchesDivision(t *testing.T) {
	bin := buildDriver(t)
	r := rand.New(rand.NewPCG(3, 5))
	ts := []float32{1, 0.5, 0.7, 3, 1e-30, 3e-39, 1e38, math.MaxFloat32, math.SmallestNonzeroFloat32}
	for range 50000 {
		ts = append(ts, math.Float32frombits(r.Uint32()&0x7FFFFFFF))
	}
	var enc bytes.Buffer
	for _, v := range ts {
		_ = binary.Write(&enc, binary.LittleEndian, math.Float32bits(v))
	}
	out := runProbe(t, bin, probeRecip, len(ts), enc.Bytes(), 4*len(ts))
	for i, v := range ts {
		if v != v || v == 0 {
			continue
		}
		want := float32(1 / v)
		require.Equal(t, math.Float32bits(want), le32(out, i), "1/%g", v)
	}
}

// TestDivisionCorrectsMetalAccuracy checks gb_div_rn, the repetition penalty's division,
// and its correction step: Metal's division may be off by up to 2.5 units in the last
// place, so gb_div_correct must turn a quotient off by up to 3 into the correctly rounded
// one (float32 division in Go), for logits of every magnitude and penalties between
// 0.05 and 20.
func TestDivisionCorrectsMetalAccuracy(t *testing.T) {
	bin := buildDriver(t)
	r := rand.New(rand.NewPCG(4, 4))
	type in struct {
		a, b float32
		k    int32
	}
	var cases []in
	for _, b := range []float32{1.1, 1.3, 0.8, 2, 3, 1.0000001} {
		for _, a := range []float32{1, 3, 0.1, 7.25, 1e30, 1e-30, 2.5e-38} {
			for k := int32(-3); k <= 3; k++ {
				cases = append(cases, in{a, b, k}, in{-a, b, k})
			}
		}
	}
	for range 60000 {
		a := math.Float32frombits(r.Uint32())
		if a != a || math.IsInf(float64(a), 0) {
			continue
		}
		b := float32(0.05 + 20*r.Float64())
		cases = append(cases, in{a, b, int32(r.IntN(7)) - 3})
	}
	var enc bytes.Buffer
	for _, c := range cases {
		_ = binary.Write(&enc, binary.LittleEndian, [2]uint32{math.Float32bits(c.a), math.Float32bits(c.b)})
		_ = binary.Write(&enc, binary.LittleEndian, c.k)
	}
	out := runProbe(t, bin, probeDiv, len(cases), enc.Bytes(), 8*len(cases))
	checked := 0
	for i, c := range cases {
		want := c.a / c.b
		if math.Abs(float64(want)) < 0x1p-126 || math.IsInf(float64(want), 0) {
			continue // zero, subnormal or overflowing quotients are left as the division gives them
		}
		checked++
		require.Equal(t, math.Float32bits(want), le32(out, 2*i), "gb_div_rn(%g, %g)", c.a, c.b)
		require.Equal(t, math.Float32bits(want), le32(out, 2*i+1), "gb_div_correct(%g, %g) from %d ulps off", c.a, c.b, c.k)
	}
	assert.Greater(t, checked, 40000, "too few normal quotients checked")
}

// TestPhiloxMatches checks the MSL Philox4x32-10 against package philox.
func TestPhiloxMatches(t *testing.T) {
	bin := buildDriver(t)
	r := rand.New(rand.NewPCG(9, 9))
	type in struct {
		ctr [4]uint32
		key [2]uint32
	}
	cases := []in{{}, {[4]uint32{^uint32(0), ^uint32(0), ^uint32(0), ^uint32(0)}, [2]uint32{^uint32(0), ^uint32(0)}}}
	for range 20000 {
		cases = append(cases, in{[4]uint32{r.Uint32(), r.Uint32(), r.Uint32(), r.Uint32()}, [2]uint32{r.Uint32(), r.Uint32()}})
	}
	var enc bytes.Buffer
	for _, c := range cases {
		_ = binary.Write(&enc, binary.LittleEndian, c.ctr)
		_ = binary.Write(&enc, binary.LittleEndian, c.key)
	}
	out := runProbe(t, bin, probePhilox, len(cases), enc.Bytes(), 16*len(cases))
	for i, c := range cases {
		want := philox.Block(c.ctr, c.key)
		got := [4]uint32{le32(out, 4*i), le32(out, 4*i+1), le32(out, 4*i+2), le32(out, 4*i+3)}
		require.Equal(t, want, got, "counter %x key %x", c.ctr, c.key)
	}
}

// TestDecodeMatchesHalf checks the float16 and bfloat16 decoders on all 65536 patterns
// against package half (NaNs only need to stay NaN).
func TestDecodeMatchesHalf(t *testing.T) {
	bin := buildDriver(t)
	var enc bytes.Buffer
	for h := range 1 << 16 {
		_ = binary.Write(&enc, binary.LittleEndian, uint16(h))
	}
	out := runProbe(t, bin, probeDecode, 1<<16, enc.Bytes(), 8<<16)
	for h := range 1 << 16 {
		for k, want := range []float32{half.Float16ToFloat32(uint16(h)), half.BFloat16ToFloat32(uint16(h))} {
			got := math.Float32frombits(le32(out, 2*h+k))
			if want != want {
				require.True(t, got != got, "pattern %#04x (%d) should decode to NaN, got %g", h, k, got)
				continue
			}
			require.Equal(t, math.Float32bits(want), math.Float32bits(got), "pattern %#04x (%d)", h, k)
		}
	}
}

// TestFixedWeightMatches checks q = uint64(w * 2^F) computed from the bits of w.
func TestFixedWeightMatches(t *testing.T) {
	bin := buildDriver(t)
	r := rand.New(rand.NewPCG(1, 2))
	type in struct {
		w float32
		F uint32
	}
	var cases []in
	for F := uint32(32); F <= 62; F++ {
		for _, w := range []float32{0, 1, 0.5, math.SmallestNonzeroFloat32, 1e-20, float32(math.Ldexp(1, -int(F))),
			math.Nextafter32(float32(math.Ldexp(1, -int(F))), 0), 0.99999994} {
			cases = append(cases, in{w, F})
		}
		for range 2000 {
			cases = append(cases, in{float32(math.Exp(-60 * r.Float64())), F})
		}
	}
	var enc bytes.Buffer
	for _, c := range cases {
		_ = binary.Write(&enc, binary.LittleEndian, [2]uint32{math.Float32bits(c.w), c.F})
	}
	out := runProbe(t, bin, probeFixed, len(cases), enc.Bytes(), 8*len(cases))
	for i, c := range cases {
		want := uint64(c.w * float32(math.Ldexp(1, int(c.F))))
		require.Equal(t, want, binary.LittleEndian.Uint64(out[8*i:]), "w=%g F=%d", c.w, c.F)
	}
}

// TestMulHi64Matches checks the 64x64 high product against math/bits.
func TestMulHi64Matches(t *testing.T) {
	bin := buildDriver(t)
	r := rand.New(rand.NewPCG(4, 4))
	pairs := [][2]uint64{{0, 0}, {^uint64(0), ^uint64(0)}, {1 << 63, 2}, {^uint64(0), 1}}
	for range 20000 {
		pairs = append(pairs, [2]uint64{r.Uint64(), r.Uint64() >> r.IntN(64)})
	}
	var enc bytes.Buffer
	for _, p := range pairs {
		_ = binary.Write(&enc, binary.LittleEndian, p)
	}
	out := runProbe(t, bin, probeMulHi64, len(pairs), enc.Bytes(), 8*len(pairs))
	for i, p := range pairs {
		hi, _ := bits.Mul64(p[0], p[1])
		require.Equal(t, hi, binary.LittleEndian.Uint64(out[8*i:]), "%#x * %#x", p[0], p[1])
	}
}
