//go:build (!amd64 && !arm64) || purego

package philox

func block4(c0, c1, c2, c3 uint32, key [2]uint32) [16]uint32 {
	return block4Generic(c0, c1, c2, c3, key)
}

func block8(c0, c1, c2, c3 uint32, key [2]uint32) [32]uint32 {
	var out [32]uint32
	a, b := block4Generic(c0, c1, c2, c3, key), block4Generic(c0+4, c1, c2, c3, key)
	copy(out[:16], a[:])
	copy(out[16:], b[:])
	return out
}
