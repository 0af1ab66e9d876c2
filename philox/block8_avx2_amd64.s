//go:build amd64 && !purego

#include "textflag.h"

// block8AVX2 keeps each block's state words in the low halves of 64-bit lanes, four
// blocks to a YMM register: VPMULUDQ then gives each block's full 64-bit product in its
// own lane, the high half one VPSRLQ away and the low half already in place. The high
// halves of the lanes carry garbage that no later instruction reads (VPMULUDQ reads the
// low halves only, and the final stores keep the low halves), so a round needs no
// shuffles. The lanes hold blocks 0, 2, 1, 3 (and 4, 6, 5, 7), so that VPUNPCKL/HQDQ at
// the end write them in order without crossing 128-bit halves.
DATA a8lanesA<>+0(SB)/8, $0
DATA a8lanesA<>+8(SB)/8, $2
DATA a8lanesA<>+16(SB)/8, $1
DATA a8lanesA<>+24(SB)/8, $3
GLOBL a8lanesA<>(SB), RODATA|NOPTR, $32
DATA a8lanesB<>+0(SB)/8, $4
DATA a8lanesB<>+8(SB)/8, $6
DATA a8lanesB<>+16(SB)/8, $5
DATA a8lanesB<>+24(SB)/8, $7
GLOBL a8lanesB<>(SB), RODATA|NOPTR, $32
DATA a8mul0<>+0(SB)/4, $0xD2511F53
GLOBL a8mul0<>(SB), RODATA|NOPTR, $4
DATA a8mul1<>+0(SB)/4, $0xCD9E8D57
GLOBL a8mul1<>(SB), RODATA|NOPTR, $4

// AKEYS broadcasts the round keys k0 (R8) and k1 (R9) into Y14 and Y15.
#define AKEYS \
	VMOVD R8, X14 \
	VPBROADCASTD X14, Y14 \
	VMOVD R9, X15 \
	VPBROADCASTD X15, Y15

// ABUMP advances the round keys by the Weyl constants.
#define ABUMP \
	ADDL $0x9E3779B9, R8 \
	ADDL $0xBB67AE85, R9

// AROUND is one Philox round of the state whose words 0-3 are a0-a3 (Y12 and Y13 hold
// the multipliers): new word 0 = hi(M1·a2) ^ a1 ^ k0 into a0, new word 2 =
// hi(M0·a0) ^ a3 ^ k1 into a2, new words 1 and 3 (the low products) left in t1 and t0.
// So the state moves to (a0, t1, a2, t0) and a1, a3 are free for the next round.
#define AROUND(a0, a1, a2, a3, t0, t1) \
	VPMULUDQ Y12, a0, t0 \
	VPMULUDQ Y13, a2, t1 \
	VPXOR Y14, a1, a1 \
	VPXOR Y15, a3, a3 \
	VPSRLQ $32, t1, a0 \
	VPXOR a1, a0, a0 \
	VPSRLQ $32, t0, a2 \
	VPXOR a3, a2, a2

// AQUAD is four rounds of both states (Y0-Y5 and Y6-Y11); the register names come back
// to where they started.
#define AQUAD \
	AKEYS \
	AROUND(Y0, Y1, Y2, Y3, Y4, Y5) \
	AROUND(Y6, Y7, Y8, Y9, Y10, Y11) \
	ABUMP \
	AKEYS \
	AROUND(Y0, Y5, Y2, Y4, Y1, Y3) \
	AROUND(Y6, Y11, Y8, Y10, Y7, Y9) \
	ABUMP \
	AKEYS \
	AROUND(Y0, Y3, Y2, Y1, Y5, Y4) \
	AROUND(Y6, Y9, Y8, Y7, Y11, Y10) \
	ABUMP \
	AKEYS \
	AROUND(Y0, Y4, Y2, Y5, Y3, Y1) \
	AROUND(Y6, Y10, Y8, Y11, Y9, Y7) \
	ABUMP

// ASTORE writes the state w0-w3 (blocks in lanes 0, 2, 1, 3) as four blocks of four
// words at off(DI), clobbering w0-w3 and t.
#define ASTORE(w0, w1, w2, w3, t, off) \
	VPSLLQ $32, w1, w1 \
	VPBLENDD $0xAA, w1, w0, w0 \
	VPSLLQ $32, w3, w3 \
	VPBLENDD $0xAA, w3, w2, w2 \
	VPUNPCKLQDQ w2, w0, t \
	VPUNPCKHQDQ w2, w0, w0 \
	VMOVDQU t, off(DI) \
	VMOVDQU w0, off+32(DI)

// func block8AVX2(c0, c1, c2, c3 uint32, key [2]uint32, out *[32]uint32)
TEXT ·block8AVX2(SB), NOSPLIT, $0-32
	MOVL c0+0(FP), AX
	VMOVD AX, X0
	VPBROADCASTD X0, Y0
	VPADDD a8lanesB<>(SB), Y0, Y6
	VPADDD a8lanesA<>(SB), Y0, Y0
	MOVL c1+4(FP), AX
	VMOVD AX, X1
	VPBROADCASTD X1, Y1
	VMOVDQU Y1, Y7
	MOVL c2+8(FP), AX
	VMOVD AX, X2
	VPBROADCASTD X2, Y2
	VMOVDQU Y2, Y8
	MOVL c3+12(FP), AX
	VMOVD AX, X3
	VPBROADCASTD X3, Y3
	VMOVDQU Y3, Y9
	VPBROADCASTD a8mul0<>(SB), Y12
	VPBROADCASTD a8mul1<>(SB), Y13
	MOVL key_0+16(FP), R8
	MOVL key_1+20(FP), R9
	AQUAD
	AQUAD
	AKEYS
	AROUND(Y0, Y1, Y2, Y3, Y4, Y5)
	AROUND(Y6, Y7, Y8, Y9, Y10, Y11)
	ABUMP
	AKEYS
	AROUND(Y0, Y5, Y2, Y4, Y1, Y3)
	AROUND(Y6, Y11, Y8, Y10, Y7, Y9)
	// Words 0-3 are now in Y0, Y3, Y2, Y1 and Y6, Y9, Y8, Y7.
	MOVQ out+24(FP), DI
	ASTORE(Y0, Y3, Y2, Y1, Y4, 0)
	ASTORE(Y6, Y9, Y8, Y7, Y4, 64)
	VZEROUPPER
	RET
