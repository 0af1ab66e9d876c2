// Philox4x32-10 (Salmon et al., SC'11) and the noise of package philox's stream
// contract, bit for bit: each line of the noise is one float32 operation, rounded, as in
// the Go edition. log1p is not in every MSL version, so gb_log1p_neg_half computes it in
// double-float arithmetic and rounds once, which agrees with the Go edition's
// float32(math.Log1p(float64(x))) except where the exact value lies within about 2^-45 of
// a rounding boundary (kernelsrc/mslemu checks it against log1p in double and long
// double).

constant float GB_TWO_POW_M32 = 2.3283064e-10f;  // 2^-32, exact

inline uint4 gb_philox(uint4 c, uint k0, uint k1) {
    for (int r = 0; r < 10; ++r) {
        if (r > 0) {
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        uint hi0 = mulhi(0xD2511F53u, c.x);
        uint lo0 = 0xD2511F53u * c.x;
        uint hi1 = mulhi(0xCD9E8D57u, c.z);
        uint lo1 = 0xCD9E8D57u * c.z;
        c = uint4(hi1 ^ c.y ^ k0, lo1, hi0 ^ c.w ^ k1, lo0);
    }
    return c;
}

// The (seed, step) pair of one draw of one row.
struct gb_stream {
    uint seed_lo;
    uint seed_hi;
    uint step_lo;
    uint step_hi;
};

inline gb_stream gb_stream_of(thread const gb_row_params& p, uint draw) {
    ulong step = gb_step_plus(p, draw);
    return gb_stream{p.seed_lo, p.seed_hi, uint(step), uint(step >> 32)};
}

// The block holding the words of elements 4*group .. 4*group+3 for one purpose.
inline uint4 gb_philox_block(gb_stream st, uint group, uint purpose) {
    return gb_philox(uint4(group, st.step_lo, st.step_hi, purpose), st.seed_lo, st.seed_hi);
}

// philox.CategoricalUniform64: the 64-bit uniform of a categorical draw.
inline ulong gb_categorical_uniform(gb_stream st) {
    uint4 ub = gb_philox(uint4(0u, st.step_lo, st.step_hi, GB_PURPOSE_CATEGORICAL), st.seed_lo, st.seed_hi);
    return gb_join_u64(ub.x, ub.y);
}

// ---------------------------------------------------------------------------------------
// Double-float helpers: a value is hi + lo with |lo| <= ulp(hi)/2. Each operation is its
// own statement so that no compiler may fuse or reorder it.

inline void gb_two_sum(float a, float b, thread float& s, thread float& e) {
    s = a + b;
    float bb = s - a;
    float t1 = s - bb;
    float t2 = a - t1;
    float t3 = b - bb;
    e = t2 + t3;
}

// Requires |a| >= |b| (or a == 0).
inline void gb_fast_two_sum(float a, float b, thread float& s, thread float& e) {
    s = a + b;
    float t = s - a;
    e = b - t;
}

// (ah, al) * b.
inline void gb_dd_mul_f(float ah, float al, float b, thread float& rh, thread float& rl) {
    float p = ah * b;
    float e = fma(ah, b, -p);
    float t = al * b;
    e = e + t;
    gb_fast_two_sum(p, e, rh, rl);
}

// (ah, al) * (bh, bl).
inline void gb_dd_mul(float ah, float al, float bh, float bl, thread float& rh, thread float& rl) {
    float p = ah * bh;
    float e = fma(ah, bh, -p);
    float t1 = ah * bl;
    float t2 = al * bh;
    float t3 = t1 + t2;
    e = e + t3;
    gb_fast_two_sum(p, e, rh, rl);
}

// (ah, al) + (bh, bl), the accurate form (valid for operands of either sign).
inline void gb_dd_add(float ah, float al, float bh, float bl, thread float& rh, thread float& rl) {
    float sh, sl, th, tl;
    gb_two_sum(ah, bh, sh, sl);
    gb_two_sum(al, bl, th, tl);
    sl = sl + th;
    float uh, ul;
    gb_fast_two_sum(sh, sl, uh, ul);
    ul = ul + tl;
    gb_fast_two_sum(uh, ul, rh, rl);
}

// log1p(x) for x in [-1/2, -2^-65] (the noise's domain) and 0, rounded once from a
// double-float value good to about 2^-46 relative.
//
// 1 + x = 2^k * (1 + f) with 1 + f in [sqrt(1/2), sqrt(2)): f = x (k = 0) or f = 1 + 2x
// (k = -1), both exact. Then log1p(f) = 2 atanh(s), s = f / (2 + f), |s| <= 0.1716, so
// 2 atanh(s) = 2s + s z (2/3 + z (2/5 + z (2/7 + z D))) with z = s^2; the leading terms
// are carried in double-float, D (whose share of the result is below 2^-23) in float.
inline float gb_log1p_neg_half(float x) {
    if (x == 0.0f) {
        return x;
    }
    bool halve = x < -0.29289323f;
    float f;
    if (halve) {
        float twice = x + x;
        f = 1.0f + twice;
    } else {
        f = x;
    }
    if (f == 0.0f) {
        return -0.6931472f;  // x = -1/2: log(1/2) rounded
    }
    // s = f / (2 + f) in double-float.
    float dh, dl;
    gb_fast_two_sum(2.0f, f, dh, dl);
    float sh = f / dh;
    float r = fma(-sh, dh, f);
    r = fma(-sh, dl, r);
    float sl = r / dh;
    // z = s^2.
    float zh, zl;
    gb_dd_mul(sh, sl, sh, sl, zh, zl);
    // D = 2/9 + z (2/11 + z (2/13 + z (2/15 + z 2/17))) in float.
    float d = 0.11764706f;
    d = d * zh;
    d = d + 0.13333334f;
    d = d * zh;
    d = d + 0.15384616f;
    d = d * zh;
    d = d + 0.18181819f;
    d = d * zh;
    d = d + 0.22222222f;
    // C = 2/7 + z D, B = 2/5 + z C, A = 2/3 + z B in double-float.
    float ph, pl, ch, cl, bh, bl, ah, al;
    gb_dd_mul_f(zh, zl, d, ph, pl);
    gb_dd_add(0.2857143f, -1.2772424e-08f, ph, pl, ch, cl);
    gb_dd_mul(zh, zl, ch, cl, ph, pl);
    gb_dd_add(0.4f, -5.9604646e-09f, ph, pl, bh, bl);
    gb_dd_mul(zh, zl, bh, bl, ph, pl);
    gb_dd_add(0.6666667f, -1.9868216e-08f, ph, pl, ah, al);
    // log1p(f) = 2s + s z A.
    float szh, szl, th, tl, lh, ll;
    gb_dd_mul(sh, sl, zh, zl, szh, szl);
    gb_dd_mul(szh, szl, ah, al, th, tl);
    float s2h = sh + sh;
    float s2l = sl + sl;
    gb_dd_add(s2h, s2l, th, tl, lh, ll);
    if (halve) {
        float rh, rl;
        gb_dd_add(-0.6931472f, 1.9046542e-09f, lh, ll, rh, rl);
        return rh;
    }
    float rh, rl;
    gb_fast_two_sum(lh, ll, rh, rl);
    return rh;
}

// ---------------------------------------------------------------------------------------
// The noise.

// philox.Exponential: the Exp(1) variate of an element from its main word w and, when
// w < GB_TAIL_THRESHOLD, its tail word.
inline float gb_exponential(uint w, uint tail) {
    if (w >= 0x80000000u) {
        float c = float(~w);
        float c2 = c + 0.5f;
        float one_minus_u = c2 * GB_TWO_POW_M32;
        return -precise::log(one_minus_u);
    }
    float u;
    if (w < GB_TAIL_THRESHOLD) {
        float t = float(tail);
        float t2 = t + 0.5f;
        float frac = t2 * GB_TWO_POW_M32;
        float wf = float(w);
        float s = wf + frac;
        u = s * GB_TWO_POW_M32;
    } else {
        float wf = float(w);
        float s = wf + 0.5f;
        u = s * GB_TWO_POW_M32;
    }
    return -gb_log1p_neg_half(-u);
}

// philox.Gumbel.
inline float gb_gumbel(uint w, uint tail) {
    float e = gb_exponential(w, tail);
    return -precise::log(e);
}

// The Philox words of one group of four elements, drawn when first needed: the bound
// skips most elements of a Gumbel row, and only main words below GB_TAIL_THRESHOLD (one
// in 256) need the tail block.
struct gb_group_words {
    uint4 main_words;
    uint4 tail_words;
    bool have_main;
    bool have_tail;
};

inline gb_group_words gb_group_words_empty() {
    return gb_group_words{uint4(0u, 0u, 0u, 0u), uint4(0u, 0u, 0u, 0u), false, false};
}

// The Gumbel noise of element j of group (elements 4*group + j).
inline float gb_group_gumbel(thread gb_group_words& g, gb_stream st, uint group, uint j) {
    if (!g.have_main) {
        g.main_words = gb_philox_block(st, group, GB_PURPOSE_GUMBEL);
        g.have_main = true;
    }
    uint w = g.main_words[j];
    uint tail = 0u;
    if (w < GB_TAIL_THRESHOLD) {
        if (!g.have_tail) {
            g.tail_words = gb_philox_block(st, group, GB_PURPOSE_GUMBEL_TAIL);
            g.have_tail = true;
        }
        tail = g.tail_words[j];
    }
    return gb_gumbel(w, tail);
}
