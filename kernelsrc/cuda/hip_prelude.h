// HIP prelude: hiprtc compiles this file followed by the CUDA edition (sampling.cu and the
// files it includes). It maps the few CUDA built-ins that the edition uses and HIP spells
// differently; the rest (__umulhi, __umul64hi, __float2ull_rz, __clz, __float_as_uint,
// __uint_as_float, __threadfence, atomicAdd/Or/Exch/Max, warpSize, __align__,
// __launch_bounds__, __noinline__, fmaxf, fabsf, logf, log1pf, expf) HIP provides under
// the CUDA name.
// The edition uses sm_80's __reduce_max_sync only where __CUDA_ARCH__ says so, which HIP
// never defines.

// No multiply-add contraction anywhere in the kernels: clang's HIP default is to fuse
// a * b + c, which would change the contract's separately rounded scores. The runtime
// passes -ffp-contract=off too; the pragma keeps the source right under any options.
#pragma clang fp contract(off)

// HIP's own __fmul_rn/__fadd_rn are plain a * b and a + b, compiled inside HIP's headers
// where contraction is on, so after inlining the pair can still become one fused
// multiply-add (hiprtc does this for gfx90a). These spellings are compiled here, under
// contract(off): separately rounded IEEE round-to-nearest operations.
#define __fmul_rn(a, b) ((float)(a) * (float)(b))
#define __fadd_rn(a, b) ((float)(a) + (float)(b))
// IEEE division, correctly rounded: HIP's default for float division.
#define __fdiv_rn(a, b) ((float)(a) / (float)(b))

// The log-sum-exps' fast 2^x (the CUDA edition uses PTX's ex2.approx on CUDA): the hardware
// v_exp_f32 where the compiler offers it, else the device library's exp2f.
#if defined(__has_builtin)
#if __has_builtin(__builtin_amdgcn_exp2f)
#define GB_EXP2_BUILTIN 1
#endif
#endif
__device__ __forceinline__ float gb_exp2_fast(float x) {
#ifdef GB_EXP2_BUILTIN
    return __builtin_amdgcn_exp2f(x);
#else
    return exp2f(x);
#endif
}

// The record's ln of a log-sum-exp's sum (the CUDA edition uses PTX's lg2.approx on CUDA).
__device__ __forceinline__ float gb_log_fast(float x) { return logf(x); }

// Warp shuffles: HIP's take no mask (the whole wavefront takes part, as every call in
// the CUDA edition does) and default to width = warpSize (64 on CDNA, 32 on RDNA).
#define __shfl_down_sync(mask, var, delta) __shfl_down((var), (delta))
#define __shfl_up_sync(mask, var, delta) __shfl_up((var), (delta))
#define __shfl_xor_sync(mask, var, lane_mask) __shfl_xor((var), (lane_mask))
#define __shfl_sync(mask, var, src_lane) __shfl((var), (src_lane))
// HIP's ballot has a bit per lane of the wavefront: 64 bits (the CUDA edition scans it with
// __ffsll).
#define __ballot_sync(mask, pred) __ballot(pred)
// A wavefront runs its lanes together; __syncwarp orders their shared-memory accesses
// (a wavefront fence) and keeps the compiler from moving them across it.
#define __syncwarp(...)                                                                  \
    do {                                                                                 \
        __builtin_amdgcn_fence(__ATOMIC_SEQ_CST, "wavefront");                           \
        __builtin_amdgcn_wave_barrier();                                                 \
    } while (0)
