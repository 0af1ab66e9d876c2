// Logit processors (ABI.md, "Processed logits"): bias, penalties, the allowed-token
// mask and the token bitmask, each operation rounded on its own, and the observations a
// row's status is taken from.

// gb_seen returns the observations of one processed logit (GB_SEEN_*).
__device__ __forceinline__ gb_u32 gb_seen(float x) {
    if (x != x || x == gb_inf()) {
        return GB_SEEN_NONFINITE;
    }
    return x != -gb_inf() ? GB_SEEN_FINITE : 0u;
}

// gb_processor is a row's logit processors.
struct gb_processor {
    gb_u32 flags;          // the row's GB_FLAGS_PROCESSORS bits
    const float* bias;     // the row's V biases
    const gb_u32* counts;  // the row's V counts
    const gb_u32* mask;    // the row's ceil(V / 32) mask words
    const gb_u32* bitmask; // the ceil(V / 32) words of the row's bitmask row
    float rep, freq, pres;
};

__device__ __forceinline__ gb_processor gb_processor_of(const gb_row_params& p, const float* bias, const gb_u32* counts,
                                                const gb_u32* mask, const gb_u32* bitmask, gb_u32 vocab) {
    gb_processor pc;
    pc.flags = p.flags & GB_FLAGS_PROCESSORS;
    const gb_u64 r = p.row;
    // A buffer whose feature is off may be 8 bytes long: no pointer into it is formed.
    pc.bias = (pc.flags & GB_FLAG_BIAS) ? bias + r * vocab : bias;
    pc.counts = (pc.flags & GB_FLAG_PENALTIES) ? counts + r * vocab : counts;
    const gb_u64 words = (vocab + 31u) / 32u;
    pc.mask = (pc.flags & GB_FLAG_MASK) ? mask + r * words : mask;
    pc.bitmask = (pc.flags & GB_FLAG_BITMASK) ? bitmask + (gb_u64)p.bitmask_row * words : bitmask;
    pc.rep = p.repetition_penalty;
    pc.freq = p.frequency_penalty;
    pc.pres = p.presence_penalty;
    return pc;
}

// gb_unmasked is the processed logit of element i before the mask: bias, then penalties,
// each operation rounded on its own.
__device__ __forceinline__ float gb_unmasked(const gb_processor& pc, float x, gb_u32 i) {
    if (pc.flags & GB_FLAG_BIAS) {
        x = __fadd_rn(x, pc.bias[i]);
    }
    if (pc.flags & GB_FLAG_PENALTIES) {
        const gb_u32 c = pc.counts[i];
        if (c != 0u && pc.rep != 1.0f) {
            x = x > 0.0f ? __fdiv_rn(x, pc.rep) : __fmul_rn(x, pc.rep);
        }
        const gb_u32 out = c & GB_COUNT_MASK;
        if (out != 0u) {
            x = __fadd_rn(x, -__fmul_rn(pc.freq, (float)out));
            x = __fadd_rn(x, -pc.pres);
        }
    }
    return x;
}

// gb_mask_word is the word of allowed bits (mask and bitmask together) that holds element
// i; all ones for a row without either.
__device__ __forceinline__ gb_u32 gb_mask_word(const gb_processor& pc, gb_u32 i) {
    gb_u32 w = 0xFFFFFFFFu;
    if (pc.flags & GB_FLAG_MASK) {
        w = pc.mask[i >> 5];
    }
    if (pc.flags & GB_FLAG_BITMASK) {
        w &= pc.bitmask[i >> 5];
    }
    return w;
}

// gb_allowed reports whether the mask and the bitmask let element i through.
__device__ __forceinline__ bool gb_allowed(const gb_processor& pc, gb_u32 i) {
    return ((gb_mask_word(pc, i) >> (i & 31u)) & 1u) != 0u;
}

// gb_processed is the processed logit x' of element i.
__device__ __forceinline__ float gb_processed(const gb_processor& pc, float x, gb_u32 i) {
    x = gb_unmasked(pc, x, i);
    return gb_allowed(pc, i) ? x : -gb_inf();
}

// gb_mask_pair is a group's two words of allowed bits as loaded: the mask's and the
// bitmask's, each all ones for a row without it or past end. The scans load a group's
// pair with its logits, a trip ahead, and take the AND (gb_mask_bits) only where they
// process the group: taken at the load, the AND would make the trip wait there for the
// words it has just issued for the next trip.
struct gb_mask_pair {
    gb_u32 m, b;
};

// gb_group_mask_pair loads the pair of the group at g (g < end) or gives all ones.
__device__ __forceinline__ gb_mask_pair gb_group_mask_pair(const gb_processor& pc, gb_u32 g, gb_u32 end) {
    gb_mask_pair w;
    w.m = 0xFFFFFFFFu;
    w.b = 0xFFFFFFFFu;
    if (g < end) {
        if (pc.flags & GB_FLAG_MASK) {
            w.m = pc.mask[g >> 5];
        }
        if (pc.flags & GB_FLAG_BITMASK) {
            w.b = pc.bitmask[g >> 5];
        }
    }
    return w;
}

// gb_mask_bits is the word of allowed bits of a loaded pair.
__device__ __forceinline__ gb_u32 gb_mask_bits(gb_mask_pair w) {
    return w.m & w.b;
}

// gb_load_mask_words loads the mask pairs of a thread's G groups g, g + stride, ... (all
// ones without processors, or past end). A scan calls it right after it issues the
// groups' loads and before it uses any of them, so that the logits and the mask words
// are in flight together and a trip waits once, not once more per group.
template <bool PROC, int G>
__device__ __forceinline__ void gb_load_mask_words(const gb_processor& pc, gb_u32 g, gb_u32 stride, gb_u32 end,
                                                   gb_mask_pair mw[G]) {
#pragma unroll
    for (int i = 0; i < G; ++i) {
        if (PROC) {
            mw[i] = gb_group_mask_pair(pc, g + (gb_u32)i * stride, end);
        } else {
            mw[i].m = mw[i].b = 0xFFFFFFFFu;
        }
    }
}

// gb_masks_at_most reports a row whose processors are the mask and the bitmask at most:
// its processed logits are the logits or a select per element (gb_mask_group).
__device__ __forceinline__ bool gb_masks_at_most(const gb_processor& pc) {
    return (pc.flags & (GB_FLAG_BIAS | GB_FLAG_PENALTIES)) == 0u;
}

// gb_mask_arrays gives a masked row's two word arrays for loads without predicates:
// a row with one of them reads it twice (a word ANDed with itself is the word).
__device__ __forceinline__ void gb_mask_arrays(const gb_processor& pc, const gb_u32*& m, const gb_u32*& b) {
    m = (pc.flags & GB_FLAG_MASK) ? pc.mask : pc.bitmask;
    b = (pc.flags & GB_FLAG_BITMASK) ? pc.bitmask : pc.mask;
}

// gb_one_mask_array reports a masked row with one word array of the two (m == b in
// gb_mask_arrays), whose scans may load each word once.
__device__ __forceinline__ bool gb_one_mask_array(const gb_processor& pc) {
    return (pc.flags & (GB_FLAG_MASK | GB_FLAG_BITMASK)) != (GB_FLAG_MASK | GB_FLAG_BITMASK);
}

// gb_load_whole_mask_words is gb_load_mask_words for groups known to lie below end, from
// gb_mask_arrays (PROC) or all ones. ONE: m is the row's one array (gb_one_mask_array),
// and each pair takes its word as m and all ones as b.
template <bool PROC, int G, bool ONE = false>
__device__ __forceinline__ void gb_load_whole_mask_words(const gb_u32* m, const gb_u32* b, gb_u32 g, gb_u32 stride,
                                                         gb_mask_pair mw[G]) {
#pragma unroll
    for (int i = 0; i < G; ++i) {
        if (PROC) {
            mw[i].m = m[(g + (gb_u32)i * stride) >> 5];
            mw[i].b = ONE ? 0xFFFFFFFFu : b[(g + (gb_u32)i * stride) >> 5];
        } else {
            mw[i].m = mw[i].b = 0xFFFFFFFFu;
        }
    }
}

// gb_load_mask_bits is gb_load_mask_words for a scan that uses the words in the trip that
// loads them, after its logits: the AND waits no longer there, and one word a group keeps
// fewer registers than the pair (the categorical and shard_select kernels spill).
template <int G>
__device__ __forceinline__ void gb_load_mask_bits(const gb_processor& pc, gb_u32 g, gb_u32 stride, gb_u32 end,
                                                  gb_u32 mw[G]) {
#pragma unroll
    for (int i = 0; i < G; ++i) {
        mw[i] = gb_mask_bits(gb_group_mask_pair(pc, g + (gb_u32)i * stride, end));
    }
}

// gb_sum4 is the sum of a group's four values in a fixed order: finite only when all four
// are, NaN or +Inf when one of them is NaN or +Inf (or when finite values overflow).
__device__ __forceinline__ float gb_sum4(const float x[4]) {
    return __fadd_rn(__fadd_rn(x[0], x[1]), __fadd_rn(x[2], x[3]));
}

// gb_mask_select writes the group's processed logits for a row whose only processors are
// masks: each logit where its bit of mword allows it (bits g mod 32 to g mod 32 + 3), -Inf
// elsewhere. xp may be x.
__device__ __forceinline__ void gb_mask_select(gb_u32 mword, gb_u32 g, const float x[4], float xp[4]) {
    const gb_u32 bits = (mword >> (g & 31u)) & 0xFu;
#pragma unroll
    for (gb_u32 j = 0; j < 4u; ++j) {
        xp[j] = ((bits >> j) & 1u) != 0u ? x[j] : -gb_inf();
    }
}

// gb_mask_group is gb_process_group_w for a row whose only processors are masks (a
// grammar's bitmask, allowed and banned tokens): a select per element (gb_mask_select),
// and the observations settled by one test of the logits when all four are finite. xp
// may be x: the observations read the logits first. The logits past n are already -Inf (gb_load_group) and stay so whatever their bits, so the
// group's four bits serve unclipped: no clip to n in every trip of every masked scan.
__device__ __forceinline__ gb_u32 gb_mask_group(gb_u32 mword, gb_u32 g, gb_u32 n, const float x[4], float xp[4]) {
    const gb_u32 bits = (mword >> (g & 31u)) & 0xFu;
    gb_u32 f;
    if (n == 4u && fabsf(gb_sum4(x)) < gb_inf()) {
        f = bits != 0u ? GB_SEEN_FINITE : 0u;
    } else {
        f = 0u;
#pragma unroll
        for (gb_u32 j = 0; j < 4u; ++j) {
            if (j < n) {
                const gb_u32 s = gb_seen(x[j]);
                f |= ((bits >> j) & 1u) != 0u ? s : s & GB_SEEN_NONFINITE;
            }
        }
    }
    gb_mask_select(mword, g, x, xp);
    return f;
}

// gb_process_group_w writes the processed logits of the n elements g..g+3 (g a multiple
// of 4, so one mask word, mword, holds all four; x as gb_load_group leaves it, -Inf past
// n) to xp, -Inf past n, and returns their observations: NaN or +Inf is taken before the
// mask, a finite logit after it (ABI.md).
__device__ __forceinline__ gb_u32 gb_process_group_w(const gb_processor& pc, gb_u32 mword, gb_u32 g, gb_u32 n,
                                                     const float x[4], float xp[4]) {
    if (!(pc.flags & (GB_FLAG_BIAS | GB_FLAG_PENALTIES))) {
        return gb_mask_group(mword, g, n, x, xp);
    }
    gb_u32 f = 0u;
#pragma unroll
    for (gb_u32 j = 0; j < 4u; ++j) {
        float v = -gb_inf();
        if (j < n) {
            v = gb_unmasked(pc, x[j], g + j);
            const gb_u32 fj = gb_seen(v);
            if ((mword >> ((g + j) & 31u)) & 1u) {
                f |= fj;
            } else {
                f |= fj & GB_SEEN_NONFINITE;
                v = -gb_inf();
            }
        }
        xp[j] = v;
    }
    return f;
}

// gb_process_group is gb_process_group_w reading the group's mask word itself.
__device__ __forceinline__ gb_u32 gb_process_group(const gb_processor& pc, gb_u32 g, gb_u32 n, const float x[4],
                                                   float xp[4]) {
    return gb_process_group_w(pc, n != 0u ? gb_mask_word(pc, g) : 0xFFFFFFFFu, g, n, x, xp);
}

// gb_load_processed reads a group like gb_load_group and replaces it by its processed
// logits when the row has processors (pc.flags is the same for the whole block).
template <int KIND>
__device__ __forceinline__ gb_u32 gb_load_processed(const typename gb_io<KIND>::elem* row, gb_u32 g, gb_u32 end,
                                                    bool vec, const gb_processor& pc, float x[4]) {
    const gb_u32 n = gb_load_group<KIND>(row, g, end, vec, x);
    if (pc.flags != 0u) {
        gb_process_group(pc, g, n, x, x);
    }
    return n;
}

// gb_group_seen returns the observations of a group of n elements. A finite sum of four
// elements proves all four finite, which settles the common case in three additions.
__device__ __forceinline__ gb_u32 gb_group_seen(const float x[4], gb_u32 n) {
    if (n == 4u && fabsf(gb_sum4(x)) < gb_inf()) {
        return GB_SEEN_FINITE;
    }
    gb_u32 f = 0u;
#pragma unroll
    for (gb_u32 j = 0; j < 4u; ++j) {
        if (j < n) {
            f |= gb_seen(x[j]);
        }
    }
    return f;
}
