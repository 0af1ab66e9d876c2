// Order keys, packed keys and the reductions over SIMD-groups, threadgroups and the
// threadgroups of a row (the split phase), and the radix bins of the categorical
// kernel's selections.
//
// A float's order key orders like the float (-0 takes the key of +0, since equal floats
// must tie and go to the lowest index in every reduction order; NaN keys lie above +Inf
// or below -Inf by sign). A packed (score, index) key puts the score's key in the high
// half and 0xFFFFFFFF - index in the low half, so the largest packed value is the best
// score with the lowest index, whatever the reduction order; 0 is the empty key.

inline uint gb_orderkey(float f) {
    uint b = as_type<uint>(f);
    if (b == 0x80000000u) {
        b = 0u;
    }
    return b ^ ((b >> 31) != 0u ? 0xFFFFFFFFu : 0x80000000u);
}

inline float gb_orderkey_inverse(uint k) {
    uint b = (k >> 31) != 0u ? (k ^ 0x80000000u) : ~k;
    return as_type<float>(b);
}

inline ulong gb_pack(float score, uint index) {
    return (ulong(gb_orderkey(score)) << 32) | ulong(0xFFFFFFFFu - index);
}

// A packed key travels through device scratch as two 32-bit atomic words, low word
// first: Metal has no 64-bit device atomics before MSL 3.1 and none that every GPU
// supports, and a word touched only by atomics is never read from a stale cache line.
inline void gb_key_store(device atomic_uint* words, ulong index, ulong key) {
    atomic_store_explicit(&words[2ul * index], uint(key), memory_order_relaxed);
    atomic_store_explicit(&words[2ul * index + 1ul], uint(key >> 32), memory_order_relaxed);
}

inline ulong gb_key_load(device atomic_uint* words, ulong index) {
    uint lo = atomic_load_explicit(&words[2ul * index], memory_order_relaxed);
    uint hi = atomic_load_explicit(&words[2ul * index + 1ul], memory_order_relaxed);
    return gb_join_u64(lo, hi);
}

// ---------------------------------------------------------------------------------------
// SIMD-group and threadgroup reductions. Every lane of every SIMD-group calls them (the
// threadgroup size is a multiple of the SIMD width), and the butterfly leaves the result
// in every lane.

// Max of a packed key and OR of observations over the SIMD-group.
inline void gb_simd_max_or(thread ulong& key, thread uint& seen, uint width) {
    for (uint off = width / 2u; off > 0u; off >>= 1) {
        uint4 mine = uint4(uint(key), uint(key >> 32), seen, 0u);
        uint4 other = simd_shuffle_xor(mine, ushort(off));
        key = gb_max_u64(key, gb_join_u64(other.x, other.y));
        seen |= other.z;
    }
}

inline ulong gb_simd_sum_u64(ulong v, uint width) {
    for (uint off = width / 2u; off > 0u; off >>= 1) {
        uint2 other = simd_shuffle_xor(uint2(uint(v), uint(v >> 32)), ushort(off));
        v += gb_join_u64(other.x, other.y);
    }
    return v;
}

inline uint gb_simd_min_u32(uint v, uint width) {
    for (uint off = width / 2u; off > 0u; off >>= 1) {
        uint other = simd_shuffle_xor(v, ushort(off));
        v = min(v, other);
    }
    return v;
}

// Inclusive prefix sum over the lanes of the SIMD-group.
inline ulong gb_simd_inclusive_sum_u64(ulong v, uint lane, uint width) {
    for (uint off = 1u; off < width; off <<= 1) {
        uint2 other = simd_shuffle_up(uint2(uint(v), uint(v >> 32)), ushort(off));
        if (lane >= off) {
            v += gb_join_u64(other.x, other.y);
        }
    }
    return v;
}

// Max packed key and OR of observations over the threadgroup, returned to every thread.
// scratch_key and scratch_seen hold one entry per SIMD-group.
inline void gb_block_max_or(thread ulong& key, thread uint& seen, gb_thread_ids L, threadgroup ulong* scratch_key,
                            threadgroup uint* scratch_seen) {
    gb_simd_max_or(key, seen, L.width);
    if (L.lane == 0u) {
        scratch_key[L.sg] = key;
        scratch_seen[L.sg] = seen;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    ulong k = 0ul;
    uint f = 0u;
    for (uint i = L.lane; i < L.nsg; i += L.width) {
        k = gb_max_u64(k, scratch_key[i]);
        f |= scratch_seen[i];
    }
    gb_simd_max_or(k, f, L.width);
    key = k;
    seen = f;
    threadgroup_barrier(mem_flags::mem_threadgroup);
}

// Sum over the threadgroup, returned to every thread.
inline ulong gb_block_sum_u64(ulong v, gb_thread_ids L, threadgroup ulong* scratch) {
    v = gb_simd_sum_u64(v, L.width);
    if (L.lane == 0u) {
        scratch[L.sg] = v;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    ulong s = 0ul;
    for (uint i = L.lane; i < L.nsg; i += L.width) {
        s += scratch[i];
    }
    s = gb_simd_sum_u64(s, L.width);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    return s;
}

// ---------------------------------------------------------------------------------------
// The split phase: with S > 1 threadgroups per row (and draw), each publishes its
// partial in device scratch and counts itself in; the last to arrive reduces them all.
//
// Visibility of the partials across threadgroups. Thread 0 of each threadgroup stores
// its partial with relaxed atomic stores and ORs its observations into the draw's flags
// word with a relaxed atomic, then counts itself in with a relaxed fetch_add. The
// threadgroup that takes the count to S reads every partial and the flags with relaxed
// atomic loads. Partials and flags are only ever touched by atomics, so no stale
// non-coherent cache line can be read; what must hold is that a threadgroup's partial
// and flags are visible before its arrival is. With MSL 3.2 the writer's device-scope
// fence before the fetch_add and the reader's after it give exactly that (fence-fence
// synchronisation through the counter's release sequence). Before 3.2, MSL has only
// relaxed atomics; the threadgroup_barrier(mem_flags::mem_device) between the stores and
// the arrival is the ordering point MSL offers for device memory, and the code relies on
// Apple GPUs performing device atomics in order at the coherence point (as the usual
// last-block reductions on Metal do). This is the one part of the kernels that an
// emulator cannot check; the gpu-tagged tests exercise it on real hardware.

// Counts this threadgroup in on counter, once thread 0 has published its partial, and
// tells every thread whether it was the last of S to arrive (and so reduces them).
inline bool gb_arrive(device atomic_uint* counter, uint S, gb_thread_ids L, threadgroup uint* last) {
    threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);
    if (L.tid == 0u) {
        gb_device_fence();
        uint arrived = atomic_fetch_add_explicit(counter, 1u, memory_order_relaxed);
        last[0] = arrived == S - 1u ? 1u : 0u;
    }
    threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);
    if (last[0] == 0u) {
        return false;
    }
    gb_device_fence();
    return true;
}

// ---------------------------------------------------------------------------------------
// Radix bins: 256 bins of one 8-bit digit of the order keys, holding counts or 64-bit
// masses.

#define GB_BINS 256u

// The threadgroup memory of the bins and of a selection's answer.
struct gb_bins {
    threadgroup atomic_uint* lo;  // [GB_BINS] counts, or the low words of masses
    threadgroup atomic_uint* hi;  // [GB_BINS] high words of masses
    threadgroup uint* sel_bin;    // [1] the bin gb_select_bin chose
    threadgroup ulong* sel_above; // [1] the total of the bins above it
};

// Adds a 64-bit value to a bin held as two 32-bit threadgroup atomics: the thread whose
// addition wraps the low word carries one into the high word, so the pair sums exactly
// (MSL has no 64-bit atomic add).
inline void gb_bin_add_u64(threadgroup atomic_uint* lo, threadgroup atomic_uint* hi, ulong v) {
    uint vl = uint(v);
    uint vh = uint(v >> 32);
    uint old = atomic_fetch_add_explicit(lo, vl, memory_order_relaxed);
    uint carry = (old + vl < old) ? 1u : 0u;
    uint add_hi = vh + carry;
    if (add_hi != 0u) {
        atomic_fetch_add_explicit(hi, add_hi, memory_order_relaxed);
    }
}

inline ulong gb_bin_value(gb_bins H, uint b, bool wide) {
    uint lo = atomic_load_explicit(&H.lo[b], memory_order_relaxed);
    if (!wide) {
        return ulong(lo);
    }
    uint hi = atomic_load_explicit(&H.hi[b], memory_order_relaxed);
    return gb_join_u64(lo, hi);
}

inline void gb_clear_bins(gb_bins H, bool wide, gb_thread_ids L) {
    for (uint b = L.tid; b < GB_BINS; b += L.T) {
        atomic_store_explicit(&H.lo[b], 0u, memory_order_relaxed);
        if (wide) {
            atomic_store_explicit(&H.hi[b], 0u, memory_order_relaxed);
        }
    }
}

// Run by SIMD-group 0: walks the bins from the top, adding their values to above, and
// stores the first bin at which the total reaches target and the total of the bins above
// it. Lane l sums bins [256 - (l+1)*per, 256 - l*per); a prefix over the lanes finds the
// lane that holds the answer, which then walks its own bins.
inline void gb_select_bin(gb_bins H, bool wide, ulong above, ulong target, gb_thread_ids L) {
    uint per = GB_BINS / L.width;
    uint top = GB_BINS - L.lane * per;  // one past this lane's highest bin
    ulong mine = 0ul;
    for (uint b = top - per; b < top; ++b) {
        mine += gb_bin_value(H, b, wide);
    }
    ulong incl = gb_simd_inclusive_sum_u64(mine, L.lane, L.width);
    bool reached = above + incl >= target;
    uint first = gb_simd_min_u32(reached ? L.lane : L.width, L.width);
    if (first == L.width) {
        // Unreachable when the caller's invariant holds; keep the result in range.
        if (L.lane == 0u) {
            H.sel_bin[0] = 0u;
            H.sel_above[0] = above;
        }
        return;
    }
    if (L.lane == first) {
        ulong cum = above + incl - mine;
        for (uint b = top; b > top - per; --b) {
            ulong v = gb_bin_value(H, b - 1u, wide);
            cum += v;
            if (cum >= target) {
                H.sel_bin[0] = b - 1u;
                H.sel_above[0] = cum - v;
                break;
            }
        }
    }
}
