// residual (ABI.md): the verification of chains of draft tokens whose drafter's
// probabilities are known. Each launch row is one chain, its positions a RowParams record
// each, from record params[y].top_k through the chain's CHAIN_END record. Warp 0 of every
// block decides the chain from score's records, a lane per position; block 0 writes the
// verdicts of the positions other than the stop, and the launch row's S >= 1 blocks scan
// the stop's row: a Gumbel-max draw over the residual max(p - q, 0) at a rejected draft,
// over p after the last one, with p's draw kept beside the residual's for a residual
// without mass, merged as score merges them. A draw from p whose winner reaches
// GB_EXACT_LIMIT is drawn again by the exact comparison (gb_residual_exact). A position
// with FlagKeptSet has the filtered law as its target: its kept set, rebuilt from the
// descriptor the filtered kernel left at its slot (gb_kept_rule_of), bounds both draws.

// The residual's skip rule is applied only to d below this: past it expf(d) may overflow
// to +Inf, and logf(w) <= d + 1, on which the rule rests, no longer holds.
#define GB_RESIDUAL_SKIP_D 88.0f

// gb_good_chain_row reports whether a residual row's own parameters can be verified: no
// reserved flags and no FlagShard, a positive temperature with a finite inverse, a
// vocabulary in range and, unless the row ends its chain, a draft token in it (the Go
// edition's goodChainRow).
__device__ __forceinline__ bool gb_good_chain_row(const gb_row_params& p, gb_u32 vocab) {
    return (p.flags & (GB_FLAGS_RESERVED | GB_FLAG_SHARD)) == 0u && !gb_bad_row(p.temperature, vocab) && p.temperature > 0.0f &&
           ((p.flags & GB_FLAG_CHAIN_END) != 0u || p.token < vocab);
}

// gb_draft_uniform is philox.DraftUniform: the top 24 bits of word 1 of the
// PURPOSE_SPECULATIVE block at index 0 of the row's step, times 2^-24 (exact).
__device__ __forceinline__ float gb_draft_uniform(const gb_row_params& p) {
    gb_u32 w[4];
    gb_philox(0u, p.step_lo, p.step_hi, GB_PURPOSE_SPECULATIVE, p.seed_lo, p.seed_hi, w);
    return __fmul_rn((float)(w[1] >> 8), 5.9604644775390625e-8f);
}

// gb_draft_accepted decides a position that does not end its chain: its draft token is
// kept when fl(u * q) < expf(lp), q the token's draft probability and lp its processed
// log-probability in score's record. A NaN compares false, and a row that cannot be
// verified rejects.
__device__ __forceinline__ bool gb_draft_accepted(const gb_row_params& p, gb_u32 vocab, const float* draft,
                                                  const float* logprobs) {
    if (!gb_good_chain_row(p, vocab)) {
        return false;
    }
    const float q = draft[(gb_u64)p.topn * vocab + p.token];
    const float lp = logprobs[(gb_u64)GB_RECORD_WORDS * p.row + 1u];
    return __fmul_rn(gb_draft_uniform(p), q) < expf(lp);
}

// gb_chain finds launch row y's chain, records first through end (its CHAIN_END record),
// and the record where it stops: its first rejected draft, or end (the Go edition's
// chain). One warp decides, a lane per record, so that the loads of a long chain overlap
// instead of queuing behind each other; every lane returns the answer. A window starts
// at a record of the chain, so its warp's width of records lies within the chain and the
// GB_CHAIN_SLACK records params holds past its last (ABI.md).
__device__ __forceinline__ void gb_chain(const gb_row_params* params, gb_u32 y, gb_u32 vocab, const float* draft,
                                         const float* logprobs, gb_u32& first, gb_u32& end, gb_u32& stop) {
    const gb_u32 lane = gb_lane(), width = (gb_u32)GB_WARP_SIZE;
    first = params[y].top_k;
    stop = ~0u;
    for (gb_u32 j0 = first;; j0 += width) {
        const gb_u32 j = j0 + lane;
        const gb_row_params r = params[j];
        const bool is_end = (r.flags & GB_FLAG_CHAIN_END) != 0u;
        const int e = gb_first_lane(is_end);
        if (stop == ~0u) {
            // The lanes before the chain's end hold its drafts.
            const bool draft_lane = e < 0 || lane < (gb_u32)e;
            const int rej = gb_first_lane(draft_lane && !gb_draft_accepted(r, vocab, draft, logprobs));
            if (rej >= 0) {
                stop = j0 + (gb_u32)rej;
            }
        }
        if (e >= 0) {
            end = j0 + (gb_u32)e;
            break;
        }
    }
    if (stop == ~0u) {
        stop = end;
    }
}

// gb_kept_rule_of is the kept set of a FlagKeptSet position, from the descriptor at its
// slot and its own min_p, as gb_row_kept tests it (the Go edition's ruleOf).
__device__ __forceinline__ gb_row_state gb_kept_rule_of(const gb_row_params& p, gb_u32 vocab, const float* logprobs) {
    const float* desc = logprobs + (gb_u64)GB_RECORD_WORDS * p.row;
    gb_row_state st;
    st.threshold = __float_as_uint(desc[0]);
    st.m = desc[2];
    st.invT = 1.0f / p.temperature;
    st.bitlen = 32u - (gb_u32)__clz((int)vocab);
    st.two_pow_f = 0.0f; // unused: no mass is summed here
    st.cutoff = gb_weight_cutoff(st.bitlen);
    st.minp_on = p.min_p > 0.0f && p.min_p <= 1.0f;
    st.min_p = p.min_p;
    return st;
}

// gb_kept_by is gb_exact_scan's filter for a kept set.
struct gb_kept_by {
    const gb_row_state& st;
    __device__ __forceinline__ bool operator()(float x) const {
        float w;
        return gb_row_kept(x, st, w);
    }
};

// gb_residual_win is what a thread, then a block, holds of the stop's draw: the best
// residual key, the best key over p and the observations.
struct gb_residual_win {
    gb_u64 key_r, key_p;
    gb_u32 seen;
};

// gb_residual_scan folds the chunk [start, end) into the thread's keys: every element's
// score over p, fl(s + g) with s = fl(x' * invT), and, at a rejected position (REJECT),
// over the residual, fl(logf(w) + g) for w = fl(expf(fl(s - lse)) - q[i]) > 0. The noise,
// and at a rejected position w itself, are computed only for an element that may still
// win one of them. With KEPT the elements the kept set st drops are taken as -Inf, and
// d is fl(fl(fl(x' - m) * invT) - lse), lse then ln(S_kept · 2^-F). Each trip the warp
// (and the block, through s_bound) agrees on lower bounds of the two winning scores: the
// best scores reached, fl(s + MinGumbel) of every element seen (p) and fl(logf(w) +
// MinGumbel) of every residual element whose logarithm was taken. Against them
// an element skips by ABI.md's rule (p: fl(s + MaxGumbel) below; residual: w <= 0 or
// fl(fl(d + 1) + MaxGumbel) below), and, once its Philox word is known, skips its
// logarithms when the word's bound (gb_cheap_bound) puts it below. A skipped score is
// provably below another element's (the residual's rule takes q >= 0, as probabilities
// are), so the keys are those of computing them all. The trip count is the same for
// every thread of the block, as the warp collectives need.
template <int KIND, bool PROC, bool REJECT, bool KEPT>
__device__ __forceinline__ void gb_residual_scan(const typename gb_io<KIND>::elem* row, gb_u32 start, gb_u32 end,
                                                 bool vec, float invT, gb_u32 step_lo, gb_u32 step_hi,
                                                 const gb_row_params& p, const gb_processor& pc, const float* q,
                                                 float lse, const gb_row_state& st, gb_u32* s_bound,
                                                 gb_residual_win& win) {
    const gb_u32 stride = 4u * blockDim.x;
    float low_p = -gb_inf(), low_r = -gb_inf(); // the thread's lower bounds of the winners
    for (gb_u32 g0 = start; g0 < end; g0 += stride) {
        const gb_u32 g = g0 + 4u * threadIdx.x;
        float x[4];
        const gb_u32 n = gb_load_group<KIND>(row, g, end, vec, x); // -Inf past n
        float s[4];
        if (PROC) {
            win.seen |= gb_process_group(pc, g, n, x, s);
        } else {
            win.seen |= gb_group_seen(x, n);
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                s[j] = x[j];
            }
        }
        float dk[4]; // KEPT: fl(fl(x' - m) * invT) of the kept elements, else -Inf
        if (KEPT) {
#pragma unroll
            for (gb_u32 j = 0; j < 4u; ++j) {
                float w;
                const bool keep = j < n && gb_row_kept(s[j], st, w);
                dk[j] = keep ? __fmul_rn(__fadd_rn(s[j], -st.m), invT) : -gb_inf();
                s[j] = keep ? s[j] : -gb_inf();
            }
        }
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            s[j] = __fmul_rn(s[j], invT);
        }
        low_p = fmaxf(low_p, __fadd_rn(gb_max4(s), GB_MIN_GUMBEL));
        const float lower_p = gb_share_bound(gb_warp_max_f32_all(low_p), &s_bound[0]);
        const float lower_r = REJECT ? gb_share_bound(gb_warp_max_f32_all(low_r), &s_bound[1]) : -gb_inf();
        // NaN compares false: its row ends with status 1 whatever the keys.
        // d1 = fl(d + 1) bounds logf(w) from above (w <= expf(d) for q >= 0), so an
        // element whose fl(d1 + bound) is below lower_r needs neither its expf nor its q:
        // both are taken only for the few the Philox word's bound leaves.
        bool need_p[4], need_r[4];
        float d[4];
        bool any = false;
#pragma unroll
        for (gb_u32 j = 0; j < 4u; ++j) {
            need_p[j] = j < n && __fadd_rn(s[j], GB_MAX_GUMBEL) >= lower_p;
            need_r[j] = false;
            d[j] = 0.0f;
            if (REJECT && j < n) {
                d[j] = __fadd_rn(KEPT ? dk[j] : s[j], -lse);
                need_r[j] = !(d[j] < GB_RESIDUAL_SKIP_D &&
                              __fadd_rn(__fadd_rn(d[j], 1.0f), GB_MAX_GUMBEL) < lower_r);
            }
            any = any || need_p[j] || need_r[j];
        }
        if (!any) {
            continue;
        }
        gb_u32 word[4];
        gb_philox(g >> 2, step_lo, step_hi, GB_PURPOSE_GUMBEL, p.seed_lo, p.seed_hi, word);
        float lw[4];
        bool any_tail = false;
#pragma unroll
        for (gb_u32 j = 0; j < 4u; ++j) {
            const float bound = gb_cheap_bound(word[j]);
            need_p[j] = need_p[j] && !(__fadd_rn(s[j], bound) < lower_p);
            lw[j] = 0.0f;
            if (need_r[j] && d[j] < GB_RESIDUAL_SKIP_D && __fadd_rn(__fadd_rn(d[j], 1.0f), bound) < lower_r) {
                need_r[j] = false;
            }
            if (need_r[j]) {
                const float w = __fadd_rn(expf(d[j]), -q[g + j]);
                need_r[j] = w > 0.0f;
                if (need_r[j]) {
                    lw[j] = logf(w);
                    low_r = fmaxf(low_r, __fadd_rn(lw[j], GB_MIN_GUMBEL));
                    need_r[j] = !(__fadd_rn(lw[j], bound) < lower_r);
                }
            }
            any_tail = any_tail || ((need_p[j] || need_r[j]) && word[j] < GB_TAIL_THRESHOLD);
        }
        gb_u32 tail[4] = {0u, 0u, 0u, 0u};
        if (any_tail) {
            gb_philox(g >> 2, step_lo, step_hi, GB_PURPOSE_GUMBEL_TAIL, p.seed_lo, p.seed_hi, tail);
        }
#pragma unroll
        for (gb_u32 j = 0; j < 4u; ++j) {
            if (!need_p[j] && !need_r[j]) {
                continue;
            }
            const float noise = gb_gumbel(word[j], tail[j]);
            if (need_p[j]) {
                const float score = __fadd_rn(s[j], noise);
                win.key_p = gb_max_u64(win.key_p, gb_pack(score, g + j));
                low_p = fmaxf(low_p, score);
            }
            if (need_r[j]) {
                const float score = __fadd_rn(lw[j], noise);
                win.key_r = gb_max_u64(win.key_r, gb_pack(score, g + j));
                low_r = fmaxf(low_r, score);
            }
        }
    }
}

// gb_residual_block leaves in thread 0 the block's merge of w: each warp merges its lanes,
// the warps meet in shared memory, and warp 0 merges them.
__device__ __forceinline__ void gb_residual_block(gb_residual_win& w, gb_u64* s_r, gb_u64* s_p, gb_u32* s_seen) {
    w.key_r = gb_warp_max_u64_all(w.key_r);
    w.key_p = gb_warp_max_u64_all(w.key_p);
    w.seen = gb_warp_or_all(w.seen);
    if (gb_lane() == 0u) {
        s_r[gb_warp()] = w.key_r;
        s_p[gb_warp()] = w.key_p;
        s_seen[gb_warp()] = w.seen;
    }
    __syncthreads();
    if (gb_warp() == 0u) {
        const bool have = gb_lane() < gb_num_warps();
        w.key_r = gb_warp_max_u64_all(have ? s_r[gb_lane()] : 0ull);
        w.key_p = gb_warp_max_u64_all(have ? s_p[gb_lane()] : 0ull);
        w.seen = gb_warp_or_all(have ? s_seen[gb_lane()] : 0u);
    }
}

// gb_residual_exact draws from p at a stop whose float32 winner is inexact, and writes
// the stop's token and status 0: the row's winner (with FlagKeptSet, its kept set's) by
// the exact comparison at the stop's step (a row of status 0 has one). The stop's last block calls it with all its
// threads, for rare rows only, and returns after it. It is not inlined and takes the
// stop's row and processors from its record and the kernel's arguments, so that nothing
// of the scan lives across it.
template <int KIND>
__device__ __noinline__ void gb_residual_exact(const typename gb_io<KIND>::elem* logits, const gb_row_params* rec,
                                               gb_i32* tokens, gb_i32* status, gb_u64 row_stride, gb_u32 vocab,
                                               const float* logprobs, const float* bias, const gb_u32* counts,
                                               const gb_u32* mask, const gb_u32* bitmask, gb_exact* s_win) {
    const gb_row_params p = *rec;
    const gb_processor pc = gb_processor_of(p, bias, counts, mask, bitmask, vocab);
    const float invT = 1.0f / p.temperature;
    const typename gb_io<KIND>::elem* row = logits + (gb_u64)p.row * row_stride;
    gb_exact v;
    if ((p.flags & GB_FLAG_KEPT_SET) != 0u) {
        const gb_row_state st = gb_kept_rule_of(p, vocab, logprobs);
        v = gb_exact_best<KIND>(row, p, pc, vocab, invT, gb_exact_none(), s_win, gb_kept_by{st});
    } else {
        v = gb_exact_best<KIND>(row, p, pc, vocab, invT, gb_exact_none(), s_win);
    }
    if (threadIdx.x == 0u) {
        gb_finish(tokens, status, p.row, gb_pack(v.s, v.idx), GB_SEEN_FINITE);
    }
}

// gb_residual is the kernel: block (x, y) decides where launch row y's chain stops;
// block 0 writes the verdicts of the chain's other positions, and the launch row's
// blocks scan their chunks of the stop's row, the last to arrive merging the blocks' keys
// and writing the drawn token (o = the stop's row): the residual's winner, or p's when
// the residual is empty.
template <int KIND>
__device__ __forceinline__ void gb_residual(const typename gb_io<KIND>::elem* __restrict__ logits,
                                            const gb_row_params* __restrict__ params, gb_i32* tokens,
                                            gb_i32* status, gb_u64* partials, gb_u32* counters, gb_u64 row_stride,
                                            gb_u32 vocab, const float* logprobs, const float* bias,
                                            const gb_u32* counts, const gb_u32* mask, const gb_u32* bitmask,
                                            const float* draft) {
    __shared__ gb_u64 s_r[GB_MAX_WARPS];
    __shared__ gb_u64 s_p[GB_MAX_WARPS];
    __shared__ gb_u32 s_seen[GB_MAX_WARPS];
    __shared__ gb_u32 s_bound[2]; // the order keys of the block's lower bounds: p, residual
    __shared__ gb_u32 s_chain[3]; // the chain's first record, its end and its stop
    __shared__ gb_u32 s_last;
    __shared__ gb_u32 s_exact;               // the draw from p needs gb_residual_exact
    __shared__ gb_exact s_win[GB_MAX_WARPS]; // gb_residual_exact's

    if (blockIdx.z != 0u) {
        return; // residual draws once: a deeper grid's extra blocks have no work
    }
    const gb_u32 y = blockIdx.y; // the chain
    const gb_u32 nblocks = gridDim.x;
    if (gb_warp() == 0u) {
        gb_u32 first, last, stop;
        gb_chain(params, y, vocab, draft, logprobs, first, last, stop);
        if (threadIdx.x == 0u) {
            s_chain[0] = first;
            s_chain[1] = last;
            s_chain[2] = stop;
            s_bound[0] = s_bound[1] = 0u; // below the key of every float, -Inf included
        }
    }
    __syncthreads();
    const gb_u32 first = s_chain[0], last = s_chain[1], stop = s_chain[2];
    if (blockIdx.x == 0u) {
        // The verdicts of the other positions, a thread each.
        for (gb_u32 j = first + threadIdx.x; j <= last && j >= first; j += blockDim.x) {
            if (j != stop) {
                const gb_u64 oj = params[j].row;
                tokens[oj] = j < stop ? (gb_i32)params[j].token : -1;
                status[oj] = j < stop ? GB_STATUS_OK : GB_STATUS_NOT_REACHED;
            }
        }
    }
    const gb_row_params p = params[stop];
    const gb_u64 o = p.row;
    // A FlagShard row is refused only here: like the Go edition, which finds it bad when it
    // binds the row's buffers, not when it decides a chain.
    if (gb_bad_flags(p.flags) || !gb_good_chain_row(p, vocab)) {
        if (blockIdx.x == 0u && threadIdx.x == 0u) {
            tokens[o] = -1;
            status[o] = GB_STATUS_BAD_PARAMS;
        }
        return;
    }

    gb_u32 start, end;
    gb_chunk_of(vocab, nblocks, blockIdx.x, start, end);
    const typename gb_io<KIND>::elem* row = logits + (gb_u64)p.row * row_stride;
    const bool vec = gb_io<KIND>::vec_ok(row);
    const float invT = 1.0f / p.temperature;
    const gb_processor pc = gb_processor_of(p, bias, counts, mask, bitmask, vocab);
    const bool reject = (p.flags & GB_FLAG_CHAIN_END) == 0u;
    const bool kept = (p.flags & GB_FLAG_KEPT_SET) != 0u;
    // A rejected position's draft row and its processed log-sum-exp (with a kept set,
    // ln(S_kept · 2^-F)); no pointer into the draft buffer is formed at a chain's end,
    // whose draft row may not exist.
    const float* q = reject ? draft + (gb_u64)p.topn * vocab : draft;
    const float lse = reject ? logprobs[(gb_u64)GB_RECORD_WORDS * p.row + 3u] : 0.0f;
    gb_row_state st;
    if (kept) {
        st = gb_kept_rule_of(p, vocab, logprobs);
    }
    gb_u32 step_lo, step_hi;
    gb_step_plus(p, 0u, step_lo, step_hi);

    gb_residual_win w;
    w.key_r = w.key_p = 0ull;
    w.seen = 0u;
    // One instantiation per combination, uniform for the block.
#define GB_RESIDUAL_SCAN(PROC, REJECT, KEPT)                                                                        \
    gb_residual_scan<KIND, PROC, REJECT, KEPT>(row, start, end, vec, invT, step_lo, step_hi, p, pc, q, lse, st, s_bound, \
                                               w)
#define GB_RESIDUAL_SCANS(PROC, REJECT)                                                                             \
    if (kept) {                                                                                                      \
        GB_RESIDUAL_SCAN(PROC, REJECT, true);                                                                        \
    } else {                                                                                                         \
        GB_RESIDUAL_SCAN(PROC, REJECT, false);                                                                       \
    }
    if (pc.flags == 0u) {
        if (reject) {
            GB_RESIDUAL_SCANS(false, true)
        } else {
            GB_RESIDUAL_SCANS(false, false)
        }
    } else if (reject) {
        GB_RESIDUAL_SCANS(true, true)
    } else {
        GB_RESIDUAL_SCANS(true, false)
    }
#undef GB_RESIDUAL_SCANS
#undef GB_RESIDUAL_SCAN
    gb_residual_block(w, s_r, s_p, s_seen); // thread 0 holds the block's merge

    if (nblocks > 1u) {
        if (threadIdx.x == 0u) {
            gb_u64* part = partials + (gb_u64)GB_RESIDUAL_STRIDE * ((gb_u64)y * nblocks + blockIdx.x);
            part[0] = w.key_r;
            part[1] = w.key_p;
            if (w.seen != 0u) {
                atomicOr(&counters[2u * y + 1u], w.seen);
            }
            s_last = gb_arrive(&counters[2u * y], nblocks) ? 1u : 0u;
        }
        __syncthreads();
        if (s_last == 0u) {
            return;
        }
        if (threadIdx.x == 0u) {
            const gb_u64* row_part = partials + (gb_u64)GB_RESIDUAL_STRIDE * y * nblocks;
            w.key_r = w.key_p = 0ull;
            for (gb_u32 i = 0; i < nblocks; ++i) {
                w.key_r = gb_max_u64(w.key_r, gb_load_published(row_part + (gb_u64)GB_RESIDUAL_STRIDE * i));
                w.key_p = gb_max_u64(w.key_p, gb_load_published(row_part + (gb_u64)GB_RESIDUAL_STRIDE * i + 1u));
            }
            // Every block ORed its observations in before it arrived.
            w.seen = atomicExch(&counters[2u * y + 1u], 0u);
            atomicExch(&counters[2u * y], 0u);
        }
    }
    // Thread 0 holds the row's keys. The draw from p is gumbel_argmax's, and a winner
    // that reaches GB_EXACT_LIMIT is drawn again by the exact comparison, as gumbel_exact
    // draws it; a residual score never does (ABI.md, "residual").
    if (threadIdx.x == 0u) {
        s_exact = gb_seen_status(w.seen) == GB_STATUS_OK && w.key_r == 0ull && gb_key_inexact(w.key_p) ? 1u : 0u;
    }
    __syncthreads();
    if (s_exact != 0u) {
        gb_residual_exact<KIND>(logits, params + s_chain[2], tokens, status, row_stride, vocab, logprobs, bias, counts, mask,
                                bitmask, s_win);
        return;
    }
    if (threadIdx.x == 0u) {
        gb_finish(tokens, status, o, w.key_r != 0ull ? w.key_r : w.key_p, w.seen);
    }
}
