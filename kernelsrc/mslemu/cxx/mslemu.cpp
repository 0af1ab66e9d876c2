// mslemu.cpp runs emulated GPU threads as fibers of one OS thread (see mslemu.h for what
// is emulated). A seeded random scheduler picks the next runnable fiber at every
// synchronisation point, so interleavings vary with the seed and repeat for one seed.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unordered_map>
#include <vector>

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#include "mslemu.h"
#include "mslemu_run.h"

namespace metal {
float fma(float a, float b, float c) { return std::fma(a, b, c); }
namespace precise {
float log(float x) { return float(std::log(double(x))); }
float exp(float x) { return float(std::exp(double(x))); }
}  // namespace precise
namespace fast {
float exp(float x) {
    uint32_t b;
    std::memcpy(&b, &x, 4);
    double scale = (b & 1u) != 0 ? 1.0 + 0x1p-21 : 1.0 - 0x1p-21;
    return float(std::exp(double(x)) * scale);
}
}  // namespace fast
}  // namespace metal

namespace mslemu {
namespace {

constexpr unsigned char kPoison = 0xA5;
constexpr uint32_t kMaxSimdWidth = 64;
constexpr size_t kStackSize = 64 * 1024;

#if defined(__x86_64__)
// Saves the callee-saved registers and the stack pointer into *save, loads load and
// returns into the fiber (or scheduler) that saved it.
extern "C" void mslemu_switch(void** save, void* load);
asm(R"(
    .text
    .globl mslemu_switch
    .type mslemu_switch, @function
mslemu_switch:
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
    .size mslemu_switch, .-mslemu_switch
    .section .note.GNU-stack,"",@progbits
    .text
)");
#endif

enum class State { Runnable, Blocked, Done };

struct Group;

struct Fiber {
    Group* group = nullptr;
    uint32_t tid = 0;
    State state = State::Runnable;
    unsigned char* stack = nullptr;  // mapping, guard page first
#if defined(__x86_64__)
    void* sp = nullptr;
#else
    ucontext_t ctx;
#endif
};

struct SimdState {
    int op = 0;
    size_t size = 0;
    uint32_t arrived = 0;
    uint32_t gen = 0;
    alignas(16) unsigned char slots[2][kMaxSimdWidth * 16];
    std::vector<Fiber*> waiters;
};

// Region is threadgroup memory of one declaration: its last byte sits just before an
// inaccessible page, so an index past the end of the array faults.
struct Region {
    unsigned char* map = nullptr;
    size_t mapLen = 0;
    unsigned char* data = nullptr;
    size_t bytes = 0;
};

// freeRegions holds the regions of finished threadgroups by size, for the next ones to
// take (poisoned again): unmapping them would cost a TLB flush per threadgroup.
std::unordered_multimap<size_t, Region> freeRegions;

struct Group {
    uint32_t pos[3] = {0, 0, 0};
    std::vector<Fiber> fibers;
    uint32_t barrierArrived = 0;
    std::vector<Fiber*> barrierWaiters;
    std::vector<SimdState> simd;
    std::unordered_map<int, Region> storage;
    uint32_t done = 0;

    ~Group() {
        for (auto& kv : storage) {
            freeRegions.emplace(kv.second.bytes, kv.second);
        }
    }
};

// Rng is the scheduler's seeded generator, SplitMix64: it is drawn from at every
// synchronisation point, so it has to be cheap.
struct Rng {
    uint64_t state = 0;
    uint64_t operator()() {
        uint64_t z = (state += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    // below returns a number in [0, n), by a multiply rather than a division.
    uint64_t below(uint64_t n) { return uint64_t((static_cast<unsigned __int128>((*this)()) * n) >> 64); }
};

struct Scheduler {
    const Dispatch* d = nullptr;
    Rng rng;
    std::vector<Fiber*> runnable;
    Fiber* current = nullptr;
#if defined(__x86_64__)
    void* schedSP = nullptr;
#else
    ucontext_t schedCtx;
#endif
    std::vector<unsigned char*> freeStacks;
};

Scheduler S;

[[noreturn]] void fatal(const std::string& msg) {
    Fiber* f = S.current;
    if (f != nullptr) {
        std::fprintf(stderr, "mslemu: threadgroup (%u, %u, %u) thread %u: %s\n", f->group->pos[0], f->group->pos[1],
                     f->group->pos[2], f->tid, msg.c_str());
    } else {
        std::fprintf(stderr, "mslemu: %s\n", msg.c_str());
    }
    std::fflush(stderr);
    std::_Exit(3);
}

unsigned char* takeStack() {
    if (!S.freeStacks.empty()) {
        unsigned char* s = S.freeStacks.back();
        S.freeStacks.pop_back();
        return s;
    }
    size_t page = size_t(sysconf(_SC_PAGESIZE));
    void* m = mmap(nullptr, kStackSize + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        fatal("cannot map a fiber stack");
    }
    // A stack overflow hits the guard page instead of another fiber's stack.
    mprotect(m, page, PROT_NONE);
    return static_cast<unsigned char*>(m);
}

// Back to the scheduler; returns when the scheduler resumes this fiber.
void yieldToScheduler() {
    Fiber* f = S.current;
#if defined(__x86_64__)
    mslemu_switch(&f->sp, S.schedSP);
#else
    swapcontext(&f->ctx, &S.schedCtx);
#endif
}

void fiberMain() {
    Fiber* f = S.current;
    ThreadIds ids;
    ids.tid = f->tid;
    ids.T = S.d->T;
    uint32_t w = S.d->width;
    ids.lane = f->tid % w;
    ids.sg = f->tid / w;
    ids.width = w;
    ids.nsg = (S.d->T + w - 1) / w;
    for (int i = 0; i < 3; ++i) {
        ids.group[i] = f->group->pos[i];
        ids.groups[i] = S.d->grid[i];
    }
    S.d->fn(S.d->ctx, ids);
    f->state = State::Done;
    yieldToScheduler();
    fatal("a finished fiber was resumed");
}

#if defined(__x86_64__)
void fiberEntry() { fiberMain(); }
#endif

void startFiber(Fiber* f) {
    f->stack = takeStack();
    size_t page = size_t(sysconf(_SC_PAGESIZE));
#if defined(__x86_64__)
    uintptr_t top = reinterpret_cast<uintptr_t>(f->stack + page + kStackSize) & ~uintptr_t(15);
    void** sp = reinterpret_cast<void**>(top);
    *--sp = nullptr;                                     // fiberEntry's return address
    *--sp = reinterpret_cast<void*>(&fiberEntry);        // where mslemu_switch returns to
    for (int i = 0; i < 6; ++i) {
        *--sp = nullptr;  // rbp, rbx, r12-r15
    }
    f->sp = sp;
#else
    getcontext(&f->ctx);
    f->ctx.uc_stack.ss_sp = f->stack + page;
    f->ctx.uc_stack.ss_size = kStackSize;
    f->ctx.uc_link = nullptr;
    makecontext(&f->ctx, fiberMain, 0);
#endif
}

void makeRunnable(Fiber* f) {
    f->state = State::Runnable;
    S.runnable.push_back(f);
}

void block(Fiber* f) {
    f->state = State::Blocked;
    yieldToScheduler();
}

// Gives another fiber a turn; this one stays runnable.
void yieldTurn() {
    Fiber* f = S.current;
    makeRunnable(f);
    yieldToScheduler();
}

std::string describeStuck(const Group& g) {
    uint32_t atBarrier = uint32_t(g.barrierWaiters.size());
    uint32_t inSimd = 0;
    for (const SimdState& s : g.simd) {
        inSimd += uint32_t(s.waiters.size());
    }
    return "deadlock in threadgroup (" + std::to_string(g.pos[0]) + ", " + std::to_string(g.pos[1]) + ", " +
           std::to_string(g.pos[2]) + "): " + std::to_string(atBarrier) + " threads wait at a barrier, " +
           std::to_string(inSimd) + " in a SIMD-group function, " + std::to_string(g.done) +
           " have returned (a barrier or SIMD-group function not reached by every thread)";
}

// onFault reports which emulated thread touched memory it must not (a guard page past
// a buffer, threadgroup array or fiber stack) before the process dies.
void onFault(int sig) {
    char msg[160];
    Fiber* f = S.current;
    int n;
    if (f != nullptr) {
        n = std::snprintf(msg, sizeof msg,
                          "mslemu: signal %d (an access out of bounds?) in threadgroup (%u, %u, %u) thread %u\n", sig,
                          f->group->pos[0], f->group->pos[1], f->group->pos[2], f->tid);
    } else {
        n = std::snprintf(msg, sizeof msg, "mslemu: signal %d outside any emulated thread\n", sig);
    }
    if (n > 0) {
        ssize_t ignored = write(2, msg, size_t(n));
        (void)ignored;
    }
    _exit(4);
}

void installFaultHandler() {
    static bool installed = false;
    if (installed) {
        return;
    }
    installed = true;
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_handler = onFault;
    sigaction(SIGSEGV, &sa, nullptr);
    sigaction(SIGBUS, &sa, nullptr);
}

}  // namespace

void tg_barrier() {
    Fiber* f = S.current;
    Group* g = f->group;
    if (++g->barrierArrived == S.d->T) {
        g->barrierArrived = 0;
        for (Fiber* w : g->barrierWaiters) {
            makeRunnable(w);
        }
        g->barrierWaiters.clear();
        yieldTurn();
        return;
    }
    g->barrierWaiters.push_back(f);
    block(f);
}

void atomic_point() {
    if (S.d->yieldPercent > 0 && S.rng.below(100) < S.d->yieldPercent) {
        yieldTurn();
    }
}

const unsigned char* simd_exchange(const void* value, size_t n, int op, uint* lane, uint* width, uint* active) {
    Fiber* f = S.current;
    Group* g = f->group;
    uint32_t w = S.d->width;
    uint32_t sgi = f->tid / w;
    SimdState& s = g->simd[sgi];
    uint32_t act = std::min(w, S.d->T - sgi * w);
    if (s.arrived == 0) {
        s.op = op;
        s.size = n;
    } else if (s.op != op || s.size != n) {
        fatal("divergent SIMD-group functions: lanes of one SIMD-group called different functions");
    }
    uint32_t gen = s.gen;
    unsigned char* slots = s.slots[gen & 1];
    std::memcpy(slots + 16 * (f->tid % w), value, n);
    *lane = f->tid % w;
    *width = w;
    *active = act;
    if (++s.arrived == act) {
        s.arrived = 0;
        s.gen++;
        for (Fiber* w : s.waiters) {
            makeRunnable(w);
        }
        s.waiters.clear();
        yieldTurn();
    } else {
        s.waiters.push_back(f);
        block(f);
    }
    return slots;
}

void* tg_storage(int site, size_t bytes) {
    Group* g = S.current->group;
    auto it = g->storage.find(site);
    if (it != g->storage.end()) {
        if (it->second.bytes != bytes) {
            fatal("one threadgroup declaration seen with two sizes");
        }
        return it->second.data;
    }
    // Rounded to 8 bytes so that 64-bit elements stay aligned at the end of the page.
    size_t rounded = (bytes + 7) & ~size_t(7);
    if (auto it = freeRegions.find(bytes); it != freeRegions.end()) {
        Region r = it->second;
        freeRegions.erase(it);
        std::memset(r.data, kPoison, rounded);
        g->storage.emplace(site, r);
        return r.data;
    }
    size_t page = size_t(sysconf(_SC_PAGESIZE));
    Region r;
    r.bytes = bytes;
    r.mapLen = (rounded + page - 1) / page * page + page;
    void* m = mmap(nullptr, r.mapLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        fatal("cannot map threadgroup memory");
    }
    r.map = static_cast<unsigned char*>(m);
    mprotect(r.map + r.mapLen - page, page, PROT_NONE);
    r.data = r.map + r.mapLen - page - rounded;
    std::memset(r.data, kPoison, rounded);
    g->storage.emplace(site, r);
    return r.data;
}

void run(const Dispatch& d) {
    if (d.T == 0 || d.T > 1024) {
        fatal("threadgroup size must be 1..1024");
    }
    if (d.width < 8 || d.width > kMaxSimdWidth || (d.width & (d.width - 1)) != 0) {
        fatal("SIMD-group width must be a power of two from 8 to 64");
    }
    installFaultHandler();
    S.d = &d;
    S.rng.state = d.seed;
    S.runnable.clear();
    S.current = nullptr;

    uint64_t total = uint64_t(d.grid[0]) * d.grid[1] * d.grid[2];
    std::vector<uint64_t> order(total);
    for (uint64_t i = 0; i < total; ++i) {
        order[i] = i;
    }
    for (uint64_t i = total; i > 1; --i) {
        std::swap(order[i - 1], order[S.rng.below(i)]);
    }

    std::vector<Group*> active;
    size_t next = 0;
    uint32_t maxGroups = std::max<uint32_t>(1, d.maxGroups);
    auto startGroup = [&](uint64_t index) {
        Group* g = new Group();
        g->pos[0] = uint32_t(index % d.grid[0]);
        g->pos[1] = uint32_t((index / d.grid[0]) % d.grid[1]);
        g->pos[2] = uint32_t(index / (uint64_t(d.grid[0]) * d.grid[1]));
        g->fibers.resize(d.T);
        g->simd.resize((d.T + d.width - 1) / d.width);
        for (SimdState& s : g->simd) {
            std::memset(s.slots, kPoison, sizeof(s.slots));
        }
        for (uint32_t t = 0; t < d.T; ++t) {
            Fiber* f = &g->fibers[t];
            f->group = g;
            f->tid = t;
            startFiber(f);
            makeRunnable(f);
        }
        active.push_back(g);
    };
    while (next < total && active.size() < maxGroups) {
        startGroup(order[next++]);
    }

    while (!active.empty()) {
        if (S.runnable.empty()) {
            fatal(describeStuck(*active.front()));
        }
        size_t pick = size_t(S.rng.below(S.runnable.size()));
        Fiber* f = S.runnable[pick];
        S.runnable[pick] = S.runnable.back();
        S.runnable.pop_back();
        S.current = f;
        f->state = State::Runnable;
#if defined(__x86_64__)
        mslemu_switch(&S.schedSP, f->sp);
#else
        swapcontext(&S.schedCtx, &f->ctx);
#endif
        S.current = nullptr;
        if (f->state != State::Done) {
            continue;
        }
        Group* g = f->group;
        S.freeStacks.push_back(f->stack);
        f->stack = nullptr;
        if (++g->done < d.T) {
            continue;
        }
        if (!g->barrierWaiters.empty()) {
            fatal(describeStuck(*g));
        }
        active.erase(std::find(active.begin(), active.end(), g));
        delete g;
        if (next < total) {
            startGroup(order[next++]);
        }
    }
}

}  // namespace mslemu
