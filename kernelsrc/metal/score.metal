// score (ABI.md): the raw and processed log-probabilities of a given token and its raw
// rank, S >= 1 threadgroups per row, nothing drawn. Threadgroup (bx, by) of an (S, n, 1)
// grid makes one pass over its chunk of row params[by].row: two log-sum-exps and a count
// beside the loads, as gumbel_argmax's record does beside its arg-max. With S > 1 the
// last threadgroup of the row to arrive merges the S partials, with the split phase of
// gumbel_argmax. Its scratch is gumbel_argmax's (gb_gumbel_scratch).

// A threadgroup's row, the same in every thread.
template <int KIND>
struct gb_score_row {
    device const typename gb_io<KIND>::elem* logits;  // the row
    gb_processor P;
    float invT;        // 1 at temperature 0
    float xt;          // the token's raw logit
    bool proc_is_raw;  // the processed distribution is the raw one: one log-sum-exp serves
};

// What one thread (then the threadgroup, then the row) has found.
struct gb_score_acc {
    float2 raw;   // log-sum-exp of the raw logits
    float2 proc;  // of the processed ones, fl(x' * invT) (unless proc_is_raw)
    ulong above;  // raw logits at or above xt
    uint seen;    // observations of the processed logits
};

// One thread's part of the chunk [begin, end): groups of four elements, T groups apart.
template <int KIND>
inline void gb_score_scan(gb_score_row<KIND> R, ulong begin, ulong end, gb_thread_ids L, thread gb_score_acc& a) {
    for (ulong g = begin + 4ul * ulong(L.tid); g < end; g += 4ul * ulong(L.T)) {
        uint base = uint(g);
        uint count = uint(gb_min_u64(4ul, end - g));
        for (uint j = 0u; j < count; ++j) {
            uint idx = base + j;
            float x0 = gb_io<KIND>::load1(R.logits + idx);
            gb_lse_add(a.raw, x0);
            a.above += x0 >= R.xt ? 1ul : 0ul;
            float x = gb_process_seen(x0, idx, R.P, a.seen);
            if (!R.proc_is_raw) {
                float xs = x * R.invT;
                gb_lse_add(a.proc, xs);
            }
        }
    }
}

// Run by one thread with the row's totals: slot o gets the rank (how many raw logits are
// at or above the token's, itself and its ties included), the status and the record.
template <int KIND>
inline void gb_score_end(gb_buffers B, gb_score_row<KIND> R, uint token, ulong o, gb_score_acc a) {
    int st = gb_seen_status(a.seen);
    float4 rec = float4(0.0f);
    if (st == GB_STATUS_OK) {
        float xp = gb_processed(R.xt, token, R.P);
        float v = xp * R.invT;
        rec = float4(gb_lse_logprob(R.xt, a.raw), gb_lse_logprob(v, a.proc), gb_lse_value(a.raw),
                     gb_lse_value(a.proc));
    }
    int rank = int(gb_min_u64(a.above, 0x7FFFFFFFul));
    // The record is written whatever the row's flags: it is what score computes.
    gb_finish(B, GB_FLAG_LOGPROBS, o, rank, st, rec);
}

// The split phase (S > 1): publishes the threadgroup's pairs and count at partials words
// GB_SCORE_STRIDE*(by*S + bx) .. + 2 and its observations in the row's flags counter; the
// last threadgroup of the row merges the S partials and writes the row's slot.
template <int KIND>
inline void gb_score_split(gb_buffers B, gb_score_row<KIND> R, uint token, ulong o, uint3 group, uint S,
                           gb_thread_ids L, gb_gumbel_scratch tg, gb_score_acc a) {
    const uint by = group.y;
    const ulong stride = ulong(GB_SCORE_STRIDE);
    const ulong slot = (ulong(by) * ulong(S) + ulong(group.x)) * stride;
    if (L.tid == 0u) {
        gb_lse_store(B.partials, slot, a.raw);
        gb_lse_store(B.partials, slot + 1ul, a.proc);
        gb_key_store(B.partials, slot + 2ul, a.above);
        if (a.seen != 0u) {
            atomic_fetch_or_explicit(&B.counters[2u * by + 1u], a.seen, memory_order_relaxed);
        }
    }
    if (!gb_arrive(&B.counters[2u * by], S, L, tg.last)) {
        return;
    }
    gb_score_acc all = {gb_lse_empty(), gb_lse_empty(), 0ul, 0u};
    const ulong row_base = ulong(by) * ulong(S) * stride;
    for (uint i = L.tid; i < S; i += L.T) {
        const ulong q = row_base + ulong(i) * stride;
        all.raw = gb_lse_merge(all.raw, gb_lse_load(B.partials, q));
        all.proc = gb_lse_merge(all.proc, gb_lse_load(B.partials, q + 1ul));
        all.above += gb_key_load(B.partials, q + 2ul);
    }
    all.above = gb_block_sum_u64(all.above, L, tg.key);
    gb_block_lse(all.raw, all.proc, L, tg.lse);
    if (L.tid == 0u) {
        all.seen = atomic_load_explicit(&B.counters[2u * by + 1u], memory_order_relaxed);
        // Leave the row's counters as the launch found them: zero.
        atomic_store_explicit(&B.counters[2u * by], 0u, memory_order_relaxed);
        atomic_store_explicit(&B.counters[2u * by + 1u], 0u, memory_order_relaxed);
        gb_score_end<KIND>(B, R, token, o, all);
    }
}

// gb_score is the kernel: threadgroup (bx, by) scans its chunk of launch row by; slot
// o = row gets the row's outputs. ROUTED, LOGPROBS, ADVANCE, RECORD and PERTURBED are
// not score's: a row is scored whatever they say, and its step and counts stay.
template <int KIND>
inline void gb_score(device const typename gb_io<KIND>::elem* logits, gb_buffers B, uint3 group, uint3 groups,
                     gb_thread_ids L, gb_gumbel_scratch tg) {
    const uint bx = group.x;
    const uint S = groups.x;
    if (group.z != 0u) {
        return;  // score draws nothing: a grid deeper than 1 leaves the rest idle
    }
    const gb_row_params p = B.params[group.y];
    const ulong o = ulong(p.row);
    const float temp = p.temperature;
    if (gb_bad_row(temp, B.vocab) || gb_bad_flags(p.flags) || p.token >= B.vocab) {
        if (bx == 0u && L.tid == 0u) {
            gb_finish(B, GB_FLAG_LOGPROBS, o, -1, GB_STATUS_BAD_PARAMS, float4(0.0f));
        }
        return;
    }
    gb_score_row<KIND> R;
    R.logits = logits + ulong(p.row) * B.row_stride;
    R.P = gb_processor_of(p, B.bias, B.counts, B.mask, B.bitmask, B.vocab);
    R.invT = temp == 0.0f ? 1.0f : gb_recip_rn(temp);
    R.xt = gb_io<KIND>::load1(R.logits + p.token);
    // Without processors, x' * invT is x itself when invT == 1.
    R.proc_is_raw = (p.flags & GB_FLAGS_PROCESSORS) == 0u && R.invT == 1.0f;

    ulong begin, end;
    gb_chunk(B.vocab, S, bx, begin, end);
    gb_score_acc a = {gb_lse_empty(), gb_lse_empty(), 0ul, 0u};
    gb_score_scan<KIND>(R, begin, end, L, a);
    ulong unused_key = 0ul;
    gb_block_max_or(unused_key, a.seen, L, tg.key, tg.seen);
    a.above = gb_block_sum_u64(a.above, L, tg.key);
    gb_block_lse(a.raw, a.proc, L, tg.lse);
    if (R.proc_is_raw) {
        a.proc = a.raw;
    }
    if (S > 1u) {
        gb_score_split<KIND>(B, R, p.token, o, group, S, L, tg, a);
    } else if (L.tid == 0u) {
        gb_score_end<KIND>(B, R, p.token, o, a);
    }
}
