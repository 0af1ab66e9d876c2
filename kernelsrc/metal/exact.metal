// Exact scores (ABI.md, "Exact scores"): where |fl(x' * invT)| reaches GB_EXACT_SCALE a
// float32 score no longer holds the noise, so an element's value there is x' * invT + g
// itself, compared with the float32 operations below (the CUDA and Go editions make the
// same ones). A threadgroup whose best float32 score reaches GB_EXACT_LIMIT finds its
// winner this way (gb_exact_block), and the draw's last threadgroup merges the winners
// the same way (gb_exact_merge). Each operation is its own statement, unfused.

// An element's value: its float32 score s, or (exact) x' * invT + g.
struct gb_exact {
    float x;
    float g;
    float s;
    uint exact;  // 1: the value is x' * invT + g
    uint idx;    // global index; 0xFFFFFFFF: none
};

inline gb_exact gb_exact_none() { return gb_exact{0.0f, 0.0f, 0.0f, 0u, 0xFFFFFFFFu}; }

inline gb_exact gb_exact_of(float x, float invT, float g, uint idx) {
    float y = x * invT;
    float s = y + g;
    return gb_exact{x, g, s, abs(y) < GB_EXACT_SCALE ? 0u : 1u, idx};
}

inline int gb_cmp(float a, float b) { return a > b ? 1 : (a < b ? -1 : 0); }

// Finite, nonzero a and b of one sign within a factor 2 of each other: a - b is exact.
inline bool gb_within2(float a, float b) {
    float fa = abs(a);
    float fb = abs(b);
    if (a == 0.0f || b == 0.0f || (a > 0.0f) != (b > 0.0f) || !(fa < INFINITY) || !(fb < INFINITY)) {
        return false;
    }
    float fa2 = 2.0f * fa;
    float fb2 = 2.0f * fb;
    return fa <= fb2 && fb <= fa2;
}

// The sign of p + e + ga - gb, as a float-float sum.
inline int gb_sign_sum(float p, float e, float ga, float gb) {
    float dg, dg_err, t, t_err;
    gb_two_sum(ga, -gb, dg, dg_err);
    gb_two_sum(p, dg, t, t_err);
    float r1 = t_err + e;
    float r = r1 + dg_err;
    float sum = t + r;
    return gb_cmp(sum, 0.0f);
}

// The sign of value(a) - value(b): a product's rounding error is exact (fma), values
// within a factor 2 subtract exactly, and values that are not lie thousands apart.
inline int gb_exact_sign(gb_exact a, gb_exact b, float invT) {
    if (a.exact == 0u && b.exact == 0u) {
        return gb_cmp(a.s, b.s);
    }
    if (a.exact != 0u && b.exact != 0u) {
        if (!gb_within2(a.x, b.x)) {
            return gb_cmp(a.x, b.x);
        }
        float dx = a.x - b.x;
        float p = dx * invT;
        if (!(abs(p) < INFINITY)) {
            return gb_cmp(a.x, b.x);
        }
        float e = fma(dx, invT, -p);
        return gb_sign_sum(p, e, a.g, b.g);
    }
    // One float32 score f against one exact value q: s_f - (p + e) - g_q.
    gb_exact f = a.exact != 0u ? b : a;
    gb_exact q = a.exact != 0u ? a : b;
    float p = q.x * invT;
    int sign;
    if (!gb_within2(f.s, p)) {
        sign = gb_cmp(f.s, p);
    } else {
        float d = f.s - p;
        float e = fma(q.x, invT, -p);
        sign = gb_sign_sum(d, -e, 0.0f, q.g);
    }
    return a.exact != 0u ? -sign : sign;
}

// Whether a's value exceeds b's, ties to the lower index; none is below every value.
inline bool gb_exact_above(gb_exact a, gb_exact b, float invT) {
    if (a.idx == 0xFFFFFFFFu || b.idx == 0xFFFFFFFFu) {
        return b.idx == 0xFFFFFFFFu && a.idx != 0xFFFFFFFFu;
    }
    int d = gb_exact_sign(a, b, invT);
    return d != 0 ? d > 0 : a.idx < b.idx;
}

// The value of element i of a row (global index goff + i), whose logit is x0.
inline gb_exact gb_exact_at(float x0, uint i, gb_processor P, gb_stream st, float invT, uint goff) {
    float x = gb_processed(x0, i, P);
    if (!(abs(x) < INFINITY)) {
        return gb_exact_none();  // -Inf never wins; NaN and +Inf fail the row
    }
    uint gi = goff + i;
    gb_group_words words = gb_group_words_empty();
    float g = gb_group_gumbel(words, st, gi >> 2, gi & 3u);
    return gb_exact_of(x, invT, g, gi);
}

// The SIMD-group's best value, in every lane.
inline gb_exact gb_exact_simd(gb_exact v, float invT, uint width) {
    for (uint off = width / 2u; off > 0u; off >>= 1) {
        float4 of = simd_shuffle_xor(float4(v.x, v.g, v.s, 0.0f), ushort(off));
        uint2 ou = simd_shuffle_xor(uint2(v.exact, v.idx), ushort(off));
        gb_exact o = gb_exact{of.x, of.y, of.z, ou.x, ou.y};
        if (gb_exact_above(o, v, invT)) {
            v = o;
        }
    }
    return v;
}

// The threadgroup's best value, in every thread (scratch: one entry per SIMD-group).
inline gb_exact gb_exact_threadgroup(gb_exact v, float invT, gb_thread_ids L, threadgroup gb_exact* scratch) {
    v = gb_exact_simd(v, invT, L.width);
    if (L.lane == 0u) {
        scratch[L.sg] = v;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    gb_exact best = scratch[0];
    for (uint k = 1u; k < L.nsg; ++k) {
        if (gb_exact_above(scratch[k], best, invT)) {
            best = scratch[k];
        }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    return best;
}

// A Gumbel threadgroup whose best float32 score (in key) reaches GB_EXACT_LIMIT finds its
// winner by the exact comparison.
inline bool gb_exact_needed(ulong key) {
    return key != 0ul && !(abs(gb_orderkey_inverse(uint(key >> 32))) < GB_EXACT_LIMIT);
}
