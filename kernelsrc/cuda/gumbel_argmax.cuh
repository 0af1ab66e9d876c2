// gumbel_argmax (ABI.md): greedy and Gumbel-max rows, S >= 1 blocks per row, D draws,
// one launch.

// gb_win is what a block of gumbel_argmax reduces at the end of a draw: the winner's key,
// the OR of the observations and, for the log-probability record (NL > 0), the
// log-sum-exps (NL = 1: proc only, the one set; NL = 2: both). The record's other inputs,
// the winner's raw logit x and the value v its processed log-probability is taken of
// (fl(x' * invT)), are its payload: the scan keeps them beside the thread's best key (two
// moves when the key improves, which is rare), and each warp merge hands them on from
// its winning lane with one ballot and two shuffles (gb_warp_win_xv), so that no block
// reads its winner's logit from memory on its way to its arrival.
struct gb_win {
    gb_u64 key;
    gb_u32 seen;
    float x, v;
    gb_lse raw, proc;
};

// GB_GROUPS is the groups of four elements a thread of gumbel_argmax's scans takes per
// trip. The scans are written for G groups, whose Philox chains interleave; one group is
// the fastest on an H200 (docs/performance-notes.md), and this form of the code compiles
// to a faster scan than the same statements written for one group without the arrays.
#define GB_GROUPS 1

// gb_take_groups moves the prefetched groups of the next trip, and their mask pairs,
// into the current ones.
template <int G>
__device__ __forceinline__ void gb_take_groups(float cur[G][4], gb_u32 n[G], gb_mask_pair mw[G], const float nxt[G][4],
                                               const gb_u32 nn[G], const gb_mask_pair nmw[G]) {
#pragma unroll
    for (int i = 0; i < G; ++i) {
        n[i] = nn[i];
        mw[i] = nmw[i];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            cur[i][k] = nxt[i][k];
        }
    }
}

// gb_prepare processes a thread's groups of one trip: the row flags, the values the scan
// ranks (xp: the processed logits with PROC, else the logits; mw: the groups' mask
// pairs) and, with NL = 2, the raw log-sum-exp over the logits themselves, whose groups'
// largest logits it leaves in rmax (NL = 1: the scan's one log-sum-exp covers both; rmax
// is left unset). MASKS: the row's processors are masks at most (gb_masks_at_most).
// SUMS (with MASKS): no observations; each group's gb_sum4 is added to sum instead, and
// the caller settles the observations from it (gb_scan_greedy).
template <bool PROC, int NL, int G, bool MASKS = false, bool SUMS = false>
__device__ __forceinline__ void gb_prepare(const gb_processor& pc, gb_u32 g, gb_u32 stride, const float cur[G][4],
                                           const gb_u32 n[G], const gb_mask_pair mw[G], float xp[G][4], gb_u32& flags,
                                           float& sum, gb_lse& raw, float rmax[G]) {
#pragma unroll
    for (int i = 0; i < G; ++i) {
        if (SUMS) {
            sum = __fadd_rn(sum, gb_sum4(cur[i]));
        }
        if (PROC && MASKS && SUMS) {
            gb_mask_select(gb_mask_bits(mw[i]), g + (gb_u32)i * stride, cur[i], xp[i]);
        } else if (PROC && MASKS) {
            flags |= gb_mask_group(gb_mask_bits(mw[i]), g + (gb_u32)i * stride, n[i], cur[i], xp[i]);
        } else if (PROC) {
            flags |= gb_process_group_w(pc, gb_mask_bits(mw[i]), g + (gb_u32)i * stride, n[i], cur[i], xp[i]);
        } else {
            if (!SUMS) {
                flags |= gb_group_seen(cur[i], n[i]);
            }
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                xp[i][k] = cur[i][k];
            }
        }
        if (NL == 2) {
            rmax[i] = gb_max4(cur[i]);
            gb_lse_add4(raw, cur[i], rmax[i]);
        }
    }
}

// gb_greedy_trip folds one trip of a thread's groups (cur, from g) into its best: score
// = x' (the logit itself without PROC). A thread meets its groups in index order (the
// groups of one trip too), so a group only matters when its largest value beats the best
// so far strictly, and then its first element of that value wins (-0 equals +0, as their
// order keys do). With NL = 0 the best is tbest and its index tidx, taken by selects (the
// key is packed once, at the end: on LLM logits some lane of a warp improves in most
// trips, so a branch would be taken anyway); with NL > 0 the key is kept as it improves,
// and w.x and w.v follow it (see gb_win). WHOLE: a whole trip (gb_scan_greedy), which
// runs gb_prepare with MASKS and SUMS and takes its mask bits at sh = g mod 32, the same
// in every trip of a thread.
template <bool PROC, int NL, bool WHOLE>
__device__ __forceinline__ void gb_greedy_trip(const gb_processor& pc, gb_u32 g, gb_u32 sh, gb_u32 stride, gb_u32 goff,
                                               const float cur[GB_GROUPS][4], const gb_u32 n[GB_GROUPS],
                                               const gb_mask_pair mw[GB_GROUPS], float& tbest, gb_u32& tidx,
                                               float& sum, gb_win& w) {
    float xp[GB_GROUPS][4];
    float rmax[GB_GROUPS];
    gb_prepare<PROC, NL, GB_GROUPS, WHOLE, WHOLE>(pc, WHOLE ? sh : g, stride, cur, n, mw, xp, w.seen, sum, w.raw,
                                                  rmax);
#pragma unroll
    for (int i = 0; i < GB_GROUPS; ++i) {
        const float mx = gb_max4(xp[i]); // elements past end read as -Inf
        if (NL >= 1) {
            gb_lse_add4(w.proc, xp[i], mx);
        }
        const bool up = mx > tbest;
        if (NL == 0) {
            tidx = up ? g + (gb_u32)i * stride + gb_first_of4(xp[i], mx) : tidx;
            tbest = up ? mx : tbest;
        } else if (up) {
            const gb_u32 j = gb_first_of4(xp[i], mx);
            tbest = mx;
            w.key = gb_pack(mx, goff + g + (gb_u32)i * stride + j);
            w.x = j == 0u ? cur[i][0] : j == 1u ? cur[i][1] : j == 2u ? cur[i][2] : cur[i][3];
            w.v = mx;
        }
    }
}

// gb_scan_greedy folds the chunk [start, end) into the thread's best key (gb_greedy_trip).
// -Inf never becomes a best: a row whose finite logits are all missing ends with status
// 2 (NaN and +Inf: status 1) whatever the key. NL log-sum-exps run beside it: proc over
// x' (the greedy record's temperature-1 distribution) and, with NL = 2, raw over the
// logits. A row of aligned logits whose processors are masks at most runs its trips
// while the next one is whole without bounds, fills or feature tests, which cost more
// instructions than a trip's work (docs/benchmark_results/bitmask-h200.md). Those trips
// load one word a group where the row has one mask array, and observe nothing: they sum
// their logits instead, and the observations come at the end. A sum that ends NaN or
// +Inf (a NaN or +Inf logit, or finite ones that overflowed) sends the thread over its
// whole trips again to observe them exactly; without NaN or +Inf, an allowed finite
// logit exists exactly when the best is above -Inf.
template <int KIND, bool PROC, int NL>
__device__ __forceinline__ void gb_scan_greedy(const typename gb_io<KIND>::elem* row, gb_u32 start,
                                               gb_u32 end, bool vec, const gb_processor& pc, gb_u32 goff,
                                               gb_win& w) {
    const gb_u32 stride = 4u * blockDim.x;
    const gb_u32 trip = GB_GROUPS * stride;
    float tbest = -gb_inf();
    gb_u32 tidx = 0u;
    gb_u32 g = start + 4u * threadIdx.x;
    float cur[GB_GROUPS][4];
    gb_u32 n[GB_GROUPS];
    gb_mask_pair mw[GB_GROUPS];
    gb_load_groups<KIND, GB_GROUPS>(row, g, stride, end, vec, cur, n);
    gb_load_mask_words<PROC, GB_GROUPS>(pc, g, stride, end, mw);
    // A trip a multiple of 32 elements keeps each group's bits at the same place in its
    // word: true for blocks of whole 8-thread parts of a warp, as every launch has. The
    // whole trips run while the next trip is whole too; then this trip's groups are
    // whole, and n stays 4.
    auto next_whole = [&]() { return g + trip + (GB_GROUPS - 1u) * stride + 4u <= end; };
    if (vec && gb_masks_at_most(pc) && (stride & 31u) == 0u && next_whole()) {
        const gb_u32* mk;
        const gb_u32* bm;
        gb_mask_arrays(pc, mk, bm);
        const gb_u32 sh = g & 31u;
        const gb_u32 first = g;
        float sum = 0.0f;
        auto whole_trips = [&](auto one) {
            constexpr bool ONE = decltype(one)::value;
            if (ONE) {
#pragma unroll
                for (int i = 0; i < GB_GROUPS; ++i) {
                    mw[i].m = gb_mask_bits(mw[i]);
                    mw[i].b = 0xFFFFFFFFu;
                }
            }
            do {
                float nxt[GB_GROUPS][4];
                gb_mask_pair nmw[GB_GROUPS];
                gb_load_whole_groups<KIND, GB_GROUPS>(row, g + trip, stride, nxt);
                gb_load_whole_mask_words<PROC, GB_GROUPS, ONE>(mk, bm, g + trip, stride, nmw);
                gb_greedy_trip<PROC, NL, true>(pc, g, sh, stride, goff, cur, n, mw, tbest, tidx, sum, w);
                gb_take_groups<GB_GROUPS>(cur, n, mw, nxt, n, nmw);
                g += trip;
            } while (next_whole());
        };
        if (gb_one_mask_array(pc)) {
            whole_trips(gb_bool<true>());
        } else {
            whole_trips(gb_bool<false>());
        }
        if (!(sum < gb_inf()) && sum != -gb_inf()) {
            for (gb_u32 h = first; h < g; h += trip) {
                float x[GB_GROUPS][4];
                gb_load_whole_groups<KIND, GB_GROUPS>(row, h, stride, x);
#pragma unroll
                for (int i = 0; i < GB_GROUPS; ++i) {
                    w.seen |= gb_group_seen(x[i], 4u) & GB_SEEN_NONFINITE;
                }
            }
        }
    }
    for (; g < end; g += trip) {
        float nxt[GB_GROUPS][4];
        gb_u32 nn[GB_GROUPS];
        gb_mask_pair nmw[GB_GROUPS];
        gb_load_groups<KIND, GB_GROUPS>(row, g + trip, stride, end, vec, nxt, nn);
        gb_load_mask_words<PROC, GB_GROUPS>(pc, g + trip, stride, end, nmw);
        float unused = 0.0f;
        gb_greedy_trip<PROC, NL, false>(pc, g, g, stride, goff, cur, n, mw, tbest, tidx, unused, w);
        gb_take_groups<GB_GROUPS>(cur, n, mw, nxt, nn, nmw);
    }
    if (tbest > -gb_inf()) {
        w.seen |= GB_SEEN_FINITE;
    }
    if (NL == 0 && tbest > -gb_inf()) {
        w.key = gb_pack(tbest, goff + tidx);
    }
}

// gb_share_bound returns the larger of a lane's bound and the block's shared one, and
// raises the shared one (lane 0, only when it grows). Lanes may read different shared
// values as other warps raise it: each is a lower bound of the row's winning score
// whichever they read, and nothing collective depends on it.
__device__ __forceinline__ float gb_share_bound(float wlower, gb_u32* s_bound) {
    const gb_u32 k = gb_orderkey(wlower);
    const gb_u32 seen = *(volatile gb_u32*)s_bound;
    if (k > seen) {
        if (gb_lane() == 0u) {
            atomicMax(s_bound, k);
        }
        return wlower;
    }
    return gb_orderkey_inverse(seen);
}

// gb_scan_gumbel folds the chunk [start, end) into the thread's best key with Gumbel
// noise. Each trip first agrees across the warp (and the block) on
// a lower bound of the row's winning score: the best score a lane has reached, or
// fl(x·invT + MinGumbel) of any element seen, which that element's score cannot fall
// below. A group of four whose fl(max x·invT + MaxGumbel) is below it skips Philox; an
// element whose fl(x·invT + bound(w)) is below it skips its logarithms. Neither changes
// the result: a skipped score is provably below the winner's. The trip count is the same
// for every lane of a warp, as the warp reduction requires.
//
// With PROC every bound and score is of the processed logits x'. NL log-sum-exps run
// beside it (every element counts, skipped or not): proc over fl(x'·invT) and, with
// NL = 2, raw over the logits; NL = 1 only when the two are the same (no processors,
// invT = 1). With NL > 0, win.x and win.v follow the best key (see gb_win).
template <int KIND, bool PROC, int NL>
__device__ __forceinline__ void gb_scan_gumbel(const typename gb_io<KIND>::elem* row, gb_u32 start,
                                               gb_u32 end, bool vec, float invT, gb_u32 step_lo, gb_u32 step_hi,
                                               const gb_row_params& p, const gb_processor& pc, gb_u32 goff,
                                               gb_u32* s_bound, gb_win& win) {
    gb_u64& tkey = win.key; // (w is the Philox words below)
    gb_u32& flags = win.seen;
    gb_lse& raw = win.raw;
    gb_lse& proc = win.proc;
    const gb_u32 stride = 4u * blockDim.x;
    const gb_u32 trip = GB_GROUPS * stride;
    float tbest = -gb_inf(); // the thread's best score: the score of tkey
    gb_u32 g = start + 4u * threadIdx.x;
    float cur[GB_GROUPS][4];
    gb_u32 n[GB_GROUPS];
    gb_mask_pair mw[GB_GROUPS];
    gb_load_groups<KIND, GB_GROUPS>(row, g, stride, end, vec, cur, n);
    gb_load_mask_words<PROC, GB_GROUPS>(pc, g, stride, end, mw);
    const bool whole_ok = vec && gb_masks_at_most(pc) && (stride & 31u) == 0u; // as in gb_scan_greedy
    const gb_u32 sh = g & 31u; // where a whole trip's groups find their mask bits
    const gb_u32* mk;
    const gb_u32* bm;
    gb_mask_arrays(pc, mk, bm);
    // One trip of the thread's groups g, g + stride, ... (then g moves on by a trip).
    // WHOLE: this trip's groups and the next one's are whole for every thread of the
    // block, and whole_ok holds: no bounds, fills or feature tests.
    auto run_trip = [&](auto whole) {
        constexpr bool WHOLE = decltype(whole)::value;
        float nxt[GB_GROUPS][4];
        gb_u32 nn[GB_GROUPS];
        gb_mask_pair nmw[GB_GROUPS];
        gb_u32 nc[GB_GROUPS]; // this trip's group lengths, constant in whole trips
#pragma unroll
        for (int i = 0; i < GB_GROUPS; ++i) {
            nc[i] = WHOLE ? 4u : n[i];
        }
        if (WHOLE) {
            gb_load_whole_groups<KIND, GB_GROUPS>(row, g + trip, stride, nxt);
            gb_load_whole_mask_words<PROC, GB_GROUPS>(mk, bm, g + trip, stride, nmw);
#pragma unroll
            for (int i = 0; i < GB_GROUPS; ++i) {
                nn[i] = 4u;
            }
        } else {
            gb_load_groups<KIND, GB_GROUPS>(row, g + trip, stride, end, vec, nxt, nn);
            gb_load_mask_words<PROC, GB_GROUPS>(pc, g + trip, stride, end, nmw);
        }
        float xs[GB_GROUPS][4]; // -Inf for -Inf logits and for elements past end
        float mx[GB_GROUPS];
        float lower = tbest;
        float rmax[GB_GROUPS]; // with NL = 2, the groups' largest logits
        float unused = 0.0f;
        gb_prepare<PROC, NL, GB_GROUPS, WHOLE>(pc, WHOLE ? sh : g, stride, cur, nc, mw, xs, flags, unused, raw, rmax);
#pragma unroll
        for (int i = 0; i < GB_GROUPS; ++i) {
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                xs[i][j] = __fmul_rn(xs[i][j], invT);
            }
            // Without processors, the raw log-sum-exp has the group's largest logit already,
            // and fl(max x·invT) = max fl(x·invT) (invT > 0: multiplying and rounding are
            // monotone, NaN is ignored by both maxima): one multiplication for three maxima.
            mx[i] = (!PROC && NL == 2) ? __fmul_rn(rmax[i], invT) : gb_max4(xs[i]);
            if (NL >= 1) {
                gb_lse_add4(proc, xs[i], mx[i]);
            }
            lower = fmaxf(lower, __fadd_rn(mx[i], GB_MIN_GUMBEL));
        }
        float wlower = gb_warp_max_f32_all(lower);
        wlower = gb_share_bound(wlower, s_bound);
        bool run[GB_GROUPS];
        bool any_run = false;
#pragma unroll
        for (int i = 0; i < GB_GROUPS; ++i) {
            run[i] = nc[i] != 0u && !(__fadd_rn(mx[i], GB_MAX_GUMBEL) < wlower);
            any_run = any_run || run[i];
        }
        if (any_run) {
            gb_u32 c0[GB_GROUPS];
#pragma unroll
            for (int i = 0; i < GB_GROUPS; ++i) {
                c0[i] = (goff + g + (gb_u32)i * stride) >> 2;
            }
            gb_u32 w[GB_GROUPS][4];
            gb_philox_groups<GB_GROUPS>(c0, step_lo, step_hi, GB_PURPOSE_GUMBEL, p.seed_lo, p.seed_hi, w);
            bool need[GB_GROUPS][4];
            bool any_tail = false;
#pragma unroll
            for (int i = 0; i < GB_GROUPS; ++i) {
#pragma unroll
                for (gb_u32 j = 0; j < 4u; ++j) {
                    // A -Inf logit scores -Inf: it is computed only while nothing better
                    // is known, and then its noise cannot change that.
                    need[i][j] = run[i] && j < nc[i] && !(__fadd_rn(xs[i][j], gb_cheap_bound(w[i][j])) < wlower);
                    any_tail = any_tail || (need[i][j] && w[i][j] < GB_TAIL_THRESHOLD);
                }
            }
            gb_u32 t[GB_GROUPS][4];
            if (any_tail) {
                gb_philox_groups<GB_GROUPS>(c0, step_lo, step_hi, GB_PURPOSE_GUMBEL_TAIL, p.seed_lo, p.seed_hi,
                                            t);
            } else {
#pragma unroll
                for (int i = 0; i < GB_GROUPS; ++i) {
                    t[i][0] = t[i][1] = t[i][2] = t[i][3] = 0u;
                }
            }
#pragma unroll
            for (int i = 0; i < GB_GROUPS; ++i) {
#pragma unroll
                for (gb_u32 j = 0; j < 4u; ++j) {
                    if (need[i][j]) {
                        float s = __fadd_rn(xs[i][j], gb_gumbel(w[i][j], t[i][j]));
                        const gb_u64 key = gb_pack(s, goff + g + (gb_u32)i * stride + j);
                        if (NL != 0 && key > tkey) {
                            win.x = cur[i][j];
                            win.v = xs[i][j];
                        }
                        tkey = gb_max_u64(tkey, key);
                        tbest = fmaxf(tbest, s);
                    }
                }
            }
        }
        gb_take_groups<GB_GROUPS>(cur, n, mw, nxt, nn, nmw);
        g += trip;
    };
    // The trips in which every warp holds elements run in a loop that is uniform for the
    // block. After them, only the warps holding elements run the last trip: the trip's
    // collectives are warp-wide, never block-wide, and an empty trip changes nothing, while
    // the warps without elements would spend the issue slots that the others need (most
    // of a block's warps, at decode batch sizes, where a block makes two or three trips).
    const gb_u32 last_warp = 4u * (blockDim.x - GB_WARP_SIZE); // the last warp's lane 0, from g0
    gb_u32 g0 = start;
    if (whole_ok) {
        for (; g0 + 2u * trip <= end; g0 += trip) {
            run_trip(gb_bool<true>());
        }
    }
    for (; g0 < end && end - g0 > last_warp; g0 += trip) {
        run_trip(gb_bool<false>());
    }
    if (g - 4u * gb_lane() < end) { // this warp's lane 0 holds an element of the last trip
        run_trip(gb_bool<false>());
    }
}

// gb_warp_win leaves in lane 0 the warp's merge of w: the key's maximum and the
// observations' OR (to every lane), then the NL log-sum-exps (gb_warp_lse2: proc, and raw
// with NL = 2). Every warp of a 1024-thread block runs it at once, so what counts is the
// multiprocessor's shuffle throughput (one warp-wide shuffle per clock): on sm_80 and
// later the key, the observations and the maxima take one warp reduction each (two for
// the 64-bit key) instead of a five-level tree of shuffles.
template <int NL>
__device__ __forceinline__ void gb_warp_win(gb_win& w) {
    w.key = gb_warp_max_u64_all(w.key);
    w.seen = gb_warp_or_all(w.seen);
    if (NL != 0) {
        gb_warp_lse2(w.proc, w.raw, NL == 2);
    }
}

// gb_warp_win_xv is gb_warp_win that also hands lane 0 the payload (x, v) of a lane whose
// key won: a ballot and two shuffles once the key is known, not two per level.
template <int NL>
__device__ __forceinline__ void gb_warp_win_xv(gb_win& w) {
    const gb_u64 own = w.key;
    gb_warp_win<NL>(w); // every lane gets the warp's key
    const int src = gb_first_lane(own == w.key);
    w.x = gb_shfl_f32(w.x, src);
    w.v = gb_shfl_f32(w.v, src);
}

// gb_block_win leaves in thread 0 the block's merge of w: the warps' results meet in one
// round of shared memory and one barrier (keys, observations, log-sum-exp pairs and, with XV,
// the winner's payload (x, v)), and warp 0 merges them as a warp merges its lanes (lane l
// takes warp l's slots, an empty merge past the block's warps). Warp 0 reads the shared
// arrays after the barrier: a caller passes another barrier before it writes them again.
template <int NL, bool XV>
__device__ __forceinline__ void gb_block_win(gb_win& w, gb_u64* s_key, gb_u32* s_seen, gb_u64* s_pair,
                                             gb_u64* s_xv) {
    if (XV) {
        gb_warp_win_xv<NL>(w);
    } else {
        gb_warp_win<NL>(w);
    }
    const gb_u32 wp = gb_warp();
    if (gb_lane() == 0u) {
        s_key[wp] = w.key;
        s_seen[wp] = w.seen;
        if (NL >= 1) {
            s_pair[2u * wp + 1u] = gb_lse_pack(w.proc);
        }
        if (NL == 2) {
            s_pair[2u * wp] = gb_lse_pack(w.raw);
        }
        if (XV) {
            s_xv[wp] = ((gb_u64)__float_as_uint(w.v) << 32) | __float_as_uint(w.x);
        }
    }
    __syncthreads();
    if (wp == 0u) {
        const gb_u32 l = gb_lane();
        const bool have = l < gb_num_warps();
        w.key = have ? s_key[l] : 0ull;
        w.seen = have ? s_seen[l] : 0u;
        if (NL >= 1) {
            gb_lse_init(w.proc);
            if (have) {
                w.proc = gb_lse_unpack(s_pair[2u * l + 1u]);
            }
        }
        if (NL == 2) {
            gb_lse_init(w.raw);
            if (have) {
                w.raw = gb_lse_unpack(s_pair[2u * l]);
            }
        }
        if (XV) {
            const gb_u64 xv = have ? s_xv[l] : 0ull;
            w.x = __uint_as_float((gb_u32)xv);
            w.v = __uint_as_float((gb_u32)(xv >> 32));
            gb_warp_win_xv<NL>(w);
        } else {
            gb_warp_win<NL>(w);
        }
    }
}

// gb_finish_draw is thread 0's work for a draw whose merged gb_win is known: the token
// and status of slot o, the log-probability record (LOGPROBS) and the end-of-draws work.
__device__ __forceinline__ void gb_finish_draw(gb_row_params* params, const gb_row_params& p, gb_u32 y, gb_u64 o,
                                               const gb_win& w, int nl, gb_i32* tokens, gb_i32* status,
                                               float* logprobs, gb_u32* counters, gb_u32* counts, gb_u32 vocab,
                                               gb_u64* shard) {
    gb_i32 st = gb_finish(tokens, status, o, w.key, w.seen);
    if (p.flags & GB_FLAG_LOGPROBS) {
        gb_write_record_sets(logprobs, o, st == GB_STATUS_OK, nl, w.x, w.v, w.raw, w.proc);
    }
    if (gb_exact_needed(st, w.key)) {
        st = GB_STATUS_EXACT;
        status[o] = st;
    }
    if (p.flags & GB_FLAG_SHARD) {
        shard[o] = gb_shard_key(w.key, st);
    }
    gb_row_done(params, p, y, counters, tokens, status, counts, vocab);
}

// gb_finish_warp_record is the finishing block's work for a draw with a record (NL > 0)
// and S <= warp size, run by warp 0 alone once the draw's observations are in thread 0: the
// token from the partials' keys, and the record from their log-sum-exp pairs. A lone
// warp issues in order, so every dependent step after the last arrival counts in full:
// each pair set is merged within a few lanes, not through a warp max and a five-level
// tree of shuffles. Lanes of even number merge the raw pairs (partials words 2i), odd
// ones the processed pairs (2i + 1); with per lanes to a set (the fewest of 1, 2, 4 and,
// for HIP's 64-lane warps, 8 that leave a lane at most 8 pairs), lane l takes pairs
// (l >> 1) mod per + j * per, all loaded at once with the keys and payloads, and the
// set's lanes then meet in log2(per) butterfly steps. Lane 0 writes the raw half of the
// record (words 0 and 2), lane 1 the processed half (1 and 3).
template <int NL>
__device__ __forceinline__ void gb_finish_warp_record(gb_row_params* params, const gb_row_params& p, gb_u32 y,
                                                      gb_u64 o, gb_u32 seen, const gb_u64* part,
                                                      const gb_u64* pair, const gb_u64* xv, gb_u32 nblocks,
                                                      gb_i32* tokens, gb_i32* status, float* logprobs,
                                                      gb_u32* counters, gb_u32* counts, gb_u32 vocab) {
    const gb_u32 l = gb_lane();
    const gb_u32 per = nblocks <= 8u ? 1u : nblocks <= 16u ? 2u : nblocks <= 32u ? 4u : 8u;
    const gb_u32 set = l & 1u;
    const gb_u32 first = (l >> 1) & (per - 1u);
    // Every load is issued before any waits on one.
    gb_u64 k = 0ull, u = 0ull;
    if (l < nblocks) {
        k = gb_load_published(part + l);
        u = gb_load_published(xv + l);
    }
    float m[8], sum[8];
#pragma unroll
    for (gb_u32 j = 0; j < 8u; ++j) {
        const gb_u32 i = first + j * per;
        const gb_u64 wd = i < nblocks ? gb_load_published(pair + 2u * i + set) : GB_LSE_EMPTY_WORD;
        m[j] = __uint_as_float((gb_u32)wd);
        sum[j] = __uint_as_float((gb_u32)(wd >> 32));
    }
    // The token's chain (two warp reductions, a ballot, two shuffles) comes first, so
    // that the log-sum-exps' arithmetic below issues while its results are on their way.
    const gb_u64 key = gb_warp_max_u64_all(k);
    const int src = gb_first_lane(k == key);
    const float x = gb_shfl_f32(__uint_as_float((gb_u32)u), src);
    const float v = gb_shfl_f32(__uint_as_float((gb_u32)(u >> 32)), src);
    // The lane's pairs: their largest reference (NaN ignored) and the sum rescaled to it,
    // in trees. Empty pairs add 0 (2^-Inf, or 2^0 * 0 when every pair is empty); a NaN or
    // +Inf reference spoils the sum, but its row ends with status 1.
    float top = fmaxf(fmaxf(fmaxf(m[0], m[1]), fmaxf(m[2], m[3])), fmaxf(fmaxf(m[4], m[5]), fmaxf(m[6], m[7])));
    float e[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        e[j] = __fmul_rn(sum[j], gb_exp_diff(m[j], top));
    }
    float total = __fadd_rn(__fadd_rn(__fadd_rn(e[0], e[1]), __fadd_rn(e[2], e[3])),
                            __fadd_rn(__fadd_rn(e[4], e[5]), __fadd_rn(e[6], e[7])));
    // The set's lanes meet: butterfly steps 2, 4 and (64-lane warps only) 8, each kept
    // only where per reaches it (selects, not branches, so that the steps schedule with
    // the token's chain).
#pragma unroll
    for (gb_u32 d = 2u; d <= 8u; d <<= 1) {
        if (d == 8u && per <= 4u) {
            break; // S > 32: a 64-lane warp only
        }
        const float om = gb_shfl_xor_f32(top, d), os = gb_shfl_xor_f32(total, d);
        const float r = fmaxf(top, om);
        const float t = __fadd_rn(__fmul_rn(total, gb_exp_diff(top, r)), __fmul_rn(os, gb_exp_diff(om, r)));
        const bool step = d < 2u * per;
        total = step ? t : total;
        top = step ? r : top;
    }
    // Thread 0's atomic brought the observations; shuffled only now, so that the wait for
    // them comes last.
    seen = __shfl_sync(0xFFFFFFFFu, seen, 0);
    if (l < 2u) {
        // The record's half of this lane's set, NaN unless the draw ends with status 0
        // (as gb_write_record_sets).
        const bool ok = gb_seen_status(seen) == GB_STATUS_OK;
        const float nan = __uint_as_float(0x7FC00000u);
        float lse = nan, lp = nan;
        if (ok) {
            lp = gb_lse_logprob(set != 0u ? v : x, top, total, lse);
        }
        float* rec = logprobs + 4u * o;
        rec[l] = lp;
        rec[2u + l] = lse;
    }
    if (l == 0u) {
        const gb_i32 st = gb_finish(tokens, status, o, key, seen);
        if (gb_exact_needed(st, key)) {
            status[o] = GB_STATUS_EXACT;
        }
        gb_row_done(params, p, y, counters, tokens, status, counts, vocab);
    }
}

// gb_argmax_end is a draw's work after the scan (NL log-sum-exps): the block's merge
// (with a record, the winner's payload rides along, see gb_win); with S = 1 thread 0
// finishes the draw, otherwise the block publishes its partials and the last block of the
// draw merges them all and finishes it. What follows the last arrival is the draw's
// critical path, so nothing there waits on a load that could be made earlier: each block
// publishes its winner's logit and value with its partials, the last block takes the row
// observations and resets the counters before merging, so that those atomics' round trip
// overlaps the merge, and when every partial is in warp 0 (S <= warp size: every batch of
// 5 rows or more on 132 SMs) warp 0 merges them alone, without the shared-memory round
// and its barrier (with a record, gb_finish_warp_record).
template <int NL>
__device__ __forceinline__ void gb_argmax_end(gb_row_params* params, const gb_row_params& p, gb_u32 y, gb_u32 z,
                                              gb_u64 o, gb_win& w, gb_i32* tokens, gb_i32* status,
                                              gb_u64* partials, gb_u32* counters, float* logprobs, gb_u32* counts,
                                              gb_u32 vocab, gb_u64* shard, gb_u64* s_key, gb_u32* s_seen,
                                              gb_u64* s_pair, gb_u64* s_xv, gb_u32* s_last) {
    const gb_u32 nblocks = gridDim.x;
    gb_block_win<NL, NL != 0>(w, s_key, s_seen, s_pair, s_xv);
    if (nblocks == 1u) {
        if (threadIdx.x == 0u) {
            gb_finish_draw(params, p, y, o, w, NL, tokens, status, logprobs, counters, counts, vocab, shard);
        }
        return;
    }

    // Split phase: publish the partials, then count arrivals; the last block reduces.
    const gb_u64 draw_row = (gb_u64)z * gridDim.y + y; // this draw's row of the scratch
    gb_u64* part = partials + draw_row * nblocks;
    const gb_u64 draws_blocks = (gb_u64)gridDim.y * gridDim.z * nblocks;
    gb_u64* pair = partials + draws_blocks + 2u * draw_row * nblocks;
    gb_u64* xv = partials + 3u * draws_blocks + draw_row * nblocks;
    gb_u32* cnt = counters + 2u * draw_row;
    if (threadIdx.x == 0u) {
        part[blockIdx.x] = w.key;
        if (NL != 0) {
            pair[2u * blockIdx.x] = gb_lse_pack(NL == 1 ? w.proc : w.raw);
            pair[2u * blockIdx.x + 1u] = gb_lse_pack(w.proc);
            xv[blockIdx.x] = ((gb_u64)__float_as_uint(w.v) << 32) | __float_as_uint(w.x);
        }
        if (w.seen != 0u) {
            atomicOr(&cnt[1], w.seen);
        }
        *s_last = gb_arrive(&cnt[0], nblocks) ? 1u : 0u;
    }
    __syncthreads();
    if (*s_last == 0u) {
        return;
    }
    // Every block ORed its observations in before it arrived.
    gb_u32 seen = 0u;
    if (threadIdx.x == 0u) {
        seen = atomicExch(&cnt[1], 0u);
        atomicExch(&cnt[0], 0u);
    }
    if (NL != 0 && nblocks <= (gb_u32)GB_WARP_SIZE) {
        if (gb_warp() == 0u) {
            gb_finish_warp_record<NL>(params, p, y, o, seen, part, pair, xv, nblocks, tokens, status, logprobs,
                                      counters, counts, vocab);
        }
        return;
    }
    w.key = 0ull;
    w.seen = 0u;
    w.x = w.v = 0.0f;
    gb_lse_init(w.raw);
    gb_lse_init(w.proc);
    for (gb_u32 i = threadIdx.x; i < nblocks; i += blockDim.x) {
        const gb_u64 k = gb_load_published(part + i);
        if (NL != 0) {
            const gb_u64 r = gb_load_published(pair + 2u * i), q = gb_load_published(pair + 2u * i + 1u);
            const gb_u64 u = gb_load_published(xv + i);
            if (i == threadIdx.x) { // a thread's first partial: nothing to merge it with
                w.raw = gb_lse_unpack(r);
                w.proc = gb_lse_unpack(q);
            } else {
                if (NL == 2) {
                    gb_lse_merge_packed(w.raw, r);
                }
                gb_lse_merge_packed(w.proc, q);
            }
            if (k > w.key) {
                w.x = __uint_as_float((gb_u32)u);
                w.v = __uint_as_float((gb_u32)(u >> 32));
            }
        }
        w.key = gb_max_u64(w.key, k);
    }
    if (nblocks <= (gb_u32)GB_WARP_SIZE) {
        if (gb_warp() != 0u) {
            return;
        }
        if (NL != 0) {
            gb_warp_win_xv<NL>(w);
        } else {
            gb_warp_win<NL>(w);
        }
    } else {
        gb_block_win<NL, NL != 0>(w, s_key, s_seen, s_pair, s_xv);
    }
    if (threadIdx.x == 0u) {
        w.seen = seen;
        gb_finish_draw(params, p, y, o, w, NL, tokens, status, logprobs, counters, counts, vocab, shard);
    }
}

// gb_gumbel_argmax is the kernel: block (x, y, z) scans its chunk of launch row y for
// draw z, and the row's last block to arrive finishes the draw.
template <int KIND>
__device__ __forceinline__ void gb_gumbel_argmax(const typename gb_io<KIND>::elem* __restrict__ logits,
                                                 gb_row_params* params, gb_i32* tokens, gb_i32* status,
                                                 gb_u64* partials, gb_u32* counters, gb_u64 row_stride,
                                                 gb_u32 vocab, float* logprobs, const float* bias, gb_u32* counts,
                                                 const gb_u32* mask, const gb_u32* bitmask, gb_u32 vocab_offset,
                                                 gb_u64* shard) {
    __shared__ gb_u64 s_key[GB_MAX_WARPS];
    __shared__ gb_u32 s_seen[GB_MAX_WARPS];
    __shared__ gb_u64 s_pair[2 * GB_MAX_WARPS];
    __shared__ gb_u32 s_last;
    __shared__ gb_u32 s_bound; // the order key of the block's lower bound
    __shared__ gb_u64 s_xv[GB_MAX_WARPS]; // the warps' winners' (x, v) for the record
    // gumbel_exact, which a batch queues right after, starts its blocks while these finish.
    gb_grid_release();

    const gb_u32 y = blockIdx.y;
    const gb_u32 z = blockIdx.z;
    const gb_u32 nblocks = gridDim.x;
    const gb_row_params p = params[y];
    if ((p.flags & GB_FLAG_ROUTED) && (p.flags & (GB_FLAG_CATEGORICAL | GB_FLAG_FILTERED))) {
        return; // another kernel's row: left entirely alone
    }
    const gb_u64 o = (gb_u64)p.row * gridDim.z + z; // this draw's output slot
    // A shard's offset keeps Philox's groups of four aligned; a shard writes neither
    // records nor counts, which need the merged token.
    const bool in_shard = (p.flags & GB_FLAG_SHARD) != 0u;
    const bool bad_shard = in_shard && ((vocab_offset & 3u) != 0u || (gb_u64)vocab_offset + vocab > GB_MAX_VOCAB ||
                                        (p.flags & (GB_FLAG_LOGPROBS | GB_FLAG_RECORD)) != 0u);
    if ((p.flags & GB_FLAGS_RESERVED) != 0u || bad_shard || gb_bad_row(p.temperature, vocab)) {
        // Uniform for every block of the row: none touches the counters, and the row
        // gets no end-of-draws work.
        if (blockIdx.x == 0u && threadIdx.x == 0u) {
            tokens[o] = -1;
            status[o] = GB_STATUS_BAD_PARAMS;
            if (p.flags & GB_FLAG_LOGPROBS) {
                gb_write_record(logprobs, o, false, 0.0f, 0.0f, 0.0f, 0.0f);
            }
            if (in_shard) {
                shard[o] = gb_shard_key(0ull, GB_STATUS_BAD_PARAMS);
            }
        }
        return;
    }
    const gb_u32 goff = in_shard ? vocab_offset : 0u; // global index of element 0

    gb_u32 start, end; // this block's chunk
    gb_chunk_of(vocab, nblocks, blockIdx.x, start, end);

    const typename gb_io<KIND>::elem* row = logits + (gb_u64)p.row * row_stride;
    const bool vec = gb_io<KIND>::vec_ok(row);
    const bool greedy = p.temperature == 0.0f;
    const float invT = greedy ? 1.0f : 1.0f / p.temperature;
    const gb_processor pc = gb_processor_of(p, bias, counts, mask, bitmask, vocab);
    const bool procs = pc.flags != 0u;
    // The log-sum-exps the record needs: none, one (raw and processed are the same set:
    // no processors and invT = 1, greedy rows included) or two.
    const int nl = !(p.flags & GB_FLAG_LOGPROBS) ? 0 : (!procs && invT == 1.0f) ? 1 : 2;

    // Each combination of features is its own instantiation of the scan, so a row without
    // them runs the plain loop; the branches are uniform for the block. With a record to
    // write, the scan also keeps its best element's raw logit and value.
    gb_win w;
    w.key = 0ull;
    w.seen = 0u;
    w.x = w.v = 0.0f;
    gb_lse_init(w.raw);
    gb_lse_init(w.proc);
    if (greedy) {
        if (!procs) {
            if (nl == 0) {
                gb_scan_greedy<KIND, false, 0>(row, start, end, vec, pc, goff, w);
            } else {
                gb_scan_greedy<KIND, false, 1>(row, start, end, vec, pc, goff, w);
            }
        } else if (nl == 0) {
            gb_scan_greedy<KIND, true, 0>(row, start, end, vec, pc, goff, w);
        } else {
            gb_scan_greedy<KIND, true, 2>(row, start, end, vec, pc, goff, w);
        }
    } else {
        gb_u32 step_lo, step_hi;
        gb_step_plus(p, z, step_lo, step_hi);
        // The branch is the same for the whole block (one row per block).
        if (threadIdx.x == 0u) {
            s_bound = 0u; // below the key of every float, -Inf included
        }
        __syncthreads();
        if (!procs) {
            if (nl == 0) {
                gb_scan_gumbel<KIND, false, 0>(row, start, end, vec, invT, step_lo, step_hi, p, pc, goff, &s_bound, w);
            } else if (nl == 1) {
                gb_scan_gumbel<KIND, false, 1>(row, start, end, vec, invT, step_lo, step_hi, p, pc, goff, &s_bound, w);
            } else {
                gb_scan_gumbel<KIND, false, 2>(row, start, end, vec, invT, step_lo, step_hi, p, pc, goff, &s_bound, w);
            }
        } else if (nl == 0) {
            gb_scan_gumbel<KIND, true, 0>(row, start, end, vec, invT, step_lo, step_hi, p, pc, goff, &s_bound, w);
        } else {
            gb_scan_gumbel<KIND, true, 2>(row, start, end, vec, invT, step_lo, step_hi, p, pc, goff, &s_bound, w);
        }
    }
    if (nl == 0) {
        gb_argmax_end<0>(params, p, y, z, o, w, tokens, status, partials, counters, logprobs, counts, vocab, shard,
                         s_key, s_seen, s_pair, s_xv, &s_last);
    } else if (nl == 1) {
        gb_argmax_end<1>(params, p, y, z, o, w, tokens, status, partials, counters, logprobs, counts, vocab, shard,
                         s_key, s_seen, s_pair, s_xv, &s_last);
    } else {
        gb_argmax_end<2>(params, p, y, z, o, w, tokens, status, partials, counters, logprobs, counts, vocab, shard,
                         s_key, s_seen, s_pair, s_xv, &s_last);
    }
}
