// Order keys and reductions: float order as unsigned order, the packed (score, index)
// keys every reduction compares, warp and block collectives, and the bins of a radix
// select. Every lane of every warp must call a collective (blockDim.x is a multiple of
// the warp size); 64-bit values travel as two 32-bit halves, so that only the 32-bit
// shuffles of CUDA and HIP are needed.

// GB_BINS is the bins of one radix level: 8-bit digits.
#define GB_BINS 256

// gb_orderkey maps a float to a uint32 whose unsigned order is the float order. -0 takes
// the key of +0: equal floats must tie, so that the lowest index wins in every reduction
// order. NaN with the sign bit clear lies above +Inf.
__device__ __forceinline__ gb_u32 gb_orderkey(float f) {
    gb_u32 b = __float_as_uint(f);
    if (b == 0x80000000u) {
        b = 0u;
    }
    return b ^ ((b >> 31) ? 0xFFFFFFFFu : 0x80000000u);
}

// gb_orderkey_inverse undoes gb_orderkey.
__device__ __forceinline__ float gb_orderkey_inverse(gb_u32 k) {
    return __uint_as_float((k & 0x80000000u) ? (k ^ 0x80000000u) : ~k);
}

// gb_pack is the packed (score, index) key: the largest is the winner, ties to the
// lowest index; 0 is the empty key, below every real one.
__device__ __forceinline__ gb_u64 gb_pack(float score, gb_u32 index) {
    return ((gb_u64)gb_orderkey(score) << 32) | (gb_u64)(0xFFFFFFFFu - index);
}

// GB_WARP_SIZE is the lanes of a warp: the constant 32 for CUDA (every NVIDIA GPU), so
// that shuffle trees unroll and lane and warp indices are shifts, not the divisions that
// the run-time warpSize costs; HIP (32 or 64 lanes by target) and the emulation (which
// runs both) keep the run-time value.
#if GB_NVIDIA
#define GB_WARP_SIZE 32
#else
#define GB_WARP_SIZE warpSize
#endif

__device__ __forceinline__ gb_u32 gb_lane() { return threadIdx.x % GB_WARP_SIZE; }
__device__ __forceinline__ gb_u32 gb_warp() { return threadIdx.x / GB_WARP_SIZE; }
__device__ __forceinline__ gb_u32 gb_num_warps() { return blockDim.x / GB_WARP_SIZE; }

__device__ __forceinline__ gb_u32 gb_shfl_down_u32(gb_u32 v, gb_u32 d) {
    return __shfl_down_sync(0xFFFFFFFFu, v, d);
}
__device__ __forceinline__ gb_u64 gb_shfl_down_u64(gb_u64 v, gb_u32 d) {
    gb_u32 lo = __shfl_down_sync(0xFFFFFFFFu, (gb_u32)v, d);
    gb_u32 hi = __shfl_down_sync(0xFFFFFFFFu, (gb_u32)(v >> 32), d);
    return ((gb_u64)hi << 32) | lo;
}
__device__ __forceinline__ gb_u64 gb_shfl_up_u64(gb_u64 v, gb_u32 d) {
    gb_u32 lo = __shfl_up_sync(0xFFFFFFFFu, (gb_u32)v, d);
    gb_u32 hi = __shfl_up_sync(0xFFFFFFFFu, (gb_u32)(v >> 32), d);
    return ((gb_u64)hi << 32) | lo;
}

// gb_warp_max_f32_all returns the warp's largest value to every lane. On sm_80 and later
// it is one warp reduction of order keys (a NaN with the sign bit clear then wins, which
// only stops noise skipping in a row that ends with status 1 anyway); elsewhere a
// butterfly of shuffles that ignores NaN.
__device__ __forceinline__ float gb_warp_max_f32_all(float v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    return gb_orderkey_inverse(__reduce_max_sync(0xFFFFFFFFu, gb_orderkey(v)));
#else
    for (int m = GB_WARP_SIZE / 2; m > 0; m >>= 1) {
        v = fmaxf(v, __uint_as_float(__shfl_xor_sync(0xFFFFFFFFu, __float_as_uint(v), m)));
    }
    return v;
#endif
}

// gb_warp_max_u64_all returns the warp's largest value to every lane: on sm_80 and later
// two warp reductions, the high halves' maximum and then the low halves' among the lanes
// that hold it; elsewhere a butterfly of shuffles.
__device__ __forceinline__ gb_u64 gb_warp_max_u64_all(gb_u64 v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const gb_u32 hi = __reduce_max_sync(0xFFFFFFFFu, (gb_u32)(v >> 32));
    const gb_u32 lo = __reduce_max_sync(0xFFFFFFFFu, (gb_u32)(v >> 32) == hi ? (gb_u32)v : 0u);
    return ((gb_u64)hi << 32) | lo;
#else
    for (int m = GB_WARP_SIZE / 2; m > 0; m >>= 1) {
        const gb_u32 lo = __shfl_xor_sync(0xFFFFFFFFu, (gb_u32)v, m);
        const gb_u32 hi = __shfl_xor_sync(0xFFFFFFFFu, (gb_u32)(v >> 32), m);
        v = gb_max_u64(v, ((gb_u64)hi << 32) | lo);
    }
    return v;
#endif
}

// gb_warp_or_all returns the warp's OR of v to every lane.
__device__ __forceinline__ gb_u32 gb_warp_or_all(gb_u32 v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    return __reduce_or_sync(0xFFFFFFFFu, v);
#else
    for (int m = GB_WARP_SIZE / 2; m > 0; m >>= 1) {
        v |= __shfl_xor_sync(0xFFFFFFFFu, v, m);
    }
    return v;
#endif
}

// gb_first_lane returns the lowest lane of the warp whose p is set (-1 for none). HIP's
// ballot is 64 bits wide (hip_prelude.h), so the bit scan is too.
__device__ __forceinline__ int gb_first_lane(bool p) {
    return __ffsll((long long)__ballot_sync(0xFFFFFFFFu, p)) - 1;
}

// gb_shfl_f32 returns lane src's v.
__device__ __forceinline__ float gb_shfl_f32(float v, int src) {
    return __uint_as_float(__shfl_sync(0xFFFFFFFFu, __float_as_uint(v), src));
}

// gb_warp_max_u32_all returns the warp's largest value to every lane.
__device__ __forceinline__ gb_u32 gb_warp_max_u32_all(gb_u32 v) {
    for (int m = GB_WARP_SIZE / 2; m > 0; m >>= 1) {
        v = gb_max_u32(v, __shfl_xor_sync(0xFFFFFFFFu, v, m));
    }
    return v;
}

// gb_block_max_or returns to every thread the block's largest value and OR of flags.
__device__ __forceinline__ void gb_block_max_or(gb_u32& value, gb_u32& flags, gb_u64* s_red,
                                                gb_u64* s_bcast) {
    gb_u32 f = flags;
    for (int d = GB_WARP_SIZE / 2; d > 0; d >>= 1) {
        value = gb_max_u32(value, gb_shfl_down_u32(value, d));
        f |= gb_shfl_down_u32(f, d);
    }
    if (gb_lane() == 0u) {
        s_red[gb_warp()] = ((gb_u64)value << 32) | f;
    }
    __syncthreads();
    if (gb_warp() == 0u) {
        gb_u64 p = gb_lane() < gb_num_warps() ? s_red[gb_lane()] : 0ull;
        gb_u32 v = (gb_u32)(p >> 32);
        gb_u32 ff = (gb_u32)p;
        for (int d = GB_WARP_SIZE / 2; d > 0; d >>= 1) {
            v = gb_max_u32(v, gb_shfl_down_u32(v, d));
            ff |= gb_shfl_down_u32(ff, d);
        }
        if (gb_lane() == 0u) {
            s_bcast[0] = ((gb_u64)v << 32) | ff;
        }
    }
    __syncthreads();
    gb_u64 packed = s_bcast[0];
    value = (gb_u32)(packed >> 32);
    flags = (gb_u32)packed;
    __syncthreads();
}

// gb_block_sum_u64 returns the block's sum to every thread.
__device__ __forceinline__ gb_u64 gb_block_sum_u64(gb_u64 v, gb_u64* s_red, gb_u64* s_bcast) {
    for (int d = GB_WARP_SIZE / 2; d > 0; d >>= 1) {
        v += gb_shfl_down_u64(v, d);
    }
    // shfl_down hands a lane its own value where the source lane is past the warp, so only
    // lane 0's sum is exact; that is the one kept.
    if (gb_lane() == 0u) {
        s_red[gb_warp()] = v;
    }
    __syncthreads();
    if (gb_warp() == 0u) {
        gb_u64 s = gb_lane() < gb_num_warps() ? s_red[gb_lane()] : 0ull;
        for (int d = GB_WARP_SIZE / 2; d > 0; d >>= 1) {
            s += gb_shfl_down_u64(s, d);
        }
        if (gb_lane() == 0u) {
            s_bcast[0] = s;
        }
    }
    __syncthreads();
    gb_u64 total = s_bcast[0];
    __syncthreads();
    return total;
}

// gb_block_exclusive_scan_u64 returns the sum of v over the threads before this one and
// sets total to the block's sum, in thread order.
__device__ __forceinline__ gb_u64 gb_block_exclusive_scan_u64(gb_u64 v, gb_u64& total, gb_u64* s_red,
                                                              gb_u64* s_bcast) {
    gb_u32 lane = gb_lane();
    gb_u64 incl = v;
    for (int d = 1; d < GB_WARP_SIZE; d <<= 1) {
        gb_u64 t = gb_shfl_up_u64(incl, d);
        if (lane >= (gb_u32)d) {
            incl += t;
        }
    }
    if (lane == (gb_u32)GB_WARP_SIZE - 1u) {
        s_red[gb_warp()] = incl;
    }
    __syncthreads();
    if (gb_warp() == 0u) {
        gb_u64 w = lane < gb_num_warps() ? s_red[lane] : 0ull;
        gb_u64 wincl = w;
        for (int d = 1; d < GB_WARP_SIZE; d <<= 1) {
            gb_u64 t = gb_shfl_up_u64(wincl, d);
            if (lane >= (gb_u32)d) {
                wincl += t;
            }
        }
        if (lane < gb_num_warps()) {
            s_red[lane] = wincl - w;
        }
        if (lane == (gb_u32)GB_WARP_SIZE - 1u) {
            s_bcast[0] = wincl;
        }
    }
    __syncthreads();
    gb_u64 excl = s_red[gb_warp()] + incl - v;
    total = s_bcast[0];
    __syncthreads();
    return excl;
}

// gb_select_bin walks the 256 bins of a radix level from the top and returns to every
// thread the first bin b with val[b] > 0 and above + val[b] >= target, where above is the
// sum of val over the bins past b (returned too). val is cnt when mass is null. Warp 0
// does the walk: each lane owns 256 / warpSize consecutive bins.
__device__ __forceinline__ gb_u32 gb_select_bin(const gb_u32* cnt, const gb_u64* mass, gb_u64 target,
                                                gb_u64& above, gb_u64* s_bcast) {
    if (gb_warp() == 0u) {
        gb_u32 lane = gb_lane();
        gb_u32 per = GB_BINS / GB_WARP_SIZE;
        gb_u32 lo = lane * per;
        gb_u64 local = 0;
        for (gb_u32 b = lo; b < lo + per; ++b) {
            local += mass ? mass[b] : (gb_u64)cnt[b];
        }
        // suffix: the sum over this lane's bins and every higher lane's.
        gb_u64 suffix = local;
        for (int d = 1; d < GB_WARP_SIZE; d <<= 1) {
            gb_u64 t = gb_shfl_down_u64(suffix, d);
            if (lane + (gb_u32)d < (gb_u32)GB_WARP_SIZE) {
                suffix += t;
            }
        }
        gb_u64 acc = suffix - local;
        gb_u32 cand = 0;
        gb_u64 cand_above = 0;
        for (gb_u32 i = 0; i < per; ++i) {
            gb_u32 b = lo + per - 1u - i;
            gb_u64 v = mass ? mass[b] : (gb_u64)cnt[b];
            if (cand == 0u && v > 0ull && acc + v >= target) {
                cand = b + 1u;
                cand_above = acc;
            }
            acc += v;
        }
        gb_u32 best = gb_warp_max_u32_all(cand);
        if (cand != 0u && cand == best) {
            s_bcast[0] = cand - 1u;
            s_bcast[1] = cand_above;
        }
        if (best == 0u && lane == 0u) {
            // Unreachable for consistent inputs (the target never exceeds the total).
            s_bcast[0] = 0ull;
            s_bcast[1] = 0ull;
        }
    }
    __syncthreads();
    gb_u32 bin = (gb_u32)s_bcast[0];
    above = s_bcast[1];
    __syncthreads();
    return bin;
}

// gb_hist_add adds four elements to a radix level's histograms: bins[j] for the elements
// with ok[j], counting each distinct bin once per group so that runs of equal bins (common
// in the top digits of logits) cost one shared-memory atomic.
__device__ __forceinline__ void gb_hist_add(gb_u32* s_cnt, gb_u64* s_mass, const gb_u32 bins[4],
                                            const gb_u64 q[4], bool ok[4]) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        if (!ok[j]) {
            continue;
        }
        gb_u32 c = 1u;
        gb_u64 m = q[j];
#pragma unroll
        for (int j2 = j + 1; j2 < 4; ++j2) {
            if (ok[j2] && bins[j2] == bins[j]) {
                ++c;
                m += q[j2];
                ok[j2] = false;
            }
        }
        if (s_cnt) {
            atomicAdd(&s_cnt[bins[j]], c);
        }
        if (s_mass && m != 0ull) {
            atomicAdd(&s_mass[bins[j]], m);
        }
    }
}

__device__ __forceinline__ float gb_shfl_down_f32(float v, gb_u32 d) {
    return __uint_as_float(__shfl_down_sync(0xFFFFFFFFu, __float_as_uint(v), d));
}

__device__ __forceinline__ float gb_shfl_xor_f32(float v, gb_u32 d) {
    return __uint_as_float(__shfl_xor_sync(0xFFFFFFFFu, __float_as_uint(v), d));
}

// gb_load_published reads a word that another block stored before its arrival was
// counted, after this block's last arrival (gb_arrive) and a barrier. On CUDA,
// ld.global.cg reads at L2, where the fenced stores are; a
// volatile read would be a system-scope strong load, slower on the draw's critical path.
// HIP (whose fence invalidates L1 too) and the emulation keep the volatile read.
template <typename T>
__device__ __forceinline__ T gb_load_published(const T* p) {
#if GB_NVIDIA
    return __ldcg(p);
#else
    return *(const volatile T*)p;
#endif
}

// gb_fence_gpu is the GPU-scope fence of a split launch's arrival. An acquire-release
// fence is all that publication needs (CUTLASS's semaphores use the same); __threadfence
// is sequentially consistent, MEMBAR.SC.GPU on sm_90, which waits longer on every
// arrival. HIP and the emulation keep __threadfence.
__device__ __forceinline__ void gb_fence_gpu() {
#if GB_NVIDIA
    asm volatile("fence.acq_rel.gpu;" ::: "memory");
#else
    __threadfence();
#endif
}

// gb_arrive counts one arrival of `of` at *count and returns whether it was the last.
// The fence before it releases what the caller published; the one after the last
// arrival acquires what the others did, for the whole block when the caller is its
// thread 0 and a barrier follows (the later reads go through gb_load_published).
__device__ __forceinline__ bool gb_arrive(gb_u32* count, gb_u32 of) {
    gb_fence_gpu();
    const bool last = atomicAdd(count, 1u) == of - 1u;
    if (last) {
        gb_fence_gpu();
    }
    return last;
}

// gb_clear_bins zeroes a radix level's counts.
__device__ __forceinline__ void gb_clear_bins(gb_u32* s_cnt) {
    for (gb_u32 b = threadIdx.x; b < GB_BINS; b += blockDim.x) {
        s_cnt[b] = 0u;
    }
    __syncthreads();
}

// gb_block_max_u64_all returns the block's largest value to every thread.
__device__ __forceinline__ gb_u64 gb_block_max_u64_all(gb_u64 v, gb_u64* s_red, gb_u64* s_bcast) {
    for (int d = GB_WARP_SIZE / 2; d > 0; d >>= 1) {
        v = gb_max_u64(v, gb_shfl_down_u64(v, d));
    }
    if (gb_lane() == 0u) {
        s_red[gb_warp()] = v;
    }
    __syncthreads();
    if (gb_warp() == 0u) {
        v = gb_lane() < gb_num_warps() ? s_red[gb_lane()] : 0ull;
        for (int d = GB_WARP_SIZE / 2; d > 0; d >>= 1) {
            v = gb_max_u64(v, gb_shfl_down_u64(v, d));
        }
        if (gb_lane() == 0u) {
            s_bcast[0] = v;
        }
    }
    __syncthreads();
    const gb_u64 best = s_bcast[0];
    __syncthreads();
    return best;
}

// gb_shfl_xor_u64 is a 64-bit __shfl_xor_sync.
__device__ __forceinline__ gb_u64 gb_shfl_xor_u64(gb_u64 v, gb_u32 m) {
    const gb_u32 lo = __shfl_xor_sync(0xFFFFFFFFu, (gb_u32)v, m);
    const gb_u32 hi = __shfl_xor_sync(0xFFFFFFFFu, (gb_u32)(v >> 32), m);
    return ((gb_u64)hi << 32) | lo;
}

// gb_shfl_u64 is a 64-bit __shfl_sync from lane src.
__device__ __forceinline__ gb_u64 gb_shfl_u64(gb_u64 v, gb_u32 src) {
    const gb_u32 lo = __shfl_sync(0xFFFFFFFFu, (gb_u32)v, src);
    const gb_u32 hi = __shfl_sync(0xFFFFFFFFu, (gb_u32)(v >> 32), src);
    return ((gb_u64)hi << 32) | lo;
}

// gb_count_above returns how many of the n keys of a descending list (0 = empty, at the
// end) exceed key: a binary search, n a power of two.
template <gb_u32 N>
__device__ __forceinline__ gb_u32 gb_count_above(const gb_u64* list, gb_u64 key) {
    gb_u32 c = 0u;
#pragma unroll
    for (gb_u32 step = N; step > 0u; step >>= 1) {
        if (c + step <= N && list[c + step - 1u] > key) {
            c += step;
        }
    }
    return c;
}

// gb_count_above_n returns how many of the n keys of a descending list (0 = empty, at the
// end) exceed key: a binary search, any n.
__device__ __forceinline__ gb_u32 gb_count_above_n(const gb_u64* list, gb_u32 n, gb_u64 key) {
    gb_u32 lo = 0u, hi = n;
    while (lo < hi) {
        const gb_u32 mid = (lo + hi) >> 1;
        if (list[mid] > key) {
            lo = mid + 1u;
        } else {
            hi = mid;
        }
    }
    return lo;
}

// gb_rank_split is how many threads gb_rank_keys gives each of c keys: the most, a power
// of two up to 16 and the warp size, with which one trip of the block covers every key.
// Even a list of twenty keys gains: each comparison waits on its shared load. Sixteen
// lanes reading sixteen consecutive keys touch every shared bank once.
__device__ __forceinline__ gb_u32 gb_rank_split(gb_u32 c, gb_u32& shift) {
    gb_u32 p = 1u;
    shift = 0u;
    while (2u * p <= gb_min_u32(16u, (gb_u32)GB_WARP_SIZE) && 2u * p * c <= blockDim.x) {
        p <<= 1;
        ++shift;
    }
    return p;
}

// gb_rank_keys ranks each real key of key(0..c-1) (distinct, 0 = none) by how many of the
// others are larger, and calls place(i, key, rank) once for each, from one of its threads.
// A count over the list is a chain of dependent additions, so P threads (gb_rank_split),
// lanes of one warp, count every P-th key each and add their counts by shuffles: a list
// of a hundred keys takes a chain a P-th as long, on P times the warps. The block calls
// it together; it does not synchronise.
template <class Key, class Place>
__device__ __forceinline__ void gb_rank_keys(gb_u32 c, Key key, Place place) {
    gb_u32 shift;
    const gb_u32 p = gb_rank_split(c, shift);
    const gb_u32 slots = c << shift;
    for (gb_u32 t0 = 0u; t0 < slots; t0 += blockDim.x) { // block-uniform trips: shuffles
        const gb_u32 t = t0 + threadIdx.x;
        const gb_u32 i = t >> shift, part = t & (p - 1u);
        const gb_u64 me = t < slots ? key(i) : 0ull;
        gb_u32 rank = 0u;
        if (me != 0ull) {
            for (gb_u32 j = part; j < c; j += p) {
                rank += key(j) > me ? 1u : 0u;
            }
        }
        for (gb_u32 d = 1u; d < p; d <<= 1) {
            rank += __shfl_xor_sync(0xFFFFFFFFu, rank, d);
        }
        if (me != 0ull && part == 0u) {
            place(i, me, rank);
        }
    }
}

// gb_list_append returns the place of this thread's entry (when take) in a list whose
// length is *n: one shared atomic per warp.
__device__ __forceinline__ gb_u32 gb_list_append(bool take, gb_u32* n) {
    const gb_u64 ballot = (gb_u64)__ballot_sync(0xFFFFFFFFu, take);
    const gb_u32 lane = gb_lane();
    const int leader = __ffsll((long long)ballot) - 1;
    gb_u32 base = 0u;
    if (leader >= 0 && lane == (gb_u32)leader) {
        base = atomicAdd(n, (gb_u32)__popcll(ballot));
    }
    base = __shfl_sync(0xFFFFFFFFu, base, leader < 0 ? 0 : leader);
    return base + (gb_u32)__popcll(ballot & ((1ull << lane) - 1ull));
}

// gb_list_insert_later puts key (gb_pack) into a thread's list of L keys (largest first, 0 =
// empty) when it arrives after every listed key in element order, as a scan's keys do.
// Such a key ranks below every listed key of the same value, so the values alone place
// it, and each slot compares with the new key, not with the key its neighbour pushed
// down: L independent comparisons instead of a chain of 64-bit ones. The key must be
// real (value above 0): the slots it passes hold real keys or 0.
template <int L>
__device__ __forceinline__ void gb_list_insert_later(gb_u64 lst[L], gb_u64 key) {
    const gb_u32 k = (gb_u32)(key >> 32);
    bool above[L];
#pragma unroll
    for (int i = 0; i < L; ++i) {
        above[i] = k > (gb_u32)(lst[i] >> 32);
    }
#pragma unroll
    for (int i = L - 1; i > 0; --i) {
        lst[i] = above[i] ? (above[i - 1] ? lst[i - 1] : key) : lst[i];
    }
    lst[0] = above[0] ? key : lst[0];
}

// gb_warp_take moves the warp's `take` largest keys of its lanes' lists (L keys each,
// largest first, 0 = empty) to out, largest first, ending with a 0 when there are fewer,
// and returns to every lane the order key of the largest entry left in the lists (0:
// none). One warp maximum per key and no shared atomics, whose single hot bin would
// serialise a block on LLM logits: the selection step of the filtered and topn kernels.
template <int L>
__device__ __forceinline__ gb_u32 gb_warp_take(gb_u64 lst[L], gb_u32 take, gb_u64* out) {
    for (gb_u32 c = 0; c < take; ++c) {
        const gb_u64 best = gb_warp_max_u64_all(lst[0]);
        if (gb_lane() == 0u) {
            out[c] = best;
        }
        if (best == 0ull) {
            break; // uniform: every lane has the warp's maximum
        }
        if (lst[0] == best) { // keys are unique: one lane pops
#pragma unroll
            for (int i = 0; i + 1 < L; ++i) {
                lst[i] = lst[i + 1];
            }
            lst[L - 1] = 0ull;
        }
    }
    return (gb_u32)(gb_warp_max_u64_all(lst[0]) >> 32);
}
