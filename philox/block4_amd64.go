//go:build amd64 && !purego

package philox

import "golang.org/x/sys/cpu"

// block4SSE2 writes Block4's 16 words to out: lane j of four SSE2 registers is block j's
// state, and each Philox multiplication is two PMULUDQ (lanes 0 and 2, then 1 and 3).
// SSE2 is part of every amd64 CPU.
//
//go:noescape
func block4SSE2(c0, c1, c2, c3 uint32, key [2]uint32, out *[16]uint32)

func block4(c0, c1, c2, c3 uint32, key [2]uint32) [16]uint32 {
	var out [16]uint32
	block4SSE2(c0, c1, c2, c3, key, &out)
	return out
}

// block8SSE2 writes Block8's 32 words to out: two four-lane states, interleaved.
//
//go:noescape
func block8SSE2(c0, c1, c2, c3 uint32, key [2]uint32, out *[32]uint32)

// block8AVX2 writes Block8's 32 words to out with 256-bit lanes (block8_avx2_amd64.s).
//
//go:noescape
func block8AVX2(c0, c1, c2, c3 uint32, key [2]uint32, out *[32]uint32)

// useAVX2 picks block8AVX2 over block8SSE2 where the CPU (and the OS) support AVX2.
var useAVX2 = cpu.X86.HasAVX2

func block8(c0, c1, c2, c3 uint32, key [2]uint32) [32]uint32 {
	var out [32]uint32
	if useAVX2 {
		block8AVX2(c0, c1, c2, c3, key, &out)
	} else {
		block8SSE2(c0, c1, c2, c3, key, &out)
	}
	return out
}
