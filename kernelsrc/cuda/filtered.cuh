// filtered (ABI.md): top-k, top-p and min-p rows, S >= 1 blocks per row, D draws, drawn by
// Gumbel-max over the kept set of the categorical kernel's steps 1 to 7. filter_max runs
// first for rows whose filters need the row's largest logit before a block can select
// (top-p or min-p without top-k).
//
// A block scans its chunk once. With min-p alone it draws over its kept elements itself
// (the threshold follows from the row's maximum) and publishes its winner and kept mass.
// Otherwise it publishes candidates: each thread keeps its GB_FILTER_THREAD largest keys
// (a long chunk too: a key enters a list at four independent comparisons, fewer than a
// warp queue's sorts cost), and the block places its take largest (gb_filter_take: about
// 4k/S, at most k and FilterCands) by a bound on them (gb_filter_publish_bound), by
// ranks, or one key at a time (gb_filter_publish_lists), with Kcov, the largest key it
// left out. Every element above the row's Kcov is then a candidate, so the last block to
// arrive ranks the list and computes top-k and top-p exactly on it whenever the kept set
// lies above Kcov (and the list fits GB_FILTER_RANKED), and draws over it; otherwise it
// runs the categorical kernel's one-block path with a Gumbel-max draw over the row. On
// LLM logits the kept set is a few tokens near the top and the list serves. A draw whose
// float32 winner reaches GB_EXACT_LIMIT is taken again by the exact comparison in the
// last block (gb_exact_kept), over the same kept set.

// GB_FILTER_THREAD is the candidates a thread keeps while it scans its chunk,
// GB_FILTER_WARP those a warp hands on to its block, and GB_FILTER_RANKED the longest
// list the last block ranks (half of the categorical list arrays; the ranks take the
// other half).
#define GB_FILTER_THREAD 4
#define GB_FILTER_WARP 16
#define GB_FILTER_RANKED (GB_CAT_CAP / 2)
// GB_FILTER_PACKED is the longest list ranked from packed keys (gb_filter_shared.top).
#define GB_FILTER_PACKED (GB_MAX_WARPS * GB_FILTER_WARP)

// gb_filter_needs_max reports rows whose filters need the row's maximum before a block
// can select: top-p or min-p without top-k.
__device__ __forceinline__ bool gb_filter_needs_max(const gb_row_params& p, gb_u32 vocab) {
    const bool topk = p.top_k > 0u && p.top_k < vocab;
    const bool topp = p.top_p > 0.0f && p.top_p < 1.0f;
    const bool minp = p.min_p > 0.0f && p.min_p <= 1.0f;
    return !topk && (topp || minp);
}

// gb_filter_owns reports whether a row belongs to filter_max and filtered: not ROUTED, or
// ROUTED with FILTERED and without CATEGORICAL (which names the categorical kernel).
__device__ __forceinline__ bool gb_filter_owns(gb_u32 flags) {
    return !(flags & GB_FLAG_ROUTED) || ((flags & GB_FLAG_FILTERED) && !(flags & GB_FLAG_CATEGORICAL));
}

// gb_filter_max is the filter_max kernel: block x of launch row y writes the largest
// order key of its chunk's processed logits to partials word y * S + x.
template <int KIND>
__device__ __forceinline__ void gb_filter_max(const typename gb_io<KIND>::elem* __restrict__ logits,
                                              const gb_row_params* params, gb_u64* partials, gb_u64 row_stride,
                                              gb_u32 vocab, const float* bias, const gb_u32* counts,
                                              const gb_u32* mask, const gb_u32* bitmask) {
    __shared__ gb_u64 s_red[GB_MAX_WARPS];
    __shared__ gb_u64 s_bcast[2];
    // filtered, queued right after, starts its blocks while these finish.
    gb_grid_release();
    const gb_row_params p = params[blockIdx.y];
    if (blockIdx.z != 0u || !gb_filter_owns(p.flags) ||
        gb_bad_flags(p.flags) || gb_bad_row(p.temperature, vocab) || p.temperature == 0.0f ||
        !gb_filter_needs_max(p, vocab)) {
        return;
    }
    gb_u32 start, end;
    gb_chunk_of(vocab, gridDim.x, blockIdx.x, start, end);
    const typename gb_io<KIND>::elem* row = logits + (gb_u64)p.row * row_stride;
    const bool vec = gb_io<KIND>::vec_ok(row);
    const gb_processor pc = gb_processor_of(p, bias, counts, mask, bitmask, vocab);
    gb_u32 mkey = 0u, none = 0u;
    for (gb_u32 g = start + 4u * threadIdx.x; g < end; g += 4u * blockDim.x) {
        float x[4];
        const gb_u32 n = gb_load_processed<KIND>(row, g, end, vec, pc, x);
#pragma unroll
        for (gb_u32 j = 0; j < 4u; ++j) {
            if (j < n) {
                mkey = gb_max_u32(mkey, gb_orderkey(x[j]));
            }
        }
    }
    gb_block_max_or(mkey, none, s_red, s_bcast);
    if (threadIdx.x == 0u) {
        partials[(gb_u64)blockIdx.y * gridDim.x + blockIdx.x] = mkey;
    }
}

// gb_filter_shape is what the blocks of a filtered row agree on.
struct gb_filter_shape {
    bool topk, topp, minp, minp_only, needs_max;
    gb_u32 cands;     // FilterCands: the candidates a block may publish
    gb_u64* part;     // this block's FilterStride words
    gb_u64* row_part; // block 0's words of this draw
    gb_u32 stride;    // FilterStride
};

// GB_FILTER_NUCLEUS is the kept set a top-p row without top-k is expected to fit: its
// blocks publish as many candidates as top-k with that k would.
#define GB_FILTER_NUCLEUS 64u

// gb_filter_take is how many candidates a block of the row publishes: enough that about
// 4k of the row's largest keys lie above the row's Kcov when they are spread over the
// blocks as LLM logits are (a block holding more of the top k than it publishes only
// costs that row the one-block path), at most s.cands. Fewer candidates make a shorter
// list for the last block to rank.
__device__ __forceinline__ gb_u32 gb_filter_take(const gb_row_params& p, const gb_filter_shape& s,
                                                 gb_u32 nblocks) {
    const gb_u32 k = s.topk ? p.top_k : GB_FILTER_NUCLEUS;
    // 32-bit division: every block of every row computes it. A k of 2^28 or more asks
    // for more than any block publishes (s.cands).
    gb_u32 want = k >= (1u << 28) ? s.cands : (4u * k + nblocks - 1u) / nblocks + 2u;
    want = want < 4u ? 4u : want < s.cands ? want : s.cands;
    // A block never holds more than k of the row's k largest.
    return s.topk && k < want ? k : want;
}

// gb_filter_scan is one block's pass over its chunk [start, end): the largest processed
// key (mkey), the observations, with LP the raw log-sum-exp, and
// - min-p alone (MINP): the best Gumbel key over its kept elements and their mass;
// - otherwise: the candidates, the thread's GB_FILTER_THREAD largest keys (lst, largest
//   first), and the largest key this thread let go (rej), with TOPP_MASS the fixed-point
//   mass of every element.
template <int KIND, bool MINP, bool TOPP_MASS, bool LP>
__device__ __forceinline__ void gb_filter_scan(const gb_cat_row<KIND>& r, gb_u32 start, gb_u32 end,
                                               const gb_row_state& st, float dmin, gb_u32 lo, gb_u32 hi,
                                               gb_u64 lst[GB_FILTER_THREAD], gb_u32& rej,
                                               gb_u32& mkey, gb_u32& seen, gb_u64& mass, gb_u64& best,
                                               gb_lse& raw) {
    // One group loaded ahead: a block of a large batch's row makes many trips, each
    // waiting on its load otherwise.
    const gb_u32 stride = 4u * blockDim.x;
    // The mask pair travels with its group.
    const bool procs = r.pc.flags != 0u;
    float nxt[4];
    gb_u32 nn = gb_load_group<KIND>(r.row, start + 4u * threadIdx.x, end, r.vec, nxt);
    gb_mask_pair nmw = gb_group_mask_pair(r.pc, start + 4u * threadIdx.x, procs ? end : 0u);
    for (gb_u32 g = start + 4u * threadIdx.x; g < end; g += stride) {
        float v[4], x[4];
        const gb_u32 n = nn;
        const gb_mask_pair mw = nmw;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            v[j] = nxt[j];
        }
        nn = gb_load_group<KIND>(r.row, g + stride, end, r.vec, nxt);
        if (procs) {
            nmw = gb_group_mask_pair(r.pc, g + stride, end);
        }
        if (LP && n != 0u) {
            gb_lse_add4(raw, v, gb_max4(v));
        }
        if (procs) {
            seen |= gb_process_group_w(r.pc, gb_mask_bits(mw), g, n, v, x);
        } else {
            seen |= gb_group_seen(v, n);
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                x[j] = v[j];
            }
        }
        if (MINP) {
            bool need[4];
            bool any = false;
            if (n != 0u) {
                mkey = gb_max_u32(mkey, gb_orderkey(gb_max4(x)));
            }
#pragma unroll
            for (gb_u32 j = 0; j < 4u; ++j) {
                need[j] = j < n && !(__fmul_rn(__fadd_rn(x[j], -st.m), st.invT) < dmin);
                any = any || need[j];
            }
            if (!any) {
                continue;
            }
#pragma unroll
            for (gb_u32 j = 0; j < 4u; ++j) {
                if (need[j]) {
                    const float w = gb_weight(x[j], st.m, st.invT, st.cutoff);
                    if (w >= st.min_p) {
                        mass += gb_fixed(w, st.two_pow_f);
                        best = gb_max_u64(best, gb_noisy_key(x[j], g + j, st.invT, lo, hi, r.p));
                    }
                }
            }
            continue;
        }
        const gb_u32 gk = n != 0u ? gb_orderkey(gb_max4(x)) : 0u; // elements past end read -Inf
        mkey = gb_max_u32(mkey, gk);
        if (TOPP_MASS) {
#pragma unroll
            for (gb_u32 j = 0; j < 4u; ++j) {
                mass += gb_fixed_weight(x[j], st); // -Inf past n: 0
            }
        }
        // A group whose largest key does not pass the thread's fourth is let go whole.
        if (gk <= (gb_u32)(lst[GB_FILTER_THREAD - 1] >> 32)) {
            rej = gb_max_u32(rej, gk);
            continue;
        }
#pragma unroll
        for (gb_u32 j = 0; j < 4u; ++j) {
            if (j >= n) {
                continue;
            }
            // The key comes after the listed ones: its value alone says whether it enters.
            const gb_u32 k = gb_orderkey(x[j]);
            const gb_u32 last = (gb_u32)(lst[GB_FILTER_THREAD - 1] >> 32);
            if (k <= last) {
                rej = gb_max_u32(rej, k);
                continue;
            }
            rej = gb_max_u32(rej, last);
            gb_list_insert_later<GB_FILTER_THREAD>(lst, ((gb_u64)k << 32) | (gb_u64)(0xFFFFFFFFu - (g + j)));
        }
    }
}

// gb_filter_shared is the filtered kernel's shared memory beside the categorical
// kernel's (gb_cat_smem), whose list arrays and reduction words it shares.
struct gb_filter_shared {
    gb_u64 top[GB_MAX_WARPS * GB_FILTER_WARP]; // each warp's largest keys, largest first
    gb_u32 count[GB_MAX_WARPS];                // how many each warp hands on
    gb_u64 wmax[GB_MAX_WARPS];                 // gb_filter_publish_bound: the warps' largest keys
    gb_u32 ncand;                              // gb_filter_publish_bound: its candidates
    gb_u64 floor;                              // gb_filter_floor: the row's floor key
};

__device__ __forceinline__ gb_filter_shared& gb_filter_smem() {
    __shared__ gb_filter_shared s;
    return s;
}

// gb_filter_place writes a key of the given rank in the block's lists to its published
// slot when it is among the take largest, or raises left to it when it is the largest
// left out.
__device__ __forceinline__ void gb_filter_place(gb_u64 key, gb_u32 rank, gb_u32 take, const gb_filter_shape& s,
                                                gb_u32& left) {
    if (rank < take) {
        s.part[rank] = key;
    } else if (rank == take) {
        left = gb_max_u32(left, (gb_u32)(key >> 32));
    }
}

// gb_filter_clear_from empties the published slots [from, take): the last block reads
// all take of them.
__device__ __forceinline__ void gb_filter_clear_from(gb_u32 from, gb_u32 take, const gb_filter_shape& s) {
    for (gb_u32 c = from + threadIdx.x; c < take; c += blockDim.x) {
        s.part[c] = 0ull;
    }
}

// gb_filter_publish_ranked writes the block's `take` largest keys of the warps' lists in
// fs.top (each sorted, largest first, 0 past fs.count[w]) to its words, largest first:
// each key finds its place in the block by a binary search of the other warps' lists,
// which costs the same for any take (a merge of the lists costs a warp round per key,
// and at S = 2 a top-p row's blocks publish 130 keys each). It returns left, raised to
// the largest listed key it did not publish.
__device__ __forceinline__ gb_u32 gb_filter_publish_ranked(gb_u32 left, gb_u32 take, const gb_filter_shape& s,
                                                           gb_filter_shared& fs) {
    __syncthreads();
    const gb_u32 nw = gb_num_warps();
    gb_u32 total = 0u;
    for (gb_u32 w = 0; w < nw; ++w) {
        total += fs.count[w];
    }
    for (gb_u32 t = threadIdx.x; t < nw * GB_FILTER_WARP; t += blockDim.x) {
        const gb_u64 key = fs.top[t];
        if (key == 0ull) {
            continue;
        }
        const gb_u32 own = t / GB_FILTER_WARP;
        gb_u32 rank = t % GB_FILTER_WARP; // the larger keys of its own list
        for (gb_u32 w = 0; w < nw; ++w) {
            if (w != own) {
                rank += gb_count_above<GB_FILTER_WARP>(fs.top + w * GB_FILTER_WARP, key);
            }
        }
        gb_filter_place(key, rank, take, s, left);
    }
    gb_filter_clear_from(total, take, s);
    return left;
}

// GB_FILTER_RANK_MIN is the smallest take that gb_filter_publish_lists publishes by ranks:
// below it warp 0's merge, a warp round per key, costs less than the ranks' binary
// searches, whose cost does not shrink with take (docs/benchmark_results/filtered-h200.md).
#define GB_FILTER_RANK_MIN 24u

// GB_FILTER_BOUND_MIN is the smallest take that gb_filter_publish_lists publishes by a
// bound: below it the per-key merge takes few warp rounds (take is 4 at batch 1).
#define GB_FILTER_BOUND_MIN 8u

// gb_filter_publish_bound publishes the block's `take` largest keys of the threads' lists
// by a thresholded selection, as topn's (gb_topn_select): T, the take-th largest of the
// warps' largest keys, bounds the block's take-th largest from below, so the keys at or
// above T (a few dozen on LLM logits) place the block's take largest by ranking each
// other, at two barriers instead of a warp round per key. With more keys to take than
// warps (TWO), T is the take-th largest of each warp's two largest keys. left is raised
// to the largest listed key not published. It returns false, having published nothing,
// when more keys than fs.top holds reach T: a row flat near its top, or busy warps
// without keys (T = 0).
template <bool TWO>
__device__ __forceinline__ bool gb_filter_publish_bound(const gb_u64 lst[GB_FILTER_THREAD], gb_u32 take,
                                                        const gb_filter_shape& s, gb_filter_shared& fs,
                                                        gb_u32& left) {
    const gb_u32 lane = gb_lane(), nw = gb_num_warps();
    const gb_u32 per = TWO ? 2u : 1u;
    const gb_u64 wmax = gb_warp_max_u64_all(lst[0]);
    if (lane == 0u) {
        fs.wmax[per * gb_warp()] = wmax;
    }
    if (TWO) {
        // The warp's second largest: its other lanes' largest, or the winner's second.
        const gb_u64 w2 = gb_warp_max_u64_all(lst[0] == wmax ? lst[1] : lst[0]);
        if (lane == 0u) {
            fs.wmax[2u * gb_warp() + 1u] = w2;
        }
    }
    if (threadIdx.x == 0u) {
        fs.ncand = 0u;
    }
    __syncthreads();
    // Every warp finds T itself: lane l ranks the l-th of the warps' keys among the others.
    const gb_u32 nk = per * nw;
    const gb_u64 mine = lane < nk ? fs.wmax[lane] : 0ull;
    gb_u32 rank = 0u;
    for (gb_u32 w = 0; w < nk; ++w) {
        rank += gb_shfl_u64(mine, w) > mine ? 1u : 0u;
    }
    const gb_u64 at_take = (gb_u64)__ballot_sync(0xFFFFFFFFu, lane < nk && mine != 0ull && rank == take - 1u);
    const gb_u64 t = at_take != 0ull ? gb_shfl_u64(mine, (gb_u32)(__ffsll((long long)at_take) - 1)) : 0ull;
#pragma unroll
    for (int i = 0; i < GB_FILTER_THREAD; ++i) {
        const bool cand = lst[i] != 0ull && lst[i] >= t;
        const gb_u32 at = gb_list_append(cand, &fs.ncand);
        if (cand && at < GB_FILTER_PACKED) {
            fs.top[at] = lst[i];
        } else if (!cand) {
            left = gb_max_u32(left, (gb_u32)(lst[i] >> 32));
        }
    }
    __syncthreads();
    const gb_u32 c = fs.ncand;
    if (c > GB_FILTER_PACKED) {
        return false; // uniform
    }
    gb_rank_keys(
        c, [&](gb_u32 i) { return fs.top[i]; },
        [&](gb_u32, gb_u64 key, gb_u32 rank) { gb_filter_place(key, rank, take, s, left); });
    gb_filter_clear_from(c, take, s);
    return true;
}

// gb_filter_publish_lists publishes the block's `take` largest keys of the threads' lists,
// largest first: by a bound (gb_filter_publish_bound) from GB_FILTER_BOUND_MIN keys while
// the busy warps (those holding elements) have as many largest keys, or twice as many
// with their second largest; else each warp takes its GB_FILTER_WARP largest, one warp
// maximum per key, then warp 0 merges the warps' lists the same way, or, from
// GB_FILTER_RANK_MIN keys, gb_filter_publish_ranked places them. It returns the largest
// key this thread knows the block did not publish (the block's maximum of them is Kcov;
// rej is the thread's own).
__device__ __forceinline__ gb_u32 gb_filter_publish_lists(gb_u64 lst[GB_FILTER_THREAD], gb_u32 rej, gb_u32 take,
                                                          gb_u32 busy, const gb_filter_shape& s,
                                                          gb_filter_shared& fs) {
    const gb_u32 lane = gb_lane(), warp = gb_warp();
    // A warp hands on at most take keys: the block's take largest are among its warps'.
    const gb_u32 wtake = gb_min_u32(take, GB_FILTER_WARP);
    gb_u64* own = fs.top + warp * GB_FILTER_WARP;
    if (take >= GB_FILTER_RANK_MIN) {
        for (gb_u32 i = lane; i < GB_FILTER_WARP; i += GB_WARP_SIZE) {
            own[i] = 0ull; // gb_warp_take stops at its first 0; the ranks read every slot
        }
        __syncwarp();
        const gb_u32 left = gb_max_u32(rej, gb_warp_take<GB_FILTER_THREAD>(lst, wtake, own));
        __syncwarp();
        if (lane == 0u) {
            fs.count[warp] = gb_count_above<GB_FILTER_WARP>(own, 0ull);
        }
        return gb_filter_publish_ranked(left, take, s, fs);
    }
    if (take >= GB_FILTER_BOUND_MIN && take <= gb_min_u32(busy, (gb_u32)GB_WARP_SIZE)) {
        gb_u32 left = rej;
        if (gb_filter_publish_bound<false>(lst, take, s, fs, left)) {
            return left;
        }
    } else if (take >= GB_FILTER_BOUND_MIN && take <= 2u * busy &&
               2u * gb_num_warps() <= gb_min_u32(GB_MAX_WARPS, (gb_u32)GB_WARP_SIZE)) {
        gb_u32 left = rej;
        if (gb_filter_publish_bound<true>(lst, take, s, fs, left)) {
            return left;
        }
    }
    gb_u32 left = gb_max_u32(rej, gb_warp_take<GB_FILTER_THREAD>(lst, wtake, own));
    __syncthreads();
    if (warp == 0u) {
        // Lane l walks warp l's list; the lists are sorted, so their heads hold the
        // largest key not yet taken.
        const bool listed = lane < gb_num_warps();
        const gb_u64* mine = fs.top + lane * GB_FILTER_WARP;
        gb_u32 at = 0u;
        gb_u64 head = listed ? mine[0] : 0ull;
        gb_u32 c = 0u;
        for (; c < take; ++c) {
            const gb_u64 best = gb_warp_max_u64_all(head);
            if (best == 0ull) {
                break;
            }
            if (lane == 0u) {
                s.part[c] = best;
            }
            if (head == best) {
                ++at;
                head = at < wtake ? mine[at] : 0ull;
            }
        }
        left = gb_max_u32(left, (gb_u32)(gb_warp_max_u64_all(head) >> 32));
        for (gb_u32 e = c + lane; e < take; e += GB_WARP_SIZE) {
            s.part[e] = 0ull; // the last block reads all take slots
        }
    }
    return left;
}

// gb_filter_block_end merges the block's scan results in one round of shared memory:
// thread 0 gets the largest key (mkey), the observations (seen), the largest meta1 (the
// min-p winner, or Kcov) and the summed mass; the other threads' values are left as
// they were.
__device__ __forceinline__ void gb_filter_block_end(gb_u32& mkey, gb_u32& seen, gb_u64& meta1, gb_u64& mass,
                                                    gb_cat_shared& sh) {
    mkey = gb_warp_max_u32_all(mkey);
    seen = gb_warp_or_all(seen);
    meta1 = gb_warp_max_u64_all(meta1);
    for (int d = GB_WARP_SIZE / 2; d > 0; d >>= 1) {
        mass += gb_shfl_down_u64(mass, d); // lane 0's sum is exact
    }
    const gb_u32 w = gb_warp();
    if (gb_lane() == 0u) {
        sh.red[w] = ((gb_u64)mkey << 32) | seen;
        sh.wc[w] = meta1;
        sh.wc[GB_MAX_WARPS + w] = mass;
    }
    __syncthreads();
    if (threadIdx.x == 0u) {
        for (gb_u32 i = 1u; i < gb_num_warps(); ++i) {
            mkey = gb_max_u32(mkey, (gb_u32)(sh.red[i] >> 32));
            seen |= (gb_u32)sh.red[i];
            meta1 = gb_max_u64(meta1, sh.wc[i]);
            mass += sh.wc[GB_MAX_WARPS + i];
        }
    }
}

// GB_FILTER_LOADS is how many published candidates a thread of the last block loads
// with the blocks' meta words (gb_filter_row_words): the row's candidates wait on L2
// once, not once per trip of the block over them.
#define GB_FILTER_LOADS 2

// gb_filter_row_words is the last block's read of what the row's blocks published: every
// thread loads its GB_FILTER_LOADS candidates (cand, 0 past the span) and the meta words
// of its blocks at once; the warps' merges meet in one round of shared memory, from
// which every thread takes the row's largest key (mk), Kcov, the min-p winner (win) and
// the mass (z_row), and warp 0 the raw log-sum-exp (into sh.lse). It empties the list.
template <int KIND>
__device__ __forceinline__ void gb_filter_row_words(const gb_cat_row<KIND>& r, const gb_filter_shape& s, gb_u32 span,
                                                    gb_u32 take, gb_u64 cand[GB_FILTER_LOADS], gb_u32& mk,
                                                    gb_u32& kcov, gb_u64& win, gb_u64& z_row, gb_cat_shared& sh) {
    const gb_u32 nblocks = gridDim.x;
#pragma unroll
    for (int j = 0; j < GB_FILTER_LOADS; ++j) {
        const gb_u32 i = (gb_u32)j * blockDim.x + threadIdx.x;
        cand[j] = i < span ? gb_load_published(s.row_part + (gb_u64)(i / take) * s.stride + i % take) : 0ull;
    }
    mk = 0u;
    kcov = 0u;
    win = 0ull;
    z_row = 0ull;
    gb_lse rl;
    gb_lse_init(rl);
    // Thread i reads block i's words: only the first nw warps hold any (block-uniform).
    const gb_u32 w = gb_warp();
    const gb_u32 nw = gb_min_u32(gb_num_warps(), (nblocks + GB_WARP_SIZE - 1u) / GB_WARP_SIZE);
    if (w < nw) {
        for (gb_u32 i = threadIdx.x; i < nblocks; i += blockDim.x) {
            const gb_u64* bp = s.row_part + (gb_u64)i * s.stride + s.cands;
            const gb_u64 m0 = gb_load_published(bp), m1 = gb_load_published(bp + 1);
            const gb_u64 m2 = gb_load_published(bp + 2);
            mk = gb_max_u32(mk, (gb_u32)(m0 >> 32));
            win = gb_max_u64(win, m1);
            kcov = gb_max_u32(kcov, (gb_u32)m1);
            z_row += m2;
            if (r.lp) {
                gb_lse_merge_packed(rl, gb_load_published(bp + 3));
            }
        }
        win = gb_warp_max_u64_all(win);
        mk = gb_warp_max_u32_all(mk);
        kcov = gb_warp_max_u32_all(kcov);
        for (int d = GB_WARP_SIZE / 2; d > 0; d >>= 1) {
            z_row += gb_shfl_down_u64(z_row, d); // lane 0's sum is exact
        }
        if (r.lp) {
            gb_warp_lse2(rl, rl, false);
        }
        if (gb_lane() == 0u) {
            sh.red[w] = ((gb_u64)mk << 32) | kcov;
            sh.wc[w] = win;
            sh.wc[GB_MAX_WARPS + w] = z_row;
            sh.pair[w] = gb_lse_pack(rl);
        }
    }
    if (threadIdx.x == 0u) {
        sh.n_list = 0u;
    }
    __syncthreads();
    z_row = 0ull;
    for (gb_u32 i = 0u; i < nw; ++i) {
        mk = gb_max_u32(mk, (gb_u32)(sh.red[i] >> 32));
        kcov = gb_max_u32(kcov, (gb_u32)sh.red[i]);
        win = gb_max_u64(win, sh.wc[i]);
        z_row += sh.wc[GB_MAX_WARPS + i];
    }
    if (r.lp && w == 0u) {
        gb_lse e;
        gb_lse_init(e);
        rl = gb_lane() < nw ? gb_lse_unpack(sh.pair[gb_lane()]) : e;
        gb_warp_lse2(rl, rl, false);
        if (gb_lane() == 0u) {
            sh.lse[0] = rl.m; // read after the finishing steps' barriers
            sh.lse[1] = rl.s;
        }
    }
}

// gb_filter_above is a published key if its value lies above the row's Kcov and at or
// above floor's (gb_filter_floor), else 0. Values, not keys: top-k keeps the ties at the
// k-th value.
__device__ __forceinline__ gb_u64 gb_filter_above(gb_u64 key, gb_u32 kcov, gb_u32 floor = 0u) {
    const gb_u32 v = (gb_u32)(key >> 32);
    return v > kcov && v >= floor ? key : 0ull;
}

// GB_FILTER_FLOOR_BLOCKS is the most blocks a row may have for its last block to find
// gb_filter_floor: that ranks a key of each block, and at batch 1 (132 blocks a row) the
// list is short already.
#define GB_FILTER_FLOOR_BLOCKS 64u

// gb_filter_floor is, for a top-k row, an order key below which no value of the row is
// among its k largest. With j + 1 = ceil(k/S), it is the value of the m-th largest of
// the blocks' (j+1)-th published keys, m = ceil(k/(j+1)) <= S: m blocks hold j + 1 keys
// at or above it each, k keys in all. The list above Kcov holds about 3k keys by design
// (gb_filter_take); on LLM logits the floor halves it at batch 4 and 8, and its ranks
// cost the square of its length. It returns 0 (no floor) where the row's shape does not
// allow one; the block calls it together.
__device__ __forceinline__ gb_u32 gb_filter_floor(const gb_row_params& p, const gb_filter_shape& s, gb_u32 span,
                                                  gb_u32 take, const gb_u64 cand[GB_FILTER_LOADS],
                                                  gb_filter_shared& fs) {
    const gb_u32 nblocks = gridDim.x;
    // The cheap tests first: the divisions below are not free, and the rows of a batch-1
    // step (132 blocks) never take the floor.
    if (!s.topk || nblocks > GB_FILTER_FLOOR_BLOCKS || span > GB_FILTER_LOADS * blockDim.x) {
        return 0u; // uniform
    }
    const gb_u32 per = (p.top_k - 1u) / nblocks + 1u; // j + 1; top_k >= 1 with top-k on
    if (per > take) {
        return 0u;
    }
    const gb_u32 j = per - 1u;
    const gb_u32 m = (p.top_k - 1u) / per + 1u;
    if (threadIdx.x == 0u) {
        fs.floor = 0ull;
    }
#pragma unroll
    for (int c = 0; c < GB_FILTER_LOADS; ++c) {
        const gb_u32 i = (gb_u32)c * blockDim.x + threadIdx.x;
        if (i < span && i % take == j) {
            fs.top[i / take] = cand[c];
        }
    }
    __syncthreads();
    gb_rank_keys(
        nblocks, [&](gb_u32 b) { return fs.top[b]; },
        [&](gb_u32, gb_u64 key, gb_u32 rank) {
            if (rank == m - 1u) {
                fs.floor = key;
            }
        });
    __syncthreads();
    return (gb_u32)(fs.floor >> 32);
}

// gb_filter_list_put appends key (when take) to the candidate list and returns its place.
// Every lane of the warp calls it.
__device__ __forceinline__ gb_u32 gb_filter_list_put(gb_u64 key, bool take, const gb_row_state& st,
                                                     gb_cat_shared& sh) {
    const gb_u32 at = gb_list_append(take, &sh.n_list);
    if (take && at < GB_FILTER_RANKED) {
        const gb_u32 k = (gb_u32)(key >> 32);
        sh.idx[at] = 0xFFFFFFFFu - (gb_u32)key;
        sh.key[at] = k;
        sh.w[at] = gb_weight(gb_orderkey_inverse(k), st.m, st.invT, st.cutoff);
    }
    return at;
}

// gb_filter_list_add appends a published key above the row's Kcov and at or above floor
// to the candidate list, and packs it into fs.top for the ranks. Every lane of the warp
// calls it.
__device__ __forceinline__ void gb_filter_list_add(gb_u64 key, gb_u32 kcov, gb_u32 floor, const gb_row_state& st,
                                                   gb_cat_shared& sh, gb_filter_shared& fs) {
    key = gb_filter_above(key, kcov, floor);
    const gb_u32 at = gb_filter_list_put(key, key != 0ull, st, sh);
    if (key != 0ull && at < GB_FILTER_PACKED) {
        fs.top[at] = key;
    }
}

// gb_filter_list_runs builds the candidate list of a row whose blocks published take >=
// GB_FILTER_RANK_MIN keys each, span <= GB_FILTER_PACKED in all, and ranks it (order[rank]
// = entry). Block b's keys above Kcov lead its published run, largest first, so fs.top
// holds the runs as published (0 past those keys), and an entry's rank is its place in
// its own run plus, for every other run, the keys there above it: a binary search each,
// where a comparison with every entry costs span loads per entry.
__device__ __forceinline__ void gb_filter_list_runs(const gb_filter_shape& s, const gb_row_state& st, gb_u32 kcov,
                                                    gb_u32 span, gb_u32 take, const gb_u64 cand[GB_FILTER_LOADS],
                                                    gb_u32* order, gb_cat_shared& sh, gb_filter_shared& fs) {
#pragma unroll
    for (int j = 0; j < GB_FILTER_LOADS; ++j) {
        const gb_u32 i = (gb_u32)j * blockDim.x + threadIdx.x;
        if (i < span) {
            fs.top[i] = gb_filter_above(cand[j], kcov);
        }
    }
    for (gb_u32 i = GB_FILTER_LOADS * blockDim.x + threadIdx.x; i < span; i += blockDim.x) {
        fs.top[i] = gb_filter_above(gb_load_published(s.row_part + (gb_u64)(i / take) * s.stride + i % take), kcov);
    }
    __syncthreads();
    for (gb_u32 i0 = 0u; i0 < span; i0 += blockDim.x) { // block-uniform trips: warps append
        const gb_u32 i = i0 + threadIdx.x;
        const gb_u64 key = i < span ? fs.top[i] : 0ull;
        gb_u32 rank = 0u;
        if (key != 0ull) {
            const gb_u32 own = i - i % take;
            rank = i - own;
            for (gb_u32 o = 0u; o < span; o += take) {
                if (o != own) {
                    rank += gb_count_above_n(fs.top + o, take, key);
                }
            }
        }
        const gb_u32 at = gb_filter_list_put(key, key != 0ull, st, sh);
        if (key != 0ull) {
            order[rank] = at;
        }
    }
    __syncthreads();
}

// gb_filter_finish_list is the last block's work for a row with candidates: the list of
// every published key above the row's Kcov, ranked (by the blocks' sorted runs,
// gb_filter_list_runs, or each entry counting the larger ones), gives Kk at rank k - 1
// and, by one block scan of the weights in rank order, Kp; then the Gumbel-max draw over the kept entries. It returns false, having written nothing,
// when the kept set is not certain to lie in the list (or the list is too long to rank);
// the caller then runs the one-block path.
template <int KIND>
__device__ __forceinline__ bool gb_filter_finish_list(gb_cat_row<KIND>& r, const gb_filter_shape& s,
                                                      gb_row_state& st, gb_u32 kcov, gb_u64 z_row, gb_u32 lo,
                                                      gb_u32 hi, gb_u32 span, gb_u32 take,
                                                      const gb_u64 cand[GB_FILTER_LOADS], gb_cat_shared& sh,
                                                      gb_filter_shared& fs) {
    // Each block published its take largest keys, 0 in the slots it had no key for; this
    // thread holds the first GB_FILTER_LOADS trips' (gb_filter_row_words).
    gb_u32* order = sh.idx + GB_FILTER_RANKED; // order[rank] = entry
    const bool runs = take >= GB_FILTER_RANK_MIN && span <= GB_FILTER_PACKED;
    if (runs) {
        gb_filter_list_runs(s, st, kcov, span, take, cand, order, sh, fs);
    } else {
        // Every value of the row's top k lies at or above the floor, so when k listed keys
        // do, the list still holds the top k and their ties, and Kk at rank k - 1.
        const gb_u32 floor = gb_filter_floor(r.p, s, span, take, cand, fs);
#pragma unroll
        for (int j = 0; j < GB_FILTER_LOADS; ++j) {
            if ((gb_u32)j * blockDim.x < span) { // block-uniform trips: warps append
                gb_filter_list_add(cand[j], kcov, floor, st, sh, fs);
            }
        }
        for (gb_u32 i0 = GB_FILTER_LOADS * blockDim.x; i0 < span; i0 += blockDim.x) {
            const gb_u32 i = i0 + threadIdx.x;
            const gb_u64 key =
                i < span ? gb_load_published(s.row_part + (gb_u64)(i / take) * s.stride + i % take) : 0ull;
            gb_filter_list_add(key, kcov, floor, st, sh, fs);
        }
        __syncthreads();
    }
    const gb_u32 n_list = sh.n_list;
    // Uniform: every thread read the same count. Without top-k and top-p (no filter on,
    // a row the sampler never sends) the kept set is the row, listed only when no block
    // left anything out.
    if (n_list > GB_FILTER_RANKED || (s.topk && n_list < r.p.top_k) || (!s.topk && !s.topp && kcov != 0u)) {
        return false;
    }
    // Ranks: entries are distinct packed keys, so rank order is the order of the keys.
    // A list that fits in fs.top is ranked from its packed keys: one load per comparison.
    if (!runs) {
        const auto at_rank = [&](gb_u32 e, gb_u64, gb_u32 rank) { order[rank] = e; };
        if (n_list <= GB_FILTER_PACKED) {
            gb_rank_keys(n_list, [&](gb_u32 f) { return fs.top[f]; }, at_rank);
        } else {
            gb_rank_keys(
                n_list, [&](gb_u32 f) { return ((gb_u64)sh.key[f] << 32) | (0xFFFFFFFFu - sh.idx[f]); }, at_rank);
        }
        __syncthreads();
    }
    const gb_u32 kk = s.topk ? sh.key[order[r.p.top_k - 1u]] : 0u;
    st.threshold = kk;
    gb_u32 kp = 0u;
    if (s.topp) {
        // Each thread owns a run of consecutive ranks; the scan of the runs' masses is the
        // prefix mass the threshold needs. Z is the mass of keys >= Kk: the list's own
        // with top-k, else the row's.
        const gb_u32 per = n_list / blockDim.x + (n_list % blockDim.x != 0u ? 1u : 0u);
        const gb_u32 p0 = gb_min_u32(threadIdx.x * per, n_list), p1 = gb_min_u32(p0 + per, n_list);
        gb_u64 local = 0ull;
        for (gb_u32 q = p0; q < p1; ++q) {
            const gb_u32 e = order[q];
            local += sh.key[e] >= kk ? gb_fixed(sh.w[e], st.two_pow_f) : 0ull;
        }
        gb_u64 listed = 0ull;
        gb_u64 acc = gb_block_exclusive_scan_u64(local, listed, sh.red, sh.bcast);
        const gb_u64 z = s.topk ? listed : z_row;
        const gb_u64 pp = __float2ull_rz(__fmul_rn(r.p.top_p, GB_TWO_POW_32));
        const gb_u64 target = (__umul64hi(z, pp) << 32) | ((z * pp) >> 32); // (Z * P) >> 32
        if (listed < target || listed == 0ull) {
            return false; // the nucleus reaches below Kcov
        }
        // Kp: the key where the prefix mass in rank order first reaches the target.
        for (gb_u32 q = p0; q < p1; ++q) {
            const gb_u32 e = order[q];
            const gb_u64 w = sh.key[e] >= kk ? gb_fixed(sh.w[e], st.two_pow_f) : 0ull;
            if (acc + w >= target && (acc < target || q == 0u)) {
                sh.word = sh.key[e];
            }
            acc += w;
        }
        __syncthreads();
        kp = sh.word;
    }
    st.threshold = gb_max_u32(kk, kp);
    const gb_u64 s_kept = gb_gumbel_listed<KIND>(r, st, n_list, lo, hi, sh);
    gb_cat_finish<KIND>(r, st, s_kept, sh);
    return true;
}

// gb_filtered is the kernel: block (x, y, z) scans its chunk of launch row y for draw z
// and publishes its words; the row's last block to arrive finishes the draw.
template <int KIND>
__device__ __forceinline__ void gb_filtered(const typename gb_io<KIND>::elem* __restrict__ logits,
                                            gb_row_params* params, gb_i32* tokens, gb_i32* status,
                                            gb_u64* partials, gb_u32* counters, gb_u64 row_stride, gb_u32 vocab,
                                            float* logprobs, const float* bias, gb_u32* counts, const gb_u32* mask, const gb_u32* bitmask) {
    gb_cat_row<KIND> r;
    r.y = blockIdx.y;
    r.p = params[r.y];
    // This kernel may start before filter_max ends (gb_grid_wait): until the wait it only
    // reads what filter_max does not write and writes what filter_max does not read.
    if (!gb_filter_owns(r.p.flags)) {
        gb_grid_wait();
        return; // another kernel's row: left entirely alone
    }
    const gb_u32 z = blockIdx.z;
    const gb_u32 nblocks = gridDim.x;
    if (!gb_cat_row_bind<KIND>(r, logits, params, tokens, status, counters, row_stride, vocab, logprobs, bias, counts,
                               mask, bitmask)) {
        gb_grid_wait();
        return;
    }
    gb_cat_shared& sh = gb_cat_smem();
    if (r.p.temperature == 0.0f) {
        gb_grid_wait();
        if (blockIdx.x == 0u) {
            gb_categorical_row<KIND, true>(r, sh); // greedy: the first largest logit
        }
        return;
    }

    gb_filter_shape s;
    s.topk = r.p.top_k > 0u && r.p.top_k < vocab;
    s.topp = r.p.top_p > 0.0f && r.p.top_p < 1.0f;
    s.minp = r.p.min_p > 0.0f && r.p.min_p <= 1.0f;
    s.minp_only = s.minp && !s.topk && !s.topp;
    s.needs_max = !s.topk && (s.topp || s.minp);
    s.cands = gb_max_u32(GB_FILTER_MIN_CANDS, GB_FILTER_LIST / nblocks);
    s.stride = s.cands + GB_FILTER_META;
    const gb_u64 rows = gridDim.y;
    s.row_part = partials + rows * nblocks + ((gb_u64)z * rows + r.y) * nblocks * s.stride;
    s.part = s.row_part + (gb_u64)blockIdx.x * s.stride;

    gb_row_state st;
    st.invT = 1.0f / r.p.temperature;
    st.bitlen = 32u - (gb_u32)__clz((int)vocab);
    st.two_pow_f = __uint_as_float((127u + 63u - st.bitlen) << 23);
    st.cutoff = gb_weight_cutoff(st.bitlen);
    st.threshold = 0u;
    st.minp_on = s.minp;
    st.min_p = r.p.min_p;
    st.m = 0.0f;
    gb_grid_wait();
    if (s.needs_max) {
        // filter_max's words: a previous launch wrote them.
        gb_u32 mk = 0u, none = 0u;
        for (gb_u32 i = threadIdx.x; i < nblocks; i += blockDim.x) {
            mk = gb_max_u32(mk, (gb_u32)partials[(gb_u64)r.y * nblocks + i]);
        }
        gb_block_max_or(mk, none, sh.red, sh.bcast);
        st.m = gb_orderkey_inverse(mk);
    }
    gb_u32 lo, hi;
    gb_step_plus(r.p, z, lo, hi);
    const float dmin = s.minp_only ? __fadd_rn(__fmul_rn(logf(st.min_p), 1.0001f), -1.0e-3f) : 0.0f;

    gb_u32 start, end;
    gb_chunk_of(vocab, nblocks, blockIdx.x, start, end);
    const gb_u32 take = gb_filter_take(r.p, s, nblocks);
    gb_filter_shared& fs = gb_filter_smem();
    gb_u64 lst[GB_FILTER_THREAD];
#pragma unroll
    for (int i = 0; i < GB_FILTER_THREAD; ++i) {
        lst[i] = 0ull;
    }
    gb_u32 rej = 0u, mkey = 0u, seen = 0u;
    gb_u64 mass = 0ull, best = 0ull;
    gb_lse raw;
    gb_lse_init(raw);
    const bool topp_mass = s.topp && !s.topk;
#define GB_FILTER_SCAN(MINP, TOPP, LP) \
    gb_filter_scan<KIND, MINP, TOPP, LP>(r, start, end, st, dmin, lo, hi, lst, rej, mkey, seen, mass, best, raw)
    if (s.minp_only) {
        if (r.lp) {
            GB_FILTER_SCAN(true, false, true);
        } else {
            GB_FILTER_SCAN(true, false, false);
        }
    } else if (topp_mass) {
        if (r.lp) {
            GB_FILTER_SCAN(false, true, true);
        } else {
            GB_FILTER_SCAN(false, true, false);
        }
    } else if (r.lp) {
        GB_FILTER_SCAN(false, false, true);
    } else {
        GB_FILTER_SCAN(false, false, false);
    }
#undef GB_FILTER_SCAN

    // The block's words: candidates (or, min-p alone, none), then the meta words
    // [mkey << 32, Kcov or the min-p winner, mass, raw log-sum-exp].
    gb_u64 meta1 = best;
    if (!s.minp_only) {
        meta1 = gb_filter_publish_lists(lst, rej, take, gb_topn_busy(end - start), s, fs);
    }
    if (r.lp) {
        gb_block_lse(raw, raw, false, sh.pair);
    }
    gb_filter_block_end(mkey, seen, meta1, mass, sh);
    if (threadIdx.x == 0u) {
        s.part[s.cands] = (gb_u64)mkey << 32;
        s.part[s.cands + 1u] = meta1;
        s.part[s.cands + 2u] = mass;
        s.part[s.cands + 3u] = gb_lse_pack(raw);
        gb_u32 last = 1u;
        if (nblocks > 1u) {
            gb_u32* cnt = counters + 2u * ((gb_u64)z * rows + r.y);
            if (seen != 0u) {
                atomicOr(&cnt[1], seen);
            }
            last = gb_arrive(&cnt[0], nblocks) ? 1u : 0u;
            if (last) {
                seen = atomicExch(&cnt[1], 0u);
                atomicExch(&cnt[0], 0u);
            }
        }
        sh.word = last ? (seen | 0x80000000u) : 0u;
    }
    __syncthreads();
    const gb_u32 verdict = sh.word;
    if (verdict == 0u) {
        return;
    }

    // The last block: the row's observations, maximum, mass and log-sum-exp.
    seen = verdict & ~0x80000000u;
    if (gb_seen_status(seen) != GB_STATUS_OK) {
        if (threadIdx.x == 0u) {
            gb_finish(tokens, status, r.o, 0ull, seen);
            if (r.lp) {
                gb_write_record(logprobs, r.o, false, 0.0f, 0.0f, 0.0f, 0.0f);
            }
            gb_row_done(params, r.p, r.y, counters, tokens, status, counts, vocab);
        }
        return;
    }
    gb_u64 cand[GB_FILTER_LOADS];
    const gb_u32 span = s.minp_only ? 0u : nblocks * take;
    gb_u32 mk, kcov;
    gb_u64 win, z_row;
    gb_filter_row_words<KIND>(r, s, span, take, cand, mk, kcov, win, z_row, sh);
    st.m = gb_orderkey_inverse(mk);
    if (s.minp_only) {
        if (gb_exact_needed(GB_STATUS_OK, win)) {
            // The blocks' float32 winner may be wrong (ABI.md, "filtered"): this block
            // redraws over the row's kept elements by the exact comparison.
            gb_exact_kept<KIND>(r, st, false, 0u, lo, hi, sh);
        } else if (threadIdx.x == 0u) {
            sh.token = (gb_i32)(0xFFFFFFFFu - (gb_u32)win);
        }
        __syncthreads();
        gb_cat_finish<KIND>(r, st, z_row, sh);
        return;
    }
    if (!gb_filter_finish_list<KIND>(r, s, st, kcov, z_row, lo, hi, span, take, cand, sh, fs)) {
        gb_categorical_row<KIND, true>(r, sh);
    }
}
