// categorical: temperature, top-k, top-p and min-p filters and an inverse-CDF draw (ABI.md,
// "categorical"), one threadgroup per row and draw. Every step works on the processed
// logits x', and every sum is an integer of fixed-point weights, so the draw does not
// depend on the reduction order. The filtered kernel (filtered.metal) runs the same
// one-threadgroup path with a Gumbel-max draw over the same kept set.

// q(w) = uint64(w * 2^F), truncated, from the bits of w (0 <= w <= 1), so no float to
// 64-bit conversion is involved.
inline ulong gb_fixed(float w, uint F) {
    if (!(w > 0.0f)) {
        return 0ul;
    }
    uint b = as_type<uint>(w);
    uint e = b >> 23;
    ulong mant = ulong(b & 0x7FFFFFu);
    int shift;
    if (e == 0u) {
        shift = int(F) - 149;  // subnormal: mant * 2^-149
    } else {
        mant |= 0x800000ul;
        shift = int(e) - 150 + int(F);  // mant * 2^(e - 150)
    }
    if (shift >= 0) {
        return shift < 40 ? mant << uint(shift) : 0ul;  // w <= 1 keeps shift <= F - 23
    }
    return shift > -24 ? mant >> uint(-shift) : 0ul;
}

// w(x) = exp(fl((x - m) * invT)), two rounded operations and precise::exp. Below cutoff,
// w < 2^-F / e and q is 0 whatever exp's last bit, so exp is skipped.
struct gb_weights {
    float m;
    float invT;
    uint F;
    float cutoff;
};

// -(F ln 2 + 1), two rounded float32 operations as in every edition: below it a weight
// is under 2^-F / e, so q = 0.
inline float gb_weight_cutoff(uint F) {
    const float f_ln2 = float(F) * 0.6931472f;
    return -(f_ln2 + 1.0f);
}

// The weights of a row of vocab elements with largest processed logit m at invT.
inline gb_weights gb_weights_of(float m, float invT, uint vocab) {
    const uint F = 63u - (32u - clz(vocab));
    return gb_weights{m, invT, F, gb_weight_cutoff(F)};
}

inline float gb_weight(float x, gb_weights W) {
    float d = x - W.m;
    float a = d * W.invT;
    if (a < W.cutoff) {
        return 0.0f;
    }
    return precise::exp(a);
}

// The filters an element must pass to be kept: its key at least cut = max(Kk, Kp), and
// with min-p its weight at least min_p.
struct gb_filters {
    uint cut;
    bool min_p_on;
    float min_p;
};

// Whether the filters keep an element, with its weight in w (computed only when its key
// reaches the cut).
inline bool gb_is_kept(float x, gb_weights W, gb_filters f, thread float& w) {
    w = 0.0f;
    if (gb_orderkey(x) < f.cut) {
        return false;
    }
    w = gb_weight(x, W);
    return !(f.min_p_on && !(w >= f.min_p));
}

// The kept weight of one element (0 when the filters drop it).
inline ulong gb_kept_weight(float x, gb_weights W, gb_filters f) {
    float w;
    return gb_is_kept(x, W, f, w) ? gb_fixed(w, W.F) : 0ul;
}

// Threadgroup scratch of the categorical kernel.
struct gb_categorical_scratch {
    gb_bins bins;
    threadgroup ulong* u64s;  // [GB_MAX_SIMDGROUPS] one per SIMD-group
    threadgroup uint* u32s;   // [GB_MAX_SIMDGROUPS] one per SIMD-group
    threadgroup float4* lse;  // [GB_MAX_SIMDGROUPS] one per SIMD-group
    // [GB_MAX_SIMDGROUPS] the filtered kernel's exact redraw (gb_exact_kept), one per
    // SIMD-group; the categorical kernel, which has none, leaves it null.
    threadgroup gb_exact* win;
};

// The k-th largest key of the row, counting repeats: radix select on 8-bit digits from
// the top, one pass over the row per digit.
template <int KIND>
inline uint gb_topk_threshold(device const typename gb_io<KIND>::elem* row, uint vocab, gb_processor P, uint k,
                              gb_thread_ids L, gb_bins H) {
    uint prefix = 0u;
    uint mask = 0u;
    ulong above = 0ul;
    for (uint level = 0u; level < 4u; ++level) {
        uint shift = 24u - 8u * level;
        gb_clear_bins(H, false, L);
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (uint i = L.tid; i < vocab; i += L.T) {
            uint key = gb_orderkey(gb_processed(gb_io<KIND>::load1(row + i), i, P));
            if ((key & mask) == prefix) {
                atomic_fetch_add_explicit(&H.lo[(key >> shift) & 0xFFu], 1u, memory_order_relaxed);
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        if (L.sg == 0u) {
            gb_select_bin(H, false, above, ulong(k), L);
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        prefix |= H.sel_bin[0] << shift;
        above = H.sel_above[0];
        mask |= 0xFFu << shift;
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    return prefix;
}

// The largest key t of the kept set (key >= Kk) whose mass of keys >= t reaches target
// (target > 0): radix select on mass. Elements of zero weight never decide it (their
// key's mass equals that of the next key up), so only positive weights are added.
template <int KIND>
inline uint gb_topp_threshold(device const typename gb_io<KIND>::elem* row, uint vocab, gb_processor P, uint Kk,
                              gb_weights W, ulong target, gb_thread_ids L, gb_bins H) {
    uint prefix = 0u;
    uint mask = 0u;
    ulong above = 0ul;
    for (uint level = 0u; level < 4u; ++level) {
        uint shift = 24u - 8u * level;
        gb_clear_bins(H, true, L);
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (uint i = L.tid; i < vocab; i += L.T) {
            float x = gb_processed(gb_io<KIND>::load1(row + i), i, P);
            uint key = gb_orderkey(x);
            if (key < Kk || (key & mask) != prefix) {
                continue;
            }
            ulong q = gb_fixed(gb_weight(x, W), W.F);
            if (q != 0ul) {
                uint b = (key >> shift) & 0xFFu;
                gb_bin_add_u64(&H.lo[b], &H.hi[b], q);
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        if (L.sg == 0u) {
            gb_select_bin(H, true, above, target, L);
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        prefix |= H.sel_bin[0] << shift;
        above = H.sel_above[0];
        mask |= 0xFFu << shift;
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    return prefix;
}

// The key cut of the top-k and top-p filters, max(Kk, Kp) (0: both off).
template <int KIND>
inline uint gb_categorical_cut(device const typename gb_io<KIND>::elem* row, uint vocab, gb_processor P,
                               thread const gb_row_params& p, gb_weights W, uint max_key, gb_thread_ids L,
                               gb_categorical_scratch tg) {
    uint Kk = 0u;
    if (p.top_k > 0u && p.top_k < vocab) {
        Kk = gb_topk_threshold<KIND>(row, vocab, P, p.top_k, L, tg.bins);
    }
    uint Kp = 0u;
    if (p.top_p > 0.0f && p.top_p < 1.0f) {
        // Z, the mass of the top-k set, and target = (Z * P) >> 32.
        ulong z = 0ul;
        for (uint i = L.tid; i < vocab; i += L.T) {
            float x = gb_processed(gb_io<KIND>::load1(row + i), i, P);
            if (gb_orderkey(x) >= Kk) {
                z += gb_fixed(gb_weight(x, W), W.F);
            }
        }
        z = gb_block_sum_u64(z, L, tg.u64s);
        float pscaled = p.top_p * 4294967296.0f;
        ulong P32 = ulong(uint(pscaled));
        ulong target = (z >> 32) * P32 + (((z & 0xFFFFFFFFul) * P32) >> 32);
        if (target == 0ul) {
            Kp = max_key;  // every present key reaches a zero target; take the largest
        } else {
            Kp = gb_topp_threshold<KIND>(row, vocab, P, Kk, W, target, L, tg.bins);
        }
    }
    return max(Kk, Kp);
}

// The first index whose processed logit equals m (the greedy answer of the categorical
// path), returned to every thread.
template <int KIND>
inline uint gb_first_index_of(device const typename gb_io<KIND>::elem* row, uint vocab, gb_processor P, float m,
                              gb_thread_ids L, gb_categorical_scratch tg) {
    ulong best = 0ul;
    uint unused = 0u;
    for (uint i = L.tid; i < vocab; i += L.T) {
        if (gb_processed(gb_io<KIND>::load1(row + i), i, P) == m) {
            best = gb_max_u64(best, ulong(0xFFFFFFFFu - i));
        }
    }
    gb_block_max_or(best, unused, L, tg.u64s, tg.u32s);
    return 0xFFFFFFFFu - uint(best);
}

// ln(S_kept * 2^-F): the scaling by a power of two is exact, so only the conversion and
// the logarithm round.
inline float gb_log_kept_mass(ulong total, uint F) {
    float t = float(total);
    float scaled = t * as_type<float>((127u - F) << 23);
    return precise::log(scaled);
}

// The record of a greedy row's token tok with raw logit x: the processed distribution is
// softmax(x') at temperature 1, whose log-sum-exp is proc_set.
inline float4 gb_greedy_record(float x, uint tok, gb_processor P, float2 raw, float2 proc_set, float lse_raw) {
    float xp = gb_processed(x, tok, P);
    return float4(gb_lse_logprob(x, raw), gb_lse_logprob(xp, proc_set), lse_raw, gb_lse_value(proc_set));
}

// The record of a drawn token with raw logit x0 and processed logit x, of a kept set
// of mass total.
inline float4 gb_categorical_record(float x0, float x, gb_weights W, ulong total, float2 raw, float lse_raw) {
    float d = x - W.m;
    float a = d * W.invT;
    float ln_kept = gb_log_kept_mass(total, W.F);
    float mt = W.m * W.invT;
    return float4(gb_lse_logprob(x0, raw), a - ln_kept, lse_raw, mt + ln_kept);
}

// The kept set's descriptor (ABI.md, "The kept-set descriptor"), written in place of the
// record with FlagKeptSet: the key threshold, the processed log-probability of the row's
// token under the kept law (-Inf when the filters drop it, NaN when it is no token), m
// and ln(S_kept * 2^-F).
template <int KIND>
inline float4 gb_kept_set_descriptor(device const typename gb_io<KIND>::elem* row, uint vocab,
                                     thread const gb_row_params& p, gb_processor P, gb_weights W, gb_filters f,
                                     ulong total) {
    float ln_kept = gb_log_kept_mass(total, W.F);
    float lp = NAN;
    if (p.token < vocab) {
        float x = gb_processed(gb_io<KIND>::load1(row + p.token), p.token, P);
        float w;
        lp = -INFINITY;
        if (gb_is_kept(x, W, f, w)) {
            float d = x - W.m;
            float a = d * W.invT;
            lp = a - ln_kept;
        }
    }
    return float4(as_type<float>(f.cut), lp, W.m, ln_kept);
}

// Step 1: the largest key of x' (so the largest processed logit m), the row's
// observations and, for the record, the raw log-sum-exp (and with proc_lse the
// processed one at temperature 1), reduced over the threadgroup.
template <int KIND>
inline void gb_categorical_scan(device const typename gb_io<KIND>::elem* row, uint vocab, gb_processor P, bool want_lp,
                                bool proc_lse, gb_thread_ids L, gb_categorical_scratch tg, thread ulong& kmax,
                                thread uint& seen, thread float2& raw, thread float2& proc) {
    for (uint i = L.tid; i < vocab; i += L.T) {
        float x0 = gb_io<KIND>::load1(row + i);
        if (want_lp) {
            gb_lse_add(raw, x0);
        }
        float x = gb_process_seen(x0, i, P, seen);
        if (proc_lse) {
            gb_lse_add(proc, x);
        }
        if (!isnan(x)) {
            kmax = gb_max_u64(kmax, ulong(gb_orderkey(x)));
        }
    }
    gb_block_max_or(kmax, seen, L, tg.u64s, tg.u32s);
    if (want_lp) {
        gb_block_lse(raw, proc, L, tg.lse);
    }
}

// The kept mass of this thread's SIMD-group's segment [seg_begin, seg_end) of the row
// (part), of the segments before it (offset) and of the row (total), each SIMD-group's
// lanes reading consecutive elements.
template <int KIND>
inline void gb_segment_sums(device const typename gb_io<KIND>::elem* row, gb_processor P, gb_weights W, gb_filters f,
                            uint seg_begin, uint seg_end, gb_thread_ids L, gb_categorical_scratch tg,
                            thread ulong& part, thread ulong& offset, thread ulong& total) {
    part = 0ul;
    for (uint i = seg_begin + L.lane; i < seg_end; i += L.width) {
        part += gb_kept_weight(gb_processed(gb_io<KIND>::load1(row + i), i, P), W, f);
    }
    part = gb_simd_sum_u64(part, L.width);
    if (L.lane == 0u) {
        tg.u64s[L.sg] = part;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    offset = 0ul;
    total = 0ul;
    for (uint g = 0u; g < L.nsg; ++g) {
        ulong v = tg.u64s[g];
        if (g < L.sg) {
            offset += v;
        }
        total += v;
    }
}

// Walks the segment that holds target, one element per lane at a time, with a prefix
// sum over the lanes, until the running sum (from offset) exceeds target. Returns true
// in the one lane that holds the token, with its index and processed logit.
template <int KIND>
inline bool gb_categorical_walk(device const typename gb_io<KIND>::elem* row, gb_processor P, gb_weights W,
                                gb_filters f, uint seg_begin, uint seg_end, ulong offset, ulong target,
                                gb_thread_ids L, thread uint& tok, thread float& tok_x) {
    ulong running = offset;
    for (uint base = seg_begin; base < seg_end; base += L.width) {
        uint i = base + L.lane;
        ulong q = 0ul;
        float x = -INFINITY;
        if (i < seg_end) {
            x = gb_processed(gb_io<KIND>::load1(row + i), i, P);
            q = gb_kept_weight(x, W, f);
        }
        ulong incl = gb_simd_inclusive_sum_u64(q, L.lane, L.width);
        bool crossed = running + incl > target;
        uint first = gb_simd_min_u32(crossed ? L.lane : L.width, L.width);
        if (first < L.width) {
            tok = i;
            tok_x = x;
            return L.lane == first;
        }
        uint2 last = simd_shuffle(uint2(uint(incl), uint(incl >> 32)), ushort(L.width - 1u));
        running += gb_join_u64(last.x, last.y);
    }
    return false;
}

// gb_noisy_key is the packed Gumbel score of element i with processed logit x:
// fl(fl(x * invT) + g), g gumbel_argmax's noise for the element at the draw's step (words
// caches the Philox blocks of the element's group of four). x = -Inf scores -Inf whatever
// the noise, so it draws none.
inline ulong gb_noisy_key(float x, uint i, float invT, gb_stream st, thread gb_group_words& words) {
    if (x == -INFINITY) {
        return gb_pack(x, i);
    }
    float xs = x * invT;
    float g = gb_group_gumbel(words, st, i >> 2, i & 3u);
    float score = xs + g;
    return gb_pack(score, i);
}

// gb_gumbel_row draws by Gumbel-max over the kept elements of the whole row (the
// filtered kernel's law): the kept element with the largest gb_noisy_key, ties to the
// lowest index. It returns the winner's packed key (0: none kept) and leaves S, the
// fixed-point mass of the kept set, in total, both in every thread. Each thread takes
// groups of four consecutive elements, so one Philox block serves the whole group; an
// element whose score cannot reach the thread's best even with the largest noise
// (ABI.md, gumbel_argmax) skips its noise, but not its mass.
template <int KIND>
inline ulong gb_gumbel_row(device const typename gb_io<KIND>::elem* row, uint vocab, gb_processor P, gb_weights W,
                           gb_filters f, gb_stream st, gb_thread_ids L, gb_categorical_scratch tg,
                           thread ulong& total) {
    ulong best = 0ul;
    float best_score = -INFINITY;
    ulong mass = 0ul;
    for (ulong g = 4ul * ulong(L.tid); g < ulong(vocab); g += 4ul * ulong(L.T)) {
        uint base = uint(g);
        uint count = uint(gb_min_u64(4ul, ulong(vocab) - g));
        gb_group_words words = gb_group_words_empty();
        for (uint j = 0u; j < count; ++j) {
            uint i = base + j;
            float x = gb_processed(gb_io<KIND>::load1(row + i), i, P);
            float w;
            if (!gb_is_kept(x, W, f, w)) {
                continue;
            }
            mass += gb_fixed(w, W.F);
            if (x != -INFINITY) {
                float xs = x * W.invT;
                float bound = xs + GB_MAX_GUMBEL;
                if (bound < best_score) {
                    continue;  // fl(xs + g) <= bound < best: cannot win
                }
            }
            ulong key = gb_noisy_key(x, i, W.invT, st, words);
            if (key > best) {
                best = key;
                best_score = gb_orderkey_inverse(uint(key >> 32));
            }
        }
    }
    uint unused = 0u;
    gb_block_max_or(best, unused, L, tg.u64s, tg.u32s);
    total = gb_block_sum_u64(mass, L, tg.u64s);
    return best;
}

// gb_exact_kept redraws a Gumbel-max draw over the kept elements of the row whose float32
// winner reached GB_EXACT_LIMIT in magnitude, by the exact comparison (ABI.md,
// "filtered"), and returns the token to every thread. Only such rows pay for it.
template <int KIND>
inline uint gb_exact_kept(device const typename gb_io<KIND>::elem* row, uint vocab, gb_processor P, gb_weights W,
                          gb_filters f, gb_stream st, gb_thread_ids L, threadgroup gb_exact* win) {
    gb_exact best = gb_exact_none();
    for (uint i = L.tid; i < vocab; i += L.T) {
        float x = gb_processed(gb_io<KIND>::load1(row + i), i, P);
        float w;
        if (gb_is_kept(x, W, f, w)) {
            gb_group_words words = gb_group_words_empty();
            gb_exact v = gb_exact_of(x, W.invT, gb_group_gumbel(words, st, i >> 2, i & 3u), i);
            if (gb_exact_above(v, best, W.invT)) {
                best = v;
            }
        }
    }
    return gb_exact_threadgroup(best, W.invT, L, win).idx;
}

// gb_categorical_row is the one-threadgroup path of a row's draw, after the routing
// check: status 3, the row's maximum and observations, greedy rows, the top-k and top-p
// key thresholds and min-p, then the draw. With GUMBEL (the filtered kernel,
// gb_filtered) the same kept set is drawn from by Gumbel-max (gb_gumbel_row) instead of
// the inverse CDF: the filtered route's law.
//
// The inverse CDF: SIMD-group g owns the g-th contiguous segment of the row and sums its
// kept weights; every thread then knows each segment's offset and the total S, and the
// SIMD-group whose segment holds target = (u * S) >> 64 walks it again. The thread that
// finds the token writes the draw's slot and does the row's end-of-draws work.
template <int KIND, bool GUMBEL>
inline void gb_categorical_row(device const typename gb_io<KIND>::elem* logits, gb_buffers B,
                               thread const gb_row_params& p, uint3 group, uint3 groups, gb_thread_ids L,
                               gb_categorical_scratch tg) {
    const uint by = group.y;
    const uint bz = group.z;
    const uint n = groups.y;
    const uint draws = groups.z;
    const ulong o = ulong(p.row) * ulong(draws) + ulong(bz);
    const float temp = p.temperature;
    const uint vocab = B.vocab;
    if (gb_bad_row(temp, vocab) || gb_bad_flags(p.flags)) {
        if (L.tid == 0u) {
            gb_finish(B, p.flags, o, -1, GB_STATUS_BAD_PARAMS, float4(0.0f));
        }
        return;
    }
    const bool want_lp = (p.flags & GB_FLAG_LOGPROBS) != 0u;
    const bool kept_set = (p.flags & GB_FLAG_KEPT_SET) != 0u;  // the descriptor in place of the record
    const bool greedy = temp == 0.0f;
    const gb_processor P = gb_processor_of(p, B.bias, B.counts, B.mask, B.bitmask, vocab);
    device const typename gb_io<KIND>::elem* row = logits + ulong(p.row) * B.row_stride;

    // 1. m and the observations.
    ulong kmax = 0ul;
    uint seen = 0u;
    float2 raw = gb_lse_empty();
    float2 proc = gb_lse_empty();
    const bool proc_lse = want_lp && greedy && (p.flags & GB_FLAGS_PROCESSORS) != 0u;
    gb_categorical_scan<KIND>(row, vocab, P, want_lp, proc_lse, L, tg, kmax, seen, raw, proc);
    const int st = gb_seen_status(seen);
    if (st != GB_STATUS_OK) {
        if (L.tid == 0u) {
            gb_finish(B, p.flags, o, -1, st, float4(0.0f));
            gb_row_done(B, p, by, n, draws);
        }
        return;
    }
    const uint max_key = uint(kmax);
    const float m = gb_orderkey_inverse(max_key);
    const float lse_raw = want_lp ? gb_lse_value(raw) : 0.0f;
    if (greedy) {
        // Temperature 0 is greedy on every path: the first index of the largest x'.
        uint tok = gb_first_index_of<KIND>(row, vocab, P, m, L, tg);
        if (L.tid == 0u) {
            float4 rec = float4(0.0f);
            if (want_lp) {
                rec = gb_greedy_record(gb_io<KIND>::load1(row + tok), tok, P, raw, proc_lse ? proc : raw, lse_raw);
            }
            gb_finish(B, p.flags, o, int(tok), GB_STATUS_OK, rec);
            gb_row_done(B, p, by, n, draws);
        }
        return;
    }
    const float invT = gb_recip_rn(temp);
    const gb_weights W = gb_weights_of(m, invT, vocab);

    // 2, 3. The top-k and top-p thresholds; min-p.
    const uint cut = gb_categorical_cut<KIND>(row, vocab, P, p, W, max_key, L, tg);
    const gb_filters f = {cut, p.min_p > 0.0f && p.min_p <= 1.0f, p.min_p};

    if (GUMBEL) {
        // 4. Gumbel-max over the kept set, and its mass S for the record.
        ulong total;
        const ulong best = gb_gumbel_row<KIND>(row, vocab, P, W, f, gb_stream_of(p, bz), L, tg, total);
        if (best == 0ul) {
            // Unreachable: the largest logit is always kept. Answer as the inverse CDF
            // does below.
            uint tok = gb_first_index_of<KIND>(row, vocab, P, m, L, tg);
            if (L.tid == 0u) {
                gb_finish(B, p.flags, o, int(tok), GB_STATUS_OK, float4(NAN));
                gb_row_done(B, p, by, n, draws);
            }
            return;
        }
        uint tok = 0xFFFFFFFFu - uint(best);
        if (gb_key_inexact(best)) {
            // A score this large may have lost the noise to float32 rounding (ABI.md,
            // "Exact scores"): the same kept set again, by the exact comparison.
            tok = gb_exact_kept<KIND>(row, vocab, P, W, f, gb_stream_of(p, bz), L, tg.win);
        }
        if (L.tid == 0u) {
            float4 rec = float4(0.0f);
            if (want_lp && kept_set) {
                rec = gb_kept_set_descriptor<KIND>(row, vocab, p, P, W, f, total);
            } else if (want_lp) {
                float x0 = gb_io<KIND>::load1(row + tok);
                rec = gb_categorical_record(x0, gb_processed(x0, tok, P), W, total, raw, lse_raw);
            }
            gb_finish(B, p.flags, o, int(tok), GB_STATUS_OK, rec);
            gb_row_done(B, p, by, n, draws);
        }
        return;
    }

    // 4. Segment sums of kept weights, one segment per SIMD-group.
    const uint seg = ((vocab + L.nsg - 1u) / L.nsg + L.width - 1u) / L.width * L.width;
    const uint seg_begin = min(vocab, L.sg * seg);
    const uint seg_end = min(vocab, seg_begin + seg);
    ulong part, offset, total;
    gb_segment_sums<KIND>(row, P, W, f, seg_begin, seg_end, L, tg, part, offset, total);
    if (total == 0ul) {
        // Unreachable: the largest logit is always kept with q = 2^F. Answer as the Go
        // edition does.
        threadgroup_barrier(mem_flags::mem_threadgroup);
        uint tok = gb_first_index_of<KIND>(row, vocab, P, m, L, tg);
        if (L.tid == 0u) {
            gb_finish(B, p.flags, o, int(tok), GB_STATUS_OK, float4(NAN));
            gb_row_done(B, p, by, n, draws);
        }
        return;
    }
    const ulong target = gb_mul_hi64(gb_categorical_uniform(gb_stream_of(p, bz)), total);
    if (part == 0ul || target < offset || target - offset >= part) {
        return;  // another SIMD-group's segment holds the draw
    }

    // 5. The walk.
    uint tok;
    float x;
    if (gb_categorical_walk<KIND>(row, P, W, f, seg_begin, seg_end, offset, target, L, tok, x)) {
        float4 rec = float4(0.0f);
        if (want_lp && kept_set) {
            rec = gb_kept_set_descriptor<KIND>(row, vocab, p, P, W, f, total);
        } else if (want_lp) {
            rec = gb_categorical_record(gb_io<KIND>::load1(row + tok), x, W, total, raw, lse_raw);
        }
        gb_finish(B, p.flags, o, int(tok), GB_STATUS_OK, rec);
        gb_row_done(B, p, by, n, draws);
    }
}

// One threadgroup per row and draw (ABI.md, "categorical"): routed rows of the other
// kernels are left alone, the rest go through gb_categorical_row's inverse-CDF draw.
template <int KIND>
inline void gb_categorical(device const typename gb_io<KIND>::elem* logits, gb_buffers B, uint3 group, uint3 groups,
                           gb_thread_ids L, gb_categorical_scratch tg) {
    if (groups.z > uint(GB_MAX_DRAWS)) {
        return;  // not a launch the kernels serve (ABI.md): nothing is written
    }
    // A copy: ADVANCE rewrites the step in params once every threadgroup is past it.
    const gb_row_params p = B.params[group.y];
    if ((p.flags & GB_FLAG_ROUTED) != 0u && (p.flags & GB_FLAG_CATEGORICAL) == 0u) {
        return;  // another kernel's row (gumbel_argmax or filtered)
    }
    gb_categorical_row<KIND, false>(logits, B, p, group, groups, L, tg);
}
