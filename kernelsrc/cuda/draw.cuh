// A draw's outputs: the token and status of its slot, its log-probability record, and
// the row's end-of-draws work (RECORD and ADVANCE, ABI.md "Draws, RECORD and ADVANCE").

// gb_seen_status is the status a row's observations give its draws: 1 for a NaN or +Inf
// logit, 2 for no finite one, else 0.
__device__ __forceinline__ gb_i32 gb_seen_status(gb_u32 flags) {
    if (flags & GB_SEEN_NONFINITE) {
        return GB_STATUS_NONFINITE;
    }
    return (flags & GB_SEEN_FINITE) ? GB_STATUS_OK : GB_STATUS_NO_FINITE;
}

// gb_finish turns a draw's winner key and observations into the token and status of its
// output slot, and returns the status.
__device__ __forceinline__ gb_i32 gb_finish(gb_i32* tokens, gb_i32* status, gb_u64 slot, gb_u64 key, gb_u32 flags) {
    const gb_i32 st = gb_seen_status(flags);
    const gb_i32 tok = (gb_i32)(0xFFFFFFFFu - (gb_u32)key);
    tokens[slot] = st == GB_STATUS_OK ? tok : -1;
    status[slot] = st;
    return st;
}

// gb_key_inexact reports a packed key whose score reaches GB_EXACT_LIMIT in magnitude,
// where a float32 score may no longer hold the noise (ABI.md, "Exact scores"): its draw
// needs the exact comparison.
__device__ __forceinline__ bool gb_key_inexact(gb_u64 key) {
    return !(fabsf(gb_orderkey_inverse((gb_u32)(key >> 32))) < GB_EXACT_LIMIT);
}

// gb_exact_needed reports a gumbel_argmax draw of status 0 whose winning key is inexact:
// the caller then rewrites its status to 5 (GB_STATUS_EXACT), after its token and record,
// for gumbel_exact. It reads only the key, so that the finishing thread needs nothing it
// did not hold already.
__device__ __forceinline__ bool gb_exact_needed(gb_i32 st, gb_u64 key) {
    return st == GB_STATUS_OK && gb_key_inexact(key);
}

// gb_shard_key is a FlagShard draw's shard key (ABI.md, "Vocabulary shards"): its
// winner key for status 0, 0 for status 2, GB_SHARD_KEY_FAILED | status otherwise.
__device__ __forceinline__ gb_u64 gb_shard_key(gb_u64 key, gb_i32 st) {
    return st == GB_STATUS_OK ? key : st == GB_STATUS_NO_FINITE ? 0ull : (GB_SHARD_KEY_FAILED | (gb_u32)st);
}

// gb_write_record stores a slot's log-probability record (ABI.md): NaN unless ok.
__device__ __forceinline__ void gb_write_record(float* logprobs, gb_u64 o, bool ok, float raw_x, float lse_raw,
                                                float proc_v, float lse_proc) {
    float* rec = logprobs + 4u * o;
    if (!ok) {
        const float nan = __uint_as_float(0x7FC00000u);
        rec[0] = rec[1] = rec[2] = rec[3] = nan;
        return;
    }
    rec[0] = __fadd_rn(raw_x, -lse_raw);
    rec[1] = __fadd_rn(proc_v, -lse_proc);
    rec[2] = lse_raw;
    rec[3] = lse_proc;
}

// gb_row_done is the end-of-draw work of thread 0 of the block that finished draw z of
// launch row y, after that draw's outputs are written: the last of the row's D draws to
// get here does the row's RECORD and ADVANCE (ABI.md, "Draws"). Every block of every draw
// has read the row's step and counts before it counted its arrival, so nothing races.
__device__ __forceinline__ void gb_row_done(gb_row_params* params, const gb_row_params& p, gb_u32 y,
                                            gb_u32* counters, const gb_i32* tokens, const gb_i32* status,
                                            gb_u32* counts, gb_u32 vocab) {
    if (!(p.flags & (GB_FLAG_ADVANCE | GB_FLAG_RECORD))) {
        return;
    }
    const gb_u32 D = gridDim.z;
    if (D > 1u) {
        // This draw's outputs before its arrival; every draw's before the reads below.
        gb_u32* c = counters + 2u * (gb_u64)gridDim.y * D + y;
        if (!gb_arrive(c, D)) {
            return;
        }
        atomicExch(c, 0u);
    }
    if (p.flags & GB_FLAG_RECORD) {
        const gb_u64 first = (gb_u64)p.row * D;
        gb_u32* row_counts = counts + (gb_u64)p.row * vocab;
        bool pending = false; // a draw left for gumbel_exact, which then counts the row
        for (gb_u32 z = 0; z < D; ++z) {
            pending = pending || ((const volatile gb_i32*)status)[first + z] == GB_STATUS_EXACT;
        }
        for (gb_u32 z = 0; z < D && !pending; ++z) {
            if (((const volatile gb_i32*)status)[first + z] != GB_STATUS_OK) {
                continue;
            }
            const gb_i32 tok = ((const volatile gb_i32*)tokens)[first + z];
            if (tok < 0 || (gb_u32)tok >= vocab) {
                continue; // cannot happen for status 0
            }
            const gb_u32 c = row_counts[tok];
            if ((c & GB_COUNT_MASK) != GB_COUNT_MASK) {
                row_counts[tok] = c + 1u; // keeps bit 31, the prompt mark
            }
        }
    }
    if (p.flags & GB_FLAG_ADVANCE) {
        gb_u32 lo, hi;
        gb_step_plus(p, D, lo, hi);
        params[y].step_lo = lo;
        params[y].step_hi = hi;
    }
}

// gb_write_record_sets stores slot o's log-probability record (ABI.md) from the token's
// raw logit x and value v and the two sets, each log-probability taken from its set's
// reference (gb_lse_logprob). nl = 1: proc is raw too, and x = v.
__device__ __forceinline__ void gb_write_record_sets(float* logprobs, gb_u64 o, bool ok, int nl, float x, float v,
                                                     const gb_lse& raw, const gb_lse& proc) {
    float* rec = logprobs + 4u * o;
    if (!ok) {
        const float nan = __uint_as_float(0x7FC00000u);
        rec[0] = rec[1] = rec[2] = rec[3] = nan;
        return;
    }
    float lse_proc;
    const float lp_proc = gb_lse_logprob(v, proc.m, proc.s, lse_proc);
    float lse_raw = lse_proc;
    float lp_raw = lp_proc;
    if (nl != 1) {
        lp_raw = gb_lse_logprob(x, raw.m, raw.s, lse_raw);
    }
    rec[0] = lp_raw;
    rec[1] = lp_proc;
    rec[2] = lse_raw;
    rec[3] = lse_proc;
}
