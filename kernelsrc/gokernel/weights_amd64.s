//go:build amd64 && !purego

#include "textflag.h"
#include "exp_amd64.h"

// VEC4 is a 32-byte constant: bits four times.
#define VEC4(name, bits) \
	DATA name<>+0(SB)/8, bits; \
	DATA name<>+8(SB)/8, bits; \
	DATA name<>+16(SB)/8, bits; \
	DATA name<>+24(SB)/8, bits; \
	GLOBL name<>(SB), RODATA|NOPTR, $32

VEC4(wshifter, $0x4338000000000000) // 1.5·2^52
VEC4(winvstep, EXP_INVSTEP)
VEC4(whi, EXP_HI)
VEC4(wlo, EXP_LO)
VEC4(wone, EXP_ONE)
VEC4(whalf, EXP_HALF)
VEC4(wsixth, EXP_SIXTH)
VEC4(w24, EXP_24)
VEC4(w120, EXP_120)
VEC4(w63, $63)
VEC4(wexpbias, $0xbcc800000000ffc0) // 1023·64 less the bits of 1.5·2^52
VEC4(wnear, $0x10000100)            // 2^28 + midpointMargin
VEC4(wlow29, $0x1fffffff)
VEC4(wnearmax, $513)                // 2·midpointMargin + 1
VEC4(wtwo52, $0x4330000000000000)   // 2^52

// func weightsAVX2(w *float32, q *uint64, xs *float32, n int, m, invT, cutoff float32, twoPowF float64, table *[64]float64) (done int, z uint64)
//
// weightsGo over the n elements from xs (n a multiple of 4), four at a time, until a
// group holds an element whose weight the vector exp does not settle (see weights): it
// returns the elements done before that group, and Σ q over them.
TEXT ·weightsAVX2(SB), NOSPLIT, $0-80
	MOVQ w+0(FP), R8
	MOVQ q+8(FP), R9
	MOVQ xs+16(FP), SI
	MOVQ n+24(FP), CX
	MOVQ table+56(FP), DI
	VBROADCASTSS m+32(FP), X15
	VBROADCASTSS invT+36(FP), X14
	VBROADCASTSS cutoff+40(FP), X13
	VCVTPS2PD X13, Y13
	VMOVDQU wshifter<>(SB), Y11
	VBROADCASTSD twoPowF+48(FP), Y10
	VXORPD Y9, Y9, Y9
	VMOVDQU wnearmax<>(SB), Y8
	VPXOR Y12, Y12, Y12 // the four lanes' sums of q
	XORQ DX, DX
	CMPQ CX, $0
	JLE done

loop:
	VMOVUPS (SI)(DX*4), X0
	VSUBPS X15, X0, X0            // fl(x - m)
	VMULPS X14, X0, X0            // d = fl(fl(x - m)·invT)
	VCVTPS2PD X0, Y0
	VCMPPD $1, Y13, Y0, Y1        // Z: d < cutoff, weight 0
	VCMPPD $6, Y9, Y0, Y2         // not d <= 0: NaN or d > 0, left to Go

	// y = exp(d) = 2^(k>>6) · 2^((k&63)/64) · exp(r), k = round(d·64/ln 2).
	VMOVAPD Y11, Y3
	VFMADD231PD winvstep<>(SB), Y0, Y3 // s = 1.5·2^52 + k: k in its low bits
	VSUBPD Y11, Y3, Y4                 // kf = k
	VFNMADD231PD whi<>(SB), Y4, Y0     // d - kf·hi, exact
	VFNMADD231PD wlo<>(SB), Y4, Y0     // r
	VMOVUPD w120<>(SB), Y5
	VFMADD213PD w24<>(SB), Y0, Y5
	VFMADD213PD wsixth<>(SB), Y0, Y5
	VFMADD213PD whalf<>(SB), Y0, Y5
	VFMADD213PD wone<>(SB), Y0, Y5
	VFMADD213PD wone<>(SB), Y0, Y5     // p = exp(r) to degree 5, Horner's way
	VPAND w63<>(SB), Y3, Y6
	VPCMPEQQ Y7, Y7, Y7
	VGATHERQPD Y7, (DI)(Y6*8), Y4      // 2^((k&63)/64)
	VPADDQ wexpbias<>(SB), Y3, Y3      // k + 1023·64
	VPSRLQ $6, Y3, Y3
	VPSLLQ $52, Y3, Y3                 // 2^(k>>6)
	VMULPD Y4, Y5, Y5
	VMULPD Y3, Y5, Y5                  // y

	// A lane outside Z goes to Go when its y's 29 bits below float32's 24 lie within
	// midpointMargin of the midpoint's 2^28, or when it is NaN or d > 0.
	VPADDQ wnear<>(SB), Y5, Y6
	VPAND wlow29<>(SB), Y6, Y6
	VPCMPGTQ Y6, Y8, Y6
	VANDNPD Y6, Y1, Y6
	VORPD Y2, Y6, Y6
	VPTEST Y6, Y6
	JNZ done

	VANDNPD Y5, Y1, Y5                 // 0 in the Z lanes
	VCVTPD2PSY Y5, X5                  // w = float32(y), rounded to nearest
	VMOVUPS X5, (R8)(DX*4)
	VCVTPS2PD X5, Y5
	VMULPD Y10, Y5, Y5                 // w·2^F, exact
	VROUNDPD $11, Y5, Y5               // truncated: an integer of at most 2^52
	VADDPD wtwo52<>(SB), Y5, Y5
	VPSUBQ wtwo52<>(SB), Y5, Y5        // q
	VMOVDQU Y5, (R9)(DX*8)
	VPADDQ Y5, Y12, Y12
	ADDQ $4, DX
	CMPQ DX, CX
	JLT loop

done:
	VEXTRACTI128 $1, Y12, X0
	VPADDQ X0, X12, X0
	VPSHUFD $0x4e, X0, X1
	VPADDQ X1, X0, X0
	VZEROUPPER
	MOVQ DX, done+64(FP)
	MOVQ X0, z+72(FP)
	RET
