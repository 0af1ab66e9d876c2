package philox

import "testing"

func TestBlock4IsFourBlocks(t *testing.T) {
	for _, tc := range []struct {
		c0, c1, c2, c3 uint32
		seed           uint64
	}{
		{0, 0, 0, 1, 0},
		{12345, 7, 0, 2, 42},
		{0xFFFFFFFC, 0xFFFFFFFF, 0xFFFFFFFF, 3, 0xDEADBEEFCAFEF00D},
		{0xFFFFFFFE, 1, 2, 1, 1}, // the counter's first word wraps inside the four
	} {
		got := Block4(tc.c0, tc.c1, tc.c2, tc.c3, Key(tc.seed))
		for j := range uint32(4) {
			want := Block([4]uint32{tc.c0 + j, tc.c1, tc.c2, tc.c3}, Key(tc.seed))
			if [4]uint32(got[4*j:4*j+4]) != want {
				t.Fatalf("%+v block %d: %x, want %x", tc, j, got[4*j:4*j+4], want)
			}
		}
	}
}

// TestBlock4MatchesGeneric: the platform's Block4 (SSE2 on amd64) equals the Go form
// on random counters and keys, the counter's first word wrapping included.
func TestBlock4MatchesGeneric(t *testing.T) {
	x := uint64(1)
	next := func() uint32 { x = SplitMix64(x); return uint32(x) }
	for i := range 100_000 {
		c0, c1, c2, c3 := next(), next(), next(), next()
		if i%7 == 0 {
			c0 = 0xFFFFFFFF - uint32(i%4)
		}
		key := [2]uint32{next(), next()}
		if got, want := Block4(c0, c1, c2, c3, key), block4Generic(c0, c1, c2, c3, key); got != want {
			t.Fatalf("(%x %x %x %x) key %x: %x, want %x", c0, c1, c2, c3, key, got, want)
		}
	}
}

func BenchmarkBlock4(b *testing.B) {
	key := Key(42)
	var sink uint32
	for i := 0; b.Loop(); i++ {
		sink ^= Block4(uint32(4*i), 9, 0, 1, key)[5]
	}
	_ = sink
}

func BenchmarkBlock4Generic(b *testing.B) {
	key := Key(42)
	var sink uint32
	for i := 0; b.Loop(); i++ {
		sink ^= block4Generic(uint32(4*i), 9, 0, 1, key)[5]
	}
	_ = sink
}

// TestBlock8MatchesGeneric: Block8 is the Go form's two Block4s.
func TestBlock8MatchesGeneric(t *testing.T) {
	x := uint64(2)
	next := func() uint32 { x = SplitMix64(x); return uint32(x) }
	for i := range 100_000 {
		c0, c1, c2, c3 := next(), next(), next(), next()
		if i%7 == 0 {
			c0 = 0xFFFFFFFF - uint32(i%8)
		}
		key := [2]uint32{next(), next()}
		got := Block8(c0, c1, c2, c3, key)
		a, b := block4Generic(c0, c1, c2, c3, key), block4Generic(c0+4, c1, c2, c3, key)
		if [16]uint32(got[:16]) != a || [16]uint32(got[16:]) != b {
			t.Fatalf("(%x %x %x %x) key %x: %x, want %x %x", c0, c1, c2, c3, key, got, a, b)
		}
	}
}

func BenchmarkBlock8(b *testing.B) {
	key := Key(42)
	var sink uint32
	for i := 0; b.Loop(); i++ {
		sink ^= Block8(uint32(8*i), 9, 0, 1, key)[5]
	}
	_ = sink
}
