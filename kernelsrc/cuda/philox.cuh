// Philox4x32-10 and the Gumbel noise of the stream contract (package philox), value for
// value, and the bounds of the noise that let a scan skip elements that cannot win.

// A lower bound of philox.Gumbel: E is largest for w = 2^32 - 1, where 1 - u = 2^-33 and
// E = 33 ln 2, so g >= -log(33 ln 2) = -3.1301; the margin covers the float32 logarithms.
#define GB_MIN_GUMBEL -3.2f

// gb_philox is philox.Block: Philox4x32-10 of the counter (c0, c1, c2, c3) under the key
// (k0, k1).
__device__ __forceinline__ void gb_philox(gb_u32 c0, gb_u32 c1, gb_u32 c2, gb_u32 c3, gb_u32 k0,
                                          gb_u32 k1, gb_u32 out[4]) {
#pragma unroll
    for (int r = 0; r < 10; ++r) {
        if (r > 0) {
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        gb_u32 hi0 = __umulhi(0xD2511F53u, c0);
        gb_u32 lo0 = 0xD2511F53u * c0;
        gb_u32 hi1 = __umulhi(0xCD9E8D57u, c2);
        gb_u32 lo1 = 0xCD9E8D57u * c2;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

// gb_philox_groups runs the Philox blocks of G groups (counters c0[i], the rest shared)
// round by round together: the chains are independent, so their multiplies overlap
// instead of each waiting on the one before.
template <int G>
__device__ __forceinline__ void gb_philox_groups(const gb_u32 c0[G], gb_u32 c1, gb_u32 c2, gb_u32 c3,
                                                 gb_u32 k0, gb_u32 k1, gb_u32 out[G][4]) {
    gb_u32 s[G][4];
#pragma unroll
    for (int i = 0; i < G; ++i) {
        s[i][0] = c0[i];
        s[i][1] = c1;
        s[i][2] = c2;
        s[i][3] = c3;
    }
#pragma unroll
    for (int r = 0; r < 10; ++r) {
        if (r > 0) {
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
#pragma unroll
        for (int i = 0; i < G; ++i) {
            gb_u32 hi0 = __umulhi(0xD2511F53u, s[i][0]);
            gb_u32 lo0 = 0xD2511F53u * s[i][0];
            gb_u32 hi1 = __umulhi(0xCD9E8D57u, s[i][2]);
            gb_u32 lo1 = 0xCD9E8D57u * s[i][2];
            s[i][0] = hi1 ^ s[i][1] ^ k0;
            s[i][1] = lo1;
            s[i][2] = hi0 ^ s[i][3] ^ k1;
            s[i][3] = lo0;
        }
    }
#pragma unroll
    for (int i = 0; i < G; ++i) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            out[i][j] = s[i][j];
        }
    }
}

// gb_one_minus_u is 1 - u for a main word w >= 2^31, as philox.Exponential forms it.
__device__ __forceinline__ float gb_one_minus_u(gb_u32 w) {
    return __fmul_rn(__fadd_rn((float)(~w), 0.5f), GB_TWO_POW_M32);
}

// gb_exponential is philox.Exponential: the Exp(1) variate of main word w and tail word.
__device__ __forceinline__ float gb_exponential(gb_u32 w, gb_u32 tail) {
    if (w >= 0x80000000u) {
        return -logf(gb_one_minus_u(w));
    }
    float u;
    if (w < GB_TAIL_THRESHOLD) {
        float frac = __fmul_rn(__fadd_rn((float)tail, 0.5f), GB_TWO_POW_M32);
        u = __fmul_rn(__fadd_rn((float)w, frac), GB_TWO_POW_M32);
    } else {
        u = __fmul_rn(__fadd_rn((float)w, 0.5f), GB_TWO_POW_M32);
    }
    return -log1pf(-u);
}

// gb_gumbel is philox.Gumbel.
__device__ __forceinline__ float gb_gumbel(gb_u32 w, gb_u32 tail) { return -logf(gb_exponential(w, tail)); }

// gb_log2_approx is log2(x) for gb_noise_bound, which allows for its error: the hardware
// approximation where there is one (lg2.approx, an absolute error near 2^-22), log2f
// elsewhere.
__device__ __forceinline__ float gb_log2_approx(float x) {
#if GB_NVIDIA
    float r;
    asm("lg2.approx.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
#else
    return log2f(x);
#endif
}

// GB_NOISE_SLACK is gb_noise_bound's margin: it covers the fast logarithms' errors (below
// 1e-5 there) and the last-place errors of any edition's float32 logarithms in
// philox.Gumbel many times over.
#define GB_NOISE_SLACK 2e-3f

// gb_noise_bound is an upper bound of philox.Gumbel(w, t) for every tail word t, from the
// main word alone, GB_NOISE_SLACK above the noise and at most u^3 / 2 more (u = w 2^-32,
// below 1/2). gb_cheap_bound's steps sit up to a few units above the noise (0.37 for every
// w >= 2^31, whose noise runs down to -3.13), so where a scan's gate lets many groups
// through (topn's perturbed scan: the gate is the block's N-th score, not its best),
// this one saves most of their logarithms, for two fast logarithms an element and no
// branch. gumbel_argmax keeps the cheap steps: past its first trips they settle nearly
// every element in fewer instructions (docs/performance-notes.md).
//  - w >= 2^31: 1 - u is gb_exponential's own (gb_one_minus_u), and E = -log(1 - u) to
//    the fast logarithm's error.
//  - w < 2^31: gb_exponential's u is fl(fl(w) + f) 2^-32 with f in (0, 1) (the tail's
//    fraction below 2^24, else 1/2), never below v = fl(w) 2^-32; E = -log1p(-u) = u +
//    u^2/2 + u^3/3 + ..., so the first three terms at v bound it from below, and the rest
//    adds at most u^4 / (4 (1 - u)) <= u^4 / 2. w = 0 bounds E by 0: the bound is +Inf.
__device__ __forceinline__ float gb_noise_bound(gb_u32 w) {
    const float ln2 = 0.69314718f;
    const bool upper = w >= 0x80000000u;
    const float omu = gb_one_minus_u(w);
    const float v = __fmul_rn((float)w, GB_TWO_POW_M32);
    const float series = __fmul_rn(v, __fadd_rn(1.0f, __fmul_rn(v, __fadd_rn(0.5f, __fmul_rn(v, 0.33333331f)))));
    const float l = gb_log2_approx(upper ? omu : 1.0f);
    const float e = upper ? __fmul_rn(l, -ln2) : series;
    return __fadd_rn(__fmul_rn(gb_log2_approx(e), -ln2), GB_NOISE_SLACK);
}

// gb_gumbel_bound is an upper bound of gb_gumbel(w, any tail) read from the main word
// alone, so an element far below the best score skips its logarithms. With c leading zero
// bits, w >= 2^(31-c), so u >= 2^-(c+1), E = -log1p(-u) >= u and g = -log(E) <= (c+1) ln 2;
// for w >= 2^31, 1-u <= 1/2 gives E >= ln 2 and g <= -log(ln 2) < 0.367. The 1e-3 margin
// covers the last-place errors of the float32 logarithms many times over; w = 0 falls back
// to MaxGumbel. Skipping on it never changes a result: a skipped score is provably below
// a score already reached.
__device__ __forceinline__ float gb_gumbel_bound(gb_u32 w) {
    if (w >= 0x80000000u) {
        return 0.37f;
    }
    if (w == 0u) {
        return GB_MAX_GUMBEL;
    }
    return __fadd_rn(__fmul_rn((float)(__clz((int)w) + 1), 0.69314718f), 1e-3f);
}

// gb_cheap_bound is gb_gumbel_bound without its leading-zero count for the words nearly
// every element has, in steps that each hold at least the largest gb_gumbel_bound of
// their range: w >= 2^31 (0.37), w >= 2^30 (2 ln 2 + 1e-3), w >= 2^28 (4 ln 2 + 1e-3),
// w >= 2^24 (8 ln 2 + 1e-3); only the rare smaller words pay for the exact bound. The
// steps between 2^24 and 2^31 matter once the bound has risen past the body of the row:
// a single step there (8 ln 2 for all of them) leaves about 1% of the elements needing
// their logarithms, and in a warp of 32 lanes that is a branch taken most of the time.
__device__ __forceinline__ float gb_cheap_bound(gb_u32 w) {
    if (w >= 0x80000000u) {
        return 0.37f;
    }
    if (w >= 0x40000000u) {
        return 1.3873f; // 2 ln 2 = 1.3863
    }
    if (w >= 0x10000000u) {
        return 2.7736f; // 4 ln 2 = 2.7726
    }
    if (w >= GB_TAIL_THRESHOLD) {
        return 5.5462f; // 8 ln 2 = 5.5452
    }
    return gb_gumbel_bound(w);
}
