//go:build amd64 && !purego

#include "textflag.h"

// Lane k of the 32 (vector k/8, lane k%8) shifts bit k of a mask word into its sign
// bit, which is all VBLENDVPS reads: one VPSLLVD expands eight bits.
DATA maskShifts<>+0(SB)/4, $31
DATA maskShifts<>+4(SB)/4, $30
DATA maskShifts<>+8(SB)/4, $29
DATA maskShifts<>+12(SB)/4, $28
DATA maskShifts<>+16(SB)/4, $27
DATA maskShifts<>+20(SB)/4, $26
DATA maskShifts<>+24(SB)/4, $25
DATA maskShifts<>+28(SB)/4, $24
DATA maskShifts<>+32(SB)/4, $23
DATA maskShifts<>+36(SB)/4, $22
DATA maskShifts<>+40(SB)/4, $21
DATA maskShifts<>+44(SB)/4, $20
DATA maskShifts<>+48(SB)/4, $19
DATA maskShifts<>+52(SB)/4, $18
DATA maskShifts<>+56(SB)/4, $17
DATA maskShifts<>+60(SB)/4, $16
DATA maskShifts<>+64(SB)/4, $15
DATA maskShifts<>+68(SB)/4, $14
DATA maskShifts<>+72(SB)/4, $13
DATA maskShifts<>+76(SB)/4, $12
DATA maskShifts<>+80(SB)/4, $11
DATA maskShifts<>+84(SB)/4, $10
DATA maskShifts<>+88(SB)/4, $9
DATA maskShifts<>+92(SB)/4, $8
DATA maskShifts<>+96(SB)/4, $7
DATA maskShifts<>+100(SB)/4, $6
DATA maskShifts<>+104(SB)/4, $5
DATA maskShifts<>+108(SB)/4, $4
DATA maskShifts<>+112(SB)/4, $3
DATA maskShifts<>+116(SB)/4, $2
DATA maskShifts<>+120(SB)/4, $1
DATA maskShifts<>+124(SB)/4, $0
GLOBL maskShifts<>(SB), RODATA|NOPTR, $128
DATA maskPosInf<>+0(SB)/4, $0x7F800000
GLOBL maskPosInf<>(SB), RODATA|NOPTR, $4
DATA maskNegInf<>+0(SB)/4, $0xFF800000
GLOBL maskNegInf<>(SB), RODATA|NOPTR, $4
DATA maskMaxF32<>+0(SB)/4, $0x7F7FFFFF
GLOBL maskMaxF32<>(SB), RODATA|NOPTR, $4

// MASKWORD broadcasts word BX of the mask and the bitmask (R8, R9) ANDed to Y0.
#define MASKWORD \
	MOVL (R8)(BX*4), AX \
	ANDL (R9)(BX*4), AX \
	VMOVD AX, X0 \
	VPBROADCASTD X0, Y0

// APPLY masks the eight elements at off (SI to DI): allowed lanes keep their bits,
// banned ones get -Inf (Y13); Y15 gathers the banned lanes that held NaN or +Inf (not
// less than +Inf, Y12, unordered included) in its sign bits.
#define APPLY(off, shifts) \
	VPSLLVD shifts, Y0, Y1 \
	VMOVUPS off(SI), Y2 \
	VCMPPS $0x15, Y12, Y2, Y3 \
	VPANDN Y3, Y1, Y3 \
	VPOR Y3, Y15, Y15 \
	VBLENDVPS Y1, Y2, Y13, Y2 \
	VMOVUPS Y2, off(DI)

// func maskApplyAVX2(dst, xs *float32, m1, m2 *uint32, words int) (hidden bool)
//
// One mask word, 32 elements, a trip; there is no branch on the bits, which a grammar
// makes too irregular to predict.
TEXT ·maskApplyAVX2(SB), NOSPLIT, $0-41
	MOVQ dst+0(FP), DI
	MOVQ xs+8(FP), SI
	MOVQ m1+16(FP), R8
	MOVQ m2+24(FP), R9
	MOVQ words+32(FP), CX
	VMOVDQU maskShifts<>+0(SB), Y8
	VMOVDQU maskShifts<>+32(SB), Y9
	VMOVDQU maskShifts<>+64(SB), Y10
	VMOVDQU maskShifts<>+96(SB), Y11
	VBROADCASTSS maskPosInf<>(SB), Y12
	VBROADCASTSS maskNegInf<>(SB), Y13
	VPXOR Y15, Y15, Y15
	XORQ BX, BX

applyLoop:
	CMPQ BX, CX
	JGE applyDone
	MASKWORD
	APPLY(0, Y8)
	APPLY(32, Y9)
	APPLY(64, Y10)
	APPLY(96, Y11)
	ADDQ $128, SI
	ADDQ $128, DI
	INCQ BX
	JMP applyLoop

applyDone:
	VMOVMSKPS Y15, AX
	TESTL AX, AX
	SETNE hidden+40(FP)
	VZEROUPPER
	RET

// THRESH compares the eight elements at off (SI) with their lane's threshold, best
// (Y12) where allowed and MaxFloat32 (Y13) where banned: the lanes at or below it
// (ordered, so never NaN) get all ones in r.
#define THRESH(off, shifts, r) \
	VPSLLVD shifts, Y0, r \
	VBLENDVPS r, Y12, Y13, r \
	VCMPPS $0x1D, off(SI), r, r

// func maskSkipAVX2(xs *float32, m1, m2 *uint32, words int, best float32) (skipped int)
//
// Per word of 32 elements: first whether all of them are at most best, which settles
// nearly every word of a row once its best is found, without the mask; then, for a word
// that fails, the per-lane thresholds.
TEXT ·maskSkipAVX2(SB), NOSPLIT, $0-48
	MOVQ xs+0(FP), SI
	MOVQ m1+8(FP), R8
	MOVQ m2+16(FP), R9
	MOVQ words+24(FP), CX
	VBROADCASTSS best+32(FP), Y12
	VBROADCASTSS maskMaxF32<>(SB), Y13
	VMOVDQU maskShifts<>+0(SB), Y8
	VMOVDQU maskShifts<>+32(SB), Y9
	VMOVDQU maskShifts<>+64(SB), Y10
	VMOVDQU maskShifts<>+96(SB), Y11
	XORQ BX, BX
	CMPQ BX, CX
	JGE skipDone
	// Aligned, and one taken branch a word: otherwise the loop's speed depends on where
	// the linker places it (docs/benchmark_results/cpu.md).
	PCALIGN $32

skipLoop:
	VCMPPS $0x1D, 0(SI), Y12, Y1
	VCMPPS $0x1D, 32(SI), Y12, Y2
	VCMPPS $0x1D, 64(SI), Y12, Y3
	VCMPPS $0x1D, 96(SI), Y12, Y4
	VANDPS Y2, Y1, Y1
	VANDPS Y4, Y3, Y3
	VANDPS Y3, Y1, Y1
	VMOVMSKPS Y1, AX
	CMPL AX, $0xFF
	JNE skipMasked

skipNext:
	ADDQ $128, SI
	INCQ BX
	CMPQ BX, CX
	JLT skipLoop
	JMP skipDone

skipMasked:
	MASKWORD
	THRESH(0, Y8, Y1)
	THRESH(32, Y9, Y2)
	THRESH(64, Y10, Y3)
	THRESH(96, Y11, Y4)
	VANDPS Y2, Y1, Y1
	VANDPS Y4, Y3, Y3
	VANDPS Y3, Y1, Y1
	VMOVMSKPS Y1, AX
	CMPL AX, $0xFF
	JEQ skipNext

skipDone:
	MOVQ BX, skipped+40(FP)
	VZEROUPPER
	RET
