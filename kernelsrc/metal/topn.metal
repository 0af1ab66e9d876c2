// topn: the N <= GB_MAX_TOPN largest raw logits of a row with their log-probabilities,
// or (GB_FLAG_PERTURBED) the N largest Gumbel scores, N draws without replacement (ABI.md,
// "topn"). Threadgroup (bx, by) of an (S, n) grid keeps the top N keys of its chunk of
// row params[by].row and the chunk's log-sum-exp; with S > 1 the last threadgroup of the
// row to arrive merges the S lists, with the split phase of gumbel_argmax. A perturbed
// list that may be inexact (a score of GB_EXACT_LIMIT or more, or an empty entry) is made
// exact by the last threadgroup (gb_topn_exact).

// Arguments of the topn kernels: argument 8 is not used, 9-12 are bias, counts, mask and
// bitmask at the positions they have in the other kernels.
struct gb_topn_buffers {
    device const gb_row_params* params;
    device int* out_tokens;
    device float* out_values;
    device atomic_uint* partials;
    device atomic_uint* counters;
    ulong row_stride;
    uint vocab;
    device const float* bias;
    device const uint* counts;
    device const uint* mask;
    device const uint* bitmask;
};

// Threadgroup scratch of topn.
struct gb_topn_scratch {
    threadgroup ulong* key;   // [GB_MAX_SIMDGROUPS]
    threadgroup uint* seen;   // [GB_MAX_SIMDGROUPS]
    threadgroup float4* lse;  // [GB_MAX_SIMDGROUPS]
    threadgroup ulong* list;  // [GB_MAX_TOPN] the threadgroup's top keys, largest first, 0 = empty
    threadgroup uint* last;   // [1]
    threadgroup gb_exact* win;  // [GB_MAX_SIMDGROUPS] gb_topn_exact's
};

// A threadgroup's row, the same in every thread.
template <int KIND>
struct gb_topn_row {
    device const typename gb_io<KIND>::elem* logits;  // the row
    gb_processor P;  // no processors unless perturbed: raw logits
    gb_stream st;
    bool perturbed;
    bool greedy;
    float invT;
    uint N;
};

// Inserts packed key k into the sorted list top[0..N) (largest first, 0 = empty).
inline void gb_topn_insert(thread ulong* top, uint N, ulong k) {
    if (k <= top[N - 1u]) {
        return;
    }
    uint j = N - 1u;
    while (j > 0u && top[j - 1u] < k) {
        top[j] = top[j - 1u];
        --j;
    }
    top[j] = k;
}

inline void gb_topn_clear(thread ulong* top) {
    for (uint j = 0u; j < uint(GB_MAX_TOPN); ++j) {
        top[j] = 0ul;
    }
}

// Merges the threads' sorted lists into tg.list: N rounds, each taking the largest head
// over the threadgroup. Keys are distinct (they carry the index), so exactly one thread
// owns each winner and moves past it.
inline void gb_topn_merge(thread ulong* top, uint N, gb_thread_ids L, gb_topn_scratch tg) {
    uint head = 0u;
    for (uint j = 0u; j < N; ++j) {
        ulong mine = head < N ? top[head] : 0ul;
        ulong k = mine;
        uint unused = 0u;
        gb_block_max_or(k, unused, L, tg.key, tg.seen);
        if (k != 0ul && mine == k) {
            head++;
        }
        if (L.tid == 0u) {
            tg.list[j] = k;
        }
        if (k == 0ul) {
            // Every list is empty (the same k in every thread: the loop ends together).
            if (L.tid == 0u) {
                for (uint r = j + 1u; r < N; ++r) {
                    tg.list[r] = 0ul;
                }
            }
            break;
        }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
}

// One thread's part of the chunk [begin, end): keys are raw logits, or with perturbed
// the Gumbel scores of gumbel_argmax (greedy rows: x'). An element whose score cannot
// enter the list even with the largest noise skips its noise; -Inf never enters, and a
// NaN row reports NaN whatever its list.
template <int KIND>
inline void gb_topn_scan(gb_topn_row<KIND> R, ulong begin, ulong end, gb_thread_ids L, thread ulong* top,
                         thread uint& seen, thread float2& lse) {
    for (ulong g = begin + 4ul * ulong(L.tid); g < end; g += 4ul * ulong(L.T)) {
        uint base = uint(g);
        uint count = uint(gb_min_u64(4ul, end - g));
        gb_group_words words = gb_group_words_empty();
        for (uint j = 0u; j < count; ++j) {
            uint idx = base + j;
            float x = gb_process_seen(gb_io<KIND>::load1(R.logits + idx), idx, R.P, seen);
            float key;
            if (!R.perturbed || R.greedy) {
                key = x;
                gb_lse_add(lse, x);
            } else if (x == -INFINITY) {
                continue;
            } else {
                float xs = x * R.invT;
                gb_lse_add(lse, xs);
                ulong floor_key = top[R.N - 1u];
                if (floor_key != 0ul) {
                    float bound = xs + GB_MAX_GUMBEL;
                    if (bound < gb_orderkey_inverse(uint(floor_key >> 32))) {
                        continue;
                    }
                }
                float gn = gb_group_gumbel(words, R.st, base >> 2, j);
                key = xs + gn;
            }
            if (key == -INFINITY || isnan(key)) {
                continue;
            }
            gb_topn_insert(top, R.N, gb_pack(key, idx));
        }
    }
}

// Writes the row's N entries from tg.list (run by one thread): token and log-probability,
// token -1 and -Inf past the finite keys, and token -1 and NaN in a row with NaN or +Inf.
template <int KIND>
inline void gb_topn_write(gb_topn_row<KIND> R, gb_topn_buffers A, ulong out, uint seen, float2 lse,
                          gb_topn_scratch tg) {
    if (gb_seen_status(seen) == GB_STATUS_NONFINITE) {
        for (uint j = 0u; j < R.N; ++j) {
            A.out_tokens[out + j] = -1;
            A.out_values[out + j] = NAN;
        }
        return;
    }
    for (uint j = 0u; j < R.N; ++j) {
        ulong k = tg.list[j];
        if (k == 0ul) {
            A.out_tokens[out + j] = -1;
            A.out_values[out + j] = -INFINITY;
            continue;
        }
        uint idx = 0xFFFFFFFFu - uint(k);
        float x = gb_io<KIND>::load1(R.logits + idx);
        float v = x;
        if (R.perturbed) {
            float xp = gb_processed(x, idx, R.P);
            v = R.greedy ? xp : xp * R.invT;
        }
        A.out_tokens[out + j] = int(idx);
        A.out_values[out + j] = gb_lse_logprob(v, lse);
    }
}

// Whether a perturbed list in tg.list is the row's exact top N (ABI.md, "topn"):
// GB_TOPN_EXACT when it is full and no key's score reaches GB_EXACT_LIMIT in magnitude;
// GB_TOPN_SHORT when only an entry is empty (the list then holds every element whose
// fl(x' * invT) is finite); GB_TOPN_INEXACT when a key reaches the limit.
#define GB_TOPN_EXACT 0u
#define GB_TOPN_SHORT 1u
#define GB_TOPN_INEXACT 2u
inline uint gb_topn_state(threadgroup const ulong* list, uint N) {
    uint state = GB_TOPN_EXACT;
    for (uint j = 0u; j < N; ++j) {
        if (list[j] == 0ul) {
            state = state == GB_TOPN_EXACT ? GB_TOPN_SHORT : state;
        } else if (gb_key_inexact(list[j])) {
            state = GB_TOPN_INEXACT;
        }
    }
    return state;
}

// Makes a perturbed list that gb_topn_state does not vouch for exact. A short list
// stands unless a pass over the row finds an element whose x' is finite and whose
// fl(x' * invT) overflowed to -Inf (its float32 key never enters). Otherwise (rank) the
// row is ranked again by the exact comparison: N passes, each taking the largest value
// below the last one taken, whose keys gb_pack(s, i) replace tg.list (0 past the row's
// finite elements), for thread 0 to write. Every thread of the finishing threadgroup
// calls it, for rare rows only.
template <int KIND>
inline void gb_topn_exact(gb_topn_row<KIND> R, uint vocab, bool rank, gb_thread_ids L, gb_topn_scratch tg) {
    if (!rank) {
        uint under = 0u;
        for (uint i = L.tid; i < vocab; i += L.T) {
            float x = gb_processed(gb_io<KIND>::load1(R.logits + i), i, R.P);
            float y = x * R.invT;
            if (x > -INFINITY && y == -INFINITY) {
                under = 1u;
            }
        }
        ulong unused_key = 0ul;
        gb_block_max_or(unused_key, under, L, tg.key, tg.seen);
        rank = under != 0u;
    }
    if (!rank) {
        return;
    }
    gb_exact last = gb_exact_none();
    for (uint j = 0u; j < R.N; ++j) {
        // After a pass that found nothing, last is none again: the entries stay empty.
        if (j == 0u || last.idx != 0xFFFFFFFFu) {
            last = gb_exact_best<KIND>(R.logits, R.P, vocab, R.st, R.invT, last, L, tg.win);
        }
        if (L.tid == 0u) {
            tg.list[j] = last.idx != 0xFFFFFFFFu ? gb_pack(last.s, last.idx) : 0ul;
        }
    }
}

// The split phase (S > 1): publishes the threadgroup's list at partials words
// GB_TOPN_STRIDE*(by*S + bx) .. + N - 1, its log-sum-exp pair at + GB_MAX_TOPN and its
// observations in the row's flags counter; the last threadgroup of the row merges the S
// lists into tg.list, the sets into lse and the observations into seen (in every thread)
// and returns true.
template <int KIND>
inline bool gb_topn_split(gb_topn_row<KIND> R, gb_topn_buffers A, uint3 group, uint S, gb_thread_ids L,
                          gb_topn_scratch tg, thread ulong* top, thread uint& seen, thread float2& lse) {
    const uint by = group.y;
    const uint N = R.N;
    const ulong stride = ulong(GB_TOPN_STRIDE);
    const ulong slot = (ulong(by) * ulong(S) + ulong(group.x)) * stride;
    if (L.tid == 0u) {
        for (uint j = 0u; j < N; ++j) {
            gb_key_store(A.partials, slot + j, tg.list[j]);
        }
        gb_lse_store(A.partials, slot + ulong(GB_MAX_TOPN), lse);
        if (seen != 0u) {
            atomic_fetch_or_explicit(&A.counters[2u * by + 1u], seen, memory_order_relaxed);
        }
    }
    if (!gb_arrive(&A.counters[2u * by], S, L, tg.last)) {
        return false;
    }
    gb_topn_clear(top);
    lse = gb_lse_empty();
    const ulong row_base = ulong(by) * ulong(S) * stride;
    for (uint i = L.tid; i < S * N; i += L.T) {
        uint b = i / N;
        uint j = i - b * N;
        ulong k = gb_key_load(A.partials, row_base + ulong(b) * stride + ulong(j));
        if (k != 0ul) {
            gb_topn_insert(top, N, k);
        }
    }
    for (uint i = L.tid; i < S; i += L.T) {
        lse = gb_lse_merge(lse, gb_lse_load(A.partials, row_base + ulong(i) * stride + ulong(GB_MAX_TOPN)));
    }
    uint row_seen = 0u;
    if (L.tid == 0u) {
        row_seen = atomic_load_explicit(&A.counters[2u * by + 1u], memory_order_relaxed);
    }
    ulong unused_key = 0ul;
    gb_block_max_or(unused_key, row_seen, L, tg.key, tg.seen);
    float2 unused_lse = gb_lse_empty();
    gb_block_lse(lse, unused_lse, L, tg.lse);
    gb_topn_merge(top, N, L, tg);
    if (L.tid == 0u) {
        // Leave the row's counters as the launch found them: zero.
        atomic_store_explicit(&A.counters[2u * by], 0u, memory_order_relaxed);
        atomic_store_explicit(&A.counters[2u * by + 1u], 0u, memory_order_relaxed);
    }
    seen = row_seen;
    return true;
}

template <int KIND>
inline void gb_topn(device const typename gb_io<KIND>::elem* logits, gb_topn_buffers A, uint3 group, uint3 groups,
                    gb_thread_ids L, gb_topn_scratch tg) {
    const uint bx = group.x;
    const uint S = groups.x;
    if (group.z != 0u) {
        return;  // topn draws nothing: a grid deeper than 1 leaves the rest idle
    }
    const gb_row_params p = A.params[group.y];
    const uint N = p.topn;
    const ulong out = ulong(p.row) * ulong(GB_MAX_TOPN);
    const float temp = p.temperature;
    const bool bad_n = N < 1u || N > uint(GB_MAX_TOPN);
    if (bad_n || gb_bad_row(temp, A.vocab) || gb_bad_flags(p.flags)) {
        if (bx == 0u && L.tid == 0u) {
            uint slots = bad_n ? uint(GB_MAX_TOPN) : N;
            for (uint j = 0u; j < slots; ++j) {
                A.out_tokens[out + j] = GB_TOPN_REFUSED;
                A.out_values[out + j] = NAN;
            }
        }
        return;
    }
    gb_topn_row<KIND> R;
    R.logits = logits + ulong(p.row) * A.row_stride;
    R.perturbed = (p.flags & GB_FLAG_PERTURBED) != 0u;
    R.greedy = temp == 0.0f;
    R.invT = R.greedy ? 0.0f : gb_recip_rn(temp);
    gb_row_params q = p;
    if (!R.perturbed) {
        q.flags = 0u;  // raw logits: no processors
    }
    R.P = gb_processor_of(q, A.bias, A.counts, A.mask, A.bitmask, A.vocab);
    R.st = gb_stream_of(p, 0u);
    R.N = N;

    ulong begin, end;
    gb_chunk(A.vocab, S, bx, begin, end);
    ulong top[GB_MAX_TOPN];
    gb_topn_clear(top);
    uint seen = 0u;
    float2 lse = gb_lse_empty();
    gb_topn_scan<KIND>(R, begin, end, L, top, seen, lse);

    ulong unused_key = 0ul;
    gb_block_max_or(unused_key, seen, L, tg.key, tg.seen);
    float2 unused_lse = gb_lse_empty();
    gb_block_lse(lse, unused_lse, L, tg.lse);
    gb_topn_merge(top, N, L, tg);
    if (S > 1u && !gb_topn_split<KIND>(R, A, group, S, L, tg, top, seen, lse)) {
        return;
    }
    if (R.perturbed && !R.greedy && gb_seen_status(seen) != GB_STATUS_NONFINITE) {
        uint state = gb_topn_state(tg.list, N);
        if (state != GB_TOPN_EXACT) {
            gb_topn_exact<KIND>(R, A.vocab, state == GB_TOPN_INEXACT, L, tg);
        }
    }
    if (L.tid == 0u) {
        gb_topn_write<KIND>(R, A, out, seen, lse, tg);
    }
}
