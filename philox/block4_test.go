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
