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
