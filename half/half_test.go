package half

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// f16Value is the exact value of finite binary16 bits, computed from the definition
// (independently of Float16ToFloat32); 0x7c00 is given the value 2^16, where rounding
// treats infinity as the next number after the largest finite value.
func f16Value(h uint16) float64 {
	e := int(h>>10) & 0x1f
	m := float64(h & 0x3ff)
	var v float64
	switch {
	case e == 0:
		v = m * math.Pow(2, -24)
	default:
		v = (1 + m/1024) * math.Pow(2, float64(e-15))
	}
	if h&0x8000 != 0 {
		v = -v
	}
	return v
}

// refFloat16 rounds a finite float32 to binary16 by searching the table of all binary16
// values: the brute-force definition of round to nearest, ties to even.
func refFloat16(f float32, table []float64) uint16 {
	x := math.Abs(float64(f))
	var sign uint16
	if math.Signbit(float64(f)) {
		sign = 0x8000
	}
	// table[i] is the value of bits i, for i in 0..0x7c00.
	i := sort.Search(len(table), func(i int) bool { return table[i] > x }) - 1
	if i == len(table)-1 {
		return sign | 0x7c00
	}
	lo, hi := table[i], table[i+1]
	switch {
	case x-lo < hi-x:
		return sign | uint16(i)
	case x-lo > hi-x:
		return sign | uint16(i+1)
	case i&1 == 0:
		return sign | uint16(i)
	default:
		return sign | uint16(i+1)
	}
}

func f16Table() []float64 {
	t := make([]float64, 0x7c01)
	for i := range t {
		t[i] = f16Value(uint16(i))
	}
	return t
}

func TestFloat16Cases(t *testing.T) {
	cases := []struct {
		name string
		in   float32
		want uint16
	}{
		{"zero", 0, 0x0000},
		{"negative zero", float32(math.Copysign(0, -1)), 0x8000},
		{"one", 1, 0x3c00},
		{"minus two", -2, 0xc000},
		{"largest finite", 65504, 0x7bff},
		{"rounds down to largest", 65519.996, 0x7bff},
		{"tie rounds to even infinity", 65520, 0x7c00},
		{"overflow", 1e6, 0x7c00},
		{"negative overflow", -1e30, 0xfc00},
		{"infinity", float32(math.Inf(1)), 0x7c00},
		{"negative infinity", float32(math.Inf(-1)), 0xfc00},
		{"smallest normal", 0x1p-14, 0x0400},
		{"largest subnormal", 0x3ffp-24, 0x03ff},
		{"smallest subnormal", 0x1p-24, 0x0001},
		{"half the smallest subnormal ties to zero", 0x1p-25, 0x0000},
		{"just above half the smallest subnormal", 0x1.000002p-25, 0x0001},
		{"three halves of the smallest subnormal ties to two", 0x3p-25, 0x0002},
		{"float32 subnormal", 0x1p-140, 0x0000},
		{"tie to even down", 1 + 0x1p-11, 0x3c00},
		{"tie to even up", 1 + 0x3p-11, 0x3c02},
		{"subnormal carries into normal", 0x7ffp-25, 0x0400},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.want, Float16(c.in), "Float16(%g)", c.in)
		})
	}
}

func TestFloat16NaN(t *testing.T) {
	for _, bits := range []uint32{0x7fc00000, 0xffc00000, 0x7f800001, 0x7fbfffff, 0xff800123} {
		h := Float16(math.Float32frombits(bits))
		assert.Equal(t, uint16(0x7c00), h&0x7c00, "exponent of NaN %#x", bits)
		assert.NotZero(t, h&0x3ff, "NaN %#x must stay NaN", bits)
		assert.Equal(t, uint16(bits>>16)&0x8000, h&0x8000, "sign of NaN %#x", bits)
	}
}

func TestFloat16ToFloat32Exhaustive(t *testing.T) {
	for i := 0; i < 1<<16; i++ {
		h := uint16(i)
		f := Float16ToFloat32(h)
		em := h & 0x7fff
		switch {
		case em > 0x7c00:
			require.True(t, math.IsNaN(float64(f)), "%#04x", h)
		case em == 0x7c00:
			require.True(t, math.IsInf(float64(f), 0), "%#04x", h)
			require.Equal(t, h&0x8000 != 0, math.Signbit(float64(f)), "%#04x", h)
		default:
			require.Equal(t, f16Value(h), float64(f), "%#04x", h)
			require.Equal(t, h&0x8000 != 0, math.Signbit(float64(f)), "sign of %#04x", h)
		}
		// Every bit pattern, NaNs and their payloads included, survives the round trip.
		require.Equal(t, h, Float16(f), "round trip of %#04x", h)
	}
}

// TestFloat16Midpoints checks rounding at every decision point: each midpoint between
// neighbouring binary16 values (exactly representable in float32) and its float32
// neighbours on either side.
func TestFloat16Midpoints(t *testing.T) {
	table := f16Table()
	for i := 0; i < 0x7c00; i++ {
		mid := float32((table[i] + table[i+1]) / 2)
		require.Equal(t, (table[i]+table[i+1])/2, float64(mid), "midpoint %d must be exact", i)
		for _, f := range []float32{
			mid,
			math.Nextafter32(mid, 0),
			math.Nextafter32(mid, float32(math.Inf(1))),
			float32(table[i]),
		} {
			require.Equal(t, refFloat16(f, table), Float16(f), "Float16(%g)", f)
			require.Equal(t, refFloat16(-f, table)|0x8000, Float16(-f), "Float16(%g)", -f)
		}
	}
}

func TestFloat16Random(t *testing.T) {
	table := f16Table()
	r := rand.New(rand.NewPCG(1, 2))
	for n := 0; n < 200000; n++ {
		// Exponents around binary16's range, where every branch of Float16 is taken.
		e := r.IntN(60) - 35
		f := float32(math.Ldexp(1+r.Float64(), e))
		if r.IntN(2) == 0 {
			f = -f
		}
		require.Equal(t, refFloat16(f, table), Float16(f), "Float16(%g)", f)
	}
}

// refBFloat16 rounds a finite float32 to bfloat16 from the definition: the nearer of the
// two bfloat16 values around it (ties to the even one), infinity standing for 2^128.
func refBFloat16(f float32) uint16 {
	b := math.Float32bits(f)
	lo := uint16(b >> 16)
	if b&0xffff == 0 {
		return lo
	}
	hi := lo + 1
	val := func(h uint16) float64 {
		if h&0x7fff == 0x7f80 {
			return math.Copysign(math.Ldexp(1, 128), float64(f))
		}
		return float64(math.Float32frombits(uint32(h) << 16))
	}
	x := float64(f)
	dlo, dhi := math.Abs(x-val(lo)), math.Abs(val(hi)-x)
	switch {
	case dlo < dhi:
		return lo
	case dlo > dhi:
		return hi
	case lo&1 == 0:
		return lo
	default:
		return hi
	}
}

func TestBFloat16Cases(t *testing.T) {
	cases := []struct {
		name string
		in   float32
		want uint16
	}{
		{"zero", 0, 0x0000},
		{"one", 1, 0x3f80},
		{"minus one", -1, 0xbf80},
		{"tie to even down", math.Float32frombits(0x3f808000), 0x3f80},
		{"tie to even up", math.Float32frombits(0x3f818000), 0x3f82},
		{"above tie", math.Float32frombits(0x3f808001), 0x3f81},
		{"largest float32 overflows", math.MaxFloat32, 0x7f80},
		{"infinity", float32(math.Inf(1)), 0x7f80},
		{"negative infinity", float32(math.Inf(-1)), 0xff80},
		{"subnormal", math.Float32frombits(0x00018000), 0x0002},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.want, BFloat16(c.in))
		})
	}
}

func TestBFloat16NaN(t *testing.T) {
	for _, bits := range []uint32{0x7fc00000, 0xffc00000, 0x7f800001, 0x7f80ffff, 0xff812345} {
		h := BFloat16(math.Float32frombits(bits))
		assert.Equal(t, uint16(0x7f80), h&0x7f80, "exponent of NaN %#x", bits)
		assert.NotZero(t, h&0x7f, "NaN %#x must stay NaN", bits)
		assert.Equal(t, uint16(bits>>16)&0x8000, h&0x8000, "sign of NaN %#x", bits)
	}
}

func TestBFloat16Exhaustive(t *testing.T) {
	for i := 0; i < 1<<16; i++ {
		b := uint16(i)
		f := BFloat16ToFloat32(b)
		require.Equal(t, uint32(b)<<16, math.Float32bits(f), "%#04x", b)
		require.Equal(t, b, BFloat16(f), "round trip of %#04x", b)
		// Rounding of the float32 values just around each bfloat16 value, and the
		// midpoint to the next one.
		if f2 := uint32(b) << 16; b&0x7f80 != 0x7f80 {
			for _, low := range []uint32{0x0001, 0x7fff, 0x8000, 0x8001, 0xffff} {
				g := math.Float32frombits(f2 | low)
				if math.IsNaN(float64(g)) {
					continue
				}
				require.Equal(t, refBFloat16(g), BFloat16(g), "BFloat16(%#08x)", f2|low)
			}
		}
	}
}

func BenchmarkFloat16ToFloat32(b *testing.B) {
	var sink float32
	for i := 0; b.Loop(); i++ {
		sink += Float16ToFloat32(uint16(i))
	}
	_ = sink
}

func BenchmarkFloat16(b *testing.B) {
	var sink uint16
	for i := 0; b.Loop(); i++ {
		sink += Float16(float32(i) * 0.001)
	}
	_ = sink
}
