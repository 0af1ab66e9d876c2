// The Metal Shading Language edition of gumbel's sampling kernels: the entry points, and
// the includes that package kernelsrc expands into the one source Metal's compiler takes
// (kernelsrc.Metal). kernelsrc/ABI.md is the contract (names, arguments, RowParams,
// status codes, arithmetic); package philox is the random stream and its noise;
// kernelsrc/gokernel is the reference this edition matches.
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
// disagree with it, as ABI.md allows). log1p (philox.metal) and the division of the
// repetition penalty (base.metal) are computed so that they round as the Go edition's;
// the log-sum-exps of the records (lse.metal) use fast::exp, as ABI.md allows.
//
// Launch shape. Threadgroups are 1-D of T threads, T a multiple of the SIMD-group width
// (32 on every Apple GPU; any power of two from 8 to 64 works) and at most 1024. The
// grid is (S, n, D) for gumbel_argmax and filtered, (1, n, D) for categorical and (S, n, 1)
// for topn, filter_max, score, residual and shard_select; threadgroup (x, y, z) works on
// launch row y, draw z (filtered and shard_select: threadgroup x == 0 only).
//
// Arguments bind at the index of their ABI position (all sixteen): buffers with
// setBuffer, row_stride (6), vocab (7) and vocab_offset (13) with setBytes. Every
// device-side write that another threadgroup of the same launch reads back (partials,
// counters, tokens) goes through 32-bit atomics (see reduce.metal).

#include <metal_stdlib>
using namespace metal;

#pragma clang fp contract(off)

// Each file uses only those above it.
#include "abi.h"
#include "base.metal"
#include "philox.metal"
#include "reduce.metal"
#include "lse.metal"
#include "process.metal"
#include "draw.metal"
#include "exact.metal"
#include "gumbel_argmax.metal"
#include "categorical.metal"
#include "topn.metal"
#include "filtered.metal"
#include "score.metal"
#include "residual.metal"
#include "shard_select.metal"

// ---------------------------------------------------------------------------------------
// Entry points (ABI.md: buffers 0-5, 8-12, 14 and 15, row_stride at 6, vocab at 7,
// vocab_offset at 13). Threadgroup memory is declared here, in the kernels, as MSL
// requires, and handed to the implementations as pointers.

// The grid attributes are uint3 (draws are grid.z); threads_per_threadgroup is a uint3
// too, since MSL wants their vector widths to agree. Threadgroups are 1-D: only .x of
// the threadgroup size is used.
#define GB_THREAD_ARGS                                           \
    uint3 group [[threadgroup_position_in_grid]],                \
    uint3 groups [[threadgroups_per_grid]],                      \
    uint tid [[thread_index_in_threadgroup]],                    \
    uint3 tg_size [[threads_per_threadgroup]],                   \
    uint lane [[thread_index_in_simdgroup]],                     \
    uint sg [[simdgroup_index_in_threadgroup]],                  \
    uint width [[threads_per_simdgroup]],                        \
    uint nsg [[simdgroups_per_threadgroup]]

#define GB_THREAD_IDS gb_thread_ids{tid, tg_size.x, lane, sg, width, nsg}

// Arguments 1-15 of gumbel_argmax, categorical, filter_max, filtered, score, residual and
// shard_select.
#define GB_SAMPLING_ARGS                                         \
    device gb_row_params* params [[buffer(1)]],                  \
    device atomic_int* tokens [[buffer(2)]],                     \
    device int* status [[buffer(3)]],                            \
    device atomic_uint* partials [[buffer(4)]],                  \
    device atomic_uint* counters [[buffer(5)]],                  \
    constant ulong& row_stride [[buffer(6)]],                    \
    constant uint& vocab [[buffer(7)]],                          \
    device float* logprobs [[buffer(8)]],                        \
    device const float* bias [[buffer(9)]],                      \
    device uint* counts [[buffer(10)]],                          \
    device const uint* mask [[buffer(11)]],                      \
    device const uint* bitmask [[buffer(12)]],                   \
    constant uint& vocab_offset [[buffer(13)]],                  \
    device ulong* shard [[buffer(14)]],                          \
    device const float* draft [[buffer(15)]]

#define GB_SAMPLING_BUFFERS                                                                                   \
    gb_buffers{params, tokens, status, partials, counters, row_stride, vocab, logprobs, bias, counts, mask, bitmask, \
               vocab_offset, shard, draft}

// Arguments 1-12 of topn; buffer 8 is bound by the host and unused, and so are 13 and 14
// (topn draws no vocabulary shards) and 15 (nor verifies drafts): Metal lets a kernel
// leave a bound index undeclared.
#define GB_TOPN_ARGS                                             \
    device const gb_row_params* params [[buffer(1)]],            \
    device int* out_tokens [[buffer(2)]],                        \
    device float* out_values [[buffer(3)]],                      \
    device atomic_uint* partials [[buffer(4)]],                  \
    device atomic_uint* counters [[buffer(5)]],                  \
    constant ulong& row_stride [[buffer(6)]],                    \
    constant uint& vocab [[buffer(7)]],                          \
    device const float* bias [[buffer(9)]],                      \
    device const uint* counts [[buffer(10)]],                    \
    device const uint* mask [[buffer(11)]],                      \
    device const uint* bitmask [[buffer(12)]]

#define GB_TOPN_BUFFERS \
    gb_topn_buffers{params, out_tokens, out_values, partials, counters, row_stride, vocab, bias, counts, mask, bitmask}

kernel void gumbel_argmax_f32(device const float* logits [[buffer(0)]], GB_SAMPLING_ARGS, GB_THREAD_ARGS) {
    threadgroup ulong scratch_key[GB_MAX_SIMDGROUPS];
    threadgroup uint scratch_seen[GB_MAX_SIMDGROUPS];
    threadgroup float4 scratch_lse[GB_MAX_SIMDGROUPS];
    threadgroup uint last[1];
    gb_gumbel_scratch tg = {scratch_key, scratch_seen, scratch_lse, last};
    gb_gumbel_argmax<GB_F32>(logits, GB_SAMPLING_BUFFERS, group, groups, GB_THREAD_IDS, tg);
}

kernel void gumbel_argmax_f16(device const ushort* logits [[buffer(0)]], GB_SAMPLING_ARGS, GB_THREAD_ARGS) {
    threadgroup ulong scratch_key[GB_MAX_SIMDGROUPS];
    threadgroup uint scratch_seen[GB_MAX_SIMDGROUPS];
    threadgroup float4 scratch_lse[GB_MAX_SIMDGROUPS];
    threadgroup uint last[1];
    gb_gumbel_scratch tg = {scratch_key, scratch_seen, scratch_lse, last};
    gb_gumbel_argmax<GB_F16>(logits, GB_SAMPLING_BUFFERS, group, groups, GB_THREAD_IDS, tg);
}

kernel void gumbel_argmax_bf16(device const ushort* logits [[buffer(0)]], GB_SAMPLING_ARGS, GB_THREAD_ARGS) {
    threadgroup ulong scratch_key[GB_MAX_SIMDGROUPS];
    threadgroup uint scratch_seen[GB_MAX_SIMDGROUPS];
    threadgroup float4 scratch_lse[GB_MAX_SIMDGROUPS];
    threadgroup uint last[1];
    gb_gumbel_scratch tg = {scratch_key, scratch_seen, scratch_lse, last};
    gb_gumbel_argmax<GB_BF16>(logits, GB_SAMPLING_BUFFERS, group, groups, GB_THREAD_IDS, tg);
}

kernel void categorical_f32(device const float* logits [[buffer(0)]], GB_SAMPLING_ARGS, GB_THREAD_ARGS) {
    threadgroup atomic_uint hist_lo[GB_BINS];
    threadgroup atomic_uint hist_hi[GB_BINS];
    threadgroup uint sel_bin[1];
    threadgroup ulong sel_above[1];
    threadgroup ulong scratch_u64[GB_MAX_SIMDGROUPS];
    threadgroup uint scratch_u32[GB_MAX_SIMDGROUPS];
    threadgroup float4 scratch_lse[GB_MAX_SIMDGROUPS];
    gb_categorical_scratch tg = {{hist_lo, hist_hi, sel_bin, sel_above}, scratch_u64, scratch_u32, scratch_lse};
    gb_categorical<GB_F32>(logits, GB_SAMPLING_BUFFERS, group, groups, GB_THREAD_IDS, tg);
}

kernel void categorical_f16(device const ushort* logits [[buffer(0)]], GB_SAMPLING_ARGS, GB_THREAD_ARGS) {
    threadgroup atomic_uint hist_lo[GB_BINS];
    threadgroup atomic_uint hist_hi[GB_BINS];
    threadgroup uint sel_bin[1];
    threadgroup ulong sel_above[1];
    threadgroup ulong scratch_u64[GB_MAX_SIMDGROUPS];
    threadgroup uint scratch_u32[GB_MAX_SIMDGROUPS];
    threadgroup float4 scratch_lse[GB_MAX_SIMDGROUPS];
    gb_categorical_scratch tg = {{hist_lo, hist_hi, sel_bin, sel_above}, scratch_u64, scratch_u32, scratch_lse};
    gb_categorical<GB_F16>(logits, GB_SAMPLING_BUFFERS, group, groups, GB_THREAD_IDS, tg);
}

kernel void categorical_bf16(device const ushort* logits [[buffer(0)]], GB_SAMPLING_ARGS, GB_THREAD_ARGS) {
    threadgroup atomic_uint hist_lo[GB_BINS];
    threadgroup atomic_uint hist_hi[GB_BINS];
    threadgroup uint sel_bin[1];
    threadgroup ulong sel_above[1];
    threadgroup ulong scratch_u64[GB_MAX_SIMDGROUPS];
    threadgroup uint scratch_u32[GB_MAX_SIMDGROUPS];
    threadgroup float4 scratch_lse[GB_MAX_SIMDGROUPS];
    gb_categorical_scratch tg = {{hist_lo, hist_hi, sel_bin, sel_above}, scratch_u64, scratch_u32, scratch_lse};
    gb_categorical<GB_BF16>(logits, GB_SAMPLING_BUFFERS, group, groups, GB_THREAD_IDS, tg);
}

kernel void topn_f32(device const float* logits [[buffer(0)]], GB_TOPN_ARGS, GB_THREAD_ARGS) {
    threadgroup ulong scratch_key[GB_MAX_SIMDGROUPS];
    threadgroup uint scratch_seen[GB_MAX_SIMDGROUPS];
    threadgroup float4 scratch_lse[GB_MAX_SIMDGROUPS];
    threadgroup ulong list[GB_MAX_TOPN];
    threadgroup uint last[1];
    threadgroup gb_exact win[GB_MAX_SIMDGROUPS];
    gb_topn_scratch tg = {scratch_key, scratch_seen, scratch_lse, list, last, win};
    gb_topn<GB_F32>(logits, GB_TOPN_BUFFERS, group, groups, GB_THREAD_IDS, tg);
}

kernel void topn_f16(device const ushort* logits [[buffer(0)]], GB_TOPN_ARGS, GB_THREAD_ARGS) {
    threadgroup ulong scratch_key[GB_MAX_SIMDGROUPS];
    threadgroup uint scratch_seen[GB_MAX_SIMDGROUPS];
    threadgroup float4 scratch_lse[GB_MAX_SIMDGROUPS];
    threadgroup ulong list[GB_MAX_TOPN];
    threadgroup uint last[1];
    threadgroup gb_exact win[GB_MAX_SIMDGROUPS];
    gb_topn_scratch tg = {scratch_key, scratch_seen, scratch_lse, list, last, win};
    gb_topn<GB_F16>(logits, GB_TOPN_BUFFERS, group, groups, GB_THREAD_IDS, tg);
}

kernel void topn_bf16(device const ushort* logits [[buffer(0)]], GB_TOPN_ARGS, GB_THREAD_ARGS) {
    threadgroup ulong scratch_key[GB_MAX_SIMDGROUPS];
    threadgroup uint scratch_seen[GB_MAX_SIMDGROUPS];
    threadgroup float4 scratch_lse[GB_MAX_SIMDGROUPS];
    threadgroup ulong list[GB_MAX_TOPN];
    threadgroup uint last[1];
    threadgroup gb_exact win[GB_MAX_SIMDGROUPS];
    gb_topn_scratch tg = {scratch_key, scratch_seen, scratch_lse, list, last, win};
    gb_topn<GB_BF16>(logits, GB_TOPN_BUFFERS, group, groups, GB_THREAD_IDS, tg);
}

kernel void filter_max_f32(device const float* logits [[buffer(0)]], GB_SAMPLING_ARGS, GB_THREAD_ARGS) {
    gb_filter_max<GB_F32>();
}

kernel void filter_max_f16(device const ushort* logits [[buffer(0)]], GB_SAMPLING_ARGS, GB_THREAD_ARGS) {
    gb_filter_max<GB_F16>();
}

kernel void filter_max_bf16(device const ushort* logits [[buffer(0)]], GB_SAMPLING_ARGS, GB_THREAD_ARGS) {
    gb_filter_max<GB_BF16>();
}

kernel void filtered_f32(device const float* logits [[buffer(0)]], GB_SAMPLING_ARGS, GB_THREAD_ARGS) {
    threadgroup atomic_uint hist_lo[GB_BINS];
    threadgroup atomic_uint hist_hi[GB_BINS];
    threadgroup uint sel_bin[1];
    threadgroup ulong sel_above[1];
    threadgroup ulong scratch_u64[GB_MAX_SIMDGROUPS];
    threadgroup uint scratch_u32[GB_MAX_SIMDGROUPS];
    threadgroup float4 scratch_lse[GB_MAX_SIMDGROUPS];
    threadgroup gb_exact scratch_win[GB_MAX_SIMDGROUPS];
    gb_categorical_scratch tg = {{hist_lo, hist_hi, sel_bin, sel_above}, scratch_u64, scratch_u32, scratch_lse,
                                 scratch_win};
    gb_filtered<GB_F32>(logits, GB_SAMPLING_BUFFERS, group, groups, GB_THREAD_IDS, tg);
}

kernel void filtered_f16(device const ushort* logits [[buffer(0)]], GB_SAMPLING_ARGS, GB_THREAD_ARGS) {
    threadgroup atomic_uint hist_lo[GB_BINS];
    threadgroup atomic_uint hist_hi[GB_BINS];
    threadgroup uint sel_bin[1];
    threadgroup ulong sel_above[1];
    threadgroup ulong scratch_u64[GB_MAX_SIMDGROUPS];
    threadgroup uint scratch_u32[GB_MAX_SIMDGROUPS];
    threadgroup float4 scratch_lse[GB_MAX_SIMDGROUPS];
    threadgroup gb_exact scratch_win[GB_MAX_SIMDGROUPS];
    gb_categorical_scratch tg = {{hist_lo, hist_hi, sel_bin, sel_above}, scratch_u64, scratch_u32, scratch_lse,
                                 scratch_win};
    gb_filtered<GB_F16>(logits, GB_SAMPLING_BUFFERS, group, groups, GB_THREAD_IDS, tg);
}

kernel void filtered_bf16(device const ushort* logits [[buffer(0)]], GB_SAMPLING_ARGS, GB_THREAD_ARGS) {
    threadgroup atomic_uint hist_lo[GB_BINS];
    threadgroup atomic_uint hist_hi[GB_BINS];
    threadgroup uint sel_bin[1];
    threadgroup ulong sel_above[1];
    threadgroup ulong scratch_u64[GB_MAX_SIMDGROUPS];
    threadgroup uint scratch_u32[GB_MAX_SIMDGROUPS];
    threadgroup float4 scratch_lse[GB_MAX_SIMDGROUPS];
    threadgroup gb_exact scratch_win[GB_MAX_SIMDGROUPS];
    gb_categorical_scratch tg = {{hist_lo, hist_hi, sel_bin, sel_above}, scratch_u64, scratch_u32, scratch_lse,
                                 scratch_win};
    gb_filtered<GB_BF16>(logits, GB_SAMPLING_BUFFERS, group, groups, GB_THREAD_IDS, tg);
}

kernel void score_f32(device const float* logits [[buffer(0)]], GB_SAMPLING_ARGS, GB_THREAD_ARGS) {
    threadgroup ulong scratch_key[GB_MAX_SIMDGROUPS];
    threadgroup uint scratch_seen[GB_MAX_SIMDGROUPS];
    threadgroup float4 scratch_lse[GB_MAX_SIMDGROUPS];
    threadgroup uint last[1];
    gb_gumbel_scratch tg = {scratch_key, scratch_seen, scratch_lse, last};
    gb_score<GB_F32>(logits, GB_SAMPLING_BUFFERS, group, groups, GB_THREAD_IDS, tg);
}

kernel void score_f16(device const ushort* logits [[buffer(0)]], GB_SAMPLING_ARGS, GB_THREAD_ARGS) {
    threadgroup ulong scratch_key[GB_MAX_SIMDGROUPS];
    threadgroup uint scratch_seen[GB_MAX_SIMDGROUPS];
    threadgroup float4 scratch_lse[GB_MAX_SIMDGROUPS];
    threadgroup uint last[1];
    gb_gumbel_scratch tg = {scratch_key, scratch_seen, scratch_lse, last};
    gb_score<GB_F16>(logits, GB_SAMPLING_BUFFERS, group, groups, GB_THREAD_IDS, tg);
}

kernel void score_bf16(device const ushort* logits [[buffer(0)]], GB_SAMPLING_ARGS, GB_THREAD_ARGS) {
    threadgroup ulong scratch_key[GB_MAX_SIMDGROUPS];
    threadgroup uint scratch_seen[GB_MAX_SIMDGROUPS];
    threadgroup float4 scratch_lse[GB_MAX_SIMDGROUPS];
    threadgroup uint last[1];
    gb_gumbel_scratch tg = {scratch_key, scratch_seen, scratch_lse, last};
    gb_score<GB_BF16>(logits, GB_SAMPLING_BUFFERS, group, groups, GB_THREAD_IDS, tg);
}

kernel void residual_f32(device const float* logits [[buffer(0)]], GB_SAMPLING_ARGS, GB_THREAD_ARGS) {
    threadgroup ulong scratch_key[GB_MAX_SIMDGROUPS];
    threadgroup uint scratch_seen[GB_MAX_SIMDGROUPS];
    threadgroup uint last[1];
    threadgroup uint chain[3];
    threadgroup gb_exact win[GB_MAX_SIMDGROUPS];
    gb_residual_scratch tg = {scratch_key, scratch_seen, last, chain, win};
    gb_residual<GB_F32>(logits, GB_SAMPLING_BUFFERS, group, groups, GB_THREAD_IDS, tg);
}

kernel void residual_f16(device const ushort* logits [[buffer(0)]], GB_SAMPLING_ARGS, GB_THREAD_ARGS) {
    threadgroup ulong scratch_key[GB_MAX_SIMDGROUPS];
    threadgroup uint scratch_seen[GB_MAX_SIMDGROUPS];
    threadgroup uint last[1];
    threadgroup uint chain[3];
    threadgroup gb_exact win[GB_MAX_SIMDGROUPS];
    gb_residual_scratch tg = {scratch_key, scratch_seen, last, chain, win};
    gb_residual<GB_F16>(logits, GB_SAMPLING_BUFFERS, group, groups, GB_THREAD_IDS, tg);
}

kernel void residual_bf16(device const ushort* logits [[buffer(0)]], GB_SAMPLING_ARGS, GB_THREAD_ARGS) {
    threadgroup ulong scratch_key[GB_MAX_SIMDGROUPS];
    threadgroup uint scratch_seen[GB_MAX_SIMDGROUPS];
    threadgroup uint last[1];
    threadgroup uint chain[3];
    threadgroup gb_exact win[GB_MAX_SIMDGROUPS];
    gb_residual_scratch tg = {scratch_key, scratch_seen, last, chain, win};
    gb_residual<GB_BF16>(logits, GB_SAMPLING_BUFFERS, group, groups, GB_THREAD_IDS, tg);
}

#define GB_EXACT_SCRATCH                                   \
    threadgroup gb_exact scratch_win[GB_MAX_SIMDGROUPS];   \
    threadgroup float4 scratch_lse[GB_MAX_SIMDGROUPS];     \
    gb_exact_scratch tg = {scratch_win, scratch_lse}

kernel void gumbel_exact_f32(device const float* logits [[buffer(0)]], GB_SAMPLING_ARGS, GB_THREAD_ARGS) {
    GB_EXACT_SCRATCH;
    gb_gumbel_exact<GB_F32>(logits, GB_SAMPLING_BUFFERS, group, groups, GB_THREAD_IDS, tg);
}

kernel void gumbel_exact_f16(device const ushort* logits [[buffer(0)]], GB_SAMPLING_ARGS, GB_THREAD_ARGS) {
    GB_EXACT_SCRATCH;
    gb_gumbel_exact<GB_F16>(logits, GB_SAMPLING_BUFFERS, group, groups, GB_THREAD_IDS, tg);
}

kernel void gumbel_exact_bf16(device const ushort* logits [[buffer(0)]], GB_SAMPLING_ARGS, GB_THREAD_ARGS) {
    GB_EXACT_SCRATCH;
    gb_gumbel_exact<GB_BF16>(logits, GB_SAMPLING_BUFFERS, group, groups, GB_THREAD_IDS, tg);
}

#define GB_SELECT_SCRATCH                                     \
    threadgroup atomic_uint hist_count[GB_BINS];              \
    threadgroup atomic_uint hist_lo[GB_BINS];                 \
    threadgroup atomic_uint hist_hi[GB_BINS];                 \
    threadgroup ulong scratch_u64[GB_MAX_SIMDGROUPS];         \
    threadgroup uint scratch_u32[GB_MAX_SIMDGROUPS];          \
    gb_select_scratch tg = {hist_count, hist_lo, hist_hi, scratch_u64, scratch_u32}

kernel void shard_select_f32(device const float* logits [[buffer(0)]], GB_SAMPLING_ARGS, GB_THREAD_ARGS) {
    GB_SELECT_SCRATCH;
    gb_shard_select<GB_F32>(logits, GB_SAMPLING_BUFFERS, group, groups, GB_THREAD_IDS, tg);
}

kernel void shard_select_f16(device const ushort* logits [[buffer(0)]], GB_SAMPLING_ARGS, GB_THREAD_ARGS) {
    GB_SELECT_SCRATCH;
    gb_shard_select<GB_F16>(logits, GB_SAMPLING_BUFFERS, group, groups, GB_THREAD_IDS, tg);
}

kernel void shard_select_bf16(device const ushort* logits [[buffer(0)]], GB_SAMPLING_ARGS, GB_THREAD_ARGS) {
    GB_SELECT_SCRATCH;
    gb_shard_select<GB_BF16>(logits, GB_SAMPLING_BUFFERS, group, groups, GB_THREAD_IDS, tg);
}
