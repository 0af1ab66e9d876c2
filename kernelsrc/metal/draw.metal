// A draw's outputs (token, status and log-probability record of its slot) and the row's
// end-of-draws work (ABI.md, "Draws, RECORD and ADVANCE"), shared by gumbel_argmax and
// categorical (score and residual write their slots with gb_finish too).

// Arguments 1-15 of gumbel_argmax, categorical, filtered, score and residual.
struct gb_buffers {
    device gb_row_params* params;
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
    device const uint* bitmask;
    uint vocab_offset;
    device ulong* shard;
    device const float* draft;
};

// The status a row's observations give its draws.
inline int gb_seen_status(uint seen) {
    if ((seen & GB_SEEN_NONFINITE) != 0u) {
        return GB_STATUS_NONFINITE;
    }
    return (seen & GB_SEEN_FINITE) == 0u ? GB_STATUS_NO_FINITE : GB_STATUS_OK;
}

// Slot o's log-probability record: NaN in all four words unless the status is 0.
inline void gb_write_record(gb_buffers B, ulong o, int st, float4 record) {
    if (st != GB_STATUS_OK) {
        record = float4(NAN, NAN, NAN, NAN);
    }
    ulong w = ulong(GB_RECORD_WORDS) * o;
    B.logprobs[w] = record.x;
    B.logprobs[w + 1ul] = record.y;
    B.logprobs[w + 2ul] = record.z;
    B.logprobs[w + 3ul] = record.w;
}

// A FlagShard draw's shard key (ABI.md, "Vocabulary shards"): its winner key for status
// 0, 0 for status 2, GB_SHARD_KEY_FAILED | status otherwise.
inline ulong gb_shard_key(ulong key, int st) {
    return st == GB_STATUS_OK ? key : st == GB_STATUS_NO_FINITE ? 0ul : (GB_SHARD_KEY_FAILED | ulong(uint(st)));
}

// Writes output slot o: token (-1 unless the status is 0), status and, with
// GB_FLAG_LOGPROBS, the record. The token is an atomic store because gb_row_done may
// read it back in another threadgroup.
inline void gb_finish(gb_buffers B, uint flags, ulong o, int token, int st, float4 record) {
    atomic_store_explicit(&B.tokens[o], st == GB_STATUS_OK ? token : -1, memory_order_relaxed);
    // Atomic too: gb_row_done looks for status 5 from another threadgroup.
    atomic_store_explicit((device atomic_int*)&B.status[o], st, memory_order_relaxed);
    if ((flags & GB_FLAG_LOGPROBS) != 0u) {
        gb_write_record(B, o, st, record);
    }
}

// gb_finish for gumbel_argmax, which also writes a shard's key; key is read for status 0.
inline void gb_finish_shard(gb_buffers B, uint flags, ulong o, ulong key, int st, float4 record) {
    gb_finish(B, flags, o, int(0xFFFFFFFFu - uint(key)), st, record);
    if ((flags & GB_FLAG_SHARD) != 0u) {
        B.shard[o] = gb_shard_key(key, st);
    }
}

// Run by the one thread that wrote a draw's slot, after writing it: the row's RECORD and
// ADVANCE work once all D draws of the row are written. Every threadgroup of every draw
// read the row's step and counts before it counted itself in, so the last one to arrive
// updates them racing with nothing in this launch. Tokens are written and read back with
// atomics for the same reason as the partials (see gb_arrive); one thread runs this, so
// no threadgroup barrier can order it and before MSL 3.2 the order of device atomics at
// the coherence point is what holds.
inline void gb_row_done(gb_buffers B, thread const gb_row_params& p, uint y, uint n, uint draws) {
    if ((p.flags & (GB_FLAG_ADVANCE | GB_FLAG_RECORD)) == 0u) {
        return;
    }
    if (draws > 1u) {
        gb_device_fence();
        uint slot = 2u * n * draws + y;
        uint done = atomic_fetch_add_explicit(&B.counters[slot], 1u, memory_order_relaxed);
        if (done != draws - 1u) {
            return;
        }
        gb_device_fence();
        atomic_store_explicit(&B.counters[slot], 0u, memory_order_relaxed);
    }
    bool pending = false;  // a draw left for gumbel_exact, which then counts the row
    for (uint z = 0u; z < draws && (p.flags & GB_FLAG_RECORD) != 0u; ++z) {
        device atomic_int* st = (device atomic_int*)&B.status[ulong(p.row) * ulong(draws) + ulong(z)];
        pending = pending || atomic_load_explicit(st, memory_order_relaxed) == GB_STATUS_EXACT;
    }
    if ((p.flags & GB_FLAG_RECORD) != 0u && !pending) {
        device uint* counts = B.counts + ulong(p.row) * ulong(B.vocab);
        for (uint z = 0u; z < draws; ++z) {
            int tok = atomic_load_explicit(&B.tokens[ulong(p.row) * ulong(draws) + ulong(z)], memory_order_relaxed);
            if (tok < 0 || uint(tok) >= B.vocab) {
                continue;  // a draw whose status is not 0
            }
            uint c = counts[tok];
            if ((c & GB_COUNT_MASK) != GB_COUNT_MASK) {
                counts[tok] = c + 1u;  // saturating; bit 31 (a prompt token) is kept
            }
        }
    }
    if ((p.flags & GB_FLAG_ADVANCE) != 0u) {
        ulong step = gb_step_plus(p, draws);
        B.params[y].step_lo = uint(step);
        B.params[y].step_hi = uint(step >> 32);
    }
}
