// score (ABI.md): the raw and processed log-probabilities of a given token and its raw
// rank, S >= 1 blocks per row, nothing drawn. One pass over the row: two log-sum-exps
// and a count beside the loads, as gumbel_argmax's record does beside its arg-max.

// gb_score_scan folds the chunk [start, end) into the thread's raw and processed
// log-sum-exps (processed: fl(x' * invT)), its count of raw logits at or above xt, the
// token's, and its observations. PROC processes the logits first.
template <int KIND, bool PROC>
__device__ __forceinline__ void gb_score_scan(const typename gb_io<KIND>::elem* row, gb_u32 start, gb_u32 end,
                                              bool vec, float invT, float xt, const gb_processor& pc, gb_lse& raw,
                                              gb_lse& proc, gb_u32& above, gb_u32& seen) {
    for (gb_u32 g = start + 4u * threadIdx.x; g < end; g += 4u * blockDim.x) {
        float x[4];
        const gb_u32 n = gb_load_group<KIND>(row, g, end, vec, x); // -Inf past n
        gb_lse_add4(raw, x, gb_max4(x));
#pragma unroll
        for (gb_u32 j = 0; j < 4u; ++j) {
            above += (j < n && x[j] >= xt) ? 1u : 0u;
        }
        float v[4];
        if (PROC) {
            seen |= gb_process_group(pc, g, n, x, v);
        } else {
            seen |= gb_group_seen(x, n);
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                v[j] = x[j];
            }
        }
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            v[j] = __fmul_rn(v[j], invT);
        }
        gb_lse_add4(proc, v, gb_max4(v));
    }
}

// gb_score is the kernel: block (x, y) scans its chunk of launch row y; the row's last
// block to arrive merges the blocks' words and writes the row's slot (o = row): the
// token's record in logprobs, its rank in tokens, the status in status.
template <int KIND>
__device__ __forceinline__ void gb_score(const typename gb_io<KIND>::elem* __restrict__ logits,
                                         const gb_row_params* __restrict__ params, gb_i32* tokens, gb_i32* status,
                                         gb_u64* partials, gb_u32* counters, gb_u64 row_stride, gb_u32 vocab,
                                         float* logprobs, const float* bias, const gb_u32* counts, const gb_u32* mask,
                                         const gb_u32* bitmask) {
    __shared__ gb_u64 s_pair[2 * GB_MAX_WARPS];
    __shared__ gb_u64 s_red[GB_MAX_WARPS];
    __shared__ gb_u64 s_bcast[2];
    __shared__ gb_u32 s_last;

    if (blockIdx.z != 0u) {
        return; // score draws nothing: a deeper grid's extra blocks have no work
    }
    const gb_u32 y = blockIdx.y;
    const gb_u32 nblocks = gridDim.x;
    const gb_row_params p = params[y];
    const gb_u64 o = p.row;
    if (gb_bad_flags(p.flags) || gb_bad_row(p.temperature, vocab) || p.token >= vocab) {
        if (blockIdx.x == 0u && threadIdx.x == 0u) {
            tokens[o] = -1;
            status[o] = GB_STATUS_BAD_PARAMS;
            gb_write_record(logprobs, o, false, 0.0f, 0.0f, 0.0f, 0.0f);
        }
        return;
    }

    gb_u32 start, end;
    gb_chunk_of(vocab, nblocks, blockIdx.x, start, end);

    const typename gb_io<KIND>::elem* row = logits + (gb_u64)p.row * row_stride;
    const bool vec = gb_io<KIND>::vec_ok(row);
    const float invT = p.temperature == 0.0f ? 1.0f : 1.0f / p.temperature;
    const gb_processor pc = gb_processor_of(p, bias, counts, mask, bitmask, vocab);
    const float xt = gb_io<KIND>::load1(row + p.token);

    gb_lse raw, proc;
    gb_lse_init(raw);
    gb_lse_init(proc);
    gb_u32 above = 0u, seen = 0u;
    if (pc.flags == 0u) {
        gb_score_scan<KIND, false>(row, start, end, vec, invT, xt, pc, raw, proc, above, seen);
    } else {
        gb_score_scan<KIND, true>(row, start, end, vec, invT, xt, pc, raw, proc, above, seen);
    }
    gb_u32 none = 0u;
    gb_block_max_or(none, seen, s_red, s_bcast);
    gb_u64 total = gb_block_sum_u64(above, s_red, s_bcast);
    gb_block_lse(raw, proc, true, s_pair); // thread 0 holds the block's sets

    if (nblocks > 1u) {
        gb_u64* part = partials + (gb_u64)GB_SCORE_STRIDE * ((gb_u64)y * nblocks + blockIdx.x);
        if (threadIdx.x == 0u) {
            part[0] = gb_lse_pack(raw);
            part[1] = gb_lse_pack(proc);
            part[2] = total;
            if (seen != 0u) {
                atomicOr(&counters[2u * y + 1u], seen);
            }
            s_last = gb_arrive(&counters[2u * y], nblocks) ? 1u : 0u;
        }
        __syncthreads();
        if (s_last == 0u) {
            return;
        }
        if (threadIdx.x != 0u) {
            return;
        }
        const gb_u64* row_part = partials + (gb_u64)GB_SCORE_STRIDE * y * nblocks;
        gb_lse_init(raw);
        gb_lse_init(proc);
        total = 0ull;
        for (gb_u32 i = 0; i < nblocks; ++i) {
            gb_lse_merge_packed(raw, gb_load_published(row_part + (gb_u64)GB_SCORE_STRIDE * i));
            gb_lse_merge_packed(proc, gb_load_published(row_part + (gb_u64)GB_SCORE_STRIDE * i + 1u));
            total += gb_load_published(row_part + (gb_u64)GB_SCORE_STRIDE * i + 2u);
        }
        seen = atomicExch(&counters[2u * y + 1u], 0u);
        atomicExch(&counters[2u * y], 0u);
    } else if (threadIdx.x != 0u) {
        return;
    }
    const gb_i32 st = gb_seen_status(seen);
    tokens[o] = st == GB_STATUS_OK ? (gb_i32)(total < 0x7FFFFFFFull ? total : 0x7FFFFFFFull) : -1;
    status[o] = st;
    const float v = __fmul_rn(gb_processed(pc, xt, p.token), invT);
    gb_write_record_sets(logprobs, o, st == GB_STATUS_OK, 2, xt, v, raw, proc);
}
