// gumbel_exact (ABI.md, "Exact scores"): where |fl(x' * invT)| reaches GB_EXACT_SCALE a
// float32 score no longer holds the noise, so an element's value there is x' * invT + g
// itself, compared with the float32 operations below, which give every edition the same
// answer. gumbel_argmax leaves a draw whose winning score reaches GB_EXACT_LIMIT with
// status 5; this kernel, one block per row taking its draws in turn, scans the row again
// and finishes them. It is a kernel of its own so that the main scan keeps its registers.
// topn and residual finish their rare rows with the same comparison, in their last block
// (gb_exact_best).

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

// gb_exact_block returns to every thread the block's best value (s_win: a value per
// warp). The block's threads all call it.
__device__ __forceinline__ gb_exact gb_exact_block(gb_exact v, float invT, gb_exact* s_win) {
    v = gb_exact_warp(v, invT);
    if (gb_lane() == 0u) {
        s_win[gb_warp()] = v;
    }
    __syncthreads();
    v = s_win[0];
    for (gb_u32 k = 1u; k < gb_num_warps(); ++k) {
        if (gb_exact_above(s_win[k], v, invT)) {
            v = s_win[k];
        }
    }
    __syncthreads(); // s_win is read before a later call writes it
    return v;
}

// gb_keep_all is gb_exact_scan's default filter: every element takes part.
struct gb_keep_all {
    __device__ __forceinline__ bool operator()(float) const { return true; }
};

// gb_exact_scan is a thread's part of a pass over the whole row at the given step: groups
// of four (one Philox block) 4 * blockDim.x elements apart, keeping the best value by the
// exact comparison among the elements whose x' is finite, that keep(x') lets in, and whose
// value lies below bound's (none: no bound); with logp it also adds the elements to the
// record's raw and processed log-sum-exps.
template <int KIND, typename KEEP = gb_keep_all>
__device__ __forceinline__ gb_exact gb_exact_scan(const typename gb_io<KIND>::elem* row, const gb_row_params& p,
                                                  const gb_processor& pc, gb_u32 vocab, float invT, gb_u32 step_lo,
                                                  gb_u32 step_hi, const gb_exact& bound, bool logp, gb_lse& raw,
                                                  gb_lse& proc, const KEEP& keep = KEEP()) {
    gb_exact best = gb_exact_none();
    for (gb_u32 g = 4u * threadIdx.x; g < vocab; g += 4u * blockDim.x) {
        float x[4], y[4];
        const gb_u32 n = gb_load_group<KIND>(row, g, vocab, false, x);
        gb_u32 w[4], t[4] = {0u, 0u, 0u, 0u};
        gb_philox(g >> 2, step_lo, step_hi, GB_PURPOSE_GUMBEL, p.seed_lo, p.seed_hi, w);
        if (w[0] < GB_TAIL_THRESHOLD || w[1] < GB_TAIL_THRESHOLD || w[2] < GB_TAIL_THRESHOLD ||
            w[3] < GB_TAIL_THRESHOLD) {
            gb_philox(g >> 2, step_lo, step_hi, GB_PURPOSE_GUMBEL_TAIL, p.seed_lo, p.seed_hi, t);
        }
#pragma unroll
        for (gb_u32 j = 0; j < 4u; ++j) {
            const float xp = j < n ? gb_processed(pc, x[j], g + j) : -gb_inf();
            y[j] = __fmul_rn(xp, invT);
            if (fabsf(xp) < gb_inf() && keep(xp)) { // -Inf never wins; NaN and +Inf end the row with status 1
                const gb_exact v = gb_exact_of(xp, invT, gb_gumbel(w[j], t[j]), g + j);
                if (gb_exact_above(v, best, invT) &&
                    (bound.idx == 0xFFFFFFFFu || gb_exact_above(bound, v, invT))) {
                    best = v;
                }
            }
        }
        if (logp) {
            gb_lse_add4(raw, x, gb_max4(x));
            gb_lse_add4(proc, y, gb_max4(y));
        }
    }
    return best;
}

// gb_exact_best returns to every thread the row's largest value at the row's own step
// (draw 0) below bound (none: no bound) among the elements keep lets in, by the exact
// comparison; none where there is no such element. topn and residual finish their rare rows with it. The block's threads
// all call it.
template <int KIND, typename KEEP = gb_keep_all>
__device__ __forceinline__ gb_exact gb_exact_best(const typename gb_io<KIND>::elem* row, const gb_row_params& p,
                                                  const gb_processor& pc, gb_u32 vocab, float invT,
                                                  const gb_exact& bound, gb_exact* s_win, const KEEP& keep = KEEP()) {
    gb_lse unused;
    const gb_exact v =
        gb_exact_scan<KIND, KEEP>(row, p, pc, vocab, invT, p.step_lo, p.step_hi, bound, false, unused, unused, keep);
    return gb_exact_block(v, invT, s_win);
}

// gb_exact_draw finishes draw z of a row left with status 5 (output slot o): the block
// takes the row's best value and the record's two log-sum-exps in one pass. The block's
// threads all call it.
template <int KIND>
__device__ __forceinline__ void gb_exact_draw(const typename gb_io<KIND>::elem* row, const gb_row_params& p,
                                              const gb_processor& pc, gb_u32 z, gb_u64 o, gb_i32* tokens,
                                              gb_i32* status, gb_u32 vocab, float* logprobs, gb_exact* s_win,
                                              gb_u64* s_pair) {
    gb_u32 step_lo, step_hi;
    gb_step_plus(p, z, step_lo, step_hi);
    if (p.flags & GB_FLAG_ADVANCE) {
        // gumbel_argmax has advanced the row's step by D already.
        const gb_u64 s = (((gb_u64)step_hi << 32) | step_lo) - gridDim.z;
        step_lo = (gb_u32)s;
        step_hi = (gb_u32)(s >> 32);
    }
    const float invT = 1.0f / p.temperature;
    const bool logp = (p.flags & GB_FLAG_LOGPROBS) != 0u;
    gb_lse raw, proc;
    gb_lse_init(raw);
    gb_lse_init(proc);
    gb_exact best = gb_exact_scan<KIND>(row, p, pc, vocab, invT, step_lo, step_hi, gb_exact_none(), logp, raw, proc);
    best = gb_exact_block(best, invT, s_win);
    if (logp) {
        gb_block_lse(raw, proc, true, s_pair);
    }
    if (threadIdx.x == 0u && best.idx != 0xFFFFFFFFu) { // status 5 holds a finite winner
        tokens[o] = (gb_i32)best.idx;
        status[o] = GB_STATUS_OK;
        if (logp) {
            const int nl = (pc.flags == 0u && invT == 1.0f) ? 1 : 2;
            const float xr = gb_io<KIND>::load1(row + best.idx);
            gb_write_record_sets(logprobs, o, true, nl, xr, __fmul_rn(best.x, invT), raw, proc);
        }
    }
}

// gb_gumbel_exact is the kernel: block (0, y, 0) finishes, one after the other, the draws
// of launch row y that gumbel_argmax left with status 5, then counts the row's tokens for
// RECORD, which gumbel_argmax left to it: one block per row, so that every draw reads the
// counts from before the launch. Every other block returns at once.
template <int KIND>
__device__ __forceinline__ void gb_gumbel_exact(const typename gb_io<KIND>::elem* __restrict__ logits,
                                                const gb_row_params* params, gb_i32* tokens, gb_i32* status,
                                                gb_u64 row_stride, gb_u32 vocab, float* logprobs, const float* bias,
                                                gb_u32* counts, const gb_u32* mask, const gb_u32* bitmask) {
    __shared__ gb_exact s_win[GB_MAX_WARPS];
    __shared__ gb_u64 s_pair[2 * GB_MAX_WARPS];

    // A batch launches this last, after gumbel_argmax, whose statuses it reads: it may
    // start before the kernel ahead of it ends, and waits here.
    gb_grid_wait();
    if (blockIdx.x != 0u || blockIdx.z != 0u) {
        return;
    }
    const gb_row_params p = params[blockIdx.y];
    if ((p.flags & GB_FLAG_ROUTED) && (p.flags & (GB_FLAG_CATEGORICAL | GB_FLAG_FILTERED))) {
        return;
    }
    if ((p.flags & (GB_FLAGS_RESERVED | GB_FLAG_SHARD)) != 0u || gb_bad_row(p.temperature, vocab)) {
        return; // never left with status 5
    }
    const bool greedy = p.temperature == 0.0f;
    const gb_u32 D = gridDim.z;
    const gb_u64 first = (gb_u64)p.row * D;
    const typename gb_io<KIND>::elem* row = logits + (gb_u64)p.row * row_stride;
    const gb_processor pc = gb_processor_of(p, bias, counts, mask, bitmask, vocab);
    bool pending = false;
    for (gb_u32 z = 0; z < D; ++z) {
        // Read by every thread before thread 0 rewrites it (after the barriers of
        // gb_exact_draw), so the branch is the same for the whole block.
        if (((const volatile gb_i32*)status)[first + z] != GB_STATUS_EXACT) {
            continue;
        }
        pending = true;
        if (greedy) {
            // The arg-max of the logits is exact already: the token and record stand.
            if (threadIdx.x == 0u) {
                status[first + z] = GB_STATUS_OK;
            }
            continue;
        }
        gb_exact_draw<KIND>(row, p, pc, z, first + z, tokens, status, vocab, logprobs, s_win, s_pair);
    }
    if (!pending || threadIdx.x != 0u || !(p.flags & GB_FLAG_RECORD)) {
        return;
    }
    gb_u32* row_counts = counts + (gb_u64)p.row * vocab;
    for (gb_u32 z = 0; z < D; ++z) {
        const gb_i32 tok = tokens[first + z];
        if (status[first + z] != GB_STATUS_OK || tok < 0 || (gb_u32)tok >= vocab) {
            continue;
        }
        const gb_u32 c = row_counts[tok];
        if ((c & GB_COUNT_MASK) != GB_COUNT_MASK) {
            row_counts[tok] = c + 1u; // keeps bit 31, the prompt mark
        }
    }
}
