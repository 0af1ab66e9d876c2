// The Metal Shading Language edition of gumbel's sampling kernels. ABI.md is the
// contract (names, arguments, RowParams, status codes, arithmetic); package philox is the
// random stream and its noise; kernelsrc/gokernel is the reference this file matches.
//
// One source compiles under MSL 2.4 to 3.2: bfloat16 and float16 logits are decoded from
// their raw 16-bit patterns with integer operations, so no native bfloat type is needed,
// and the optional device-scope fence is used only where the language has it.
//
// Numerics. The host compiles with MTLMathModeSafe (fastMathEnabled = NO), and every
// rounding the ABI names is a statement of its own: safe mode only contracts a*b+c into
// a fused multiply-add within one statement, and the pragma below turns even that off.
// log and exp are precise::log and precise::exp (Apple documents 1 ulp, not correct
// rounding: a last-place difference from the Go edition is the one way this edition may
// disagree with it, as ABI.md allows). log1p is not in every MSL version, so
// log1p_neg_half below computes it in double-float arithmetic and rounds once, which
// agrees with the Go edition's float32(math.Log1p(float64(x))) except where the exact
// value lies within about 2^-45 of a rounding boundary. The log-sum-exps of the
// log-probability records (ABI version 2) use fast::exp, which ABI.md allows (relative
// error up to 2^-20; records agree with other editions to about 1e-5, not bit for bit).
// The repetition penalty's division goes through div_rn, correctly rounded whatever the
// precision of Metal's division.
//
// Launch shape. Threadgroups are 1-D of T threads, T a multiple of the SIMD-group width
// (32 on every Apple GPU; any power of two from 8 to 64 works) and at most 1024. The
// grid is (S, n, D) for gumbel_argmax, (1, n, D) for categorical and (S, n, 1) for topn;
// threadgroup (x, y, z) works on launch row y, draw z (ABI.md, version 2).
//
// Arguments bind at the index of their ABI position: buffers with setBuffer, row_stride
// (6) and vocab (7) with setBytes. Every device-side write that another threadgroup of
// the same launch reads back (partials, counters, tokens) goes through 32-bit atomics:
// Metal has no 64-bit device atomics before MSL 3.1 and none that every GPU supports, and
// a word touched only by atomics is never read from a stale cache line.

#include <metal_stdlib>
using namespace metal;

#pragma clang fp contract(off)

// ---------------------------------------------------------------------------------------
// ABI constants and the RowParams record.

// RowParams is one launch row's parameters: 16 little-endian 32-bit words (ABI.md).
struct RowParams {
    uint row;
    float temperature;
    uint seed_lo;
    uint seed_hi;
    uint step_lo;
    uint step_hi;
    uint top_k;
    float top_p;
    float min_p;
    uint flags;               // ROW_* below (version 2)
    float repetition_penalty;  // > 0, 1 = off
    float frequency_penalty;
    float presence_penalty;
    uint topn;  // N of the topn kernels, 1..20
    uint reserved[2];
};

constant int STATUS_OK = 0;
constant int STATUS_NONFINITE = 1;
constant int STATUS_NO_FINITE = 2;
constant int STATUS_BAD_PARAMS = 3;

// Row flags, ORed over the row: a NaN or +Inf was seen; a finite logit was seen.
constant uint FLAG_NONFINITE = 1u;
constant uint FLAG_FINITE = 2u;

// RowParams.flags (ABI.md, version 2).
constant uint ROW_LOGPROBS = 1u;
constant uint ROW_ADVANCE = 2u;
constant uint ROW_RECORD = 4u;
constant uint ROW_ROUTED = 8u;
constant uint ROW_CATEGORICAL = 16u;
constant uint ROW_BIAS = 32u;
constant uint ROW_MASK = 64u;
constant uint ROW_PENALTIES = 128u;
constant uint ROW_PERTURBED = 256u;
constant uint ROW_PROCESSING = ROW_BIAS | ROW_MASK | ROW_PENALTIES;

// topn keeps at most this many entries per row; its partials hold TOPN_STRIDE words per
// threadgroup (20 keys, the log-sum-exp pair, one unused).
#define TOPN_MAX 20u
#define TOPN_STRIDE 22u

// The most draws one launch may ask for (grid.z), as the Go edition.
constant uint MAX_DRAWS = 1u << 24;

// The largest count RECORD keeps (bit 31 marks a prompt token).
constant uint COUNT_MAX = 0x7FFFFFFFu;

// Purposes of the stream contract, version 1 (package philox).
constant uint PURPOSE_GUMBEL = 1u;
constant uint PURPOSE_GUMBEL_TAIL = 2u;
constant uint PURPOSE_CATEGORICAL = 3u;

// philox.TailThreshold and philox.MaxGumbel.
constant uint TAIL_THRESHOLD = 0x01000000u;
constant float MAX_GUMBEL = 45.1f;

// Threadgroups have at most 1024 threads and SIMD-groups at least 8 lanes (32 on Apple
// GPUs; Intel Macs have 8, 16 or 32, AMD 32 or 64): at most 128 SIMD-groups.
#define MAX_SIMDGROUPS 128

constant float TWO_POW_M32 = 2.3283064e-10f;  // 2^-32, exact
constant float TWO_POW_M24 = 5.9604645e-08f;  // 2^-24, exact

// ---------------------------------------------------------------------------------------
// Element decoding: every dtype becomes the exact float32 value of the element.

struct DTypeF32 {
    typedef float elem;
    static inline float decode(float v) { return v; }
};

// IEEE binary16 from its bits, exactly (subnormals included), without the half type.
struct DTypeF16 {
    typedef ushort elem;
    static inline float decode(ushort h) {
        uint bits = uint(h);
        uint sign = (bits & 0x8000u) << 16;
        uint e = (bits >> 10) & 0x1Fu;
        uint m = bits & 0x3FFu;
        if (e == 0u) {
            // Zero or subnormal: m * 2^-24, exact in float32.
            float v = float(m) * TWO_POW_M24;
            return as_type<float>(as_type<uint>(v) | sign);
        }
        if (e == 31u) {
            return as_type<float>(sign | 0x7F800000u | (m << 13));
        }
        return as_type<float>(sign | ((e + 112u) << 23) | (m << 13));
    }
};

// bfloat16 is the top half of a float32.
struct DTypeBF16 {
    typedef ushort elem;
    static inline float decode(ushort b) { return as_type<float>(uint(b) << 16); }
};

// ---------------------------------------------------------------------------------------
// Order keys: a float's key orders like the float (-0 takes the key of +0, since equal
// floats must tie and go to the lowest index in every reduction order; NaN keys lie above
// +Inf or below -Inf by sign). The packed (score, index) key of gumbel_argmax puts the score key
// in the high half and 0xFFFFFFFF - index in the low half, so the largest packed value is
// the best score with the lowest index, whatever the reduction order.

inline uint order_key(float f) {
    uint b = as_type<uint>(f);
    if (b == 0x80000000u) {
        b = 0u;
    }
    return b ^ ((b >> 31) != 0u ? 0xFFFFFFFFu : 0x80000000u);
}

inline float key_to_float(uint k) {
    uint b = (k >> 31) != 0u ? (k ^ 0x80000000u) : ~k;
    return as_type<float>(b);
}

inline ulong pack_key(float score, uint index) {
    return (ulong(order_key(score)) << 32) | ulong(0xFFFFFFFFu - index);
}

inline ulong u64(uint lo, uint hi) { return (ulong(hi) << 32) | ulong(lo); }

// 64-bit min and max written out: MSL's integer min and max are not promised for 64-bit
// types in every language version.
inline ulong max_u64(ulong a, ulong b) { return a > b ? a : b; }
inline ulong min_u64(ulong a, ulong b) { return a < b ? a : b; }

// High 64 bits of the 128-bit product a*b.
inline ulong mul_hi64(ulong a, ulong b) {
    ulong a0 = a & 0xFFFFFFFFul;
    ulong a1 = a >> 32;
    ulong b0 = b & 0xFFFFFFFFul;
    ulong b1 = b >> 32;
    ulong p00 = a0 * b0;
    ulong p01 = a0 * b1;
    ulong p10 = a1 * b0;
    ulong p11 = a1 * b1;
    ulong mid = (p00 >> 32) + (p01 & 0xFFFFFFFFul) + (p10 & 0xFFFFFFFFul);
    return p11 + (p01 >> 32) + (p10 >> 32) + (mid >> 32);
}

// ---------------------------------------------------------------------------------------
// Philox4x32-10 (Salmon et al., SC'11) and the stream contract of package philox.

inline uint4 philox4x32_10(uint4 c, uint k0, uint k1) {
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

// Stream is the (seed, step) pair of one draw of one row: draw z uses step + z, mod 2^64.
struct Stream {
    uint seed_lo;
    uint seed_hi;
    uint step_lo;
    uint step_hi;
};

inline Stream stream_of(thread const RowParams& p, uint draw) {
    ulong step = u64(p.step_lo, p.step_hi) + ulong(draw);
    return Stream{p.seed_lo, p.seed_hi, uint(step), uint(step >> 32)};
}

// The block holding elements 4*group .. 4*group+3 for one purpose.
inline uint4 philox_block(Stream st, uint group, uint purpose) {
    return philox4x32_10(uint4(group, st.step_lo, st.step_hi, purpose), st.seed_lo, st.seed_hi);
}

// ---------------------------------------------------------------------------------------
// Double-float helpers: a value is hi + lo with |lo| <= ulp(hi)/2. Each operation is its
// own statement so that no compiler may fuse or reorder it.

inline void two_sum(float a, float b, thread float& s, thread float& e) {
    s = a + b;
    float bb = s - a;
    float t1 = s - bb;
    float t2 = a - t1;
    float t3 = b - bb;
    e = t2 + t3;
}

// Requires |a| >= |b| (or a == 0).
inline void fast_two_sum(float a, float b, thread float& s, thread float& e) {
    s = a + b;
    float t = s - a;
    e = b - t;
}

// (ah, al) * b.
inline void dd_mul_f(float ah, float al, float b, thread float& rh, thread float& rl) {
    float p = ah * b;
    float e = fma(ah, b, -p);
    float t = al * b;
    e = e + t;
    fast_two_sum(p, e, rh, rl);
}

// (ah, al) * (bh, bl).
inline void dd_mul(float ah, float al, float bh, float bl, thread float& rh, thread float& rl) {
    float p = ah * bh;
    float e = fma(ah, bh, -p);
    float t1 = ah * bl;
    float t2 = al * bh;
    float t3 = t1 + t2;
    e = e + t3;
    fast_two_sum(p, e, rh, rl);
}

// (ah, al) + (bh, bl), the accurate form (valid for operands of either sign).
inline void dd_add(float ah, float al, float bh, float bl, thread float& rh, thread float& rl) {
    float sh, sl, th, tl;
    two_sum(ah, bh, sh, sl);
    two_sum(al, bl, th, tl);
    sl = sl + th;
    float uh, ul;
    fast_two_sum(sh, sl, uh, ul);
    ul = ul + tl;
    fast_two_sum(uh, ul, rh, rl);
}

// log1p(x) for x in [-1/2, -2^-65] (the noise's domain) and 0, rounded once from a
// double-float value good to about 2^-46 relative. That is float32(log1p(x)) except
// where the exact value lies within that distance of a point halfway between two
// floats (kernelsrc/mslemu checks it against log1p in double and long double).
//
// 1 + x = 2^k * (1 + f) with 1 + f in [sqrt(1/2), sqrt(2)): f = x (k = 0) or f = 1 + 2x
// (k = -1), both exact. Then log1p(f) = 2 atanh(s), s = f / (2 + f), |s| <= 0.1716, so
// 2 atanh(s) = 2s + s z (2/3 + z (2/5 + z (2/7 + z D))) with z = s^2; the leading terms
// are carried in double-float, D (whose share of the result is below 2^-23) in float.
inline float log1p_neg_half(float x) {
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
    fast_two_sum(2.0f, f, dh, dl);
    float sh = f / dh;
    float r = fma(-sh, dh, f);
    r = fma(-sh, dl, r);
    float sl = r / dh;
    // z = s^2.
    float zh, zl;
    dd_mul(sh, sl, sh, sl, zh, zl);
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
    dd_mul_f(zh, zl, d, ph, pl);
    dd_add(0.2857143f, -1.2772424e-08f, ph, pl, ch, cl);
    dd_mul(zh, zl, ch, cl, ph, pl);
    dd_add(0.4f, -5.9604646e-09f, ph, pl, bh, bl);
    dd_mul(zh, zl, bh, bl, ph, pl);
    dd_add(0.6666667f, -1.9868216e-08f, ph, pl, ah, al);
    // log1p(f) = 2s + s z A.
    float szh, szl, th, tl, lh, ll;
    dd_mul(sh, sl, zh, zl, szh, szl);
    dd_mul(szh, szl, ah, al, th, tl);
    float s2h = sh + sh;
    float s2l = sl + sl;
    dd_add(s2h, s2l, th, tl, lh, ll);
    if (halve) {
        float rh, rl;
        dd_add(-0.6931472f, 1.9046542e-09f, lh, ll, rh, rl);
        return rh;
    }
    float rh, rl;
    fast_two_sum(lh, ll, rh, rl);
    return rh;
}

// philox.Exponential: the Exp(1) variate of an element from its main word w and, when
// w < 2^24, its tail word. Each line is one float32 operation, rounded, as in Go.
inline float gumbel_exponential(uint w, uint tail) {
    if (w >= 0x80000000u) {
        float c = float(~w);
        float c2 = c + 0.5f;
        float one_minus_u = c2 * TWO_POW_M32;
        return -precise::log(one_minus_u);
    }
    float u;
    if (w < TAIL_THRESHOLD) {
        float t = float(tail);
        float t2 = t + 0.5f;
        float frac = t2 * TWO_POW_M32;
        float wf = float(w);
        float s = wf + frac;
        u = s * TWO_POW_M32;
    } else {
        float wf = float(w);
        float s = wf + 0.5f;
        u = s * TWO_POW_M32;
    }
    return -log1p_neg_half(-u);
}

// philox.Gumbel.
inline float gumbel_noise(uint w, uint tail) {
    float e = gumbel_exponential(w, tail);
    return -precise::log(e);
}

// fl(1/t) for t > 0, correctly rounded whatever the precision of the division: the
// quotient is moved to whichever neighbour leaves the smaller exact residual 1 - t*q.
inline float recip_rn(float t) {
    float q = 1.0f / t;
    if (!(q >= 1.17549435e-38f) || isinf(q)) {
        return q;  // subnormal or overflowing reciprocal: left as the division gives it
    }
    for (int i = 0; i < 4; ++i) {
        float e = fma(-t, q, 1.0f);
        if (e == 0.0f) {
            break;
        }
        uint qb = as_type<uint>(q);
        float q2 = as_type<float>(e > 0.0f ? qb + 1u : qb - 1u);
        float e2 = fma(-t, q2, 1.0f);
        if (abs(e2) < abs(e)) {
            q = q2;
        } else {
            break;
        }
    }
    return q;
}

// The row check of the Go edition: a temperature that is negative, NaN, infinite or so
// small that 1/T overflows (x * invT would then be NaN for x = 0), or a vocabulary
// outside [1, 2^31), is status 3.
inline bool bad_row(float t, uint vocab) {
    if (!(t >= 0.0f) || isinf(t) || vocab == 0u || vocab >= 0x80000000u) {
        return true;
    }
    return t > 0.0f && isinf(recip_rn(t));
}

// Flag bits 9-31 are reserved: a row that sets one is status 3 (as the Go edition).
constant uint ROW_RESERVED = ~0x1FFu;

// Moves q, an approximation of a/b within a few units in the last place, to the
// correctly rounded quotient: to whichever neighbour leaves the smaller exact residual
// a - b*q (for a normal quotient the residual is exact in one fused multiply-add).
inline float div_correct(float a, float b, float q) {
    if (!(abs(q) >= 1.17549435e-38f) || isinf(q)) {
        return q;  // zero, subnormal or overflowing quotient: left as the division gives it
    }
    // Below 2^-60 the residual would fall among the subnormals and lose its exactness:
    // work on a * 2^64 and scale back, exactly, since the quotient is normal (and, below
    // 2^60, cannot overflow on the way).
    float scale = 1.0f;
    if (abs(a) < as_type<float>(0x21800000u) && abs(q) < as_type<float>(0x5D800000u)) {
        a = a * as_type<float>(0x5F800000u);
        q = q * as_type<float>(0x5F800000u);
        scale = as_type<float>(0x1F800000u);
    }
    for (int i = 0; i < 4; ++i) {
        float e = fma(-b, q, a);
        if (e == 0.0f) {
            break;
        }
        uint qb = as_type<uint>(q);
        // Toward the exact quotient: up in magnitude when the residual has q's sign.
        bool up = (e > 0.0f) == (q > 0.0f);
        float q2 = as_type<float>(up ? qb + 1u : qb - 1u);
        float e2 = fma(-b, q2, a);
        if (abs(e2) < abs(e)) {
            q = q2;
        } else {
            break;
        }
    }
    return q * scale;
}

// fl(a/b) for b > 0 finite, correctly rounded whatever the precision of the division
// (as recip_rn): the repetition penalty divides, and the ABI wants one rounding.
inline float div_rn(float a, float b) { return div_correct(a, b, a / b); }

// ---------------------------------------------------------------------------------------
// Logit processors (ABI.md, version 2): bias, penalties, mask, in that order, each
// operation its own statement and rounding.

// Processor is what one row needs to turn a logit into its processed logit x'.
struct Processor {
    uint flags;
    float repetition;
    float frequency;
    float presence;
    device const float* bias;   // the row's V entries (flag ROW_BIAS)
    device const uint* counts;  // the row's V entries (flag ROW_PENALTIES)
    device const uint* mask;    // the row's ceil(V/32) words (flag ROW_MASK)
};

inline Processor processor_of(thread const RowParams& p, device const float* bias, device const uint* counts,
                              device const uint* mask, uint vocab) {
    ulong r = ulong(p.row);
    ulong words = (ulong(vocab) + 31ul) / 32ul;
    return Processor{p.flags, p.repetition_penalty, p.frequency_penalty, p.presence_penalty,
                     bias + r * ulong(vocab), counts + r * ulong(vocab), mask + r * words};
}

// The logit of element i after bias and penalties (the value the status flags see).
inline float unmasked_logit(float x, uint i, Processor P) {
    if ((P.flags & ROW_BIAS) != 0u) {
        x = x + P.bias[i];
    }
    if ((P.flags & ROW_PENALTIES) != 0u) {
        uint c = P.counts[i];
        uint out = c & COUNT_MAX;
        if (c != 0u && P.repetition != 1.0f) {
            if (x > 0.0f) {
                x = div_rn(x, P.repetition);
            } else {
                x = x * P.repetition;
            }
        }
        if (out > 0u) {
            float f = P.frequency * float(out);
            x = x - f;
            x = x - P.presence;
        }
    }
    return x;
}

inline bool masked_out(uint i, Processor P) {
    return (P.flags & ROW_MASK) != 0u && ((P.mask[i >> 5] >> (i & 31u)) & 1u) == 0u;
}

// The processed logit x' of element i.
inline float processed_logit(float x, uint i, Processor P) {
    if ((P.flags & ROW_PROCESSING) == 0u) {
        return x;
    }
    float v = unmasked_logit(x, i, P);
    return masked_out(i, P) ? -INFINITY : v;
}

// ---------------------------------------------------------------------------------------
// Log-sum-exp, online: a pair (m, s) stands for log(s) + m, the running maximum m of the
// finite values added and s the sum of exp(v - m). (-Inf, 0) is the empty set. The
// exponentials are fast::exp (ABI.md allows relative error 2^-20): every term is
// exp of a value <= 0, and the largest term is exactly 1.

inline void lse_add(thread float2& a, float v) {
    if (v == INFINITY || a.x == INFINITY) {
        // x' * invT can overflow: the set's log-sum-exp is then +Inf (as the Go edition).
        a = float2(INFINITY, 1.0f);
        return;
    }
    if (!isfinite(v)) {
        return;  // -Inf adds nothing; a NaN row gets NaN records anyway
    }
    if (v > a.x) {
        float d = a.x - v;
        float scale = fast::exp(d);
        float t = a.y * scale;
        a.y = t + 1.0f;
        a.x = v;
    } else {
        float d = v - a.x;
        a.y = a.y + fast::exp(d);
    }
}

inline float2 lse_merge(float2 a, float2 b) {
    if (b.x > a.x) {
        float2 t = a;
        a = b;
        b = t;
    }
    if (b.x == -INFINITY) {
        return a;  // b empty (or both)
    }
    if (a.x == INFINITY) {
        return float2(INFINITY, 1.0f);
    }
    float d = b.x - a.x;
    float t = b.y * fast::exp(d);
    return float2(a.x, a.y + t);
}

inline float lse_value(float2 a) {
    if (isinf(a.x)) {
        return a.x;
    }
    return a.x + precise::log(a.y);
}

// v minus the log-sum-exp of a: (v - m) - log(s). Subtracting the maximum first keeps
// the log-probability of a value near the maximum accurate even where m + log(s) would
// round away log(s) (|m| in the millions, as after large penalties).
inline float lse_sub(float v, float2 a) {
    if (isinf(a.x)) {
        return v - a.x;
    }
    float d = v - a.x;
    return d - precise::log(a.y);
}

// A pair travels through device scratch as one 64-bit partial: the maximum's bits in the
// low word, the sum's in the high word.
inline void store_pair(device atomic_uint* words, ulong index, float2 a) {
    atomic_store_explicit(&words[2ul * index], as_type<uint>(a.x), memory_order_relaxed);
    atomic_store_explicit(&words[2ul * index + 1ul], as_type<uint>(a.y), memory_order_relaxed);
}

inline float2 load_pair(device atomic_uint* words, ulong index) {
    uint m = atomic_load_explicit(&words[2ul * index], memory_order_relaxed);
    uint s = atomic_load_explicit(&words[2ul * index + 1ul], memory_order_relaxed);
    return float2(as_type<float>(m), as_type<float>(s));
}

inline void store_key(device atomic_uint* words, ulong index, ulong key) {
    atomic_store_explicit(&words[2ul * index], uint(key), memory_order_relaxed);
    atomic_store_explicit(&words[2ul * index + 1ul], uint(key >> 32), memory_order_relaxed);
}

inline ulong load_key(device atomic_uint* words, ulong index) {
    uint lo = atomic_load_explicit(&words[2ul * index], memory_order_relaxed);
    uint hi = atomic_load_explicit(&words[2ul * index + 1ul], memory_order_relaxed);
    return u64(lo, hi);
}

// The device-scope fence of MSL 3.2; before it, the ordering of device atomics at the
// coherence point that the split phase relies on (see gumbel_argmax_impl).
inline void device_fence() {
#if __METAL_VERSION__ >= 320
    atomic_thread_fence(mem_flags::mem_device, memory_order_seq_cst, thread_scope_device);
#endif
}

// ---------------------------------------------------------------------------------------
// SIMD-group and threadgroup reductions. Every lane of every SIMD-group calls them (the
// threadgroup size is a multiple of the SIMD width), and the butterfly leaves the result
// in every lane.

// Max of a packed key and OR of row flags over the SIMD-group.
inline void simd_max_key_or(thread ulong& key, thread uint& flags, uint width) {
    for (uint off = width / 2u; off > 0u; off >>= 1) {
        uint4 mine = uint4(uint(key), uint(key >> 32), flags, 0u);
        uint4 other = simd_shuffle_xor(mine, ushort(off));
        key = max_u64(key, u64(other.x, other.y));
        flags |= other.z;
    }
}

inline ulong simd_sum_u64(ulong v, uint width) {
    for (uint off = width / 2u; off > 0u; off >>= 1) {
        uint2 other = simd_shuffle_xor(uint2(uint(v), uint(v >> 32)), ushort(off));
        v += u64(other.x, other.y);
    }
    return v;
}

inline uint simd_min_u32(uint v, uint width) {
    for (uint off = width / 2u; off > 0u; off >>= 1) {
        uint other = simd_shuffle_xor(v, ushort(off));
        v = min(v, other);
    }
    return v;
}

// Inclusive prefix sum over the lanes of the SIMD-group.
inline ulong simd_inclusive_sum_u64(ulong v, uint lane, uint width) {
    for (uint off = 1u; off < width; off <<= 1) {
        uint2 other = simd_shuffle_up(uint2(uint(v), uint(v >> 32)), ushort(off));
        if (lane >= off) {
            v += u64(other.x, other.y);
        }
    }
    return v;
}

// Per-thread identity of the launch, as the kernel attributes give it.
struct Lane {
    uint tid;    // thread index in the threadgroup
    uint T;      // threads per threadgroup
    uint lane;   // index in the SIMD-group
    uint sg;     // SIMD-group index in the threadgroup
    uint width;  // threads per SIMD-group
    uint nsg;    // SIMD-groups per threadgroup
};

// Max packed key and OR of flags over the threadgroup, returned to every thread.
// scratch_key and scratch_flags hold one entry per SIMD-group.
inline void block_max_key_or(thread ulong& key, thread uint& flags, Lane L,
                             threadgroup ulong* scratch_key, threadgroup uint* scratch_flags) {
    simd_max_key_or(key, flags, L.width);
    if (L.lane == 0u) {
        scratch_key[L.sg] = key;
        scratch_flags[L.sg] = flags;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    ulong k = 0ul;
    uint f = 0u;
    for (uint i = L.lane; i < L.nsg; i += L.width) {
        k = max_u64(k, scratch_key[i]);
        f |= scratch_flags[i];
    }
    simd_max_key_or(k, f, L.width);
    key = k;
    flags = f;
    threadgroup_barrier(mem_flags::mem_threadgroup);
}

// Sum over the threadgroup, returned to every thread.
inline ulong block_sum_u64(ulong v, Lane L, threadgroup ulong* scratch) {
    v = simd_sum_u64(v, L.width);
    if (L.lane == 0u) {
        scratch[L.sg] = v;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    ulong s = 0ul;
    for (uint i = L.lane; i < L.nsg; i += L.width) {
        s += scratch[i];
    }
    s = simd_sum_u64(s, L.width);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    return s;
}

// Merges two log-sum-exp pairs per lane over the SIMD-group.
inline void simd_lse2(thread float2& a, thread float2& b, uint width) {
    for (uint off = width / 2u; off > 0u; off >>= 1) {
        float4 other = simd_shuffle_xor(float4(a.x, a.y, b.x, b.y), ushort(off));
        a = lse_merge(a, float2(other.x, other.y));
        b = lse_merge(b, float2(other.z, other.w));
    }
}

// Merges two log-sum-exp pairs over the threadgroup, returned to every thread.
inline void block_lse2(thread float2& a, thread float2& b, Lane L, threadgroup float4* scratch) {
    simd_lse2(a, b, L.width);
    if (L.lane == 0u) {
        scratch[L.sg] = float4(a.x, a.y, b.x, b.y);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float2 ra = float2(-INFINITY, 0.0f);
    float2 rb = float2(-INFINITY, 0.0f);
    for (uint i = L.lane; i < L.nsg; i += L.width) {
        float4 v = scratch[i];
        ra = lse_merge(ra, float2(v.x, v.y));
        rb = lse_merge(rb, float2(v.z, v.w));
    }
    simd_lse2(ra, rb, L.width);
    a = ra;
    b = rb;
    threadgroup_barrier(mem_flags::mem_threadgroup);
}

// ---------------------------------------------------------------------------------------
// Kernel arguments and per-row bookkeeping shared by gumbel_argmax and categorical.

// Buffers is arguments 1-11 of gumbel_argmax and categorical (ABI.md, version 2).
struct Buffers {
    device RowParams* params;
    device atomic_int* tokens;
    device int* status;
    device atomic_uint* partials;
    device atomic_uint* counters;
    ulong row_stride;
    uint vocab;
    device float* logprobs;
    device const float* bias;
    device uint* counts;
    device const uint* mask;
};

// Writes one output slot: token, status and, with ROW_LOGPROBS, its record (NaN in all
// four words unless the status is 0).
inline void write_slot(Buffers B, uint pflags, ulong o, int token, int st, float4 record) {
    atomic_store_explicit(&B.tokens[o], st == STATUS_OK ? token : -1, memory_order_relaxed);
    B.status[o] = st;
    if ((pflags & ROW_LOGPROBS) != 0u) {
        if (st != STATUS_OK) {
            record = float4(NAN, NAN, NAN, NAN);
        }
        B.logprobs[4ul * o] = record.x;
        B.logprobs[4ul * o + 1ul] = record.y;
        B.logprobs[4ul * o + 2ul] = record.z;
        B.logprobs[4ul * o + 3ul] = record.w;
    }
}

// Run by the one thread that wrote a draw's slot, after writing it: the row's RECORD and
// ADVANCE work once all D draws of the row are written (ABI.md, "Draws"). Every
// threadgroup of every draw read the row's step and counts before it counted itself in,
// so the last one to arrive updates them racing with nothing in this launch. Tokens are
// written and read back with atomics for the same reason as the partials (see
// gumbel_argmax_impl); one thread runs this, so no threadgroup barrier can order it and
// before MSL 3.2 the order of device atomics at the coherence point is what holds.
inline void finish_draw(Buffers B, thread const RowParams& p, uint y, uint n, uint draws) {
    if ((p.flags & (ROW_ADVANCE | ROW_RECORD)) == 0u) {
        return;
    }
    if (draws > 1u) {
        device_fence();
        uint slot = 2u * n * draws + y;
        uint done = atomic_fetch_add_explicit(&B.counters[slot], 1u, memory_order_relaxed);
        if (done != draws - 1u) {
            return;
        }
        device_fence();
        atomic_store_explicit(&B.counters[slot], 0u, memory_order_relaxed);
    }
    if ((p.flags & ROW_RECORD) != 0u) {
        device uint* counts = B.counts + ulong(p.row) * ulong(B.vocab);
        for (uint z = 0u; z < draws; ++z) {
            int tok = atomic_load_explicit(&B.tokens[ulong(p.row) * ulong(draws) + ulong(z)], memory_order_relaxed);
            if (tok < 0 || uint(tok) >= B.vocab) {
                continue;  // a draw whose status is not 0
            }
            uint c = counts[tok];
            if ((c & COUNT_MAX) != COUNT_MAX) {
                counts[tok] = c + 1u;  // saturating; bit 31 (a prompt token) is kept
            }
        }
    }
    if ((p.flags & ROW_ADVANCE) != 0u) {
        ulong step = u64(p.step_lo, p.step_hi) + ulong(draws);
        B.params[y].step_lo = uint(step);
        B.params[y].step_hi = uint(step >> 32);
    }
}

// ---------------------------------------------------------------------------------------
// gumbel_argmax

inline uint logit_flags(float x) {
    if (isnan(x) || x == INFINITY) {
        return FLAG_NONFINITE;
    }
    return x != -INFINITY ? FLAG_FINITE : 0u;
}

inline int status_of(uint flags) {
    if ((flags & FLAG_NONFINITE) != 0u) {
        return STATUS_NONFINITE;
    }
    return (flags & FLAG_FINITE) == 0u ? STATUS_NO_FINITE : STATUS_OK;
}

// Threadgroup scratch of gumbel_argmax.
struct GumbelScratch {
    threadgroup ulong* key;    // [MAX_SIMDGROUPS]
    threadgroup uint* flags;   // [MAX_SIMDGROUPS]
    threadgroup float4* lse;   // [MAX_SIMDGROUPS]
    threadgroup uint* last;    // [1]
};

// The token's record of a greedy or Gumbel row: raw and processed log-probabilities and
// log-normalisers (ABI.md, "The log-probability record").
template <typename D>
inline float4 gumbel_record(device const typename D::elem* row, uint tok, Processor P, bool greedy, float invT,
                            float2 raw, float2 proc, bool proc_is_raw) {
    float x = D::decode(row[tok]);
    float2 proc_set = proc_is_raw ? raw : proc;
    float xp = processed_logit(x, tok, P);
    float v = greedy ? xp : xp * invT;
    return float4(lse_sub(x, raw), lse_sub(v, proc_set), lse_value(raw), lse_value(proc_set));
}

// The threadgroup (bx, by, bz) of an (S, n, D) grid reduces its contiguous, 4-aligned
// chunk of row params[by].row, draw bz, to one packed key (and, with ROW_LOGPROBS, two
// log-sum-exp pairs); with S > 1 the last threadgroup of the draw to arrive reduces the
// S partials.
//
// Visibility of the partials across threadgroups. Thread 0 of each threadgroup stores
// its partial with relaxed atomic stores and ORs its flags into the draw's flag word with
// a relaxed atomic, then counts itself in with a relaxed fetch_add. The threadgroup that
// takes the count to S reads every partial and the flags with relaxed atomic loads.
// Partials and flags are only ever touched by atomics, so no stale non-coherent cache
// line can be read; what must hold is that a threadgroup's partial and flags are
// visible before its arrival is. With MSL 3.2 the writer's device-scope fence before the
// fetch_add and the reader's after it give exactly that (fence-fence synchronisation
// through the counter's release sequence). Before 3.2, MSL has only relaxed atomics; the
// threadgroup_barrier(mem_flags::mem_device) between the stores and the arrival is the
// ordering point MSL offers for device memory, and the code relies on Apple GPUs
// performing device atomics in order at the coherence point (as the usual last-block
// reductions on Metal do). This is the one part of the kernel that an emulator cannot
// check; the gpu-tagged tests exercise it on real hardware.
template <typename D>
inline void gumbel_argmax_impl(device const typename D::elem* logits, Buffers B, uint3 group, uint3 groups, Lane L,
                               GumbelScratch tg) {
    const uint bx = group.x;
    const uint by = group.y;
    const uint bz = group.z;
    const uint S = groups.x;
    const uint n = groups.y;
    const uint draws = groups.z;
    if (draws > MAX_DRAWS) {
        return;  // not a launch the kernels serve (ABI.md): nothing is written
    }
    // A copy: ADVANCE rewrites the step in params once every threadgroup is past it.
    const RowParams p = B.params[by];
    const uint pflags = p.flags;
    if ((pflags & ROW_ROUTED) != 0u && (pflags & ROW_CATEGORICAL) != 0u) {
        return;  // the categorical kernel's row
    }
    const ulong o = ulong(p.row) * ulong(draws) + ulong(bz);
    const float temp = p.temperature;
    const uint vocab = B.vocab;
    if (bad_row(temp, vocab) || (pflags & ROW_RESERVED) != 0u) {
        // Every threadgroup of the row sees the same parameters and leaves at once;
        // the counters are not touched, and a row whose parameters are not trusted gets
        // no RECORD or ADVANCE (as the Go edition).
        if (bx == 0u && L.tid == 0u) {
            write_slot(B, pflags, o, -1, STATUS_BAD_PARAMS, float4(0.0f));
        }
        return;
    }
    const bool greedy = temp == 0.0f;
    const float invT = greedy ? 0.0f : recip_rn(temp);
    const bool want_lp = (pflags & ROW_LOGPROBS) != 0u;
    // Without processors, x' * invT is x itself when greedy or invT == 1: one sum serves.
    const bool proc_is_raw = (pflags & ROW_PROCESSING) == 0u && (greedy || invT == 1.0f);
    const Processor P = processor_of(p, B.bias, B.counts, B.mask, vocab);
    const Stream st = stream_of(p, bz);
    device const typename D::elem* row = logits + ulong(p.row) * B.row_stride;

    // This threadgroup's chunk: 4-aligned so that one Philox block serves four
    // consecutive elements of one thread.
    ulong chunk = ((ulong(vocab) + ulong(S) - 1ul) / ulong(S) + 3ul) & ~3ul;
    ulong begin = ulong(bx) * chunk;
    ulong end = min_u64(ulong(vocab), begin + chunk);

    ulong best = 0ul;
    float best_score = -INFINITY;
    uint flags = 0u;
    float2 raw = float2(-INFINITY, 0.0f);
    float2 proc = float2(-INFINITY, 0.0f);
    for (ulong g = begin + 4ul * ulong(L.tid); g < end; g += 4ul * ulong(L.T)) {
        uint base = uint(g);
        uint count = uint(min_u64(4ul, end - g));
        bool have_main = false;
        bool have_tail = false;
        uint4 main_words = uint4(0u, 0u, 0u, 0u);
        uint4 tail_words = uint4(0u, 0u, 0u, 0u);
        for (uint j = 0u; j < count; ++j) {
            uint idx = base + j;
            float x0 = D::decode(row[idx]);
            if (want_lp) {
                lse_add(raw, x0);
            }
            float x = x0;
            if ((pflags & ROW_PROCESSING) != 0u) {
                x = unmasked_logit(x0, idx, P);
                // NaN or +Inf counts masked or not; a masked element is not finite.
                bool gone = masked_out(idx, P);
                flags |= gone ? (logit_flags(x) & FLAG_NONFINITE) : logit_flags(x);
                if (gone) {
                    x = -INFINITY;
                }
            } else {
                flags |= logit_flags(x);
            }
            float score;
            if (greedy) {
                score = x;
                if (want_lp && !proc_is_raw) {
                    lse_add(proc, x);
                }
            } else if (x == -INFINITY) {
                score = -INFINITY;
            } else {
                float xs = x * invT;
                if (want_lp && !proc_is_raw) {
                    lse_add(proc, xs);
                }
                float bound = xs + MAX_GUMBEL;
                if (bound < best_score) {
                    continue;  // cannot win even with the largest noise
                }
                if (!have_main) {
                    main_words = philox_block(st, base >> 2, PURPOSE_GUMBEL);
                    have_main = true;
                }
                uint w = main_words[j];
                uint tail = 0u;
                if (w < TAIL_THRESHOLD) {
                    if (!have_tail) {
                        tail_words = philox_block(st, base >> 2, PURPOSE_GUMBEL_TAIL);
                        have_tail = true;
                    }
                    tail = tail_words[j];
                }
                float gn = gumbel_noise(w, tail);
                score = xs + gn;
            }
            ulong key = pack_key(score, idx);
            if (key > best) {
                best = key;
                best_score = score;
            }
        }
    }

    block_max_key_or(best, flags, L, tg.key, tg.flags);
    if (want_lp) {
        block_lse2(raw, proc, L, tg.lse);
    }

    if (S == 1u) {
        if (L.tid == 0u) {
            int stc = status_of(flags);
            uint tok = 0xFFFFFFFFu - uint(best);
            float4 rec = float4(0.0f);
            if (want_lp && stc == STATUS_OK) {
                rec = gumbel_record<D>(row, tok, P, greedy, invT, raw, proc, proc_is_raw);
            }
            write_slot(B, pflags, o, int(tok), stc, rec);
            finish_draw(B, p, by, n, draws);
        }
        return;
    }

    // Split phase: publish the partial, then count this threadgroup in.
    const uint d = bz * n + by;  // this draw of this launch row
    const ulong slot = ulong(d) * ulong(S) + ulong(bx);
    const ulong lse_base = ulong(n) * ulong(draws) * ulong(S);
    if (L.tid == 0u) {
        store_key(B.partials, slot, best);
        if (want_lp) {
            store_pair(B.partials, lse_base + 2ul * slot, raw);
            store_pair(B.partials, lse_base + 2ul * slot + 1ul, proc);
        }
        if (flags != 0u) {
            atomic_fetch_or_explicit(&B.counters[2u * d + 1u], flags, memory_order_relaxed);
        }
    }
    threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);
    if (L.tid == 0u) {
        device_fence();
        uint arrived = atomic_fetch_add_explicit(&B.counters[2u * d], 1u, memory_order_relaxed);
        tg.last[0] = arrived == S - 1u ? 1u : 0u;
    }
    threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);
    if (tg.last[0] == 0u) {
        return;
    }
    device_fence();
    // The last threadgroup of the draw reduces every partial.
    ulong total = 0ul;
    raw = float2(-INFINITY, 0.0f);
    proc = float2(-INFINITY, 0.0f);
    for (uint i = L.tid; i < S; i += L.T) {
        ulong q = ulong(d) * ulong(S) + ulong(i);
        total = max_u64(total, load_key(B.partials, q));
        if (want_lp) {
            raw = lse_merge(raw, load_pair(B.partials, lse_base + 2ul * q));
            proc = lse_merge(proc, load_pair(B.partials, lse_base + 2ul * q + 1ul));
        }
    }
    uint row_flags = 0u;
    if (L.tid == 0u) {
        row_flags = atomic_load_explicit(&B.counters[2u * d + 1u], memory_order_relaxed);
    }
    block_max_key_or(total, row_flags, L, tg.key, tg.flags);
    if (want_lp) {
        block_lse2(raw, proc, L, tg.lse);
    }
    if (L.tid == 0u) {
        // Leave the draw's counters as the launch found them: zero.
        atomic_store_explicit(&B.counters[2u * d], 0u, memory_order_relaxed);
        atomic_store_explicit(&B.counters[2u * d + 1u], 0u, memory_order_relaxed);
        int stc = status_of(row_flags);
        uint tok = 0xFFFFFFFFu - uint(total);
        float4 rec = float4(0.0f);
        if (want_lp && stc == STATUS_OK) {
            rec = gumbel_record<D>(row, tok, P, greedy, invT, raw, proc, proc_is_raw);
        }
        write_slot(B, pflags, o, int(tok), stc, rec);
        finish_draw(B, p, by, n, draws);
    }
}

// ---------------------------------------------------------------------------------------
// categorical

// q(w) = uint64(w * 2^F), truncated, from the bits of w (0 <= w <= 1), so no float to
// 64-bit conversion is involved.
inline ulong fixed_weight(float w, uint F) {
    if (!(w > 0.0f)) {
        return 0ul;
    }
    uint b = as_type<uint>(w);
    uint e = b >> 23;
    ulong mant = ulong(b & 0x7FFFFFu);
    int shift;
    if (e == 0u) {
        shift = int(F) - 149;  // subnormal: mant * 2^-149
    } else {
        mant |= 0x800000ul;
        shift = int(e) - 150 + int(F);  // mant * 2^(e - 150)
    }
    if (shift >= 0) {
        return shift < 40 ? mant << uint(shift) : 0ul;  // w <= 1 keeps shift <= F - 23
    }
    return shift > -24 ? mant >> uint(-shift) : 0ul;
}

// w(x) = exp(fl((x - m) * invT)), two rounded operations and precise::exp.
// Below cutoff, w < 2^-F / e and q is 0 whatever exp's last bit, so exp is skipped.
struct Weights {
    float m;
    float invT;
    uint F;
    float cutoff;
};

inline float weight_of(float x, Weights W) {
    float d = x - W.m;
    float a = d * W.invT;
    if (a < W.cutoff) {
        return 0.0f;
    }
    return precise::exp(a);
}

// Threadgroup scratch of the categorical kernel.
struct CatScratch {
    threadgroup atomic_uint* hist_lo;  // [256] counts, or the low words of masses
    threadgroup atomic_uint* hist_hi;  // [256] high words of masses
    threadgroup ulong* u64s;           // [MAX_SIMDGROUPS] one per SIMD-group
    threadgroup uint* u32s;            // [MAX_SIMDGROUPS] one per SIMD-group
    threadgroup float4* lse;           // [MAX_SIMDGROUPS] one per SIMD-group
    threadgroup uint* sel_bin;         // [1]
    threadgroup ulong* sel_above;      // [1]
};

// Adds a 64-bit value to a bin held as two 32-bit threadgroup atomics: the thread whose
// addition wraps the low word carries one into the high word, so the pair sums exactly
// (MSL has no 64-bit atomic add).
inline void add_u64(threadgroup atomic_uint* lo, threadgroup atomic_uint* hi, ulong v) {
    uint vl = uint(v);
    uint vh = uint(v >> 32);
    uint old = atomic_fetch_add_explicit(lo, vl, memory_order_relaxed);
    uint carry = (old + vl < old) ? 1u : 0u;
    uint add_hi = vh + carry;
    if (add_hi != 0u) {
        atomic_fetch_add_explicit(hi, add_hi, memory_order_relaxed);
    }
}

inline ulong bin_value(CatScratch tg, uint b, bool wide) {
    uint lo = atomic_load_explicit(&tg.hist_lo[b], memory_order_relaxed);
    if (!wide) {
        return ulong(lo);
    }
    uint hi = atomic_load_explicit(&tg.hist_hi[b], memory_order_relaxed);
    return u64(lo, hi);
}

// Run by SIMD-group 0: walks the 256 bins from the top, adding their values to above,
// and stores the first bin at which the total reaches target and the total of the bins
// above it. Lane l sums bins [256 - (l+1)*per, 256 - l*per); a prefix over the lanes
// finds the lane that holds the answer, which then walks its own bins.
inline void select_bin_desc(CatScratch tg, bool wide, ulong above, ulong target, Lane L) {
    uint per = 256u / L.width;
    uint top = 256u - L.lane * per;  // one past this lane's highest bin
    ulong mine = 0ul;
    for (uint b = top - per; b < top; ++b) {
        mine += bin_value(tg, b, wide);
    }
    ulong incl = simd_inclusive_sum_u64(mine, L.lane, L.width);
    bool reached = above + incl >= target;
    uint first = simd_min_u32(reached ? L.lane : L.width, L.width);
    if (first == L.width) {
        // Unreachable when the caller's invariant holds; keep the result in range.
        if (L.lane == 0u) {
            tg.sel_bin[0] = 0u;
            tg.sel_above[0] = above;
        }
        return;
    }
    if (L.lane == first) {
        ulong cum = above + incl - mine;
        for (uint b = top; b > top - per; --b) {
            ulong v = bin_value(tg, b - 1u, wide);
            cum += v;
            if (cum >= target) {
                tg.sel_bin[0] = b - 1u;
                tg.sel_above[0] = cum - v;
                break;
            }
        }
    }
}

inline void clear_bins(CatScratch tg, bool wide, Lane L) {
    for (uint b = L.tid; b < 256u; b += L.T) {
        atomic_store_explicit(&tg.hist_lo[b], 0u, memory_order_relaxed);
        if (wide) {
            atomic_store_explicit(&tg.hist_hi[b], 0u, memory_order_relaxed);
        }
    }
}

// The k-th largest key of the row, counting repeats: radix select on 8-bit digits from
// the top, one pass over the row per digit.
template <typename D>
inline uint top_k_key(device const typename D::elem* row, uint vocab, Processor P, uint k, Lane L, CatScratch tg) {
    uint prefix = 0u;
    uint mask = 0u;
    ulong above = 0ul;
    for (uint level = 0u; level < 4u; ++level) {
        uint shift = 24u - 8u * level;
        clear_bins(tg, false, L);
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (uint i = L.tid; i < vocab; i += L.T) {
            uint key = order_key(processed_logit(D::decode(row[i]), i, P));
            if ((key & mask) == prefix) {
                atomic_fetch_add_explicit(&tg.hist_lo[(key >> shift) & 0xFFu], 1u, memory_order_relaxed);
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        if (L.sg == 0u) {
            select_bin_desc(tg, false, above, ulong(k), L);
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        prefix |= tg.sel_bin[0] << shift;
        above = tg.sel_above[0];
        mask |= 0xFFu << shift;
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    return prefix;
}

// The largest key t of the kept set (key >= Kk) whose mass of keys >= t reaches target
// (target > 0): radix select on mass. Elements of zero weight never decide it (their
// key's mass equals that of the next key up), so only positive weights are added.
template <typename D>
inline uint top_p_key(device const typename D::elem* row, uint vocab, Processor P, uint Kk, Weights W, ulong target,
                      Lane L, CatScratch tg) {
    uint prefix = 0u;
    uint mask = 0u;
    ulong above = 0ul;
    for (uint level = 0u; level < 4u; ++level) {
        uint shift = 24u - 8u * level;
        clear_bins(tg, true, L);
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (uint i = L.tid; i < vocab; i += L.T) {
            float x = processed_logit(D::decode(row[i]), i, P);
            uint key = order_key(x);
            if (key < Kk || (key & mask) != prefix) {
                continue;
            }
            ulong q = fixed_weight(weight_of(x, W), W.F);
            if (q != 0ul) {
                uint b = (key >> shift) & 0xFFu;
                add_u64(&tg.hist_lo[b], &tg.hist_hi[b], q);
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        if (L.sg == 0u) {
            select_bin_desc(tg, true, above, target, L);
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        prefix |= tg.sel_bin[0] << shift;
        above = tg.sel_above[0];
        mask |= 0xFFu << shift;
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    return prefix;
}

// The kept weight of one element (0 when the filters drop it).
inline ulong kept_weight(float x, Weights W, uint cut, bool min_p_on, float min_p) {
    if (order_key(x) < cut) {
        return 0ul;
    }
    float w = weight_of(x, W);
    if (min_p_on && !(w >= min_p)) {
        return 0ul;
    }
    return fixed_weight(w, W.F);
}

// The first index whose processed logit equals m (the greedy answer of the categorical
// path), returned to every thread.
template <typename D>
inline uint first_index_of(device const typename D::elem* row, uint vocab, Processor P, float m, Lane L,
                           CatScratch tg) {
    ulong best = 0ul;
    uint unused = 0u;
    for (uint i = L.tid; i < vocab; i += L.T) {
        if (processed_logit(D::decode(row[i]), i, P) == m) {
            best = max_u64(best, ulong(0xFFFFFFFFu - i));
        }
    }
    block_max_key_or(best, unused, L, tg.u64s, tg.u32s);
    return 0xFFFFFFFFu - uint(best);
}

// ln(S_kept * 2^-F): the scaling by a power of two is exact, so only the conversion and
// the logarithm round.
inline float log_kept_mass(ulong total, uint F) {
    float t = float(total);
    float scaled = t * as_type<float>((127u - F) << 23);
    return precise::log(scaled);
}

// One threadgroup per row and draw: the row's maximum and flags, the top-k and top-p key
// thresholds, then the inverse-CDF draw over the kept weights in index order. Every sum
// is an integer, so the draw does not depend on the reduction order. Every step works on
// the processed logits x'.
//
// The draw: SIMD-group g owns the g-th contiguous segment of the row and sums its kept
// weights (its lanes read consecutive elements). Every thread then knows each segment's
// offset and the total S; the SIMD-group whose segment holds target = (u * S) >> 64
// walks it again, 32 elements at a time, with a prefix sum over its lanes, until the
// running sum exceeds target. The lane that finds the token writes the draw's slot and
// does the row's finishing work.
template <typename D>
inline void categorical_impl(device const typename D::elem* logits, Buffers B, uint3 group, uint3 groups, Lane L,
                             CatScratch tg) {
    const uint by = group.y;
    const uint bz = group.z;
    const uint n = groups.y;
    const uint draws = groups.z;
    if (draws > MAX_DRAWS) {
        return;  // not a launch the kernels serve (ABI.md): nothing is written
    }
    // A copy: ADVANCE rewrites the step in params once every threadgroup is past it.
    const RowParams p = B.params[by];
    const uint pflags = p.flags;
    if ((pflags & ROW_ROUTED) != 0u && (pflags & ROW_CATEGORICAL) == 0u) {
        return;  // the gumbel_argmax kernel's row
    }
    const ulong o = ulong(p.row) * ulong(draws) + ulong(bz);
    const float temp = p.temperature;
    const uint vocab = B.vocab;
    if (bad_row(temp, vocab) || (pflags & ROW_RESERVED) != 0u) {
        if (L.tid == 0u) {
            write_slot(B, pflags, o, -1, STATUS_BAD_PARAMS, float4(0.0f));
        }
        return;
    }
    const bool want_lp = (pflags & ROW_LOGPROBS) != 0u;
    const bool greedy = temp == 0.0f;
    const Processor P = processor_of(p, B.bias, B.counts, B.mask, vocab);
    device const typename D::elem* row = logits + ulong(p.row) * B.row_stride;

    // 1. The largest key (so the largest processed logit m), the row flags and, for the
    // record, the raw log-sum-exp (and the processed one at temperature 1 for greedy
    // rows).
    ulong kmax = 0ul;
    uint flags = 0u;
    float2 raw = float2(-INFINITY, 0.0f);
    float2 proc = float2(-INFINITY, 0.0f);
    const bool proc_lse = want_lp && greedy && (pflags & ROW_PROCESSING) != 0u;
    for (uint i = L.tid; i < vocab; i += L.T) {
        float x0 = D::decode(row[i]);
        if (want_lp) {
            lse_add(raw, x0);
        }
        float x = x0;
        if ((pflags & ROW_PROCESSING) != 0u) {
            x = unmasked_logit(x0, i, P);
            // NaN or +Inf counts masked or not; a masked element is not finite.
            bool gone = masked_out(i, P);
            flags |= gone ? (logit_flags(x) & FLAG_NONFINITE) : logit_flags(x);
            if (gone) {
                x = -INFINITY;
            }
        } else {
            flags |= logit_flags(x);
        }
        if (proc_lse) {
            lse_add(proc, x);
        }
        if (!isnan(x)) {
            kmax = max_u64(kmax, ulong(order_key(x)));
        }
    }
    block_max_key_or(kmax, flags, L, tg.u64s, tg.u32s);
    if (want_lp) {
        block_lse2(raw, proc, L, tg.lse);
    }
    const int stc = status_of(flags);
    if (stc != STATUS_OK) {
        if (L.tid == 0u) {
            write_slot(B, pflags, o, -1, stc, float4(0.0f));
            finish_draw(B, p, by, n, draws);
        }
        return;
    }
    const uint max_key = uint(kmax);
    const float m = key_to_float(max_key);
    const float lse_raw = want_lp ? lse_value(raw) : 0.0f;
    if (greedy) {
        // Temperature 0 is greedy on every path: the first index of the largest x'.
        uint tok = first_index_of<D>(row, vocab, P, m, L, tg);
        if (L.tid == 0u) {
            float4 rec = float4(0.0f);
            if (want_lp) {
                float x = D::decode(row[tok]);
                float xp = processed_logit(x, tok, P);
                float2 proc_set = proc_lse ? proc : raw;
                rec = float4(lse_sub(x, raw), lse_sub(xp, proc_set), lse_raw, lse_value(proc_set));
            }
            write_slot(B, pflags, o, int(tok), STATUS_OK, rec);
            finish_draw(B, p, by, n, draws);
        }
        return;
    }
    const float invT = recip_rn(temp);
    const uint F = 63u - (32u - clz(vocab));
    const float f_ln2 = float(F) * 0.6931472f;
    const float cutoff = -(f_ln2 + 1.0f);
    const Weights W = {m, invT, F, cutoff};

    // 2. top-k threshold.
    uint Kk = 0u;
    if (p.top_k > 0u && p.top_k < vocab) {
        Kk = top_k_key<D>(row, vocab, P, p.top_k, L, tg);
    }

    // 3. top-p threshold over the top-k set.
    uint Kp = 0u;
    if (p.top_p > 0.0f && p.top_p < 1.0f) {
        ulong z = 0ul;
        for (uint i = L.tid; i < vocab; i += L.T) {
            float x = processed_logit(D::decode(row[i]), i, P);
            if (order_key(x) >= Kk) {
                z += fixed_weight(weight_of(x, W), W.F);
            }
        }
        z = block_sum_u64(z, L, tg.u64s);
        float pscaled = p.top_p * 4294967296.0f;
        ulong P32 = ulong(uint(pscaled));
        ulong target = (z >> 32) * P32 + (((z & 0xFFFFFFFFul) * P32) >> 32);
        if (target == 0ul) {
            Kp = max_key;  // every present key reaches a zero target; take the largest
        } else {
            Kp = top_p_key<D>(row, vocab, P, Kk, W, target, L, tg);
        }
    }
    const uint cut = max(Kk, Kp);
    const bool min_p_on = p.min_p > 0.0f && p.min_p <= 1.0f;
    const float min_p = p.min_p;

    // 4. Segment sums of kept weights, one segment per SIMD-group.
    uint seg = ((vocab + L.nsg - 1u) / L.nsg + L.width - 1u) / L.width * L.width;
    uint seg_begin = min(vocab, L.sg * seg);
    uint seg_end = min(vocab, seg_begin + seg);
    ulong part = 0ul;
    for (uint i = seg_begin + L.lane; i < seg_end; i += L.width) {
        part += kept_weight(processed_logit(D::decode(row[i]), i, P), W, cut, min_p_on, min_p);
    }
    part = simd_sum_u64(part, L.width);
    if (L.lane == 0u) {
        tg.u64s[L.sg] = part;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    ulong offset = 0ul;
    ulong total = 0ul;
    for (uint g = 0u; g < L.nsg; ++g) {
        ulong v = tg.u64s[g];
        if (g < L.sg) {
            offset += v;
        }
        total += v;
    }
    if (total == 0ul) {
        // Unreachable: the largest logit is always kept with q = 2^F. Answer as the Go
        // edition does.
        threadgroup_barrier(mem_flags::mem_threadgroup);
        uint tok = first_index_of<D>(row, vocab, P, m, L, tg);
        if (L.tid == 0u) {
            write_slot(B, pflags, o, int(tok), STATUS_OK, float4(NAN));
            finish_draw(B, p, by, n, draws);
        }
        return;
    }
    const Stream st = stream_of(p, bz);
    uint4 ub = philox4x32_10(uint4(0u, st.step_lo, st.step_hi, PURPOSE_CATEGORICAL), st.seed_lo, st.seed_hi);
    ulong u = u64(ub.x, ub.y);
    ulong target = mul_hi64(u, total);
    if (part == 0ul || target < offset || target - offset >= part) {
        return;  // another SIMD-group's segment holds the draw
    }

    // 5. Walk the segment in steps of one element per lane.
    ulong running = offset;
    for (uint base = seg_begin; base < seg_end; base += L.width) {
        uint i = base + L.lane;
        ulong q = 0ul;
        float x = -INFINITY;
        if (i < seg_end) {
            x = processed_logit(D::decode(row[i]), i, P);
            q = kept_weight(x, W, cut, min_p_on, min_p);
        }
        ulong incl = simd_inclusive_sum_u64(q, L.lane, L.width);
        bool crossed = running + incl > target;
        uint first = simd_min_u32(crossed ? L.lane : L.width, L.width);
        if (first < L.width) {
            if (L.lane == first) {
                float4 rec = float4(0.0f);
                if (want_lp) {
                    float x0 = D::decode(row[i]);
                    float d = x - m;
                    float a = d * invT;
                    float ln_kept = log_kept_mass(total, F);
                    float mt = m * invT;
                    rec = float4(lse_sub(x0, raw), a - ln_kept, lse_raw, mt + ln_kept);
                }
                write_slot(B, pflags, o, int(i), STATUS_OK, rec);
                finish_draw(B, p, by, n, draws);
            }
            return;
        }
        uint2 last = simd_shuffle(uint2(uint(incl), uint(incl >> 32)), ushort(L.width - 1u));
        running += u64(last.x, last.y);
    }
}

// ---------------------------------------------------------------------------------------
// topn

// Buffers of the topn kernels (ABI.md, "The topn kernels"): argument 8 is not used, 9-11
// are bias, counts and mask at the positions they have in the other kernels.
struct TopnBuffers {
    device const RowParams* params;
    device int* out_tokens;
    device float* out_values;
    device atomic_uint* partials;
    device atomic_uint* counters;
    ulong row_stride;
    uint vocab;
    device const float* bias;
    device const uint* counts;
    device const uint* mask;
};

// Threadgroup scratch of topn.
struct TopnScratch {
    threadgroup ulong* key;   // [MAX_SIMDGROUPS]
    threadgroup uint* flags;  // [MAX_SIMDGROUPS]
    threadgroup float4* lse;  // [MAX_SIMDGROUPS]
    threadgroup ulong* list;  // [TOPN_MAX] the threadgroup's top keys, largest first, 0 = empty
    threadgroup uint* last;   // [1]
};

// Inserts packed key k into the sorted list top[0..N) (largest first, 0 = empty).
inline void top_insert(thread ulong* top, uint N, ulong k) {
    if (k <= top[N - 1u]) {
        return;
    }
    uint j = N - 1u;
    while (j > 0u && top[j - 1u] < k) {
        top[j] = top[j - 1u];
        --j;
    }
    top[j] = k;
}

// Merges the threads' sorted lists into tg.list: N rounds, each taking the largest head
// over the threadgroup. Keys are distinct (they carry the index), so exactly one thread
// owns each winner and moves past it.
inline void block_top(thread ulong* top, uint N, Lane L, TopnScratch tg) {
    uint head = 0u;
    for (uint j = 0u; j < N; ++j) {
        ulong mine = head < N ? top[head] : 0ul;
        ulong k = mine;
        uint unused = 0u;
        block_max_key_or(k, unused, L, tg.key, tg.flags);
        if (k != 0ul && mine == k) {
            head++;
        }
        if (L.tid == 0u) {
            tg.list[j] = k;
        }
        if (k == 0ul) {
            // Every list is empty (the same k in every thread: the loop ends together).
            if (L.tid == 0u) {
                for (uint r = j + 1u; r < N; ++r) {
                    tg.list[r] = 0ul;
                }
            }
            break;
        }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
}

// Writes the row's N entries from tg.list (run by one thread).
template <typename D>
inline void write_topn(device const typename D::elem* row, TopnBuffers A, ulong out, uint N, uint flags, float2 lse,
                       bool perturbed, bool greedy, float invT, Processor P, TopnScratch tg) {
    if (status_of(flags) == STATUS_NONFINITE) {
        for (uint j = 0u; j < N; ++j) {
            A.out_tokens[out + j] = -1;
            A.out_values[out + j] = NAN;
        }
        return;
    }
    for (uint j = 0u; j < N; ++j) {
        ulong k = tg.list[j];
        if (k == 0ul) {
            A.out_tokens[out + j] = -1;
            A.out_values[out + j] = -INFINITY;
            continue;
        }
        uint idx = 0xFFFFFFFFu - uint(k);
        float x = D::decode(row[idx]);
        float v = x;
        if (perturbed) {
            float xp = processed_logit(x, idx, P);
            v = greedy ? xp : xp * invT;
        }
        A.out_tokens[out + j] = int(idx);
        A.out_values[out + j] = lse_sub(v, lse);
    }
}

// The threadgroup (bx, by) of an (S, n) grid keeps the top N keys of its chunk of row
// params[by].row (raw logits, or Gumbel scores with ROW_PERTURBED) and the chunk's
// log-sum-exp; with S > 1 the last threadgroup of the row to arrive merges the S lists,
// with the same protocol as gumbel_argmax.
template <typename D>
inline void topn_impl(device const typename D::elem* logits, TopnBuffers A, uint3 group, uint3 groups, Lane L,
                      TopnScratch tg) {
    const uint bx = group.x;
    const uint by = group.y;
    const uint S = groups.x;
    if (group.z != 0u) {
        return;  // topn draws nothing: a grid deeper than 1 leaves the rest idle
    }
    const RowParams p = A.params[by];
    const uint N = p.topn;
    const ulong out = ulong(p.row) * ulong(TOPN_MAX);
    const float temp = p.temperature;
    const uint vocab = A.vocab;
    const bool bad_n = N < 1u || N > TOPN_MAX;
    if (bad_n || bad_row(temp, vocab) || (p.flags & ROW_RESERVED) != 0u) {
        if (bx == 0u && L.tid == 0u) {
            uint slots = bad_n ? TOPN_MAX : N;
            for (uint j = 0u; j < slots; ++j) {
                A.out_tokens[out + j] = -1;
                A.out_values[out + j] = NAN;
            }
        }
        return;
    }
    const bool perturbed = (p.flags & ROW_PERTURBED) != 0u;
    const bool greedy = temp == 0.0f;
    const float invT = greedy ? 0.0f : recip_rn(temp);
    RowParams q = p;
    if (!perturbed) {
        q.flags = 0u;  // raw logits: no processors
    }
    const Processor P = processor_of(q, A.bias, A.counts, A.mask, vocab);
    const uint pflags = P.flags;
    const Stream st = stream_of(p, 0u);
    device const typename D::elem* row = logits + ulong(p.row) * A.row_stride;

    ulong chunk = ((ulong(vocab) + ulong(S) - 1ul) / ulong(S) + 3ul) & ~3ul;
    ulong begin = ulong(bx) * chunk;
    ulong end = min_u64(ulong(vocab), begin + chunk);

    ulong top[TOPN_MAX];
    for (uint j = 0u; j < TOPN_MAX; ++j) {
        top[j] = 0ul;
    }
    uint flags = 0u;
    float2 lse = float2(-INFINITY, 0.0f);
    for (ulong g = begin + 4ul * ulong(L.tid); g < end; g += 4ul * ulong(L.T)) {
        uint base = uint(g);
        uint count = uint(min_u64(4ul, end - g));
        bool have_main = false;
        bool have_tail = false;
        uint4 main_words = uint4(0u, 0u, 0u, 0u);
        uint4 tail_words = uint4(0u, 0u, 0u, 0u);
        for (uint j = 0u; j < count; ++j) {
            uint idx = base + j;
            float x = D::decode(row[idx]);
            if ((pflags & ROW_PROCESSING) != 0u) {
                x = unmasked_logit(x, idx, P);
                // NaN or +Inf counts masked or not; a masked element is not finite.
                bool gone = masked_out(idx, P);
                flags |= gone ? (logit_flags(x) & FLAG_NONFINITE) : logit_flags(x);
                if (gone) {
                    x = -INFINITY;
                }
            } else {
                flags |= logit_flags(x);
            }
            float key;
            if (!perturbed || greedy) {
                key = x;
                lse_add(lse, x);
            } else if (x == -INFINITY) {
                continue;
            } else {
                float xs = x * invT;
                lse_add(lse, xs);
                ulong floor_key = top[N - 1u];
                if (floor_key != 0ul) {
                    float bound = xs + MAX_GUMBEL;
                    if (bound < key_to_float(uint(floor_key >> 32))) {
                        continue;  // cannot enter the list even with the largest noise
                    }
                }
                if (!have_main) {
                    main_words = philox_block(st, base >> 2, PURPOSE_GUMBEL);
                    have_main = true;
                }
                uint w = main_words[j];
                uint tail = 0u;
                if (w < TAIL_THRESHOLD) {
                    if (!have_tail) {
                        tail_words = philox_block(st, base >> 2, PURPOSE_GUMBEL_TAIL);
                        have_tail = true;
                    }
                    tail = tail_words[j];
                }
                float gn = gumbel_noise(w, tail);
                key = xs + gn;
            }
            if (key == -INFINITY || isnan(key)) {
                continue;  // -Inf never enters; NaN rows report NaN
            }
            top_insert(top, N, pack_key(key, idx));
        }
    }

    ulong unused_key = 0ul;
    block_max_key_or(unused_key, flags, L, tg.key, tg.flags);
    float2 unused_lse = float2(-INFINITY, 0.0f);
    block_lse2(lse, unused_lse, L, tg.lse);
    block_top(top, N, L, tg);

    if (S == 1u) {
        if (L.tid == 0u) {
            write_topn<D>(row, A, out, N, flags, lse, perturbed, greedy, invT, P, tg);
        }
        return;
    }

    // Split phase: publish the list and the log-sum-exp, then count this threadgroup in.
    const ulong slot = (ulong(by) * ulong(S) + ulong(bx)) * ulong(TOPN_STRIDE);
    if (L.tid == 0u) {
        for (uint j = 0u; j < N; ++j) {
            store_key(A.partials, slot + j, tg.list[j]);
        }
        store_pair(A.partials, slot + TOPN_MAX, lse);
        if (flags != 0u) {
            atomic_fetch_or_explicit(&A.counters[2u * by + 1u], flags, memory_order_relaxed);
        }
    }
    threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);
    if (L.tid == 0u) {
        device_fence();
        uint arrived = atomic_fetch_add_explicit(&A.counters[2u * by], 1u, memory_order_relaxed);
        tg.last[0] = arrived == S - 1u ? 1u : 0u;
    }
    threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);
    if (tg.last[0] == 0u) {
        return;
    }
    device_fence();
    // The last threadgroup of the row merges the S lists.
    for (uint j = 0u; j < TOPN_MAX; ++j) {
        top[j] = 0ul;
    }
    lse = float2(-INFINITY, 0.0f);
    const ulong row_base = ulong(by) * ulong(S) * ulong(TOPN_STRIDE);
    for (uint i = L.tid; i < S * N; i += L.T) {
        uint b = i / N;
        uint j = i - b * N;
        ulong k = load_key(A.partials, row_base + ulong(b) * ulong(TOPN_STRIDE) + ulong(j));
        if (k != 0ul) {
            top_insert(top, N, k);
        }
    }
    for (uint i = L.tid; i < S; i += L.T) {
        lse = lse_merge(lse, load_pair(A.partials, row_base + ulong(i) * ulong(TOPN_STRIDE) + TOPN_MAX));
    }
    uint row_flags = 0u;
    if (L.tid == 0u) {
        row_flags = atomic_load_explicit(&A.counters[2u * by + 1u], memory_order_relaxed);
    }
    unused_key = 0ul;
    block_max_key_or(unused_key, row_flags, L, tg.key, tg.flags);
    unused_lse = float2(-INFINITY, 0.0f);
    block_lse2(lse, unused_lse, L, tg.lse);
    block_top(top, N, L, tg);
    if (L.tid == 0u) {
        atomic_store_explicit(&A.counters[2u * by], 0u, memory_order_relaxed);
        atomic_store_explicit(&A.counters[2u * by + 1u], 0u, memory_order_relaxed);
        write_topn<D>(row, A, out, N, row_flags, lse, perturbed, greedy, invT, P, tg);
    }
}

// ---------------------------------------------------------------------------------------
// Entry points (ABI.md: buffers 0-5 and 8-11, row_stride at 6, vocab at 7).

// The grid attributes are uint3 (draws are grid.z); threads_per_threadgroup is a uint3
// too, since MSL wants their vector widths to agree. Threadgroups are 1-D: only .x of
// the threadgroup size is used.
#define LANE_ARGS                                                \
    uint3 group [[threadgroup_position_in_grid]],                \
    uint3 groups [[threadgroups_per_grid]],                      \
    uint tid [[thread_index_in_threadgroup]],                    \
    uint3 tg_size [[threads_per_threadgroup]],                   \
    uint lane [[thread_index_in_simdgroup]],                     \
    uint sg [[simdgroup_index_in_threadgroup]],                  \
    uint width [[threads_per_simdgroup]],                        \
    uint nsg [[simdgroups_per_threadgroup]]

#define LANE Lane{tid, tg_size.x, lane, sg, width, nsg}

// Arguments 1-11 of gumbel_argmax and categorical.
#define SAMPLING_ARGS                                            \
    device RowParams* params [[buffer(1)]],                      \
    device atomic_int* tokens [[buffer(2)]],                     \
    device int* status [[buffer(3)]],                            \
    device atomic_uint* partials [[buffer(4)]],                  \
    device atomic_uint* counters [[buffer(5)]],                  \
    constant ulong& row_stride [[buffer(6)]],                    \
    constant uint& vocab [[buffer(7)]],                          \
    device float* logprobs [[buffer(8)]],                        \
    device const float* bias [[buffer(9)]],                      \
    device uint* counts [[buffer(10)]],                          \
    device const uint* mask [[buffer(11)]]

#define SAMPLING_BUFFERS \
    Buffers{params, tokens, status, partials, counters, row_stride, vocab, logprobs, bias, counts, mask}

// Arguments 1-11 of topn; buffer 8 is bound by the host and unused.
#define TOPN_ARGS                                                \
    device const RowParams* params [[buffer(1)]],                \
    device int* out_tokens [[buffer(2)]],                        \
    device float* out_values [[buffer(3)]],                      \
    device atomic_uint* partials [[buffer(4)]],                  \
    device atomic_uint* counters [[buffer(5)]],                  \
    constant ulong& row_stride [[buffer(6)]],                    \
    constant uint& vocab [[buffer(7)]],                          \
    device const float* bias [[buffer(9)]],                      \
    device const uint* counts [[buffer(10)]],                    \
    device const uint* mask [[buffer(11)]]

#define TOPN_BUFFERS \
    TopnBuffers{params, out_tokens, out_values, partials, counters, row_stride, vocab, bias, counts, mask}

kernel void gumbel_argmax_f32(device const float* logits [[buffer(0)]], SAMPLING_ARGS, LANE_ARGS) {
    threadgroup ulong scratch_key[MAX_SIMDGROUPS];
    threadgroup uint scratch_flags[MAX_SIMDGROUPS];
    threadgroup float4 scratch_lse[MAX_SIMDGROUPS];
    threadgroup uint last_flag[1];
    GumbelScratch tg = {scratch_key, scratch_flags, scratch_lse, last_flag};
    gumbel_argmax_impl<DTypeF32>(logits, SAMPLING_BUFFERS, group, groups, LANE, tg);
}

kernel void gumbel_argmax_f16(device const ushort* logits [[buffer(0)]], SAMPLING_ARGS, LANE_ARGS) {
    threadgroup ulong scratch_key[MAX_SIMDGROUPS];
    threadgroup uint scratch_flags[MAX_SIMDGROUPS];
    threadgroup float4 scratch_lse[MAX_SIMDGROUPS];
    threadgroup uint last_flag[1];
    GumbelScratch tg = {scratch_key, scratch_flags, scratch_lse, last_flag};
    gumbel_argmax_impl<DTypeF16>(logits, SAMPLING_BUFFERS, group, groups, LANE, tg);
}

kernel void gumbel_argmax_bf16(device const ushort* logits [[buffer(0)]], SAMPLING_ARGS, LANE_ARGS) {
    threadgroup ulong scratch_key[MAX_SIMDGROUPS];
    threadgroup uint scratch_flags[MAX_SIMDGROUPS];
    threadgroup float4 scratch_lse[MAX_SIMDGROUPS];
    threadgroup uint last_flag[1];
    GumbelScratch tg = {scratch_key, scratch_flags, scratch_lse, last_flag};
    gumbel_argmax_impl<DTypeBF16>(logits, SAMPLING_BUFFERS, group, groups, LANE, tg);
}

kernel void categorical_f32(device const float* logits [[buffer(0)]], SAMPLING_ARGS, LANE_ARGS) {
    threadgroup atomic_uint hist_lo[256];
    threadgroup atomic_uint hist_hi[256];
    threadgroup ulong scratch_u64[MAX_SIMDGROUPS];
    threadgroup uint scratch_u32[MAX_SIMDGROUPS];
    threadgroup float4 scratch_lse[MAX_SIMDGROUPS];
    threadgroup uint sel_bin[1];
    threadgroup ulong sel_above[1];
    CatScratch tg = {hist_lo, hist_hi, scratch_u64, scratch_u32, scratch_lse, sel_bin, sel_above};
    categorical_impl<DTypeF32>(logits, SAMPLING_BUFFERS, group, groups, LANE, tg);
}

kernel void categorical_f16(device const ushort* logits [[buffer(0)]], SAMPLING_ARGS, LANE_ARGS) {
    threadgroup atomic_uint hist_lo[256];
    threadgroup atomic_uint hist_hi[256];
    threadgroup ulong scratch_u64[MAX_SIMDGROUPS];
    threadgroup uint scratch_u32[MAX_SIMDGROUPS];
    threadgroup float4 scratch_lse[MAX_SIMDGROUPS];
    threadgroup uint sel_bin[1];
    threadgroup ulong sel_above[1];
    CatScratch tg = {hist_lo, hist_hi, scratch_u64, scratch_u32, scratch_lse, sel_bin, sel_above};
    categorical_impl<DTypeF16>(logits, SAMPLING_BUFFERS, group, groups, LANE, tg);
}

kernel void categorical_bf16(device const ushort* logits [[buffer(0)]], SAMPLING_ARGS, LANE_ARGS) {
    threadgroup atomic_uint hist_lo[256];
    threadgroup atomic_uint hist_hi[256];
    threadgroup ulong scratch_u64[MAX_SIMDGROUPS];
    threadgroup uint scratch_u32[MAX_SIMDGROUPS];
    threadgroup float4 scratch_lse[MAX_SIMDGROUPS];
    threadgroup uint sel_bin[1];
    threadgroup ulong sel_above[1];
    CatScratch tg = {hist_lo, hist_hi, scratch_u64, scratch_u32, scratch_lse, sel_bin, sel_above};
    categorical_impl<DTypeBF16>(logits, SAMPLING_BUFFERS, group, groups, LANE, tg);
}

kernel void topn_f32(device const float* logits [[buffer(0)]], TOPN_ARGS, LANE_ARGS) {
    threadgroup ulong scratch_key[MAX_SIMDGROUPS];
    threadgroup uint scratch_flags[MAX_SIMDGROUPS];
    threadgroup float4 scratch_lse[MAX_SIMDGROUPS];
    threadgroup ulong list[TOPN_MAX];
    threadgroup uint last_flag[1];
    TopnScratch tg = {scratch_key, scratch_flags, scratch_lse, list, last_flag};
    topn_impl<DTypeF32>(logits, TOPN_BUFFERS, group, groups, LANE, tg);
}

kernel void topn_f16(device const ushort* logits [[buffer(0)]], TOPN_ARGS, LANE_ARGS) {
    threadgroup ulong scratch_key[MAX_SIMDGROUPS];
    threadgroup uint scratch_flags[MAX_SIMDGROUPS];
    threadgroup float4 scratch_lse[MAX_SIMDGROUPS];
    threadgroup ulong list[TOPN_MAX];
    threadgroup uint last_flag[1];
    TopnScratch tg = {scratch_key, scratch_flags, scratch_lse, list, last_flag};
    topn_impl<DTypeF16>(logits, TOPN_BUFFERS, group, groups, LANE, tg);
}

kernel void topn_bf16(device const ushort* logits [[buffer(0)]], TOPN_ARGS, LANE_ARGS) {
    threadgroup ulong scratch_key[MAX_SIMDGROUPS];
    threadgroup uint scratch_flags[MAX_SIMDGROUPS];
    threadgroup float4 scratch_lse[MAX_SIMDGROUPS];
    threadgroup ulong list[TOPN_MAX];
    threadgroup uint last_flag[1];
    TopnScratch tg = {scratch_key, scratch_flags, scratch_lse, list, last_flag};
    topn_impl<DTypeBF16>(logits, TOPN_BUFFERS, group, groups, LANE, tg);
}
