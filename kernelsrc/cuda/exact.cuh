// Exact scores (ABI.md, "Exact scores"): where |fl(x' * invT)| reaches GB_EXACT_SCALE a
// float32 score no longer holds the noise, so an element's value there is x' * invT + g
// itself, and Gumbel-max compares values with the float32 operations below, which give
// every edition the same answer. A block whose best float32 score reaches
// GB_EXACT_LIMIT finds its winner this way (gb_exact_block), and the draw's last block
// then merges the blocks' winners the same way (gb_exact_merge).

// gb_exact is an element's value: its float32 score s, or (exact) x' * invT + g.
struct gb_exact {
    float x, g, s;
    gb_u32 exact; // 1: the value is x' * invT + g
    gb_u32 idx;   // global index; 0xFFFFFFFF: none
};

__device__ __forceinline__ gb_exact gb_exact_none() {
    gb_exact v;
    v.x = v.g = v.s = 0.0f;
    v.exact = 0u;
    v.idx = 0xFFFFFFFFu;
    return v;
}

__device__ __forceinline__ gb_exact gb_exact_of(float x, float invT, float g, gb_u32 idx) {
    const float y = __fmul_rn(x, invT);
    gb_exact v;
    v.x = x;
    v.g = g;
    v.s = __fadd_rn(y, g);
    v.exact = fabsf(y) < GB_EXACT_SCALE ? 0u : 1u;
    v.idx = idx;
    return v;
}

__device__ __forceinline__ int gb_cmp(float a, float b) { return a > b ? 1 : (a < b ? -1 : 0); }

// gb_within2 reports finite, nonzero a and b of one sign within a factor 2 of each other:
// then a - b is exact (Sterbenz).
__device__ __forceinline__ bool gb_within2(float a, float b) {
    const float fa = fabsf(a), fb = fabsf(b);
    if (a == 0.0f || b == 0.0f || (a > 0.0f) != (b > 0.0f) || !(fa < gb_inf()) || !(fb < gb_inf())) {
        return false;
    }
    return fa <= __fmul_rn(2.0f, fb) && fb <= __fmul_rn(2.0f, fa);
}

// gb_two_sum is Knuth's TwoSum: s = fl(a + b) and its exact rounding error e.
__device__ __forceinline__ void gb_two_sum(float a, float b, float& s, float& e) {
    s = __fadd_rn(a, b);
    const float bb = __fadd_rn(s, -a);
    e = __fadd_rn(__fadd_rn(a, -__fadd_rn(s, -bb)), __fadd_rn(b, -bb));
}

// gb_sign_sum is the sign of p + e + ga - gb, as a float-float sum.
__device__ __forceinline__ int gb_sign_sum(float p, float e, float ga, float gb) {
    float dg, dg_err, t, t_err;
    gb_two_sum(ga, -gb, dg, dg_err);
    gb_two_sum(p, dg, t, t_err);
    const float r = __fadd_rn(__fadd_rn(t_err, e), dg_err);
    return gb_cmp(__fadd_rn(t, r), 0.0f);
}

// gb_exact_sign is the sign of value(a) - value(b). A product's rounding error is exact
// (a fused multiply-add), values within a factor 2 subtract exactly, and values that are
// not within a factor 2 of each other lie thousands apart.
__device__ __forceinline__ int gb_exact_sign(const gb_exact& a, const gb_exact& b, float invT) {
    if (!a.exact && !b.exact) {
        return gb_cmp(a.s, b.s);
    }
    if (a.exact && b.exact) {
        if (!gb_within2(a.x, b.x)) {
            return gb_cmp(a.x, b.x);
        }
        const float dx = __fadd_rn(a.x, -b.x);
        const float p = __fmul_rn(dx, invT);
        if (!(fabsf(p) < gb_inf())) {
            return gb_cmp(a.x, b.x);
        }
        return gb_sign_sum(p, __fmaf_rn(dx, invT, -p), a.g, b.g);
    }
    // One float32 score f against one exact value q: s_f - (p + e) - g_q.
    const gb_exact& f = a.exact ? b : a;
    const gb_exact& q = a.exact ? a : b;
    const float p = __fmul_rn(q.x, invT);
    int sign;
    if (!gb_within2(f.s, p)) {
        sign = gb_cmp(f.s, p);
    } else {
        sign = gb_sign_sum(__fadd_rn(f.s, -p), -__fmaf_rn(q.x, invT, -p), 0.0f, q.g);
    }
    return a.exact ? -sign : sign;
}

// gb_exact_above reports whether a's value exceeds b's, ties to the lower index; no value
// (idx 0xFFFFFFFF) is below every other.
__device__ __forceinline__ bool gb_exact_above(const gb_exact& a, const gb_exact& b, float invT) {
    if (a.idx == 0xFFFFFFFFu || b.idx == 0xFFFFFFFFu) {
        return b.idx == 0xFFFFFFFFu && a.idx != 0xFFFFFFFFu;
    }
    const int d = gb_exact_sign(a, b, invT);
    return d != 0 ? d > 0 : a.idx < b.idx;
}

// gb_element_gumbel is the noise of global element i at the draw's step.
__device__ __forceinline__ float gb_element_gumbel(const gb_row_params& p, gb_u32 step_lo, gb_u32 step_hi,
                                                   gb_u32 i) {
    gb_u32 w[4], t[4] = {0u, 0u, 0u, 0u};
    gb_philox(i >> 2, step_lo, step_hi, GB_PURPOSE_GUMBEL, p.seed_lo, p.seed_hi, w);
    if (w[i & 3u] < GB_TAIL_THRESHOLD) {
        gb_philox(i >> 2, step_lo, step_hi, GB_PURPOSE_GUMBEL_TAIL, p.seed_lo, p.seed_hi, t);
    }
    return gb_gumbel(w[i & 3u], t[i & 3u]);
}

// gb_exact_at is the value of row element i (global index goff + i).
template <int KIND>
__device__ __forceinline__ gb_exact gb_exact_at(const typename gb_io<KIND>::elem* row, const gb_processor& pc,
                                                const gb_row_params& p, float invT, gb_u32 step_lo, gb_u32 step_hi,
                                                gb_u32 goff, gb_u32 i) {
    const float x = gb_processed(pc, gb_io<KIND>::load1(row + i), i);
    if (!(fabsf(x) < gb_inf())) {
        return gb_exact_none(); // -Inf never wins; NaN and +Inf fail the row
    }
    return gb_exact_of(x, invT, gb_element_gumbel(p, step_lo, step_hi, goff + i), goff + i);
}

// gb_exact_warp leaves in every lane the warp's best value.
__device__ __forceinline__ gb_exact gb_exact_warp(gb_exact v, float invT) {
#pragma unroll
    for (int d = GB_WARP_SIZE / 2; d > 0; d >>= 1) {
        gb_exact o;
        o.x = gb_shfl_xor_f32(v.x, d);
        o.g = gb_shfl_xor_f32(v.g, d);
        o.s = gb_shfl_xor_f32(v.s, d);
        o.exact = __shfl_xor_sync(0xFFFFFFFFu, v.exact, d);
        o.idx = __shfl_xor_sync(0xFFFFFFFFu, v.idx, d);
        if (gb_exact_above(o, v, invT)) {
            v = o;
        }
    }
    return v;
}

// gb_exact_block is the block's winner over its chunk [start, end) by the exact
// comparison, returned to thread 0 (s_win: one gb_exact per warp).
template <int KIND>
__device__ __forceinline__ gb_exact gb_exact_block(const typename gb_io<KIND>::elem* row, gb_u32 start, gb_u32 end,
                                                   const gb_processor& pc, const gb_row_params& p, float invT,
                                                   gb_u32 step_lo, gb_u32 step_hi, gb_u32 goff, gb_exact* s_win) {
    gb_exact best = gb_exact_none();
    for (gb_u32 i = start + threadIdx.x; i < end; i += blockDim.x) {
        const gb_exact v = gb_exact_at<KIND>(row, pc, p, invT, step_lo, step_hi, goff, i);
        if (gb_exact_above(v, best, invT)) {
            best = v;
        }
    }
    best = gb_exact_warp(best, invT);
    if (gb_lane() == 0u) {
        s_win[gb_warp()] = best;
    }
    __syncthreads();
    if (threadIdx.x == 0u) {
        for (gb_u32 k = 1u; k < blockDim.x / GB_WARP_SIZE; ++k) {
            if (gb_exact_above(s_win[k], best, invT)) {
                best = s_win[k];
            }
        }
    }
    return best;
}

// gb_exact_merge is the draw's winner over the S blocks' published keys by the exact
// comparison, their values taken again from the logits and the stream; run by one
// thread.
template <int KIND>
__device__ __forceinline__ gb_exact gb_exact_merge(const typename gb_io<KIND>::elem* row, const gb_processor& pc,
                                                   const gb_row_params& p, float invT, gb_u32 step_lo,
                                                   gb_u32 step_hi, gb_u32 goff, const gb_u64* part, gb_u32 nblocks) {
    gb_exact best = gb_exact_none();
    for (gb_u32 b = 0u; b < nblocks; ++b) {
        const gb_u64 k = gb_load_published(part + b);
        if (k == 0ull) {
            continue; // a block without a finite logit
        }
        const gb_u32 i = (0xFFFFFFFFu - (gb_u32)k) - goff;
        const gb_exact v = gb_exact_at<KIND>(row, pc, p, invT, step_lo, step_hi, goff, i);
        if (gb_exact_above(v, best, invT)) {
            best = v;
        }
    }
    return best;
}
