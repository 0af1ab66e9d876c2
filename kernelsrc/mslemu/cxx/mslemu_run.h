// mslemu_run.h is the host side of the emulator: one dispatch of a kernel over a grid of
// threadgroups, every GPU thread a fiber of one OS thread.
#ifndef MSLEMU_RUN_H
#define MSLEMU_RUN_H

#include <cstdint>

namespace mslemu {

// The built-in values one GPU thread sees (the kernel attributes of MSL).
struct ThreadIds {
    uint32_t tid;    // thread_index_in_threadgroup
    uint32_t T;      // threads_per_threadgroup
    uint32_t lane;   // thread_index_in_simdgroup
    uint32_t sg;     // simdgroup_index_in_threadgroup
    uint32_t width;  // threads_per_simdgroup
    uint32_t nsg;    // simdgroups_per_threadgroup
    uint32_t group[3];   // threadgroup_position_in_grid
    uint32_t groups[3];  // threadgroups_per_grid
};

typedef void (*KernelFn)(void* ctx, const ThreadIds& ids);

struct Dispatch {
    uint32_t grid[3];  // threadgroups per grid
    uint32_t T;        // threads per threadgroup (1-D)
    uint32_t width;    // SIMD-group width: a power of two from 8 to 64
    KernelFn fn;
    void* ctx;
    // seed drives the scheduler: which runnable fiber goes next, the order threadgroups
    // start in, and whether an atomic yields.
    uint64_t seed;
    // maxGroups threadgroups run interleaved at a time; more wait their turn.
    uint32_t maxGroups;
    // yieldPercent is the chance (0-100) that an atomic operation yields to another
    // fiber.
    uint32_t yieldPercent;
};

// Run executes the dispatch to completion. A kernel error the emulator detects (a
// thread leaving while others wait at a barrier, divergent SIMD-group functions) ends
// the process with a message on stderr and exit status 3.
void run(const Dispatch& d);

}  // namespace mslemu

#endif  // MSLEMU_RUN_H
