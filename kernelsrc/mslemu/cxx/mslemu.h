// mslemu.h maps the part of the Metal Shading Language that the Metal edition
// (kernelsrc/metal) uses onto C++20, so that g++ can compile the kernels unchanged (after
// one textual rewrite of threadgroup declarations, see Translate in mslemu.go) and a CPU
// scheduler can run them.
//
// What is emulated and how:
//   - Address spaces: device, thread and threadgroup qualify nothing; constant is const.
//   - Kernel and argument attributes ([[buffer(0)]], [[thread_position_in_grid]], ...) are
//     ignored by the compiler (-Wno-attributes); the driver passes the built-in values.
//   - Every GPU thread is a fiber. Fibers run until they reach a synchronisation point
//     (threadgroup_barrier, a SIMD-group function, an atomic) and the scheduler picks the
//     next one at random (seeded), so threads and threadgroups interleave differently from
//     run to run while staying reproducible for one seed.
//   - threadgroup_barrier waits for every thread of the threadgroup; a thread that
//     returns while others wait at a barrier is reported as an error.
//   - SIMD-groups have 32 lanes unless the dispatch asks for another power of two from 8
//     to 64 (Apple GPUs have 32; the kernels must not care). simd_shuffle* exchange
//     values among all lanes of the
//     SIMD-group, which must all call the same function (divergence is an error); a lane
//     outside the threadgroup reads a poison value. Out-of-range shuffle_up/down lanes
//     keep their own value, as MSL specifies.
//   - Atomics on atomic_uint are plain operations (one OS thread runs every fiber) and
//     are scheduling points, so the split-phase arrival protocol is exercised under many
//     interleavings. The memory model is sequentially consistent: weak ordering on real
//     GPUs is not emulated.
//   - precise::log and precise::exp are correctly rounded (computed in double), like the
//     Go edition's reference functions; the GPU's own 1-ulp functions are not emulated.
//     fast::exp (the log-sum-exps of the log-probability records) is given a relative error of about
//     2^-21 on purpose, so the log-probability tests allow for a less accurate exp.
//   - Threadgroup memory starts filled with a poison byte, device scratch too, so reads
//     of never-written memory show up as wrong answers rather than lucky zeros.
#ifndef MSLEMU_H
#define MSLEMU_H

#include <cstddef>
#include <cstdint>
#include <cstring>

#define __METAL_VERSION__ 320

#define kernel
#define device
#define thread
#define threadgroup
#define constant const

typedef uint8_t uchar;
typedef uint16_t ushort;
typedef uint32_t uint;
typedef uint64_t ulong;

#ifndef INFINITY
#define INFINITY (__builtin_inff())
#endif
#ifndef NAN
#define NAN (__builtin_nanf(""))
#endif

namespace mslemu {

// Scheduling points, implemented in mslemu.cpp.
void tg_barrier();
void atomic_point();
// Deposits this lane's value (n <= 16 bytes) for SIMD-group function op and returns the
// deposited slots of 16 bytes each, one per lane; width is the SIMD-group width and
// active the number of its lanes present (fewer in a threadgroup's last, partial group).
const unsigned char* simd_exchange(const void* value, size_t n, int op, uint* lane, uint* width, uint* active);
// Threadgroup storage of one declaration site for the current threadgroup.
void* tg_storage(int site, size_t bytes);

template <typename T>
struct vec2 {
    T x, y;
    vec2() : x(), y() {}
    vec2(T a, T b) : x(a), y(b) {}
    T& operator[](uint i) { return i == 0 ? x : y; }
    T operator[](uint i) const { return i == 0 ? x : y; }
};

template <typename T>
struct vec3 {
    T x, y, z;
    vec3() : x(), y(), z() {}
    vec3(T a, T b, T c) : x(a), y(b), z(c) {}
};

template <typename T>
struct vec4 {
    T x, y, z, w;
    vec4() : x(), y(), z(), w() {}
    vec4(T a) : x(a), y(a), z(a), w(a) {}
    vec4(T a, T b, T c, T d) : x(a), y(b), z(c), w(d) {}
    T& operator[](uint i) { return i == 0 ? x : i == 1 ? y : i == 2 ? z : w; }
    T operator[](uint i) const { return i == 0 ? x : i == 1 ? y : i == 2 ? z : w; }
};

}  // namespace mslemu

typedef mslemu::vec2<uint> uint2;
typedef mslemu::vec3<uint> uint3;
typedef mslemu::vec4<uint> uint4;
typedef mslemu::vec2<float> float2;
typedef mslemu::vec4<float> float4;

// MSL_TG_ARRAY and MSL_TG_SCALAR replace "threadgroup T name[N];" and
// "threadgroup T name;" declarations (rewritten by the harness): every thread of a
// threadgroup gets a reference to the same storage.
#define MSL_TG_ARRAY(T, name, N) \
    T(&name)[N] = *static_cast<T(*)[N]>(::mslemu::tg_storage(__COUNTER__, sizeof(T[N])))
#define MSL_TG_SCALAR(T, name) T& name = *static_cast<T*>(::mslemu::tg_storage(__COUNTER__, sizeof(T)))

namespace metal {

template <typename To, typename From>
inline To as_type(From v) {
    static_assert(sizeof(To) == sizeof(From), "as_type needs equal sizes");
    To out;
    std::memcpy(&out, &v, sizeof(To));
    return out;
}

template <typename T>
inline T min(T a, T b) {
    return b < a ? b : a;
}
template <typename T>
inline T max(T a, T b) {
    return a < b ? b : a;
}

inline uint mulhi(uint a, uint b) { return uint((ulong(a) * ulong(b)) >> 32); }
inline uint clz(uint x) { return x == 0 ? 32u : uint(__builtin_clz(x)); }

inline bool isnan(float x) { return __builtin_isnan(x); }
inline bool isinf(float x) { return __builtin_isinf(x); }
inline bool isfinite(float x) { return __builtin_isfinite(x); }
inline float abs(float x) { return __builtin_fabsf(x); }
float fma(float a, float b, float c);

namespace precise {
float log(float x);
float exp(float x);
}  // namespace precise

// fast::exp is emulated with a relative error of about 2^-21 (the last bits moved up or
// down with the input's parity), inside the 2^-20 that ABI.md allows the log-sum-exps,
// so the tests see an edition that does not round like the Go one.
namespace fast {
float exp(float x);
}  // namespace fast

// SIMD-group functions. op numbers only tell divergent calls apart.
enum { SIMD_OP_SHUFFLE = 1, SIMD_OP_XOR, SIMD_OP_UP, SIMD_OP_DOWN };

template <typename T>
inline T simd_pick(T value, int op, uint arg) {
    static_assert(sizeof(T) <= 16, "SIMD values are at most 16 bytes");
    uint lane, width, active;
    const unsigned char* slots = ::mslemu::simd_exchange(&value, sizeof(T), op, &lane, &width, &active);
    uint src = lane;
    switch (op) {
    case SIMD_OP_SHUFFLE:
        src = arg;
        break;
    case SIMD_OP_XOR:
        src = lane ^ arg;
        break;
    case SIMD_OP_UP:
        src = lane >= arg ? lane - arg : lane;
        break;
    case SIMD_OP_DOWN:
        src = lane + arg < width ? lane + arg : lane;
        break;
    }
    T out;
    std::memcpy(&out, slots + 16u * (src % width), sizeof(T));
    return out;
}

template <typename T>
inline T simd_shuffle(T v, ushort lane) {
    return simd_pick(v, SIMD_OP_SHUFFLE, lane);
}
template <typename T>
inline T simd_shuffle_xor(T v, ushort mask) {
    return simd_pick(v, SIMD_OP_XOR, mask);
}
template <typename T>
inline T simd_shuffle_up(T v, ushort delta) {
    return simd_pick(v, SIMD_OP_UP, delta);
}
template <typename T>
inline T simd_shuffle_down(T v, ushort delta) {
    return simd_pick(v, SIMD_OP_DOWN, delta);
}

// Barriers and memory flags.
enum class mem_flags : uint { mem_none = 0, mem_device = 1, mem_threadgroup = 2, mem_texture = 4 };
inline mem_flags operator|(mem_flags a, mem_flags b) { return mem_flags(uint(a) | uint(b)); }
inline void threadgroup_barrier(mem_flags) { ::mslemu::tg_barrier(); }

// Atomics.
enum memory_order { memory_order_relaxed, memory_order_seq_cst };
enum thread_scope { thread_scope_thread, thread_scope_simdgroup, thread_scope_threadgroup, thread_scope_device };

struct atomic_uint {
    uint value;
};

inline void atomic_store_explicit(atomic_uint* a, uint v, memory_order) {
    ::mslemu::atomic_point();
    a->value = v;
}
inline uint atomic_load_explicit(atomic_uint* a, memory_order) {
    ::mslemu::atomic_point();
    return a->value;
}
inline uint atomic_fetch_add_explicit(atomic_uint* a, uint v, memory_order) {
    ::mslemu::atomic_point();
    uint old = a->value;
    a->value = old + v;
    return old;
}
inline uint atomic_fetch_or_explicit(atomic_uint* a, uint v, memory_order) {
    ::mslemu::atomic_point();
    uint old = a->value;
    a->value = old | v;
    return old;
}
struct atomic_int {
    int value;
};

inline void atomic_store_explicit(atomic_int* a, int v, memory_order) {
    ::mslemu::atomic_point();
    a->value = v;
}
inline int atomic_load_explicit(atomic_int* a, memory_order) {
    ::mslemu::atomic_point();
    return a->value;
}

inline void atomic_thread_fence(mem_flags, memory_order, thread_scope) { ::mslemu::atomic_point(); }

}  // namespace metal

#endif  // MSLEMU_H
