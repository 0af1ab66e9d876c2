//go:build amd64 && !purego

package philox

import (
	"testing"

	"golang.org/x/sys/cpu"
)

// TestBlock8FormsMatchGeneric checks each amd64 form of Block8 (SSE2 always, AVX2 where
// the CPU has it), whichever one Block8 picks here, against the Go form.
func TestBlock8FormsMatchGeneric(t *testing.T) {
	forms := map[string]func(c0, c1, c2, c3 uint32, key [2]uint32, out *[32]uint32){"sse2": block8SSE2}
	if cpu.X86.HasAVX2 {
		forms["avx2"] = block8AVX2
	} else {
		t.Log("no AVX2 here: block8AVX2 not tested")
	}
	for name, f := range forms {
		x := uint64(3)
		next := func() uint32 { x = SplitMix64(x); return uint32(x) }
		for i := range 50_000 {
			c0, c1, c2, c3 := next(), next(), next(), next()
			if i%7 == 0 {
				c0 = 0xFFFFFFFF - uint32(i%8)
			}
			key := [2]uint32{next(), next()}
			var got [32]uint32
			f(c0, c1, c2, c3, key, &got)
			a, b := block4Generic(c0, c1, c2, c3, key), block4Generic(c0+4, c1, c2, c3, key)
			if [16]uint32(got[:16]) != a || [16]uint32(got[16:]) != b {
				t.Fatalf("%s (%x %x %x %x) key %x: %x, want %x %x", name, c0, c1, c2, c3, key, got, a, b)
			}
		}
	}
}

func BenchmarkBlock8SSE2(b *testing.B) {
	key := Key(42)
	var out [32]uint32
	var sink uint32
	for i := 0; b.Loop(); i++ {
		block8SSE2(uint32(8*i), 9, 0, 1, key, &out)
		sink ^= out[5]
	}
	_ = sink
}
