// Element types and loads: the fixed-width types of a source that NVRTC and hiprtc
// compile without standard headers, exact f16 and bf16 decoding by integer operations,
// the aligned four-element loads of a row, and the checks every kernel makes of a row.

// GB_NVIDIA is 1 where NVRTC compiles for an NVIDIA GPU; HIP (through hip_prelude.h) and
// the CPU emulation (kernelsrc/emu) define their own versions of what PTX spells.
#if defined(__CUDACC__) && !defined(__HIP__) && !defined(__HIPCC__)
#define GB_NVIDIA 1
#else
#define GB_NVIDIA 0
#endif

typedef unsigned int gb_u32;
typedef unsigned long long gb_u64;
typedef unsigned short gb_u16;
typedef int gb_i32;

#define GB_TWO_POW_M32 2.3283064365386962890625e-10f
#define GB_TWO_POW_32 4294967296.0f

__device__ __forceinline__ float gb_inf() { return __uint_as_float(0x7f800000u); }

__device__ __forceinline__ gb_u32 gb_min_u32(gb_u32 a, gb_u32 b) { return a < b ? a : b; }
__device__ __forceinline__ gb_u32 gb_max_u32(gb_u32 a, gb_u32 b) { return a > b ? a : b; }
__device__ __forceinline__ gb_u64 gb_max_u64(gb_u64 a, gb_u64 b) { return a > b ? a : b; }

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

// gb_bad_row reports the rows the ABI answers with status 3: temperature negative, NaN,
// infinite, or so small that 1/T overflows (x·invT would be NaN for x = 0); a vocabulary
// outside [1, GB_MAX_VOCAB].
__device__ __forceinline__ bool gb_bad_row(float t, gb_u32 vocab) {
    if (!(t >= 0.0f) || t == gb_inf()) {
        return true;
    }
    if (t > 0.0f && 1.0f / t == gb_inf()) {
        return true;
    }
    return vocab == 0u || vocab > (gb_u32)GB_MAX_VOCAB;
}

// gb_step_plus is a row's step plus z, mod 2^64.
__device__ __forceinline__ void gb_step_plus(const gb_row_params& p, gb_u32 z, gb_u32& lo, gb_u32& hi) {
    const gb_u64 s = (((gb_u64)p.step_hi << 32) | p.step_lo) + z;
    lo = (gb_u32)s;
    hi = (gb_u32)(s >> 32);
}

// gb_bad_flags reports reserved flag bits, and FlagShard outside gumbel_argmax (which
// checks its shards itself); such a row gets status 3.
__device__ __forceinline__ bool gb_bad_flags(gb_u32 flags) {
    return (flags & (GB_FLAGS_RESERVED | GB_FLAG_SHARD)) != 0u;
}

// gb_max4 is the largest of four values (NaN ignored; -Inf when all are -Inf or NaN).
__device__ __forceinline__ float gb_max4(const float v[4]) {
    return fmaxf(fmaxf(v[0], v[1]), fmaxf(v[2], v[3]));
}

// gb_first_of4 is the index of the first of four values equal to m (3 when none is;
// -0 equals +0).
__device__ __forceinline__ gb_u32 gb_first_of4(const float v[4], float m) {
    gb_u32 j = 3u;
    j = v[2] == m ? 2u : j;
    j = v[1] == m ? 1u : j;
    return v[0] == m ? 0u : j;
}

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

// gb_bool is a flag known at compile time, passed by value (to a generic lambda).
template <bool B>
struct gb_bool {
    static constexpr bool value = B;
};

// gb_load_whole_groups is gb_load_groups for groups known to be whole (g + 4 <= end for
// each) in a row whose vector loads are aligned.
template <int KIND, int G>
__device__ __forceinline__ void gb_load_whole_groups(const typename gb_io<KIND>::elem* row, gb_u32 g,
                                                     gb_u32 stride, float x[G][4]) {
#pragma unroll
    for (int i = 0; i < G; ++i) {
        gb_io<KIND>::load4(row + g + (gb_u32)i * stride, x[i]);
    }
}

// gb_chunk_of is block x's contiguous part [start, end) of a row of vocab elements split
// over nblocks: a multiple of 4 elements long, so that a Philox block never straddles two
// blocks and vector loads stay aligned.
__device__ __forceinline__ void gb_chunk_of(gb_u32 vocab, gb_u32 nblocks, gb_u32 x, gb_u32& start, gb_u32& end) {
    gb_u32 per = vocab / nblocks + (vocab % nblocks != 0u ? 1u : 0u);
    per = (per + 3u) & ~3u;
    const gb_u64 start64 = (gb_u64)x * per;
    start = start64 < vocab ? (gb_u32)start64 : vocab;
    end = start64 + per < vocab ? (gb_u32)(start64 + per) : vocab;
}

// Programmatic dependent launch (sm_90 and later, CUDA only). A kernel the host queues
// with runtime.DependentLauncher may start while the kernel before it on the stream is
// still running: gb_grid_release in the earlier kernel lets it start, and the later one
// calls gb_grid_wait before it reads what the earlier one wrote or writes what it reads,
// and on every path before it exits. Elsewhere (HIP, the emulation, older targets) kernels
// run one after the other and both are no-ops.
__device__ __forceinline__ void gb_grid_wait() {
#if GB_NVIDIA && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void gb_grid_release() {
#if GB_NVIDIA && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}
