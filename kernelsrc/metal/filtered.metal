// filtered (ABI.md, kernel table): top-k, top-p and min-p rows drawn by Gumbel-max over
// the categorical kernel's kept set (steps 1 to 7), launched as filter_max over an
// (S, n, 1) grid and then filtered over (S, n, D) with the same buffers.
//
// The CUDA edition splits a row over S blocks: filter_max finds each block's largest
// logit for the rows that need it, and the blocks of filtered publish candidates that
// the last one to arrive filters and draws from. This edition has no Mac to tune such a
// split on, so it does as the Go edition does: threadgroup x == 0 of each draw runs the
// categorical kernel's one-threadgroup path (gb_categorical_row) with the Gumbel draw
// (gb_gumbel_row), and the other threadgroups, and filter_max, return at once. The
// result never depends on S; partials are not touched, and counters only through the
// row's end-of-draws counter (D > 1 with ADVANCE or RECORD).

// gb_filter_max is the filter_max kernel: nothing to do here, since gb_filtered reads the
// whole row in one threadgroup and finds its maximum itself.
template <int KIND>
inline void gb_filter_max() {}

// gb_filtered is the filtered kernel: threadgroup (0, y, z) draws launch row y's draw z;
// routed rows of the other kernels are left alone.
template <int KIND>
inline void gb_filtered(device const typename gb_io<KIND>::elem* logits, gb_buffers B, uint3 group, uint3 groups,
                        gb_thread_ids L, gb_categorical_scratch tg) {
    if (groups.z > uint(GB_MAX_DRAWS)) {
        return;  // not a launch the kernels serve (ABI.md): nothing is written
    }
    if (group.x != 0u) {
        return;  // one threadgroup per row: the others have no work
    }
    // A copy: ADVANCE rewrites the step in params once every threadgroup is past it.
    const gb_row_params p = B.params[group.y];
    if ((p.flags & GB_FLAG_ROUTED) != 0u &&
        ((p.flags & GB_FLAG_CATEGORICAL) != 0u || (p.flags & GB_FLAG_FILTERED) == 0u)) {
        return;  // another kernel's row (categorical or gumbel_argmax)
    }
    gb_categorical_row<KIND, true>(logits, B, p, group, groups, L, tg);
}
