//go:build arm64 && !purego

#include "textflag.h"

// FCMGT, FMAX and FMAXV on four single lanes, which the Go assembler does not know:
// FCMGT sets each lane of Vd to all ones where Vn > Vm (false when either is NaN),
// FMAX keeps the larger of each lane pair, FMAXV puts the largest lane of Vn in Sd.
#define FCMGT4S(d, n, m) WORD $(0x6EA0E400 | ((m)<<16) | ((n)<<5) | (d))
#define FMAX4S(d, n, m) WORD $(0x4E20F400 | ((m)<<16) | ((n)<<5) | (d))
#define FMAXV4S(d, n) WORD $(0x6E30F800 | ((n)<<5) | (d))

// func scanBelowNEON(p *float32, n int, floor float32) (scanned int, top float32)
//
// Four lanes per step: FCMGT with the floor first (floor > x, false for NaN) tests the
// group; the mask's two halves are ANDed in general registers, all ones when every lane
// passed. FMAX folds a passing group into the running maximum, which holds no NaN
// (a NaN never passes), so its NaN rules do not matter. Two groups per trip while eight
// elements remain; a failing pair goes to the single step, which takes its first group
// if that one passes.
TEXT ·scanBelowNEON(SB), NOSPLIT, $0-36
	MOVD  p+0(FP), R0
	MOVD  n+8(FP), R1
	MOVWU floor+16(FP), R2
	VDUP  R2, V0.S4
	MOVW  $0xff800000, R2 // -Inf
	VDUP  R2, V1.S4
	MOVD  $0, R3          // elements scanned
	MOVD  R0, R5          // &p[R3]

pair:
	ADD   $8, R3, R4
	CMP   R1, R4
	BGT   single
	VLD1  (R5), [V2.S4, V3.S4]
	FCMGT4S(4, 0, 2)
	FCMGT4S(5, 0, 3)
	VAND  V5.B16, V4.B16, V4.B16
	VMOV  V4.D[0], R6
	VMOV  V4.D[1], R7
	AND   R7, R6, R6
	CMN   $1, R6
	BNE   single
	FMAX4S(1, 1, 2)
	FMAX4S(1, 1, 3)
	ADD   $32, R5, R5
	MOVD  R4, R3
	B     pair

single:
	ADD   $4, R3, R4
	CMP   R1, R4
	BGT   done
	VLD1  (R5), [V2.S4]
	FCMGT4S(4, 0, 2)
	VMOV  V4.D[0], R6
	VMOV  V4.D[1], R7
	AND   R7, R6, R6
	CMN   $1, R6
	BNE   done
	FMAX4S(1, 1, 2)
	ADD   $16, R5, R5
	MOVD  R4, R3
	B     single

done:
	FMAXV4S(1, 1)
	MOVD  R3, scanned+24(FP)
	FMOVS F1, top+32(FP)
	RET
