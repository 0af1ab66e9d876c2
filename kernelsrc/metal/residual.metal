// residual (ABI.md): the verification of chains of draft tokens whose drafter's
// probabilities are known. Each launch row of an (S, n, 1) grid is one chain: params
// holds a record per position, launch row y's chain starts at record params[y].top_k and
// runs through the first CHAIN_END record from there. Thread 0 of every threadgroup walks
// the chain and decides its stop (the first rejected draft, or the CHAIN_END record) from
// score's records, the draft buffer and the acceptance uniforms, so every threadgroup of
// the row agrees without talking to the others. Threadgroup 0 writes the verdicts of the
// positions before the stop and past it; all S threadgroups draw the stop's token with
// two Gumbel-max keys per element (over the residual max(p - q, 0) and over p), and with
// S > 1 the last threadgroup of the row to arrive merges the S pairs of keys, with the
// split phase of gumbel_argmax. A draw from p whose winner reaches GB_EXACT_LIMIT is
// drawn again by the exact comparison (gb_exact_best). A position with FlagKeptSet has
// the filtered law as its target: the kept set of the descriptor the filtered kernel
// left at its slot bounds both draws, and the exact redraw is the filtered kernel's
// (gb_exact_kept).

// Threadgroup scratch of residual.
struct gb_residual_scratch {
    threadgroup ulong* key;   // [GB_MAX_SIMDGROUPS]
    threadgroup uint* seen;   // [GB_MAX_SIMDGROUPS]
    threadgroup uint* last;   // [1]
    threadgroup uint* chain;  // [3] the chain's first record, its CHAIN_END record and its stop, from thread 0
    threadgroup gb_exact* win;  // [GB_MAX_SIMDGROUPS] for a draw from p by the exact comparison
};

// Whether a chain row's own parameters can be verified: a good and positive
// temperature, no reserved flag and no FlagShard and, unless it ends its chain, a draft
// token in the vocabulary. The chain's decision applies it to every row it reads
// (a failing row is a rejection).
inline bool gb_chain_row_good(thread const gb_row_params& p, uint vocab) {
    return (p.flags & (GB_FLAGS_RESERVED | GB_FLAG_SHARD)) == 0u && !gb_bad_row(p.temperature, vocab) && p.temperature > 0.0f &&
           ((p.flags & GB_FLAG_CHAIN_END) != 0u || p.token < vocab);
}

// philox.DraftUniform: the top 24 bits of word 1 of the PURPOSE_SPECULATIVE block at
// index 0 of the row's step, times 2^-24 (both exact in float).
inline float gb_draft_uniform(thread const gb_row_params& p) {
    uint4 b = gb_philox(uint4(0u, p.step_lo, p.step_hi, GB_PURPOSE_SPECULATIVE), p.seed_lo, p.seed_hi);
    float top = float(b.y >> 8);
    return top * GB_TWO_POW_M24;
}

// Whether a position that is not its chain's last keeps its draft token:
// fl(u * q) < exp(lp), q the token's draft probability and lp its processed
// log-probability in score's record. A NaN compares false: rejected.
inline bool gb_chain_accepted(gb_buffers B, thread const gb_row_params& p) {
    if (!gb_chain_row_good(p, B.vocab)) {
        return false;
    }
    float u = gb_draft_uniform(p);
    float q = B.draft[ulong(p.topn) * ulong(B.vocab) + ulong(p.token)];
    float uq = u * q;
    float lp = B.logprobs[ulong(GB_RECORD_WORDS) * ulong(p.row) + 1ul];
    float pt = precise::exp(lp);
    return uq < pt;
}

// Launch row y's chain: records first = params[y].top_k through end, its first CHAIN_END
// record, and its stop, the first rejected draft or end. Draft positions are decided in
// order, and none past the stop.
inline void gb_chain_walk(gb_buffers B, uint y, thread uint& first, thread uint& end, thread uint& stop) {
    first = B.params[y].top_k;
    bool stopped = false;
    stop = 0u;
    for (end = first;; ++end) {
        const gb_row_params p = B.params[end];
        if ((p.flags & GB_FLAG_CHAIN_END) != 0u) {
            break;
        }
        if (!stopped && !gb_chain_accepted(B, p)) {
            stopped = true;
            stop = end;
        }
    }
    if (!stopped) {
        stop = end;
    }
}

// The stop's row, the same in every thread.
template <int KIND>
struct gb_residual_row {
    device const typename gb_io<KIND>::elem* logits;  // the row
    gb_processor P;
    gb_stream st;
    float invT;
    bool end;               // a CHAIN_END row: every draft accepted, the draw is from p
    device const float* q;  // the draft row (a rejected position only)
    float lse;              // the processed log-sum-exp of score's record (a rejected position only)
    // FlagKeptSet: the target is the filtered law of the kept set that W and f describe,
    // from the descriptor at the row's slot and its min_p; lse is then ln(S_kept * 2^-F).
    bool kept;
    gb_weights W;
    gb_filters f;
};

// What one thread (then the threadgroup, then the row) has found: the best key over the
// residual and the best Gumbel-max key over p (the fallback), with their scores, which
// the noise bounds compare with.
struct gb_residual_acc {
    ulong best_r;
    float score_r;
    ulong best_p;
    float score_p;
    uint seen;
};

inline void gb_residual_offer(thread ulong& best, thread float& best_score, float score, uint idx) {
    ulong key = gb_pack(score, idx);
    if (key > best) {
        best = key;
        best_score = score;
    }
}

// One thread's part of the chunk [begin, end): groups of four elements, T groups apart.
// An element takes its noise only for a key it may still win with (ABI.md's skip rule,
// with the Go edition's comparisons): fl(s + g) needs fl(s + MAX_GUMBEL) at least the
// thread's best so far, and the residual's fl(log(w) + g) needs w > 0 and
// fl(fl(d + 1) + MAX_GUMBEL) at least the best so far. With q >= 0 both bounds hold
// (g <= MAX_GUMBEL, log(w) <= fl(d + 1)), and a thread scans in increasing index, so a
// skipped element could not have beaten the key it was compared with: the winner does
// not depend on how the row is split.
template <int KIND>
inline void gb_residual_scan(gb_residual_row<KIND> R, ulong begin, ulong end, gb_thread_ids L,
                             thread gb_residual_acc& a) {
    for (ulong g = begin + 4ul * ulong(L.tid); g < end; g += 4ul * ulong(L.T)) {
        uint base = uint(g);
        uint count = uint(gb_min_u64(4ul, end - g));
        gb_group_words words = gb_group_words_empty();
        for (uint j = 0u; j < count; ++j) {
            uint idx = base + j;
            float x0 = gb_io<KIND>::load1(R.logits + idx);
            float x = gb_process_seen(x0, idx, R.P, a.seen);
            float wk;
            if (R.kept && !gb_is_kept(x, R.W, R.f, wk)) {
                continue;  // dropped by the filters: in neither draw
            }
            float s = x * R.invT;
            float w = 0.0f;
            bool cand_r = false;
            if (!R.end) {
                float d = s - R.lse;
                if (R.kept) {
                    float dm = x - R.W.m;
                    float a_k = dm * R.invT;
                    d = a_k - R.lse;
                }
                float e = precise::exp(d);
                w = e - R.q[idx];
                if (w > 0.0f) {
                    float d1 = d + 1.0f;
                    float bound_r = d1 + GB_MAX_GUMBEL;
                    cand_r = bound_r >= a.score_r;
                }
            }
            float bound_p = s + GB_MAX_GUMBEL;
            bool cand_p = bound_p >= a.score_p;
            if (cand_p && s == -INFINITY) {
                // -Inf plus any noise is -Inf: the key needs no noise.
                gb_residual_offer(a.best_p, a.score_p, s, idx);
                cand_p = false;
            }
            if (!cand_r && !cand_p) {
                continue;
            }
            float gn = gb_group_gumbel(words, R.st, base >> 2, j);
            if (cand_p) {
                float score = s + gn;
                gb_residual_offer(a.best_p, a.score_p, score, idx);
            }
            if (cand_r) {
                float lw = precise::log(w);
                float score = lw + gn;
                gb_residual_offer(a.best_r, a.score_r, score, idx);
            }
        }
    }
}

// Run by one thread with the row's keys and observations: the stop's slot gets the
// residual's winner, or p's when the residual holds no mass, and the status.
inline void gb_residual_end(gb_buffers B, ulong o, gb_residual_acc a) {
    int st = gb_seen_status(a.seen);
    ulong best = a.best_r != 0ul ? a.best_r : a.best_p;
    // residual writes no record: the flags passed leave logprobs alone.
    gb_finish(B, 0u, o, int(0xFFFFFFFFu - uint(best)), st, float4(0.0f));
}

// The split phase (S > 1): publishes the threadgroup's two keys at partials words
// GB_RESIDUAL_STRIDE*(by*S + bx) and + 1 and its observations in the row's flags counter;
// the last threadgroup of the row merges the S pairs into a (in every thread) and returns
// true.
inline bool gb_residual_split(gb_buffers B, uint3 group, uint S, gb_thread_ids L, gb_residual_scratch tg,
                              thread gb_residual_acc& a) {
    const uint by = group.y;
    const ulong stride = ulong(GB_RESIDUAL_STRIDE);
    const ulong slot = (ulong(by) * ulong(S) + ulong(group.x)) * stride;
    if (L.tid == 0u) {
        gb_key_store(B.partials, slot, a.best_r);
        gb_key_store(B.partials, slot + 1ul, a.best_p);
        if (a.seen != 0u) {
            atomic_fetch_or_explicit(&B.counters[2u * by + 1u], a.seen, memory_order_relaxed);
        }
    }
    if (!gb_arrive(&B.counters[2u * by], S, L, tg.last)) {
        return false;
    }
    gb_residual_acc all = {0ul, -INFINITY, 0ul, -INFINITY, 0u};
    const ulong row_base = ulong(by) * ulong(S) * stride;
    for (uint i = L.tid; i < S; i += L.T) {
        const ulong q = row_base + ulong(i) * stride;
        all.best_r = gb_max_u64(all.best_r, gb_key_load(B.partials, q));
        all.best_p = gb_max_u64(all.best_p, gb_key_load(B.partials, q + 1ul));
    }
    if (L.tid == 0u) {
        all.seen = atomic_load_explicit(&B.counters[2u * by + 1u], memory_order_relaxed);
    }
    uint unused_seen = 0u;
    gb_block_max_or(all.best_r, all.seen, L, tg.key, tg.seen);
    gb_block_max_or(all.best_p, unused_seen, L, tg.key, tg.seen);
    if (L.tid == 0u) {
        // Leave the row's counters as the launch found them: zero.
        atomic_store_explicit(&B.counters[2u * by], 0u, memory_order_relaxed);
        atomic_store_explicit(&B.counters[2u * by + 1u], 0u, memory_order_relaxed);
    }
    a = all;
    return true;
}

// gb_residual is the kernel: threadgroup (bx, by) finds where launch row by's chain
// stops; threadgroup 0 writes the verdicts of its other positions (slot o = row), and
// every threadgroup of the row draws the stop's token into the stop's slot. LOGPROBS,
// ADVANCE, RECORD, ROUTED and the filters are not residual's: rows are verified whatever
// they say, and nothing is recorded or advanced.
template <int KIND>
inline void gb_residual(device const typename gb_io<KIND>::elem* logits, gb_buffers B, uint3 group, uint3 groups,
                        gb_thread_ids L, gb_residual_scratch tg) {
    const uint bx = group.x;
    const uint by = group.y;
    const uint S = groups.x;
    if (group.z != 0u) {
        return;  // residual draws once per row: a grid deeper than 1 leaves the rest idle
    }
    if (L.tid == 0u) {
        uint first, end, stop;
        gb_chain_walk(B, by, first, end, stop);
        tg.chain[0] = first;
        tg.chain[1] = end;
        tg.chain[2] = stop;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const uint first = tg.chain[0];
    const uint last = tg.chain[1];
    const uint stop = tg.chain[2];
    if (bx == 0u) {
        // The positions other than the stop: accepted drafts before it, not reached after.
        for (uint j = first + L.tid; j <= last; j += L.T) {
            if (j == stop) {
                continue;
            }
            const gb_row_params pj = B.params[j];
            if (j < stop) {
                gb_finish(B, 0u, ulong(pj.row), int(pj.token), GB_STATUS_OK, float4(0.0f));
            } else {
                gb_finish(B, 0u, ulong(pj.row), -1, GB_STATUS_NOT_REACHED, float4(0.0f));
            }
        }
    }
    const gb_row_params p = B.params[stop];
    const ulong o = ulong(p.row);
    if (gb_bad_flags(p.flags) || !gb_chain_row_good(p, B.vocab)) {
        if (bx == 0u && L.tid == 0u) {
            gb_finish(B, 0u, o, -1, GB_STATUS_BAD_PARAMS, float4(0.0f));
        }
        return;
    }
    gb_residual_row<KIND> R;
    R.logits = logits + ulong(p.row) * B.row_stride;
    R.P = gb_processor_of(p, B.bias, B.counts, B.mask, B.bitmask, B.vocab);
    R.st = gb_stream_of(p, 0u);
    R.invT = gb_recip_rn(p.temperature);
    R.end = (p.flags & GB_FLAG_CHAIN_END) != 0u;
    // A CHAIN_END row has no draft row or record to read: no pointer into them is formed.
    R.q = R.end ? B.draft : B.draft + ulong(p.topn) * ulong(B.vocab);
    R.lse = R.end ? 0.0f : B.logprobs[ulong(GB_RECORD_WORDS) * ulong(p.row) + 3ul];
    R.kept = (p.flags & GB_FLAG_KEPT_SET) != 0u;
    R.W = gb_weights_of(0.0f, R.invT, B.vocab);
    R.f = gb_filters{0u, false, 0.0f};
    if (R.kept) {
        device const float* desc = B.logprobs + ulong(GB_RECORD_WORDS) * ulong(p.row);
        R.W = gb_weights_of(desc[2], R.invT, B.vocab);
        R.f = gb_filters{as_type<uint>(desc[0]), p.min_p > 0.0f && p.min_p <= 1.0f, p.min_p};
    }

    ulong begin, end;
    gb_chunk(B.vocab, S, bx, begin, end);
    gb_residual_acc a = {0ul, -INFINITY, 0ul, -INFINITY, 0u};
    gb_residual_scan<KIND>(R, begin, end, L, a);
    uint unused_seen = 0u;
    gb_block_max_or(a.best_r, a.seen, L, tg.key, tg.seen);
    gb_block_max_or(a.best_p, unused_seen, L, tg.key, tg.seen);
    if (S > 1u && !gb_residual_split(B, group, S, L, tg, a)) {
        return;
    }
    // The draw from p is gumbel_argmax's: a winner that reaches GB_EXACT_LIMIT is drawn
    // again by the exact comparison, as gumbel_exact draws it; a residual score never
    // does (ABI.md, "residual"). Every thread holds the row's keys.
    if (gb_seen_status(a.seen) == GB_STATUS_OK && a.best_r == 0ul && gb_key_inexact(a.best_p)) {
        if (R.kept) {
            // The filtered kernel's redraw over the same kept set; only the token is read.
            a.best_p = gb_pack(0.0f, gb_exact_kept<KIND>(R.logits, B.vocab, R.P, R.W, R.f, R.st, L, tg.win));
        } else {
            gb_exact v = gb_exact_best<KIND>(R.logits, R.P, B.vocab, R.st, R.invT, gb_exact_none(), L, tg.win);
            a.best_p = gb_pack(v.s, v.idx);
        }
    }
    if (L.tid == 0u) {
        gb_residual_end(B, o, a);
    }
}
