//go:build amd64 && !purego

#include "textflag.h"
#include "exp_amd64.h"

// The constants of expNonPositive (lse.go), each broadcast from 8 bytes.
DATA expneg64<>+0(SB)/8, $0xc050000000000000
GLOBL expneg64<>(SB), RODATA|NOPTR, $8
DATA expinvstep<>+0(SB)/8, EXP_INVSTEP
GLOBL expinvstep<>(SB), RODATA|NOPTR, $8
DATA exphalf<>+0(SB)/8, EXP_HALF
GLOBL exphalf<>(SB), RODATA|NOPTR, $8
DATA expone<>+0(SB)/8, EXP_ONE
GLOBL expone<>(SB), RODATA|NOPTR, $8
DATA exphi<>+0(SB)/8, EXP_HI
GLOBL exphi<>(SB), RODATA|NOPTR, $8
DATA explo<>+0(SB)/8, EXP_LO
GLOBL explo<>(SB), RODATA|NOPTR, $8
DATA expsixth<>+0(SB)/8, EXP_SIXTH
GLOBL expsixth<>(SB), RODATA|NOPTR, $8
DATA exp24<>+0(SB)/8, EXP_24
GLOBL exp24<>(SB), RODATA|NOPTR, $8
DATA exp120<>+0(SB)/8, EXP_120
GLOBL exp120<>(SB), RODATA|NOPTR, $8
DATA expbias<>+0(SB)/8, $1023
GLOBL expbias<>(SB), RODATA|NOPTR, $8
DATA exp63<>+0(SB)/4, $63
GLOBL exp63<>(SB), RODATA|NOPTR, $4

// func sumExpAVX2(xs *float32, n int, invT float32, m float64, table *[64]float64) float64
//
// Σ expNonPositive(float64(fl(x·invT)) - m) over the n elements from xs (n a multiple of
// 4; every member finite or -Inf, m finite): sumExpGo's operations in the same order,
// four elements at a time without fused multiply-adds, so that each term is the Go one;
// the four lanes' sums are added at the end.
TEXT ·sumExpAVX2(SB), NOSPLIT, $0-48
	MOVQ xs+0(FP), SI
	MOVQ n+8(FP), CX
	MOVQ table+32(FP), DI
	VBROADCASTSS invT+16(FP), X9
	VBROADCASTSD m+24(FP), Y15
	VBROADCASTSD expneg64<>(SB), Y14
	VBROADCASTSD expinvstep<>(SB), Y13
	VBROADCASTSD exphalf<>(SB), Y12
	VBROADCASTSD expone<>(SB), Y11
	VBROADCASTSD exphi<>(SB), Y10
	VPBROADCASTD exp63<>(SB), X8
	VXORPD Y0, Y0, Y0 // the four lanes' sums
	SHRQ $2, CX
	JZ done

loop:
	VMULPS (SI), X9, X1           // fl(x·invT)
	VCVTPS2PD X1, Y1
	VSUBPD Y15, Y1, Y1            // d = fl(x·invT) - m
	VCMPPD $13, Y14, Y1, Y2       // d >= -64: the terms that count
	VMAXPD Y14, Y1, Y1            // the others (-Inf) computed at -64, then dropped
	VMULPD Y13, Y1, Y3
	VADDPD Y12, Y3, Y3            // y = d·invStep + 0.5
	VROUNDPD $9, Y3, Y3           // kf = floor(y)
	VMULPD Y10, Y3, Y4
	VSUBPD Y4, Y1, Y4             // d - kf·hi
	VBROADCASTSD explo<>(SB), Y5
	VMULPD Y5, Y3, Y5
	VSUBPD Y5, Y4, Y4             // r = (d - kf·hi) - kf·lo
	VMULPD Y4, Y4, Y5             // r2
	VADDPD Y11, Y4, Y6            // 1 + r
	VBROADCASTSD expsixth<>(SB), Y7
	VMULPD Y7, Y4, Y7             // r·(1/6)
	VADDPD Y12, Y7, Y7            // 1/2 + r·(1/6)
	VMULPD Y7, Y5, Y7             // r2·(1/2 + r/6)
	VADDPD Y7, Y6, Y6             // (1 + r) + r2·(1/2 + r/6)
	VMULPD Y5, Y5, Y5             // r2·r2
	VBROADCASTSD exp120<>(SB), Y7
	VMULPD Y7, Y4, Y7             // r·(1/120)
	VBROADCASTSD exp24<>(SB), Y4
	VADDPD Y4, Y7, Y7             // 1/24 + r/120
	VMULPD Y7, Y5, Y5
	VADDPD Y5, Y6, Y6             // p
	VCVTPD2DQY Y3, X4             // k
	VPAND X8, X4, X5              // k & 63
	VPCMPEQD Y7, Y7, Y7
	VGATHERDPD Y7, (DI)(X5*8), Y3 // 2^((k & 63)/64), over kf
	VMULPD Y3, Y6, Y6             // p · 2^(j/64)
	VPSRAD $6, X4, X4             // k >> 6
	VPMOVSXDQ X4, Y4
	VPBROADCASTQ expbias<>(SB), Y5
	VPADDQ Y5, Y4, Y4
	VPSLLQ $52, Y4, Y4            // 2^(k >> 6)
	VMULPD Y4, Y6, Y6
	VANDPD Y2, Y6, Y6
	VADDPD Y6, Y0, Y0
	ADDQ $16, SI
	DECQ CX
	JNZ loop

done:
	VEXTRACTF128 $1, Y0, X1
	VADDPD X1, X0, X0
	VHADDPD X0, X0, X0
	VZEROUPPER
	MOVSD X0, ret+40(FP)
	RET
