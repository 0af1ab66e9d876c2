// gumbel's sampling kernels, CUDA edition, also compiled for HIP through hip_prelude.h.
//
// The contract is kernelsrc/ABI.md, whose constants and RowParams come from the generated
// abi.h; the Go edition (kernelsrc/gokernel) is the reference these kernels match token
// for token, and kernelsrc/emu runs this source on the CPU to prove it. NVRTC and hiprtc
// compile it at run time with the files below as in-memory headers; they offer no
// standard headers, so the source defines its own fixed-width types.
//
// Numerics: every float operation whose rounding the contract fixes is written with
// __fmul_rn/__fadd_rn/__fdiv_rn (never contracted into a multiply-add, whatever the
// compiler options), and logf/log1pf/expf are the accurate library functions. Only the
// log-sum-exps of the log-probability records use the hardware's fast 2^x and log2,
// which the ABI allows there.
//
// Block shape: any blockDim.x that is a multiple of the warp size, up to GB_MAX_THREADS
// (and at most warpSize warps, which every real device satisfies). Each thread takes four
// consecutive elements per step (one Philox block), with one 16-byte (f32) or 8-byte
// (f16, bf16) load where the row is aligned (checked once per row).

#include "abi.h"
#include "base.cuh"
#include "philox.cuh"
#include "reduce.cuh"
#include "lse.cuh"
#include "process.cuh"
#include "draw.cuh"
#include "gumbel_argmax.cuh"
#include "exact.cuh"
#include "categorical.cuh"
#include "topn.cuh"
#include "filtered.cuh"
#include "score.cuh"
#include "residual.cuh"
#include "shard_select.cuh"

// Entry points (names and arguments: ABI.md).

// GB_SELECT_THREADS is the largest block topn and filtered are compiled for. Their
// per-thread selection state (a thread's keys, the list's ranks, the categorical
// fallback inlined in filtered) spilled under the 64-register cap of 1024-thread blocks;
// at 512 threads ptxas may use 128. On an H200 that made min-p 4-16% faster and top-20
// log-probabilities 5-13% (docs/benchmark_results/filtered-h200.md).
#define GB_SELECT_THREADS 512

#define GB_ARGS(T)                                                                                   \
    const T *__restrict__ logits, gb_row_params *params, gb_i32 *tokens, gb_i32 *status, gb_u64 *partials, \
        gb_u32 *counters, gb_u64 row_stride, gb_u32 vocab, float *logprobs, const float *bias, gb_u32 *counts,  \
        const gb_u32 *mask, const gb_u32 *bitmask, gb_u32 vocab_offset, gb_u64 *shard,                  \
        const float *draft
#define GB_PASS logits, params, tokens, status, partials, counters, row_stride, vocab, logprobs, bias, counts, mask, bitmask
#define GB_PASS_CAT logits, params, tokens, status, counters, row_stride, vocab, logprobs, bias, counts, mask, bitmask
// Only gumbel_argmax and shard_select take vocabulary shards; the other kernels refuse
// FlagShard rows.
#define GB_NO_SHARD (void)vocab_offset, (void)shard
// Only residual reads draft probabilities.
#define GB_NO_DRAFT (void)draft

extern "C" __global__ void __launch_bounds__(GB_MAX_THREADS, 1) gumbel_argmax_f32(GB_ARGS(float)) {
    GB_NO_DRAFT;
    gb_gumbel_argmax<GB_F32>(GB_PASS, vocab_offset, shard);
}

extern "C" __global__ void __launch_bounds__(GB_MAX_THREADS, 1) gumbel_argmax_f16(GB_ARGS(gb_u16)) {
    GB_NO_DRAFT;
    gb_gumbel_argmax<GB_F16>(GB_PASS, vocab_offset, shard);
}

extern "C" __global__ void __launch_bounds__(GB_MAX_THREADS, 1) gumbel_argmax_bf16(GB_ARGS(gb_u16)) {
    GB_NO_DRAFT;
    gb_gumbel_argmax<GB_BF16>(GB_PASS, vocab_offset, shard);
}

extern "C" __global__ void __launch_bounds__(GB_MAX_THREADS) categorical_f32(GB_ARGS(float)) {
    GB_NO_DRAFT;
    (void)partials; // one block per row: no partials
    GB_NO_SHARD;
    gb_categorical<GB_F32>(GB_PASS_CAT);
}

extern "C" __global__ void __launch_bounds__(GB_MAX_THREADS) categorical_f16(GB_ARGS(gb_u16)) {
    GB_NO_DRAFT;
    (void)partials;
    GB_NO_SHARD;
    gb_categorical<GB_F16>(GB_PASS_CAT);
}

extern "C" __global__ void __launch_bounds__(GB_MAX_THREADS) categorical_bf16(GB_ARGS(gb_u16)) {
    GB_NO_DRAFT;
    (void)partials;
    GB_NO_SHARD;
    gb_categorical<GB_BF16>(GB_PASS_CAT);
}

// topn takes the 16 arguments at the positions of the other kernels (as the Go edition
// reads ABI.md): argument 8, the logprobs slot, is unused.
#define GB_TOPN_ARGS(T)                                                                                      \
    const T *__restrict__ logits, const gb_row_params *__restrict__ params, gb_i32 *out_tokens, float *out_values, \
        gb_u64 *partials, gb_u32 *counters, gb_u64 row_stride, gb_u32 vocab, float *unused, const float *bias,  \
        const gb_u32 *counts, const gb_u32 *mask, const gb_u32 *bitmask, gb_u32 vocab_offset, gb_u64 *shard,      \
        const float *draft
#define GB_TOPN_PASS logits, params, out_tokens, out_values, partials, counters, row_stride, vocab, bias, counts, mask, bitmask

extern "C" __global__ void __launch_bounds__(GB_SELECT_THREADS) topn_f32(GB_TOPN_ARGS(float)) {
    GB_NO_DRAFT;
    (void)unused;
    GB_NO_SHARD;
    gb_topn<GB_F32>(GB_TOPN_PASS);
}

extern "C" __global__ void __launch_bounds__(GB_SELECT_THREADS) topn_f16(GB_TOPN_ARGS(gb_u16)) {
    GB_NO_DRAFT;
    (void)unused;
    GB_NO_SHARD;
    gb_topn<GB_F16>(GB_TOPN_PASS);
}

extern "C" __global__ void __launch_bounds__(GB_SELECT_THREADS) topn_bf16(GB_TOPN_ARGS(gb_u16)) {
    GB_NO_DRAFT;
    (void)unused;
    GB_NO_SHARD;
    gb_topn<GB_BF16>(GB_TOPN_PASS);
}

extern "C" __global__ void __launch_bounds__(GB_MAX_THREADS) filter_max_f32(GB_ARGS(float)) {
    GB_NO_DRAFT;
    (void)tokens, (void)status, (void)counters, (void)logprobs;
    GB_NO_SHARD;
    gb_filter_max<GB_F32>(logits, params, partials, row_stride, vocab, bias, counts, mask, bitmask);
}

extern "C" __global__ void __launch_bounds__(GB_MAX_THREADS) filter_max_f16(GB_ARGS(gb_u16)) {
    GB_NO_DRAFT;
    (void)tokens, (void)status, (void)counters, (void)logprobs;
    GB_NO_SHARD;
    gb_filter_max<GB_F16>(logits, params, partials, row_stride, vocab, bias, counts, mask, bitmask);
}

extern "C" __global__ void __launch_bounds__(GB_MAX_THREADS) filter_max_bf16(GB_ARGS(gb_u16)) {
    GB_NO_DRAFT;
    (void)tokens, (void)status, (void)counters, (void)logprobs;
    GB_NO_SHARD;
    gb_filter_max<GB_BF16>(logits, params, partials, row_stride, vocab, bias, counts, mask, bitmask);
}

extern "C" __global__ void __launch_bounds__(GB_SELECT_THREADS) filtered_f32(GB_ARGS(float)) {
    GB_NO_DRAFT;
    GB_NO_SHARD;
    gb_filtered<GB_F32>(GB_PASS);
}

extern "C" __global__ void __launch_bounds__(GB_SELECT_THREADS) filtered_f16(GB_ARGS(gb_u16)) {
    GB_NO_DRAFT;
    GB_NO_SHARD;
    gb_filtered<GB_F16>(GB_PASS);
}

extern "C" __global__ void __launch_bounds__(GB_SELECT_THREADS) filtered_bf16(GB_ARGS(gb_u16)) {
    GB_NO_DRAFT;
    GB_NO_SHARD;
    gb_filtered<GB_BF16>(GB_PASS);
}

extern "C" __global__ void __launch_bounds__(GB_MAX_THREADS) score_f32(GB_ARGS(float)) {
    GB_NO_DRAFT;
    GB_NO_SHARD;
    gb_score<GB_F32>(GB_PASS);
}

extern "C" __global__ void __launch_bounds__(GB_MAX_THREADS) score_f16(GB_ARGS(gb_u16)) {
    GB_NO_DRAFT;
    GB_NO_SHARD;
    gb_score<GB_F16>(GB_PASS);
}

extern "C" __global__ void __launch_bounds__(GB_MAX_THREADS) score_bf16(GB_ARGS(gb_u16)) {
    GB_NO_DRAFT;
    GB_NO_SHARD;
    gb_score<GB_BF16>(GB_PASS);
}

extern "C" __global__ void __launch_bounds__(GB_MAX_THREADS) residual_f32(GB_ARGS(float)) {
    GB_NO_SHARD;
    gb_residual<GB_F32>(GB_PASS, draft);
}

extern "C" __global__ void __launch_bounds__(GB_MAX_THREADS) residual_f16(GB_ARGS(gb_u16)) {
    GB_NO_SHARD;
    gb_residual<GB_F16>(GB_PASS, draft);
}

extern "C" __global__ void __launch_bounds__(GB_MAX_THREADS) residual_bf16(GB_ARGS(gb_u16)) {
    GB_NO_SHARD;
    gb_residual<GB_BF16>(GB_PASS, draft);
}

// gumbel_exact reads what gumbel_argmax reads, and no scratch: one block per draw.
#define GB_PASS_EXACT logits, params, tokens, status, row_stride, vocab, logprobs, bias, counts, mask, bitmask
#define GB_NO_EXACT_SCRATCH (void)partials, (void)counters

extern "C" __global__ void __launch_bounds__(GB_MAX_THREADS) gumbel_exact_f32(GB_ARGS(float)) {
    GB_NO_DRAFT;
    GB_NO_SHARD;
    GB_NO_EXACT_SCRATCH;
    gb_gumbel_exact<GB_F32>(GB_PASS_EXACT);
}

extern "C" __global__ void __launch_bounds__(GB_MAX_THREADS) gumbel_exact_f16(GB_ARGS(gb_u16)) {
    GB_NO_DRAFT;
    GB_NO_SHARD;
    GB_NO_EXACT_SCRATCH;
    gb_gumbel_exact<GB_F16>(GB_PASS_EXACT);
}

extern "C" __global__ void __launch_bounds__(GB_MAX_THREADS) gumbel_exact_bf16(GB_ARGS(gb_u16)) {
    GB_NO_DRAFT;
    GB_NO_SHARD;
    GB_NO_EXACT_SCRATCH;
    gb_gumbel_exact<GB_BF16>(GB_PASS_EXACT);
}

// shard_select writes only its shard argument: no tokens, statuses, records or scratch.
#define GB_PASS_SELECT logits, params, row_stride, vocab, bias, counts, mask, bitmask, vocab_offset, shard
#define GB_NO_SELECT_OUTPUTS (void)tokens, (void)status, (void)partials, (void)counters, (void)logprobs

extern "C" __global__ void __launch_bounds__(GB_MAX_THREADS) shard_select_f32(GB_ARGS(float)) {
    GB_NO_DRAFT;
    GB_NO_SELECT_OUTPUTS;
    gb_shard_select<GB_F32>(GB_PASS_SELECT);
}

extern "C" __global__ void __launch_bounds__(GB_MAX_THREADS) shard_select_f16(GB_ARGS(gb_u16)) {
    GB_NO_DRAFT;
    GB_NO_SELECT_OUTPUTS;
    gb_shard_select<GB_F16>(GB_PASS_SELECT);
}

extern "C" __global__ void __launch_bounds__(GB_MAX_THREADS) shard_select_bf16(GB_ARGS(gb_u16)) {
    GB_NO_DRAFT;
    GB_NO_SELECT_OUTPUTS;
    gb_shard_select<GB_BF16>(GB_PASS_SELECT);
}
