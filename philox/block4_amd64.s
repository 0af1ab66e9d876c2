//go:build amd64 && !purego

#include "textflag.h"

// The lane offsets of the four counters: block j has first word c0+j.
DATA lanes<>+0(SB)/4, $0
DATA lanes<>+4(SB)/4, $1
DATA lanes<>+8(SB)/4, $2
DATA lanes<>+12(SB)/4, $3
GLOBL lanes<>(SB), RODATA|NOPTR, $16

// MULHILO leaves in hi and lo the high and low halves of the four 32-bit products of the
// lanes of x with the constant broadcast in m (t and u are scratch). PMULULQ (PMULUDQ)
// multiplies lanes 0 and 2 into 64-bit products; shifting x right by 32 in each qword
// brings lanes 1 and 3 there.
#define MULHILO(x, m, hi, lo, t, u) \
	MOVO x, t \
	PMULULQ m, t \
	MOVO x, u \
	PSRLQ $32, u \
	PMULULQ m, u \
	PSHUFD $0x08, t, lo \
	PSHUFD $0x08, u, hi \
	PUNPCKLLQ hi, lo \
	PSHUFD $0x0D, t, hi \
	PSHUFD $0x0D, u, t \
	PUNPCKLLQ t, hi

// func block4SSE2(c0, c1, c2, c3 uint32, key [2]uint32, out *[16]uint32)
TEXT ·block4SSE2(SB), NOSPLIT, $0-32
	// X0..X3: the state words 0..3 of the four blocks, block j in lane j.
	MOVL c0+0(FP), AX
	MOVQ AX, X0
	PSHUFD $0, X0, X0
	MOVOU lanes<>(SB), X4
	PADDL X4, X0
	MOVL c1+4(FP), AX
	MOVQ AX, X1
	PSHUFD $0, X1, X1
	MOVL c2+8(FP), AX
	MOVQ AX, X2
	PSHUFD $0, X2, X2
	MOVL c3+12(FP), AX
	MOVQ AX, X3
	PSHUFD $0, X3, X3
	MOVL key_0+16(FP), R8
	MOVL key_1+20(FP), R9
	MOVL $0xD2511F53, AX
	MOVQ AX, X14
	PSHUFD $0, X14, X14
	MOVL $0xCD9E8D57, AX
	MOVQ AX, X15
	PSHUFD $0, X15, X15
	MOVL $10, CX

round:
	MOVQ R8, X12
	PSHUFD $0, X12, X12
	MOVQ R9, X13
	PSHUFD $0, X13, X13
	MULHILO(X0, X14, X6, X7, X4, X5)   // hi0, lo0
	MULHILO(X2, X15, X10, X11, X4, X5) // hi1, lo1
	PXOR X1, X10
	PXOR X12, X10                      // hi1 ^ c1 ^ k0
	PXOR X3, X6
	PXOR X13, X6                       // hi0 ^ c3 ^ k1
	MOVO X10, X0
	MOVO X11, X1
	MOVO X6, X2
	MOVO X7, X3
	ADDL $0x9E3779B9, R8
	ADDL $0xBB67AE85, R9
	DECL CX
	JNZ round

	// Transpose: block j's four words are lane j of X0..X3.
	MOVO X0, X4
	PUNPCKLLQ X1, X4   // a0 b0 a1 b1
	MOVO X0, X5
	PUNPCKHLQ X1, X5   // a2 b2 a3 b3
	MOVO X2, X6
	PUNPCKLLQ X3, X6   // c0 d0 c1 d1
	MOVO X2, X7
	PUNPCKHLQ X3, X7   // c2 d2 c3 d3
	MOVO X4, X8
	PUNPCKLQDQ X6, X8  // block 0
	PUNPCKHQDQ X6, X4  // block 1
	MOVO X5, X9
	PUNPCKLQDQ X7, X9  // block 2
	PUNPCKHQDQ X7, X5  // block 3
	MOVQ out+24(FP), DI
	MOVOU X8, 0(DI)
	MOVOU X4, 16(DI)
	MOVOU X9, 32(DI)
	MOVOU X5, 48(DI)
	RET

// The Philox multipliers, broadcast to every lane (read with MOVOU: no alignment needed).
DATA mul0<>+0(SB)/4, $0xD2511F53
DATA mul0<>+4(SB)/4, $0xD2511F53
DATA mul0<>+8(SB)/4, $0xD2511F53
DATA mul0<>+12(SB)/4, $0xD2511F53
GLOBL mul0<>(SB), RODATA|NOPTR, $16
DATA mul1<>+0(SB)/4, $0xCD9E8D57
DATA mul1<>+4(SB)/4, $0xCD9E8D57
DATA mul1<>+8(SB)/4, $0xCD9E8D57
DATA mul1<>+12(SB)/4, $0xCD9E8D57
GLOBL mul1<>(SB), RODATA|NOPTR, $16

// The lane offsets of blocks 4 to 7.
DATA lanes4<>+0(SB)/4, $4
DATA lanes4<>+4(SB)/4, $5
DATA lanes4<>+8(SB)/4, $6
DATA lanes4<>+12(SB)/4, $7
GLOBL lanes4<>(SB), RODATA|NOPTR, $16

// MULHILO_IN replaces the lanes of x by the high halves of their products with the
// multiplier at m and leaves the low halves in lo (X12 and X13 are scratch).
#define MULHILO_IN(x, m, lo) \
	MOVO x, X12 \
	MOVOU m, X13 \
	PMULULQ X13, X12 \
	PSRLQ $32, x \
	PMULULQ X13, x \
	PSHUFD $0x08, X12, lo \
	PSHUFD $0x08, x, X13 \
	PUNPCKLLQ X13, lo \
	PSHUFD $0x0D, X12, X12 \
	PSHUFD $0x0D, x, x \
	PUNPCKLLQ x, X12 \
	MOVO X12, x

// KEYS broadcasts the round keys k0 (R8) and k1 (R9) into X14 and X15.
#define KEYS \
	MOVQ R8, X14 \
	PSHUFD $0, X14, X14 \
	MOVQ R9, X15 \
	PSHUFD $0, X15, X15

// ROUND is one Philox round of a four-lane state whose words 0-3 are in a, b, c, d,
// with l0 and l1 free. It leaves the new words 0, 1, 2, 3 in c, l1, a, l0 and frees b
// and d: the next round names the registers anew instead of moving them.
#define ROUND(a, b, c, d, l0, l1) \
	MULHILO_IN(a, mul0<>(SB), l0) \
	MULHILO_IN(c, mul1<>(SB), l1) \
	PXOR b, c \
	PXOR X14, c \
	PXOR d, a \
	PXOR X15, a

// BUMP advances the round keys by the Weyl constants.
#define BUMP \
	ADDL $0x9E3779B9, R8 \
	ADDL $0xBB67AE85, R9

// QUAD is four rounds of both states: the register names come back to where they
// started (X0-X3 and X6-X9 hold words 0-3, X4, X5, X10 and X11 are free).
#define QUAD \
	KEYS \
	ROUND(X0, X1, X2, X3, X4, X5) \
	ROUND(X6, X7, X8, X9, X10, X11) \
	BUMP \
	KEYS \
	ROUND(X2, X5, X0, X4, X1, X3) \
	ROUND(X8, X11, X6, X10, X7, X9) \
	BUMP \
	KEYS \
	ROUND(X0, X3, X2, X1, X5, X4) \
	ROUND(X6, X9, X8, X7, X11, X10) \
	BUMP \
	KEYS \
	ROUND(X2, X4, X0, X5, X3, X1) \
	ROUND(X8, X10, X6, X11, X9, X7) \
	BUMP

// TRANSPOSE stores the four-lane state a, b, c, d (words 0-3, block j in lane j) as four
// blocks of four words at off(DI); X12-X15 are scratch.
#define TRANSPOSE(a, b, c, d, off) \
	MOVO a, X12 \
	PUNPCKLLQ b, X12 \
	MOVO a, X13 \
	PUNPCKHLQ b, X13 \
	MOVO c, X14 \
	PUNPCKLLQ d, X14 \
	MOVO c, X15 \
	PUNPCKHLQ d, X15 \
	MOVO X12, a \
	PUNPCKLQDQ X14, a \
	PUNPCKHQDQ X14, X12 \
	MOVO X13, b \
	PUNPCKLQDQ X15, b \
	PUNPCKHQDQ X15, X13 \
	MOVOU a, off(DI) \
	MOVOU X12, off+16(DI) \
	MOVOU b, off+32(DI) \
	MOVOU X13, off+48(DI)

// func block8SSE2(c0, c1, c2, c3 uint32, key [2]uint32, out *[32]uint32)
//
// Two independent four-lane states (X0-X5 for blocks 0-3, X6-X11 for blocks 4-7: four
// state words and two free registers each), so that one state's multiplications overlap
// the other's. The ten rounds are two QUADs and two more rounds, the register names
// rotating with period four (see ROUND).
TEXT ·block8SSE2(SB), NOSPLIT, $0-32
	MOVL c0+0(FP), AX
	MOVQ AX, X0
	PSHUFD $0, X0, X0
	MOVO X0, X6
	MOVOU lanes<>(SB), X4
	PADDL X4, X0
	MOVOU lanes4<>(SB), X4
	PADDL X4, X6
	MOVL c1+4(FP), AX
	MOVQ AX, X1
	PSHUFD $0, X1, X1
	MOVO X1, X7
	MOVL c2+8(FP), AX
	MOVQ AX, X2
	PSHUFD $0, X2, X2
	MOVO X2, X8
	MOVL c3+12(FP), AX
	MOVQ AX, X3
	PSHUFD $0, X3, X3
	MOVO X3, X9
	MOVL key_0+16(FP), R8
	MOVL key_1+20(FP), R9
	QUAD
	QUAD
	KEYS
	ROUND(X0, X1, X2, X3, X4, X5)
	ROUND(X6, X7, X8, X9, X10, X11)
	BUMP
	KEYS
	ROUND(X2, X5, X0, X4, X1, X3)
	ROUND(X8, X11, X6, X10, X7, X9)
	MOVQ out+24(FP), DI
	TRANSPOSE(X0, X3, X2, X1, 0)
	TRANSPOSE(X6, X9, X8, X7, 64)
	RET
