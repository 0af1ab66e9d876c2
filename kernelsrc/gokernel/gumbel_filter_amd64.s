//go:build amd64 && !purego

#include "textflag.h"

// Broadcast constants, 8 lanes each (read as 256-bit memory operands).
DATA fmaxg<>+0(SB)/4, $0x42346666
DATA fmaxg<>+4(SB)/4, $0x42346666
DATA fmaxg<>+8(SB)/4, $0x42346666
DATA fmaxg<>+12(SB)/4, $0x42346666
DATA fmaxg<>+16(SB)/4, $0x42346666
DATA fmaxg<>+20(SB)/4, $0x42346666
DATA fmaxg<>+24(SB)/4, $0x42346666
DATA fmaxg<>+28(SB)/4, $0x42346666
GLOBL fmaxg<>(SB), RODATA|NOPTR, $32
DATA fabs<>+0(SB)/4, $0x7FFFFFFF
DATA fabs<>+4(SB)/4, $0x7FFFFFFF
DATA fabs<>+8(SB)/4, $0x7FFFFFFF
DATA fabs<>+12(SB)/4, $0x7FFFFFFF
DATA fabs<>+16(SB)/4, $0x7FFFFFFF
DATA fabs<>+20(SB)/4, $0x7FFFFFFF
DATA fabs<>+24(SB)/4, $0x7FFFFFFF
DATA fabs<>+28(SB)/4, $0x7FFFFFFF
GLOBL fabs<>(SB), RODATA|NOPTR, $32
DATA finf<>+0(SB)/4, $0x7F800000
DATA finf<>+4(SB)/4, $0x7F800000
DATA finf<>+8(SB)/4, $0x7F800000
DATA finf<>+12(SB)/4, $0x7F800000
DATA finf<>+16(SB)/4, $0x7F800000
DATA finf<>+20(SB)/4, $0x7F800000
DATA finf<>+24(SB)/4, $0x7F800000
DATA finf<>+28(SB)/4, $0x7F800000
GLOBL finf<>(SB), RODATA|NOPTR, $32
DATA fzero<>+0(SB)/4, $0
DATA fzero<>+4(SB)/4, $0
DATA fzero<>+8(SB)/4, $0
DATA fzero<>+12(SB)/4, $0
DATA fzero<>+16(SB)/4, $0
DATA fzero<>+20(SB)/4, $0
DATA fzero<>+24(SB)/4, $0
DATA fzero<>+28(SB)/4, $0
GLOBL fzero<>(SB), RODATA|NOPTR, $32
DATA fln2<>+0(SB)/4, $0x3F317218
DATA fln2<>+4(SB)/4, $0x3F317218
DATA fln2<>+8(SB)/4, $0x3F317218
DATA fln2<>+12(SB)/4, $0x3F317218
DATA fln2<>+16(SB)/4, $0x3F317218
DATA fln2<>+20(SB)/4, $0x3F317218
DATA fln2<>+24(SB)/4, $0x3F317218
DATA fln2<>+28(SB)/4, $0x3F317218
GLOBL fln2<>(SB), RODATA|NOPTR, $32
DATA fmargin<>+0(SB)/4, $0x3CA3D70A
DATA fmargin<>+4(SB)/4, $0x3CA3D70A
DATA fmargin<>+8(SB)/4, $0x3CA3D70A
DATA fmargin<>+12(SB)/4, $0x3CA3D70A
DATA fmargin<>+16(SB)/4, $0x3CA3D70A
DATA fmargin<>+20(SB)/4, $0x3CA3D70A
DATA fmargin<>+24(SB)/4, $0x3CA3D70A
DATA fmargin<>+28(SB)/4, $0x3CA3D70A
GLOBL fmargin<>(SB), RODATA|NOPTR, $32
DATA f158<>+0(SB)/4, $158
DATA f158<>+4(SB)/4, $158
DATA f158<>+8(SB)/4, $158
DATA f158<>+12(SB)/4, $158
DATA f158<>+16(SB)/4, $158
DATA f158<>+20(SB)/4, $158
DATA f158<>+24(SB)/4, $158
DATA f158<>+28(SB)/4, $158
GLOBL f158<>(SB), RODATA|NOPTR, $32
DATA f7f<>+0(SB)/4, $0x7F
DATA f7f<>+4(SB)/4, $0x7F
DATA f7f<>+8(SB)/4, $0x7F
DATA f7f<>+12(SB)/4, $0x7F
DATA f7f<>+16(SB)/4, $0x7F
DATA f7f<>+20(SB)/4, $0x7F
DATA f7f<>+24(SB)/4, $0x7F
DATA f7f<>+28(SB)/4, $0x7F
GLOBL f7f<>(SB), RODATA|NOPTR, $32
DATA f24bits<>+0(SB)/4, $0x00FFFFFF
DATA f24bits<>+4(SB)/4, $0x00FFFFFF
DATA f24bits<>+8(SB)/4, $0x00FFFFFF
DATA f24bits<>+12(SB)/4, $0x00FFFFFF
DATA f24bits<>+16(SB)/4, $0x00FFFFFF
DATA f24bits<>+20(SB)/4, $0x00FFFFFF
DATA f24bits<>+24(SB)/4, $0x00FFFFFF
DATA f24bits<>+28(SB)/4, $0x00FFFFFF
GLOBL f24bits<>(SB), RODATA|NOPTR, $32
DATA feight<>+0(SB)/4, $8
DATA feight<>+4(SB)/4, $8
DATA feight<>+8(SB)/4, $8
DATA feight<>+12(SB)/4, $8
DATA feight<>+16(SB)/4, $8
DATA feight<>+20(SB)/4, $8
DATA feight<>+24(SB)/4, $8
DATA feight<>+28(SB)/4, $8
GLOBL feight<>(SB), RODATA|NOPTR, $32
DATA ffour<>+0(SB)/4, $4
DATA ffour<>+4(SB)/4, $4
DATA ffour<>+8(SB)/4, $4
DATA ffour<>+12(SB)/4, $4
DATA ffour<>+16(SB)/4, $4
DATA ffour<>+20(SB)/4, $4
DATA ffour<>+24(SB)/4, $4
DATA ffour<>+28(SB)/4, $4
GLOBL ffour<>(SB), RODATA|NOPTR, $32
// The counter offsets of Philox state A's lanes: blocks 0, 2, 1, 3 (see ASTORE).
DATA flanes<>+0(SB)/4, $0
DATA flanes<>+4(SB)/4, $0
DATA flanes<>+8(SB)/4, $2
DATA flanes<>+12(SB)/4, $0
DATA flanes<>+16(SB)/4, $1
DATA flanes<>+20(SB)/4, $0
DATA flanes<>+24(SB)/4, $3
DATA flanes<>+28(SB)/4, $0
GLOBL flanes<>(SB), RODATA|NOPTR, $32
DATA fmul0<>+0(SB)/4, $0xD2511F53
GLOBL fmul0<>(SB), RODATA|NOPTR, $4
DATA fmul1<>+0(SB)/4, $0xCD9E8D57
GLOBL fmul1<>(SB), RODATA|NOPTR, $4

// Frame layout (offsets from SP, 32 bytes a vector): the round keys, k0 of round r at
// 64r and k1 at 64r+32; then the broadcast inputs.
#define KEYS 0
#define INVT 640
#define LIMIT 672
#define CTR1 704
#define CTR2 736
#define CTR3 768
#define CTR0 800

// The Philox rounds are block8AVX2's (philox/block8_avx2_amd64.s): each block's state
// words in the low halves of 64-bit lanes, so that VPMULUDQ gives the whole product in
// place and a round needs no shuffles; the high halves carry garbage nobody reads. Y12
// and Y13 hold the multipliers, the round keys come from the frame.
//
// FROUND is round r of the state a0-a3; it leaves the state in (a0, t1, a2, t0).
#define FROUND(r, a0, a1, a2, a3, t0, t1) \
	VPMULUDQ Y12, a0, t0 \
	VPMULUDQ Y13, a2, t1 \
	VPXOR (KEYS+64*(r))(SP), a1, a1 \
	VPXOR (KEYS+64*(r)+32)(SP), a3, a3 \
	VPSRLQ $32, t1, a0 \
	VPXOR a1, a0, a0 \
	VPSRLQ $32, t0, a2 \
	VPXOR a3, a2, a2

// FQUAD is rounds r to r+3 of both states (Y0-Y5, Y6-Y11); the names come back.
#define FQUAD(r) \
	FROUND(r, Y0, Y1, Y2, Y3, Y4, Y5) \
	FROUND(r, Y6, Y7, Y8, Y9, Y10, Y11) \
	FROUND(r+1, Y0, Y5, Y2, Y4, Y1, Y3) \
	FROUND(r+1, Y6, Y11, Y8, Y10, Y7, Y9) \
	FROUND(r+2, Y0, Y3, Y2, Y1, Y5, Y4) \
	FROUND(r+2, Y6, Y9, Y8, Y7, Y11, Y10) \
	FROUND(r+3, Y0, Y4, Y2, Y5, Y3, Y1) \
	FROUND(r+3, Y6, Y10, Y8, Y11, Y9, Y7)

// FWORDS turns the final state w0-w3 (blocks in lanes 0, 2, 1, 3) into the words of
// 8 + 8 elements in order, in lo and w0.
#define FWORDS(w0, w1, w2, w3, lo) \
	VPSLLQ $32, w1, w1 \
	VPBLENDD $0xAA, w1, w0, w0 \
	VPSLLQ $32, w3, w3 \
	VPBLENDD $0xAA, w3, w2, w2 \
	VPUNPCKLQDQ w2, w0, lo \
	VPUNPCKHQDQ w2, w0, w0

// PASS1 tests elements off..off+7 (bytes from SI) with MaxGumbel: the sign bits of Y3
// are the passes; Y14 and Y15 gather the finite and the NaN-or-+Inf lanes.
#define PASS1(off) \
	VMOVUPS off(SI), Y0 \
	VMULPS INVT(SP), Y0, Y1 \
	VMULPS fzero<>(SB), Y0, Y2 \
	VADDPS fmaxg<>(SB), Y1, Y3 \
	VADDPS Y2, Y3, Y3 \
	VCMPPS $0x1D, LIMIT(SP), Y3, Y3 \
	VPAND fabs<>(SB), Y0, Y4 \
	VMOVDQU finf<>(SB), Y5 \
	VPCMPGTD Y4, Y5, Y6 \
	VPOR Y6, Y14, Y14 \
	VPCMPGTD Y5, Y4, Y6 \
	VPOR Y6, Y15, Y15 \
	VPCMPEQD Y5, Y0, Y6 \
	VPOR Y6, Y15, Y15

// PASS2 tests elements off..off+7, words in w, with wordBound(w); the sign bits of the
// result (in w) are the passes. Y1-Y3 are scratch.
#define PASS2(off, w) \
	VPSRLD $1, w, w \
	VPCMPGTD f24bits<>(SB), w, Y1 \
	VPAND f7f<>(SB), Y1, Y1 \
	VPANDN w, Y1, w \
	VCVTDQ2PS w, w \
	VPSRLD $23, w, w \
	VMOVDQU f158<>(SB), Y1 \
	VPSUBD w, Y1, w \
	VCVTDQ2PS w, w \
	VMULPS fln2<>(SB), w, w \
	VADDPS fmargin<>(SB), w, w \
	VMOVUPS off(SI), Y2 \
	VMULPS INVT(SP), Y2, Y3 \
	VADDPS w, Y3, w \
	VMULPS fzero<>(SB), Y2, Y2 \
	VADDPS Y2, w, w \
	VCMPPS $0x1D, LIMIT(SP), w, w

// func gumbelFilterAVX2(xs *float32, n int, a *filterArgs, words *[convertChunk]uint32, cands *[convertChunk]uint16) (nc int, seen uint32)
//
// Per group of 32 elements: the MaxGumbel test (PASS1); when some element passes it, the
// group's eight Philox blocks as two four-lane states side by side, their words stored,
// and the word-bound test (PASS2); then the candidates' indices, one bit at a time.
TEXT ·gumbelFilterAVX2(SB), 0, $832-52
	MOVQ a+16(FP), AX
	VBROADCASTSS 0(AX), Y0
	VMOVDQU Y0, INVT(SP)
	VBROADCASTSS 4(AX), Y0
	VMOVDQU Y0, LIMIT(SP)
	VPBROADCASTD 8(AX), Y0
	VPADDD flanes<>(SB), Y0, Y0
	VMOVDQU Y0, CTR0(SP)
	VPBROADCASTD 12(AX), Y0
	VMOVDQU Y0, CTR1(SP)
	VPBROADCASTD 16(AX), Y0
	VMOVDQU Y0, CTR2(SP)
	VPBROADCASTD 20(AX), Y0
	VMOVDQU Y0, CTR3(SP)
	// The round keys: k + r·Weyl for r = 0..9.
	MOVL 24(AX), R8
	MOVL 28(AX), R9
	XORQ CX, CX

keys:
	VMOVD R8, X0
	VPBROADCASTD X0, Y0
	VMOVDQU Y0, 0(SP)(CX*1)
	VMOVD R9, X0
	VPBROADCASTD X0, Y0
	VMOVDQU Y0, 32(SP)(CX*1)
	ADDL $0x9E3779B9, R8
	ADDL $0xBB67AE85, R9
	ADDQ $64, CX
	CMPQ CX, $640
	JLT keys

	VPBROADCASTD fmul0<>(SB), Y12
	VPBROADCASTD fmul1<>(SB), Y13
	VPXOR Y14, Y14, Y14
	VPXOR Y15, Y15, Y15
	MOVQ xs+0(FP), SI
	MOVQ n+8(FP), R10
	MOVQ words+24(FP), DI
	MOVQ cands+32(FP), R11
	XORQ BX, BX // the group's first element
	XORQ R14, R14 // candidates so far

group:
	CMPQ BX, R10
	JGE done
	PASS1(0)
	VMOVMSKPS Y3, R12
	PASS1(32)
	VMOVMSKPS Y3, AX
	SHLL $8, AX
	ORL AX, R12
	PASS1(64)
	VMOVMSKPS Y3, AX
	SHLL $16, AX
	ORL AX, R12
	PASS1(96)
	VMOVMSKPS Y3, AX
	SHLL $24, AX
	ORL AX, R12
	TESTL R12, R12
	JZ next

	VMOVDQU CTR0(SP), Y0
	VPADDD ffour<>(SB), Y0, Y6
	VMOVDQU CTR1(SP), Y1
	VMOVDQU Y1, Y7
	VMOVDQU CTR2(SP), Y2
	VMOVDQU Y2, Y8
	VMOVDQU CTR3(SP), Y3
	VMOVDQU Y3, Y9
	FQUAD(0)
	FQUAD(4)
	FROUND(8, Y0, Y1, Y2, Y3, Y4, Y5)
	FROUND(8, Y6, Y7, Y8, Y9, Y10, Y11)
	FROUND(9, Y0, Y5, Y2, Y4, Y1, Y3)
	FROUND(9, Y6, Y11, Y8, Y10, Y7, Y9)
	// Words 0-3 are in Y0, Y3, Y2, Y1 and Y6, Y9, Y8, Y7; elements 0-31 to Y4, Y0,
	// Y10, Y6.
	FWORDS(Y0, Y3, Y2, Y1, Y4)
	FWORDS(Y6, Y9, Y8, Y7, Y10)
	VMOVDQU Y4, 0(DI)(BX*4)
	VMOVDQU Y0, 32(DI)(BX*4)
	VMOVDQU Y10, 64(DI)(BX*4)
	VMOVDQU Y6, 96(DI)(BX*4)
	PASS2(0, Y4)
	VMOVMSKPS Y4, R13
	PASS2(32, Y0)
	VMOVMSKPS Y0, AX
	SHLL $8, AX
	ORL AX, R13
	PASS2(64, Y10)
	VMOVMSKPS Y10, AX
	SHLL $16, AX
	ORL AX, R13
	PASS2(96, Y6)
	VMOVMSKPS Y6, AX
	SHLL $24, AX
	ORL AX, R13
	ANDL R13, R12

cand:
	TESTL R12, R12
	JZ next
	BSFL R12, AX
	ADDL BX, AX
	MOVW AX, 0(R11)(R14*2)
	INCQ R14
	LEAL -1(R12), AX
	ANDL AX, R12
	JMP cand

next:
	VMOVDQU CTR0(SP), Y0
	VPADDD feight<>(SB), Y0, Y0
	VMOVDQU Y0, CTR0(SP)
	ADDQ $128, SI
	ADDQ $32, BX
	JMP group

done:
	XORL AX, AX
	XORL DX, DX
	VMOVMSKPS Y14, CX
	TESTL CX, CX
	SETNE AL
	VMOVMSKPS Y15, CX
	TESTL CX, CX
	SETNE DL
	SHLL $1, DX
	ORL DX, AX
	MOVQ R14, nc+40(FP)
	MOVL AX, seen+48(FP)
	VZEROUPPER
	RET
