// categorical (ABI.md): one block per row; radix selects for top-k and top-p, exact 64-bit
// fixed-point weights, and an inverse-CDF draw by chunked block prefix sums.

// GB_MAX_TILES is the most tiles of the categorical draw's first level (see gb_categorical).
#define GB_MAX_TILES 256

// gb_weight is w(x) = expf(fl(fl(x - m) * invT)), 0 for x = -Inf. Below cutoff the
// weight is under 2^-F / e, so its fixed-point weight is 0 whatever expf's last bit: it
// reads as 0 and skips expf (min-p compares w, but an element with q = 0 never counts).
__device__ __forceinline__ float gb_weight(float x, float m, float invT, float cutoff) {
    float d = __fmul_rn(__fadd_rn(x, -m), invT); // -Inf for x = -Inf
    if (!(d >= cutoff)) {
        return 0.0f;
    }
    return expf(d);
}

// gb_fixed is q = uint64(w * 2^F): exact scaling, truncation.
__device__ __forceinline__ gb_u64 gb_fixed(float w, float two_pow_f) { return __float2ull_rz(__fmul_rn(w, two_pow_f)); }

// gb_weight_cutoff is -(F ln 2 + 1) for bitlen(V), two rounded float32 operations as in
// every edition: weights below it have q = 0.
__device__ __forceinline__ float gb_weight_cutoff(gb_u32 bitlen) {
    return -__fadd_rn(__fmul_rn((float)(63u - bitlen), 0.6931472f), 1.0f);
}

// gb_row_state is what every pass of the categorical kernel knows about its row.
struct gb_row_state {
    float m;          // the row's largest logit
    float invT;       // fl(1 / temperature)
    float two_pow_f;  // 2^F
    float cutoff;     // -(F ln 2 + 1): weights below it have q = 0
    gb_u32 threshold; // kept keys are >= threshold
    bool minp_on;
    float min_p;
    gb_u32 bitlen; // bitlen(V): F = 63 - bitlen
};

// gb_kept_entry reports whether an element of order key k and weight w is kept: its key
// at least threshold and, with min-p, w >= min_p.
__device__ __forceinline__ bool gb_kept_entry(gb_u32 k, float w, const gb_row_state& st) {
    return k >= st.threshold && !(st.minp_on && !(w >= st.min_p));
}

// gb_row_kept reports whether the element of processed logit x is kept, with its weight
// in w, computed only when its key reaches the threshold.
__device__ __forceinline__ bool gb_row_kept(float x, const gb_row_state& st, float& w) {
    w = 0.0f;
    if (gb_orderkey(x) < st.threshold) {
        return false;
    }
    w = gb_weight(x, st.m, st.invT, st.cutoff);
    return !(st.minp_on && !(w >= st.min_p));
}

// gb_fixed_weight is gb_fixed(gb_weight(x, ...)) without gb_weight's branch, for scans
// that sum every element's weight: expf runs for nearly every element of LLM logits
// anyway, and a branch per element costs more than the few it skips. An argument at or
// below cutoff (NaN and -Inf included) is raised to cutoff, whose weight, under 2^-F / e,
// truncates to 0, so q is gb_fixed(gb_weight(x, ...)) for every x.
__device__ __forceinline__ gb_u64 gb_fixed_weight(float x, const gb_row_state& st) {
    const float d = __fmul_rn(__fadd_rn(x, -st.m), st.invT);
    return gb_fixed(expf(fmaxf(d, st.cutoff)), st.two_pow_f);
}

// gb_kept_q returns an element's fixed-point weight if it is kept, else 0.
__device__ __forceinline__ gb_u64 gb_kept_q(float x, const gb_row_state& st) {
    float w;
    return gb_row_kept(x, st, w) ? gb_fixed(w, st.two_pow_f) : 0ull;
}

// GB_CAT_CAP is the capacity of the categorical kernel's shared-memory list of candidates
// (12 bytes each: index, key, weight; 3072 fills the 48 KB of static shared memory next to
// the other arrays); rows whose candidates do not fit take the full-row path.
// GB_CAT_GROUPS is how many groups of four elements each thread has in flight in the
// passes over the row: one block holds a whole row, so the loads in flight, not the
// instruction count, bound a pass.
#define GB_CAT_CAP 3072
#define GB_CAT_GROUPS 4

// gb_cat_load_trip reads a thread's GB_CAT_GROUPS groups of one trip over the row (group i
// at base + i * 4 * blockDim.x + 4 * threadIdx.x) and replaces them by their processed
// logits when the row has processors. All loads, the groups' mask words included, are
// issued before any is used: one block holds a whole row, so the bytes in flight per
// thread, not the instruction count, bound the speed of a pass (32 warps with one 16-byte
// load each keep too little in flight to cover the L2 or HBM latency), and a mask word
// read only when its group is processed would add a wait per group.
template <int KIND>
__device__ __forceinline__ void gb_cat_load_trip(const typename gb_io<KIND>::elem* row, gb_u32 base, gb_u32 vocab,
                                                 bool vec, const gb_processor& pc, float x[GB_CAT_GROUPS][4],
                                                 gb_u32 n[GB_CAT_GROUPS]) {
    const gb_u32 chunk = 4u * blockDim.x;
    const gb_u32 g = base + 4u * threadIdx.x;
    gb_load_groups<KIND, GB_CAT_GROUPS>(row, g, chunk, vocab, vec, x, n);
    if (pc.flags != 0u) {
        gb_u32 mw[GB_CAT_GROUPS];
        gb_load_mask_bits<GB_CAT_GROUPS>(pc, g, chunk, vocab, mw);
#pragma unroll
        for (int i = 0; i < GB_CAT_GROUPS; ++i) {
            gb_process_group_w(pc, mw[i], g + (gb_u32)i * chunk, n[i], x[i], x[i]);
        }
    }
}

// gb_cat_hist_row adds to s_cnt the digit at shift of every processed key of the row whose
// digits above it equal prefix: one level of top-k's radix select over the row. Keys only,
// no exponential: a load, an order key, a compare and (rarely) a shared atomic per element.
template <int KIND>
__device__ __forceinline__ void gb_cat_hist_row(const typename gb_io<KIND>::elem* row, gb_u32 vocab, bool vec,
                                                const gb_processor& pc, gb_u32 hi_mask, gb_u32 prefix, gb_u32 shift,
                                                gb_u32* s_cnt) {
    const gb_u32 trip = GB_CAT_GROUPS * 4u * blockDim.x;
    const gb_u64 zeros[4] = {0ull, 0ull, 0ull, 0ull};
    for (gb_u32 base = 0u; base < vocab; base += trip) {
        float x[GB_CAT_GROUPS][4];
        gb_u32 n[GB_CAT_GROUPS];
        gb_cat_load_trip<KIND>(row, base, vocab, vec, pc, x, n);
#pragma unroll
        for (int i = 0; i < GB_CAT_GROUPS; ++i) {
            gb_u32 bins[4];
            bool ok[4];
#pragma unroll
            for (gb_u32 j = 0; j < 4u; ++j) {
                const gb_u32 k = gb_orderkey(x[i][j]);
                ok[j] = j < n[i] && (k & hi_mask) == prefix;
                bins[j] = (k >> shift) & 0xFFu;
            }
            gb_hist_add(s_cnt, (gb_u64*)0, bins, zeros, ok);
        }
    }
}

// gb_cat_compact writes every element of the row whose processed key is at least low and
// whose scaled difference d = fl(fl(x' - m) * invT) is not below dmin to the list (s_idx,
// s_key, s_w: index, order key, weight w) in index order and returns their number; only the
// first GB_CAT_CAP are written, and a larger count means the list is unusable. Each trip is one ordered
// block compaction: the four groups' counts of a thread travel packed in 16-bit fields of
// one 64-bit word (a block holds at most 4096 elements of a group, so no field carries
// into the next), one warp scan gives every thread its place within its warp for all four
// groups at once, and the warps' totals meet in shared memory behind a single barrier
// (double-buffered, so the next trip's writes cannot overtake this trip's reads). Only the
// listed elements pay for an exponential.
template <int KIND>
__device__ __forceinline__ gb_u32 gb_cat_compact(const typename gb_io<KIND>::elem* row, gb_u32 vocab, bool vec,
                                                 const gb_processor& pc, gb_u32 low, float dmin, float m, float invT,
                                                 float cutoff, gb_u32* s_idx, gb_u32* s_key, float* s_w, gb_u64* s_wc) {
    const gb_u32 chunk = 4u * blockDim.x;
    const gb_u32 trip = GB_CAT_GROUPS * chunk;
    const gb_u32 lane = gb_lane();
    const gb_u32 warp = gb_warp();
    const gb_u32 nw = gb_num_warps();
    gb_u32 running = 0u; // elements listed by the trips before this one
    gb_u32 buf = 0u;
    for (gb_u32 base = 0u; base < vocab; base += trip) {
        float x[GB_CAT_GROUPS][4];
        gb_u32 n[GB_CAT_GROUPS];
        gb_cat_load_trip<KIND>(row, base, vocab, vec, pc, x, n);
        gb_u32 keep[GB_CAT_GROUPS]; // bit j: element j of group i is listed
        gb_u64 packed = 0ull;
#pragma unroll
        for (int i = 0; i < GB_CAT_GROUPS; ++i) {
            keep[i] = 0u;
            gb_u32 c = 0u;
#pragma unroll
            for (gb_u32 j = 0; j < 4u; ++j) {
                if (j < n[i] && gb_orderkey(x[i][j]) >= low &&
                    !(__fmul_rn(__fadd_rn(x[i][j], -m), invT) < dmin)) {
                    keep[i] |= 1u << j;
                    ++c;
                }
            }
            packed |= (gb_u64)c << (16 * i);
        }
        gb_u64 incl = packed;
        for (int d = 1; d < GB_WARP_SIZE; d <<= 1) {
            const gb_u64 t = gb_shfl_up_u64(incl, (gb_u32)d);
            if (lane >= (gb_u32)d) {
                incl += t;
            }
        }
        gb_u64* wc = s_wc + buf * GB_MAX_WARPS;
        if (lane == (gb_u32)GB_WARP_SIZE - 1u) {
            wc[warp] = incl;
        }
        __syncthreads();
        gb_u64 before = 0ull, total = 0ull; // packed: the warps before this one, all warps
        for (gb_u32 w = 0u; w < nw; ++w) {
            const gb_u64 v = wc[w];
            total += v;
            before += w < warp ? v : 0ull;
        }
        const gb_u64 place = before + incl - packed;
        gb_u32 group_base = running;
#pragma unroll
        for (int i = 0; i < GB_CAT_GROUPS; ++i) {
            gb_u32 pos = group_base + (gb_u32)((place >> (16 * i)) & 0xFFFFull);
            const gb_u32 g = base + (gb_u32)i * chunk + 4u * threadIdx.x;
#pragma unroll
            for (gb_u32 j = 0; j < 4u; ++j) {
                if ((keep[i] >> j) & 1u) {
                    if (pos < GB_CAT_CAP) {
                        s_idx[pos] = g + j;
                        s_key[pos] = gb_orderkey(x[i][j]);
                        s_w[pos] = gb_weight(x[i][j], m, invT, cutoff);
                    }
                    ++pos;
                }
            }
            group_base += (gb_u32)((total >> (16 * i)) & 0xFFFFull);
        }
        running = group_base;
        buf ^= 1u;
    }
    __syncthreads();
    return running;
}

// gb_cat_select_level ends one level of top-k's radix select over the counts in s_cnt: it
// picks the bin holding the rem-th largest key of the current prefix, narrows rem and
// prefix, and returns the bin's count.
__device__ __forceinline__ gb_u32 gb_cat_select_level(const gb_u32* s_cnt, gb_u32 shift, gb_u64& rem,
                                                      gb_u32& prefix, gb_u64* s_bcast) {
    __syncthreads();
    gb_u64 above = 0ull;
    const gb_u32 b = gb_select_bin(s_cnt, (const gb_u64*)0, rem, above, s_bcast);
    const gb_u32 in_bin = s_cnt[b];
    __syncthreads(); // every thread has read s_cnt before the next level clears it
    rem -= above;
    prefix |= b << shift;
    return in_bin;
}

// gb_list_q is the fixed-point weight of list entry e if it is kept, else 0.
__device__ __forceinline__ gb_u64 gb_list_q(const gb_u32* s_key, const float* s_w, gb_u32 e,
                                            const gb_row_state& st) {
    return gb_kept_entry(s_key[e], s_w[e], st) ? gb_fixed(s_w[e], st.two_pow_f) : 0ull;
}

// gb_cat_shared is the categorical block's shared memory, one object that every phase
// reaches through gb_cat_smem, so that the compiler knows each access is to shared memory.
struct gb_cat_shared {
    gb_u32 cnt[GB_BINS];          // a radix level's counts
    gb_u64 mass[GB_BINS];         // a radix level's masses
    gb_u64 red[GB_MAX_WARPS];     // the block reductions' per-warp words
    gb_u64 bcast[2];              // the block reductions' results
    union {
        gb_u64 tile[GB_MAX_TILES]; // the inverse CDF: the kept mass of each tile of the row
        gb_exact win[GB_MAX_WARPS]; // the Gumbel draw's exact redraw: each warp's winner
    };
    gb_u64 pair[2 * GB_MAX_WARPS]; // gb_block_lse's per-warp pairs
    gb_u64 wc[2 * GB_MAX_WARPS];  // gb_cat_compact's per-warp counts
    gb_i32 token;                 // the drawn token
    gb_u32 n_list;                // filtered: the candidates listed so far
    gb_u32 word;                  // filtered: a word every thread reads (arrival, seen)
    // With LOGPROBS, the raw and (greedy rows) processed log-sum-exp sets, as (reference,
    // sum) pairs, so that records are taken from the reference (gb_lse_logprob) and do not
    // cancel when the logits are huge.
    float lse[4];
    // The candidate list: element index, order key of x' and weight w(x').
    gb_u32 idx[GB_CAT_CAP];
    gb_u32 key[GB_CAT_CAP];
    float w[GB_CAT_CAP];
};

__device__ __forceinline__ gb_cat_shared& gb_cat_smem() {
    __shared__ gb_cat_shared s;
    return s;
}

// gb_cat_row is what the categorical kernel's phases know of their launch row.
template <int KIND>
struct gb_cat_row {
    const typename gb_io<KIND>::elem* row;
    gb_u32 vocab;
    bool vec; // the row takes vector loads
    gb_processor pc;
    gb_row_params* params;
    gb_row_params p;
    gb_u32 y;  // the launch row
    gb_u64 o;  // this draw's output slot
    bool lp;   // LOGPROBS
    gb_i32* tokens;
    gb_i32* status;
    float* logprobs;
    gb_u32* counters;
    gb_u32* counts;
};

// gb_cat_row_bind fills r for draw blockIdx.z of its launch row (r.y and r.p set) and
// returns true; a row with bad parameters gets status 3 and a NaN record from thread 0 of
// block 0 instead, and false.
template <int KIND>
__device__ __forceinline__ bool gb_cat_row_bind(gb_cat_row<KIND>& r, const typename gb_io<KIND>::elem* logits,
                                                gb_row_params* params, gb_i32* tokens, gb_i32* status,
                                                gb_u32* counters, gb_u64 row_stride, gb_u32 vocab, float* logprobs,
                                                const float* bias, gb_u32* counts, const gb_u32* mask, const gb_u32* bitmask) {
    r.o = (gb_u64)r.p.row * gridDim.z + blockIdx.z;
    r.lp = (r.p.flags & GB_FLAG_LOGPROBS) != 0u;
    if (gb_bad_flags(r.p.flags) || gb_bad_row(r.p.temperature, vocab)) {
        if (blockIdx.x == 0u && threadIdx.x == 0u) {
            tokens[r.o] = -1;
            status[r.o] = GB_STATUS_BAD_PARAMS;
            if (r.lp) {
                gb_write_record(logprobs, r.o, false, 0.0f, 0.0f, 0.0f, 0.0f);
            }
        }
        return false;
    }
    r.row = logits + (gb_u64)r.p.row * row_stride;
    r.vocab = vocab;
    r.vec = gb_io<KIND>::vec_ok(r.row);
    r.pc = gb_processor_of(r.p, bias, counts, mask, bitmask, vocab);
    r.params = params;
    r.tokens = tokens;
    r.status = status;
    r.logprobs = logprobs;
    r.counters = counters;
    r.counts = counts;
    return true;
}

// gb_cat_first_pass is the first pass over the row: the largest processed key (mkey), the
// observations, with top-k the histogram of the top key digit, and with LOGPROBS the raw
// log-sum-exp over the logits and, for greedy rows, the one over x' (their record's
// temperature-1 distribution), kept in sh.lse.
template <int KIND>
__device__ __forceinline__ void gb_cat_first_pass(const gb_cat_row<KIND>& r, bool topk_on, bool greedy,
                                                  gb_cat_shared& sh, gb_u32& mkey, gb_u32& seen) {
    const gb_u32 chunk = 4u * blockDim.x;
    if (topk_on) {
        for (gb_u32 b = threadIdx.x; b < GB_BINS; b += blockDim.x) {
            sh.cnt[b] = 0u;
        }
        __syncthreads();
    }
    gb_lse raw, proc;
    gb_lse_init(raw);
    gb_lse_init(proc);
    for (gb_u32 base = 0u; base < r.vocab; base += GB_CAT_GROUPS * chunk) {
        float xs[GB_CAT_GROUPS][4];
        gb_u32 ns[GB_CAT_GROUPS], mw[GB_CAT_GROUPS];
        // The mask words load with the logits (see gb_cat_load_trip); all ones without masks.
        gb_load_groups<KIND, GB_CAT_GROUPS>(r.row, base + 4u * threadIdx.x, chunk, r.vocab, r.vec, xs, ns);
        gb_load_mask_bits<GB_CAT_GROUPS>(r.pc, base + 4u * threadIdx.x, chunk, r.vocab, mw);
#pragma unroll
        for (int i = 0; i < GB_CAT_GROUPS; ++i) {
            float* x = xs[i];
            const gb_u32 n = ns[i];
            const gb_u32 g = base + (gb_u32)i * chunk + 4u * threadIdx.x;
            if (r.lp) {
                gb_lse_add4(raw, x, gb_max4(x));
            }
            if (r.pc.flags != 0u) {
                seen |= gb_process_group_w(r.pc, mw[i], g, n, x, x);
            }
            if (r.lp && greedy) {
                gb_lse_add4(proc, x, gb_max4(x));
            }
            gb_u32 bins[4];
            bool ok[4];
            const gb_u64 zeros[4] = {0ull, 0ull, 0ull, 0ull};
#pragma unroll
            for (gb_u32 j = 0; j < 4u; ++j) {
                ok[j] = j < n;
                gb_u32 k = gb_orderkey(x[j]);
                bins[j] = k >> 24;
                if (ok[j]) {
                    if (r.pc.flags == 0u) {
                        seen |= gb_seen(x[j]);
                    }
                    mkey = gb_max_u32(mkey, k);
                }
            }
            if (topk_on) {
                gb_hist_add(sh.cnt, (gb_u64*)0, bins, zeros, ok);
            }
        }
    }
    gb_block_max_or(mkey, seen, sh.red, sh.bcast);
    if (r.lp) {
        gb_block_lse(raw, proc, greedy, sh.pair);
        if (threadIdx.x == 0u) {
            // Kept in shared memory, not in registers across the passes that follow.
            sh.lse[0] = raw.m;
            sh.lse[1] = raw.s;
            sh.lse[2] = proc.m;
            sh.lse[3] = proc.s;
        }
    }
}

// gb_cat_greedy draws a greedy row: the first index whose processed logit equals m.
template <int KIND>
__device__ __forceinline__ void gb_cat_greedy(const gb_cat_row<KIND>& r, float m, gb_cat_shared& sh) {
    gb_u32 first = 0u; // 0xFFFFFFFF - index, largest first
    const gb_u32 stride = 4u * blockDim.x;
    for (gb_u32 g = 4u * threadIdx.x; g < r.vocab; g += stride) {
        float x[4];
        gb_u32 n = gb_load_processed<KIND>(r.row, g, r.vocab, r.vec, r.pc, x);
#pragma unroll
        for (gb_u32 j = 0; j < 4u; ++j) {
            if (j < n && x[j] == m) {
                first = gb_max_u32(first, 0xFFFFFFFFu - (g + j));
            }
        }
    }
    gb_u32 none = 0u;
    gb_block_max_or(first, none, sh.red, sh.bcast);
    if (threadIdx.x == 0u) {
        const gb_u32 tok = 0xFFFFFFFFu - first;
        r.tokens[r.o] = (gb_i32)tok;
        r.status[r.o] = GB_STATUS_OK;
        if (r.lp) {
            const float x = gb_io<KIND>::load1(r.row + tok);
            float* rec = r.logprobs + 4u * r.o;
            rec[0] = gb_lse_logprob(x, sh.lse[0], sh.lse[1], rec[2]);
            rec[1] = gb_lse_logprob(gb_processed(r.pc, x, tok), sh.lse[2], sh.lse[3], rec[3]);
        }
        gb_row_done(r.params, r.p, r.y, r.counters, r.tokens, r.status, r.counts, r.vocab);
    }
}

// gb_topk_threshold_row runs the levels of top-k's radix select over the row, the first
// from the histogram gb_cat_first_pass left, until the keys at or above the chosen bin's
// range fit in the candidate list: after each level their number is known exactly (the
// top_k - rem keys above the bin and the bin's own). It returns whether they fit (then
// prefix and level say where the select stands); else it has run all four levels and
// prefix is Kk.
template <int KIND>
__device__ __forceinline__ bool gb_topk_threshold_row(const gb_cat_row<KIND>& r, gb_cat_shared& sh,
                                                      gb_u64& rem, gb_u32& prefix, int& level) {
    while (level < 4) {
        const gb_u32 shift = 24u - 8u * (gb_u32)level;
        if (level > 0) {
            gb_clear_bins(sh.cnt);
            gb_cat_hist_row<KIND>(r.row, r.vocab, r.vec, r.pc, 0xFFFFFFFFu << (shift + 8u), prefix, shift, sh.cnt);
        }
        const gb_u32 in_bin = gb_cat_select_level(sh.cnt, shift, rem, prefix, sh.bcast);
        ++level;
        // Keys >= prefix (its lower digits are 0). Block-uniform, like every branch here.
        if ((gb_u64)r.p.top_k - rem + in_bin <= (gb_u64)GB_CAT_CAP) {
            return true;
        }
    }
    return false;
}

// gb_topk_threshold_list runs the levels of top-k's radix select left after listing (none
// when the row was never listed) over the n_list candidates, and returns Kk.
__device__ __forceinline__ gb_u32 gb_topk_threshold_list(gb_cat_shared& sh, gb_u32 n_list, gb_u64 rem,
                                                         gb_u32 prefix, int level) {
    for (; level < 4; ++level) {
        const gb_u32 shift = 24u - 8u * (gb_u32)level;
        const gb_u32 hi_mask = level == 0 ? 0u : 0xFFFFFFFFu << (shift + 8u);
        gb_clear_bins(sh.cnt);
        for (gb_u32 e = threadIdx.x; e < n_list; e += blockDim.x) {
            const gb_u32 k = sh.key[e];
            if ((k & hi_mask) == prefix) {
                atomicAdd(&sh.cnt[(k >> shift) & 0xFFu], 1u);
            }
        }
        gb_cat_select_level(sh.cnt, shift, rem, prefix, sh.bcast);
    }
    return prefix;
}

// gb_topp_threshold returns Kp: the largest kept key t whose kept mass over keys >= t
// reaches target = (Z * P) >> 32, by radix select on mass over the candidate list
// (LISTED) or the row. Z, the mass of every key >= Kk, is z_row when it is not 0 (the
// filtered kernel's list holds only the top of the row), else the sum of the first
// level's bins. reached says whether the list's mass reaches the target (always so when
// Z is its own); Kp is only meaningful then. Only bins with mass count: the answer always
// has mass.
template <int KIND, bool LISTED>
__device__ __forceinline__ gb_u32 gb_topp_threshold(const gb_cat_row<KIND>& r, const gb_row_state& st, gb_u32 kk,
                                                    gb_u32 n_list, gb_u64 z_row, bool& reached,
                                                    gb_cat_shared& sh) {
    gb_u64 rem = 0ull;
    gb_u32 prefix = 0u;
    for (int level = 0; level < 4; ++level) {
        const gb_u32 shift = 24u - 8u * (gb_u32)level;
        const gb_u32 hi_mask = level == 0 ? 0u : 0xFFFFFFFFu << (shift + 8u);
        for (gb_u32 i = threadIdx.x; i < GB_BINS; i += blockDim.x) {
            sh.mass[i] = 0ull;
        }
        __syncthreads();
        if (LISTED) {
            for (gb_u32 e = threadIdx.x; e < n_list; e += blockDim.x) {
                const gb_u32 k = sh.key[e];
                if (k >= kk && (k & hi_mask) == prefix) {
                    const gb_u64 q = gb_fixed(sh.w[e], st.two_pow_f);
                    if (q != 0ull) {
                        atomicAdd(&sh.mass[(k >> shift) & 0xFFu], q);
                    }
                }
            }
        } else {
            for (gb_u32 g = 4u * threadIdx.x; g < r.vocab; g += 4u * blockDim.x) {
                float x[4];
                const gb_u32 n = gb_load_processed<KIND>(r.row, g, r.vocab, r.vec, r.pc, x);
                gb_u32 bins[4];
                gb_u64 q[4];
                bool ok[4];
#pragma unroll
                for (gb_u32 j = 0; j < 4u; ++j) {
                    gb_u32 k = gb_orderkey(x[j]);
                    ok[j] = j < n && k >= kk && (k & hi_mask) == prefix;
                    bins[j] = (k >> shift) & 0xFFu;
                    q[j] = ok[j] ? gb_fixed(gb_weight(x[j], st.m, st.invT, st.cutoff), st.two_pow_f) : 0ull;
                    ok[j] = ok[j] && q[j] != 0ull;
                }
                gb_hist_add((gb_u32*)0, sh.mass, bins, q, ok);
            }
        }
        __syncthreads();
        if (level == 0) {
            gb_u64 part = 0ull;
            for (gb_u32 i = threadIdx.x; i < GB_BINS; i += blockDim.x) {
                part += sh.mass[i];
            }
            const gb_u64 listed = gb_block_sum_u64(part, sh.red, sh.bcast);
            const gb_u64 zsum = z_row != 0ull ? z_row : listed;
            const gb_u64 pp = __float2ull_rz(__fmul_rn(r.p.top_p, GB_TWO_POW_32));
            rem = (__umul64hi(zsum, pp) << 32) | ((zsum * pp) >> 32); // (Z * P) >> 32
            reached = listed >= rem && listed != 0ull;
            if (!reached) {
                return 0u; // uniform for the block
            }
        }
        gb_u64 above = 0ull;
        const gb_u32 b = gb_select_bin((const gb_u32*)0, sh.mass, rem, above, sh.bcast);
        rem -= above;
        prefix |= b << shift;
    }
    return prefix;
}

// gb_cat_draw_listed computes S and draws from the candidate list in one block scan: each
// thread owns a run of consecutive entries (index order), so the exclusive scan of the
// runs' kept masses is the prefix sum the inverse CDF needs, and the one thread whose run
// crosses target = (u * S) >> 64 finds the token. It returns S.
__device__ __forceinline__ gb_u64 gb_cat_draw_listed(const gb_row_state& st, gb_u32 n_list, gb_u64 u,
                                                     gb_cat_shared& sh) {
    if (threadIdx.x == 0u) {
        sh.token = -1;
    }
    const gb_u32 per = n_list / blockDim.x + (n_list % blockDim.x != 0u ? 1u : 0u);
    const gb_u32 e0 = gb_min_u32(threadIdx.x * per, n_list);
    const gb_u32 e1 = gb_min_u32(e0 + per, n_list);
    gb_u64 local = 0ull;
    for (gb_u32 e = e0; e < e1; ++e) {
        local += gb_list_q(sh.key, sh.w, e, st);
    }
    gb_u64 s_kept = 0ull;
    const gb_u64 excl = gb_block_exclusive_scan_u64(local, s_kept, sh.red, sh.bcast);
    const gb_u64 target = __umul64hi(u, s_kept);
    if (local != 0ull && excl <= target && target < excl + local) {
        gb_u64 acc = excl;
        for (gb_u32 e = e0; e < e1; ++e) {
            const gb_u64 q = gb_list_q(sh.key, sh.w, e, st);
            if (acc <= target && target < acc + q) {
                sh.token = (gb_i32)sh.idx[e];
            }
            acc += q;
        }
    }
    __syncthreads();
    return s_kept;
}

// gb_cat_tiles sums the kept mass of each tile of the row into sh.tile: tiles are runs of
// whole chunks (4 * blockDim.x elements), at most GB_MAX_TILES of them, so that the draw
// scans one tile instead of the row.
template <int KIND>
__device__ __forceinline__ void gb_cat_tiles(const gb_cat_row<KIND>& r, const gb_row_state& st, gb_u32 nchunks,
                                             gb_u32 tile_chunks, gb_cat_shared& sh) {
    const gb_u32 chunk = 4u * blockDim.x;
    for (gb_u32 i = threadIdx.x; i < GB_MAX_TILES; i += blockDim.x) {
        sh.tile[i] = 0ull;
    }
    __syncthreads();
    gb_u64 tile_part = 0ull;
    // A trip is GB_CAT_GROUPS chunks, one group of each per thread (gb_cat_load_trip): the
    // pass reads the whole row, and with one group in flight per thread it would wait on
    // every load.
    for (gb_u32 c0 = 0u; c0 < nchunks; c0 += GB_CAT_GROUPS) {
        float x[GB_CAT_GROUPS][4];
        gb_u32 n[GB_CAT_GROUPS];
        gb_cat_load_trip<KIND>(r.row, c0 * chunk, r.vocab, r.vec, r.pc, x, n);
#pragma unroll
        for (int i = 0; i < GB_CAT_GROUPS; ++i) {
            const gb_u32 c = c0 + (gb_u32)i;
            if (c >= nchunks) {
                break; // uniform for the block
            }
#pragma unroll
            for (gb_u32 j = 0; j < 4u; ++j) {
                if (j < n[i]) {
                    tile_part += gb_kept_q(x[i][j], st);
                }
            }
            if ((c + 1u) % tile_chunks == 0u || c + 1u == nchunks) {
                for (int d = GB_WARP_SIZE / 2; d > 0; d >>= 1) {
                    tile_part += gb_shfl_down_u64(tile_part, d);
                }
                if (gb_lane() == 0u && tile_part != 0ull) {
                    atomicAdd(&sh.tile[c / tile_chunks], tile_part);
                }
                tile_part = 0ull;
            }
        }
    }
    __syncthreads();
}

// gb_cat_find_tile returns S and, in tile and running, the tile where the prefix sum of
// the kept mass crosses target = (u * S) >> 64 and the mass of the tiles before it. Warp
// 0 does the walk: each lane owns GB_MAX_TILES / warpSize consecutive tiles.
__device__ __forceinline__ gb_u64 gb_cat_find_tile(gb_u64 u, gb_cat_shared& sh, gb_u64& target,
                                                   gb_u32& tile, gb_u64& running) {
    gb_u64 lane_sum = 0ull;  // the mass of this lane's tiles (warp 0)
    gb_u64 lane_excl = 0ull; // the mass of the tiles before them
    if (gb_warp() == 0u) {
        const gb_u32 per = GB_MAX_TILES / GB_WARP_SIZE;
        for (gb_u32 i = 0; i < per; ++i) {
            lane_sum += sh.tile[gb_lane() * per + i];
        }
        gb_u64 incl = lane_sum;
        for (int d = 1; d < GB_WARP_SIZE; d <<= 1) {
            gb_u64 t = gb_shfl_up_u64(incl, d);
            if (gb_lane() >= (gb_u32)d) {
                incl += t;
            }
        }
        lane_excl = incl - lane_sum;
        if (gb_lane() == (gb_u32)GB_WARP_SIZE - 1u) {
            sh.bcast[0] = incl; // S
        }
    }
    __syncthreads();
    const gb_u64 s_kept = sh.bcast[0];
    target = __umul64hi(u, s_kept);
    __syncthreads();
    if (gb_warp() == 0u) {
        const gb_u32 per = GB_MAX_TILES / GB_WARP_SIZE;
        gb_u32 found = 0xFFFFFFFFu;
        gb_u64 before = 0ull;
        gb_u64 acc = lane_excl;
        for (gb_u32 i = 0; i < per; ++i) {
            const gb_u32 t = gb_lane() * per + i;
            if (found == 0xFFFFFFFFu && acc + sh.tile[t] > target) {
                found = t;
                before = acc;
            }
            acc += sh.tile[t];
        }
        // Every lane from the crossing on finds a tile; the first one is the answer.
        gb_u32 first = found;
        for (int m = GB_WARP_SIZE / 2; m > 0; m >>= 1) {
            gb_u32 o = __shfl_xor_sync(0xFFFFFFFFu, first, m);
            first = o < first ? o : first;
        }
        if (found != 0xFFFFFFFFu && found == first) {
            sh.bcast[0] = found;
            sh.bcast[1] = before;
        }
        if (first == 0xFFFFFFFFu && gb_lane() == 0u) {
            // Unreachable: S > 0 (the row's largest element has w = 1 and is kept by
            // every filter), so target < S and some tile crosses it.
            sh.bcast[0] = 0ull;
            sh.bcast[1] = 0ull;
        }
    }
    if (threadIdx.x == 0u) {
        sh.token = -1;
    }
    __syncthreads();
    tile = (gb_u32)sh.bcast[0];
    running = sh.bcast[1];
    __syncthreads();
    return s_kept;
}

// gb_cat_draw_row computes S by tiles and draws over the row: the token is the smallest
// index whose inclusive prefix sum of kept q exceeds target = (u * S) >> 64, found by a
// block scan of the crossing tile's chunks in index order. It returns S.
template <int KIND>
__device__ __forceinline__ gb_u64 gb_cat_draw_row(const gb_cat_row<KIND>& r, const gb_row_state& st, gb_u64 u,
                                                  gb_cat_shared& sh) {
    const gb_u32 chunk = 4u * blockDim.x;
    const gb_u32 nchunks = r.vocab / chunk + (r.vocab % chunk != 0u ? 1u : 0u);
    const gb_u32 tile_chunks = nchunks / GB_MAX_TILES + (nchunks % GB_MAX_TILES != 0u ? 1u : 0u);
    gb_cat_tiles<KIND>(r, st, nchunks, tile_chunks, sh);
    gb_u64 target = 0ull, running = 0ull;
    gb_u32 tile = 0u;
    const gb_u64 s_kept = gb_cat_find_tile(u, sh, target, tile, running);
    const gb_u32 c_end = gb_min_u32((tile + 1u) * tile_chunks, nchunks);
    for (gb_u32 c = tile * tile_chunks; c < c_end; ++c) {
        const gb_u32 g = c * chunk + 4u * threadIdx.x;
        float x[4];
        const gb_u32 n = gb_load_processed<KIND>(r.row, g, r.vocab, r.vec, r.pc, x);
        gb_u64 q[4];
        gb_u64 local = 0ull;
#pragma unroll
        for (gb_u32 j = 0; j < 4u; ++j) {
            q[j] = j < n ? gb_kept_q(x[j], st) : 0ull;
            local += q[j];
        }
        gb_u64 total = 0ull;
        gb_u64 excl = gb_block_exclusive_scan_u64(local, total, sh.red, sh.bcast);
        if (running + total > target) {
            gb_u64 acc = running + excl;
            if (local != 0ull && acc <= target && target < acc + local) {
#pragma unroll
                for (gb_u32 j = 0; j < 4u; ++j) {
                    if (acc <= target && target < acc + q[j]) {
                        sh.token = (gb_i32)(g + j);
                    }
                    acc += q[j];
                }
            }
            break;
        }
        running += total;
    }
    __syncthreads();
    return s_kept;
}

// gb_noisy_key is the packed Gumbel score of element i with processed logit x at step
// (lo, hi): fl(fl(x * invT) + g) with gumbel_argmax's noise.
__device__ __forceinline__ gb_u64 gb_noisy_key(float x, gb_u32 i, float invT, gb_u32 lo, gb_u32 hi,
                                               const gb_row_params& p) {
    gb_u32 w[4];
    gb_philox(i >> 2, lo, hi, GB_PURPOSE_GUMBEL, p.seed_lo, p.seed_hi, w);
    const gb_u32 wi = w[i & 3u];
    gb_u32 tail = 0u;
    if (wi < GB_TAIL_THRESHOLD) {
        gb_u32 t[4];
        gb_philox(i >> 2, lo, hi, GB_PURPOSE_GUMBEL_TAIL, p.seed_lo, p.seed_hi, t);
        tail = t[i & 3u];
    }
    return gb_pack(__fadd_rn(__fmul_rn(x, invT), gb_gumbel(wi, tail)), i);
}

// gb_gumbel_kept ends a Gumbel-max draw over the kept set in one round of shared memory:
// every thread gets the block's best key (returned), so that the exact redraw's decision
// is the block's; thread 0 also sums the kept mass S into mass (which only
// gb_cat_finish's thread 0 reads) and puts the token in sh.token.
__device__ __forceinline__ gb_u64 gb_gumbel_kept(gb_u64 best, gb_u64& mass, gb_cat_shared& sh) {
    best = gb_warp_max_u64_all(best);
    for (int d = GB_WARP_SIZE / 2; d > 0; d >>= 1) {
        mass += gb_shfl_down_u64(mass, d); // lane 0's sum is exact
    }
    if (gb_lane() == 0u) {
        sh.wc[gb_warp()] = best;
        sh.wc[GB_MAX_WARPS + gb_warp()] = mass;
    }
    __syncthreads();
    best = gb_warp_max_u64_all(gb_lane() < gb_num_warps() ? sh.wc[gb_lane()] : 0ull);
    if (threadIdx.x == 0u) {
        for (gb_u32 i = 1u; i < gb_num_warps(); ++i) {
            mass += sh.wc[GB_MAX_WARPS + i];
        }
        sh.token = best != 0ull ? (gb_i32)(0xFFFFFFFFu - (gb_u32)best) : -1;
    }
    return best;
}

// gb_exact_kept redraws a Gumbel-max draw over the kept set whose float32 winner reached
// GB_EXACT_LIMIT, by the exact comparison (ABI.md, "filtered"): over the kept entries of
// the candidate list (listed: n_list entries in sh) or else the kept elements of the row,
// which the categorical one-block path and a min-p row whose blocks drew for themselves
// read again. Thread 0 puts the token in sh.token. Only the finishing block of such a
// draw runs it. Inlined: as a call (__noinline__), the call's ABI raised the kernel's
// stack and spills and slowed every filtered step on the H200.
template <int KIND>
__device__ __forceinline__ void gb_exact_kept(const gb_cat_row<KIND>& r, const gb_row_state& st, bool listed,
                                              gb_u32 n_list, gb_u32 lo, gb_u32 hi, gb_cat_shared& sh) {
    gb_exact best = gb_exact_none();
    const gb_u32 n = listed ? n_list : r.vocab;
    for (gb_u32 e = threadIdx.x; e < n; e += blockDim.x) {
        gb_u32 i = e;
        float x, w;
        bool kept;
        if (listed) {
            i = sh.idx[e];
            x = gb_orderkey_inverse(sh.key[e]);
            kept = gb_kept_entry(sh.key[e], sh.w[e], st);
        } else {
            x = gb_processed(r.pc, gb_io<KIND>::load1(r.row + e), e);
            kept = gb_row_kept(x, st, w);
        }
        if (kept) {
            const gb_exact v = gb_exact_of(x, st.invT, gb_element_gumbel(r.p, lo, hi, i), i);
            if (gb_exact_above(v, best, st.invT)) {
                best = v;
            }
        }
    }
    best = gb_exact_block(best, st.invT, sh.win);
    if (threadIdx.x == 0u) {
        sh.token = (gb_i32)best.idx;
    }
}

// gb_gumbel_listed draws by Gumbel-max over the kept entries of the candidate list
// (index, key and weight in sh) and returns S, their fixed-point mass. A float32 winner
// whose score reaches GB_EXACT_LIMIT is redrawn by the exact comparison: below it, no
// element valued exactly can win or be misordered (ABI.md, "Exact scores").
template <int KIND>
__device__ __forceinline__ gb_u64 gb_gumbel_listed(const gb_cat_row<KIND>& r, const gb_row_state& st, gb_u32 n_list,
                                                   gb_u32 lo, gb_u32 hi, gb_cat_shared& sh) {
    gb_u64 best = 0ull, mass = 0ull;
    for (gb_u32 e = threadIdx.x; e < n_list; e += blockDim.x) {
        if (gb_kept_entry(sh.key[e], sh.w[e], st)) {
            mass += gb_fixed(sh.w[e], st.two_pow_f);
            best = gb_max_u64(best, gb_noisy_key(gb_orderkey_inverse(sh.key[e]), sh.idx[e], st.invT, lo, hi, r.p));
        }
    }
    if (gb_exact_needed(GB_STATUS_OK, gb_gumbel_kept(best, mass, sh))) {
        gb_exact_kept<KIND>(r, st, true, n_list, lo, hi, sh);
    }
    return mass;
}

// gb_gumbel_row is gb_gumbel_listed over the kept elements of the whole row.
template <int KIND>
__device__ __forceinline__ gb_u64 gb_gumbel_row(const gb_cat_row<KIND>& r, const gb_row_state& st, gb_u32 lo,
                                                gb_u32 hi, gb_cat_shared& sh) {
    gb_u64 best = 0ull, mass = 0ull;
    for (gb_u32 g = 4u * threadIdx.x; g < r.vocab; g += 4u * blockDim.x) {
        float x[4];
        const gb_u32 n = gb_load_processed<KIND>(r.row, g, r.vocab, r.vec, r.pc, x);
        for (gb_u32 j = 0; j < n; ++j) {
            float w;
            if (gb_row_kept(x[j], st, w)) {
                mass += gb_fixed(w, st.two_pow_f);
                best = gb_max_u64(best, gb_noisy_key(x[j], g + j, st.invT, lo, hi, r.p));
            }
        }
    }
    if (gb_exact_needed(GB_STATUS_OK, gb_gumbel_kept(best, mass, sh))) {
        gb_exact_kept<KIND>(r, st, false, 0u, lo, hi, sh);
    }
    return mass;
}

// gb_ln_kept is ln(S_kept · 2^-F), the kept set's log-normaliser relative to
// exp(fl((x' - m) · invT)).
__device__ __forceinline__ float gb_ln_kept(gb_u64 s_kept, const gb_row_state& st) {
    return logf(__fmul_rn((float)s_kept, __uint_as_float((127u - (63u - st.bitlen)) << 23)));
}

// gb_write_kept_set writes, in place of the record, the kept set's descriptor (ABI.md,
// "The kept-set descriptor"): the key threshold, the processed log-probability of the
// row's token under the kept law (-Inf when it is not kept, NaN when it is no token), m
// and ln(S_kept · 2^-F). Inlined, in a branch only FlagKeptSet rows take: as a call, the
// call's ABI raises the filtered kernel's stack and spills on every row (gb_exact_kept).
template <int KIND>
__device__ __forceinline__ void gb_write_kept_set(const gb_cat_row<KIND>& r, const gb_row_state& st, gb_u64 s_kept) {
    const float ln_s = gb_ln_kept(s_kept, st);
    float lp = __uint_as_float(0x7FC00000u);
    const gb_u32 t = r.p.token;
    if (t < r.vocab) {
        const float x = gb_processed(r.pc, gb_io<KIND>::load1(r.row + t), t);
        float w;
        lp = gb_row_kept(x, st, w) ? __fadd_rn(__fmul_rn(__fadd_rn(x, -st.m), st.invT), -ln_s) : -gb_inf();
    }
    float* rec = r.logprobs + 4u * r.o;
    rec[0] = __uint_as_float(st.threshold);
    rec[1] = lp;
    rec[2] = st.m;
    rec[3] = ln_s;
}

// gb_cat_finish writes the draw's token, status and record (thread 0) and does the row's
// end-of-draws work. The record's processed distribution is the kept set renormalised:
// ln(S_kept · 2^-F) is its log-normaliser relative to exp(fl((x' - m) · invT)). With
// FlagKeptSet the slot gets the kept set's descriptor instead.
template <int KIND>
__device__ __forceinline__ void gb_cat_finish(const gb_cat_row<KIND>& r, const gb_row_state& st, gb_u64 s_kept,
                                              gb_cat_shared& sh) {
    if (threadIdx.x != 0u) {
        return;
    }
    // The token stays -1 only if S were 0, which cannot happen (see gb_cat_find_tile).
    const gb_i32 tok = sh.token;
    r.tokens[r.o] = tok;
    r.status[r.o] = tok >= 0 ? GB_STATUS_OK : GB_STATUS_NO_FINITE;
    if (r.lp && tok >= 0 && (r.p.flags & GB_FLAG_KEPT_SET) != 0u) {
        gb_write_kept_set<KIND>(r, st, s_kept);
    } else if (r.lp) {
        float x = 0.0f, d = 0.0f, ln_s = 0.0f;
        if (tok >= 0) {
            x = gb_io<KIND>::load1(r.row + tok);
            d = __fmul_rn(__fadd_rn(gb_processed(r.pc, x, (gb_u32)tok), -st.m), st.invT);
            ln_s = gb_ln_kept(s_kept, st);
        }
        const float lse_proc = __fadd_rn(__fmul_rn(st.m, st.invT), ln_s);
        float* rec = r.logprobs + 4u * r.o;
        gb_write_record(r.logprobs, r.o, tok >= 0, 0.0f, 0.0f, 0.0f, 0.0f);
        if (tok >= 0) {
            rec[0] = gb_lse_logprob(x, sh.lse[0], sh.lse[1], rec[2]);
            rec[1] = __fadd_rn(d, -ln_s);
            rec[3] = lse_proc;
        }
    }
    gb_row_done(r.params, r.p, r.y, r.counters, r.tokens, r.status, r.counts, r.vocab);
}

// gb_categorical is the kernel. Its passes over a row of V elements are its cost (a block
// holds the whole row, so each pass streams V elements through one SM):
// 1. the largest logit, the observations and (top-k) the histogram of the top key digit;
// 2. top-k (0 < k < V): after each radix level the number of keys at or above the chosen
//    bin's range is known exactly. Once it fits in GB_CAT_CAP, one more pass lists those
//    elements in shared memory in index order (gb_cat_compact), and everything after —
//    the rest of the radix select, Z, top-p's radix select on mass, min-p, S and the draw
//    — runs on the list. With k = 50 on LLM logits the top digit's bin usually holds a few
//    hundred keys, so the row is read twice, by key-only passes, and expf runs only on
//    listed elements. Every step keeps its integer definition (ABI.md), so the list gives
//    the full-row path's tokens; only keys below the k-th are left out, and no later step
//    looks at them.
// 3. min-p alone: one key-only pass lists the elements that can pass min-p (d at least
//    ln(min_p), less a margin that covers the last-place errors of logf and expf many
//    times over, so no kept element is left out), and S and the draw run on the list when
//    it fits (a flat row or a tiny min_p wastes that pass);
// 4. otherwise (no top-k, top-p without top-k, more than GB_CAT_CAP keys tied into the
//    kept set, or too many min-p candidates) the full-row path: top-p's radix levels over
//    the row, S by tiles, the draw in one tile.
//
// With GUMBEL (the filtered kernel's fallback, gb_filtered) the same kept set is drawn
// from by Gumbel-max instead of the inverse CDF: the filtered route's law.
template <int KIND, bool GUMBEL>
__device__ __forceinline__ void gb_categorical_row(gb_cat_row<KIND>& r, gb_cat_shared& sh);

template <int KIND>
__device__ __forceinline__ void gb_categorical(const typename gb_io<KIND>::elem* __restrict__ logits,
                                               gb_row_params* params, gb_i32* tokens, gb_i32* status,
                                               gb_u32* counters, gb_u64 row_stride, gb_u32 vocab, float* logprobs,
                                               const float* bias, gb_u32* counts, const gb_u32* mask, const gb_u32* bitmask) {
    if (blockIdx.x != 0u) {
        return; // one block per row; extra blocks of a wider grid have nothing to do
    }
    gb_cat_row<KIND> r;
    r.y = blockIdx.y;
    r.p = params[r.y];
    if ((r.p.flags & GB_FLAG_ROUTED) && !(r.p.flags & GB_FLAG_CATEGORICAL)) {
        return; // the gumbel_argmax kernel's row: left entirely alone
    }
    if (gb_cat_row_bind<KIND>(r, logits, params, tokens, status, counters, row_stride, vocab, logprobs, bias, counts,
                              mask, bitmask)) {
        gb_categorical_row<KIND, false>(r, gb_cat_smem());
    }
}

template <int KIND, bool GUMBEL>
__device__ __forceinline__ void gb_categorical_row(gb_cat_row<KIND>& r, gb_cat_shared& sh) {
    const gb_u32 vocab = r.vocab;
    const gb_u32 z = blockIdx.z;
    const bool greedy = r.p.temperature == 0.0f;
    const bool topk_on = r.p.top_k > 0u && r.p.top_k < vocab;
    const bool topp_on = r.p.top_p > 0.0f && r.p.top_p < 1.0f;

    gb_u32 mkey = 0u;
    gb_u32 seen = 0u;
    gb_cat_first_pass<KIND>(r, topk_on, greedy, sh, mkey, seen);
    if (gb_seen_status(seen) != GB_STATUS_OK) {
        if (threadIdx.x == 0u) {
            gb_finish(r.tokens, r.status, r.o, 0ull, seen);
            if (r.lp) {
                gb_write_record(r.logprobs, r.o, false, 0.0f, 0.0f, 0.0f, 0.0f);
            }
            gb_row_done(r.params, r.p, r.y, r.counters, r.tokens, r.status, r.counts, vocab);
        }
        return;
    }
    gb_row_state st;
    st.m = gb_orderkey_inverse(mkey);
    if (greedy) {
        gb_cat_greedy<KIND>(r, st.m, sh);
        return;
    }
    st.invT = 1.0f / r.p.temperature;
    // F = 63 - bitlen(V): sums of q stay below 2^63.
    st.bitlen = 32u - (gb_u32)__clz((int)vocab);
    st.two_pow_f = __uint_as_float((127u + 63u - st.bitlen) << 23);
    st.cutoff = gb_weight_cutoff(st.bitlen);
    st.threshold = 0u;
    st.minp_on = r.p.min_p > 0.0f && r.p.min_p <= 1.0f;
    st.min_p = r.p.min_p;

    // Kk, and the candidate list when it serves. (One call site of gb_cat_compact for both
    // lists keeps the kernel in 64 registers without spills.)
    gb_u64 rem = r.p.top_k;
    gb_u32 prefix = 0u;
    int level = 0;
    bool want_list = false;
    float dmin = -gb_inf();
    if (topk_on) {
        want_list = gb_topk_threshold_row<KIND>(r, sh, rem, prefix, level);
    } else if (!topp_on && st.minp_on) {
        dmin = __fadd_rn(__fmul_rn(logf(st.min_p), 1.0001f), -1.0e-3f);
        want_list = true;
    }
    gb_u32 n_list = 0u;
    bool listed = false;
    if (want_list) {
        n_list = gb_cat_compact<KIND>(r.row, vocab, r.vec, r.pc, topk_on ? prefix : 0u, dmin, st.m, st.invT,
                                      st.cutoff, sh.idx, sh.key, sh.w, sh.wc);
        listed = n_list <= GB_CAT_CAP; // always so for top-k: the count was known
    }
    const gb_u32 kk = topk_on ? gb_topk_threshold_list(sh, n_list, rem, prefix, level) : 0u;
    st.threshold = kk;

    // The inverse-CDF draw's uniform: u = philox.CategoricalUniform64(seed, step + z).
    gb_u32 step_lo, step_hi;
    gb_step_plus(r.p, z, step_lo, step_hi);
    gb_u64 u = 0ull;
    if (!GUMBEL) {
        gb_u32 ph[4];
        gb_philox(0u, step_lo, step_hi, GB_PURPOSE_CATEGORICAL, r.p.seed_lo, r.p.seed_hi, ph);
        u = ((gb_u64)ph[1] << 32) | ph[0];
    }
    gb_u64 s_kept;
    bool reached = true;
    if (listed) {
        const gb_u32 kp = topp_on ? gb_topp_threshold<KIND, true>(r, st, kk, n_list, 0ull, reached, sh) : 0u;
        st.threshold = gb_max_u32(kk, kp);
        s_kept = GUMBEL ? gb_gumbel_listed<KIND>(r, st, n_list, step_lo, step_hi, sh) : gb_cat_draw_listed(st, n_list, u, sh);
    } else {
        const gb_u32 kp = topp_on ? gb_topp_threshold<KIND, false>(r, st, kk, 0u, 0ull, reached, sh) : 0u;
        st.threshold = gb_max_u32(kk, kp);
        s_kept = GUMBEL ? gb_gumbel_row<KIND>(r, st, step_lo, step_hi, sh) : gb_cat_draw_row<KIND>(r, st, u, sh);
    }
    gb_cat_finish<KIND>(r, st, s_kept, sh);
}
