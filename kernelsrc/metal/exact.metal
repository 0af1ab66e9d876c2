// gumbel_exact (ABI.md, "Exact scores"): where |fl(x' * invT)| reaches GB_EXACT_SCALE a
// float32 score no longer holds the noise, so an element's value there is x' * invT + g
// itself, compared with the float32 operations below (the CUDA and Go editions make the
// same ones). gumbel_argmax leaves a draw whose winning score reaches GB_EXACT_LIMIT with
// status 5; this kernel, one threadgroup per row taking its draws in turn, scans the row
// again and finishes them. Each operation is its own statement, unfused.

// Whether a winner's packed key has a score of at least GB_EXACT_LIMIT in magnitude: only
// then can an element valued exactly win or be misordered (ABI.md, "Exact scores").
inline bool gb_exact_needed(ulong key) { return !(abs(gb_orderkey_inverse(uint(key >> 32))) < GB_EXACT_LIMIT); }

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

// Threadgroup scratch of gumbel_exact.
struct gb_exact_scratch {
    threadgroup gb_exact* win;  // [GB_MAX_SIMDGROUPS]
    threadgroup float4* lse;    // [GB_MAX_SIMDGROUPS]
};

// Finishes draw z of a row left with status 5 (output slot o): each thread takes groups of
// four across the whole row, keeping its best value by the exact comparison and the
// record's two log-sum-exps, and the threadgroup merges them. Every thread calls it.
template <int KIND>
inline void gb_exact_draw(device const typename gb_io<KIND>::elem* row, gb_buffers B, thread const gb_row_params& p,
                          gb_processor P, uint z, uint draws, ulong o, gb_thread_ids L, gb_exact_scratch tg) {
    gb_stream st = gb_stream_of(p, z);
    if ((p.flags & GB_FLAG_ADVANCE) != 0u) {
        // gumbel_argmax has advanced the row's step by D already.
        ulong step = gb_join_u64(st.step_lo, st.step_hi) - ulong(draws);
        st.step_lo = uint(step);
        st.step_hi = uint(step >> 32);
    }
    const float invT = gb_recip_rn(p.temperature);
    const bool want_lp = (p.flags & GB_FLAG_LOGPROBS) != 0u;
    const bool proc_is_raw = (p.flags & GB_FLAGS_PROCESSORS) == 0u && invT == 1.0f;
    gb_exact best = gb_exact_none();
    float2 raw = gb_lse_empty();
    float2 proc = gb_lse_empty();
    for (uint g = 4u * L.tid; g < B.vocab; g += 4u * L.T) {
        uint count = min(4u, B.vocab - g);
        gb_group_words words = gb_group_words_empty();
        for (uint j = 0u; j < count; ++j) {
            float x0 = gb_io<KIND>::load1(row + g + j);
            float x = gb_processed(x0, g + j, P);
            if (want_lp) {
                gb_lse_add(raw, x0);
                if (x != -INFINITY) {
                    float xs = x * invT;
                    gb_lse_add(proc, xs);
                }
            }
            if (abs(x) < INFINITY) {  // -Inf never wins; NaN and +Inf ended the draw with status 1
                float gn = gb_group_gumbel(words, st, g >> 2, j);
                gb_exact v = gb_exact_of(x, invT, gn, g + j);
                if (gb_exact_above(v, best, invT)) {
                    best = v;
                }
            }
        }
    }
    best = gb_exact_threadgroup(best, invT, L, tg.win);
    if (want_lp) {
        gb_block_lse(raw, proc, L, tg.lse);
    }
    if (L.tid != 0u || best.idx == 0xFFFFFFFFu) {
        return;  // status 5 holds a finite winner
    }
    float4 rec = float4(0.0f);
    if (want_lp) {
        float2 proc_set = proc_is_raw ? raw : proc;
        float x = gb_io<KIND>::load1(row + best.idx);
        float v = best.x * invT;
        rec = float4(gb_lse_logprob(x, raw), gb_lse_logprob(v, proc_set), gb_lse_value(raw), gb_lse_value(proc_set));
    }
    gb_finish(B, p.flags, o, int(best.idx), GB_STATUS_OK, rec);
}

// Threadgroup (0, y, 0) finishes, one after the other, the draws of launch row y that
// gumbel_argmax left with status 5, then counts the row's tokens for RECORD, which
// gumbel_argmax left to it: one threadgroup per row, so that every draw reads the counts
// from before the launch. Every other threadgroup returns at once.
template <int KIND>
inline void gb_gumbel_exact(device const typename gb_io<KIND>::elem* logits, gb_buffers B, uint3 group, uint3 groups,
                            gb_thread_ids L, gb_exact_scratch tg) {
    const uint draws = groups.z;
    if (group.x != 0u || group.z != 0u || draws > uint(GB_MAX_DRAWS)) {
        return;
    }
    const gb_row_params p = B.params[group.y];
    if ((p.flags & GB_FLAG_ROUTED) != 0u && (p.flags & (GB_FLAG_CATEGORICAL | GB_FLAG_FILTERED)) != 0u) {
        return;  // another kernel's row (categorical or filtered)
    }
    if ((p.flags & (GB_FLAGS_RESERVED | GB_FLAG_SHARD)) != 0u || gb_bad_row(p.temperature, B.vocab)) {
        return;  // never left with status 5
    }
    const ulong first = ulong(p.row) * ulong(draws);
    device const typename gb_io<KIND>::elem* row = logits + ulong(p.row) * B.row_stride;
    const gb_processor P = gb_processor_of(p, B.bias, B.counts, B.mask, B.bitmask, B.vocab);
    bool pending = false;
    for (uint z = 0u; z < draws; ++z) {
        // Every thread reads the slot before thread 0 rewrites it (the barriers that end
        // gb_exact_draw come between), so the branch is the same for the threadgroup.
        int st = B.status[first + ulong(z)];
        threadgroup_barrier(mem_flags::mem_device);
        if (st != GB_STATUS_EXACT) {
            continue;
        }
        pending = true;
        if (p.temperature == 0.0f) {
            // The arg-max of the logits is exact already: the token and record stand.
            if (L.tid == 0u) {
                atomic_store_explicit((device atomic_int*)&B.status[first + ulong(z)], GB_STATUS_OK,
                                      memory_order_relaxed);
            }
            continue;
        }
        gb_exact_draw<KIND>(row, B, p, P, z, draws, first + ulong(z), L, tg);
    }
    if (!pending || L.tid != 0u || (p.flags & GB_FLAG_RECORD) == 0u) {
        return;
    }
    device uint* counts = B.counts + ulong(p.row) * ulong(B.vocab);
    for (uint z = 0u; z < draws; ++z) {
        int tok = atomic_load_explicit(&B.tokens[first + ulong(z)], memory_order_relaxed);
        if (tok < 0 || uint(tok) >= B.vocab) {
            continue;  // a draw whose status is not 0
        }
        uint c = counts[tok];
        if ((c & GB_COUNT_MASK) != GB_COUNT_MASK) {
            counts[tok] = c + 1u;  // saturating; bit 31 (a prompt token) is kept
        }
    }
}
