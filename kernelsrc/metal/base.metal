// Element types, small helpers and the row checks of the Metal edition: logits of every
// type decode to the exact float32 value of the element, 64-bit helpers stand in for
// what MSL does not promise for 64-bit integers, and the divisions that the ABI wants
// correctly rounded are corrected whatever the precision of Metal's division.

// Threadgroups have at most GB_MAX_THREADS (1024) threads and SIMD-groups at least 8
// lanes (32 on Apple GPUs; Intel Macs have 8, 16 or 32, AMD 32 or 64): at most 128
// SIMD-groups.
#define GB_MAX_SIMDGROUPS (GB_MAX_THREADS / 8)

constant float GB_TWO_POW_M24 = 5.9604645e-08f;  // 2^-24, exact

// ---------------------------------------------------------------------------------------
// Element types. The 16-bit types are decoded from their bit patterns with integer
// operations, so no native half or bfloat type is needed.

// IEEE binary16 from its bits, exactly (subnormals included).
inline float gb_half_to_float(ushort h) {
    uint bits = uint(h);
    uint sign = (bits & 0x8000u) << 16;
    uint e = (bits >> 10) & 0x1Fu;
    uint m = bits & 0x3FFu;
    if (e == 0u) {
        // Zero or subnormal: m * 2^-24, exact in float32.
        float v = float(m) * GB_TWO_POW_M24;
        return as_type<float>(as_type<uint>(v) | sign);
    }
    if (e == 31u) {
        return as_type<float>(sign | 0x7F800000u | (m << 13));
    }
    return as_type<float>(sign | ((e + 112u) << 23) | (m << 13));
}

// bfloat16 is the top half of a float32.
inline float gb_bf16_to_float(ushort b) { return as_type<float>(uint(b) << 16); }

// gb_io<KIND> reads logits of element type KIND (GB_F32, GB_F16 or GB_BF16 of abi.h):
// elem is the stored type, load1 the float32 value of one element.
template <int KIND>
struct gb_io;

template <>
struct gb_io<GB_F32> {
    typedef float elem;
    static inline float load1(device const elem* p) { return *p; }
};

template <>
struct gb_io<GB_F16> {
    typedef ushort elem;
    static inline float load1(device const elem* p) { return gb_half_to_float(*p); }
};

template <>
struct gb_io<GB_BF16> {
    typedef ushort elem;
    static inline float load1(device const elem* p) { return gb_bf16_to_float(*p); }
};

// ---------------------------------------------------------------------------------------
// 64-bit helpers.

inline ulong gb_join_u64(uint lo, uint hi) { return (ulong(hi) << 32) | ulong(lo); }

// 64-bit min and max written out: MSL's integer min and max are not promised for 64-bit
// types in every language version.
inline ulong gb_max_u64(ulong a, ulong b) { return a > b ? a : b; }
inline ulong gb_min_u64(ulong a, ulong b) { return a < b ? a : b; }

// High 64 bits of the 128-bit product a*b.
inline ulong gb_mul_hi64(ulong a, ulong b) {
    ulong a0 = a & 0xFFFFFFFFul;
    ulong a1 = a >> 32;
    ulong b0 = b & 0xFFFFFFFFul;
    ulong b1 = b >> 32;
    ulong p00 = a0 * b0;
    ulong p01 = a0 * b1;
    ulong p10 = a1 * b0;
    ulong p11 = a1 * b1;
    ulong mid = (p00 >> 32) + (p01 & 0xFFFFFFFFul) + (p10 & 0xFFFFFFFFul);
    return p11 + (p01 >> 32) + (p10 >> 32) + (mid >> 32);
}

// The row's step plus d, mod 2^64: draw z uses step + z, and ADVANCE adds D.
inline ulong gb_step_plus(thread const gb_row_params& p, uint d) {
    return gb_join_u64(p.step_lo, p.step_hi) + ulong(d);
}

// ---------------------------------------------------------------------------------------
// Launch shape.

// Per-thread identity of the launch, as the kernel attributes give it.
struct gb_thread_ids {
    uint tid;    // thread index in the threadgroup
    uint T;      // threads per threadgroup
    uint lane;   // index in the SIMD-group
    uint sg;     // SIMD-group index in the threadgroup
    uint width;  // threads per SIMD-group
    uint nsg;    // SIMD-groups per threadgroup
};

// The chunk [begin, end) of a row that threadgroup bx of S reduces: 4-aligned, so that
// one Philox block serves four consecutive elements of one thread.
inline void gb_chunk(uint vocab, uint S, uint bx, thread ulong& begin, thread ulong& end) {
    ulong chunk = ((ulong(vocab) + ulong(S) - 1ul) / ulong(S) + 3ul) & ~3ul;
    begin = ulong(bx) * chunk;
    end = gb_min_u64(ulong(vocab), begin + chunk);
}

// The device-scope fence of MSL 3.2; before it, the split phase relies on the order of
// device atomics at the coherence point (see gb_arrive).
inline void gb_device_fence() {
#if __METAL_VERSION__ >= 320
    atomic_thread_fence(mem_flags::mem_device, memory_order_seq_cst, thread_scope_device);
#endif
}

// ---------------------------------------------------------------------------------------
// Correctly rounded division.

// fl(1/t) for t > 0, correctly rounded whatever the precision of the division: the
// quotient is moved to whichever neighbour leaves the smaller exact residual 1 - t*q.
inline float gb_recip_rn(float t) {
    float q = 1.0f / t;
    if (!(q >= 1.17549435e-38f) || isinf(q)) {
        return q;  // subnormal or overflowing reciprocal: left as the division gives it
    }
    for (int i = 0; i < 4; ++i) {
        float e = fma(-t, q, 1.0f);
        if (e == 0.0f) {
            break;
        }
        uint qb = as_type<uint>(q);
        float q2 = as_type<float>(e > 0.0f ? qb + 1u : qb - 1u);
        float e2 = fma(-t, q2, 1.0f);
        if (abs(e2) < abs(e)) {
            q = q2;
        } else {
            break;
        }
    }
    return q;
}

// Moves q, an approximation of a/b within a few units in the last place, to the
// correctly rounded quotient: to whichever neighbour leaves the smaller exact residual
// a - b*q (for a normal quotient the residual is exact in one fused multiply-add).
inline float gb_div_correct(float a, float b, float q) {
    if (!(abs(q) >= 1.17549435e-38f) || isinf(q)) {
        return q;  // zero, subnormal or overflowing quotient: left as the division gives it
    }
    // Below 2^-60 the residual would fall among the subnormals and lose its exactness:
    // work on a * 2^64 and scale back, exactly, since the quotient is normal (and, below
    // 2^60, cannot overflow on the way).
    float scale = 1.0f;
    if (abs(a) < as_type<float>(0x21800000u) && abs(q) < as_type<float>(0x5D800000u)) {
        a = a * as_type<float>(0x5F800000u);
        q = q * as_type<float>(0x5F800000u);
        scale = as_type<float>(0x1F800000u);
    }
    for (int i = 0; i < 4; ++i) {
        float e = fma(-b, q, a);
        if (e == 0.0f) {
            break;
        }
        uint qb = as_type<uint>(q);
        // Toward the exact quotient: up in magnitude when the residual has q's sign.
        bool up = (e > 0.0f) == (q > 0.0f);
        float q2 = as_type<float>(up ? qb + 1u : qb - 1u);
        float e2 = fma(-b, q2, a);
        if (abs(e2) < abs(e)) {
            q = q2;
        } else {
            break;
        }
    }
    return q * scale;
}

// fl(a/b) for b > 0 finite, correctly rounded whatever the precision of Metal's division
// (up to 2.5 units in the last place): the repetition penalty divides, and the ABI wants
// one rounding.
inline float gb_div_rn(float a, float b) { return gb_div_correct(a, b, a / b); }

// ---------------------------------------------------------------------------------------
// Row checks: status 3.

// A temperature that is negative, NaN, infinite or so small that 1/T overflows (x * invT
// would then be NaN for x = 0), or a vocabulary outside [1, GB_MAX_VOCAB].
inline bool gb_bad_row(float t, uint vocab) {
    if (!(t >= 0.0f) || isinf(t) || vocab == 0u || vocab > uint(GB_MAX_VOCAB)) {
        return true;
    }
    return t > 0.0f && isinf(gb_recip_rn(t));
}

// A reserved flag bit set.
// Reserved flag bits, and FlagShard outside gumbel_argmax (which checks its shards
// itself): status 3.
inline bool gb_bad_flags(uint flags) { return (flags & (GB_FLAGS_RESERVED | GB_FLAG_SHARD)) != 0u; }
