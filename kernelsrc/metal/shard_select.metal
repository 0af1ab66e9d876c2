// shard_select (ABI.md, "shard_select"): a vocabulary shard's part of the filtered route.
// Each launch row adds the elements that match its query (a floor, a key prefix above an
// 8-bit digit and, with GB_SELECT_MIN_P, min-p) to a histogram of counts and fixed-point
// masses by that digit, and with GB_SELECT_DRAW raises its key word to their Gumbel-max
// winner at global index vocab_offset + i. The ranks add the histograms with an
// all-reduce and choose the thresholds on the host; the sums are integers, so any order
// gives the same ones.
//
// Metal has no 64-bit device atomics that every GPU supports, so, as the Go edition does,
// threadgroup (0, y, 0) does all of launch row y and the others return. It alone touches
// the row's histogram and key words: it builds the histogram in threadgroup memory, then
// adds each bin to its device word and raises the key word with plain read-modify-writes.
// The result never depends on S; partials and counters are not touched.

// A launch row's query (ABI.md, "shard_select"; abi.SelectQuery), from its two words.
struct gb_select_query {
    uint floor;   // a matching key is at least floor
    uint prefix;  // and has prefix's bits above shift + 8
    float m;      // the row's largest processed logit over every shard
    uint shift;   // the lowest bit of the histogram's digit: 24, 16, 8 or 0
    uint F;       // the fixed-point scale of the whole vocabulary
    bool min_p;   // GB_SELECT_MIN_P
    bool draw;    // GB_SELECT_DRAW
};

inline gb_select_query gb_select_query_of(ulong w0, ulong w1) {
    return gb_select_query{uint(w0),
                           uint(w0 >> 32),
                           as_type<float>(uint(w1)),
                           uint(w1 >> 32) & 0xFFu,
                           uint(w1 >> 40) & 0xFFu,
                           (w1 & GB_SELECT_MIN_P) != 0ul,
                           (w1 & GB_SELECT_DRAW) != 0ul};
}

// Threadgroup scratch of shard_select: the histogram, its masses as gb_bin_add_u64's
// pairs of 32-bit words, and the reduction of the winner.
struct gb_select_scratch {
    threadgroup atomic_uint* count;    // [GB_BINS]
    threadgroup atomic_uint* mass_lo;  // [GB_BINS]
    threadgroup atomic_uint* mass_hi;  // [GB_BINS]
    threadgroup ulong* u64s;           // [GB_MAX_SIMDGROUPS] one per SIMD-group
    threadgroup uint* u32s;            // [GB_MAX_SIMDGROUPS] one per SIMD-group
};

// Whether launch row p may not be served: what a shard may not do (ABI.md, "Vocabulary
// shards"), a temperature that is not positive, reserved flags, or a query this kernel
// cannot read. Only the row's key word then says so.
inline bool gb_select_bad(thread const gb_row_params& p, gb_buffers B, gb_select_query q) {
    const bool bad_shard = (p.flags & GB_FLAG_SHARD) == 0u || (B.vocab_offset & 3u) != 0u ||
                           ulong(B.vocab_offset) + ulong(B.vocab) > ulong(GB_MAX_VOCAB) ||
                           (p.flags & (GB_FLAG_LOGPROBS | GB_FLAG_RECORD)) != 0u;
    const bool bad_query = q.shift > 24u || (q.shift & 7u) != 0u || q.F > 62u;
    return bad_shard || bad_query || gb_bad_row(p.temperature, B.vocab) || !(p.temperature > 0.0f) ||
           (p.flags & GB_FLAGS_RESERVED) != 0u;
}

// gb_shard_select is the kernel: threadgroup (0, y, 0) serves launch row y. ROUTED,
// ADVANCE, PERTURBED and the other flags a shard may carry change nothing; the row's step
// stays.
template <int KIND>
inline void gb_shard_select(device const typename gb_io<KIND>::elem* logits, gb_buffers B, uint3 group, uint3 groups,
                            gb_thread_ids L, gb_select_scratch tg) {
    if (group.x != 0u || group.z != 0u) {
        return;  // one threadgroup per row: the others have no work
    }
    const uint y = group.y;
    const ulong n = ulong(groups.y);
    // abi.Launch.SelectQueryWord, SelectHistWord and SelectKeyWord.
    device ulong* hist = B.shard + 2ul * n + 2ul * ulong(GB_SELECT_BINS) * ulong(y);
    device ulong* key_word = B.shard + (2ul + 2ul * ulong(GB_SELECT_BINS)) * n + ulong(y);
    const gb_row_params p = B.params[y];
    const gb_select_query q = gb_select_query_of(B.shard[2ul * ulong(y)], B.shard[2ul * ulong(y) + 1ul]);
    if (gb_select_bad(p, B, q)) {
        if (L.tid == 0u) {
            *key_word = gb_max_u64(*key_word, GB_SHARD_KEY_FAILED | ulong(uint(GB_STATUS_BAD_PARAMS)));
        }
        return;
    }
    const uint vocab = B.vocab;
    const uint goff = B.vocab_offset;
    const gb_processor P = gb_processor_of(p, B.bias, B.counts, B.mask, B.bitmask, vocab);
    device const typename gb_io<KIND>::elem* row = logits + ulong(p.row) * B.row_stride;
    const float invT = gb_recip_rn(p.temperature);
    // The weights of the whole vocabulary: its m and F, which the query carries.
    const gb_weights W = {q.m, invT, q.F, gb_weight_cutoff(q.F)};
    const bool min_p_on = q.min_p && p.min_p > 0.0f && p.min_p <= 1.0f;
    // The key bits the prefix fixes: those above the digit (none for the top digit).
    const uint high = q.shift < 24u ? 0xFFFFFFFFu << (q.shift + 8u) : 0u;
    const gb_stream st = gb_stream_of(p, 0u);

    for (uint b = L.tid; b < GB_BINS; b += L.T) {
        atomic_store_explicit(&tg.count[b], 0u, memory_order_relaxed);
        atomic_store_explicit(&tg.mass_lo[b], 0u, memory_order_relaxed);
        atomic_store_explicit(&tg.mass_hi[b], 0u, memory_order_relaxed);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);

    // Groups of four consecutive elements per thread, so one Philox block serves a group
    // (vocab_offset is a multiple of 4). An element whose score cannot reach the thread's
    // best even with the largest noise skips its noise, but not its bin.
    ulong best = 0ul;
    float best_score = -INFINITY;
    for (ulong g = 4ul * ulong(L.tid); g < ulong(vocab); g += 4ul * ulong(L.T)) {
        uint base = uint(g);
        uint count = uint(gb_min_u64(4ul, ulong(vocab) - g));
        gb_group_words words = gb_group_words_empty();
        for (uint j = 0u; j < count; ++j) {
            uint i = base + j;
            float x = gb_processed(gb_io<KIND>::load1(row + i), i, P);
            if (isnan(x) || x == INFINITY) {
                continue;  // NaN and +Inf never match
            }
            uint key = gb_orderkey(x);
            if (key < q.floor || (key & high) != (q.prefix & high)) {
                continue;
            }
            float w = gb_weight(x, W);
            if (min_p_on && !(w >= p.min_p)) {
                continue;
            }
            uint b = (key >> q.shift) & 0xFFu;
            atomic_fetch_add_explicit(&tg.count[b], 1u, memory_order_relaxed);
            ulong qw = gb_fixed(w, W.F);
            if (qw != 0ul) {
                gb_bin_add_u64(&tg.mass_lo[b], &tg.mass_hi[b], qw);
            }
            if (!q.draw) {
                continue;
            }
            if (x != -INFINITY) {
                float xs = x * invT;
                float bound = xs + GB_MAX_GUMBEL;
                if (bound < best_score) {
                    continue;  // fl(xs + g) <= bound < best: cannot win
                }
            }
            ulong k = gb_noisy_key(x, goff + i, invT, st, words);
            if (k > best) {
                best = k;
                best_score = gb_orderkey_inverse(uint(k >> 32));
            }
        }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (q.draw) {
        uint unused = 0u;
        gb_block_max_or(best, unused, L, tg.u64s, tg.u32s);
    }

    // Each bin is one thread's; bins that gained nothing are left unwritten.
    for (uint b = L.tid; b < GB_BINS; b += L.T) {
        uint c = atomic_load_explicit(&tg.count[b], memory_order_relaxed);
        if (c == 0u) {
            continue;
        }
        hist[b] += ulong(c);
        uint lo = atomic_load_explicit(&tg.mass_lo[b], memory_order_relaxed);
        uint hi = atomic_load_explicit(&tg.mass_hi[b], memory_order_relaxed);
        hist[GB_SELECT_BINS + b] += gb_join_u64(lo, hi);
    }
    if (q.draw && L.tid == 0u) {
        *key_word = gb_max_u64(*key_word, best);
    }
}
