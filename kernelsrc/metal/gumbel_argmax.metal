// gumbel_argmax: greedy rows (temperature 0) and Gumbel-max rows. Threadgroup (bx, by,
// bz) of an (S, n, D) grid reduces its chunk of row params[by].row, draw bz, to one
// packed key (and, with GB_FLAG_LOGPROBS, the raw and processed log-sum-exp pairs); with
// S > 1 the last threadgroup of the draw to arrive reduces the S partials.

// Threadgroup scratch of gumbel_argmax.
struct gb_gumbel_scratch {
    threadgroup ulong* key;   // [GB_MAX_SIMDGROUPS]
    threadgroup uint* seen;   // [GB_MAX_SIMDGROUPS]
    threadgroup float4* lse;  // [GB_MAX_SIMDGROUPS]
    threadgroup uint* last;   // [1]
};

// A threadgroup's row and draw, the same in every thread.
template <int KIND>
struct gb_argmax_row {
    device const typename gb_io<KIND>::elem* logits;  // the row
    gb_processor P;
    gb_stream st;
    bool greedy;
    float invT;
    bool want_lp;      // GB_FLAG_LOGPROBS
    bool proc_is_raw;  // the processed distribution is the raw one: one log-sum-exp serves
    uint goff;         // the global index of element 0: a shard's offset, else 0
};

// What one thread (then the threadgroup, then the draw) has found.
struct gb_argmax_acc {
    ulong best;        // the largest packed key, 0 for none
    float best_score;  // its score, which the noise bound compares with
    uint seen;         // observations
    float2 raw;        // log-sum-exp of the raw logits (GB_FLAG_LOGPROBS)
    float2 proc;       // of the processed distribution (GB_FLAG_LOGPROBS, unless proc_is_raw)
};

inline void gb_argmax_offer(thread gb_argmax_acc& a, float score, uint idx) {
    ulong key = gb_pack(score, idx);
    if (key > a.best) {
        a.best = key;
        a.best_score = score;
    }
}

// One thread's part of the chunk [begin, end) of a greedy row: groups of four elements,
// T groups apart, scored by x'.
template <int KIND>
inline void gb_scan_greedy(gb_argmax_row<KIND> R, ulong begin, ulong end, gb_thread_ids L,
                           thread gb_argmax_acc& a) {
    for (ulong g = begin + 4ul * ulong(L.tid); g < end; g += 4ul * ulong(L.T)) {
        uint base = uint(g);
        uint count = uint(gb_min_u64(4ul, end - g));
        for (uint j = 0u; j < count; ++j) {
            uint idx = base + j;
            float x0 = gb_io<KIND>::load1(R.logits + idx);
            if (R.want_lp) {
                gb_lse_add(a.raw, x0);
            }
            float x = gb_process_seen(x0, idx, R.P, a.seen);
            if (R.want_lp && !R.proc_is_raw) {
                gb_lse_add(a.proc, x);
            }
            gb_argmax_offer(a, x, R.goff + idx);
        }
    }
}

// One thread's part of the chunk [begin, end) of a Gumbel row, scored by
// fl(fl(x' * invT) + g). An element whose score cannot reach the best one even with the
// largest noise skips its noise.
template <int KIND>
inline void gb_scan_gumbel(gb_argmax_row<KIND> R, ulong begin, ulong end, gb_thread_ids L,
                           thread gb_argmax_acc& a) {
    for (ulong g = begin + 4ul * ulong(L.tid); g < end; g += 4ul * ulong(L.T)) {
        uint base = uint(g);
        uint count = uint(gb_min_u64(4ul, end - g));
        gb_group_words words = gb_group_words_empty();
        for (uint j = 0u; j < count; ++j) {
            uint idx = base + j;
            float x0 = gb_io<KIND>::load1(R.logits + idx);
            if (R.want_lp) {
                gb_lse_add(a.raw, x0);
            }
            float x = gb_process_seen(x0, idx, R.P, a.seen);
            float score;
            if (x == -INFINITY) {
                score = -INFINITY;
            } else {
                float xs = x * R.invT;
                if (R.want_lp && !R.proc_is_raw) {
                    gb_lse_add(a.proc, xs);
                }
                float bound = xs + GB_MAX_GUMBEL;
                if (bound < a.best_score) {
                    continue;
                }
                float gn = gb_group_gumbel(words, R.st, (R.goff + base) >> 2, j);
                score = xs + gn;
            }
            gb_argmax_offer(a, score, R.goff + idx);
        }
    }
}

// The token's record: raw and processed log-probabilities and log-normalisers (ABI.md,
// "The log-probability record").
template <int KIND>
inline float4 gb_argmax_record(gb_argmax_row<KIND> R, uint tok, float2 raw, float2 proc) {
    float x = gb_io<KIND>::load1(R.logits + tok);
    float2 proc_set = R.proc_is_raw ? raw : proc;
    float xp = gb_processed(x, tok, R.P);
    float v = R.greedy ? xp : xp * R.invT;
    return float4(gb_lse_logprob(x, raw), gb_lse_logprob(v, proc_set), gb_lse_value(raw), gb_lse_value(proc_set));
}

// Run by one thread once the draw's winner is known: the slot and the row's end-of-draws
// work.
template <int KIND>
inline void gb_argmax_end(gb_buffers B, thread const gb_row_params& p, gb_argmax_row<KIND> R, ulong o, uint y, uint n,
                          uint draws, gb_argmax_acc a) {
    int st = gb_seen_status(a.seen);
    uint tok = 0xFFFFFFFFu - uint(a.best);
    float4 rec = float4(0.0f);
    if (R.want_lp && st == GB_STATUS_OK) {
        rec = gb_argmax_record<KIND>(R, tok, a.raw, a.proc);
    }
    gb_finish(B, p.flags, o, int(tok), st, rec);
    if (st == GB_STATUS_OK && gb_exact_needed(a.best)) {
        // A score this large may have lost the noise to float32 rounding: gumbel_exact
        // finishes the draw (ABI.md, "Exact scores"); the token and record stay until then.
        st = GB_STATUS_EXACT;
        atomic_store_explicit((device atomic_int*)&B.status[o], st, memory_order_relaxed);
    }
    if ((p.flags & GB_FLAG_SHARD) != 0u) {
        B.shard[o] = gb_shard_key(a.best, st);
    }
    gb_row_done(B, p, y, n, draws);
}

// The split phase (S > 1): publishes the threadgroup's partial at partials word
// p = (bz*n + by)*S + bx (pairs at n*D*S + 2p and + 1) and its observations in the draw's
// flags counter; the last threadgroup of the draw reduces the S partials and ends the
// draw.
template <int KIND>
inline void gb_argmax_split(gb_buffers B, thread const gb_row_params& p, gb_argmax_row<KIND> R, ulong o, uint3 group,
                            uint3 groups, gb_thread_ids L, gb_gumbel_scratch tg, gb_argmax_acc a) {
    const uint S = groups.x;
    const uint n = groups.y;
    const uint draws = groups.z;
    const uint d = group.z * n + group.y;  // this draw of this launch row
    const ulong slot = ulong(d) * ulong(S) + ulong(group.x);
    const ulong lse_base = ulong(n) * ulong(draws) * ulong(S);
    if (L.tid == 0u) {
        gb_key_store(B.partials, slot, a.best);
        if (R.want_lp) {
            gb_lse_store(B.partials, lse_base + 2ul * slot, a.raw);
            gb_lse_store(B.partials, lse_base + 2ul * slot + 1ul, a.proc);
        }
        if (a.seen != 0u) {
            atomic_fetch_or_explicit(&B.counters[2u * d + 1u], a.seen, memory_order_relaxed);
        }
    }
    if (!gb_arrive(&B.counters[2u * d], S, L, tg.last)) {
        return;
    }
    gb_argmax_acc all = {0ul, -INFINITY, 0u, gb_lse_empty(), gb_lse_empty()};
    for (uint i = L.tid; i < S; i += L.T) {
        ulong q = ulong(d) * ulong(S) + ulong(i);
        all.best = gb_max_u64(all.best, gb_key_load(B.partials, q));
        if (R.want_lp) {
            all.raw = gb_lse_merge(all.raw, gb_lse_load(B.partials, lse_base + 2ul * q));
            all.proc = gb_lse_merge(all.proc, gb_lse_load(B.partials, lse_base + 2ul * q + 1ul));
        }
    }
    if (L.tid == 0u) {
        all.seen = atomic_load_explicit(&B.counters[2u * d + 1u], memory_order_relaxed);
    }
    gb_block_max_or(all.best, all.seen, L, tg.key, tg.seen);
    if (R.want_lp) {
        gb_block_lse(all.raw, all.proc, L, tg.lse);
    }
    if (L.tid == 0u) {
        // Leave the draw's counters as the launch found them: zero.
        atomic_store_explicit(&B.counters[2u * d], 0u, memory_order_relaxed);
        atomic_store_explicit(&B.counters[2u * d + 1u], 0u, memory_order_relaxed);
        gb_argmax_end<KIND>(B, p, R, o, group.y, n, draws, all);
    }
}

template <int KIND>
inline void gb_gumbel_argmax(device const typename gb_io<KIND>::elem* logits, gb_buffers B, uint3 group, uint3 groups,
                             gb_thread_ids L, gb_gumbel_scratch tg) {
    const uint bx = group.x;
    const uint by = group.y;
    const uint bz = group.z;
    const uint S = groups.x;
    const uint draws = groups.z;
    if (draws > uint(GB_MAX_DRAWS)) {
        return;  // not a launch the kernels serve (ABI.md): nothing is written
    }
    // A copy: ADVANCE rewrites the step in params once every threadgroup is past it.
    const gb_row_params p = B.params[by];
    if ((p.flags & GB_FLAG_ROUTED) != 0u && (p.flags & (GB_FLAG_CATEGORICAL | GB_FLAG_FILTERED)) != 0u) {
        return;  // another kernel's row (categorical or filtered)
    }
    const ulong o = ulong(p.row) * ulong(draws) + ulong(bz);
    const float temp = p.temperature;
    // A shard's offset keeps Philox's groups of four aligned; a shard writes neither
    // records nor counts, which need the merged token.
    const bool in_shard = (p.flags & GB_FLAG_SHARD) != 0u;
    const bool bad_shard = in_shard && ((B.vocab_offset & 3u) != 0u || ulong(B.vocab_offset) + ulong(B.vocab) >
                                        ulong(GB_MAX_VOCAB) || (p.flags & (GB_FLAG_LOGPROBS | GB_FLAG_RECORD)) != 0u);
    if (gb_bad_row(temp, B.vocab) || (p.flags & GB_FLAGS_RESERVED) != 0u || bad_shard) {
        // Every threadgroup of the row sees the same parameters and leaves at once; the
        // counters are not touched, and a row whose parameters are not trusted gets no
        // RECORD or ADVANCE.
        if (bx == 0u && L.tid == 0u) {
            gb_finish_shard(B, p.flags, o, 0ul, GB_STATUS_BAD_PARAMS, float4(0.0f));
        }
        return;
    }
    gb_argmax_row<KIND> R;
    R.logits = logits + ulong(p.row) * B.row_stride;
    R.P = gb_processor_of(p, B.bias, B.counts, B.mask, B.bitmask, B.vocab);
    R.st = gb_stream_of(p, bz);
    R.greedy = temp == 0.0f;
    R.invT = R.greedy ? 0.0f : gb_recip_rn(temp);
    R.want_lp = (p.flags & GB_FLAG_LOGPROBS) != 0u;
    // Without processors, x' * invT is x itself when greedy or invT == 1.
    R.proc_is_raw = (p.flags & GB_FLAGS_PROCESSORS) == 0u && (R.greedy || R.invT == 1.0f);
    R.goff = in_shard ? B.vocab_offset : 0u;

    ulong begin, end;
    gb_chunk(B.vocab, S, bx, begin, end);
    gb_argmax_acc a = {0ul, -INFINITY, 0u, gb_lse_empty(), gb_lse_empty()};
    if (R.greedy) {
        gb_scan_greedy<KIND>(R, begin, end, L, a);
    } else {
        gb_scan_gumbel<KIND>(R, begin, end, L, a);
    }
    gb_block_max_or(a.best, a.seen, L, tg.key, tg.seen);
    if (R.want_lp) {
        gb_block_lse(a.raw, a.proc, L, tg.lse);
    }
    if (S > 1u) {
        gb_argmax_split<KIND>(B, p, R, o, group, groups, L, tg, a);
    } else if (L.tid == 0u) {
        gb_argmax_end<KIND>(B, p, R, o, by, groups.y, draws, a);
    }
}
