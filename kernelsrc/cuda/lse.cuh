// Online log-sum-exps for the log-probability records (ABI.md, "The log-probability
// record"): a running reference and rescaled sum per thread, merged per warp, block and
// across blocks, and the log-probabilities taken from them.

#if GB_NVIDIA
// gb_exp2_fast is 2^x by the hardware approximation (PTX ex2.approx: relative error about
// 2^-22, within the ABI's 2^-20 for log-sum-exps; results below 2^-126 flush to 0, which
// no sum of terms of at least 1 notices). hip_prelude.h and the emulation bring their own.
__device__ __forceinline__ float gb_exp2_fast(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// gb_log_fast is ln x for a log-sum-exp's sum (at least 1 for a non-empty set, 0 for an
// empty one): PTX lg2.approx (absolute error at most 2^-22.6 in log2 x, so under 1.1e-7
// in ln x) times ln 2. The record's logarithms are the last arithmetic of a draw, on its
// critical path in one warp of one block, where logf's range reduction and polynomial
// would count in full. HIP and the emulation bring their own (logf and a double log).
__device__ __forceinline__ float gb_log_fast(float x) {
    float y;
    asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return __fmul_rn(y, 0.693147180559945309f);
}
#endif

#define GB_LOG2E 1.44269504088896340736f

// gb_lse is an online log-sum-exp: a reference m and s = Σ exp(v - m) over the members.
// m is a member (-FLT_MAX with s = 0 while the set is empty, see gb_lse_init), and no
// member exceeds it by more than GB_LSE_SLACK: gb_lse_add4 moves m to a group's largest
// value only when that value passes m + slack, so the rescale (one more exponential) is
// paid about once per thread, not at every group that raises the maximum, as it would if
// m had to be the maximum. Each member costs a subtraction, a multiplication and one
// exponential, 2^(fl(v - m) · log2 e); the difference comes first so that no product overflows (|m|
// may be near FLT_MAX), and the exponential, a special-function instruction, is the cost
// that counts. Merges (gb_lse_merge, gb_lse_rescale) keep the larger reference and scale
// the other sum down, so the invariant holds for merged sets too.
struct gb_lse {
    float m, s;
};

// GB_LSE_SLACK bounds a member's excess over its set's reference: each term is at most
// e^32 (about 7.9e13), so even 2^32 of them sum to about 3.4e23, far below FLT_MAX, and a
// float sum keeps its relative precision whatever the scale.
#define GB_LSE_SLACK 32.0f

// gb_lse_init empties a. The empty reference is -FLT_MAX, not -Inf, so that a -Inf
// member adds 2^(-Inf - -FLT_MAX) = 0 rather than the NaN of -Inf - -Inf: gb_lse_add4 then
// needs no test for empty groups, and every finite group moves the reference of an empty
// set (-FLT_MAX + slack rounds to -FLT_MAX). The log-sum-exp of the empty set still
// comes out -Inf: -FLT_MAX + log 0.
__device__ __forceinline__ void gb_lse_init(gb_lse& a) {
    a.m = -3.40282347e38f;
    a.s = 0.0f;
}

// gb_exp_diff is exp(v - m) for v <= m + GB_LSE_SLACK (0 for v = -Inf).
__device__ __forceinline__ float gb_exp_diff(float v, float m) {
    return gb_exp2_fast(__fmul_rn(__fadd_rn(v, -m), GB_LOG2E));
}

// gb_lse_add4 adds the four values v, whose largest (NaN ignored) is gm; -Inf members
// add nothing. A NaN or +Inf member spoils the sum, but such a row ends with status 1,
// whose record is NaN whatever the sum. It has no branch around it (the rescale is
// short enough to predicate), so that the compiler can interleave its exponentials with
// the scan's other work instead of fencing them into a basic block of their own.
__device__ __forceinline__ void gb_lse_add4(gb_lse& a, const float v[4], float gm) {
    if (gm > __fadd_rn(a.m, GB_LSE_SLACK)) {
        a.s = __fmul_rn(a.s, gb_exp_diff(a.m, gm)); // 0 · 0 while empty
        a.m = gm;
    }
    // The four terms are independent; summed in pairs, only one addition per group waits
    // on the running sum.
    const float e01 = __fadd_rn(gb_exp_diff(v[0], a.m), gb_exp_diff(v[1], a.m));
    const float e23 = __fadd_rn(gb_exp_diff(v[2], a.m), gb_exp_diff(v[3], a.m));
    a.s = __fadd_rn(a.s, __fadd_rn(e01, e23));
}

// gb_lse_seen is the observations (gb_seen) of the members gb_lse_add4 took in, read off
// the sum instead of tested per group: a NaN or +Inf member leaves it NaN for good (its
// term, or the next terms against a reference of +Inf), and a finite member makes it at
// least 1 (its group's largest is a member or the reference). With a NaN or +Inf member
// it does not say whether a finite one came too, which a row with NaN or +Inf never
// needs. Only for members taken as they are: a product that overflows to +Inf is a
// finite logit.
__device__ __forceinline__ gb_u32 gb_lse_seen(const gb_lse& a) {
    return a.s != a.s ? GB_SEEN_NONFINITE : a.s > 0.0f ? GB_SEEN_FINITE : 0u;
}

// gb_lse_merge adds the members of the pair (m, s) to a.
__device__ __forceinline__ void gb_lse_merge(gb_lse& a, float m, float s) {
    if (!(m > -gb_inf())) {
        return; // empty
    }
    if (m > a.m) {
        a.s = __fadd_rn(__fmul_rn(a.s, gb_exp_diff(a.m, m)), s);
        a.m = m;
    } else {
        a.s = __fadd_rn(a.s, __fmul_rn(s, gb_exp_diff(m, a.m)));
    }
}

// gb_lse_pack is the partials word of ABI.md: the max in the low half, the sum in the high.
__device__ __forceinline__ gb_u64 gb_lse_pack(const gb_lse& a) {
    return ((gb_u64)__float_as_uint(a.s) << 32) | __float_as_uint(a.m);
}

__device__ __forceinline__ void gb_lse_merge_packed(gb_lse& a, gb_u64 w) {
    gb_lse_merge(a, __uint_as_float((gb_u32)w), __uint_as_float((gb_u32)(w >> 32)));
}

// gb_lse_rescale sets a.m to the warp's largest reference and returns a.s rescaled to it
// (every lane gets the same m): one warp max and one exponential, after which merging is
// plain addition. A lane that holds that reference (or nothing, when the whole warp is
// empty) keeps its sum as it is.
__device__ __forceinline__ float gb_lse_rescale(gb_lse& a) {
    const float m = gb_warp_max_f32_all(a.m);
    const float s = a.m == m ? a.s : __fmul_rn(a.s, gb_exp_diff(a.m, m));
    a.m = m;
    return s;
}

// gb_warp_lse2 leaves in lane 0 the warp's merge of a (and of b when two is set): the
// chain is one max, one exponential and a tree of additions, not an exponential per
// level of the tree. Only lane 0's sums are exact (shfl_down returns a lane its own value
// past the warp's end, and lane 0's tree never reads there).
__device__ __forceinline__ void gb_warp_lse2(gb_lse& a, gb_lse& b, bool two) {
    float sa = gb_lse_rescale(a);
    float sb = two ? gb_lse_rescale(b) : 0.0f;
    // The two trees interleaved, level by level.
    for (int d = GB_WARP_SIZE / 2; d > 0; d >>= 1) {
        sa = __fadd_rn(sa, gb_shfl_down_f32(sa, d));
        if (two) {
            sb = __fadd_rn(sb, gb_shfl_down_f32(sb, d));
        }
    }
    a.s = sa;
    if (two) {
        b.s = sb;
    }
}

__device__ __forceinline__ gb_lse gb_lse_unpack(gb_u64 w) {
    gb_lse a;
    a.m = __uint_as_float((gb_u32)w);
    a.s = __uint_as_float((gb_u32)(w >> 32));
    return a;
}

// gb_block_lse leaves in thread 0 the block's merge of a (and of b when two is set; two
// must be the same for the whole block; a and b may be one variable when it is clear).
// s_pair holds 2 * GB_MAX_WARPS words. The warps' results meet in one round of shared
// memory, which warp 0 merges as a warp merges its lanes.
__device__ __forceinline__ void gb_block_lse(gb_lse& a, gb_lse& b, bool two, gb_u64* s_pair) {
    gb_warp_lse2(a, b, two);
    if (gb_lane() == 0u) {
        s_pair[2u * gb_warp()] = gb_lse_pack(a);
        if (two) {
            s_pair[2u * gb_warp() + 1u] = gb_lse_pack(b);
        }
    }
    __syncthreads();
    if (gb_warp() == 0u) {
        const bool have = gb_lane() < gb_num_warps();
        gb_lse e;
        gb_lse_init(e);
        a = have ? gb_lse_unpack(s_pair[2u * gb_lane()]) : e;
        if (two) {
            b = have ? gb_lse_unpack(s_pair[2u * gb_lane() + 1u]) : e;
        }
        gb_warp_lse2(a, b, two);
    }
    __syncthreads();
}

// gb_lse_logprob returns v - LSE for the set (m, s), and the LSE itself in lse. The
// difference is taken from m, fl(fl(v - m) - log s): subtracting the float32 LSE would
// cancel wherever |m| is large (a logit pushed near 2^29 by a frequency penalty, say),
// where fl(m + log s) rounds back to m and every log-probability would read 0 (m is
// within GB_LSE_SLACK of the set's maximum, so log s stays small). A set whose reference
// is not finite follows IEEE arithmetic on the LSE (ABI.md): -Inf for a set with no
// members, +Inf for one holding +Inf (a scaled logit may overflow; its sum is NaN by then).
__device__ __forceinline__ float gb_lse_logprob(float v, float m, float s, float& lse) {
    if (!(m > -gb_inf()) || m == gb_inf()) {
        lse = m > -gb_inf() ? m : -gb_inf();
        return __fadd_rn(v, -lse);
    }
    const float l = gb_log_fast(s);
    lse = __fadd_rn(m, l);
    return __fadd_rn(__fadd_rn(v, -m), -l);
}

// GB_LSE_EMPTY_WORD is gb_lse_pack of the empty set (gb_lse_init: -FLT_MAX, 0).
#define GB_LSE_EMPTY_WORD 0x00000000FF7FFFFFull
