// gumbel sampling kernels, CUDA edition (also compiled for HIP through hip_prelude.h).
//
// The contract is kernelsrc/ABI.md; the Go edition (kernelsrc/gokernel) is the reference
// these kernels match token for token (kernelsrc/emu runs this file on the CPU to prove
// it). The source is compiled at run time by NVRTC or hiprtc, which offer no standard
// headers, so it defines its own fixed-width types and decodes f16/bf16 bit patterns with
// integer operations. It compiles as C++03 and later.
//
// Numerics: every float operation whose rounding the contract fixes is written with
// __fmul_rn/__fadd_rn (never contracted into a multiply-add, whatever the compiler
// options), and logf/log1pf/expf are the accurate library functions, not intrinsics.
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

// RowParams of ABI.md: 16 little-endian 32-bit words per launch row.
struct gb_row_params {
    gb_u32 row;
    float temperature;
    gb_u32 seed_lo, seed_hi;
    gb_u32 step_lo, step_hi;
    gb_u32 top_k;
    float top_p;
    float min_p;
    gb_u32 reserved[7];
};

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

// gb_finish turns a row's winner key and flags into its token and status.
__device__ __forceinline__ void gb_finish(gb_i32* tokens, gb_i32* status, gb_u32 row, gb_u64 key,
                                          gb_u32 flags) {
    if (flags & GB_FLAG_NONFINITE) {
        tokens[row] = -1;
        status[row] = GB_STATUS_NONFINITE;
    } else if (!(flags & GB_FLAG_FINITE)) {
        tokens[row] = -1;
        status[row] = GB_STATUS_NO_FINITE;
    } else {
        tokens[row] = (gb_i32)(0xFFFFFFFFu - (gb_u32)key);
        status[row] = GB_STATUS_OK;
    }
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

__device__ __forceinline__ gb_u32 gb_lane() { return threadIdx.x % warpSize; }
__device__ __forceinline__ gb_u32 gb_warp() { return threadIdx.x / warpSize; }
__device__ __forceinline__ gb_u32 gb_num_warps() { return blockDim.x / warpSize; }

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
    for (int m = warpSize / 2; m > 0; m >>= 1) {
        v = fmaxf(v, __uint_as_float(__shfl_xor_sync(0xFFFFFFFFu, __float_as_uint(v), m)));
    }
    return v;
#endif
}

// gb_warp_max_u32_all returns the warp's largest value to every lane.
__device__ __forceinline__ gb_u32 gb_warp_max_u32_all(gb_u32 v) {
    for (int m = warpSize / 2; m > 0; m >>= 1) {
        v = gb_max_u32(v, __shfl_xor_sync(0xFFFFFFFFu, v, m));
    }
    return v;
}

// gb_block_reduce_key leaves in thread 0 the block's largest key and the OR of its flags.
__device__ __forceinline__ void gb_block_reduce_key(gb_u64& key, gb_u32& flags, gb_u64* s_key,
                                                    gb_u32* s_flags) {
    for (int d = warpSize / 2; d > 0; d >>= 1) {
        key = gb_max_u64(key, gb_shfl_down_u64(key, d));
        flags |= gb_shfl_down_u32(flags, d);
    }
    if (gb_lane() == 0u) {
        s_key[gb_warp()] = key;
        s_flags[gb_warp()] = flags;
    }
    __syncthreads();
    if (gb_warp() == 0u) {
        bool have = gb_lane() < gb_num_warps();
        key = have ? s_key[gb_lane()] : 0ull;
        flags = have ? s_flags[gb_lane()] : 0u;
        for (int d = warpSize / 2; d > 0; d >>= 1) {
            key = gb_max_u64(key, gb_shfl_down_u64(key, d));
            flags |= gb_shfl_down_u32(flags, d);
        }
    }
}

// gb_block_max_or returns to every thread the block's largest value and OR of flags.
__device__ __forceinline__ void gb_block_max_or(gb_u32& value, gb_u32& flags, gb_u64* s_red,
                                                gb_u64* s_bcast) {
    gb_u32 f = flags;
    for (int d = warpSize / 2; d > 0; d >>= 1) {
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
        for (int d = warpSize / 2; d > 0; d >>= 1) {
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
    for (int d = warpSize / 2; d > 0; d >>= 1) {
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
        for (int d = warpSize / 2; d > 0; d >>= 1) {
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
    for (int d = 1; d < warpSize; d <<= 1) {
        gb_u64 t = gb_shfl_up_u64(incl, d);
        if (lane >= (gb_u32)d) {
            incl += t;
        }
    }
    if (lane == (gb_u32)warpSize - 1u) {
        s_red[gb_warp()] = incl;
    }
    __syncthreads();
    if (gb_warp() == 0u) {
        gb_u64 w = lane < gb_num_warps() ? s_red[lane] : 0ull;
        gb_u64 wincl = w;
        for (int d = 1; d < warpSize; d <<= 1) {
            gb_u64 t = gb_shfl_up_u64(wincl, d);
            if (lane >= (gb_u32)d) {
                wincl += t;
            }
        }
        if (lane < gb_num_warps()) {
            s_red[lane] = wincl - w;
        }
        if (lane == (gb_u32)warpSize - 1u) {
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
        gb_u32 per = GB_BINS / warpSize;
        gb_u32 lo = lane * per;
        gb_u64 local = 0;
        for (gb_u32 b = lo; b < lo + per; ++b) {
            local += mass ? mass[b] : (gb_u64)cnt[b];
        }
        // suffix: the sum over this lane's bins and every higher lane's.
        gb_u64 suffix = local;
        for (int d = 1; d < warpSize; d <<= 1) {
            gb_u64 t = gb_shfl_down_u64(suffix, d);
            if (lane + (gb_u32)d < (gb_u32)warpSize) {
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

// Variants of gumbel_argmax, chosen at compile time (NVRTC -D options, e.g. through the
// CUDA backend's GUMBEL_NVRTC_OPTIONS) so that they can be timed against each other. Every
// setting computes the same tokens; kernelsrc/emu runs each of them.
//   GB_GROUPS      groups of four elements a thread takes per loop trip (1 to 4): their
//                  Philox chains are interleaved, so that independent multiplies overlap,
//                  and the warp agrees on its bound once per trip, not once per group.
//   GB_PREFETCH    1: the next trip's groups are loaded before this trip's work; 0: each
//                  trip loads its own groups first (fewer registers, less in flight).
//   GB_BLOCK_BOUND 1: the warps of a block share their lower bound of the winning score
//                  through one shared word, so a strong logit seen by any warp lets every
//                  warp skip logarithms; 0: each warp knows only its own bound.
//   GB_MIN_BLOCKS  the second argument of gumbel_argmax's __launch_bounds__: blocks of
//                  1024 threads that must fit on one multiprocessor together (2 caps the
//                  registers at 32 per thread; check the compiler's spill report).
//   GB_TILE_BOUND  1: before any noise, the block reduces the largest x·invT of its whole
//                  chunk (one extra read of the chunk beyond the first trip's groups, which
//                  stay in registers), so the bound every warp starts from is
//                  fl(max x·invT + MinGumbel) of the block, not of what it has seen so far:
//                  in a block holding a strong logit only the strong elements need their
//                  logarithms, from the first trip on. Needs GB_BLOCK_BOUND. 0: off.
//   GB_LOG_LOOP    1: a lane runs the logarithms of its elements that need them in a loop
//                  over exactly those elements (lowest first), so a warp pays one pass of
//                  log1pf+logf per element its busiest lane needs, not one per position j
//                  that any lane needs. 0: one guarded evaluation per position.
// The defaults are the variant that compiles without spills (NVRTC 11.8, sm_90: 55
// registers; GB_GROUPS=2 reaches 64 and spills 48 bytes with prefetch, 4 without).
#ifndef GB_GROUPS
#define GB_GROUPS 1
#endif
#ifndef GB_PREFETCH
#define GB_PREFETCH 1
#endif
#ifndef GB_BLOCK_BOUND
#define GB_BLOCK_BOUND 1
#endif
#ifndef GB_MIN_BLOCKS
#define GB_MIN_BLOCKS 1
#endif
#ifndef GB_TILE_BOUND
#define GB_TILE_BOUND 0
#endif
#ifndef GB_LOG_LOOP
#define GB_LOG_LOOP 0
#endif
#if GB_TILE_BOUND && !GB_BLOCK_BOUND
#error "GB_TILE_BOUND needs GB_BLOCK_BOUND"
#endif
#if GB_GROUPS < 1 || GB_GROUPS > 4
#error "GB_GROUPS must be 1, 2, 3 or 4"
#endif

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

// gb_scan_greedy folds the chunk [start, end) into the thread's best key: score = x. A
// thread meets its groups in index order (the groups of one trip too), so a group only
// matters when its largest value beats the best so far strictly, and then its first
// element of that value wins (-0 equals +0, as their order keys do). -Inf never becomes
// a best: a row whose finite logits are all missing ends with status 2 (NaN and +Inf:
// status 1) whatever the key.
template <int KIND>
__device__ __forceinline__ void gb_scan_greedy(const typename gb_io<KIND>::elem* row, gb_u32 start,
                                               gb_u32 end, bool vec, gb_u64& tkey, gb_u32& flags) {
    const gb_u32 stride = 4u * blockDim.x;
    const gb_u32 trip = GB_GROUPS * stride;
    float tbest = -gb_inf();
    gb_u32 g = start + 4u * threadIdx.x;
    float cur[GB_GROUPS][4];
    gb_u32 n[GB_GROUPS];
#if GB_PREFETCH
    gb_load_groups<KIND, GB_GROUPS>(row, g, stride, end, vec, cur, n);
#endif
    for (; g < end; g += trip) {
#if GB_PREFETCH
        float nxt[GB_GROUPS][4];
        gb_u32 nn[GB_GROUPS];
        gb_load_groups<KIND, GB_GROUPS>(row, g + trip, stride, end, vec, nxt, nn);
#else
        gb_load_groups<KIND, GB_GROUPS>(row, g, stride, end, vec, cur, n);
#endif
#pragma unroll
        for (int i = 0; i < GB_GROUPS; ++i) {
            flags |= gb_group_flags(cur[i], n[i]);
            const float mx = gb_max4(cur[i]); // elements past end read as -Inf
            if (mx > tbest) {
                gb_u32 j = 3u;
                j = cur[i][2] == mx ? 2u : j;
                j = cur[i][1] == mx ? 1u : j;
                j = cur[i][0] == mx ? 0u : j;
                tbest = mx;
                tkey = gb_pack(mx, g + (gb_u32)i * stride + j);
            }
        }
#if GB_PREFETCH
        gb_take_groups<GB_GROUPS>(cur, n, nxt, nn);
#endif
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

// gb_tile_bound raises the block's shared bound to fl(fl(m·invT) + MinGumbel), m the
// largest logit of the chunk, and returns it to every thread (block-wide: one barrier).
// The element holding m scores at least that much (its noise is at least MinGumbel and
// rounding is monotone), so it is a lower bound of the block's winning score, and
// fl(max x·invT) = fl(m·invT) because multiplying by invT > 0 and rounding are monotone.
// The thread's first G groups (first, already loaded) count without a second read; the
// rest of its groups are read here and again by the scan (from cache, mostly).
template <int KIND, int G>
__device__ __forceinline__ float gb_tile_bound(const typename gb_io<KIND>::elem* row, gb_u32 g, gb_u32 end,
                                               bool vec, float invT, const float first[G][4],
                                               gb_u32* s_bound) {
    const gb_u32 stride = 4u * blockDim.x;
    float m = -gb_inf();
#pragma unroll
    for (int i = 0; i < G; ++i) {
        m = fmaxf(m, gb_max4(first[i]));
    }
    // Unrolled so that several loads are in flight: nothing else hides their latency here.
#pragma unroll 4
    for (gb_u32 q = g + (gb_u32)G * stride; q < end; q += stride) {
        float x[4];
        gb_load_group<KIND>(row, q, end, vec, x); // missing elements read as -Inf
        m = fmaxf(m, gb_max4(x));
    }
    const float lower = gb_warp_max_f32_all(__fadd_rn(__fmul_rn(m, invT), GB_MIN_GUMBEL));
    if (gb_lane() == 0u) {
        atomicMax(s_bound, gb_orderkey(lower));
    }
    __syncthreads();
    return gb_orderkey_inverse(*(volatile gb_u32*)s_bound);
}

// gb_scan_gumbel folds the chunk [start, end) into the thread's best key with Gumbel
// noise. Each trip first agrees across the warp (and, with GB_BLOCK_BOUND, the block) on
// a lower bound of the row's winning score: the best score a lane has reached, or
// fl(x·invT + MinGumbel) of any element seen, which that element's score cannot fall
// below. A group of four whose fl(max x·invT + MaxGumbel) is below it skips Philox; an
// element whose fl(x·invT + bound(w)) is below it skips its logarithms. Neither changes
// the result: a skipped score is provably below the winner's. The trip count is the same
// for every thread of the block, as the warp reduction requires.
template <int KIND>
__device__ __forceinline__ void gb_scan_gumbel(const typename gb_io<KIND>::elem* row, gb_u32 start,
                                               gb_u32 end, bool vec, float invT, const gb_row_params& p,
                                               gb_u32* s_bound, gb_u64& tkey, gb_u32& flags) {
    const gb_u32 stride = 4u * blockDim.x;
    const gb_u32 trip = GB_GROUPS * stride;
    float tbest = -gb_inf(); // the thread's best score: the score of tkey
    gb_u32 g = start + 4u * threadIdx.x;
    float cur[GB_GROUPS][4];
    gb_u32 n[GB_GROUPS];
#if GB_PREFETCH
    gb_load_groups<KIND, GB_GROUPS>(row, g, stride, end, vec, cur, n);
#endif
#if GB_TILE_BOUND
#if !GB_PREFETCH
    gb_load_groups<KIND, GB_GROUPS>(row, g, stride, end, vec, cur, n);
#endif
    // Every score this block computes, and its winner's, is at least tile: the per-trip
    // bounds of the groups' own maxima below add nothing to it.
    const float tile = gb_tile_bound<KIND, GB_GROUPS>(row, g, end, vec, invT, cur, s_bound);
#endif
    for (gb_u32 g0 = start; g0 < end; g0 += trip) {
#if GB_PREFETCH
        float nxt[GB_GROUPS][4];
        gb_u32 nn[GB_GROUPS];
        gb_load_groups<KIND, GB_GROUPS>(row, g + trip, stride, end, vec, nxt, nn);
#else
        gb_load_groups<KIND, GB_GROUPS>(row, g, stride, end, vec, cur, n);
#endif
        float xs[GB_GROUPS][4]; // -Inf for -Inf logits and for elements past end
        float mx[GB_GROUPS];
#if GB_TILE_BOUND
        float lower = fmaxf(tbest, tile);
#else
        float lower = tbest;
#endif
#pragma unroll
        for (int i = 0; i < GB_GROUPS; ++i) {
            flags |= gb_group_flags(cur[i], n[i]);
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                xs[i][j] = __fmul_rn(cur[i][j], invT);
            }
            mx[i] = gb_max4(xs[i]);
#if !GB_TILE_BOUND
            lower = fmaxf(lower, __fadd_rn(mx[i], GB_MIN_GUMBEL));
#endif
        }
        float wlower = gb_warp_max_f32_all(lower);
#if GB_BLOCK_BOUND
        wlower = gb_share_bound(wlower, s_bound);
#else
        (void)s_bound;
#endif
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
            gb_philox_groups<GB_GROUPS>(c0, p.step_lo, p.step_hi, GB_PURPOSE_GUMBEL, p.seed_lo, p.seed_hi, w);
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
                gb_philox_groups<GB_GROUPS>(c0, p.step_lo, p.step_hi, GB_PURPOSE_GUMBEL_TAIL, p.seed_lo,
                                            p.seed_hi, t);
            } else {
#pragma unroll
                for (int i = 0; i < GB_GROUPS; ++i) {
                    t[i][0] = t[i][1] = t[i][2] = t[i][3] = 0u;
                }
            }
#if GB_LOG_LOOP
            // Bit 4i+j: element j of group i needs its logarithms. The operands of the
            // lowest such element are picked by comparisons (no indexed register arrays,
            // which would go to local memory); the max of keys is order-free.
            gb_u32 mask = 0u;
#pragma unroll
            for (int i = 0; i < GB_GROUPS; ++i) {
#pragma unroll
                for (gb_u32 j = 0; j < 4u; ++j) {
                    mask |= need[i][j] ? 1u << (4u * (gb_u32)i + j) : 0u;
                }
            }
            while (mask != 0u) {
                const gb_u32 low = mask & (0u - mask);
                float xk = 0.0f;
                gb_u32 wk = 0u, tk = 0u, ik = 0u;
#pragma unroll
                for (int i = 0; i < GB_GROUPS; ++i) {
#pragma unroll
                    for (gb_u32 j = 0; j < 4u; ++j) {
                        if (low == 1u << (4u * (gb_u32)i + j)) {
                            xk = xs[i][j];
                            wk = w[i][j];
                            tk = t[i][j];
                            ik = g + (gb_u32)i * stride + j;
                        }
                    }
                }
                mask ^= low;
                const float s = __fadd_rn(xk, gb_gumbel(wk, tk));
                tkey = gb_max_u64(tkey, gb_pack(s, ik));
                tbest = fmaxf(tbest, s);
            }
#else
#pragma unroll
            for (int i = 0; i < GB_GROUPS; ++i) {
#pragma unroll
                for (gb_u32 j = 0; j < 4u; ++j) {
                    if (need[i][j]) {
                        float s = __fadd_rn(xs[i][j], gb_gumbel(w[i][j], t[i][j]));
                        tkey = gb_max_u64(tkey, gb_pack(s, g + (gb_u32)i * stride + j));
                        tbest = fmaxf(tbest, s);
                    }
                }
            }
#endif
        }
#if GB_PREFETCH
        gb_take_groups<GB_GROUPS>(cur, n, nxt, nn);
#endif
        g += trip;
    }
}

template <int KIND>
__device__ __forceinline__ void gb_gumbel_argmax(const typename gb_io<KIND>::elem* __restrict__ logits,
                                                 const gb_row_params* __restrict__ params, gb_i32* tokens,
                                                 gb_i32* status, gb_u64* partials, gb_u32* counters,
                                                 gb_u64 row_stride, gb_u32 vocab) {
    __shared__ gb_u64 s_key[GB_MAX_WARPS];
    __shared__ gb_u32 s_flags[GB_MAX_WARPS];
    __shared__ gb_u32 s_last;
    __shared__ gb_u32 s_bound; // GB_BLOCK_BOUND: the order key of the block's lower bound

    const gb_u32 y = blockIdx.y;
    const gb_u32 nblocks = gridDim.x;
    const gb_row_params p = params[y];
    if (gb_bad_row(p.temperature, vocab)) {
        // Uniform for every block of the row: none touches the counters.
        if (blockIdx.x == 0u && threadIdx.x == 0u) {
            tokens[p.row] = -1;
            status[p.row] = GB_STATUS_BAD_PARAMS;
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

    gb_u64 tkey = 0ull;
    gb_u32 flags = 0u;
    if (p.temperature == 0.0f) {
        gb_scan_greedy<KIND>(row, start, end, vec, tkey, flags);
    } else {
#if GB_BLOCK_BOUND
        // The branch is the same for the whole block (one row per block).
        if (threadIdx.x == 0u) {
            s_bound = 0u; // below the key of every float, -Inf included
        }
        __syncthreads();
#endif
        gb_scan_gumbel<KIND>(row, start, end, vec, 1.0f / p.temperature, p, &s_bound, tkey, flags);
    }
    gb_block_reduce_key(tkey, flags, s_key, s_flags);

    if (nblocks == 1u) {
        if (threadIdx.x == 0u) {
            gb_finish(tokens, status, p.row, tkey, flags);
        }
        return;
    }

    // Split phase: publish the partial, then count arrivals; the last block reduces.
    if (threadIdx.x == 0u) {
        partials[(gb_u64)y * nblocks + blockIdx.x] = tkey;
        if (flags != 0u) {
            atomicOr(&counters[2u * y + 1u], flags);
        }
        __threadfence();
        gb_u32 prev = atomicAdd(&counters[2u * y], 1u);
        s_last = prev == nblocks - 1u ? 1u : 0u;
    }
    __syncthreads();
    if (s_last == 0u) {
        return;
    }
    __threadfence();
    const volatile gb_u64* vpart = partials + (gb_u64)y * nblocks;
    gb_u64 key = 0ull;
    for (gb_u32 i = threadIdx.x; i < nblocks; i += blockDim.x) {
        key = gb_max_u64(key, vpart[i]);
    }
    gb_u32 none = 0u;
    gb_block_reduce_key(key, none, s_key, s_flags);
    if (threadIdx.x == 0u) {
        gb_u32 row_flags = atomicExch(&counters[2u * y + 1u], 0u);
        atomicExch(&counters[2u * y], 0u);
        gb_finish(tokens, status, p.row, key, row_flags);
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

template <int KIND>
__device__ __forceinline__ void gb_categorical(const typename gb_io<KIND>::elem* __restrict__ logits,
                                               const gb_row_params* __restrict__ params, gb_i32* tokens,
                                               gb_i32* status, gb_u32 vocab, gb_u64 row_stride) {
    __shared__ gb_u32 s_cnt[GB_BINS];
    __shared__ gb_u64 s_mass[GB_BINS];
    __shared__ gb_u64 s_red[GB_MAX_WARPS];
    __shared__ gb_u64 s_bcast[2];
    __shared__ gb_u64 s_tile[GB_MAX_TILES];
    __shared__ gb_i32 s_token;

    if (blockIdx.x != 0u) {
        return; // one block per row; extra blocks of a wider grid have nothing to do
    }
    const gb_u32 y = blockIdx.y;
    const gb_row_params p = params[y];
    if (gb_bad_row(p.temperature, vocab)) {
        if (threadIdx.x == 0u) {
            tokens[p.row] = -1;
            status[p.row] = GB_STATUS_BAD_PARAMS;
        }
        return;
    }
    const typename gb_io<KIND>::elem* row = logits + (gb_u64)p.row * row_stride;
    const bool vec = gb_io<KIND>::vec_ok(row);
    const bool topk_on = p.top_k > 0u && p.top_k < vocab;
    const bool topp_on = p.top_p > 0.0f && p.top_p < 1.0f;

    // Pass 1: the largest logit, the flags and (top-k) the histogram of the top digit.
    if (topk_on) {
        for (gb_u32 b = threadIdx.x; b < GB_BINS; b += blockDim.x) {
            s_cnt[b] = 0u;
        }
        __syncthreads();
    }
    gb_u32 mkey = 0u;
    gb_u32 flags = 0u;
    for (gb_u32 g = 4u * threadIdx.x; g < vocab; g += 4u * blockDim.x) {
        float x[4];
        const gb_u32 n = gb_load_group<KIND>(row, g, vocab, vec, x);
        gb_u32 bins[4];
        bool ok[4];
        const gb_u64 zeros[4] = {0ull, 0ull, 0ull, 0ull};
#pragma unroll
        for (gb_u32 j = 0; j < 4u; ++j) {
            ok[j] = j < n;
            gb_u32 k = gb_orderkey(x[j]);
            bins[j] = k >> 24;
            if (ok[j]) {
                flags |= gb_flags(x[j]);
                mkey = gb_max_u32(mkey, k);
            }
        }
        if (topk_on) {
            gb_hist_add(s_cnt, (gb_u64*)0, bins, zeros, ok);
        }
    }
    gb_block_max_or(mkey, flags, s_red, s_bcast);
    if ((flags & GB_FLAG_NONFINITE) || !(flags & GB_FLAG_FINITE)) {
        if (threadIdx.x == 0u) {
            gb_finish(tokens, status, p.row, 0ull, flags);
        }
        return;
    }

    gb_row_state st;
    st.m = gb_orderkey_inverse(mkey);

    if (p.temperature == 0.0f) {
        // Greedy on every path: the first index whose logit equals m.
        gb_u32 first = 0u; // 0xFFFFFFFF - index, largest first
        const gb_u32 stride = 4u * blockDim.x;
        for (gb_u32 g = 4u * threadIdx.x; g < vocab; g += stride) {
            float x[4];
            gb_u32 n = gb_load_group<KIND>(row, g, vocab, vec, x);
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
            tokens[p.row] = (gb_i32)(0xFFFFFFFFu - first);
            status[p.row] = GB_STATUS_OK;
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

    // Top-k: Kk, the k-th largest key counting repeats, by radix select from the top digit.
    gb_u32 kk = 0u;
    if (topk_on) {
        gb_u64 rem = p.top_k;
        gb_u32 prefix = 0u;
        for (int level = 0; level < 4; ++level) {
            const gb_u32 shift = 24u - 8u * (gb_u32)level;
            if (level > 0) {
                const gb_u32 hi_mask = 0xFFFFFFFFu << (shift + 8u);
                for (gb_u32 b = threadIdx.x; b < GB_BINS; b += blockDim.x) {
                    s_cnt[b] = 0u;
                }
                __syncthreads();
                const gb_u64 zeros[4] = {0ull, 0ull, 0ull, 0ull};
                for (gb_u32 g = 4u * threadIdx.x; g < vocab; g += 4u * blockDim.x) {
                    float x[4];
                    const gb_u32 n = gb_load_group<KIND>(row, g, vocab, vec, x);
                    gb_u32 bins[4];
                    bool ok[4];
#pragma unroll
                    for (gb_u32 j = 0; j < 4u; ++j) {
                        gb_u32 k = gb_orderkey(x[j]);
                        ok[j] = j < n && (k & hi_mask) == prefix;
                        bins[j] = (k >> shift) & 0xFFu;
                    }
                    gb_hist_add(s_cnt, (gb_u64*)0, bins, zeros, ok);
                }
            }
            __syncthreads();
            gb_u64 above = 0ull;
            gb_u32 b = gb_select_bin(s_cnt, (const gb_u64*)0, rem, above, s_bcast);
            rem -= above;
            prefix |= b << shift;
        }
        kk = prefix;
    }
    st.threshold = kk;

    // Top-p: Kp, the largest kept key t with sum of q over keys >= t at least target, by
    // radix select on mass. Only bins with mass count: the answer always has mass.
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
                const gb_u32 n = gb_load_group<KIND>(row, g, vocab, vec, x);
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
                gb_u64 z = gb_block_sum_u64(part, s_red, s_bcast);
                gb_u64 pp = __float2ull_rz(__fmul_rn(p.top_p, GB_TWO_POW_32));
                gb_u64 lo = z * pp;
                gb_u64 hi = __umul64hi(z, pp);
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
    const gb_u32 chunk = 4u * blockDim.x;
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
        const gb_u32 n = gb_load_group<KIND>(row, g, vocab, vec, x);
#pragma unroll
        for (gb_u32 j = 0; j < 4u; ++j) {
            if (j < n) {
                tile_part += gb_kept_q(x[j], st);
            }
        }
        if ((c + 1u) % tile_chunks == 0u || c + 1u == nchunks) {
            for (int d = warpSize / 2; d > 0; d >>= 1) {
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
    gb_u32 ph[4];
    gb_philox(0u, p.step_lo, p.step_hi, GB_PURPOSE_CATEGORICAL, p.seed_lo, p.seed_hi, ph);
    const gb_u64 u = ((gb_u64)ph[1] << 32) | ph[0];
    gb_u64 lane_sum = 0ull;  // the mass of this lane's tiles (warp 0)
    gb_u64 lane_excl = 0ull; // the mass of the tiles before them
    if (gb_warp() == 0u) {
        const gb_u32 per = GB_MAX_TILES / warpSize;
        for (gb_u32 i = 0; i < per; ++i) {
            lane_sum += s_tile[gb_lane() * per + i];
        }
        gb_u64 incl = lane_sum;
        for (int d = 1; d < warpSize; d <<= 1) {
            gb_u64 t = gb_shfl_up_u64(incl, d);
            if (gb_lane() >= (gb_u32)d) {
                incl += t;
            }
        }
        lane_excl = incl - lane_sum;
        if (gb_lane() == (gb_u32)warpSize - 1u) {
            s_bcast[0] = incl; // S
        }
    }
    __syncthreads();
    const gb_u64 target = __umul64hi(u, s_bcast[0]);
    __syncthreads();
    if (gb_warp() == 0u) {
        const gb_u32 per = GB_MAX_TILES / warpSize;
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
        for (int m = warpSize / 2; m > 0; m >>= 1) {
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
        const gb_u32 n = gb_load_group<KIND>(row, g, vocab, vec, x);
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
    if (threadIdx.x == 0u) {
        // s_token stays -1 only if S were 0, which cannot happen (see above).
        tokens[p.row] = s_token;
        status[p.row] = s_token >= 0 ? GB_STATUS_OK : GB_STATUS_NO_FINITE;
    }
}

// ---------------------------------------------------------------------------------------
// Entry points (names and arguments: ABI.md).

#define GB_ARGS(T)                                                                            \
    const T *__restrict__ logits, const gb_row_params *__restrict__ params, gb_i32 *tokens,    \
        gb_i32 *status, gb_u64 *partials, gb_u32 *counters, gb_u64 row_stride, gb_u32 vocab

extern "C" __global__ void __launch_bounds__(GB_MAX_THREADS, GB_MIN_BLOCKS) gumbel_argmax_f32(GB_ARGS(float)) {
    gb_gumbel_argmax<GB_F32>(logits, params, tokens, status, partials, counters, row_stride, vocab);
}

extern "C" __global__ void __launch_bounds__(GB_MAX_THREADS, GB_MIN_BLOCKS) gumbel_argmax_f16(GB_ARGS(gb_u16)) {
    gb_gumbel_argmax<GB_F16>(logits, params, tokens, status, partials, counters, row_stride, vocab);
}

extern "C" __global__ void __launch_bounds__(GB_MAX_THREADS, GB_MIN_BLOCKS) gumbel_argmax_bf16(GB_ARGS(gb_u16)) {
    gb_gumbel_argmax<GB_BF16>(logits, params, tokens, status, partials, counters, row_stride, vocab);
}

extern "C" __global__ void __launch_bounds__(GB_MAX_THREADS) categorical_f32(GB_ARGS(float)) {
    (void)partials;
    (void)counters;
    gb_categorical<GB_F32>(logits, params, tokens, status, vocab, row_stride);
}

extern "C" __global__ void __launch_bounds__(GB_MAX_THREADS) categorical_f16(GB_ARGS(gb_u16)) {
    (void)partials;
    (void)counters;
    gb_categorical<GB_F16>(logits, params, tokens, status, vocab, row_stride);
}

extern "C" __global__ void __launch_bounds__(GB_MAX_THREADS) categorical_bf16(GB_ARGS(gb_u16)) {
    (void)partials;
    (void)counters;
    gb_categorical<GB_BF16>(logits, params, tokens, status, vocab, row_stride);
}
