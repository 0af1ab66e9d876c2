// topn (ABI.md): the N <= GB_MAX_TOPN largest keys of a row (raw logits, or Gumbel
// scores with PERTURBED), S >= 1 blocks per row, one launch. Each thread keeps its
// GB_TOPN_THREAD largest keys in registers (a fixed-size, fully unrolled insertion, so
// nothing goes to local memory, whatever N) behind one comparison with its threshold. A
// block places its top N by a thresholded selection (gb_topn_select), and the last block
// of the row places the row's from the S published lists the same way
// (gb_topn_select_published). Where that gives up, the lists are merged one key at a time
// (gb_topn_merge); a thread that let go of keys above the block's N-th (N >
// GB_TOPN_THREAD and the top N bunched in one thread: rare on LLM logits) makes the block
// take the rest of its top N by further passes below the keys it is sure of. A perturbed
// list that may be inexact (a score of GB_EXACT_LIMIT or more, or an empty entry) is made
// exact by the last block (gb_topn_exact).

// GB_TOPN_THREAD is the keys a thread keeps while it scans: a short list keeps every
// thread's threshold in a few registers and rising early, and with a block's thousands of
// lists a block's top 20 rarely puts more than 4 in one.
#define GB_TOPN_THREAD 4

// GB_TOPN_ALL is the cap of a first pass: above every key.
#define GB_TOPN_ALL 0xFFFFFFFFFFFFFFFFull

// gb_topn_insert puts key into a thread's list (largest first, 0 = empty) and returns the
// new entry at `at`, the threshold a key must beat to enter.
template <int L>
__device__ __forceinline__ gb_u64 gb_topn_insert(gb_u64 lst[L], gb_u64 key, gb_u32 at) {
    gb_u64 thr = 0ull;
#pragma unroll
    for (int j = 0; j < L; ++j) {
        const gb_u64 a = lst[j];
        const bool gt = key > a;
        lst[j] = gt ? key : a;
        key = gt ? a : key;
        thr = (gb_u32)j == at ? lst[j] : thr;
    }
    return thr;
}

// gb_topn_insert_later is gb_topn_insert for a key that comes after every listed key in
// element order, as a scan's do (gb_list_insert_later).
template <int L>
__device__ __forceinline__ gb_u64 gb_topn_insert_later(gb_u64 lst[L], gb_u64 key, gb_u32 at) {
    gb_list_insert_later<L>(lst, key);
    gb_u64 thr = 0ull;
#pragma unroll
    for (int j = 0; j < L; ++j) {
        thr = (gb_u32)j == at ? lst[j] : thr;
    }
    return thr;
}

// gb_topn_at is where a thread's threshold sits in its list for a pass that wants n keys:
// a thread needs no more than n of its own.
template <int L>
__device__ __forceinline__ gb_u32 gb_topn_at(gb_u32 n) {
    return (n < (gb_u32)L ? n : (gb_u32)L) - 1u;
}

// gb_topn_merge moves the block's n = N - have largest keys of the threads' lists into
// s_top[have, N) (0 where there are fewer), emptying the lists as it goes: each warp takes
// its n largest by n warp maxima into s_wtop, then warp 0 merges the warps' sorted lists
// the same way, so the block meets at one barrier instead of one per key.
//
// A thread lets go only of keys below its threshold thr (0 when it let go of none), so
// every key at or above D, the block's largest threshold, is in the lists: the merged
// entries at or above D are sure to be the block's, and all of them are when the last
// one reaches D (D = 0 included). gb_topn_merge advances have (the same in every thread)
// past the sure entries and returns whether it reached N. It always advances: D's own
// thread lists min(n, L) keys at or above D, all merged when the last entry is below D;
// with n <= L they are n, so the last entry reaches D and the check is skipped.
template <int L>
__device__ __forceinline__ bool gb_topn_merge(gb_u64 lst[L], gb_u64 thr, gb_u32 N, gb_u32& have, gb_u64* s_top,
                                              gb_u64* s_wtop, gb_u64* s_wthr, gb_u32* s_have) {
    const gb_u32 lane = gb_lane(), warp = gb_warp();
    const gb_u32 n = N - have;
    const bool check = n > (gb_u32)L; // uniform
    if (check) {
        const gb_u64 d = gb_warp_max_u64_all(thr);
        if (lane == 0u) {
            s_wthr[warp] = d;
        }
    }
    gb_warp_take<L>(lst, n, s_wtop + warp * GB_MAX_TOPN);
    __syncthreads();
    if (warp == 0u) {
        const bool own = lane < gb_num_warps();
        const gb_u64 d = check ? gb_warp_max_u64_all(own ? s_wthr[lane] : 0ull) : 0ull;
        const gb_u64* list = s_wtop + lane * GB_MAX_TOPN;
        gb_u32 at = 0u, sure = 0u;
        gb_u64 head = own ? list[0] : 0ull;
        gb_u64 best = 0ull;
        for (gb_u32 k = 0; k < n; ++k) {
            best = gb_warp_max_u64_all(head);
            if (lane == 0u) {
                s_top[have + k] = best;
            }
            sure += best >= d ? 1u : 0u; // the entries fall: the sure ones come first
            if (best != 0ull && head == best) { // a list ends at its first 0
                ++at;
                head = at < n ? list[at] : 0ull;
            }
        }
        if (lane == 0u) {
            *s_have = best >= d ? N : have + sure;
        }
    }
    __syncthreads();
    have = *s_have;
    return have == N;
}

// A thresholded selection takes a block's (or a row's) top N without a round per key.
// Any N actual keys bound the N-th largest from below, so with T the N-th largest of a
// few probes (each warp's or each published list's largest keys), every key of the top N
// is at or above T; on LLM logits only a few dozen keys are, and ranking those against
// each other (every candidate counts the larger ones) places the top N at once. The
// probes and candidates live in the words of s_wtop, which the per-key merge
// (gb_topn_merge) only uses when this selection gives up: more than GB_TOPN_CANDS
// candidates, or a thread that let go of keys at or above T.
//
// GB_TOPN_SELECT_MIN is the smallest N that takes it: below about a dozen keys its four
// barriers cost more than the per-key merge's 2N warp rounds (docs/performance-notes.md).
#define GB_TOPN_SELECT_MIN 12u
#define GB_TOPN_PROBES 384
#define GB_TOPN_CANDS (GB_MAX_WARPS * GB_MAX_TOPN - GB_TOPN_PROBES)

// gb_topn_sel is a thresholded selection's shared state.
struct gb_topn_sel {
    gb_u64 t;      // T, the N-th largest probe (0: fewer than N probes)
    gb_u32 count;  // candidates at or above T
    gb_u32 unsure; // a thread let go of keys at or above T
};

// gb_topn_sel_reset empties sel ahead of gb_topn_bound.
__device__ __forceinline__ void gb_topn_sel_reset(gb_topn_sel* sel) {
    if (threadIdx.x == 0u) {
        sel->t = 0ull;
        sel->count = 0u;
        sel->unsure = 0u;
    }
}

// gb_topn_rank_all writes the N largest of the c distinct keys of list (0 = none) into
// s_top by rank, 0 past c (gb_rank_keys). Given t (for probes), it sets *t to the key of
// rank N - 1 instead, which leaves *t as it was when there are fewer.
__device__ __forceinline__ void gb_topn_rank_all(const gb_u64* list, gb_u32 c, gb_u32 N, gb_u64* s_top,
                                                 gb_u64* t) {
    gb_rank_keys(
        c, [&](gb_u32 i) { return list[i]; },
        [&](gb_u32, gb_u64 key, gb_u32 rank) {
            if (t != nullptr) {
                if (rank == N - 1u) {
                    *t = key;
                }
            } else if (rank < N) {
                s_top[rank] = key;
            }
        });
    if (t == nullptr) {
        for (gb_u32 i = c + threadIdx.x; i < N; i += blockDim.x) {
            s_top[i] = 0ull;
        }
    }
}

// gb_topn_take_candidate appends key to the candidates when it is at or above T. Every
// lane of the warp calls it.
__device__ __forceinline__ void gb_topn_take_candidate(gb_u64 key, gb_u64 t, gb_topn_sel* sel, gb_u64* cand) {
    const bool take = key != 0ull && key >= t;
    const gb_u32 at = gb_list_append(take, &sel->count);
    if (take && at < GB_TOPN_CANDS) {
        cand[at] = key;
    }
}

// gb_topn_busy is how many warps of the block hold elements of a chunk of len: the
// first trip's groups go to the lowest threads.
__device__ __forceinline__ gb_u32 gb_topn_busy(gb_u32 len) {
    const gb_u32 groups = (len + 3u) / 4u;
    return gb_max_u32(1u, gb_min_u32(gb_num_warps(), (groups + GB_WARP_SIZE - 1u) / GB_WARP_SIZE));
}

// gb_topn_probe writes each busy warp's R largest list keys to probes, R such that the
// busy warps reach N between them, and returns how many it wrote (at most N + busy - 1;
// 0 where a warp has fewer keys).
template <int L>
__device__ __forceinline__ gb_u32 gb_topn_probe(const gb_u64 lst[L], gb_u32 busy, gb_u32 N, gb_u64* probes) {
    const gb_u32 R = (N + busy - 1u) / busy;
    gb_u64 own[L];
#pragma unroll
    for (int i = 0; i < L; ++i) {
        own[i] = lst[i];
    }
    for (gb_u32 r = 0; r < R && gb_warp() < busy; ++r) {
        const gb_u64 best = gb_warp_max_u64_all(own[0]);
        if (gb_lane() == 0u) {
            probes[gb_warp() * R + r] = best;
        }
        if (best != 0ull && own[0] == best) { // keys are unique: one lane pops
#pragma unroll
            for (int i = 0; i + 1 < L; ++i) {
                own[i] = own[i + 1];
            }
            own[L - 1] = 0ull;
        }
    }
    return busy * R;
}

// gb_topn_bound is T for the block's lists as they stand: the N-th largest of their
// probes, a key below which is not among the block's top N (0: fewer than N probes).
// *t must be 0 when the block calls it, all its threads together.
template <int L>
__device__ __forceinline__ gb_u64 gb_topn_bound(const gb_u64 lst[L], gb_u32 busy, gb_u32 N, gb_u64* s_wtop,
                                                gb_u64* t) {
    const gb_u32 np = gb_topn_probe<L>(lst, busy, N, s_wtop);
    __syncthreads();
    gb_topn_rank_all(s_wtop, np, N, nullptr, t);
    __syncthreads();
    return *t;
}

// gb_topn_select is the block's top N of its threads' lists (see gb_topn_merge) from a
// chunk of len elements, by a thresholded selection with the probes of gb_topn_probe.
// It returns false, having written nothing to s_top, when it gives up.
template <int L>
__device__ __forceinline__ bool gb_topn_select(const gb_u64 lst[L], gb_u64 thr, gb_u32 N, gb_u32 len,
                                               gb_u64* s_top, gb_u64* s_wtop, gb_topn_sel* sel) {
    // A chunk of one trip gives each thread at most its L >= 4 keys: none is let go.
    if (len <= 4u * blockDim.x) {
        thr = 0ull;
    }
    gb_u64* cand = s_wtop + GB_TOPN_PROBES;
    gb_topn_sel_reset(sel);
    const gb_u64 t = gb_topn_bound<L>(lst, gb_topn_busy(len), N, s_wtop, &sel->t);
    // The thread let go only of keys below thr.
    if (thr > t) {
        sel->unsure = 1u;
    }
#pragma unroll
    for (int i = 0; i < L; ++i) {
        gb_topn_take_candidate(lst[i], t, sel, cand);
    }
    __syncthreads();
    const gb_u32 c = sel->count;
    if (sel->unsure != 0u || c > GB_TOPN_CANDS) {
        return false; // uniform
    }
    gb_topn_rank_all(cand, c, N, s_top, nullptr);
    __syncthreads();
    return true;
}

// gb_topn_probes_published is how many probes gb_topn_select_published takes from S =
// nblocks published lists: each list's R largest keys (R lists' worth reach N), at most
// GB_TOPN_PROBES of them; probe i is word i % R of list i / R (gb_topn_probe_word).
__device__ __forceinline__ gb_u32 gb_topn_probes_published(gb_u32 nblocks, gb_u32 N, gb_u32& R) {
    R = (N + nblocks - 1u) / nblocks;
    return gb_min_u32(nblocks * R, GB_TOPN_PROBES);
}

template <gb_u32 STRIDE>
__device__ __forceinline__ const gb_u64* gb_topn_probe_word(const gb_u64* row_part, gb_u32 i, gb_u32 R) {
    return row_part + (gb_u64)STRIDE * (i / R) + i % R;
}

// gb_topn_select_published is gb_topn_select over the S blocks' published lists (each
// its block's exact top N, largest first), with the np probes of
// gb_topn_probes_published already in s_wtop and sel reset (gb_topn_sel_reset), both
// before a barrier. It never meets a key let go, so it gives up only on too many
// candidates. List b starts at row_part[STRIDE·b].
template <gb_u32 STRIDE>
__device__ __forceinline__ bool gb_topn_select_published(const gb_u64* row_part, gb_u32 nblocks, gb_u32 N,
                                                         gb_u32 np, gb_u64* s_top, gb_u64* s_wtop,
                                                         gb_topn_sel* sel) {
    gb_u64* probes = s_wtop;
    gb_u64* cand = s_wtop + GB_TOPN_PROBES;
    gb_topn_rank_all(probes, np, N, nullptr, &sel->t);
    __syncthreads();
    const gb_u64 t = sel->t;
    const gb_u32 words = nblocks * N;
    // Whole warps go round, for the candidates' ballots.
    for (gb_u32 w = threadIdx.x - gb_lane(); w < words; w += blockDim.x) {
        const gb_u32 i = w + gb_lane();
        const gb_u64 key = i < words ? gb_load_published(row_part + (gb_u64)STRIDE * (i / N) + i % N) : 0ull;
        gb_topn_take_candidate(key, t, sel, cand);
    }
    __syncthreads();
    const gb_u32 c = sel->count;
    if (c > GB_TOPN_CANDS) {
        return false; // uniform
    }
    gb_topn_rank_all(cand, c, N, s_top, nullptr);
    __syncthreads();
    return true;
}

// GB_TOPN_BOUNDS is how many times a long scan raises its threads' thresholds to the
// block's bound (gb_topn_bound_trip).
#define GB_TOPN_BOUNDS 3

// GB_TOPN_NO_TRIP is the trip of a bound a scan does not take.
#define GB_TOPN_NO_TRIP 0xFFFFFFFFu

// gb_topn_bound_trip is the trip of `trips` before which a scan takes the block's bound
// `slot` (GB_TOPN_NO_TRIP: none). A thread's own threshold is its fourth key, which on a
// long chunk lets a key through on nearly every trip of some lane of each warp, and the
// warp then runs the insertion; the block's bound, the N-th largest of the warps'
// probes, lets through a few keys per thousand after a few trips, and again fewer after
// the next. Each bound costs two barriers, so a chunk takes one only when at least as
// many trips follow it as came before.
__device__ __forceinline__ gb_u32 gb_topn_bound_trip(gb_u32 slot, gb_u32 trips) {
    const gb_u32 at = slot == 0u ? 2u : slot == 1u ? 8u : 24u;
    return slot < GB_TOPN_BOUNDS && 2u * at <= trips ? at : GB_TOPN_NO_TRIP;
}

// GB_TOPN_AHEAD is how many trips ahead a scan loads its groups. A topn block is 512
// threads, one to a multiprocessor (its registers), so with one group a thread in flight
// a long scan waits on its loads; two keep twice the bytes in flight
// (docs/benchmark_results/filtered-h200.md).
#define GB_TOPN_AHEAD 2

// gb_topn_gate is the value a group's largest value (plus GB_MAX_GUMBEL for Gumbel
// scores) must reach for one of its keys to pass the key gate (0: none, -Inf). Below it
// a key is below the gate's too (order keys keep the float order, and -0 and +0, equal
// here, share a key), so the comparison skips groups in the float domain and the keys
// of a group that passes are compared exactly.
__device__ __forceinline__ float gb_topn_gate(gb_u64 gate) {
    return gate != 0ull ? gb_orderkey_inverse((gb_u32)(gate >> 32)) : -gb_inf();
}

// gb_topn_scan folds the keys below cap of the chunk [start, end) into a thread's list
// (see gb_topn), whose threshold sits at `at` (gb_topn_at): NOISY ranks Gumbel scores,
// PROC processes the logits first. With s_bound (the first pass, whose lists hold the
// block's top N), the threads also let go of keys below the block's bound, taken a few
// times in the scan (gb_topn_bound_trip) into s_bound's GB_TOPN_BOUNDS words (0 before
// the scan), and thr comes out as the larger of the two. Raw logits (neither NOISY nor
// PROC) take their observations from the log-sum-exp (gb_lse_seen), not per group.
template <int KIND, bool NOISY, bool PROC, int L>
__device__ __forceinline__ void gb_topn_scan(const typename gb_io<KIND>::elem* row, gb_u32 start, gb_u32 end,
                                             bool vec, gb_u32 at, gb_u64 cap, float invT, const gb_row_params& p,
                                             const gb_processor& pc, gb_u32 N, gb_u64* s_wtop, gb_u64* s_bound,
                                             gb_u64 lst[L], gb_u64& thr, gb_u32& seen, gb_lse& lse) {
    // Groups loaded GB_TOPN_AHEAD trips ahead, the mask word one: a block of a large
    // batch's row makes many trips, each waiting on its load otherwise. Every thread
    // makes the chunk's trips, for the bounds' barriers (groups past end read as empty).
    const gb_u32 stride = 4u * blockDim.x;
    const gb_u32 trips = (end - start + stride - 1u) / stride;
    const gb_u32 busy = gb_topn_busy(end - start);
    gb_u32 slot = 0u;
    gb_u32 bound_at = s_bound != nullptr ? gb_topn_bound_trip(0u, trips) : GB_TOPN_NO_TRIP;
    gb_u64 tb = 0ull;
    float gate = gb_topn_gate(thr);
    float nxt[GB_TOPN_AHEAD][4];
    gb_u32 nn[GB_TOPN_AHEAD];
#pragma unroll
    for (int a = 0; a < GB_TOPN_AHEAD; ++a) {
        nn[a] = gb_load_group<KIND>(row, start + 4u * threadIdx.x + (gb_u32)a * stride, end, vec, nxt[a]);
    }
    gb_mask_pair nmw = gb_group_mask_pair(pc, start + 4u * threadIdx.x, PROC ? end : 0u);
    gb_u32 g = start + 4u * threadIdx.x;
    for (gb_u32 trip = 0u; trip < trips; ++trip, g += stride) {
        if (trip == bound_at) { // uniform
            tb = gb_topn_bound<L>(lst, busy, N, s_wtop, s_bound + slot);
            bound_at = gb_topn_bound_trip(++slot, trips);
            gate = gb_topn_gate(gb_max_u64(thr, tb));
        }
        float v[4];
        const gb_u32 n = nn[0];
        const gb_mask_pair mw = nmw;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            v[j] = nxt[0][j];
        }
#pragma unroll
        for (int a = 0; a + 1 < GB_TOPN_AHEAD; ++a) {
            nn[a] = nn[a + 1];
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                nxt[a][j] = nxt[a + 1][j];
            }
        }
        const gb_u32 ga = g + GB_TOPN_AHEAD * stride;
        nn[GB_TOPN_AHEAD - 1] = gb_load_group<KIND>(row, ga, end, vec, nxt[GB_TOPN_AHEAD - 1]);
        if (PROC) {
            nmw = gb_group_mask_pair(pc, g + stride, end);
            seen |= gb_process_group_w(pc, gb_mask_bits(mw), g, n, v, v);
        } else if (NOISY) {
            seen |= gb_group_seen(v, n);
        }
        if (NOISY) {
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                v[j] = __fmul_rn(v[j], invT);
            }
        }
        const float mx = gb_max4(v);
        gb_lse_add4(lse, v, mx);
        if (!(mx > -gb_inf())) {
            continue; // -Inf keys never enter
        }
        if (!NOISY) {
            // A group whose largest value is below the gate cannot enter (equal values
            // still may, by a lower index).
            if (mx < gate) {
                continue;
            }
#pragma unroll
            for (gb_u32 j = 0; j < 4u; ++j) {
                // Most of a passing group's elements are below the gate: a float
                // comparison settles them before a key is packed.
                if (j < n && v[j] > -gb_inf() && !(v[j] < gate)) {
                    const gb_u64 k = gb_pack(v[j], g + j);
                    if (k > gb_max_u64(thr, tb) && k < cap) {
                        thr = gb_topn_insert_later<L>(lst, k, at);
                    }
                }
            }
            gate = gb_topn_gate(gb_max_u64(thr, tb));
            continue;
        }
        // A score below the gate cannot be in the block's top N: skip the noise where a
        // bound says so (exactly, as gumbel_argmax does).
        if (__fadd_rn(mx, GB_MAX_GUMBEL) < gate) {
            continue;
        }
        gb_u32 w[4];
        gb_philox(g >> 2, p.step_lo, p.step_hi, GB_PURPOSE_GUMBEL, p.seed_lo, p.seed_hi, w);
        bool need[4];
        bool any_tail = false;
#pragma unroll
        for (gb_u32 j = 0; j < 4u; ++j) {
            // The bound of every element, outside the test's branches: taken behind them it
            // ran slower (docs/benchmark_results/filtered-h200.md).
            const float hi = gb_noise_bound(w[j]);
            need[j] = j < n && v[j] > -gb_inf() && !(__fadd_rn(v[j], hi) < gate);
            any_tail = any_tail || (need[j] && w[j] < GB_TAIL_THRESHOLD);
        }
        gb_u32 t[4] = {0u, 0u, 0u, 0u};
        if (any_tail) {
            gb_philox(g >> 2, p.step_lo, p.step_hi, GB_PURPOSE_GUMBEL_TAIL, p.seed_lo, p.seed_hi, t);
        }
#pragma unroll
        for (gb_u32 j = 0; j < 4u; ++j) {
            if (need[j]) {
                const gb_u64 k = gb_pack(__fadd_rn(v[j], gb_gumbel(w[j], t[j])), g + j);
                if (k > gb_max_u64(thr, tb) && k < cap) {
                    thr = gb_topn_insert_later<L>(lst, k, at);
                }
            }
        }
        gate = gb_topn_gate(gb_max_u64(thr, tb));
    }
    if (!NOISY && !PROC) {
        seen |= gb_lse_seen(lse);
    }
    thr = gb_max_u64(thr, tb);
}

// gb_topn_merge_blocks is the split phase of topn: the block publishes its top N keys
// and log-sum-exp pair, and the last block of the row to arrive merges the sets into lse
// and the S lists into s_top (each thread keeping a short list of the published keys, by
// passes as gb_topn's when one lets go of keys that belong), takes the row's
// observations into seen and resets the counters. It returns whether this block is that
// last one (then it writes the row's entries).
__device__ __forceinline__ bool gb_topn_merge_blocks(gb_u32 N, gb_u32& seen, gb_lse& lse, gb_u64* partials,
                                                     gb_u32* counters, gb_u64* s_top, gb_u64* s_wtop,
                                                     gb_u64* s_wthr, gb_u64* s_pair, gb_u32* s_last,
                                                     gb_u32* s_have, gb_topn_sel* s_sel) {
    const gb_u32 y = blockIdx.y;
    const gb_u32 nblocks = gridDim.x;
    gb_u64* part = partials + (gb_u64)GB_TOPN_STRIDE * ((gb_u64)y * nblocks + blockIdx.x);
    if (threadIdx.x == 0u) {
        for (gb_u32 j = 0; j < GB_MAX_TOPN; ++j) {
            part[j] = j < N ? s_top[j] : 0ull;
        }
        part[GB_MAX_TOPN] = gb_lse_pack(lse);
        if (seen != 0u) {
            atomicOr(&counters[2u * y + 1u], seen);
        }
        *s_last = gb_arrive(&counters[2u * y], nblocks) ? 1u : 0u;
    }
    __syncthreads();
    if (*s_last == 0u) {
        return false;
    }
    // One round of loads: the blocks' log-sum-exp pairs, the selection's probes and the
    // row's observations, all in flight together (a trip more only past blockDim.x).
    const gb_u64* row_part = partials + (gb_u64)GB_TOPN_STRIDE * y * nblocks;
    const bool select = N >= GB_TOPN_SELECT_MIN;
    gb_u32 R = 1u;
    const gb_u32 np = select ? gb_topn_probes_published(nblocks, N, R) : 0u;
    gb_topn_sel_reset(s_sel);
    gb_lse_init(lse);
    gb_u32 row_seen = 0u;
    for (gb_u32 i = threadIdx.x; i < gb_max_u32(nblocks, np); i += blockDim.x) {
        const gb_u64 pair =
            i < nblocks ? gb_load_published(row_part + (gb_u64)GB_TOPN_STRIDE * i + GB_MAX_TOPN) : GB_LSE_EMPTY_WORD;
        const gb_u64 probe = i < np ? gb_load_published(gb_topn_probe_word<GB_TOPN_STRIDE>(row_part, i, R)) : 0ull;
        row_seen |= i == 0u ? gb_load_published(&counters[2u * y + 1u]) : 0u;
        if (i < nblocks) {
            gb_lse_merge_packed(lse, pair);
        }
        if (i < np) {
            s_wtop[i] = probe;
        }
    }
    gb_block_lse(lse, lse, false, s_pair); // its barriers also publish the probes and the reset
    // The row's top N is among the blocks' (their words past N hold 0).
    gb_u32 have = 0u;
    gb_u64 cap = GB_TOPN_ALL;
    const bool selected =
        select && gb_topn_select_published<GB_TOPN_STRIDE>(row_part, nblocks, N, np, s_top, s_wtop, s_sel);
    while (!selected) {
        gb_u64 lst[GB_TOPN_THREAD] = {};
        gb_u64 thr = 0ull;
        const gb_u32 at = gb_topn_at<GB_TOPN_THREAD>(N - have);
        for (gb_u32 i = threadIdx.x; i < nblocks * GB_MAX_TOPN; i += blockDim.x) {
            const gb_u64 k =
                gb_load_published(row_part + (gb_u64)GB_TOPN_STRIDE * (i / GB_MAX_TOPN) + i % GB_MAX_TOPN);
            if (k > thr && k < cap) {
                thr = gb_topn_insert<GB_TOPN_THREAD>(lst, k, at);
            }
        }
        if (gb_topn_merge<GB_TOPN_THREAD>(lst, thr, N, have, s_top, s_wtop, s_wthr, s_have)) {
            break;
        }
        cap = s_top[have - 1u];
    }
    // Thread 0 read the row's observations above: the resets need no answer back.
    if (threadIdx.x == 0u) {
        atomicExch(&counters[2u * y + 1u], 0u);
        atomicExch(&counters[2u * y], 0u);
        *s_last = row_seen;
    }
    __syncthreads();
    seen = *s_last;
    return true;
}

// gb_topn_write writes the row's N entries from the merged keys in s_top and the merged
// log-sum-exp: token -1 and NaN for a row with NaN or +Inf, token -1 and -Inf for entries
// beyond its finite keys. With keyed, a key's high half is its entry's value (the raw or
// processed logit), taken from it without reading the logits again (a zero's sign aside,
// which the key drops).
template <int KIND>
__device__ __forceinline__ void gb_topn_write(const typename gb_io<KIND>::elem* row, gb_i32* otok, float* oval,
                                              gb_u32 N, gb_u32 seen, const gb_processor& pc, float invT,
                                              bool keyed, const gb_u64* s_top, const gb_lse& s_lse) {
    for (gb_u32 j = threadIdx.x; j < N; j += blockDim.x) {
        const gb_u64 k = s_top[j];
        if (seen & GB_SEEN_NONFINITE) {
            otok[j] = -1;
            oval[j] = __uint_as_float(0x7FC00000u);
        } else if (k == 0ull) {
            otok[j] = -1;
            oval[j] = -gb_inf();
        } else {
            const gb_u32 tok = 0xFFFFFFFFu - (gb_u32)k;
            const float v = keyed ? gb_orderkey_inverse((gb_u32)(k >> 32))
                                  : __fmul_rn(gb_processed(pc, gb_io<KIND>::load1(row + tok), tok), invT);
            otok[j] = (gb_i32)tok;
            // From the set's reference, not fl(m + log s): a row whose logits sit near 2^29
            // (a frequency penalty of a saturated count) would otherwise read 0 for all.
            float norm;
            oval[j] = gb_lse_logprob(v, s_lse.m, s_lse.s, norm);
        }
    }
}

// gb_topn_state says whether a perturbed list in shared memory is the row's exact top N
// (ABI.md, "topn"): GB_TOPN_EXACT when it is full and no key's score reaches
// GB_EXACT_LIMIT in magnitude; GB_TOPN_SHORT when only an entry is empty (the list then
// holds every element whose fl(x' * invT) is finite); GB_TOPN_INEXACT when a key
// reaches the limit.
#define GB_TOPN_EXACT 0u
#define GB_TOPN_SHORT 1u
#define GB_TOPN_INEXACT 2u
__device__ __forceinline__ gb_u32 gb_topn_state(const gb_u64* s_top, gb_u32 N) {
    gb_u32 state = GB_TOPN_EXACT;
    for (gb_u32 j = 0; j < N; ++j) {
        if (s_top[j] == 0ull) {
            state = state == GB_TOPN_EXACT ? GB_TOPN_SHORT : state;
        } else if (gb_key_inexact(s_top[j])) {
            state = GB_TOPN_INEXACT;
        }
    }
    return state;
}

// gb_topn_exact finishes a perturbed row whose list gb_topn_state does not vouch for.
// A short list stands unless a pass over the row finds an element whose x' is finite and
// whose fl(x' * invT) overflowed to -Inf (its float32 key never enters). Otherwise the
// row is ranked again by the exact comparison: N passes, each taking the largest value
// below the last one taken, whose keys gb_pack(s, i) replace the list in s_top (0 past
// the row's finite elements). Then it writes the row's entries. The finishing block's
// threads all call it, for rare rows only, and return after it; it is not inlined and
// takes the row, its processors and outputs from params and the kernel's arguments, so
// that nothing of the scans lives across it.
template <int KIND>
__device__ __noinline__ void gb_topn_exact(const typename gb_io<KIND>::elem* logits, const gb_row_params* params,
                                           gb_i32* out_tokens, float* out_values, gb_u64 row_stride, gb_u32 vocab,
                                           const float* bias, const gb_u32* counts, const gb_u32* mask,
                                           const gb_u32* bitmask, bool rank, gb_u64* s_top, const gb_lse* s_lse,
                                           gb_exact* s_win, gb_u64* s_red, gb_u64* s_bcast) {
    const gb_row_params p = params[blockIdx.y];
    const typename gb_io<KIND>::elem* row = logits + (gb_u64)p.row * row_stride;
    const gb_processor pc = gb_processor_of(p, bias, counts, mask, bitmask, vocab);
    const float invT = 1.0f / p.temperature;
    if (!rank) {
        gb_u32 under = 0u;
        for (gb_u32 g = 4u * threadIdx.x; g < vocab; g += 4u * blockDim.x) {
            float x[4];
            const gb_u32 n = gb_load_group<KIND>(row, g, vocab, false, x);
            for (gb_u32 j = 0; j < n; ++j) {
                const float xp = gb_processed(pc, x[j], g + j);
                under |= xp > -gb_inf() && __fmul_rn(xp, invT) == -gb_inf() ? 1u : 0u;
            }
        }
        gb_u32 none = 0u;
        gb_block_max_or(none, under, s_red, s_bcast);
        rank = under != 0u;
    }
    if (rank) {
        gb_exact last = gb_exact_none();
        for (gb_u32 j = 0; j < p.topn; ++j) {
            // After a pass that found nothing, last is none again: the entries stay empty.
            if (j == 0u || last.idx != 0xFFFFFFFFu) {
                last = gb_exact_best<KIND>(row, p, pc, vocab, invT, last, s_win);
            }
            if (threadIdx.x == 0u) {
                s_top[j] = last.idx != 0xFFFFFFFFu ? gb_pack(last.s, last.idx) : 0ull;
            }
        }
        __syncthreads(); // s_top is written before gb_topn_write reads it
    }
    const gb_u64 out = (gb_u64)p.row * GB_MAX_TOPN;
    gb_topn_write<KIND>(row, out_tokens + out, out_values + out, p.topn, 0u, pc, invT, false, s_top, *s_lse);
}

template <int KIND>
__device__ __forceinline__ void gb_topn(const typename gb_io<KIND>::elem* __restrict__ logits,
                                        const gb_row_params* __restrict__ params, gb_i32* out_tokens,
                                        float* out_values, gb_u64* partials, gb_u32* counters, gb_u64 row_stride,
                                        gb_u32 vocab, const float* bias, const gb_u32* counts, const gb_u32* mask, const gb_u32* bitmask) {
    __shared__ gb_u64 s_red[GB_MAX_WARPS];
    __shared__ gb_u64 s_bcast[2];
    __shared__ gb_u64 s_top[GB_MAX_TOPN];
    __shared__ gb_u64 s_wtop[GB_MAX_WARPS * GB_MAX_TOPN]; // each warp's largest keys
    __shared__ gb_u64 s_wthr[GB_MAX_WARPS];               // each warp's largest threshold
    __shared__ gb_u32 s_have;                             // the sure entries of s_top
    __shared__ gb_topn_sel s_sel;                         // a thresholded selection's
    __shared__ gb_u64 s_bound[GB_TOPN_BOUNDS];            // the first pass's bounds
    __shared__ gb_u64 s_pair[2 * GB_MAX_WARPS];
    __shared__ gb_u32 s_last;
    __shared__ gb_lse s_lse; // the row's merged log-sum-exp
    __shared__ gb_u32 s_state;               // gb_topn_state of a perturbed list
    __shared__ gb_exact s_win[GB_MAX_WARPS]; // gb_topn_exact's
    // Queued after another kernel of the same call, this one may start before it ends
    // (gb_grid_wait). Until it waits it reads only what no other kernel of the call
    // writes (the logits, its own rows' parameters, its own partials and counters) and
    // writes only shared memory and its own scratch: a row of raw logits scans, selects
    // and merges its blocks' lists beside the kernel before.
    if (blockIdx.z != 0u) {
        gb_grid_wait();
        return; // topn draws nothing: a deeper grid's extra blocks have no work
    }
    const gb_u32 y = blockIdx.y;
    const gb_u32 nblocks = gridDim.x;
    const gb_row_params p = params[y];
    const gb_u32 N = p.topn;
    gb_i32* otok = out_tokens + (gb_u64)p.row * GB_MAX_TOPN;
    float* oval = out_values + (gb_u64)p.row * GB_MAX_TOPN;
    const bool bad_n = N < 1u || N > GB_MAX_TOPN;
    if (bad_n || gb_bad_flags(p.flags) || gb_bad_row(p.temperature, vocab)) {
        gb_grid_wait();
        if (blockIdx.x == 0u) {
            for (gb_u32 j = threadIdx.x; j < (bad_n ? GB_MAX_TOPN : N); j += blockDim.x) {
                otok[j] = GB_TOPN_REFUSED;
                oval[j] = __uint_as_float(0x7FC00000u);
            }
        }
        return;
    }

    gb_u32 start, end;
    gb_chunk_of(vocab, nblocks, blockIdx.x, start, end);
    if (threadIdx.x < GB_TOPN_BOUNDS) {
        s_bound[threadIdx.x] = 0ull;
    }

    const typename gb_io<KIND>::elem* row = logits + (gb_u64)p.row * row_stride;
    const bool vec = gb_io<KIND>::vec_ok(row);
    const bool perturbed = (p.flags & GB_FLAG_PERTURBED) != 0u;
    const bool greedy = p.temperature == 0.0f;
    const float invT = perturbed && !greedy ? 1.0f / p.temperature : 1.0f;
    gb_processor pc = gb_processor_of(p, bias, counts, mask, bitmask, vocab);
    if (!perturbed) {
        pc.flags = 0u; // raw logits: no processing
    } else {
        gb_grid_wait(); // the processors' counts, which RECORD of the kernel before writes
    }

    // Keys: the raw logit; with PERTURBED the Gumbel score fl(fl(x' · invT) + g) (greedy:
    // x'). The log-sum-exp runs over the values the keys perturb: x, or fl(x' · invT).
    // Each kind of row has its own instantiation of the scan, so the plain one (top
    // log-probabilities) carries neither Philox nor processor state. The first pass takes
    // every key; a further one (gb_topn_merge was not sure of all N) only those below the
    // sure entries, into s_top after them, and its observations are dropped.
    gb_u32 seen = 0u;
    gb_lse lse;
    gb_u32 have = 0u;
    gb_u64 cap = GB_TOPN_ALL;
    for (;;) {
        gb_u64 lst[GB_TOPN_THREAD] = {};
        gb_u64 thr = 0ull;
        gb_u32 pseen = 0u;
        gb_lse plse;
        gb_lse_init(plse);
        const gb_u32 at = gb_topn_at<GB_TOPN_THREAD>(N - have);
        gb_u64* bounds = cap == GB_TOPN_ALL ? s_bound : nullptr;
        if (!perturbed || (greedy && pc.flags == 0u)) {
            gb_topn_scan<KIND, false, false, GB_TOPN_THREAD>(row, start, end, vec, at, cap, invT, p, pc, N, s_wtop,
                bounds, lst, thr, pseen, plse);
        } else if (greedy) {
            gb_topn_scan<KIND, false, true, GB_TOPN_THREAD>(row, start, end, vec, at, cap, invT, p, pc, N, s_wtop,
                bounds, lst, thr, pseen, plse);
        } else if (pc.flags == 0u) {
            gb_topn_scan<KIND, true, false, GB_TOPN_THREAD>(row, start, end, vec, at, cap, invT, p, pc, N, s_wtop,
                bounds, lst, thr, pseen, plse);
        } else {
            gb_topn_scan<KIND, true, true, GB_TOPN_THREAD>(row, start, end, vec, at, cap, invT, p, pc, N, s_wtop,
                bounds, lst, thr, pseen, plse);
        }
        if (cap == GB_TOPN_ALL) { // uniform: the first pass
            seen = pseen;
            lse = plse;
            gb_u32 none = 0u;
            gb_block_max_or(none, seen, s_red, s_bcast);
            gb_block_lse(lse, lse, false, s_pair);
            if (N >= GB_TOPN_SELECT_MIN &&
                gb_topn_select<GB_TOPN_THREAD>(lst, thr, N, end - start, s_top, s_wtop, &s_sel)) {
                break;
            }
        }
        if (gb_topn_merge<GB_TOPN_THREAD>(lst, thr, N, have, s_top, s_wtop, s_wthr, &s_have)) {
            break;
        }
        cap = s_top[have - 1u];
    }

    // partials and counters are this launch's own (ABI.md, "Dependent launches"): the
    // blocks publish and the row's last one merges their lists beside the kernel before,
    // and only the outputs wait for it.
    const bool finish = nblocks == 1u || gb_topn_merge_blocks(N, seen, lse, partials, counters, s_top, s_wtop,
                                                              s_wthr, s_pair, &s_last, &s_have, &s_sel);
    gb_grid_wait();
    if (!finish) {
        return;
    }
    if (threadIdx.x == 0u) {
        s_lse = lse;
        s_state = perturbed && !greedy && !(seen & GB_SEEN_NONFINITE) ? gb_topn_state(s_top, N) : GB_TOPN_EXACT;
    }
    __syncthreads();
    if (s_state != GB_TOPN_EXACT) {
        gb_topn_exact<KIND>(logits, params, out_tokens, out_values, row_stride, vocab, bias, counts, mask, bitmask,
                            s_state == GB_TOPN_INEXACT, s_top, &s_lse, s_win, s_red, s_bcast);
        return;
    }
    gb_topn_write<KIND>(row, otok, oval, N, seen, pc, invT, !perturbed || greedy, s_top, s_lse);
}
