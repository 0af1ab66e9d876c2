// cuda_emu.h runs CUDA kernel source on the CPU, so that the CUDA edition can be checked
// against the Go edition without a GPU. Each CUDA thread of a block is a fiber of one OS
// thread: __syncthreads and warp shuffles are the only points where a fiber gives up its
// turn, and a seeded random scheduler picks the next runnable fiber there (and, now and
// then, at an atomic), so interleavings vary with the seed (GB_EMU_SEED) and repeat for
// one seed. Atomics are std::atomic_ref. The blocks of a grid run one after another (a
// __shared__ variable is a function-local static, shared by the fibers of the running
// block), which is one of the orders a GPU may choose. The warp size is a launch
// parameter: 32 and 64 as on real GPUs, or narrower to keep the emulation cheap.
// __CUDA_ARCH__ is 900, so the H200's code paths run.
//
// The float32 logf, log1pf and expf are rounded from the double-precision functions, as
// the Go reference (package philox) does, so that tokens agree bit for bit; the GPU's own
// functions may differ in the last place, which the ABI allows.
//
// Build with -std=c++20 -ffp-contract=off (no fused multiply-add, like --fmad=false).
#pragma once

#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

namespace gb_emu {

struct dim3 {
    unsigned int x = 1, y = 1, z = 1;
};

[[noreturn]] inline void fail(const char* what) {
    std::fprintf(stderr, "cuda_emu: %s\n", what);
    std::abort();
}

#if defined(__x86_64__)
// gb_emu_switch saves the callee-saved registers and the stack pointer into *save, loads
// load and returns into the fiber (or scheduler) that saved it: a fiber switch without
// ucontext's signal-mask system call.
extern "C" void gb_emu_switch(void** save, void* load);
asm(R"(
    .text
    .globl gb_emu_switch
    .type gb_emu_switch, @function
gb_emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size gb_emu_switch, .-gb_emu_switch
    .section .note.GNU-stack,"",@progbits
    .text
)");
#endif

// fiber is one emulated CUDA thread.
struct fiber {
    unsigned int tid = 0;
    unsigned int shuffles = 0; // shuffles so far: they alternate between two slot arrays
    bool done = false;
    unsigned char* stack = nullptr; // a guard page, then the stack
#if defined(__x86_64__)
    void* sp = nullptr;
#else
    ucontext_t ctx;
#endif
};

// meeting is a barrier: fibers wait in it until count of them have arrived.
struct meeting {
    unsigned int count = 0, arrived = 0;
    std::vector<fiber*> waiting;
};

// warp_state is one warp's meeting point for shuffles. Consecutive shuffles use the two
// slot arrays in turn, so one meeting per shuffle is enough: a lane can write the array of
// shuffle k+2 only after every lane has arrived at shuffle k+1, that is, after every lane
// has read the values of shuffle k.
struct warp_state {
    meeting m;
    std::vector<std::uint32_t> slots[2];
};

constexpr std::size_t kStackSize = 256 * 1024;

// rng is the scheduler's seeded generator, SplitMix64: a turn is picked at every meeting,
// so it has to be cheap.
struct rng {
    std::uint64_t state = 0;
    std::uint64_t operator()() {
        std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    // below returns a number in [0, n), by a multiply rather than a division.
    std::size_t below(std::size_t n) { return static_cast<std::size_t>((static_cast<unsigned __int128>((*this)()) * n) >> 64); }
};

inline dim3 grid_dim, block_dim, block_idx, thread_idx;
inline int warp_size = 32;

// The scheduler's state: the running block's fibers, the runnable ones, its meetings.
inline struct {
    std::vector<fiber> fibers;
    std::vector<fiber*> runnable;
    fiber* current = nullptr;
    meeting block;
    std::vector<warp_state> warps;
    std::vector<unsigned char*> stacks;
    gb_emu::rng rng;
    bool seeded = false;
    std::function<void()> body; // the kernel call of the running block
#if defined(__x86_64__)
    void* sched_sp = nullptr;
#else
    ucontext_t sched_ctx;
#endif
} sched;

inline unsigned char* new_stack() {
    const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    void* m = mmap(nullptr, kStackSize + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        fail("mmap of a fiber stack");
    }
    mprotect(m, page, PROT_NONE); // an overflow faults instead of reaching another stack
    return static_cast<unsigned char*>(m);
}

// to_scheduler returns control to the scheduler; it comes back when the scheduler
// resumes this fiber.
inline void to_scheduler() {
    fiber* f = sched.current;
#if defined(__x86_64__)
    gb_emu_switch(&f->sp, sched.sched_sp);
#else
    swapcontext(&f->ctx, &sched.sched_ctx);
#endif
}

inline void fiber_main() {
    sched.body();
    sched.current->done = true;
    to_scheduler();
    fail("a finished fiber was resumed");
}

// arrive waits at m until m.count fibers have arrived, then lets them all go on.
inline void arrive(meeting& m) {
    fiber* f = sched.current;
    if (++m.arrived == m.count) {
        m.arrived = 0;
        for (fiber* w : m.waiting) {
            sched.runnable.push_back(w);
        }
        m.waiting.clear();
        sched.runnable.push_back(f);
    } else {
        m.waiting.push_back(f);
    }
    to_scheduler();
}

// maybe_yield gives another fiber a turn now and then, so that the code between two
// meetings interleaves in more than one way.
inline void maybe_yield() {
    if (sched.current != nullptr && (sched.rng() & 7u) == 0u) {
        sched.runnable.push_back(sched.current);
        to_scheduler();
    }
}

// exchange hands v to every lane of the warp and returns the warp's values by lane,
// once every lane has handed its own.
inline const std::vector<std::uint32_t>& exchange(unsigned int mask, std::uint32_t v) {
    if (mask != 0xFFFFFFFFu) {
        fail("partial warp masks are not emulated");
    }
    fiber* f = sched.current;
    warp_state& w = sched.warps[f->tid / warp_size];
    std::vector<std::uint32_t>& slots = w.slots[f->shuffles++ & 1u];
    slots[f->tid % warp_size] = v;
    arrive(w.m);
    return slots;
}

// shuffle hands each lane the value of lane src(lane), or its own where src is outside
// the warp (CUDA's rule for __shfl_down/__shfl_up).
template <typename Src>
inline std::uint32_t shuffle(unsigned int mask, std::uint32_t v, Src src) {
    const int lane = static_cast<int>(sched.current->tid) % warp_size;
    const std::vector<std::uint32_t>& slots = exchange(mask, v);
    const int s = src(lane);
    return (s >= 0 && s < warp_size) ? slots[s] : v;
}

// run_block runs every fiber of one block to its end, a random runnable one at a time.
inline void run_block(unsigned int threads) {
    const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    sched.fibers.assign(threads, fiber{});
    sched.runnable.clear();
    for (unsigned int t = 0; t < threads; ++t) {
        fiber& f = sched.fibers[t];
        f.tid = t;
        f.stack = sched.stacks[t];
#if defined(__x86_64__)
        std::uintptr_t top = reinterpret_cast<std::uintptr_t>(f.stack + page + kStackSize) & ~std::uintptr_t(15);
        void** sp = reinterpret_cast<void**>(top);
        *--sp = nullptr;                                        // fiber_main's return address
        *--sp = reinterpret_cast<void*>(&fiber_main);           // where gb_emu_switch returns to
        for (int i = 0; i < 6; ++i) {
            *--sp = nullptr; // rbp, rbx, r12-r15
        }
        f.sp = sp;
#else
        getcontext(&f.ctx);
        f.ctx.uc_stack.ss_sp = f.stack + page;
        f.ctx.uc_stack.ss_size = kStackSize;
        f.ctx.uc_link = nullptr;
        makecontext(&f.ctx, fiber_main, 0);
#endif
        sched.runnable.push_back(&f);
    }
    unsigned int done = 0;
    while (done < threads) {
        if (sched.runnable.empty()) {
            fail("deadlock: every fiber waits at a barrier or shuffle that not all reach");
        }
        const std::size_t i = sched.rng.below(sched.runnable.size());
        fiber* f = sched.runnable[i];
        sched.runnable[i] = sched.runnable.back();
        sched.runnable.pop_back();
        sched.current = f;
        thread_idx = dim3{f->tid, 0, 0};
#if defined(__x86_64__)
        gb_emu_switch(&sched.sched_sp, f->sp);
#else
        swapcontext(&sched.sched_ctx, &f->ctx);
#endif
        if (f->done) {
            ++done;
        }
    }
    sched.current = nullptr;
    if (sched.block.arrived != 0) {
        fail("a block ended with fibers waiting at __syncthreads");
    }
}

// launch runs kernel(args...) over grid blocks of block threads, one block at a time.
template <typename... P, typename... A>
inline void launch(void (*kernel)(P...), dim3 grid, dim3 block, int warp, A... args) {
    if (block.x == 0 || block.x > 1024 || warp <= 0 || block.x % warp != 0 || block.y != 1 ||
        block.z != 1) {
        fail("bad block shape");
    }
    if (block.x / warp > static_cast<unsigned int>(warp < 32 ? warp : 32)) {
        // The CUDA edition reduces across warps with one warp, and sizes for 32 warps.
        fail("more warps per block than the kernels support");
    }
    if (!sched.seeded) {
        const char* seed = std::getenv("GB_EMU_SEED");
        sched.rng.state = seed != nullptr ? std::strtoull(seed, nullptr, 10) : 1u;
        sched.seeded = true;
    }
    grid_dim = grid;
    block_dim = block;
    warp_size = warp;
    while (sched.stacks.size() < block.x) {
        sched.stacks.push_back(new_stack());
    }
    sched.block = meeting{block.x, 0, {}};
    sched.warps.assign(block.x / warp, warp_state{});
    for (warp_state& w : sched.warps) {
        w.m.count = static_cast<unsigned int>(warp);
        w.slots[0].assign(warp, 0u);
        w.slots[1].assign(warp, 0u);
    }
    sched.body = [=] { kernel(args...); };
    for (unsigned int z = 0; z < grid.z; ++z) {
        for (unsigned int y = 0; y < grid.y; ++y) {
            for (unsigned int x = 0; x < grid.x; ++x) {
                block_idx = dim3{x, y, z};
                run_block(block.x);
            }
        }
    }
}

// Math of the contract: float32 results rounded from double, like package philox.
inline float logf_ref(float x) { return static_cast<float>(std::log(static_cast<double>(x))); }
inline float log1pf_ref(float x) { return static_cast<float>(std::log1p(static_cast<double>(x))); }
inline float expf_ref(float x) { return static_cast<float>(std::exp(static_cast<double>(x))); }

} // namespace gb_emu

// ---------------------------------------------------------------------------------------
// The CUDA language as the CUDA edition uses it.

#define __global__
#define __device__
#define __forceinline__ inline
#define __noinline__ // empty: it also spells GCC's attribute, which later headers may use
#define __shared__ static
#define __launch_bounds__(...)
#define __align__(n) alignas(n)

#define gridDim gb_emu::grid_dim
#define blockDim gb_emu::block_dim
#define blockIdx gb_emu::block_idx
#define threadIdx gb_emu::thread_idx
#define warpSize gb_emu::warp_size

#define logf gb_emu::logf_ref
#define log1pf gb_emu::log1pf_ref
#define expf gb_emu::expf_ref

inline void __syncthreads() { gb_emu::arrive(gb_emu::sched.block); }
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }

inline unsigned int __shfl_down_sync(unsigned int mask, unsigned int v, unsigned int d) {
    return gb_emu::shuffle(mask, v, [d](int lane) { return lane + static_cast<int>(d); });
}
inline unsigned int __shfl_up_sync(unsigned int mask, unsigned int v, unsigned int d) {
    return gb_emu::shuffle(mask, v, [d](int lane) { return lane - static_cast<int>(d); });
}
inline unsigned int __shfl_xor_sync(unsigned int mask, unsigned int v, int m) {
    return gb_emu::shuffle(mask, v, [m](int lane) { return lane ^ m; });
}

// sm_80's warp reductions, each one meeting of the warp as it is one instruction. The CUDA
// edition uses them where __CUDA_ARCH__ >= 800, which the emulation claims so that it runs
// the H200's code path.
#define __CUDA_ARCH__ 900
inline unsigned int __reduce_max_sync(unsigned int mask, unsigned int v) {
    for (const unsigned int o : gb_emu::exchange(mask, v)) {
        v = o > v ? o : v;
    }
    return v;
}

inline unsigned int __reduce_or_sync(unsigned int mask, unsigned int v) {
    for (const unsigned int o : gb_emu::exchange(mask, v)) {
        v |= o;
    }
    return v;
}
inline unsigned int __shfl_sync(unsigned int mask, unsigned int v, int src) {
    return gb_emu::shuffle(mask, v, [src](int) { return src; });
}
// A 64-bit ballot, as HIP's: the emulation may run 64-lane warps.
inline unsigned long long __ballot_sync(unsigned int mask, bool p) {
    const std::vector<std::uint32_t>& lanes = gb_emu::exchange(mask, p ? 1u : 0u);
    unsigned long long b = 0;
    for (int lane = 0; lane < gb_emu::warp_size; ++lane) {
        b |= static_cast<unsigned long long>(lanes[lane]) << lane;
    }
    return b;
}
// A warp's meeting: every lane reaches it before any goes on, as a shuffle's.
inline void __syncwarp(unsigned int mask = 0xFFFFFFFFu) { (void)gb_emu::shuffle(mask, 0u, [](int lane) { return lane; }); }
inline int __ffsll(long long v) { return __builtin_ffsll(v); }
inline int __popcll(unsigned long long v) { return __builtin_popcountll(v); }

template <typename T>
inline T atomicAdd(T* p, T v) {
    gb_emu::maybe_yield();
    return std::atomic_ref<T>(*p).fetch_add(v);
}
template <typename T>
inline T atomicOr(T* p, T v) {
    gb_emu::maybe_yield();
    return std::atomic_ref<T>(*p).fetch_or(v);
}
template <typename T>
inline T atomicMax(T* p, T v) {
    gb_emu::maybe_yield();
    // std::atomic_ref has no fetch_max before C++26.
    std::atomic_ref<T> a(*p);
    T old = a.load();
    while (old < v && !a.compare_exchange_weak(old, v)) {
    }
    return old;
}
template <typename T>
inline T atomicExch(T* p, T v) {
    gb_emu::maybe_yield();
    return std::atomic_ref<T>(*p).exchange(v);
}

inline unsigned int __umulhi(unsigned int a, unsigned int b) {
    return static_cast<unsigned int>((static_cast<std::uint64_t>(a) * b) >> 32);
}
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
    return static_cast<unsigned long long>((static_cast<unsigned __int128>(a) * b) >> 64);
}
inline int __clz(int x) { return x == 0 ? 32 : std::countl_zero(static_cast<std::uint32_t>(x)); }

// Separately rounded float32 operations (-ffp-contract=off keeps them apart).
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
// The fused multiply-add that NVRTC provides as a built-in (bench/decode's kernels use it).
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }

// The log-sum-exps' fast 2^x: exact here (rounded from double), where the GPU's
// approximation differs by about 2^-22 relative; the tests allow for that.
inline float gb_exp2_fast(float x) { return static_cast<float>(std::exp2(static_cast<double>(x))); }

// The record's ln of a log-sum-exp's sum: exact here (rounded from double), where the
// GPU's lg2.approx differs by about 1e-7; the tests allow for that.
inline float gb_log_fast(float x) { return static_cast<float>(std::log(static_cast<double>(x))); }

// __float2ull_rz: truncation toward zero, saturating like the GPU instruction.
inline unsigned long long __float2ull_rz(float f) {
    if (f != f) {
        return 0x8000000000000000ull;
    }
    if (!(f > 0.0f)) {
        return 0ull;
    }
    if (f >= 18446744073709551616.0f) {
        return ~0ull;
    }
    return static_cast<unsigned long long>(f);
}

inline unsigned int __float_as_uint(float f) { return std::bit_cast<unsigned int>(f); }
inline float __uint_as_float(unsigned int u) { return std::bit_cast<float>(u); }
