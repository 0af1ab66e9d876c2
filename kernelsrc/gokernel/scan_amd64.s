//go:build amd64 && !purego

#include "textflag.h"

DATA negInf4<>+0(SB)/4, $0xff800000
DATA negInf4<>+4(SB)/4, $0xff800000
DATA negInf4<>+8(SB)/4, $0xff800000
DATA negInf4<>+12(SB)/4, $0xff800000
GLOBL negInf4<>(SB), RODATA|NOPTR, $16

// func scanBelowSSE(p *float32, n int, floor float32) (scanned int, top float32)
//
// Four lanes per step: CMPPS with predicate 1 (less than, false for NaN) and MOVMSKPS
// test the group against the floor; MAXPS folds a passing group into the running
// maximum. Two groups per trip while eight elements remain.
TEXT ·scanBelowSSE(SB), NOSPLIT, $0-36
	MOVQ  p+0(FP), SI
	MOVQ  n+8(FP), CX
	MOVSS floor+16(FP), X0
	SHUFPS $0x00, X0, X0
	MOVUPS negInf4<>(SB), X1
	XORQ  AX, AX

pair:
	LEAQ  8(AX), DX
	CMPQ  DX, CX
	JGT   single
	MOVUPS 0(SI)(AX*4), X2
	MOVUPS 16(SI)(AX*4), X4
	MOVAPS X2, X3
	MOVAPS X4, X5
	CMPPS X0, X3, $1
	CMPPS X0, X5, $1
	ANDPS X5, X3
	MOVMSKPS X3, BX
	CMPL  BX, $15
	JNE   single
	MAXPS X2, X1
	MAXPS X4, X1
	MOVQ  DX, AX
	JMP   pair

single:
	LEAQ  4(AX), DX
	CMPQ  DX, CX
	JGT   done
	MOVUPS 0(SI)(AX*4), X2
	MOVAPS X2, X3
	CMPPS X0, X3, $1
	MOVMSKPS X3, BX
	CMPL  BX, $15
	JNE   done
	MAXPS X2, X1
	MOVQ  DX, AX
	JMP   single

done:
	MOVAPS X1, X2
	SHUFPS $0x4E, X2, X2
	MAXPS X2, X1
	MOVAPS X1, X2
	SHUFPS $0xB1, X2, X2
	MAXPS X2, X1
	MOVQ  AX, scanned+24(FP)
	MOVSS X1, top+32(FP)
	RET

// func scanBelowAVX2(p *float32, n int, floor float32) (scanned int, top float32)
//
// Thirty-two elements per trip: VCMPPS with predicate 1 (less than, false for NaN) on
// four vectors, ANDed, and one VMOVMSKPS test the block; VMAXPS folds a passing block
// as a tree, so that only one VMAXPS a trip waits on the last trip's; the bound is
// tested at the bottom, for one taken branch a trip. A block that fails, and the tail
// under 32, take the SSE loop's four-lane steps (in VEX form, which avoids the cost of
// mixing legacy SSE with AVX) up to the group that stops it.
TEXT ·scanBelowAVX2(SB), NOSPLIT, $0-36
	MOVQ p+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS floor+16(FP), Y0
	VBROADCASTSS negInf4<>(SB), Y1
	XORQ AX, AX
	LEAQ -32(CX), DX // the last start of a whole block
	CMPQ AX, DX
	JGT  fold

block:
	VMOVUPS 0(SI)(AX*4), Y2
	VMOVUPS 32(SI)(AX*4), Y3
	VMOVUPS 64(SI)(AX*4), Y4
	VMOVUPS 96(SI)(AX*4), Y5
	VCMPPS $1, Y0, Y2, Y6
	VCMPPS $1, Y0, Y3, Y7
	VCMPPS $1, Y0, Y4, Y8
	VCMPPS $1, Y0, Y5, Y9
	VANDPS Y7, Y6, Y6
	VANDPS Y9, Y8, Y8
	VANDPS Y8, Y6, Y6
	VMOVMSKPS Y6, BX
	CMPL BX, $0xFF
	JNE  fold
	VMAXPS Y3, Y2, Y2
	VMAXPS Y5, Y4, Y4
	VMAXPS Y4, Y2, Y2
	VMAXPS Y2, Y1, Y1
	ADDQ $32, AX
	CMPQ AX, DX
	JLE  block

fold:
	VEXTRACTF128 $1, Y1, X2
	VMAXPS X2, X1, X1

single:
	LEAQ 4(AX), DX
	CMPQ DX, CX
	JGT  done
	VMOVUPS 0(SI)(AX*4), X2
	VCMPPS $1, X0, X2, X3
	VMOVMSKPS X3, BX
	CMPL BX, $15
	JNE  done
	VMAXPS X2, X1, X1
	MOVQ DX, AX
	JMP  single

done:
	VPERMILPS $0x4E, X1, X2
	VMAXPS X2, X1, X1
	VPERMILPS $0xB1, X1, X2
	VMAXPS X2, X1, X1
	MOVQ AX, scanned+24(FP)
	VMOVSS X1, top+32(FP)
	VZEROUPPER
	RET
