// shard_select (ABI.md): a vocabulary shard's part of the filtered route, S >= 1 blocks
// per row. Each block adds the matching elements of its chunk to a shared-memory
// histogram of one key digit (counts and fixed-point masses) and, with GB_SELECT_DRAW,
// takes their Gumbel-max winner; then it adds its non-zero bins to the row's histogram
// and raises the row's key word with global atomics. Integer sums and a maximum: the
// words come out the same for any S, T and order of the blocks, and no block waits for
// another (no partials, no counters).

// GB_SELECT_GROUPS is the groups of four elements a thread has in flight per trip of the
// scan: the scan's work per element is small, so the loads in flight bound it.
#define GB_SELECT_GROUPS 4

// GB_SELECT_COPIES is the block's copies of its histogram, lane l adding to copy
// l % GB_SELECT_COPIES: the top digit of a row of logits falls in a handful of bins, and
// lanes of one warp adding to one shared word wait on each other.
#define GB_SELECT_COPIES 8

// gb_select_query is a row's query (abi.SelectQuery) with what the scan derives from it.
struct gb_select_query {
    gb_u32 floor;  // a matching key is at least floor,
    gb_u32 prefix; // and has prefix's bits where high is set:
    gb_u32 high;   // the bits above shift + 8 (none for shift 24)
    float m;       // the row's largest processed logit over every shard
    gb_u32 shift;  // the digit's lowest bit: 24, 16, 8 or 0
    gb_u32 f;      // F: the weights' fixed-point scale, 63 - bitlen of the whole vocabulary
    bool min_p;    // GB_SELECT_MIN_P
    bool draw;     // GB_SELECT_DRAW
};

// gb_select_query_of decodes the two query words (abi.DecodeSelectQuery).
__device__ __forceinline__ gb_select_query gb_select_query_of(gb_u64 w0, gb_u64 w1) {
    gb_select_query q;
    q.floor = (gb_u32)w0;
    q.prefix = (gb_u32)(w0 >> 32);
    q.m = __uint_as_float((gb_u32)w1);
    q.shift = (gb_u32)(w1 >> 32) & 0xFFu;
    q.f = (gb_u32)(w1 >> 40) & 0xFFu;
    q.min_p = (w1 & GB_SELECT_MIN_P) != 0ull;
    q.draw = (w1 & GB_SELECT_DRAW) != 0ull;
    q.high = q.shift < 24u ? 0xFFFFFFFFu << (q.shift + 8u) : 0u;
    return q;
}

// gb_select_bad reports the rows that raise their key word to GB_SHARD_KEY_FAILED | 3:
// not a shard, a temperature that is not positive (or 1/T overflows), reserved flags,
// LOGPROBS or RECORD (both need the merged token), an offset that splits a Philox group
// or runs past GB_MAX_VOCAB, a bad vocabulary, another shift, or F > 62.
__device__ __forceinline__ bool gb_select_bad(const gb_row_params& p, const gb_select_query& q, gb_u32 vocab,
                                              gb_u32 vocab_offset) {
    const gb_u32 refused = GB_FLAGS_RESERVED | GB_FLAG_LOGPROBS | GB_FLAG_RECORD;
    return !(p.flags & GB_FLAG_SHARD) || (p.flags & refused) != 0u || !(p.temperature > 0.0f) ||
           gb_bad_row(p.temperature, vocab) || (vocab_offset & 3u) != 0u ||
           (gb_u64)vocab_offset + vocab > (gb_u64)GB_MAX_VOCAB || (q.shift & 7u) != 0u || q.shift > 24u || q.f > 62u;
}

// gb_select_row is what the scan of a row knows besides its query.
struct gb_select_row {
    gb_select_query q;
    float invT;      // fl(1 / temperature)
    float two_pow_f; // 2^F
    float cutoff;    // the weights below it are 0 (gb_weight)
    bool min_p_on;   // GB_SELECT_MIN_P and 0 < min_p <= 1
    float min_p;
};

// gb_select_match reports whether the element of processed logit x matches the query,
// and then its bin and fixed-point weight: x' neither NaN nor +Inf, its key at least
// floor and of the prefix, and with min-p its weight at least min_p. -Inf matches where
// the key tests let it (weight 0).
__device__ __forceinline__ bool gb_select_match(float x, const gb_select_row& s, gb_u32& bin, gb_u64& q) {
    if (x != x || x == gb_inf()) {
        return false;
    }
    const gb_u32 k = gb_orderkey(x);
    if (k < s.q.floor || (k & s.q.high) != (s.q.prefix & s.q.high)) {
        return false;
    }
    const float w = gb_weight(x, s.q.m, s.invT, s.cutoff);
    if (s.min_p_on && !(w >= s.min_p)) {
        return false;
    }
    bin = (k >> s.q.shift) & 0xFFu;
    q = gb_fixed(w, s.two_pow_f);
    return true;
}

// gb_select_draw_group folds the matching elements (ok) of the group whose first global
// index is gi (a multiple of 4) into the thread's best packed score and its score tbest:
// each valued as in gumbel_argmax, fl(fl(x' * invT) + g). The group's Philox block runs
// once, and only for an element that can still win: -Inf scores -Inf whatever its
// noise, and an element with fl(fl(x' * invT) + GB_MAX_GUMBEL) < tbest cannot beat the
// thread's best.
__device__ __forceinline__ void gb_select_draw_group(const float x[4], const bool ok[4], gb_u32 gi, float invT,
                                                     gb_u32 lo, gb_u32 hi, const gb_row_params& p, gb_u64& best,
                                                     float& tbest) {
    float s[4];
    bool need[4];
    bool any = false;
#pragma unroll
    for (gb_u32 j = 0; j < 4u; ++j) {
        s[j] = __fmul_rn(x[j], invT);
        if (ok[j] && x[j] == -gb_inf()) {
            best = gb_max_u64(best, gb_pack(-gb_inf(), gi + j));
        }
        need[j] = ok[j] && x[j] != -gb_inf() && !(__fadd_rn(s[j], GB_MAX_GUMBEL) < tbest);
        any = any || need[j];
    }
    if (!any) {
        return;
    }
    gb_u32 w[4];
    gb_philox(gi >> 2, lo, hi, GB_PURPOSE_GUMBEL, p.seed_lo, p.seed_hi, w);
    bool tail = false;
#pragma unroll
    for (gb_u32 j = 0; j < 4u; ++j) {
        tail = tail || (need[j] && w[j] < GB_TAIL_THRESHOLD);
    }
    gb_u32 t[4] = {0u, 0u, 0u, 0u};
    if (tail) {
        gb_philox(gi >> 2, lo, hi, GB_PURPOSE_GUMBEL_TAIL, p.seed_lo, p.seed_hi, t);
    }
#pragma unroll
    for (gb_u32 j = 0; j < 4u; ++j) {
        if (need[j]) {
            const float score = __fadd_rn(s[j], gb_gumbel(w[j], t[j]));
            best = gb_max_u64(best, gb_pack(score, gi + j));
            tbest = fmaxf(tbest, score);
        }
    }
}

// gb_select_scan adds the matching elements of the chunk [start, end) to the block's
// histogram (s_cnt, s_mass) and returns the thread's best packed score over them (0 for
// none, or without GB_SELECT_DRAW). A thread's groups g, g + 4T, ... are read a trip of
// GB_SELECT_GROUPS at a time, their mask words with them; the trip count may differ
// between threads, since nothing in the loop is collective. goff is the global index of
// element 0.
template <int KIND>
__device__ __forceinline__ gb_u64 gb_select_scan(const typename gb_io<KIND>::elem* row, gb_u32 start, gb_u32 end,
                                                 bool vec, const gb_processor& pc, const gb_select_row& s,
                                                 const gb_row_params& p, gb_u32 goff, gb_u32* s_cnt, gb_u64* s_mass) {
    const gb_u32 stride = 4u * blockDim.x;
    gb_u32 lo, hi;
    gb_step_plus(p, 0u, lo, hi);
    gb_u64 best = 0ull;
    float tbest = -gb_inf();
    for (gb_u32 g0 = start + 4u * threadIdx.x; g0 < end; g0 += GB_SELECT_GROUPS * stride) {
        float x[GB_SELECT_GROUPS][4];
        gb_u32 n[GB_SELECT_GROUPS];
        gb_load_groups<KIND, GB_SELECT_GROUPS>(row, g0, stride, end, vec, x, n);
        gb_u32 mw[GB_SELECT_GROUPS]; // all ones for a row without masks
        gb_load_mask_bits<GB_SELECT_GROUPS>(pc, g0, stride, end, mw);
#pragma unroll
        for (int i = 0; i < GB_SELECT_GROUPS; ++i) {
            const gb_u32 g = g0 + (gb_u32)i * stride;
            if (pc.flags != 0u) {
                gb_process_group_w(pc, mw[i], g, n[i], x[i], x[i]);
            }
            gb_u32 bins[4];
            gb_u64 q[4];
            bool ok[4];
#pragma unroll
            for (gb_u32 j = 0; j < 4u; ++j) {
                bins[j] = 0u;
                q[j] = 0ull;
                ok[j] = j < n[i] && gb_select_match(x[i][j], s, bins[j], q[j]);
            }
            if (s.q.draw) { // before gb_hist_add, which clears the ok of repeated bins
                gb_select_draw_group(x[i], ok, goff + g, s.invT, lo, hi, p, best, tbest);
            }
            const gb_u32 copy = (gb_lane() % GB_SELECT_COPIES) * GB_SELECT_BINS;
            gb_hist_add(s_cnt + copy, s_mass + copy, bins, q, ok);
        }
    }
    return best;
}

// gb_shard_select is the kernel: block (x, y) takes its chunk of launch row y's logits row.
// A bad row raises its key word to GB_SHARD_KEY_FAILED | 3 (block 0: the maximum makes
// one raise enough) and adds nothing.
template <int KIND>
__device__ __forceinline__ void gb_shard_select(const typename gb_io<KIND>::elem* __restrict__ logits,
                                                const gb_row_params* params, gb_u64 row_stride, gb_u32 vocab,
                                                const float* bias, const gb_u32* counts, const gb_u32* mask,
                                                const gb_u32* bitmask, gb_u32 vocab_offset, gb_u64* shard) {
    __shared__ gb_u32 s_cnt[GB_SELECT_COPIES * GB_SELECT_BINS];
    __shared__ gb_u64 s_mass[GB_SELECT_COPIES * GB_SELECT_BINS];
    __shared__ gb_u64 s_red[GB_MAX_WARPS];
    __shared__ gb_u64 s_bcast[2];

    if (blockIdx.z != 0u) {
        return; // one draw per row, whatever the grid
    }
    const gb_u32 y = blockIdx.y;
    const gb_u64 n = gridDim.y;
    const gb_row_params p = params[y];
    // The shard argument's words (abi.Launch.SelectQueryWord, SelectHistWord, SelectKeyWord).
    const gb_select_query q = gb_select_query_of(shard[2u * (gb_u64)y], shard[2u * (gb_u64)y + 1u]);
    gb_u64* hist = shard + 2u * n + 2u * GB_SELECT_BINS * (gb_u64)y; // counts, then masses
    gb_u64* key = shard + (2u + 2u * GB_SELECT_BINS) * n + y;
    if (gb_select_bad(p, q, vocab, vocab_offset)) {
        if (blockIdx.x == 0u && threadIdx.x == 0u) {
            atomicMax(key, gb_shard_key(0ull, GB_STATUS_BAD_PARAMS));
        }
        return;
    }
    gb_u32 start, end; // this block's chunk
    gb_chunk_of(vocab, gridDim.x, blockIdx.x, start, end);
    if (start == end) {
        return; // uniform for the block: nothing to add
    }

    gb_select_row s;
    s.q = q;
    s.invT = 1.0f / p.temperature;
    s.two_pow_f = __uint_as_float((127u + q.f) << 23);
    s.cutoff = gb_weight_cutoff(63u - q.f);
    s.min_p_on = q.min_p && p.min_p > 0.0f && p.min_p <= 1.0f;
    s.min_p = p.min_p;

    for (gb_u32 b = threadIdx.x; b < GB_SELECT_COPIES * GB_SELECT_BINS; b += blockDim.x) {
        s_cnt[b] = 0u;
        s_mass[b] = 0ull;
    }
    __syncthreads();
    const typename gb_io<KIND>::elem* row = logits + (gb_u64)p.row * row_stride;
    const gb_processor pc = gb_processor_of(p, bias, counts, mask, bitmask, vocab);
    const gb_u64 best = gb_select_scan<KIND>(row, start, end, gb_io<KIND>::vec_ok(row), pc, s, p, vocab_offset,
                                             s_cnt, s_mass);
    __syncthreads();
    // Only the bins this block reached: a digit of LLM logits fills a handful of them.
    for (gb_u32 b = threadIdx.x; b < GB_SELECT_BINS; b += blockDim.x) {
        gb_u64 c = 0ull, m = 0ull;
#pragma unroll
        for (gb_u32 k = 0; k < GB_SELECT_COPIES; ++k) {
            c += s_cnt[k * GB_SELECT_BINS + b];
            m += s_mass[k * GB_SELECT_BINS + b];
        }
        if (c != 0ull) {
            atomicAdd(&hist[b], c);
        }
        if (m != 0ull) {
            atomicAdd(&hist[GB_SELECT_BINS + b], m);
        }
    }
    if (q.draw) {
        const gb_u64 top = gb_block_max_u64_all(best, s_red, s_bcast);
        if (threadIdx.x == 0u && top != 0ull) {
            atomicMax(key, top);
        }
    }
}
