//go:build arm64 && !purego

#include "textflag.h"

// UMULL and UMULL2 (vector, 32x32 -> 64 bits), which the Go assembler does not know:
// Vd.2D = Vn.2S * Vm.2S, from the low (UMULL) or high (UMULL2) two lanes of Vn and Vm.
#define UMULL(d, n, m) WORD $(0x2EA0C000 | ((m)<<16) | ((n)<<5) | (d))
#define UMULL2(d, n, m) WORD $(0x6EA0C000 | ((m)<<16) | ((n)<<5) | (d))

// The lane offsets of the counters: blocks 0-3 and 4-7.
DATA nlanes<>+0(SB)/4, $0
DATA nlanes<>+4(SB)/4, $1
DATA nlanes<>+8(SB)/4, $2
DATA nlanes<>+12(SB)/4, $3
DATA nlanes<>+16(SB)/4, $4
DATA nlanes<>+20(SB)/4, $5
DATA nlanes<>+24(SB)/4, $6
DATA nlanes<>+28(SB)/4, $7
GLOBL nlanes<>(SB), RODATA|NOPTR, $32

// PROUND_A and PROUND_B are one Philox round of the four-lane states V0-V3 and V4-V7
// (words 0-3, block j in lane j); V16 and V17 hold the multipliers, V18 and V19 the
// round keys. The 64-bit products of lanes 0-1 and 2-3 are split into their low and
// high halves by UZP1 and UZP2; every new word lands in the register of the old one,
// so the state stays in V0-V3 (V4-V7) and ST4 can write it out in block order.
#define PROUND_A \
	UMULL(20, 0, 16) \
	UMULL2(21, 0, 16) \
	UMULL(22, 2, 17) \
	UMULL2(23, 2, 17) \
	VUZP2 V21.S4, V20.S4, V24.S4 \
	VUZP2 V23.S4, V22.S4, V25.S4 \
	VEOR V3.B16, V24.B16, V24.B16 \
	VEOR V1.B16, V25.B16, V25.B16 \
	VUZP1 V21.S4, V20.S4, V3.S4 \
	VUZP1 V23.S4, V22.S4, V1.S4 \
	VEOR V19.B16, V24.B16, V2.B16 \
	VEOR V18.B16, V25.B16, V0.B16

#define PROUND_B \
	UMULL(26, 4, 16) \
	UMULL2(27, 4, 16) \
	UMULL(28, 6, 17) \
	UMULL2(29, 6, 17) \
	VUZP2 V27.S4, V26.S4, V30.S4 \
	VUZP2 V29.S4, V28.S4, V31.S4 \
	VEOR V7.B16, V30.B16, V30.B16 \
	VEOR V5.B16, V31.B16, V31.B16 \
	VUZP1 V27.S4, V26.S4, V7.S4 \
	VUZP1 V29.S4, V28.S4, V5.S4 \
	VEOR V19.B16, V30.B16, V6.B16 \
	VEOR V18.B16, V31.B16, V4.B16

// func block8NEON(c0, c1, c2, c3 uint32, key [2]uint32, out *[32]uint32)
TEXT ·block8NEON(SB), NOSPLIT, $0-32
	MOVWU c0+0(FP), R0
	MOVWU c1+4(FP), R1
	MOVWU c2+8(FP), R2
	MOVWU c3+12(FP), R3
	MOVWU key_0+16(FP), R8
	MOVWU key_1+20(FP), R9
	MOVD out+24(FP), R4
	MOVD $nlanes<>(SB), R5
	VLD1 (R5), [V28.S4, V29.S4]
	VDUP R0, V0.S4
	VADD V0.S4, V29.S4, V4.S4
	VADD V0.S4, V28.S4, V0.S4
	VDUP R1, V1.S4
	VDUP R1, V5.S4
	VDUP R2, V2.S4
	VDUP R2, V6.S4
	VDUP R3, V3.S4
	VDUP R3, V7.S4
	MOVW $0xD2511F53, R5
	VDUP R5, V16.S4
	MOVW $0xCD9E8D57, R5
	VDUP R5, V17.S4
	MOVW $0x9E3779B9, R10
	MOVW $0xBB67AE85, R11
	MOVD $10, R12

round:
	VDUP R8, V18.S4
	VDUP R9, V19.S4
	PROUND_A
	PROUND_B
	ADDW R10, R8, R8
	ADDW R11, R9, R9
	SUBS $1, R12, R12
	BNE round

	VST4 [V0.S4, V1.S4, V2.S4, V3.S4], (R4)
	ADD $64, R4, R4
	VST4 [V4.S4, V5.S4, V6.S4, V7.S4], (R4)
	RET
