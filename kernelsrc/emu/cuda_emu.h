// cuda_emu.h runs CUDA kernel source on the CPU, so that the CUDA edition can be checked
// against the Go edition without a GPU. Each CUDA thread of a block is a std::thread;
// __syncthreads is a std::barrier over the block, a warp shuffle is a barrier phase of
// the warp's threads around per-warp slots, and atomics are std::atomic_ref. The blocks of
// a grid run one after another (a __shared__ variable is a function-local static, shared
// by the threads of the running block), which is one of the orders a GPU may choose. The
// warp size is a launch parameter: 32 and 64 as on real GPUs, or narrower to keep the
// emulation cheap. __CUDA_ARCH__ is 900, so the H200's code paths run.
//
// The float32 logf, log1pf and expf are rounded from the double-precision functions, as
// the Go reference (package philox) does, so that tokens agree bit for bit; the GPU's own
// functions may differ in the last place, which the ABI allows.
//
// Build with -std=c++20 -ffp-contract=off (no fused multiply-add, like --fmad=false).
#pragma once

#include <atomic>
#include <barrier>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

namespace gb_emu {

struct dim3 {
    unsigned int x = 1, y = 1, z = 1;
};

// warp_state is one warp's meeting point for shuffles. Consecutive shuffles use the two
// slot arrays in turn, so one barrier phase per shuffle is enough: a lane can write the
// array of shuffle k+2 only after every lane has arrived at shuffle k+1, that is, after
// every lane has read the values of shuffle k.
struct warp_state {
    explicit warp_state(int lanes)
        : bar(lanes), slots{std::vector<std::uint32_t>(lanes), std::vector<std::uint32_t>(lanes)} {}
    std::barrier<> bar;
    std::vector<std::uint32_t> slots[2];
};

inline dim3 grid_dim, block_dim;
inline thread_local dim3 block_idx, thread_idx;
inline thread_local unsigned int shuffle_count; // this lane's shuffles so far
inline int warp_size = 32;
inline std::unique_ptr<std::barrier<>> block_barrier;
inline std::vector<std::unique_ptr<warp_state>> warps;

[[noreturn]] inline void fail(const char* what) {
    std::fprintf(stderr, "cuda_emu: %s\n", what);
    std::abort();
}

inline warp_state& my_warp() { return *warps[thread_idx.x / warp_size]; }

// shuffle hands each lane the value of lane src(lane), or its own where src is outside
// the warp (CUDA's rule for __shfl_down/__shfl_up).
template <typename Src>
inline std::uint32_t shuffle(unsigned int mask, std::uint32_t v, Src src) {
    if (mask != 0xFFFFFFFFu) {
        fail("partial warp masks are not emulated");
    }
    warp_state& w = my_warp();
    std::vector<std::uint32_t>& slots = w.slots[shuffle_count++ & 1u];
    const int lane = static_cast<int>(thread_idx.x) % warp_size;
    slots[lane] = v;
    w.bar.arrive_and_wait();
    const int s = src(lane);
    return (s >= 0 && s < warp_size) ? slots[s] : v;
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
    grid_dim = grid;
    block_dim = block;
    warp_size = warp;
    block_barrier = std::make_unique<std::barrier<>>(block.x);
    warps.clear();
    for (unsigned int i = 0; i < block.x / warp; ++i) {
        warps.push_back(std::make_unique<warp_state>(warp));
    }
    std::vector<std::thread> threads;
    threads.reserve(block.x);
    for (unsigned int t = 0; t < block.x; ++t) {
        threads.emplace_back([=] {
            thread_idx = dim3{t, 0, 0};
            shuffle_count = 0;
            for (unsigned int z = 0; z < grid.z; ++z) {
                for (unsigned int y = 0; y < grid.y; ++y) {
                    for (unsigned int x = 0; x < grid.x; ++x) {
                        block_idx = dim3{x, y, z};
                        kernel(args...);
                        // The block is over for every thread before the next one
                        // reuses the __shared__ statics.
                        block_barrier->arrive_and_wait();
                    }
                }
            }
        });
    }
    for (auto& th : threads) {
        th.join();
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

inline void __syncthreads() { gb_emu::block_barrier->arrive_and_wait(); }
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

// sm_80's warp reduction, by a butterfly of emulated shuffles. The CUDA edition uses it where
// __CUDA_ARCH__ >= 800, which the emulation claims so that it runs the H200's code path.
#define __CUDA_ARCH__ 900
inline unsigned int __reduce_max_sync(unsigned int mask, unsigned int v) {
    for (int m = gb_emu::warp_size / 2; m > 0; m >>= 1) {
        const unsigned int o = __shfl_xor_sync(mask, v, m);
        v = o > v ? o : v;
    }
    return v;
}

inline unsigned int __reduce_or_sync(unsigned int mask, unsigned int v) {
    for (int m = gb_emu::warp_size / 2; m > 0; m >>= 1) {
        v |= __shfl_xor_sync(mask, v, m);
    }
    return v;
}
inline unsigned int __shfl_sync(unsigned int mask, unsigned int v, int src) {
    return gb_emu::shuffle(mask, v, [src](int) { return src; });
}
// A 64-bit ballot, as HIP's: the emulation may run 64-lane warps.
inline unsigned long long __ballot_sync(unsigned int mask, bool p) {
    const int lane = static_cast<int>(gb_emu::thread_idx.x) % gb_emu::warp_size;
    unsigned long long b = p ? 1ull << lane : 0ull;
    for (int m = gb_emu::warp_size / 2; m > 0; m >>= 1) {
        const unsigned long long lo = __shfl_xor_sync(mask, static_cast<unsigned int>(b), m);
        const unsigned long long hi = __shfl_xor_sync(mask, static_cast<unsigned int>(b >> 32), m);
        b |= lo | hi << 32;
    }
    return b;
}
inline int __ffsll(long long v) { return __builtin_ffsll(v); }

template <typename T>
inline T atomicAdd(T* p, T v) {
    return std::atomic_ref<T>(*p).fetch_add(v);
}
template <typename T>
inline T atomicOr(T* p, T v) {
    return std::atomic_ref<T>(*p).fetch_or(v);
}
template <typename T>
inline T atomicMax(T* p, T v) {
    // std::atomic_ref has no fetch_max before C++26.
    std::atomic_ref<T> a(*p);
    T old = a.load();
    while (old < v && !a.compare_exchange_weak(old, v)) {
    }
    return old;
}
template <typename T>
inline T atomicExch(T* p, T v) {
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
