// Online log-sum-exps and log-probabilities, for the log-probability records and the
// topn values. A pair (m, s) stands for log(s) + m, the running maximum m of the finite
// values added and s the sum of exp(v - m); (-Inf, 0) is the empty set. The
// exponentials are fast::exp, which ABI.md allows (relative error up to 2^-20; records
// agree with the other editions to about 1e-5, not bit for bit): every term is exp of a
// value <= 0, and the largest term is exactly 1.

inline float2 gb_lse_empty() { return float2(-INFINITY, 0.0f); }

inline void gb_lse_add(thread float2& a, float v) {
    if (v == INFINITY || a.x == INFINITY) {
        // x' * invT can overflow: the set's log-sum-exp is then +Inf (as the Go edition).
        a = float2(INFINITY, 1.0f);
        return;
    }
    if (!isfinite(v)) {
        return;  // -Inf adds nothing; a NaN row gets NaN records anyway
    }
    if (v > a.x) {
        float d = a.x - v;
        float scale = fast::exp(d);
        float t = a.y * scale;
        a.y = t + 1.0f;
        a.x = v;
    } else {
        float d = v - a.x;
        a.y = a.y + fast::exp(d);
    }
}

inline float2 gb_lse_merge(float2 a, float2 b) {
    if (b.x > a.x) {
        float2 t = a;
        a = b;
        b = t;
    }
    if (b.x == -INFINITY) {
        return a;  // b empty (or both)
    }
    if (a.x == INFINITY) {
        return float2(INFINITY, 1.0f);
    }
    float d = b.x - a.x;
    float t = b.y * fast::exp(d);
    return float2(a.x, a.y + t);
}

// The log-sum-exp m + log(s).
inline float gb_lse_value(float2 a) {
    if (isinf(a.x)) {
        return a.x;
    }
    return a.x + precise::log(a.y);
}

// The log-probability of v in the set a: (v - m) - log(s). Subtracting the maximum first
// keeps the log-probability of a value near the maximum accurate even where m + log(s)
// would round away log(s) (|m| in the millions, as after large penalties, or near
// float32's largest values).
inline float gb_lse_logprob(float v, float2 a) {
    if (isinf(a.x)) {
        return v - a.x;
    }
    float d = v - a.x;
    return d - precise::log(a.y);
}

// A pair travels through device scratch as one 64-bit partial of two atomic words (see
// gb_key_store): the maximum's bits in the low word, the sum's in the high word.
inline void gb_lse_store(device atomic_uint* words, ulong index, float2 a) {
    atomic_store_explicit(&words[2ul * index], as_type<uint>(a.x), memory_order_relaxed);
    atomic_store_explicit(&words[2ul * index + 1ul], as_type<uint>(a.y), memory_order_relaxed);
}

inline float2 gb_lse_load(device atomic_uint* words, ulong index) {
    uint m = atomic_load_explicit(&words[2ul * index], memory_order_relaxed);
    uint s = atomic_load_explicit(&words[2ul * index + 1ul], memory_order_relaxed);
    return float2(as_type<float>(m), as_type<float>(s));
}

// Merges two log-sum-exp pairs per lane over the SIMD-group.
inline void gb_simd_lse2(thread float2& a, thread float2& b, uint width) {
    for (uint off = width / 2u; off > 0u; off >>= 1) {
        float4 other = simd_shuffle_xor(float4(a.x, a.y, b.x, b.y), ushort(off));
        a = gb_lse_merge(a, float2(other.x, other.y));
        b = gb_lse_merge(b, float2(other.z, other.w));
    }
}

// Merges two log-sum-exp pairs over the threadgroup, returned to every thread.
inline void gb_block_lse(thread float2& a, thread float2& b, gb_thread_ids L, threadgroup float4* scratch) {
    gb_simd_lse2(a, b, L.width);
    if (L.lane == 0u) {
        scratch[L.sg] = float4(a.x, a.y, b.x, b.y);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float2 ra = gb_lse_empty();
    float2 rb = gb_lse_empty();
    for (uint i = L.lane; i < L.nsg; i += L.width) {
        float4 v = scratch[i];
        ra = gb_lse_merge(ra, float2(v.x, v.y));
        rb = gb_lse_merge(rb, float2(v.z, v.w));
    }
    gb_simd_lse2(ra, rb, L.width);
    a = ra;
    b = rb;
    threadgroup_barrier(mem_flags::mem_threadgroup);
}
