// gumbel sampling kernels, CUDA edition (also compiled for HIP through hip_prelude.h).
//
// The contract is kernelsrc/ABI.md; the Go edition (kernelsrc/gokernel) is the reference
// these kernels match token for token (kernelsrc/emu runs this file on the CPU to prove
// it). The source is compiled at run time by NVRTC or hiprtc, which offer no standard
// headers, so it defines its own fixed-width types and decodes f16/bf16 bit patterns with
// integer operations. It compiles as C++03 and later.
//
// Numerics: every float operation whose rounding the contract fixes is written with
// __fmul_rn/__fadd_rn/__fdiv_rn (never contracted into a multiply-add, whatever the
// compiler options), and logf/log1pf/expf are the accurate library functions, not
// intrinsics. Only the log-sum-exps of the log-probability records (ABI version 2) use
// fast exponentials, which the ABI allows there: the hardware's 2^x and a polynomial one
// written with explicit fused multiply-adds (gb_exp2_poly).
//
// ABI version 2 (log-probabilities, logit processors, draws over grid.z, RECORD and
// ADVANCE, device routing, topn): each combination of a row's features runs its own
// template instantiation of gumbel_argmax's scan, chosen by block-uniform branches, so a
// row without them runs exactly the version-1 loop.
//
// Block shape: any blockDim.x that is a multiple of the warp size, up to 1024 (and at most
// warpSize warps, which every real device satisfies). Shared arrays are sized for
// 1024 / 32 = 32 warps. Each thread takes four consecutive elements per step (one Philox
// block), with one 16-byte (f32) or 8-byte (f16, bf16) load where the row is aligned
// (checked once per row) and scalar loads otherwise; the next group is loaded before the
// current one is processed.
//
// gumbel_argmax skips work that cannot change the winner, exactly: a warp agrees each
// step on a lower bound of the row's winning score; a group whose largest x·invT plus
// MaxGumbel is below it skips Philox, and an element whose x·invT plus a bound on its
// noise read from the Philox word alone is below it skips its two logarithms.

typedef unsigned int gb_u32;
typedef unsigned long long gb_u64;
typedef unsigned short gb_u16;
typedef int gb_i32;

// RowParams of ABI.md (version 2): 16 little-endian 32-bit words per launch row.
struct gb_row_params {
    gb_u32 row;
    float temperature;
    gb_u32 seed_lo, seed_hi;
    gb_u32 step_lo, step_hi;
    gb_u32 top_k;
    float top_p;
    float min_p;
    gb_u32 flags; // GB_RF_*
    float repetition_penalty;
    float frequency_penalty;
    float presence_penalty;
    gb_u32 topn;
    gb_u32 reserved[2];
};

// Row flags of RowParams word 9 (ABI.md, version 2).
#define GB_RF_LOGPROBS 1u
#define GB_RF_ADVANCE 2u
#define GB_RF_RECORD 4u
#define GB_RF_ROUTED 8u
#define GB_RF_CATEGORICAL 16u
#define GB_RF_BIAS 32u
#define GB_RF_MASK 64u
#define GB_RF_PENALTIES 128u
#define GB_RF_PERTURBED 256u
#define GB_RF_PROCESSORS (GB_RF_BIAS | GB_RF_MASK | GB_RF_PENALTIES)

#define GB_TOPN_MAX 20       // the largest n of the topn kernel
#define GB_TOPN_STRIDE 22    // partials words per topn block: 20 keys, the LSE pair, spare
#define GB_COUNT_MASK 0x7FFFFFFFu // the output count of a counts word; bit 31: prompt token

#define GB_MAX_THREADS 1024
#define GB_MAX_WARPS 32
#define GB_BINS 256
#define GB_MAX_TILES 256 // the categorical draw's first level (see gb_categorical)

#define GB_STATUS_OK 0
#define GB_STATUS_NONFINITE 1
#define GB_STATUS_NO_FINITE 2
#define GB_STATUS_BAD_PARAMS 3

// Row flags (ABI.md): bit 0 a NaN or +Inf was seen, bit 1 a finite logit was seen.
#define GB_FLAG_NONFINITE 1u
#define GB_FLAG_FINITE 2u

// Purposes of the philox stream contract, version 1.
#define GB_PURPOSE_GUMBEL 1u
#define GB_PURPOSE_GUMBEL_TAIL 2u
#define GB_PURPOSE_CATEGORICAL 3u

#define GB_TAIL_THRESHOLD 16777216u // philox.TailThreshold = 2^24
#define GB_MAX_GUMBEL 45.1f          // philox.MaxGumbel
// A lower bound of philox.Gumbel: E is largest for w = 2^32 - 1, where 1 - u = 2^-33 and
// E = 33 ln 2, so g >= -log(33 ln 2) = -3.1301; the margin covers the float32 logarithms.
#define GB_MIN_GUMBEL -3.2f
#define GB_TWO_POW_M32 2.3283064365386962890625e-10f
#define GB_TWO_POW_32 4294967296.0f

#define GB_F32 0
#define GB_F16 1
#define GB_BF16 2

// ---------------------------------------------------------------------------------------
// Small helpers

__device__ __forceinline__ float gb_inf() { return __uint_as_float(0x7f800000u); }

__device__ __forceinline__ gb_u32 gb_min_u32(gb_u32 a, gb_u32 b) { return a < b ? a : b; }
__device__ __forceinline__ gb_u32 gb_max_u32(gb_u32 a, gb_u32 b) { return a > b ? a : b; }
__device__ __forceinline__ gb_u64 gb_max_u64(gb_u64 a, gb_u64 b) { return a > b ? a : b; }

// gb_orderkey maps a float to a uint32 whose unsigned order is the float order. -0 takes
// the key of +0: equal floats must tie, so that the lowest index wins in every reduction
// order. NaN with the sign bit clear lies above +Inf.
__device__ __forceinline__ gb_u32 gb_orderkey(float f) {
    gb_u32 b = __float_as_uint(f);
    if (b == 0x80000000u) {
        b = 0u;
    }
    return b ^ ((b >> 31) ? 0xFFFFFFFFu : 0x80000000u);
}

// gb_orderkey_inverse undoes gb_orderkey.
__device__ __forceinline__ float gb_orderkey_inverse(gb_u32 k) {
    return __uint_as_float((k & 0x80000000u) ? (k ^ 0x80000000u) : ~k);
}

// gb_pack is the packed (score, index) key: the largest is the winner, ties to the
// lowest index; 0 is the empty key, below every real one.
__device__ __forceinline__ gb_u64 gb_pack(float score, gb_u32 index) {
    return ((gb_u64)gb_orderkey(score) << 32) | (gb_u64)(0xFFFFFFFFu - index);
}

// gb_half_to_float converts IEEE binary16 bits exactly.
__device__ __forceinline__ float gb_half_to_float(gb_u32 h) {
    gb_u32 sign = (h & 0x8000u) << 16;
    gb_u32 exp = (h >> 10) & 0x1Fu;
    gb_u32 mant = h & 0x3FFu;
    if (exp == 0x1Fu) {
        return __uint_as_float(sign | 0x7F800000u | (mant << 13));
    }
    if (exp != 0u) {
        return __uint_as_float(sign | ((exp + 112u) << 23) | (mant << 13));
    }
    // Zero or subnormal: mant * 2^-24, exact in float32 (mant < 2^10, result normal).
    return __uint_as_float(sign | __float_as_uint(__fmul_rn((float)mant, 5.9604644775390625e-8f)));
}

// gb_bf16_to_float converts bfloat16 bits (the top half of a float32).
__device__ __forceinline__ float gb_bf16_to_float(gb_u32 h) { return __uint_as_float(h << 16); }

// 16- and 8-byte vector types for the aligned loads.
struct __align__(16) gb_vec4u32 {
    gb_u32 a, b, c, d;
};

// gb_io<KIND> reads logits of one element type: scalar loads anywhere, four-element
// vector loads where the group's address is aligned (checked once per row).
template <int KIND>
struct gb_io;

template <>
struct gb_io<GB_F32> {
    typedef float elem;
    static __device__ __forceinline__ bool vec_ok(const elem* row) {
        return (reinterpret_cast<gb_u64>(row) & 15u) == 0u;
    }
    static __device__ __forceinline__ float load1(const elem* p) { return *p; }
    static __device__ __forceinline__ void load4(const elem* p, float x[4]) {
        gb_vec4u32 v = *reinterpret_cast<const gb_vec4u32*>(p);
        x[0] = __uint_as_float(v.a);
        x[1] = __uint_as_float(v.b);
        x[2] = __uint_as_float(v.c);
        x[3] = __uint_as_float(v.d);
    }
};

template <>
struct gb_io<GB_F16> {
    typedef gb_u16 elem;
    static __device__ __forceinline__ bool vec_ok(const elem* row) {
        return (reinterpret_cast<gb_u64>(row) & 7u) == 0u;
    }
    static __device__ __forceinline__ float load1(const elem* p) { return gb_half_to_float(*p); }
    static __device__ __forceinline__ void load4(const elem* p, float x[4]) {
        gb_u64 v = *reinterpret_cast<const gb_u64*>(p);
        x[0] = gb_half_to_float((gb_u32)v & 0xFFFFu);
        x[1] = gb_half_to_float((gb_u32)(v >> 16) & 0xFFFFu);
        x[2] = gb_half_to_float((gb_u32)(v >> 32) & 0xFFFFu);
        x[3] = gb_half_to_float((gb_u32)(v >> 48));
    }
};

template <>
struct gb_io<GB_BF16> {
    typedef gb_u16 elem;
    static __device__ __forceinline__ bool vec_ok(const elem* row) {
        return (reinterpret_cast<gb_u64>(row) & 7u) == 0u;
    }
    static __device__ __forceinline__ float load1(const elem* p) { return gb_bf16_to_float(*p); }
    static __device__ __forceinline__ void load4(const elem* p, float x[4]) {
        gb_u64 v = *reinterpret_cast<const gb_u64*>(p);
        x[0] = gb_bf16_to_float((gb_u32)v & 0xFFFFu);
        x[1] = gb_bf16_to_float((gb_u32)(v >> 16) & 0xFFFFu);
        x[2] = gb_bf16_to_float((gb_u32)(v >> 32) & 0xFFFFu);
        x[3] = gb_bf16_to_float((gb_u32)(v >> 48));
    }
};

// gb_load_group reads the up to four elements g..g+3 below end (g a multiple of 4) and
// returns how many there are; missing elements read as -Inf and must be ignored.
template <int KIND>
__device__ __forceinline__ gb_u32 gb_load_group(const typename gb_io<KIND>::elem* row, gb_u32 g,
                                                gb_u32 end, bool vec, float x[4]) {
    if (g >= end) {
        x[0] = x[1] = x[2] = x[3] = -gb_inf();
        return 0u;
    }
    if (vec && end - g >= 4u) {
        gb_io<KIND>::load4(row + g, x);
        return 4u;
    }
    gb_u32 n = gb_min_u32(end - g, 4u);
#pragma unroll
    for (gb_u32 j = 0; j < 4u; ++j) {
        x[j] = j < n ? gb_io<KIND>::load1(row + g + j) : -gb_inf();
    }
    return n;
}

// gb_flags returns the row flags of one element.
__device__ __forceinline__ gb_u32 gb_flags(float x) {
    if (x != x || x == gb_inf()) {
        return GB_FLAG_NONFINITE;
    }
    return x != -gb_inf() ? GB_FLAG_FINITE : 0u;
}

// gb_flags_status is the status a row's flags give its draws: 1 for a NaN or +Inf
// logit, 2 for no finite one, else 0.
__device__ __forceinline__ gb_i32 gb_flags_status(gb_u32 flags) {
    if (flags & GB_FLAG_NONFINITE) {
        return GB_STATUS_NONFINITE;
    }
    return (flags & GB_FLAG_FINITE) ? GB_STATUS_OK : GB_STATUS_NO_FINITE;
}

// gb_finish turns a draw's winner key and row flags into the token and status of its
// output slot, and returns the status.
__device__ __forceinline__ gb_i32 gb_finish(gb_i32* tokens, gb_i32* status, gb_u64 slot, gb_u64 key, gb_u32 flags) {
    const gb_i32 st = gb_flags_status(flags);
    const gb_i32 tok = (gb_i32)(0xFFFFFFFFu - (gb_u32)key);
    tokens[slot] = st == GB_STATUS_OK ? tok : -1;
    status[slot] = st;
    return st;
}

// gb_bad_row reports the rows the ABI answers with status 3: temperature negative, NaN,
// infinite, or so small that 1/T overflows (x·invT would be NaN for x = 0); a vocabulary
// outside [1, 2^31).
__device__ __forceinline__ bool gb_bad_row(float t, gb_u32 vocab) {
    if (!(t >= 0.0f) || t == gb_inf()) {
        return true;
    }
    if (t > 0.0f && 1.0f / t == gb_inf()) {
        return true;
    }
    return vocab == 0u || vocab > 0x7FFFFFFFu;
}

// ---------------------------------------------------------------------------------------
// Philox4x32-10 and the noise of the stream contract (package philox)

__device__ __forceinline__ void gb_philox(gb_u32 c0, gb_u32 c1, gb_u32 c2, gb_u32 c3, gb_u32 k0,
                                          gb_u32 k1, gb_u32 out[4]) {
#pragma unroll
    for (int r = 0; r < 10; ++r) {
        if (r > 0) {
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        gb_u32 hi0 = __umulhi(0xD2511F53u, c0);
        gb_u32 lo0 = 0xD2511F53u * c0;
        gb_u32 hi1 = __umulhi(0xCD9E8D57u, c2);
        gb_u32 lo1 = 0xCD9E8D57u * c2;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

// gb_exponential is philox.Exponential: the Exp(1) variate of main word w and tail word.
__device__ __forceinline__ float gb_exponential(gb_u32 w, gb_u32 tail) {
    if (w >= 0x80000000u) {
        float one_minus_u = __fmul_rn(__fadd_rn((float)(~w), 0.5f), GB_TWO_POW_M32);
        return -logf(one_minus_u);
    }
    float u;
    if (w < GB_TAIL_THRESHOLD) {
        float frac = __fmul_rn(__fadd_rn((float)tail, 0.5f), GB_TWO_POW_M32);
        u = __fmul_rn(__fadd_rn((float)w, frac), GB_TWO_POW_M32);
    } else {
        u = __fmul_rn(__fadd_rn((float)w, 0.5f), GB_TWO_POW_M32);
    }
    return -log1pf(-u);
}

// gb_gumbel is philox.Gumbel.
__device__ __forceinline__ float gb_gumbel(gb_u32 w, gb_u32 tail) { return -logf(gb_exponential(w, tail)); }

// gb_gumbel_bound is an upper bound of gb_gumbel(w, any tail) read from the main word
// alone, so an element far below the best score skips its logarithms. With c leading zero
// bits, w >= 2^(31-c), so u >= 2^-(c+1), E = -log1p(-u) >= u and g = -log(E) <= (c+1) ln 2;
// for w >= 2^31, 1-u <= 1/2 gives E >= ln 2 and g <= -log(ln 2) < 0.367. The 1e-3 margin
// covers the last-place errors of the float32 logarithms many times over; w = 0 falls back
// to MaxGumbel. Skipping on it never changes a result: a skipped score is provably below
// a score already reached.
__device__ __forceinline__ float gb_gumbel_bound(gb_u32 w) {
    if (w >= 0x80000000u) {
        return 0.37f;
    }
    if (w == 0u) {
        return GB_MAX_GUMBEL;
    }
    return __fadd_rn(__fmul_rn((float)(__clz((int)w) + 1), 0.69314718f), 1e-3f);
}

// ---------------------------------------------------------------------------------------
// Warp and block collectives. Every lane of every warp must call them (blockDim.x is a
// multiple of the warp size); 64-bit values travel as two 32-bit halves so that only the
// 32-bit shuffles of CUDA and HIP are needed.

// GB_WARP_SIZE is the lanes of a warp: the constant 32 for CUDA (every NVIDIA GPU), so
// that shuffle trees unroll and lane and warp indices are shifts, not the divisions that
// the run-time warpSize costs; HIP (32 or 64 lanes by target) and the emulation (which
// runs both) keep the run-time value.
#if defined(__CUDACC__) && !defined(__HIP__) && !defined(__HIPCC__)
#define GB_WARP_SIZE 32
#else
#define GB_WARP_SIZE warpSize
#endif

__device__ __forceinline__ gb_u32 gb_lane() { return threadIdx.x % GB_WARP_SIZE; }
__device__ __forceinline__ gb_u32 gb_warp() { return threadIdx.x / GB_WARP_SIZE; }
__device__ __forceinline__ gb_u32 gb_num_warps() { return blockDim.x / GB_WARP_SIZE; }

__device__ __forceinline__ gb_u32 gb_shfl_down_u32(gb_u32 v, gb_u32 d) {
    return __shfl_down_sync(0xFFFFFFFFu, v, d);
}
__device__ __forceinline__ gb_u64 gb_shfl_down_u64(gb_u64 v, gb_u32 d) {
    gb_u32 lo = __shfl_down_sync(0xFFFFFFFFu, (gb_u32)v, d);
    gb_u32 hi = __shfl_down_sync(0xFFFFFFFFu, (gb_u32)(v >> 32), d);
    return ((gb_u64)hi << 32) | lo;
}
__device__ __forceinline__ gb_u64 gb_shfl_up_u64(gb_u64 v, gb_u32 d) {
    gb_u32 lo = __shfl_up_sync(0xFFFFFFFFu, (gb_u32)v, d);
    gb_u32 hi = __shfl_up_sync(0xFFFFFFFFu, (gb_u32)(v >> 32), d);
    return ((gb_u64)hi << 32) | lo;
}

// gb_warp_max_f32_all returns the warp's largest value to every lane. On sm_80 and later
// it is one warp reduction of order keys (a NaN with the sign bit clear then wins, which
// only stops noise skipping in a row that ends with status 1 anyway); elsewhere a
// butterfly of shuffles that ignores NaN.
__device__ __forceinline__ float gb_warp_max_f32_all(float v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    return gb_orderkey_inverse(__reduce_max_sync(0xFFFFFFFFu, gb_orderkey(v)));
#else
    for (int m = GB_WARP_SIZE / 2; m > 0; m >>= 1) {
        v = fmaxf(v, __uint_as_float(__shfl_xor_sync(0xFFFFFFFFu, __float_as_uint(v), m)));
    }
    return v;
#endif
}

// gb_warp_max_u64_all returns the warp's largest value to every lane: on sm_80 and later
// two warp reductions, the high halves' maximum and then the low halves' among the lanes
// that hold it; elsewhere a butterfly of shuffles.
__device__ __forceinline__ gb_u64 gb_warp_max_u64_all(gb_u64 v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const gb_u32 hi = __reduce_max_sync(0xFFFFFFFFu, (gb_u32)(v >> 32));
    const gb_u32 lo = __reduce_max_sync(0xFFFFFFFFu, (gb_u32)(v >> 32) == hi ? (gb_u32)v : 0u);
    return ((gb_u64)hi << 32) | lo;
#else
    for (int m = GB_WARP_SIZE / 2; m > 0; m >>= 1) {
        const gb_u32 lo = __shfl_xor_sync(0xFFFFFFFFu, (gb_u32)v, m);
        const gb_u32 hi = __shfl_xor_sync(0xFFFFFFFFu, (gb_u32)(v >> 32), m);
        v = gb_max_u64(v, ((gb_u64)hi << 32) | lo);
    }
    return v;
#endif
}

// gb_warp_or_all returns the warp's OR of v to every lane.
__device__ __forceinline__ gb_u32 gb_warp_or_all(gb_u32 v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    return __reduce_or_sync(0xFFFFFFFFu, v);
#else
    for (int m = GB_WARP_SIZE / 2; m > 0; m >>= 1) {
        v |= __shfl_xor_sync(0xFFFFFFFFu, v, m);
    }
    return v;
#endif
}

// gb_first_lane returns the lowest lane of the warp whose p is set (-1 for none). HIP's
// ballot is 64 bits wide (hip_prelude.h), so the bit scan is too.
__device__ __forceinline__ int gb_first_lane(bool p) {
    return __ffsll((long long)__ballot_sync(0xFFFFFFFFu, p)) - 1;
}

// gb_shfl_f32 returns lane src's v.
__device__ __forceinline__ float gb_shfl_f32(float v, int src) {
    return __uint_as_float(__shfl_sync(0xFFFFFFFFu, __float_as_uint(v), src));
}

// gb_warp_max_u32_all returns the warp's largest value to every lane.
__device__ __forceinline__ gb_u32 gb_warp_max_u32_all(gb_u32 v) {
    for (int m = GB_WARP_SIZE / 2; m > 0; m >>= 1) {
        v = gb_max_u32(v, __shfl_xor_sync(0xFFFFFFFFu, v, m));
    }
    return v;
}

// gb_block_max_or returns to every thread the block's largest value and OR of flags.
__device__ __forceinline__ void gb_block_max_or(gb_u32& value, gb_u32& flags, gb_u64* s_red,
                                                gb_u64* s_bcast) {
    gb_u32 f = flags;
    for (int d = GB_WARP_SIZE / 2; d > 0; d >>= 1) {
        value = gb_max_u32(value, gb_shfl_down_u32(value, d));
        f |= gb_shfl_down_u32(f, d);
    }
    if (gb_lane() == 0u) {
        s_red[gb_warp()] = ((gb_u64)value << 32) | f;
    }
    __syncthreads();
    if (gb_warp() == 0u) {
        gb_u64 p = gb_lane() < gb_num_warps() ? s_red[gb_lane()] : 0ull;
        gb_u32 v = (gb_u32)(p >> 32);
        gb_u32 ff = (gb_u32)p;
        for (int d = GB_WARP_SIZE / 2; d > 0; d >>= 1) {
            v = gb_max_u32(v, gb_shfl_down_u32(v, d));
            ff |= gb_shfl_down_u32(ff, d);
        }
        if (gb_lane() == 0u) {
            s_bcast[0] = ((gb_u64)v << 32) | ff;
        }
    }
    __syncthreads();
    gb_u64 packed = s_bcast[0];
    value = (gb_u32)(packed >> 32);
    flags = (gb_u32)packed;
    __syncthreads();
}

// gb_block_sum_u64 returns the block's sum to every thread.
__device__ __forceinline__ gb_u64 gb_block_sum_u64(gb_u64 v, gb_u64* s_red, gb_u64* s_bcast) {
    for (int d = GB_WARP_SIZE / 2; d > 0; d >>= 1) {
        v += gb_shfl_down_u64(v, d);
    }
    // shfl_down hands a lane its own value where the source lane is past the warp, so only
    // lane 0's sum is exact; that is the one kept.
    if (gb_lane() == 0u) {
        s_red[gb_warp()] = v;
    }
    __syncthreads();
    if (gb_warp() == 0u) {
        gb_u64 s = gb_lane() < gb_num_warps() ? s_red[gb_lane()] : 0ull;
        for (int d = GB_WARP_SIZE / 2; d > 0; d >>= 1) {
            s += gb_shfl_down_u64(s, d);
        }
        if (gb_lane() == 0u) {
            s_bcast[0] = s;
        }
    }
    __syncthreads();
    gb_u64 total = s_bcast[0];
    __syncthreads();
    return total;
}

// gb_block_exclusive_scan_u64 returns the sum of v over the threads before this one and
// sets total to the block's sum, in thread order.
__device__ __forceinline__ gb_u64 gb_block_exclusive_scan_u64(gb_u64 v, gb_u64& total, gb_u64* s_red,
                                                              gb_u64* s_bcast) {
    gb_u32 lane = gb_lane();
    gb_u64 incl = v;
    for (int d = 1; d < GB_WARP_SIZE; d <<= 1) {
        gb_u64 t = gb_shfl_up_u64(incl, d);
        if (lane >= (gb_u32)d) {
            incl += t;
        }
    }
    if (lane == (gb_u32)GB_WARP_SIZE - 1u) {
        s_red[gb_warp()] = incl;
    }
    __syncthreads();
    if (gb_warp() == 0u) {
        gb_u64 w = lane < gb_num_warps() ? s_red[lane] : 0ull;
        gb_u64 wincl = w;
        for (int d = 1; d < GB_WARP_SIZE; d <<= 1) {
            gb_u64 t = gb_shfl_up_u64(wincl, d);
            if (lane >= (gb_u32)d) {
                wincl += t;
            }
        }
        if (lane < gb_num_warps()) {
            s_red[lane] = wincl - w;
        }
        if (lane == (gb_u32)GB_WARP_SIZE - 1u) {
            s_bcast[0] = wincl;
        }
    }
    __syncthreads();
    gb_u64 excl = s_red[gb_warp()] + incl - v;
    total = s_bcast[0];
    __syncthreads();
    return excl;
}

// gb_select_bin walks the 256 bins of a radix level from the top and returns to every
// thread the first bin b with val[b] > 0 and above + val[b] >= target, where above is the
// sum of val over the bins past b (returned too). val is cnt when mass is null. Warp 0
// does the walk: each lane owns 256 / warpSize consecutive bins.
__device__ __forceinline__ gb_u32 gb_select_bin(const gb_u32* cnt, const gb_u64* mass, gb_u64 target,
                                                gb_u64& above, gb_u64* s_bcast) {
    if (gb_warp() == 0u) {
        gb_u32 lane = gb_lane();
        gb_u32 per = GB_BINS / GB_WARP_SIZE;
        gb_u32 lo = lane * per;
        gb_u64 local = 0;
        for (gb_u32 b = lo; b < lo + per; ++b) {
            local += mass ? mass[b] : (gb_u64)cnt[b];
        }
        // suffix: the sum over this lane's bins and every higher lane's.
        gb_u64 suffix = local;
        for (int d = 1; d < GB_WARP_SIZE; d <<= 1) {
            gb_u64 t = gb_shfl_down_u64(suffix, d);
            if (lane + (gb_u32)d < (gb_u32)GB_WARP_SIZE) {
                suffix += t;
            }
        }
        gb_u64 acc = suffix - local;
        gb_u32 cand = 0;
        gb_u64 cand_above = 0;
        for (gb_u32 i = 0; i < per; ++i) {
            gb_u32 b = lo + per - 1u - i;
            gb_u64 v = mass ? mass[b] : (gb_u64)cnt[b];
            if (cand == 0u && v > 0ull && acc + v >= target) {
                cand = b + 1u;
                cand_above = acc;
            }
            acc += v;
        }
        gb_u32 best = gb_warp_max_u32_all(cand);
        if (cand != 0u && cand == best) {
            s_bcast[0] = cand - 1u;
            s_bcast[1] = cand_above;
        }
        if (best == 0u && lane == 0u) {
            // Unreachable for consistent inputs (the target never exceeds the total).
            s_bcast[0] = 0ull;
            s_bcast[1] = 0ull;
        }
    }
    __syncthreads();
    gb_u32 bin = (gb_u32)s_bcast[0];
    above = s_bcast[1];
    __syncthreads();
    return bin;
}

// gb_hist_add adds four elements to a radix level's histograms: bins[j] for the elements
// with ok[j], counting each distinct bin once per group so that runs of equal bins (common
// in the top digits of logits) cost one shared-memory atomic.
__device__ __forceinline__ void gb_hist_add(gb_u32* s_cnt, gb_u64* s_mass, const gb_u32 bins[4],
                                            const gb_u64 q[4], bool ok[4]) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        if (!ok[j]) {
            continue;
        }
        gb_u32 c = 1u;
        gb_u64 m = q[j];
#pragma unroll
        for (int j2 = j + 1; j2 < 4; ++j2) {
            if (ok[j2] && bins[j2] == bins[j]) {
                ++c;
                m += q[j2];
                ok[j2] = false;
            }
        }
        if (s_cnt) {
            atomicAdd(&s_cnt[bins[j]], c);
        }
        if (s_mass && m != 0ull) {
            atomicAdd(&s_mass[bins[j]], m);
        }
    }
}

// ---------------------------------------------------------------------------------------
// Version 2 helpers: fast exponentials, online log-sum-exps, logit processors, the
// log-probability record and the end-of-draws work of a row.

// gb_exp2_fast is 2^x by the hardware approximation (PTX ex2.approx: relative error about
// 2^-22, within the ABI's 2^-20 for log-sum-exps; results below 2^-126 flush to 0, which
// no sum of terms of at least 1 notices). hip_prelude.h and the emulation bring their own.
#ifndef GB_HAVE_EXP2_FAST
__device__ __forceinline__ float gb_exp2_fast(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
#endif

#define GB_LOG2E 1.44269504088896340736f

// gb_log_fast is ln x for a log-sum-exp's sum (at least 1 for a non-empty set, 0 for an
// empty one): PTX lg2.approx (absolute error at most 2^-22.6 in log2 x, so the error in
// ln x stays under 1.1e-7 wherever x lies) times ln 2. The record's logarithms are the
// last arithmetic of a draw, on its critical path in one warp of one block, where logf's
// longer sequence (range reduction and a polynomial) counted in full: on an H200
// (V = 151936, float32) the finishing block's span from its merged sums to its outputs
// written fell from 638 to 555 cycles at 8 rows and from 506 to 258 at one row, and the
// step with log-probabilities from 12.92 to 12.83 µs at 8 rows and 8.83 to 8.69 at one
// (medians of 16 alternated rounds; the plain step unchanged). The errors against
// float64 stay near 1e-6 (TestLogprobErrorsGPU).
// HIP and the emulation bring their own (logf and a double log).
#ifndef GB_HAVE_LOG_FAST
__device__ __forceinline__ float gb_log_fast(float x) {
    float y;
    asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return __fmul_rn(y, 0.693147180559945309f);
}
#endif

// gb_lse is an online log-sum-exp: a reference m and s = Σ exp(v - m) over the members.
// m is a member (-FLT_MAX with s = 0 while the set is empty, see gb_lse_init), and no
// member exceeds it by more than GB_LSE_SLACK: gb_lse_add4 moves m to a group's largest
// value only when that value passes m + slack, so the rescale (one more exponential) is
// paid about once per thread, not at every group that raises the maximum, as it would if
// m had to be the maximum. Each member costs a subtraction, a multiplication and one exponential,
// 2^(fl(v - m) · log2 e); the difference comes first so that no product overflows (|m|
// may be near FLT_MAX), and the exponential, a special-function instruction, is the cost
// that counts. Merges (gb_lse_merge, gb_lse_rescale) keep the larger reference and scale
// the other sum down, so the invariant holds for merged sets too.
struct gb_lse {
    float m, s;
};

// GB_LSE_SLACK bounds a member's excess over its set's reference: each term is at most
// e^32 (about 7.9e13), so even 2^32 of them sum to about 3.4e23, far below FLT_MAX, and a
// float sum keeps its relative precision whatever the scale.
#define GB_LSE_SLACK 32.0f

// gb_lse_init empties a. The empty reference is -FLT_MAX, not -Inf, so that a -Inf
// member adds 2^(-Inf - -FLT_MAX) = 0 rather than the NaN of -Inf - -Inf: gb_lse_add4 then
// needs no test for empty groups, and every finite group moves the reference of an empty
// set (-FLT_MAX + slack rounds to -FLT_MAX). The log-sum-exp of the empty set still
// comes out -Inf: -FLT_MAX + log 0.
__device__ __forceinline__ void gb_lse_init(gb_lse& a) {
    a.m = -3.40282347e38f;
    a.s = 0.0f;
}

// gb_exp_diff is exp(v - m) for v <= m + GB_LSE_SLACK (0 for v = -Inf).
__device__ __forceinline__ float gb_exp_diff(float v, float m) {
    return gb_exp2_fast(__fmul_rn(__fadd_rn(v, -m), GB_LOG2E));
}

// gb_lse_add4 adds the four values v, whose largest (NaN ignored) is gm; -Inf members
// add nothing. A NaN or +Inf member spoils the sum, but such a row ends with status 1,
// whose record is NaN whatever the sum. It has no branch around it (the rescale is
// short enough to predicate), so that the compiler can interleave its exponentials with
// the scan's other work instead of fencing them into a basic block of their own. (One
// reference per warp, moved under a vote, would spare the warp merge its rescale; on an
// H200 it lost most of what the record's other changes of 2026-11-30 gained, 8 rows of
// 151936: 0.07 µs per step faster than before them, against 0.33 without it.)
__device__ __forceinline__ void gb_lse_add4(gb_lse& a, const float v[4], float gm) {
    if (gm > __fadd_rn(a.m, GB_LSE_SLACK)) {
        a.s = __fmul_rn(a.s, gb_exp_diff(a.m, gm)); // 0 · 0 while empty
        a.m = gm;
    }
    // The four terms are independent; summed in pairs, only one addition per group waits
    // on the running sum.
    const float e01 = __fadd_rn(gb_exp_diff(v[0], a.m), gb_exp_diff(v[1], a.m));
    const float e23 = __fadd_rn(gb_exp_diff(v[2], a.m), gb_exp_diff(v[3], a.m));
    a.s = __fadd_rn(a.s, __fadd_rn(e01, e23));
}

// gb_lse_merge adds the members of the pair (m, s) to a.
__device__ __forceinline__ void gb_lse_merge(gb_lse& a, float m, float s) {
    if (!(m > -gb_inf())) {
        return; // empty
    }
    if (m > a.m) {
        a.s = __fadd_rn(__fmul_rn(a.s, gb_exp_diff(a.m, m)), s);
        a.m = m;
    } else {
        a.s = __fadd_rn(a.s, __fmul_rn(s, gb_exp_diff(m, a.m)));
    }
}

// gb_lse_pack is the partials word of ABI.md: the max in the low half, the sum in the high.
__device__ __forceinline__ gb_u64 gb_lse_pack(const gb_lse& a) {
    return ((gb_u64)__float_as_uint(a.s) << 32) | __float_as_uint(a.m);
}

__device__ __forceinline__ void gb_lse_merge_packed(gb_lse& a, gb_u64 w) {
    gb_lse_merge(a, __uint_as_float((gb_u32)w), __uint_as_float((gb_u32)(w >> 32)));
}

// gb_lse_rescale sets a.m to the warp's largest reference and returns a.s rescaled to it
// (every lane gets the same m): one warp max and one exponential, after which merging is
// plain addition. A lane that holds that reference (or nothing, when the whole warp is
// empty) keeps its sum as it is.
__device__ __forceinline__ float gb_lse_rescale(gb_lse& a) {
    const float m = gb_warp_max_f32_all(a.m);
    const float s = a.m == m ? a.s : __fmul_rn(a.s, gb_exp_diff(a.m, m));
    a.m = m;
    return s;
}

__device__ __forceinline__ float gb_shfl_down_f32(float v, gb_u32 d) {
    return __uint_as_float(__shfl_down_sync(0xFFFFFFFFu, __float_as_uint(v), d));
}

__device__ __forceinline__ float gb_shfl_xor_f32(float v, gb_u32 d) {
    return __uint_as_float(__shfl_xor_sync(0xFFFFFFFFu, __float_as_uint(v), d));
}

// gb_warp_lse2 leaves in lane 0 the warp's merge of a (and of b when two is set): the
// chain is one max, one exponential and a tree of additions, not an exponential per
// level of the tree. Only lane 0's sums are exact (shfl_down returns a lane its own value
// past the warp's end, and lane 0's tree never reads there).
__device__ __forceinline__ void gb_warp_lse2(gb_lse& a, gb_lse& b, bool two) {
    float sa = gb_lse_rescale(a);
    float sb = two ? gb_lse_rescale(b) : 0.0f;
    // The two trees interleaved, level by level. (Fixed-point sums by two warp reductions
    // each, 26 bits below the largest term, measured slower on an H200: 13.40-13.64
    // against 13.22-13.39 µs per step, 8 rows of 151936 with log-probabilities.)
    for (int d = GB_WARP_SIZE / 2; d > 0; d >>= 1) {
        sa = __fadd_rn(sa, gb_shfl_down_f32(sa, d));
        if (two) {
            sb = __fadd_rn(sb, gb_shfl_down_f32(sb, d));
        }
    }
    a.s = sa;
    if (two) {
        b.s = sb;
    }
}

__device__ __forceinline__ gb_lse gb_lse_unpack(gb_u64 w) {
    gb_lse a;
    a.m = __uint_as_float((gb_u32)w);
    a.s = __uint_as_float((gb_u32)(w >> 32));
    return a;
}

// gb_block_lse leaves in thread 0 the block's merge of a (and of b when two is set; two
// must be the same for the whole block; a and b may be one variable when it is clear).
// s_pair holds 2 * GB_MAX_WARPS words. The warps' results meet in one round of shared
// memory, which warp 0 merges as a warp merges its lanes.
__device__ __forceinline__ void gb_block_lse(gb_lse& a, gb_lse& b, bool two, gb_u64* s_pair) {
    gb_warp_lse2(a, b, two);
    if (gb_lane() == 0u) {
        s_pair[2u * gb_warp()] = gb_lse_pack(a);
        if (two) {
            s_pair[2u * gb_warp() + 1u] = gb_lse_pack(b);
        }
    }
    __syncthreads();
    if (gb_warp() == 0u) {
        const bool have = gb_lane() < gb_num_warps();
        gb_lse e;
        gb_lse_init(e);
        a = have ? gb_lse_unpack(s_pair[2u * gb_lane()]) : e;
        if (two) {
            b = have ? gb_lse_unpack(s_pair[2u * gb_lane() + 1u]) : e;
        }
        gb_warp_lse2(a, b, two);
    }
    __syncthreads();
}

// gb_lse_logprob returns v - LSE for the set (m, s), and the LSE itself in lse. The
// difference is taken from m, fl(fl(v - m) - log s): subtracting the float32 LSE would
// cancel wherever |m| is large (a logit pushed near 2^29 by a frequency penalty, say),
// where fl(m + log s) rounds back to m and every log-probability would read 0 (m is
// within GB_LSE_SLACK of the set's maximum, so log s stays small). A set whose reference
// is not finite follows IEEE arithmetic on the LSE (ABI.md): -Inf for a set with no
// members, +Inf for one holding +Inf (a scaled logit may overflow; its sum is NaN by then).
__device__ __forceinline__ float gb_lse_logprob(float v, float m, float s, float& lse) {
    if (!(m > -gb_inf()) || m == gb_inf()) {
        lse = m > -gb_inf() ? m : -gb_inf();
        return __fadd_rn(v, -lse);
    }
    const float l = gb_log_fast(s);
    lse = __fadd_rn(m, l);
    return __fadd_rn(__fadd_rn(v, -m), -l);
}

// gb_win is what a block of gumbel_argmax reduces at the end of a draw: the winner's key,
// the OR of the row flags and, for the log-probability record (NL > 0), the log-sum-exps
// (NL = 1: proc only, the one set; NL = 2: both). The record's other inputs, the
// winner's raw logit x and the value v its processed log-probability is taken of
// (fl(x' * invT)), are its payload: the scan keeps them beside the thread's best key (two
// moves when the key improves, which is rare), and each warp merge hands them on from
// its winning lane with one ballot and two shuffles (gb_warp_win_xv). Reading the block
// winner's logit from memory once warp 0 knew the block's key put a load on every
// block's path to its arrival; on an H200 the payload took the step with
// log-probabilities from 9.18 to 8.89 µs at 1 row of 151936 float32 logits (12.93 to
// 12.91 at 8 rows), medians of ten rounds.
struct gb_win {
    gb_u64 key;
    gb_u32 flags;
    float x, v;
    gb_lse raw, proc;
};

// gb_proc is a row's logit processors (ABI.md, "Processed logits").
struct gb_proc {
    gb_u32 flags;         // the row's GB_RF_BIAS, GB_RF_MASK and GB_RF_PENALTIES bits
    const float* bias;    // the row's V biases
    const gb_u32* counts; // the row's V counts
    const gb_u32* mask;   // the row's ceil(V / 32) mask words
    float rep, freq, pres;
};

__device__ __forceinline__ gb_proc gb_make_proc(const gb_row_params& p, const float* bias, const gb_u32* counts,
                                                const gb_u32* mask, gb_u32 vocab) {
    gb_proc pc;
    pc.flags = p.flags & GB_RF_PROCESSORS;
    const gb_u64 r = p.row;
    // A buffer whose feature is off may be 8 bytes long: no pointer into it is formed.
    pc.bias = (pc.flags & GB_RF_BIAS) ? bias + r * vocab : bias;
    pc.counts = (pc.flags & GB_RF_PENALTIES) ? counts + r * vocab : counts;
    pc.mask = (pc.flags & GB_RF_MASK) ? mask + r * ((vocab + 31u) / 32u) : mask;
    pc.rep = p.repetition_penalty;
    pc.freq = p.frequency_penalty;
    pc.pres = p.presence_penalty;
    return pc;
}

// gb_unmasked is the processed logit of element i before the mask: bias, then penalties,
// each operation rounded on its own.
__device__ __forceinline__ float gb_unmasked(const gb_proc& pc, float x, gb_u32 i) {
    if (pc.flags & GB_RF_BIAS) {
        x = __fadd_rn(x, pc.bias[i]);
    }
    if (pc.flags & GB_RF_PENALTIES) {
        const gb_u32 c = pc.counts[i];
        if (c != 0u && pc.rep != 1.0f) {
            x = x > 0.0f ? __fdiv_rn(x, pc.rep) : __fmul_rn(x, pc.rep);
        }
        const gb_u32 out = c & GB_COUNT_MASK;
        if (out != 0u) {
            x = __fadd_rn(x, -__fmul_rn(pc.freq, (float)out));
            x = __fadd_rn(x, -pc.pres);
        }
    }
    return x;
}

// gb_allowed reports whether the mask lets element i through.
__device__ __forceinline__ bool gb_allowed(const gb_proc& pc, gb_u32 i) {
    return !(pc.flags & GB_RF_MASK) || ((pc.mask[i >> 5] >> (i & 31u)) & 1u) != 0u;
}

// gb_process1 is the processed logit x' of element i.
__device__ __forceinline__ float gb_process1(const gb_proc& pc, float x, gb_u32 i) {
    x = gb_unmasked(pc, x, i);
    return gb_allowed(pc, i) ? x : -gb_inf();
}

// gb_process_group writes the processed logits of the n elements g..g+3 (g a multiple of
// 4, so one mask word holds all four) to xp, -Inf past n, and returns their row flags:
// NaN or +Inf is taken before the mask, a finite logit after it (ABI.md).
__device__ __forceinline__ gb_u32 gb_process_group(const gb_proc& pc, gb_u32 g, gb_u32 n, const float x[4],
                                                   float xp[4]) {
    const gb_u32 mword = ((pc.flags & GB_RF_MASK) && n != 0u) ? pc.mask[g >> 5] : 0xFFFFFFFFu;
    gb_u32 f = 0u;
#pragma unroll
    for (gb_u32 j = 0; j < 4u; ++j) {
        float v = -gb_inf();
        if (j < n) {
            v = gb_unmasked(pc, x[j], g + j);
            const gb_u32 fj = gb_flags(v);
            if ((mword >> ((g + j) & 31u)) & 1u) {
                f |= fj;
            } else {
                f |= fj & GB_FLAG_NONFINITE;
                v = -gb_inf();
            }
        }
        xp[j] = v;
    }
    return f;
}

// gb_load_processed reads a group like gb_load_group and replaces it by its processed
// logits when the row has processors (pc.flags is the same for the whole block).
template <int KIND>
__device__ __forceinline__ gb_u32 gb_load_processed(const typename gb_io<KIND>::elem* row, gb_u32 g, gb_u32 end,
                                                    bool vec, const gb_proc& pc, float x[4]) {
    const gb_u32 n = gb_load_group<KIND>(row, g, end, vec, x);
    if (pc.flags != 0u) {
        gb_process_group(pc, g, n, x, x);
    }
    return n;
}

// gb_step_plus is a row's step plus z, mod 2^64.
__device__ __forceinline__ void gb_step_plus(const gb_row_params& p, gb_u32 z, gb_u32& lo, gb_u32& hi) {
    const gb_u64 s = (((gb_u64)p.step_hi << 32) | p.step_lo) + z;
    lo = (gb_u32)s;
    hi = (gb_u32)(s >> 32);
}

// gb_write_record stores a slot's log-probability record (ABI.md): NaN unless ok.
__device__ __forceinline__ void gb_write_record(float* logprobs, gb_u64 o, bool ok, float raw_x, float lse_raw,
                                                float proc_v, float lse_proc) {
    float* rec = logprobs + 4u * o;
    if (!ok) {
        const float nan = __uint_as_float(0x7FC00000u);
        rec[0] = rec[1] = rec[2] = rec[3] = nan;
        return;
    }
    rec[0] = __fadd_rn(raw_x, -lse_raw);
    rec[1] = __fadd_rn(proc_v, -lse_proc);
    rec[2] = lse_raw;
    rec[3] = lse_proc;
}

// gb_row_done is the end-of-draw work of thread 0 of the block that finished draw z of
// launch row y, after that draw's outputs are written: the last of the row's D draws to
// get here does the row's RECORD and ADVANCE (ABI.md, "Draws"). Every block of every draw
// has read the row's step and counts before it counted its arrival, so nothing races.
__device__ __forceinline__ void gb_row_done(gb_row_params* params, const gb_row_params& p, gb_u32 y,
                                            gb_u32* counters, const gb_i32* tokens, const gb_i32* status,
                                            gb_u32* counts, gb_u32 vocab) {
    if (!(p.flags & (GB_RF_ADVANCE | GB_RF_RECORD))) {
        return;
    }
    const gb_u32 D = gridDim.z;
    if (D > 1u) {
        __threadfence(); // this draw's outputs before its arrival
        gb_u32* c = counters + 2u * (gb_u64)gridDim.y * D + y;
        if (atomicAdd(c, 1u) != D - 1u) {
            return;
        }
        atomicExch(c, 0u);
        __threadfence(); // every draw's outputs before the reads below
    }
    if (p.flags & GB_RF_RECORD) {
        const gb_u64 first = (gb_u64)p.row * D;
        gb_u32* row_counts = counts + (gb_u64)p.row * vocab;
        for (gb_u32 z = 0; z < D; ++z) {
            if (((const volatile gb_i32*)status)[first + z] != GB_STATUS_OK) {
                continue;
            }
            const gb_i32 tok = ((const volatile gb_i32*)tokens)[first + z];
            if (tok < 0 || (gb_u32)tok >= vocab) {
                continue; // cannot happen for status 0
            }
            const gb_u32 c = row_counts[tok];
            if ((c & GB_COUNT_MASK) != GB_COUNT_MASK) {
                row_counts[tok] = c + 1u; // keeps bit 31, the prompt mark
            }
        }
    }
    if (p.flags & GB_RF_ADVANCE) {
        gb_u32 lo, hi;
        gb_step_plus(p, D, lo, hi);
        params[y].step_lo = lo;
        params[y].step_hi = hi;
    }
}

// gb_bad_flags reports reserved flag bits (ABI.md: bits 9-31 are zero); such a row gets
// status 3.
__device__ __forceinline__ bool gb_bad_flags(gb_u32 flags) { return (flags >> 9) != 0u; }

// ---------------------------------------------------------------------------------------
// gumbel_argmax (ABI.md): greedy and Gumbel-max rows, S >= 1 blocks per row, one launch.

// gb_group_flags returns the row flags of a group of n elements. A finite sum of four
// elements proves all four finite, which settles the common case in three additions.
__device__ __forceinline__ gb_u32 gb_group_flags(const float x[4], gb_u32 n) {
    if (n == 4u && fabsf(__fadd_rn(__fadd_rn(x[0], x[1]), __fadd_rn(x[2], x[3]))) < gb_inf()) {
        return GB_FLAG_FINITE;
    }
    gb_u32 f = 0u;
#pragma unroll
    for (gb_u32 j = 0; j < 4u; ++j) {
        if (j < n) {
            f |= gb_flags(x[j]);
        }
    }
    return f;
}

// gb_max4 is the largest of four values (NaN ignored; -Inf when all are -Inf or NaN).
__device__ __forceinline__ float gb_max4(const float v[4]) {
    return fmaxf(fmaxf(v[0], v[1]), fmaxf(v[2], v[3]));
}

// GB_GROUPS is the groups of four elements a thread takes per trip of the scan.
#define GB_GROUPS 1

// gb_load_groups reads a thread's G groups g, g + stride, ... (see gb_load_group).
template <int KIND, int G>
__device__ __forceinline__ void gb_load_groups(const typename gb_io<KIND>::elem* row, gb_u32 g,
                                               gb_u32 stride, gb_u32 end, bool vec, float x[G][4],
                                               gb_u32 n[G]) {
#pragma unroll
    for (int i = 0; i < G; ++i) {
        n[i] = gb_load_group<KIND>(row, g + (gb_u32)i * stride, end, vec, x[i]);
    }
}

// gb_take_groups moves the prefetched groups of the next trip into the current ones.
template <int G>
__device__ __forceinline__ void gb_take_groups(float cur[G][4], gb_u32 n[G], const float nxt[G][4], const gb_u32 nn[G]) {
#pragma unroll
    for (int i = 0; i < G; ++i) {
        n[i] = nn[i];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            cur[i][k] = nxt[i][k];
        }
    }
}

// gb_prepare processes a thread's groups of one trip: the row flags, the values the scan
// ranks (xp: the processed logits with PROC, else the logits) and, with NL = 2, the raw
// log-sum-exp over the logits themselves, whose groups' largest logits it leaves in rmax
// (NL = 1: the scan's one log-sum-exp covers both; rmax is left unset).
template <bool PROC, int NL, int G>
__device__ __forceinline__ void gb_prepare(const gb_proc& pc, gb_u32 g, gb_u32 stride, const float cur[G][4],
                                           const gb_u32 n[G], float xp[G][4], gb_u32& flags, gb_lse& raw,
                                           float rmax[G]) {
#pragma unroll
    for (int i = 0; i < G; ++i) {
        if (PROC) {
            flags |= gb_process_group(pc, g + (gb_u32)i * stride, n[i], cur[i], xp[i]);
        } else {
            flags |= gb_group_flags(cur[i], n[i]);
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                xp[i][k] = cur[i][k];
            }
        }
        if (NL == 2) {
            rmax[i] = gb_max4(cur[i]);
            gb_lse_add4(raw, cur[i], rmax[i]);
        }
    }
}

// gb_scan_greedy folds the chunk [start, end) into the thread's best key: score = x'
// (the logit itself without PROC). A thread meets its groups in index order (the groups
// of one trip too), so a group only matters when its largest value beats the best so far
// strictly, and then its first element of that value wins (-0 equals +0, as their order
// keys do). -Inf never becomes a best: a row whose finite logits are all missing ends
// with status 2 (NaN and +Inf: status 1) whatever the key. NL log-sum-exps run beside
// it: proc over x' (the greedy record's temperature-1 distribution) and, with NL = 2,
// raw over the logits; with NL > 0, w.x and w.v follow the best key (see gb_win).
template <int KIND, bool PROC, int NL>
__device__ __forceinline__ void gb_scan_greedy(const typename gb_io<KIND>::elem* row, gb_u32 start,
                                               gb_u32 end, bool vec, const gb_proc& pc, gb_win& w) {
    gb_u64& tkey = w.key;
    gb_u32& flags = w.flags;
    gb_lse& raw = w.raw;
    gb_lse& proc = w.proc;
    const gb_u32 stride = 4u * blockDim.x;
    const gb_u32 trip = GB_GROUPS * stride;
    float tbest = -gb_inf();
    gb_u32 g = start + 4u * threadIdx.x;
    float cur[GB_GROUPS][4];
    gb_u32 n[GB_GROUPS];
    gb_load_groups<KIND, GB_GROUPS>(row, g, stride, end, vec, cur, n);
    for (; g < end; g += trip) {
        float nxt[GB_GROUPS][4];
        gb_u32 nn[GB_GROUPS];
        gb_load_groups<KIND, GB_GROUPS>(row, g + trip, stride, end, vec, nxt, nn);
        float xp[GB_GROUPS][4];
        float rmax[GB_GROUPS];
        gb_prepare<PROC, NL, GB_GROUPS>(pc, g, stride, cur, n, xp, flags, raw, rmax);
#pragma unroll
        for (int i = 0; i < GB_GROUPS; ++i) {
            const float mx = gb_max4(xp[i]); // elements past end read as -Inf
            if (NL >= 1) {
                gb_lse_add4(proc, xp[i], mx);
            }
            if (mx > tbest) {
                gb_u32 j = 3u;
                j = xp[i][2] == mx ? 2u : j;
                j = xp[i][1] == mx ? 1u : j;
                j = xp[i][0] == mx ? 0u : j;
                tbest = mx;
                tkey = gb_pack(mx, g + (gb_u32)i * stride + j);
                if (NL != 0) {
                    w.x = j == 0u ? cur[i][0] : j == 1u ? cur[i][1] : j == 2u ? cur[i][2] : cur[i][3];
                    w.v = mx;
                }
            }
        }
        gb_take_groups<GB_GROUPS>(cur, n, nxt, nn);
    }
}

// gb_cheap_bound is gb_gumbel_bound without its leading-zero count for the words nearly
// every element has, in steps that each hold at least the largest gb_gumbel_bound of
// their range: w >= 2^31 (0.37), w >= 2^30 (2 ln 2 + 1e-3), w >= 2^28 (4 ln 2 + 1e-3),
// w >= 2^24 (8 ln 2 + 1e-3); only the rare smaller words pay for the exact bound. The
// steps between 2^24 and 2^31 matter once the bound has risen past the body of the row:
// a single step there (8 ln 2 for all of them) leaves about 1% of the elements needing
// their logarithms, and in a warp of 32 lanes that is a branch taken most of the time.
__device__ __forceinline__ float gb_cheap_bound(gb_u32 w) {
    if (w >= 0x80000000u) {
        return 0.37f;
    }
    if (w >= 0x40000000u) {
        return 1.3873f; // 2 ln 2 = 1.3863
    }
    if (w >= 0x10000000u) {
        return 2.7736f; // 4 ln 2 = 2.7726
    }
    if (w >= GB_TAIL_THRESHOLD) {
        return 5.5462f; // 8 ln 2 = 5.5452
    }
    return gb_gumbel_bound(w);
}

// gb_philox_groups runs the Philox blocks of G groups (counters c0[i], the rest shared)
// round by round together: the chains are independent, so their multiplies overlap
// instead of each waiting on the one before.
template <int G>
__device__ __forceinline__ void gb_philox_groups(const gb_u32 c0[G], gb_u32 c1, gb_u32 c2, gb_u32 c3,
                                                 gb_u32 k0, gb_u32 k1, gb_u32 out[G][4]) {
    gb_u32 s[G][4];
#pragma unroll
    for (int i = 0; i < G; ++i) {
        s[i][0] = c0[i];
        s[i][1] = c1;
        s[i][2] = c2;
        s[i][3] = c3;
    }
#pragma unroll
    for (int r = 0; r < 10; ++r) {
        if (r > 0) {
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
#pragma unroll
        for (int i = 0; i < G; ++i) {
            gb_u32 hi0 = __umulhi(0xD2511F53u, s[i][0]);
            gb_u32 lo0 = 0xD2511F53u * s[i][0];
            gb_u32 hi1 = __umulhi(0xCD9E8D57u, s[i][2]);
            gb_u32 lo1 = 0xCD9E8D57u * s[i][2];
            s[i][0] = hi1 ^ s[i][1] ^ k0;
            s[i][1] = lo1;
            s[i][2] = hi0 ^ s[i][3] ^ k1;
            s[i][3] = lo0;
        }
    }
#pragma unroll
    for (int i = 0; i < G; ++i) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            out[i][j] = s[i][j];
        }
    }
}

// gb_share_bound returns the larger of a lane's bound and the block's shared one, and
// raises the shared one (lane 0, only when it grows). Lanes may read different shared
// values as other warps raise it: each is a lower bound of the row's winning score
// whichever they read, and nothing collective depends on it.
__device__ __forceinline__ float gb_share_bound(float wlower, gb_u32* s_bound) {
    const gb_u32 k = gb_orderkey(wlower);
    const gb_u32 seen = *(volatile gb_u32*)s_bound;
    if (k > seen) {
        if (gb_lane() == 0u) {
            atomicMax(s_bound, k);
        }
        return wlower;
    }
    return gb_orderkey_inverse(seen);
}

// gb_scan_gumbel folds the chunk [start, end) into the thread's best key with Gumbel
// noise. Each trip first agrees across the warp (and the block) on
// a lower bound of the row's winning score: the best score a lane has reached, or
// fl(x·invT + MinGumbel) of any element seen, which that element's score cannot fall
// below. A group of four whose fl(max x·invT + MaxGumbel) is below it skips Philox; an
// element whose fl(x·invT + bound(w)) is below it skips its logarithms. Neither changes
// the result: a skipped score is provably below the winner's. The trip count is the same
// for every lane of a warp, as the warp reduction requires.
//
// With PROC every bound and score is of the processed logits x'. NL log-sum-exps run
// beside it (every element counts, skipped or not): proc over fl(x'·invT) and, with
// NL = 2, raw over the logits; NL = 1 only when the two are the same (no processors,
// invT = 1). With NL > 0, win.x and win.v follow the best key (see gb_win).
template <int KIND, bool PROC, int NL>
__device__ __forceinline__ void gb_scan_gumbel(const typename gb_io<KIND>::elem* row, gb_u32 start,
                                               gb_u32 end, bool vec, float invT, gb_u32 step_lo, gb_u32 step_hi,
                                               const gb_row_params& p, const gb_proc& pc, gb_u32* s_bound,
                                               gb_win& win) {
    gb_u64& tkey = win.key; // (w is the Philox words below)
    gb_u32& flags = win.flags;
    gb_lse& raw = win.raw;
    gb_lse& proc = win.proc;
    const gb_u32 stride = 4u * blockDim.x;
    const gb_u32 trip = GB_GROUPS * stride;
    float tbest = -gb_inf(); // the thread's best score: the score of tkey
    gb_u32 g = start + 4u * threadIdx.x;
    float cur[GB_GROUPS][4];
    gb_u32 n[GB_GROUPS];
    gb_load_groups<KIND, GB_GROUPS>(row, g, stride, end, vec, cur, n);
    // One trip of the thread's groups g, g + stride, ... (then g moves on by a trip).
    auto run_trip = [&]() {
        float nxt[GB_GROUPS][4];
        gb_u32 nn[GB_GROUPS];
        gb_load_groups<KIND, GB_GROUPS>(row, g + trip, stride, end, vec, nxt, nn);
        float xs[GB_GROUPS][4]; // -Inf for -Inf logits and for elements past end
        float mx[GB_GROUPS];
        float lower = tbest;
        float rmax[GB_GROUPS]; // with NL = 2, the groups' largest logits
        gb_prepare<PROC, NL, GB_GROUPS>(pc, g, stride, cur, n, xs, flags, raw, rmax);
#pragma unroll
        for (int i = 0; i < GB_GROUPS; ++i) {
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                xs[i][j] = __fmul_rn(xs[i][j], invT);
            }
            // Without processors, the raw log-sum-exp has the group's largest logit already,
            // and fl(max x·invT) = max fl(x·invT) (invT > 0: multiplying and rounding are
            // monotone, NaN is ignored by both maxima): one multiplication for three maxima.
            mx[i] = (!PROC && NL == 2) ? __fmul_rn(rmax[i], invT) : gb_max4(xs[i]);
            if (NL >= 1) {
                gb_lse_add4(proc, xs[i], mx[i]);
            }
            lower = fmaxf(lower, __fadd_rn(mx[i], GB_MIN_GUMBEL));
        }
        float wlower = gb_warp_max_f32_all(lower);
        wlower = gb_share_bound(wlower, s_bound);
        bool run[GB_GROUPS];
        bool any_run = false;
#pragma unroll
        for (int i = 0; i < GB_GROUPS; ++i) {
            run[i] = n[i] != 0u && !(__fadd_rn(mx[i], GB_MAX_GUMBEL) < wlower);
            any_run = any_run || run[i];
        }
        if (any_run) {
            gb_u32 c0[GB_GROUPS];
#pragma unroll
            for (int i = 0; i < GB_GROUPS; ++i) {
                c0[i] = (g + (gb_u32)i * stride) >> 2;
            }
            gb_u32 w[GB_GROUPS][4];
            gb_philox_groups<GB_GROUPS>(c0, step_lo, step_hi, GB_PURPOSE_GUMBEL, p.seed_lo, p.seed_hi, w);
            bool need[GB_GROUPS][4];
            bool any_tail = false;
#pragma unroll
            for (int i = 0; i < GB_GROUPS; ++i) {
#pragma unroll
                for (gb_u32 j = 0; j < 4u; ++j) {
                    // A -Inf logit scores -Inf: it is computed only while nothing better
                    // is known, and then its noise cannot change that.
                    need[i][j] = run[i] && j < n[i] && !(__fadd_rn(xs[i][j], gb_cheap_bound(w[i][j])) < wlower);
                    any_tail = any_tail || (need[i][j] && w[i][j] < GB_TAIL_THRESHOLD);
                }
            }
            gb_u32 t[GB_GROUPS][4];
            if (any_tail) {
                gb_philox_groups<GB_GROUPS>(c0, step_lo, step_hi, GB_PURPOSE_GUMBEL_TAIL, p.seed_lo, p.seed_hi,
                                            t);
            } else {
#pragma unroll
                for (int i = 0; i < GB_GROUPS; ++i) {
                    t[i][0] = t[i][1] = t[i][2] = t[i][3] = 0u;
                }
            }
#pragma unroll
            for (int i = 0; i < GB_GROUPS; ++i) {
#pragma unroll
                for (gb_u32 j = 0; j < 4u; ++j) {
                    if (need[i][j]) {
                        float s = __fadd_rn(xs[i][j], gb_gumbel(w[i][j], t[i][j]));
                        const gb_u64 key = gb_pack(s, g + (gb_u32)i * stride + j);
                        if (NL != 0 && key > tkey) {
                            win.x = cur[i][j];
                            win.v = xs[i][j];
                        }
                        tkey = gb_max_u64(tkey, key);
                        tbest = fmaxf(tbest, s);
                    }
                }
            }
        }
        gb_take_groups<GB_GROUPS>(cur, n, nxt, nn);
        g += trip;
    };
    // The trips in which every warp holds elements run in a loop that is uniform for the
    // block. After them, only the warps holding elements run the last trip: the trip's
    // collectives are warp-wide, never block-wide, and an empty trip changes nothing. At
    // 8 rows of 151936 (2374 groups per block of 1024 threads), 22 of the 32 warps would
    // otherwise run a third trip of empty groups, every log-sum-exp instruction included,
    // on the issue slots that the 10 warps holding elements need (H200, float32: 11.97 to
    // 11.79 µs per step, 13.29 to 12.96 with log-probabilities). A loop on the warp's own
    // first group, which the compiler cannot see is uniform, cost more than it saved: 2%
    // more time per step at 64 rows, where a block makes 19 trips.
    const gb_u32 last_warp = 4u * (blockDim.x - GB_WARP_SIZE); // the last warp's lane 0, from g0
    gb_u32 g0 = start;
    for (; g0 < end && end - g0 > last_warp; g0 += trip) {
        run_trip();
    }
    if (g - 4u * gb_lane() < end) { // this warp's lane 0 holds an element of the last trip
        run_trip();
    }
}

// gb_warp_win leaves in lane 0 the warp's merge of w: the key's maximum and the flags' OR
// (to every lane), then the NL log-sum-exps (gb_warp_lse2: proc, and raw with NL = 2).
// Every warp of a 1024-thread block runs it at once, so what counts is the
// multiprocessor's shuffle throughput (one warp-wide shuffle per clock): on sm_80 and
// later the key, the flags and the maxima take one warp reduction each (two for the
// 64-bit key) instead of a five-level tree of shuffles.
template <int NL>
__device__ __forceinline__ void gb_warp_win(gb_win& w) {
    w.key = gb_warp_max_u64_all(w.key);
    w.flags = gb_warp_or_all(w.flags);
    if (NL != 0) {
        gb_warp_lse2(w.proc, w.raw, NL == 2);
    }
}

// gb_warp_win_xv is gb_warp_win that also hands lane 0 the payload (x, v) of a lane whose
// key won: a ballot and two shuffles once the key is known, not two per level.
template <int NL>
__device__ __forceinline__ void gb_warp_win_xv(gb_win& w) {
    const gb_u64 own = w.key;
    gb_warp_win<NL>(w); // every lane gets the warp's key
    const int src = gb_first_lane(own == w.key);
    w.x = gb_shfl_f32(w.x, src);
    w.v = gb_shfl_f32(w.v, src);
}

// gb_block_win leaves in thread 0 the block's merge of w: the warps' results meet in one
// round of shared memory and one barrier (keys, flags, log-sum-exp pairs and, with XV,
// the winner's payload (x, v)), and warp 0 merges them as a warp merges its lanes (lane l
// takes warp l's slots, an empty merge past the block's warps). Warp 0 reads the shared
// arrays after the barrier: a caller passes another barrier before it writes them again.
template <int NL, bool XV>
__device__ __forceinline__ void gb_block_win(gb_win& w, gb_u64* s_key, gb_u32* s_flags, gb_u64* s_pair,
                                             gb_u64* s_xv) {
    if (XV) {
        gb_warp_win_xv<NL>(w);
    } else {
        gb_warp_win<NL>(w);
    }
    const gb_u32 wp = gb_warp();
    if (gb_lane() == 0u) {
        s_key[wp] = w.key;
        s_flags[wp] = w.flags;
        if (NL >= 1) {
            s_pair[2u * wp + 1u] = gb_lse_pack(w.proc);
        }
        if (NL == 2) {
            s_pair[2u * wp] = gb_lse_pack(w.raw);
        }
        if (XV) {
            s_xv[wp] = ((gb_u64)__float_as_uint(w.v) << 32) | __float_as_uint(w.x);
        }
    }
    __syncthreads();
    if (wp == 0u) {
        const gb_u32 l = gb_lane();
        const bool have = l < gb_num_warps();
        w.key = have ? s_key[l] : 0ull;
        w.flags = have ? s_flags[l] : 0u;
        if (NL >= 1) {
            gb_lse_init(w.proc);
            if (have) {
                w.proc = gb_lse_unpack(s_pair[2u * l + 1u]);
            }
        }
        if (NL == 2) {
            gb_lse_init(w.raw);
            if (have) {
                w.raw = gb_lse_unpack(s_pair[2u * l]);
            }
        }
        if (XV) {
            const gb_u64 xv = have ? s_xv[l] : 0ull;
            w.x = __uint_as_float((gb_u32)xv);
            w.v = __uint_as_float((gb_u32)(xv >> 32));
            gb_warp_win_xv<NL>(w);
        } else {
            gb_warp_win<NL>(w);
        }
    }
}

// gb_write_record_sets stores slot o's log-probability record (ABI.md) from the token's
// raw logit x and value v and the two sets, each log-probability taken from its set's
// reference (gb_lse_logprob). nl = 1: proc is raw too, and x = v.
__device__ __forceinline__ void gb_write_record_sets(float* logprobs, gb_u64 o, bool ok, int nl, float x, float v,
                                                     const gb_lse& raw, const gb_lse& proc) {
    float* rec = logprobs + 4u * o;
    if (!ok) {
        const float nan = __uint_as_float(0x7FC00000u);
        rec[0] = rec[1] = rec[2] = rec[3] = nan;
        return;
    }
    float lse_proc;
    const float lp_proc = gb_lse_logprob(v, proc.m, proc.s, lse_proc);
    float lse_raw = lse_proc;
    float lp_raw = lp_proc;
    if (nl != 1) {
        lp_raw = gb_lse_logprob(x, raw.m, raw.s, lse_raw);
    }
    rec[0] = lp_raw;
    rec[1] = lp_proc;
    rec[2] = lse_raw;
    rec[3] = lse_proc;
}

// gb_finish_draw is thread 0's work for a draw whose merged gb_win is known: the token
// and status of slot o, the log-probability record (LOGPROBS) and the end-of-draws work.
__device__ __forceinline__ void gb_finish_draw(gb_row_params* params, const gb_row_params& p, gb_u32 y, gb_u64 o,
                                               const gb_win& w, int nl, gb_i32* tokens, gb_i32* status,
                                               float* logprobs, gb_u32* counters, gb_u32* counts, gb_u32 vocab) {
    const gb_i32 st = gb_finish(tokens, status, o, w.key, w.flags);
    if (p.flags & GB_RF_LOGPROBS) {
        gb_write_record_sets(logprobs, o, st == GB_STATUS_OK, nl, w.x, w.v, w.raw, w.proc);
    }
    gb_row_done(params, p, y, counters, tokens, status, counts, vocab);
}

// gb_load_published reads a word that another block stored before its arrival was
// counted, after this block's own fence. On CUDA that fence invalidates the
// multiprocessor's L1, and ld.global.cg reads at L2, where the fenced stores are; a
// volatile read would be a system-scope strong load, slower on the draw's critical path.
// HIP (whose fence invalidates L1 too) and the emulation keep the volatile read.
__device__ __forceinline__ gb_u64 gb_load_published(const gb_u64* p) {
#if defined(__CUDACC__) && !defined(__HIP__) && !defined(__HIPCC__)
    return __ldcg(p);
#else
    return *(const volatile gb_u64*)p;
#endif
}

// GB_LSE_EMPTY_WORD is gb_lse_pack of the empty set (gb_lse_init: -FLT_MAX, 0).
#define GB_LSE_EMPTY_WORD 0x00000000FF7FFFFFull

// gb_finish_warp_record is the finishing block's work for a draw with a record (NL > 0)
// and S <= warp size, run by warp 0 alone once the draw's flags are in thread 0: the
// token from the partials' keys, and the record from their log-sum-exp pairs. A lone
// warp issues in order, so every dependent step after the last arrival counts in full:
// each pair set is merged within a few lanes, not through a warp max and a five-level
// tree of shuffles. Lanes of even number merge the raw pairs (partials words 2i), odd
// ones the processed pairs (2i + 1); with per lanes to a set (the fewest of 1, 2, 4 and,
// for HIP's 64-lane warps, 8 that leave a lane at most 8 pairs), lane l takes pairs
// (l >> 1) mod per + j * per, all loaded at once with the keys and payloads, and the
// set's lanes then meet in log2(per) butterfly steps. Lane 0 writes the raw half of the
// record (words 0 and 2), lane 1 the processed half (1 and 3). Before this, one lane per
// partial merged one pair of each set and warp 0 climbed two such trees: the H200's
// trace (V = 151936, 8 rows, S = 16) put about 1100 cycles of the record's cost in that
// merge.
template <int NL>
__device__ __forceinline__ void gb_finish_warp_record(gb_row_params* params, const gb_row_params& p, gb_u32 y,
                                                      gb_u64 o, gb_u32 flags, const gb_u64* part,
                                                      const gb_u64* pair, const gb_u64* xv, gb_u32 nblocks,
                                                      gb_i32* tokens, gb_i32* status, float* logprobs,
                                                      gb_u32* counters, gb_u32* counts, gb_u32 vocab) {
    const gb_u32 l = gb_lane();
    const gb_u32 per = nblocks <= 8u ? 1u : nblocks <= 16u ? 2u : nblocks <= 32u ? 4u : 8u;
    const gb_u32 set = l & 1u;
    const gb_u32 first = (l >> 1) & (per - 1u);
    // Every load is issued before any waits on one.
    gb_u64 k = 0ull, u = 0ull;
    if (l < nblocks) {
        k = gb_load_published(part + l);
        u = gb_load_published(xv + l);
    }
    float m[8], sum[8];
#pragma unroll
    for (gb_u32 j = 0; j < 8u; ++j) {
        const gb_u32 i = first + j * per;
        const gb_u64 wd = i < nblocks ? gb_load_published(pair + 2u * i + set) : GB_LSE_EMPTY_WORD;
        m[j] = __uint_as_float((gb_u32)wd);
        sum[j] = __uint_as_float((gb_u32)(wd >> 32));
    }
    // The token's chain (two warp reductions, a ballot, two shuffles) comes first, so
    // that the log-sum-exps' arithmetic below issues while its results are on their way.
    const gb_u64 key = gb_warp_max_u64_all(k);
    const int src = gb_first_lane(k == key);
    const float x = gb_shfl_f32(__uint_as_float((gb_u32)u), src);
    const float v = gb_shfl_f32(__uint_as_float((gb_u32)(u >> 32)), src);
    // The lane's pairs: their largest reference (NaN ignored) and the sum rescaled to it,
    // in trees. Empty pairs add 0 (2^-Inf, or 2^0 * 0 when every pair is empty); a NaN or
    // +Inf reference spoils the sum, but its row ends with status 1.
    float top = fmaxf(fmaxf(fmaxf(m[0], m[1]), fmaxf(m[2], m[3])), fmaxf(fmaxf(m[4], m[5]), fmaxf(m[6], m[7])));
    float e[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        e[j] = __fmul_rn(sum[j], gb_exp_diff(m[j], top));
    }
    float total = __fadd_rn(__fadd_rn(__fadd_rn(e[0], e[1]), __fadd_rn(e[2], e[3])),
                            __fadd_rn(__fadd_rn(e[4], e[5]), __fadd_rn(e[6], e[7])));
    // The set's lanes meet: butterfly steps 2, 4 and (64-lane warps only) 8, each kept
    // only where per reaches it (selects, not branches, so that the steps schedule with
    // the token's chain).
#pragma unroll
    for (gb_u32 d = 2u; d <= 8u; d <<= 1) {
        if (d == 8u && per <= 4u) {
            break; // S > 32: a 64-lane warp only
        }
        const float om = gb_shfl_xor_f32(top, d), os = gb_shfl_xor_f32(total, d);
        const float r = fmaxf(top, om);
        const float t = __fadd_rn(__fmul_rn(total, gb_exp_diff(top, r)), __fmul_rn(os, gb_exp_diff(om, r)));
        const bool step = d < 2u * per;
        total = step ? t : total;
        top = step ? r : top;
    }
    // Thread 0's atomic brought the flags; shuffled only now, so that the wait for them
    // comes last.
    flags = __shfl_sync(0xFFFFFFFFu, flags, 0);
    if (l < 2u) {
        // The record's half of this lane's set, NaN unless the draw ends with status 0
        // (as gb_write_record_sets).
        const bool ok = gb_flags_status(flags) == GB_STATUS_OK;
        const float nan = __uint_as_float(0x7FC00000u);
        float lse = nan, lp = nan;
        if (ok) {
            lp = gb_lse_logprob(set != 0u ? v : x, top, total, lse);
        }
        float* rec = logprobs + 4u * o;
        rec[l] = lp;
        rec[2u + l] = lse;
    }
    if (l == 0u) {
        gb_finish(tokens, status, o, key, flags);
        gb_row_done(params, p, y, counters, tokens, status, counts, vocab);
    }
}

// gb_argmax_end is a draw's work after the scan (NL log-sum-exps): the block's merge
// (with a record, the winner's payload rides along, see gb_win); with S = 1 thread 0
// finishes the draw, otherwise the block publishes its partials and the last block of the
// draw merges them all and finishes it. What follows the last arrival is the draw's
// critical path, so nothing there waits on a load that could be made earlier: each block
// publishes its winner's logit and value with its partials, the last block takes the row
// flags and resets the counters before merging, so that those atomics' round trip
// overlaps the merge, and when every partial is in warp 0 (S <= warp size: every batch of
// 5 rows or more on 132 SMs) warp 0 merges them alone, without the shared-memory round
// and its barrier (with a record, gb_finish_warp_record).
template <int NL>
__device__ __forceinline__ void gb_argmax_end(gb_row_params* params, const gb_row_params& p, gb_u32 y, gb_u32 z,
                                              gb_u64 o, gb_win& w, gb_i32* tokens, gb_i32* status,
                                              gb_u64* partials, gb_u32* counters, float* logprobs, gb_u32* counts,
                                              gb_u32 vocab, gb_u64* s_key, gb_u32* s_flags, gb_u64* s_pair,
                                              gb_u64* s_xv, gb_u32* s_last) {
    const gb_u32 nblocks = gridDim.x;
    gb_block_win<NL, NL != 0>(w, s_key, s_flags, s_pair, s_xv);
    if (nblocks == 1u) {
        if (threadIdx.x == 0u) {
            gb_finish_draw(params, p, y, o, w, NL, tokens, status, logprobs, counters, counts, vocab);
        }
        return;
    }

    // Split phase: publish the partials, then count arrivals; the last block reduces.
    const gb_u64 draw_row = (gb_u64)z * gridDim.y + y; // this draw's row of the scratch
    gb_u64* part = partials + draw_row * nblocks;
    const gb_u64 draws_blocks = (gb_u64)gridDim.y * gridDim.z * nblocks;
    gb_u64* pair = partials + draws_blocks + 2u * draw_row * nblocks;
    gb_u64* xv = partials + 3u * draws_blocks + draw_row * nblocks;
    gb_u32* cnt = counters + 2u * draw_row;
    if (threadIdx.x == 0u) {
        part[blockIdx.x] = w.key;
        if (NL != 0) {
            pair[2u * blockIdx.x] = gb_lse_pack(NL == 1 ? w.proc : w.raw);
            pair[2u * blockIdx.x + 1u] = gb_lse_pack(w.proc);
            xv[blockIdx.x] = ((gb_u64)__float_as_uint(w.v) << 32) | __float_as_uint(w.x);
        }
        if (w.flags != 0u) {
            atomicOr(&cnt[1], w.flags);
        }
        __threadfence();
        gb_u32 prev = atomicAdd(&cnt[0], 1u);
        *s_last = prev == nblocks - 1u ? 1u : 0u;
    }
    __syncthreads();
    if (*s_last == 0u) {
        return;
    }
    __threadfence();
    // Every block ORed its flags in before it arrived.
    gb_u32 flags = 0u;
    if (threadIdx.x == 0u) {
        flags = atomicExch(&cnt[1], 0u);
        atomicExch(&cnt[0], 0u);
    }
    if (NL != 0 && nblocks <= (gb_u32)GB_WARP_SIZE) {
        if (gb_warp() == 0u) {
            gb_finish_warp_record<NL>(params, p, y, o, flags, part, pair, xv, nblocks, tokens, status, logprobs,
                                      counters, counts, vocab);
        }
        return;
    }
    w.key = 0ull;
    w.flags = 0u;
    w.x = w.v = 0.0f;
    gb_lse_init(w.raw);
    gb_lse_init(w.proc);
    for (gb_u32 i = threadIdx.x; i < nblocks; i += blockDim.x) {
        const gb_u64 k = gb_load_published(part + i);
        if (NL != 0) {
            const gb_u64 r = gb_load_published(pair + 2u * i), q = gb_load_published(pair + 2u * i + 1u);
            const gb_u64 u = gb_load_published(xv + i);
            if (i == threadIdx.x) { // a thread's first partial: nothing to merge it with
                w.raw = gb_lse_unpack(r);
                w.proc = gb_lse_unpack(q);
            } else {
                if (NL == 2) {
                    gb_lse_merge_packed(w.raw, r);
                }
                gb_lse_merge_packed(w.proc, q);
            }
            if (k > w.key) {
                w.x = __uint_as_float((gb_u32)u);
                w.v = __uint_as_float((gb_u32)(u >> 32));
            }
        }
        w.key = gb_max_u64(w.key, k);
    }
    if (nblocks <= (gb_u32)GB_WARP_SIZE) {
        if (gb_warp() != 0u) {
            return;
        }
        if (NL != 0) {
            gb_warp_win_xv<NL>(w);
        } else {
            gb_warp_win<NL>(w);
        }
    } else {
        gb_block_win<NL, NL != 0>(w, s_key, s_flags, s_pair, s_xv);
    }
    if (threadIdx.x == 0u) {
        w.flags = flags;
        gb_finish_draw(params, p, y, o, w, NL, tokens, status, logprobs, counters, counts, vocab);
    }
}

template <int KIND>
__device__ __forceinline__ void gb_gumbel_argmax(const typename gb_io<KIND>::elem* __restrict__ logits,
                                                 gb_row_params* params, gb_i32* tokens, gb_i32* status,
                                                 gb_u64* partials, gb_u32* counters, gb_u64 row_stride,
                                                 gb_u32 vocab, float* logprobs, const float* bias, gb_u32* counts,
                                                 const gb_u32* mask) {
    __shared__ gb_u64 s_key[GB_MAX_WARPS];
    __shared__ gb_u32 s_flags[GB_MAX_WARPS];
    __shared__ gb_u64 s_pair[2 * GB_MAX_WARPS];
    __shared__ gb_u32 s_last;
    __shared__ gb_u32 s_bound; // the order key of the block's lower bound
    __shared__ gb_u64 s_xv[GB_MAX_WARPS]; // the warps' winners' (x, v) for the record

    const gb_u32 y = blockIdx.y;
    const gb_u32 z = blockIdx.z;
    const gb_u32 nblocks = gridDim.x;
    const gb_row_params p = params[y];
    if ((p.flags & GB_RF_ROUTED) && (p.flags & GB_RF_CATEGORICAL)) {
        return; // the categorical kernel's row: left entirely alone
    }
    const gb_u64 o = (gb_u64)p.row * gridDim.z + z; // this draw's output slot
    if (gb_bad_flags(p.flags) || gb_bad_row(p.temperature, vocab)) {
        // Uniform for every block of the row: none touches the counters, and the row
        // gets no end-of-draws work.
        if (blockIdx.x == 0u && threadIdx.x == 0u) {
            tokens[o] = -1;
            status[o] = GB_STATUS_BAD_PARAMS;
            if (p.flags & GB_RF_LOGPROBS) {
                gb_write_record(logprobs, o, false, 0.0f, 0.0f, 0.0f, 0.0f);
            }
        }
        return;
    }

    // This block's chunk: a multiple of 4 elements long, so a Philox block (4 elements)
    // never straddles two blocks and vector loads stay aligned.
    gb_u32 per = vocab / nblocks + (vocab % nblocks != 0u ? 1u : 0u);
    per = (per + 3u) & ~3u;
    gb_u64 start64 = (gb_u64)blockIdx.x * per;
    gb_u32 start = start64 < vocab ? (gb_u32)start64 : vocab;
    gb_u32 end = start64 + per < vocab ? (gb_u32)(start64 + per) : vocab;

    const typename gb_io<KIND>::elem* row = logits + (gb_u64)p.row * row_stride;
    const bool vec = gb_io<KIND>::vec_ok(row);
    const bool greedy = p.temperature == 0.0f;
    const float invT = greedy ? 1.0f : 1.0f / p.temperature;
    const gb_proc pc = gb_make_proc(p, bias, counts, mask, vocab);
    const bool procs = pc.flags != 0u;
    // The log-sum-exps the record needs: none, one (raw and processed are the same set:
    // no processors and invT = 1, greedy rows included) or two.
    const int nl = !(p.flags & GB_RF_LOGPROBS) ? 0 : (!procs && invT == 1.0f) ? 1 : 2;

    // Each combination of features is its own instantiation of the scan, so a row without
    // them runs exactly the version-1 loop; the branches are uniform for the block. With
    // a record to write, the scan also keeps its best element's raw logit and value.
    gb_win w;
    w.key = 0ull;
    w.flags = 0u;
    w.x = w.v = 0.0f;
    gb_lse_init(w.raw);
    gb_lse_init(w.proc);
    if (greedy) {
        if (!procs) {
            if (nl == 0) {
                gb_scan_greedy<KIND, false, 0>(row, start, end, vec, pc, w);
            } else {
                gb_scan_greedy<KIND, false, 1>(row, start, end, vec, pc, w);
            }
        } else if (nl == 0) {
            gb_scan_greedy<KIND, true, 0>(row, start, end, vec, pc, w);
        } else {
            gb_scan_greedy<KIND, true, 2>(row, start, end, vec, pc, w);
        }
    } else {
        gb_u32 step_lo, step_hi;
        gb_step_plus(p, z, step_lo, step_hi);
        // The branch is the same for the whole block (one row per block).
        if (threadIdx.x == 0u) {
            s_bound = 0u; // below the key of every float, -Inf included
        }
        __syncthreads();
        if (!procs) {
            if (nl == 0) {
                gb_scan_gumbel<KIND, false, 0>(row, start, end, vec, invT, step_lo, step_hi, p, pc, &s_bound, w);
            } else if (nl == 1) {
                gb_scan_gumbel<KIND, false, 1>(row, start, end, vec, invT, step_lo, step_hi, p, pc, &s_bound, w);
            } else {
                gb_scan_gumbel<KIND, false, 2>(row, start, end, vec, invT, step_lo, step_hi, p, pc, &s_bound, w);
            }
        } else if (nl == 0) {
            gb_scan_gumbel<KIND, true, 0>(row, start, end, vec, invT, step_lo, step_hi, p, pc, &s_bound, w);
        } else {
            gb_scan_gumbel<KIND, true, 2>(row, start, end, vec, invT, step_lo, step_hi, p, pc, &s_bound, w);
        }
    }
    if (nl == 0) {
        gb_argmax_end<0>(params, p, y, z, o, w, tokens, status, partials, counters, logprobs, counts, vocab, s_key,
                         s_flags, s_pair, s_xv, &s_last);
    } else if (nl == 1) {
        gb_argmax_end<1>(params, p, y, z, o, w, tokens, status, partials, counters, logprobs, counts, vocab, s_key,
                         s_flags, s_pair, s_xv, &s_last);
    } else {
        gb_argmax_end<2>(params, p, y, z, o, w, tokens, status, partials, counters, logprobs, counts, vocab, s_key,
                         s_flags, s_pair, s_xv, &s_last);
    }
}

// ---------------------------------------------------------------------------------------
// categorical (ABI.md): one block per row; radix selects for top-k and top-p, exact 64-bit
// fixed-point weights, and an inverse-CDF draw by chunked block prefix sums.

// gb_weight is w(x) = expf(fl(fl(x - m) * invT)), 0 for x = -Inf. Below cutoff the
// weight is under 2^-F / e, so its fixed-point weight is 0 whatever expf's last bit: it
// reads as 0 and skips expf (min-p compares w, but an element with q = 0 never counts).
__device__ __forceinline__ float gb_weight(float x, float m, float invT, float cutoff) {
    float d = __fmul_rn(__fadd_rn(x, -m), invT); // -Inf for x = -Inf
    if (!(d >= cutoff)) {
        return 0.0f;
    }
    return expf(d);
}

// gb_fixed is q = uint64(w * 2^F): exact scaling, truncation.
__device__ __forceinline__ gb_u64 gb_fixed(float w, float two_pow_f) { return __float2ull_rz(__fmul_rn(w, two_pow_f)); }

// gb_row_state is what every pass of the categorical kernel knows about its row.
struct gb_row_state {
    float m;          // the row's largest logit
    float invT;       // fl(1 / temperature)
    float two_pow_f;  // 2^F
    float cutoff;     // -(F ln 2 + 1): weights below it have q = 0
    gb_u32 threshold; // kept keys are >= threshold
    bool minp_on;
    float min_p;
};

// gb_kept_q returns an element's fixed-point weight if it is kept, else 0.
__device__ __forceinline__ gb_u64 gb_kept_q(float x, const gb_row_state& st) {
    if (gb_orderkey(x) < st.threshold) {
        return 0ull;
    }
    float w = gb_weight(x, st.m, st.invT, st.cutoff);
    if (st.minp_on && !(w >= st.min_p)) {
        return 0ull;
    }
    return gb_fixed(w, st.two_pow_f);
}

// GB_CAT_CAP is the capacity of the categorical kernel's shared-memory list of candidates
// (12 bytes each: index, key, weight; 3072 fills the 48 KB of static shared memory next to
// the other arrays); rows whose candidates do not fit take the full-row path.
// GB_CAT_GROUPS is how many groups of four elements each thread has in flight in the
// passes over the row: one block holds a whole row, so the loads in flight, not the
// instruction count, bound a pass.
#define GB_CAT_CAP 3072
#define GB_CAT_GROUPS 4

// gb_cat_load_trip reads a thread's GB_CAT_GROUPS groups of one trip over the row (group i
// at base + i * 4 * blockDim.x + 4 * threadIdx.x) and replaces them by their processed
// logits when the row has processors. All loads are issued before any is used: one block
// holds a whole row, so the bytes in flight per thread, not the instruction count, bound
// the speed of a pass (32 warps with one 16-byte load each keep too little in flight to
// cover the L2 or HBM latency).
template <int KIND>
__device__ __forceinline__ void gb_cat_load_trip(const typename gb_io<KIND>::elem* row, gb_u32 base, gb_u32 vocab,
                                                 bool vec, const gb_proc& pc, float x[GB_CAT_GROUPS][4],
                                                 gb_u32 n[GB_CAT_GROUPS]) {
    const gb_u32 chunk = 4u * blockDim.x;
    gb_load_groups<KIND, GB_CAT_GROUPS>(row, base + 4u * threadIdx.x, chunk, vocab, vec, x, n);
    if (pc.flags != 0u) {
#pragma unroll
        for (int i = 0; i < GB_CAT_GROUPS; ++i) {
            gb_process_group(pc, base + (gb_u32)i * chunk + 4u * threadIdx.x, n[i], x[i], x[i]);
        }
    }
}

// gb_cat_hist_row adds to s_cnt the digit at shift of every processed key of the row whose
// digits above it equal prefix: one level of top-k's radix select over the row. Keys only,
// no exponential: a load, an order key, a compare and (rarely) a shared atomic per element.
template <int KIND>
__device__ __forceinline__ void gb_cat_hist_row(const typename gb_io<KIND>::elem* row, gb_u32 vocab, bool vec,
                                                const gb_proc& pc, gb_u32 hi_mask, gb_u32 prefix, gb_u32 shift,
                                                gb_u32* s_cnt) {
    const gb_u32 trip = GB_CAT_GROUPS * 4u * blockDim.x;
    const gb_u64 zeros[4] = {0ull, 0ull, 0ull, 0ull};
    for (gb_u32 base = 0u; base < vocab; base += trip) {
        float x[GB_CAT_GROUPS][4];
        gb_u32 n[GB_CAT_GROUPS];
        gb_cat_load_trip<KIND>(row, base, vocab, vec, pc, x, n);
#pragma unroll
        for (int i = 0; i < GB_CAT_GROUPS; ++i) {
            gb_u32 bins[4];
            bool ok[4];
#pragma unroll
            for (gb_u32 j = 0; j < 4u; ++j) {
                const gb_u32 k = gb_orderkey(x[i][j]);
                ok[j] = j < n[i] && (k & hi_mask) == prefix;
                bins[j] = (k >> shift) & 0xFFu;
            }
            gb_hist_add(s_cnt, (gb_u64*)0, bins, zeros, ok);
        }
    }
}

// gb_cat_compact writes every element of the row whose processed key is at least low and
// whose scaled difference d = fl(fl(x' - m) * invT) is not below dmin to the list (s_idx,
// s_key, s_w: index, order key, weight w) in index order and returns their number; only the
// first GB_CAT_CAP are written, and a larger count means the list is unusable. Each trip is one ordered
// block compaction: the four groups' counts of a thread travel packed in 16-bit fields of
// one 64-bit word (a block holds at most 4096 elements of a group, so no field carries
// into the next), one warp scan gives every thread its place within its warp for all four
// groups at once, and the warps' totals meet in shared memory behind a single barrier
// (double-buffered, so the next trip's writes cannot overtake this trip's reads). Only the
// listed elements pay for an exponential.
template <int KIND>
__device__ __forceinline__ gb_u32 gb_cat_compact(const typename gb_io<KIND>::elem* row, gb_u32 vocab, bool vec,
                                                 const gb_proc& pc, gb_u32 low, float dmin, float m, float invT,
                                                 float cutoff, gb_u32* s_idx, gb_u32* s_key, float* s_w, gb_u64* s_wc) {
    const gb_u32 chunk = 4u * blockDim.x;
    const gb_u32 trip = GB_CAT_GROUPS * chunk;
    const gb_u32 lane = gb_lane();
    const gb_u32 warp = gb_warp();
    const gb_u32 nw = gb_num_warps();
    gb_u32 running = 0u; // elements listed by the trips before this one
    gb_u32 buf = 0u;
    for (gb_u32 base = 0u; base < vocab; base += trip) {
        float x[GB_CAT_GROUPS][4];
        gb_u32 n[GB_CAT_GROUPS];
        gb_cat_load_trip<KIND>(row, base, vocab, vec, pc, x, n);
        gb_u32 keep[GB_CAT_GROUPS]; // bit j: element j of group i is listed
        gb_u64 packed = 0ull;
#pragma unroll
        for (int i = 0; i < GB_CAT_GROUPS; ++i) {
            keep[i] = 0u;
            gb_u32 c = 0u;
#pragma unroll
            for (gb_u32 j = 0; j < 4u; ++j) {
                if (j < n[i] && gb_orderkey(x[i][j]) >= low &&
                    !(__fmul_rn(__fadd_rn(x[i][j], -m), invT) < dmin)) {
                    keep[i] |= 1u << j;
                    ++c;
                }
            }
            packed |= (gb_u64)c << (16 * i);
        }
        gb_u64 incl = packed;
        for (int d = 1; d < GB_WARP_SIZE; d <<= 1) {
            const gb_u64 t = gb_shfl_up_u64(incl, (gb_u32)d);
            if (lane >= (gb_u32)d) {
                incl += t;
            }
        }
        gb_u64* wc = s_wc + buf * GB_MAX_WARPS;
        if (lane == (gb_u32)GB_WARP_SIZE - 1u) {
            wc[warp] = incl;
        }
        __syncthreads();
        gb_u64 before = 0ull, total = 0ull; // packed: the warps before this one, all warps
        for (gb_u32 w = 0u; w < nw; ++w) {
            const gb_u64 v = wc[w];
            total += v;
            before += w < warp ? v : 0ull;
        }
        const gb_u64 place = before + incl - packed;
        gb_u32 group_base = running;
#pragma unroll
        for (int i = 0; i < GB_CAT_GROUPS; ++i) {
            gb_u32 pos = group_base + (gb_u32)((place >> (16 * i)) & 0xFFFFull);
            const gb_u32 g = base + (gb_u32)i * chunk + 4u * threadIdx.x;
#pragma unroll
            for (gb_u32 j = 0; j < 4u; ++j) {
                if ((keep[i] >> j) & 1u) {
                    if (pos < GB_CAT_CAP) {
                        s_idx[pos] = g + j;
                        s_key[pos] = gb_orderkey(x[i][j]);
                        s_w[pos] = gb_weight(x[i][j], m, invT, cutoff);
                    }
                    ++pos;
                }
            }
            group_base += (gb_u32)((total >> (16 * i)) & 0xFFFFull);
        }
        running = group_base;
        buf ^= 1u;
    }
    __syncthreads();
    return running;
}

// gb_clear_bins zeroes a radix level's counts.
__device__ __forceinline__ void gb_clear_bins(gb_u32* s_cnt) {
    for (gb_u32 b = threadIdx.x; b < GB_BINS; b += blockDim.x) {
        s_cnt[b] = 0u;
    }
    __syncthreads();
}

// gb_cat_select_level ends one level of top-k's radix select over the counts in s_cnt: it
// picks the bin holding the rem-th largest key of the current prefix, narrows rem and
// prefix, and returns the bin's count.
__device__ __forceinline__ gb_u32 gb_cat_select_level(const gb_u32* s_cnt, gb_u32 shift, gb_u64& rem,
                                                      gb_u32& prefix, gb_u64* s_bcast) {
    __syncthreads();
    gb_u64 above = 0ull;
    const gb_u32 b = gb_select_bin(s_cnt, (const gb_u64*)0, rem, above, s_bcast);
    const gb_u32 in_bin = s_cnt[b];
    __syncthreads(); // every thread has read s_cnt before the next level clears it
    rem -= above;
    prefix |= b << shift;
    return in_bin;
}

// gb_list_q is the fixed-point weight of list entry e if it is kept (key at least
// threshold and, with min-p, w >= min_p), else 0.
__device__ __forceinline__ gb_u64 gb_list_q(const gb_u32* s_key, const float* s_w, gb_u32 e,
                                            const gb_row_state& st) {
    if (s_key[e] < st.threshold) {
        return 0ull;
    }
    const float w = s_w[e];
    if (st.minp_on && !(w >= st.min_p)) {
        return 0ull;
    }
    return gb_fixed(w, st.two_pow_f);
}

// The categorical kernel's passes over a row of V elements (the cost is the passes: a
// block holds the whole row, so each pass streams V elements through one SM):
// 1. the largest logit, the flags and (top-k) the histogram of the top key digit;
// 2. top-k (0 < k < V): after each radix level the number of keys at or above the chosen
//    bin's range is known exactly (the k - rem keys above it plus the bin's count). Once it
//    fits in GB_CAT_CAP, one more pass lists those elements in shared memory in index
//    order (gb_cat_compact), and everything after — the rest of the radix select, Z,
//    top-p's radix select on mass, min-p, S and the draw — runs on the list. With k = 50
//    on LLM logits the top digit's bin usually holds a few hundred keys, so the row is
//    read twice, by key-only passes, and expf runs only on listed elements. Every step
//    keeps its integer definition (ABI.md), so the list gives the full-row path's tokens;
//    only keys below the k-th are left out, and no later step looks at them.
// 3. min-p alone: one key-only pass lists the elements that can pass min-p (d at least
//    ln(min_p), less a margin), and S and the draw run on the list when it fits;
// 4. otherwise (no top-k, top-p without top-k, more than GB_CAT_CAP keys tied into the
//    kept set, or too many min-p candidates) the full-row path: top-p's radix levels over
//    the row, S by tiles, the draw in one tile.
template <int KIND>
__device__ __forceinline__ void gb_categorical(const typename gb_io<KIND>::elem* __restrict__ logits,
                                               gb_row_params* params, gb_i32* tokens, gb_i32* status,
                                               gb_u32* counters, gb_u64 row_stride, gb_u32 vocab, float* logprobs,
                                               const float* bias, gb_u32* counts, const gb_u32* mask) {
    __shared__ gb_u32 s_cnt[GB_BINS];
    __shared__ gb_u64 s_mass[GB_BINS];
    __shared__ gb_u64 s_red[GB_MAX_WARPS];
    __shared__ gb_u64 s_bcast[2];
    __shared__ gb_u64 s_tile[GB_MAX_TILES];
    __shared__ gb_i32 s_token;
    __shared__ gb_u64 s_pair[2 * GB_MAX_WARPS];
    // LOGPROBS: the raw and (greedy rows) processed log-sum-exp sets, as (reference, sum)
    // pairs, so that records are taken from the reference (gb_lse_logprob) and do not cancel
    // when the logits are huge.
    __shared__ float s_lse[4];
    __shared__ gb_u64 s_wc[2 * GB_MAX_WARPS]; // gb_cat_compact's per-warp counts
    __shared__ gb_u32 s_idx[GB_CAT_CAP];      // the top-k list: element index,
    __shared__ gb_u32 s_key[GB_CAT_CAP];      // order key of x',
    __shared__ float s_w[GB_CAT_CAP];         // and weight w(x')

    if (blockIdx.x != 0u) {
        return; // one block per row; extra blocks of a wider grid have nothing to do
    }
    const gb_u32 y = blockIdx.y;
    const gb_u32 z = blockIdx.z;
    const gb_row_params p = params[y];
    if ((p.flags & GB_RF_ROUTED) && !(p.flags & GB_RF_CATEGORICAL)) {
        return; // the gumbel_argmax kernel's row: left entirely alone
    }
    const gb_u64 o = (gb_u64)p.row * gridDim.z + z; // this draw's output slot
    const bool lp = (p.flags & GB_RF_LOGPROBS) != 0u;
    if (gb_bad_flags(p.flags) || gb_bad_row(p.temperature, vocab)) {
        if (threadIdx.x == 0u) {
            tokens[o] = -1;
            status[o] = GB_STATUS_BAD_PARAMS;
            if (lp) {
                gb_write_record(logprobs, o, false, 0.0f, 0.0f, 0.0f, 0.0f);
            }
        }
        return;
    }
    const typename gb_io<KIND>::elem* row = logits + (gb_u64)p.row * row_stride;
    const bool vec = gb_io<KIND>::vec_ok(row);
    const gb_proc pc = gb_make_proc(p, bias, counts, mask, vocab);
    const bool greedy = p.temperature == 0.0f;
    const bool topk_on = p.top_k > 0u && p.top_k < vocab;
    const bool topp_on = p.top_p > 0.0f && p.top_p < 1.0f;
    const gb_u32 chunk = 4u * blockDim.x;

    // Pass 1: the largest logit, the flags and (top-k) the histogram of the top digit.
    if (topk_on) {
        for (gb_u32 b = threadIdx.x; b < GB_BINS; b += blockDim.x) {
            s_cnt[b] = 0u;
        }
        __syncthreads();
    }
    // With LOGPROBS, the raw log-sum-exp over the logits, and for greedy rows the one
    // over x' (their record's temperature-1 distribution).
    gb_u32 mkey = 0u;
    gb_u32 flags = 0u;
    gb_lse raw, proc;
    gb_lse_init(raw);
    gb_lse_init(proc);
    for (gb_u32 base = 0u; base < vocab; base += GB_CAT_GROUPS * chunk) {
        float xs[GB_CAT_GROUPS][4];
        gb_u32 ns[GB_CAT_GROUPS];
        gb_load_groups<KIND, GB_CAT_GROUPS>(row, base + 4u * threadIdx.x, chunk, vocab, vec, xs, ns);
#pragma unroll
        for (int i = 0; i < GB_CAT_GROUPS; ++i) {
            float* x = xs[i];
            const gb_u32 n = ns[i];
            const gb_u32 g = base + (gb_u32)i * chunk + 4u * threadIdx.x;
            if (lp) {
                gb_lse_add4(raw, x, gb_max4(x));
            }
            if (pc.flags != 0u) {
                flags |= gb_process_group(pc, g, n, x, x);
            }
            if (lp && greedy) {
                gb_lse_add4(proc, x, gb_max4(x));
            }
            gb_u32 bins[4];
            bool ok[4];
            const gb_u64 zeros[4] = {0ull, 0ull, 0ull, 0ull};
#pragma unroll
            for (gb_u32 j = 0; j < 4u; ++j) {
                ok[j] = j < n;
                gb_u32 k = gb_orderkey(x[j]);
                bins[j] = k >> 24;
                if (ok[j]) {
                    if (pc.flags == 0u) {
                        flags |= gb_flags(x[j]);
                    }
                    mkey = gb_max_u32(mkey, k);
                }
            }
            if (topk_on) {
                gb_hist_add(s_cnt, (gb_u64*)0, bins, zeros, ok);
            }
        }
    }
    gb_block_max_or(mkey, flags, s_red, s_bcast);
    if (lp) {
        gb_block_lse(raw, proc, greedy, s_pair);
        if (threadIdx.x == 0u) {
            // Kept in shared memory, not in registers across the passes below.
            s_lse[0] = raw.m;
            s_lse[1] = raw.s;
            s_lse[2] = proc.m;
            s_lse[3] = proc.s;
        }
    }
    if (gb_flags_status(flags) != GB_STATUS_OK) {
        if (threadIdx.x == 0u) {
            gb_finish(tokens, status, o, 0ull, flags);
            if (lp) {
                gb_write_record(logprobs, o, false, 0.0f, 0.0f, 0.0f, 0.0f);
            }
            gb_row_done(params, p, y, counters, tokens, status, counts, vocab);
        }
        return;
    }

    gb_row_state st;
    st.m = gb_orderkey_inverse(mkey);

    if (greedy) {
        // Greedy on every path: the first index whose logit equals m.
        gb_u32 first = 0u; // 0xFFFFFFFF - index, largest first
        const gb_u32 stride = 4u * blockDim.x;
        for (gb_u32 g = 4u * threadIdx.x; g < vocab; g += stride) {
            float x[4];
            gb_u32 n = gb_load_processed<KIND>(row, g, vocab, vec, pc, x);
#pragma unroll
            for (gb_u32 j = 0; j < 4u; ++j) {
                if (j < n && x[j] == st.m) {
                    first = gb_max_u32(first, 0xFFFFFFFFu - (g + j));
                }
            }
        }
        gb_u32 none = 0u;
        gb_block_max_or(first, none, s_red, s_bcast);
        if (threadIdx.x == 0u) {
            const gb_u32 tok = 0xFFFFFFFFu - first;
            tokens[o] = (gb_i32)tok;
            status[o] = GB_STATUS_OK;
            if (lp) {
                const float x = gb_io<KIND>::load1(row + tok);
                float* rec = logprobs + 4u * o;
                rec[0] = gb_lse_logprob(x, s_lse[0], s_lse[1], rec[2]);
                rec[1] = gb_lse_logprob(gb_process1(pc, x, tok), s_lse[2], s_lse[3], rec[3]);
            }
            gb_row_done(params, p, y, counters, tokens, status, counts, vocab);
        }
        return;
    }

    st.invT = 1.0f / p.temperature;
    // F = 63 - bitlen(V): sums of q stay below 2^63.
    gb_u32 bitlen = 32u - (gb_u32)__clz((int)vocab);
    st.two_pow_f = __uint_as_float((127u + 63u - bitlen) << 23);
    st.cutoff = -__fadd_rn(__fmul_rn((float)(63u - bitlen), 0.6931472f), 1.0f);
    st.threshold = 0u;
    st.minp_on = p.min_p > 0.0f && p.min_p <= 1.0f;
    st.min_p = p.min_p;

    // Top-k: Kk, the k-th largest key counting repeats, by radix select from the top digit,
    // over the row until the keys at or above the chosen bin fit in the list, then over the
    // list. (One call site of gb_cat_compact for both lists keeps the kernel in 64
    // registers without spills.)
    gb_u32 kk = 0u;
    bool listed = false;
    gb_u32 n_list = 0u;
    gb_u64 rem = p.top_k;
    gb_u32 prefix = 0u;
    int level = 0;
    bool want_list = false;
    float dmin = -gb_inf();
    if (topk_on) {
        while (level < 4) {
            const gb_u32 shift = 24u - 8u * (gb_u32)level;
            if (level > 0) {
                gb_clear_bins(s_cnt);
                gb_cat_hist_row<KIND>(row, vocab, vec, pc, 0xFFFFFFFFu << (shift + 8u), prefix, shift, s_cnt);
            }
            const gb_u32 in_bin = gb_cat_select_level(s_cnt, shift, rem, prefix, s_bcast);
            ++level;
            // Keys >= prefix (its lower digits are 0): the top_k - rem keys above the bin's
            // range and the bin's own. Block-uniform, like every branch here.
            if ((gb_u64)p.top_k - rem + in_bin <= (gb_u64)GB_CAT_CAP) {
                want_list = true;
                break;
            }
        }
    } else if (!topp_on && st.minp_on) {
        // Min-p alone keeps only elements with w >= min_p, which needs d >= ln(min_p): one
        // key-only pass lists the elements with d >= ln(min_p) less a margin (it covers the
        // last-place errors of logf and expf many times over, so no kept element is left
        // out), and when they fit, S and the draw run on the list. When they do not (a flat
        // row, or a tiny min_p), the pass is wasted and the full-row path runs.
        dmin = __fadd_rn(__fmul_rn(logf(st.min_p), 1.0001f), -1.0e-3f);
        want_list = true;
    }
    if (want_list) {
        n_list = gb_cat_compact<KIND>(row, vocab, vec, pc, topk_on ? prefix : 0u, dmin, st.m, st.invT, st.cutoff,
                                      s_idx, s_key, s_w, s_wc);
        listed = n_list <= GB_CAT_CAP; // always so for top-k: the count was known
    }
    if (topk_on) {
        // The levels left after listing (none when the row was never listed).
        for (; level < 4; ++level) {
            const gb_u32 shift = 24u - 8u * (gb_u32)level;
            const gb_u32 hi_mask = 0xFFFFFFFFu << (shift + 8u);
            gb_clear_bins(s_cnt);
            for (gb_u32 e = threadIdx.x; e < n_list; e += blockDim.x) {
                const gb_u32 k = s_key[e];
                if ((k & hi_mask) == prefix) {
                    atomicAdd(&s_cnt[(k >> shift) & 0xFFu], 1u);
                }
            }
            gb_cat_select_level(s_cnt, shift, rem, prefix, s_bcast);
        }
        kk = prefix;
    }
    st.threshold = kk;

    // The draw's uniform: u = philox.CategoricalUniform64(seed, step + z).
    gb_u32 ph[4];
    gb_u32 step_lo, step_hi;
    gb_step_plus(p, z, step_lo, step_hi);
    gb_philox(0u, step_lo, step_hi, GB_PURPOSE_CATEGORICAL, p.seed_lo, p.seed_hi, ph);
    const gb_u64 u = ((gb_u64)ph[1] << 32) | ph[0];
    gb_u64 s_kept = 0ull; // S, the kept mass

    if (listed) {
        // Top-p on the list: Z over key >= Kk, then Kp by radix select on mass (only bins
        // with mass count, as on the full-row path).
        gb_u32 kp = 0u;
        if (topp_on) {
            gb_u64 part = 0ull;
            for (gb_u32 e = threadIdx.x; e < n_list; e += blockDim.x) {
                if (s_key[e] >= kk) {
                    part += gb_fixed(s_w[e], st.two_pow_f);
                }
            }
            const gb_u64 zsum = gb_block_sum_u64(part, s_red, s_bcast);
            const gb_u64 pp = __float2ull_rz(__fmul_rn(p.top_p, GB_TWO_POW_32));
            gb_u64 rem = (__umul64hi(zsum, pp) << 32) | ((zsum * pp) >> 32); // (Z * P) >> 32
            gb_u32 prefix = 0u;
            for (int level = 0; level < 4; ++level) {
                const gb_u32 shift = 24u - 8u * (gb_u32)level;
                const gb_u32 hi_mask = level == 0 ? 0u : 0xFFFFFFFFu << (shift + 8u);
                for (gb_u32 i = threadIdx.x; i < GB_BINS; i += blockDim.x) {
                    s_mass[i] = 0ull;
                }
                __syncthreads();
                for (gb_u32 e = threadIdx.x; e < n_list; e += blockDim.x) {
                    const gb_u32 k = s_key[e];
                    if (k >= kk && (k & hi_mask) == prefix) {
                        const gb_u64 q = gb_fixed(s_w[e], st.two_pow_f);
                        if (q != 0ull) {
                            atomicAdd(&s_mass[(k >> shift) & 0xFFu], q);
                        }
                    }
                }
                __syncthreads();
                gb_u64 above = 0ull;
                const gb_u32 b = gb_select_bin((const gb_u32*)0, s_mass, rem, above, s_bcast);
                rem -= above;
                prefix |= b << shift;
            }
            kp = prefix;
        }
        st.threshold = gb_max_u32(kk, kp);

        // S and the draw in one block scan: each thread owns a run of consecutive entries
        // (index order), so the exclusive scan of the runs' kept masses is the prefix sum
        // the inverse CDF needs, and the one thread whose run crosses target finds the token.
        if (threadIdx.x == 0u) {
            s_token = -1;
        }
        const gb_u32 per = n_list / blockDim.x + (n_list % blockDim.x != 0u ? 1u : 0u);
        const gb_u32 e0 = gb_min_u32(threadIdx.x * per, n_list);
        const gb_u32 e1 = gb_min_u32(e0 + per, n_list);
        gb_u64 local = 0ull;
        for (gb_u32 e = e0; e < e1; ++e) {
            local += gb_list_q(s_key, s_w, e, st);
        }
        const gb_u64 excl = gb_block_exclusive_scan_u64(local, s_kept, s_red, s_bcast);
        const gb_u64 target = __umul64hi(u, s_kept);
        if (local != 0ull && excl <= target && target < excl + local) {
            gb_u64 acc = excl;
            for (gb_u32 e = e0; e < e1; ++e) {
                const gb_u64 q = gb_list_q(s_key, s_w, e, st);
                if (acc <= target && target < acc + q) {
                    s_token = (gb_i32)s_idx[e];
                }
                acc += q;
            }
        }
        __syncthreads();
    } else {
        // Top-p: Kp, the largest kept key t with sum of q over keys >= t at least target,
        // by radix select on mass. Only bins with mass count: the answer always has mass.
        gb_u32 kp = 0u;
        if (topp_on) {
            gb_u64 rem = 0ull;
            gb_u32 prefix = 0u;
            gb_u32 b = 0u;
            for (int level = 0; level < 4; ++level) {
                const gb_u32 shift = 24u - 8u * (gb_u32)level;
                const gb_u32 hi_mask = level == 0 ? 0u : 0xFFFFFFFFu << (shift + 8u);
                for (gb_u32 i = threadIdx.x; i < GB_BINS; i += blockDim.x) {
                    s_mass[i] = 0ull;
                }
                __syncthreads();
                for (gb_u32 g = 4u * threadIdx.x; g < vocab; g += 4u * blockDim.x) {
                    float x[4];
                    const gb_u32 n = gb_load_processed<KIND>(row, g, vocab, vec, pc, x);
                    gb_u32 bins[4];
                    gb_u64 q[4];
                    bool ok[4];
#pragma unroll
                    for (gb_u32 j = 0; j < 4u; ++j) {
                        gb_u32 k = gb_orderkey(x[j]);
                        ok[j] = j < n && k >= kk && (k & hi_mask) == prefix;
                        bins[j] = (k >> shift) & 0xFFu;
                        q[j] = ok[j] ? gb_fixed(gb_weight(x[j], st.m, st.invT, st.cutoff), st.two_pow_f) : 0ull;
                        ok[j] = ok[j] && q[j] != 0ull;
                    }
                    gb_hist_add((gb_u32*)0, s_mass, bins, q, ok);
                }
                __syncthreads();
                if (level == 0) {
                    // Z: the mass of every key >= Kk, all in this level's histogram.
                    gb_u64 part = 0ull;
                    for (gb_u32 i = threadIdx.x; i < GB_BINS; i += blockDim.x) {
                        part += s_mass[i];
                    }
                    gb_u64 zsum = gb_block_sum_u64(part, s_red, s_bcast);
                    gb_u64 pp = __float2ull_rz(__fmul_rn(p.top_p, GB_TWO_POW_32));
                    gb_u64 lo = zsum * pp;
                    gb_u64 hi = __umul64hi(zsum, pp);
                    rem = (hi << 32) | (lo >> 32); // (Z * P) >> 32 of the 128-bit product
                }
                gb_u64 above = 0ull;
                b = gb_select_bin((const gb_u32*)0, s_mass, rem, above, s_bcast);
                rem -= above;
                prefix |= b << shift;
            }
            kp = prefix;
        }
        st.threshold = gb_max_u32(kk, kp);

        // S, the mass of the kept set, and the mass of each tile: tiles are runs of whole
        // chunks (4 * blockDim.x elements), at most GB_MAX_TILES of them, so that the draw
        // below scans one tile instead of the row.
        const gb_u32 nchunks = vocab / chunk + (vocab % chunk != 0u ? 1u : 0u);
        const gb_u32 tile_chunks = nchunks / GB_MAX_TILES + (nchunks % GB_MAX_TILES != 0u ? 1u : 0u);
        for (gb_u32 i = threadIdx.x; i < GB_MAX_TILES; i += blockDim.x) {
            s_tile[i] = 0ull;
        }
        __syncthreads();
        gb_u64 tile_part = 0ull;
        for (gb_u32 c = 0u; c < nchunks; ++c) {
            const gb_u32 g = c * chunk + 4u * threadIdx.x;
            float x[4];
            const gb_u32 n = gb_load_processed<KIND>(row, g, vocab, vec, pc, x);
#pragma unroll
            for (gb_u32 j = 0; j < 4u; ++j) {
                if (j < n) {
                    tile_part += gb_kept_q(x[j], st);
                }
            }
            if ((c + 1u) % tile_chunks == 0u || c + 1u == nchunks) {
                for (int d = GB_WARP_SIZE / 2; d > 0; d >>= 1) {
                    tile_part += gb_shfl_down_u64(tile_part, d);
                }
                if (gb_lane() == 0u && tile_part != 0ull) {
                    atomicAdd(&s_tile[c / tile_chunks], tile_part);
                }
                tile_part = 0ull;
            }
        }
        __syncthreads();

        // The draw: target = (u * S) >> 64; the token is the smallest index whose inclusive
        // prefix sum of kept q exceeds target. Warp 0 finds the tile where the prefix sum
        // crosses target (each lane owns GB_MAX_TILES / warpSize consecutive tiles), then the
        // block scans that tile's chunks in index order.
        gb_u64 lane_sum = 0ull;  // the mass of this lane's tiles (warp 0)
        gb_u64 lane_excl = 0ull; // the mass of the tiles before them
        if (gb_warp() == 0u) {
            const gb_u32 per = GB_MAX_TILES / GB_WARP_SIZE;
            for (gb_u32 i = 0; i < per; ++i) {
                lane_sum += s_tile[gb_lane() * per + i];
            }
            gb_u64 incl = lane_sum;
            for (int d = 1; d < GB_WARP_SIZE; d <<= 1) {
                gb_u64 t = gb_shfl_up_u64(incl, d);
                if (gb_lane() >= (gb_u32)d) {
                    incl += t;
                }
            }
            lane_excl = incl - lane_sum;
            if (gb_lane() == (gb_u32)GB_WARP_SIZE - 1u) {
                s_bcast[0] = incl; // S
            }
        }
        __syncthreads();
        s_kept = s_bcast[0];
        const gb_u64 target = __umul64hi(u, s_kept);
        __syncthreads();
        if (gb_warp() == 0u) {
            const gb_u32 per = GB_MAX_TILES / GB_WARP_SIZE;
            gb_u32 found = 0xFFFFFFFFu;
            gb_u64 before = 0ull;
            gb_u64 acc = lane_excl;
            for (gb_u32 i = 0; i < per; ++i) {
                const gb_u32 tile = gb_lane() * per + i;
                if (found == 0xFFFFFFFFu && acc + s_tile[tile] > target) {
                    found = tile;
                    before = acc;
                }
                acc += s_tile[tile];
            }
            // Every lane from the crossing on finds a tile; the first one is the answer.
            gb_u32 first = found;
            for (int m = GB_WARP_SIZE / 2; m > 0; m >>= 1) {
                gb_u32 o = __shfl_xor_sync(0xFFFFFFFFu, first, m);
                first = o < first ? o : first;
            }
            if (found != 0xFFFFFFFFu && found == first) {
                s_bcast[0] = found;
                s_bcast[1] = before;
            }
            if (first == 0xFFFFFFFFu && gb_lane() == 0u) {
                // Unreachable: S > 0 (the row's largest element has w = 1 and is kept by
                // every filter), so target < S and some tile crosses it.
                s_bcast[0] = 0ull;
                s_bcast[1] = 0ull;
            }
        }
        if (threadIdx.x == 0u) {
            s_token = -1;
        }
        __syncthreads();
        const gb_u32 tile = (gb_u32)s_bcast[0];
        gb_u64 running = s_bcast[1];
        __syncthreads();
        const gb_u32 c_end = gb_min_u32((tile + 1u) * tile_chunks, nchunks);
        for (gb_u32 c = tile * tile_chunks; c < c_end; ++c) {
            const gb_u32 g = c * chunk + 4u * threadIdx.x;
            float x[4];
            const gb_u32 n = gb_load_processed<KIND>(row, g, vocab, vec, pc, x);
            gb_u64 q[4];
            gb_u64 local = 0ull;
#pragma unroll
            for (gb_u32 j = 0; j < 4u; ++j) {
                q[j] = j < n ? gb_kept_q(x[j], st) : 0ull;
                local += q[j];
            }
            gb_u64 total = 0ull;
            gb_u64 excl = gb_block_exclusive_scan_u64(local, total, s_red, s_bcast);
            if (running + total > target) {
                gb_u64 acc = running + excl;
                if (local != 0ull && acc <= target && target < acc + local) {
#pragma unroll
                    for (gb_u32 j = 0; j < 4u; ++j) {
                        if (acc <= target && target < acc + q[j]) {
                            s_token = (gb_i32)(g + j);
                        }
                        acc += q[j];
                    }
                }
                break;
            }
            running += total;
        }
        __syncthreads();
    }
    if (threadIdx.x == 0u) {
        // s_token stays -1 only if S were 0, which cannot happen (see above).
        const gb_i32 tok = s_token;
        tokens[o] = tok;
        status[o] = tok >= 0 ? GB_STATUS_OK : GB_STATUS_NO_FINITE;
        if (lp) {
            // The kept set renormalised: ln(S_kept · 2^-F) is its log-normaliser relative
            // to exp(fl((x' - m) · invT)).
            float x = 0.0f, d = 0.0f, ln_s = 0.0f;
            if (tok >= 0) {
                x = gb_io<KIND>::load1(row + tok);
                d = __fmul_rn(__fadd_rn(gb_process1(pc, x, (gb_u32)tok), -st.m), st.invT);
                ln_s = logf(__fmul_rn((float)s_kept, __uint_as_float((127u - (63u - bitlen)) << 23)));
            }
            const float lse_proc = __fadd_rn(__fmul_rn(st.m, st.invT), ln_s);
            float* rec = logprobs + 4u * o;
            gb_write_record(logprobs, o, tok >= 0, 0.0f, 0.0f, 0.0f, 0.0f);
            if (tok >= 0) {
                rec[0] = gb_lse_logprob(x, s_lse[0], s_lse[1], rec[2]);
                rec[1] = __fadd_rn(d, -ln_s);
                rec[3] = lse_proc;
            }
        }
        gb_row_done(params, p, y, counters, tokens, status, counts, vocab);
    }
}

// ---------------------------------------------------------------------------------------
// topn (ABI.md, version 2): the N <= 20 largest keys of a row (raw logits, or Gumbel
// scores with PERTURBED), S >= 1 blocks per row, one launch. Each thread keeps its own
// top list in registers (a fixed-size, fully unrolled insertion, so nothing goes to local
// memory) behind one comparison with its N-th key; a block merges its threads' lists in
// N rounds of a block-wide max, and the last block of the row merges the S lists the
// same way.

// gb_topn_insert puts key into a thread's list (largest first, 0 = empty) and returns the
// new N-th entry, the threshold a key must beat to enter.
__device__ __forceinline__ gb_u64 gb_topn_insert(gb_u64 lst[GB_TOPN_MAX], gb_u64 key, gb_u32 N) {
    gb_u64 thr = 0ull;
#pragma unroll
    for (int j = 0; j < GB_TOPN_MAX; ++j) {
        const gb_u64 a = lst[j];
        const bool gt = key > a;
        lst[j] = gt ? key : a;
        key = gt ? a : key;
        thr = (gb_u32)j + 1u == N ? lst[j] : thr;
    }
    return thr;
}

// gb_block_max_u64_all returns the block's largest value to every thread.
__device__ __forceinline__ gb_u64 gb_block_max_u64_all(gb_u64 v, gb_u64* s_red, gb_u64* s_bcast) {
    for (int d = GB_WARP_SIZE / 2; d > 0; d >>= 1) {
        v = gb_max_u64(v, gb_shfl_down_u64(v, d));
    }
    if (gb_lane() == 0u) {
        s_red[gb_warp()] = v;
    }
    __syncthreads();
    if (gb_warp() == 0u) {
        v = gb_lane() < gb_num_warps() ? s_red[gb_lane()] : 0ull;
        for (int d = GB_WARP_SIZE / 2; d > 0; d >>= 1) {
            v = gb_max_u64(v, gb_shfl_down_u64(v, d));
        }
        if (gb_lane() == 0u) {
            s_bcast[0] = v;
        }
    }
    __syncthreads();
    const gb_u64 best = s_bcast[0];
    __syncthreads();
    return best;
}

// gb_topn_merge moves the block's N largest keys of the threads' lists into s_top
// (0 where there are fewer), emptying the lists as it goes.
__device__ __forceinline__ void gb_topn_merge(gb_u64 lst[GB_TOPN_MAX], gb_u32 N, gb_u64* s_top, gb_u64* s_red,
                                              gb_u64* s_bcast) {
    for (gb_u32 k = 0; k < N; ++k) {
        const gb_u64 best = gb_block_max_u64_all(lst[0], s_red, s_bcast);
        if (threadIdx.x == 0u) {
            s_top[k] = best;
        }
        if (best != 0ull && lst[0] == best) { // keys are unique: one thread pops
#pragma unroll
            for (int j = 0; j + 1 < GB_TOPN_MAX; ++j) {
                lst[j] = lst[j + 1];
            }
            lst[GB_TOPN_MAX - 1] = 0ull;
        }
    }
    __syncthreads();
}

// gb_topn_scan folds the chunk [start, end) into a thread's top list (see gb_topn):
// NOISY ranks Gumbel scores, PROC processes the logits first.
template <int KIND, bool NOISY, bool PROC>
__device__ __forceinline__ void gb_topn_scan(const typename gb_io<KIND>::elem* row, gb_u32 start, gb_u32 end,
                                             bool vec, gb_u32 N, float invT, const gb_row_params& p,
                                             const gb_proc& pc, gb_u64 lst[GB_TOPN_MAX], gb_u64& thr,
                                             gb_u32& flags, gb_lse& lse) {
    for (gb_u32 g = start + 4u * threadIdx.x; g < end; g += 4u * blockDim.x) {
        float v[4];
        const gb_u32 n = gb_load_group<KIND>(row, g, end, vec, v);
        if (PROC) {
            flags |= gb_process_group(pc, g, n, v, v);
        } else {
            flags |= gb_group_flags(v, n);
        }
        if (NOISY) {
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                v[j] = __fmul_rn(v[j], invT);
            }
        }
        const float mx = gb_max4(v);
        gb_lse_add4(lse, v, mx);
        if (!(mx > -gb_inf())) {
            continue; // -Inf keys never enter
        }
        if (!NOISY) {
#pragma unroll
            for (gb_u32 j = 0; j < 4u; ++j) {
                if (j < n && v[j] > -gb_inf()) {
                    const gb_u64 k = gb_pack(v[j], g + j);
                    if (k > thr) {
                        thr = gb_topn_insert(lst, k, N);
                    }
                }
            }
            continue;
        }
        // A score below the thread's N-th cannot be in the block's top N: skip the noise
        // where a bound says so (exactly, as gumbel_argmax does).
        const float thr_score = thr != 0ull ? gb_orderkey_inverse((gb_u32)(thr >> 32)) : -gb_inf();
        if (__fadd_rn(mx, GB_MAX_GUMBEL) < thr_score) {
            continue;
        }
        gb_u32 w[4];
        gb_philox(g >> 2, p.step_lo, p.step_hi, GB_PURPOSE_GUMBEL, p.seed_lo, p.seed_hi, w);
        bool need[4];
        bool any_tail = false;
#pragma unroll
        for (gb_u32 j = 0; j < 4u; ++j) {
            need[j] = j < n && v[j] > -gb_inf() && !(__fadd_rn(v[j], gb_cheap_bound(w[j])) < thr_score);
            any_tail = any_tail || (need[j] && w[j] < GB_TAIL_THRESHOLD);
        }
        gb_u32 t[4] = {0u, 0u, 0u, 0u};
        if (any_tail) {
            gb_philox(g >> 2, p.step_lo, p.step_hi, GB_PURPOSE_GUMBEL_TAIL, p.seed_lo, p.seed_hi, t);
        }
#pragma unroll
        for (gb_u32 j = 0; j < 4u; ++j) {
            if (need[j]) {
                const gb_u64 k = gb_pack(__fadd_rn(v[j], gb_gumbel(w[j], t[j])), g + j);
                if (k > thr) {
                    thr = gb_topn_insert(lst, k, N);
                }
            }
        }
    }
}

template <int KIND>
__device__ __forceinline__ void gb_topn(const typename gb_io<KIND>::elem* __restrict__ logits,
                                        const gb_row_params* __restrict__ params, gb_i32* out_tokens,
                                        float* out_values, gb_u64* partials, gb_u32* counters, gb_u64 row_stride,
                                        gb_u32 vocab, const float* bias, const gb_u32* counts, const gb_u32* mask) {
    __shared__ gb_u64 s_red[GB_MAX_WARPS];
    __shared__ gb_u64 s_bcast[2];
    __shared__ gb_u64 s_top[GB_TOPN_MAX];
    __shared__ gb_u64 s_pair[2 * GB_MAX_WARPS];
    __shared__ gb_u32 s_last;
    __shared__ gb_lse s_lse; // the row's merged log-sum-exp

    if (blockIdx.z != 0u) {
        return; // topn draws nothing: a deeper grid's extra blocks have no work
    }
    const gb_u32 y = blockIdx.y;
    const gb_u32 nblocks = gridDim.x;
    const gb_row_params p = params[y];
    const gb_u32 N = p.topn;
    gb_i32* otok = out_tokens + (gb_u64)p.row * GB_TOPN_MAX;
    float* oval = out_values + (gb_u64)p.row * GB_TOPN_MAX;
    const bool bad_n = N < 1u || N > GB_TOPN_MAX;
    if (bad_n || gb_bad_flags(p.flags) || gb_bad_row(p.temperature, vocab)) {
        if (blockIdx.x == 0u) {
            for (gb_u32 j = threadIdx.x; j < (bad_n ? GB_TOPN_MAX : N); j += blockDim.x) {
                otok[j] = -1;
                oval[j] = __uint_as_float(0x7FC00000u);
            }
        }
        return;
    }

    gb_u32 per = vocab / nblocks + (vocab % nblocks != 0u ? 1u : 0u);
    per = (per + 3u) & ~3u;
    const gb_u64 start64 = (gb_u64)blockIdx.x * per;
    const gb_u32 start = start64 < vocab ? (gb_u32)start64 : vocab;
    const gb_u32 end = start64 + per < vocab ? (gb_u32)(start64 + per) : vocab;

    const typename gb_io<KIND>::elem* row = logits + (gb_u64)p.row * row_stride;
    const bool vec = gb_io<KIND>::vec_ok(row);
    const bool perturbed = (p.flags & GB_RF_PERTURBED) != 0u;
    const bool greedy = p.temperature == 0.0f;
    const float invT = perturbed && !greedy ? 1.0f / p.temperature : 1.0f;
    gb_proc pc = gb_make_proc(p, bias, counts, mask, vocab);
    if (!perturbed) {
        pc.flags = 0u; // raw logits: no processing
    }

    // Keys: the raw logit; with PERTURBED the Gumbel score fl(fl(x' · invT) + g) (greedy:
    // x'). The log-sum-exp runs over the values the keys perturb: x, or fl(x' · invT).
    // Each kind of row has its own instantiation of the scan, so the plain one (top
    // log-probabilities) carries neither Philox nor processor state.
    gb_u64 lst[GB_TOPN_MAX];
#pragma unroll
    for (int j = 0; j < GB_TOPN_MAX; ++j) {
        lst[j] = 0ull;
    }
    gb_u64 thr = 0ull;
    gb_u32 flags = 0u;
    gb_lse lse;
    gb_lse_init(lse);
    if (!perturbed || (greedy && pc.flags == 0u)) {
        gb_topn_scan<KIND, false, false>(row, start, end, vec, N, invT, p, pc, lst, thr, flags, lse);
    } else if (greedy) {
        gb_topn_scan<KIND, false, true>(row, start, end, vec, N, invT, p, pc, lst, thr, flags, lse);
    } else if (pc.flags == 0u) {
        gb_topn_scan<KIND, true, false>(row, start, end, vec, N, invT, p, pc, lst, thr, flags, lse);
    } else {
        gb_topn_scan<KIND, true, true>(row, start, end, vec, N, invT, p, pc, lst, thr, flags, lse);
    }
    gb_u32 none = 0u;
    gb_block_max_or(none, flags, s_red, s_bcast);
    gb_block_lse(lse, lse, false, s_pair);
    gb_topn_merge(lst, N, s_top, s_red, s_bcast);

    if (nblocks > 1u) {
        gb_u64* part = partials + (gb_u64)GB_TOPN_STRIDE * ((gb_u64)y * nblocks + blockIdx.x);
        if (threadIdx.x == 0u) {
            for (gb_u32 j = 0; j < GB_TOPN_MAX; ++j) {
                part[j] = j < N ? s_top[j] : 0ull;
            }
            part[GB_TOPN_MAX] = gb_lse_pack(lse);
            if (flags != 0u) {
                atomicOr(&counters[2u * y + 1u], flags);
            }
            __threadfence();
            const gb_u32 prev = atomicAdd(&counters[2u * y], 1u);
            s_last = prev == nblocks - 1u ? 1u : 0u;
        }
        __syncthreads();
        if (s_last == 0u) {
            return;
        }
        __threadfence();
        const gb_u64* row_part = partials + (gb_u64)GB_TOPN_STRIDE * y * nblocks;
        // What the block merge left in the lists is below this block's published N.
#pragma unroll
        for (int j = 0; j < GB_TOPN_MAX; ++j) {
            lst[j] = 0ull;
        }
        thr = 0ull;
        gb_lse_init(lse);
        for (gb_u32 i = threadIdx.x; i < nblocks * GB_TOPN_MAX; i += blockDim.x) {
            const gb_u64 k = gb_load_published(row_part + (gb_u64)GB_TOPN_STRIDE * (i / GB_TOPN_MAX) + i % GB_TOPN_MAX);
            if (k > thr) {
                thr = gb_topn_insert(lst, k, N);
            }
        }
        for (gb_u32 i = threadIdx.x; i < nblocks; i += blockDim.x) {
            gb_lse_merge_packed(lse, gb_load_published(row_part + (gb_u64)GB_TOPN_STRIDE * i + GB_TOPN_MAX));
        }
        gb_block_lse(lse, lse, false, s_pair);
        gb_topn_merge(lst, N, s_top, s_red, s_bcast);
        if (threadIdx.x == 0u) {
            flags = atomicExch(&counters[2u * y + 1u], 0u);
            atomicExch(&counters[2u * y], 0u);
            s_last = flags;
        }
        __syncthreads();
        flags = s_last;
    }
    if (threadIdx.x == 0u) {
        s_lse = lse;
    }
    __syncthreads();
    for (gb_u32 j = threadIdx.x; j < N; j += blockDim.x) {
        const gb_u64 k = s_top[j];
        if (flags & GB_FLAG_NONFINITE) {
            otok[j] = -1;
            oval[j] = __uint_as_float(0x7FC00000u);
        } else if (k == 0ull) {
            otok[j] = -1;
            oval[j] = -gb_inf();
        } else {
            const gb_u32 tok = 0xFFFFFFFFu - (gb_u32)k;
            const float x = gb_io<KIND>::load1(row + tok);
            otok[j] = (gb_i32)tok;
            // From the set's reference, not fl(m + log s): a row whose logits sit near 2^29
            // (a frequency penalty of a saturated count) would otherwise read 0 for all.
            float norm;
            oval[j] = gb_lse_logprob(__fmul_rn(gb_process1(pc, x, tok), invT), s_lse.m, s_lse.s, norm);
        }
    }
}

// ---------------------------------------------------------------------------------------
// Entry points (names and arguments: ABI.md).

#define GB_ARGS(T)                                                                                   \
    const T *__restrict__ logits, gb_row_params *params, gb_i32 *tokens, gb_i32 *status, gb_u64 *partials, \
        gb_u32 *counters, gb_u64 row_stride, gb_u32 vocab, float *logprobs, const float *bias, gb_u32 *counts,  \
        const gb_u32 *mask
#define GB_PASS logits, params, tokens, status, partials, counters, row_stride, vocab, logprobs, bias, counts, mask
#define GB_PASS_CAT logits, params, tokens, status, counters, row_stride, vocab, logprobs, bias, counts, mask

extern "C" __global__ void __launch_bounds__(GB_MAX_THREADS, 1) gumbel_argmax_f32(GB_ARGS(float)) {
    gb_gumbel_argmax<GB_F32>(GB_PASS);
}

extern "C" __global__ void __launch_bounds__(GB_MAX_THREADS, 1) gumbel_argmax_f16(GB_ARGS(gb_u16)) {
    gb_gumbel_argmax<GB_F16>(GB_PASS);
}

extern "C" __global__ void __launch_bounds__(GB_MAX_THREADS, 1) gumbel_argmax_bf16(GB_ARGS(gb_u16)) {
    gb_gumbel_argmax<GB_BF16>(GB_PASS);
}

extern "C" __global__ void __launch_bounds__(GB_MAX_THREADS) categorical_f32(GB_ARGS(float)) {
    (void)partials; // one block per row: no partials
    gb_categorical<GB_F32>(GB_PASS_CAT);
}

extern "C" __global__ void __launch_bounds__(GB_MAX_THREADS) categorical_f16(GB_ARGS(gb_u16)) {
    (void)partials;
    gb_categorical<GB_F16>(GB_PASS_CAT);
}

extern "C" __global__ void __launch_bounds__(GB_MAX_THREADS) categorical_bf16(GB_ARGS(gb_u16)) {
    (void)partials;
    gb_categorical<GB_BF16>(GB_PASS_CAT);
}

// topn takes the 12 arguments at the positions of the other kernels (as the Go edition
// reads ABI.md): argument 8, the logprobs slot, is unused.
#define GB_TOPN_ARGS(T)                                                                                      \
    const T *__restrict__ logits, const gb_row_params *__restrict__ params, gb_i32 *out_tokens, float *out_values, \
        gb_u64 *partials, gb_u32 *counters, gb_u64 row_stride, gb_u32 vocab, float *unused, const float *bias,  \
        const gb_u32 *counts, const gb_u32 *mask
#define GB_TOPN_PASS logits, params, out_tokens, out_values, partials, counters, row_stride, vocab, bias, counts, mask

extern "C" __global__ void __launch_bounds__(GB_MAX_THREADS) topn_f32(GB_TOPN_ARGS(float)) {
    (void)unused;
    gb_topn<GB_F32>(GB_TOPN_PASS);
}

extern "C" __global__ void __launch_bounds__(GB_MAX_THREADS) topn_f16(GB_TOPN_ARGS(gb_u16)) {
    (void)unused;
    gb_topn<GB_F16>(GB_TOPN_PASS);
}

extern "C" __global__ void __launch_bounds__(GB_MAX_THREADS) topn_bf16(GB_TOPN_ARGS(gb_u16)) {
    (void)unused;
    gb_topn<GB_BF16>(GB_TOPN_PASS);
}
