//go:build arm64 && !purego

package philox

// block8NEON writes Block8's 32 words to out: two four-lane NEON states side by side
// (block8_arm64.s). NEON (Advanced SIMD) is part of every arm64 CPU.
//
//go:noescape
func block8NEON(c0, c1, c2, c3 uint32, key [2]uint32, out *[32]uint32)

func block4(c0, c1, c2, c3 uint32, key [2]uint32) [16]uint32 {
	return block4Generic(c0, c1, c2, c3, key)
}

func block8(c0, c1, c2, c3 uint32, key [2]uint32) [32]uint32 {
	var out [32]uint32
	block8NEON(c0, c1, c2, c3, key, &out)
	return out
}
