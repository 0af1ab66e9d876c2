// driver.cpp runs the emulated MSL kernels on cases read from a file and writes what
// they produced, for mslemu_test.go.
//
// Input (little-endian): "MSLEMU08", u32 case count, then per case
//   u32 kernel (0 gumbel_argmax, 1 categorical, 2 topn, 3 filtered: filter_max over an
//   (S, n, 1) grid, then filtered over (S, n, D), on the same buffers, 4 score,
//   6 residual and 8 shard_select: grid.z is D, whose threadgroups past z = 0 have no
//   work), u32 dtype
//   (0 f32, 1 f16, 2 bf16), u32 T, u32 S (threadgroups per row), u32 n (RowParams
//   records), u32 Y (launch rows, grid.y: n but for residual, one per chain), u32 D
//   (draws, grid.z), u32 vocab, u64 row_stride, u32 rows (logits rows: outputs are
//   per row), u32 max_groups, u32 yield_percent, u32 simd_width (0 means 32), u64 seed,
//   u64 partials words (uint64), u64 counters words (uint32), u64 logits byte count and
//   the logits, n RowParams of 64 bytes, then the bias, counts, mask and bitmask buffers,
//   each as a u64 byte count and the bytes (0 bytes: an 8-byte buffer of poison, which a
//   kernel must not touch), then u32 vocab_offset and u32 shard (1: a buffer of shard
//   keys, one per slot, starting as 0xA5 bytes; 0: 8 bytes of poison) and the shard
//   buffer's starting contents as a u64 byte count and the bytes (0 bytes: as just said;
//   else, with shard 1, the bytes fill it exactly: shard_select's queries, histograms and
//   key words), then the draft
//   probabilities (argument 15) and the logprobs buffer's starting contents (residual
//   reads score's records from it), each as a u64 byte count and the bytes (draft: 0
//   bytes is 8 bytes of poison; logprobs: 0 bytes starts it as below, else the bytes
//   fill it exactly).
// Output: "MSLEMU08", then per case, with slots = rows * D (topn: rows * 20; score,
//   residual and shard_select: rows): int32 tokens[slots], int32 status[slots] (topn:
//   float32 values[slots]), float32 logprobs[4 * slots] (none for topn), the uint64 shard
//   buffer (keys[slots], or as many words as its given contents, when asked for), the
//   counts buffer after the launch, the n RowParams
//   after the launch, and a u32 count of counter words left non-zero.
//
// Probe input: "MSLPROBE", u32 probe, u32 count, then count inputs; the output is
// "MSLPROBE" and count results (see runProbe). Probes call the kernels' building
// blocks (probes.inc) directly.
//
// tokens, status, values and logprobs (unless given) start as 0x7EEEEEEE so that
// unwritten slots are visible; partials start as 0xA5 bytes and counters as zero.
// filter_max gets an 8-byte logprobs buffer of poison, as the sampler binds it. Every
// buffer ends at an inaccessible page, so a read or write past its end kills the process
// instead of passing unnoticed.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

#include "mslemu.h"
#include "mslemu_run.h"

struct gb_row_params;

// The kernels of the Metal edition (kernelsrc/metal/sampling.metal), as the emulator
// compiles them.
void gumbel_argmax_f32(const float*, gb_row_params*, metal::atomic_int*, int*, metal::atomic_uint*, metal::atomic_uint*,
    const ulong&, const uint&, float*, const float*, uint*, const uint*, const uint*, const uint&, ulong*, const float*, uint3, uint3, uint, uint3, uint,
    uint, uint, uint);
void gumbel_argmax_f16(const ushort*, gb_row_params*, metal::atomic_int*, int*, metal::atomic_uint*,
    metal::atomic_uint*, const ulong&, const uint&, float*, const float*, uint*, const uint*, const uint*, const uint&, ulong*, const float*, uint3, uint3,
    uint, uint3, uint, uint, uint, uint);
void gumbel_argmax_bf16(const ushort*, gb_row_params*, metal::atomic_int*, int*, metal::atomic_uint*,
    metal::atomic_uint*, const ulong&, const uint&, float*, const float*, uint*, const uint*, const uint*, const uint&, ulong*, const float*, uint3, uint3,
    uint, uint3, uint, uint, uint, uint);
void categorical_f32(const float*, gb_row_params*, metal::atomic_int*, int*, metal::atomic_uint*, metal::atomic_uint*,
    const ulong&, const uint&, float*, const float*, uint*, const uint*, const uint*, const uint&, ulong*, const float*, uint3, uint3, uint, uint3, uint,
    uint, uint, uint);
void categorical_f16(const ushort*, gb_row_params*, metal::atomic_int*, int*, metal::atomic_uint*, metal::atomic_uint*,
    const ulong&, const uint&, float*, const float*, uint*, const uint*, const uint*, const uint&, ulong*, const float*, uint3, uint3, uint, uint3, uint,
    uint, uint, uint);
void categorical_bf16(const ushort*, gb_row_params*, metal::atomic_int*, int*, metal::atomic_uint*, metal::atomic_uint*,
    const ulong&, const uint&, float*, const float*, uint*, const uint*, const uint*, const uint&, ulong*, const float*, uint3, uint3, uint, uint3, uint,
    uint, uint, uint);
void filter_max_f32(const float*, gb_row_params*, metal::atomic_int*, int*, metal::atomic_uint*, metal::atomic_uint*,
    const ulong&, const uint&, float*, const float*, uint*, const uint*, const uint*, const uint&, ulong*, const float*, uint3, uint3, uint, uint3, uint,
    uint, uint, uint);
void filter_max_f16(const ushort*, gb_row_params*, metal::atomic_int*, int*, metal::atomic_uint*, metal::atomic_uint*,
    const ulong&, const uint&, float*, const float*, uint*, const uint*, const uint*, const uint&, ulong*, const float*, uint3, uint3, uint, uint3, uint,
    uint, uint, uint);
void filter_max_bf16(const ushort*, gb_row_params*, metal::atomic_int*, int*, metal::atomic_uint*, metal::atomic_uint*,
    const ulong&, const uint&, float*, const float*, uint*, const uint*, const uint*, const uint&, ulong*, const float*, uint3, uint3, uint, uint3, uint,
    uint, uint, uint);
void filtered_f32(const float*, gb_row_params*, metal::atomic_int*, int*, metal::atomic_uint*, metal::atomic_uint*,
    const ulong&, const uint&, float*, const float*, uint*, const uint*, const uint*, const uint&, ulong*, const float*, uint3, uint3, uint, uint3, uint,
    uint, uint, uint);
void filtered_f16(const ushort*, gb_row_params*, metal::atomic_int*, int*, metal::atomic_uint*, metal::atomic_uint*,
    const ulong&, const uint&, float*, const float*, uint*, const uint*, const uint*, const uint&, ulong*, const float*, uint3, uint3, uint, uint3, uint,
    uint, uint, uint);
void filtered_bf16(const ushort*, gb_row_params*, metal::atomic_int*, int*, metal::atomic_uint*, metal::atomic_uint*,
    const ulong&, const uint&, float*, const float*, uint*, const uint*, const uint*, const uint&, ulong*, const float*, uint3, uint3, uint, uint3, uint,
    uint, uint, uint);
void score_f32(const float*, gb_row_params*, metal::atomic_int*, int*, metal::atomic_uint*, metal::atomic_uint*,
    const ulong&, const uint&, float*, const float*, uint*, const uint*, const uint*, const uint&, ulong*, const float*, uint3, uint3, uint, uint3, uint,
    uint, uint, uint);
void score_f16(const ushort*, gb_row_params*, metal::atomic_int*, int*, metal::atomic_uint*, metal::atomic_uint*,
    const ulong&, const uint&, float*, const float*, uint*, const uint*, const uint*, const uint&, ulong*, const float*, uint3, uint3, uint, uint3, uint,
    uint, uint, uint);
void score_bf16(const ushort*, gb_row_params*, metal::atomic_int*, int*, metal::atomic_uint*, metal::atomic_uint*,
    const ulong&, const uint&, float*, const float*, uint*, const uint*, const uint*, const uint&, ulong*, const float*, uint3, uint3, uint, uint3, uint,
    uint, uint, uint);
void gumbel_exact_f32(const float*, gb_row_params*, metal::atomic_int*, int*, metal::atomic_uint*, metal::atomic_uint*,
    const ulong&, const uint&, float*, const float*, uint*, const uint*, const uint*, const uint&, ulong*, const float*, uint3, uint3, uint, uint3, uint,
    uint, uint, uint);
void gumbel_exact_f16(const ushort*, gb_row_params*, metal::atomic_int*, int*, metal::atomic_uint*, metal::atomic_uint*,
    const ulong&, const uint&, float*, const float*, uint*, const uint*, const uint*, const uint&, ulong*, const float*, uint3, uint3, uint, uint3, uint,
    uint, uint, uint);
void gumbel_exact_bf16(const ushort*, gb_row_params*, metal::atomic_int*, int*, metal::atomic_uint*, metal::atomic_uint*,
    const ulong&, const uint&, float*, const float*, uint*, const uint*, const uint*, const uint&, ulong*, const float*, uint3, uint3, uint, uint3, uint,
    uint, uint, uint);
void residual_f32(const float*, gb_row_params*, metal::atomic_int*, int*, metal::atomic_uint*, metal::atomic_uint*,
    const ulong&, const uint&, float*, const float*, uint*, const uint*, const uint*, const uint&, ulong*, const float*, uint3, uint3, uint, uint3, uint,
    uint, uint, uint);
void residual_f16(const ushort*, gb_row_params*, metal::atomic_int*, int*, metal::atomic_uint*, metal::atomic_uint*,
    const ulong&, const uint&, float*, const float*, uint*, const uint*, const uint*, const uint&, ulong*, const float*, uint3, uint3, uint, uint3, uint,
    uint, uint, uint);
void residual_bf16(const ushort*, gb_row_params*, metal::atomic_int*, int*, metal::atomic_uint*, metal::atomic_uint*,
    const ulong&, const uint&, float*, const float*, uint*, const uint*, const uint*, const uint&, ulong*, const float*, uint3, uint3, uint, uint3, uint,
    uint, uint, uint);
void shard_select_f32(const float*, gb_row_params*, metal::atomic_int*, int*, metal::atomic_uint*, metal::atomic_uint*,
    const ulong&, const uint&, float*, const float*, uint*, const uint*, const uint*, const uint&, ulong*, const float*, uint3, uint3, uint, uint3, uint,
    uint, uint, uint);
void shard_select_f16(const ushort*, gb_row_params*, metal::atomic_int*, int*, metal::atomic_uint*, metal::atomic_uint*,
    const ulong&, const uint&, float*, const float*, uint*, const uint*, const uint*, const uint&, ulong*, const float*, uint3, uint3, uint, uint3, uint,
    uint, uint, uint);
void shard_select_bf16(const ushort*, gb_row_params*, metal::atomic_int*, int*, metal::atomic_uint*, metal::atomic_uint*,
    const ulong&, const uint&, float*, const float*, uint*, const uint*, const uint*, const uint&, ulong*, const float*, uint3, uint3, uint, uint3, uint,
    uint, uint, uint);
void topn_f32(const float*, const gb_row_params*, int*, float*, metal::atomic_uint*, metal::atomic_uint*, const ulong&,
    const uint&, const float*, const uint*, const uint*, const uint*, uint3, uint3, uint, uint3, uint, uint, uint,
    uint);
void topn_f16(const ushort*, const gb_row_params*, int*, float*, metal::atomic_uint*, metal::atomic_uint*, const ulong&,
    const uint&, const float*, const uint*, const uint*, const uint*, uint3, uint3, uint, uint3, uint, uint, uint,
    uint);
void topn_bf16(const ushort*, const gb_row_params*, int*, float*, metal::atomic_uint*, metal::atomic_uint*,
    const ulong&, const uint&, const float*, const uint*, const uint*, const uint*, uint3, uint3, uint, uint3, uint,
    uint, uint, uint);

namespace mslemu_probe {
float exponential(uint w, uint tail);
float noise(uint w, uint tail);
float log1p(float x);
float recip(float t);
uint4 philox(uint4 c, uint k0, uint k1);
ulong fixed(float w, uint F);
float f16(ushort h);
float bf16(ushort b);
ulong mulhi64(ulong a, ulong b);
float divcorrect(float a, float b, float q);
float divrn(float a, float b);
}  // namespace mslemu_probe

namespace {

[[noreturn]] void die(const std::string& msg) {
    std::fprintf(stderr, "mslemu driver: %s\n", msg.c_str());
    std::exit(2);
}

// Guarded is memory whose last byte sits just before an inaccessible page.
struct Guarded {
    unsigned char* map = nullptr;
    size_t mapLen = 0;
    unsigned char* data = nullptr;
    size_t size = 0;

    Guarded(size_t n, unsigned char fill) : size(n) {
        size_t page = size_t(sysconf(_SC_PAGESIZE));
        size_t pages = (n + page - 1) / page + 1;
        mapLen = (pages + 1) * page;
        void* m = mmap(nullptr, mapLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) {
            die("mmap failed");
        }
        map = static_cast<unsigned char*>(m);
        mprotect(map, page, PROT_NONE);
        mprotect(map + mapLen - page, page, PROT_NONE);
        data = map + mapLen - page - n;
        std::memset(data, fill, n);
    }
    ~Guarded() { munmap(map, mapLen); }
    Guarded(const Guarded&) = delete;
    Guarded& operator=(const Guarded&) = delete;
};

struct Reader {
    FILE* f;
    template <typename T>
    T get() {
        T v;
        if (std::fread(&v, sizeof v, 1, f) != 1) {
            die("short input");
        }
        return v;
    }
    void bytes(void* dst, size_t n) {
        if (n > 0 && std::fread(dst, 1, n, f) != n) {
            die("short input");
        }
    }
};

// The kernel of a Launch: the input's kernel numbers, and filter_max, which a filtered
// case runs first.
enum : uint32_t {
    kGumbelArgmax = 0,
    kCategorical = 1,
    kTopN = 2,
    kFiltered = 3,
    kScore = 4,
    kFilterMax = 5,
    kResidual = 6,
    kGumbelExact = 7, // run after gumbel_argmax when a draw ends with status 5
    kShardSelect = 8
};

// GB_STATUS_EXACT (kernelsrc/abi.h): the status gumbel_exact finishes.
constexpr int kStatusExact = 5;

struct Launch {
    uint32_t which, dtype;
    const void* logits;
    gb_row_params* params;
    void* tokens;
    void* status;
    metal::atomic_uint* partials;
    metal::atomic_uint* counters;
    ulong rowStride;
    uint vocab;
    float* logprobs;
    const float* bias;
    uint* counts;
    const uint* mask;
    const uint* bitmask;
    uint vocabOffset;
    ulong* shard;
    const float* draft;
};

#define SAMPLING_CALL(fn, T)                                                                                       \
    fn(static_cast<const T*>(l->logits), l->params, static_cast<metal::atomic_int*>(l->tokens),                  \
       static_cast<int*>(l->status), l->partials, l->counters, l->rowStride, l->vocab, l->logprobs, l->bias,      \
       l->counts, l->mask, l->bitmask, l->vocabOffset, l->shard, l->draft, group, groups, id.tid, size, id.lane,  \
       id.sg, id.width, id.nsg)
#define TOPN_CALL(fn, T)                                                                                           \
    fn(static_cast<const T*>(l->logits), l->params, static_cast<int*>(l->tokens), static_cast<float*>(l->status), \
       l->partials, l->counters, l->rowStride, l->vocab, l->bias, l->counts, l->mask, l->bitmask, group, groups,    \
       id.tid, size, id.lane, id.sg, id.width, id.nsg)

void thunk(void* ctx, const mslemu::ThreadIds& id) {
    const Launch* l = static_cast<const Launch*>(ctx);
    uint3 group(id.group[0], id.group[1], id.group[2]);
    uint3 groups(id.groups[0], id.groups[1], id.groups[2]);
    uint3 size(id.T, 1, 1);
    switch (l->which * 3 + l->dtype) {
    case 0:
        SAMPLING_CALL(gumbel_argmax_f32, float);
        break;
    case 1:
        SAMPLING_CALL(gumbel_argmax_f16, ushort);
        break;
    case 2:
        SAMPLING_CALL(gumbel_argmax_bf16, ushort);
        break;
    case 3:
        SAMPLING_CALL(categorical_f32, float);
        break;
    case 4:
        SAMPLING_CALL(categorical_f16, ushort);
        break;
    case 5:
        SAMPLING_CALL(categorical_bf16, ushort);
        break;
    case 6:
        TOPN_CALL(topn_f32, float);
        break;
    case 7:
        TOPN_CALL(topn_f16, ushort);
        break;
    case 8:
        TOPN_CALL(topn_bf16, ushort);
        break;
    case 9:
        SAMPLING_CALL(filtered_f32, float);
        break;
    case 10:
        SAMPLING_CALL(filtered_f16, ushort);
        break;
    case 11:
        SAMPLING_CALL(filtered_bf16, ushort);
        break;
    case 12:
        SAMPLING_CALL(score_f32, float);
        break;
    case 13:
        SAMPLING_CALL(score_f16, ushort);
        break;
    case 14:
        SAMPLING_CALL(score_bf16, ushort);
        break;
    case 15:
        SAMPLING_CALL(filter_max_f32, float);
        break;
    case 16:
        SAMPLING_CALL(filter_max_f16, ushort);
        break;
    case 17:
        SAMPLING_CALL(filter_max_bf16, ushort);
        break;
    case 18:
        SAMPLING_CALL(residual_f32, float);
        break;
    case 19:
        SAMPLING_CALL(residual_f16, ushort);
        break;
    case 20:
        SAMPLING_CALL(residual_bf16, ushort);
        break;
    case 21:
        SAMPLING_CALL(gumbel_exact_f32, float);
        break;
    case 22:
        SAMPLING_CALL(gumbel_exact_f16, ushort);
        break;
    case 23:
        SAMPLING_CALL(gumbel_exact_bf16, ushort);
        break;
    case 24:
        SAMPLING_CALL(shard_select_f32, float);
        break;
    case 25:
        SAMPLING_CALL(shard_select_f16, ushort);
        break;
    case 26:
        SAMPLING_CALL(shard_select_bf16, ushort);
        break;
    default:
        die("unknown kernel or dtype");
    }
}

template <typename T>
void put(FILE* out, T v) {
    std::fwrite(&v, sizeof v, 1, out);
}

float bitsToFloat(uint32_t b) {
    float f;
    std::memcpy(&f, &b, 4);
    return f;
}

uint32_t floatToBits(float f) {
    uint32_t b;
    std::memcpy(&b, &f, 4);
    return b;
}

// runProbe answers one probe:
//   1 noise:   (u32 w, u32 tail)       -> (f32 gb_exponential, f32 gb_gumbel)
//   2 log1p:   f32 x                   -> f32 gb_log1p_neg_half(x)
//   3 recip:   f32 t                   -> f32 gb_recip_rn(t)
//   4 philox:  (u32 ctr[4], u32 key[2]) -> u32[4] gb_philox
//   5 fixed:   (f32 w, u32 F)          -> u64 gb_fixed(w, F)
//   6 decode:  u16 bits                -> (f32 as float16, f32 as bfloat16)
//   7 mulhi64: (u64 a, u64 b)          -> u64 gb_mul_hi64(a, b)
//   8 log1p sweep: count triples (u32 first, u32 last, u32 step) of magnitudes' bit
//     patterns; for each u in the range, x = -u is checked against log1p in double
//     and in long double, both rounded to float -> per triple u64 checked,
//     u64 differing from double, u64 differing from long double, u32 largest
//     difference in units in the last place, u32 first differing pattern (or 0).
//   9 division: (f32 a, f32 b, i32 k) -> (f32 gb_div_rn(a, b), f32 gb_div_correct(a, b, q))
//     where q is a/b moved k units in the last place (a division of Metal's accuracy).
void runProbe(Reader& r, FILE* out) {
    uint32_t probe = r.get<uint32_t>();
    uint32_t count = r.get<uint32_t>();
    std::fwrite("MSLPROBE", 1, 8, out);
    for (uint32_t i = 0; i < count; ++i) {
        switch (probe) {
        case 1: {
            uint w = r.get<uint32_t>(), tail = r.get<uint32_t>();
            put(out, floatToBits(mslemu_probe::exponential(w, tail)));
            put(out, floatToBits(mslemu_probe::noise(w, tail)));
            break;
        }
        case 2:
            put(out, floatToBits(mslemu_probe::log1p(bitsToFloat(r.get<uint32_t>()))));
            break;
        case 3:
            put(out, floatToBits(mslemu_probe::recip(bitsToFloat(r.get<uint32_t>()))));
            break;
        case 4: {
            uint c[6];
            for (uint& v : c) {
                v = r.get<uint32_t>();
            }
            uint4 o = mslemu_probe::philox(uint4(c[0], c[1], c[2], c[3]), c[4], c[5]);
            put(out, o.x);
            put(out, o.y);
            put(out, o.z);
            put(out, o.w);
            break;
        }
        case 5: {
            float w = bitsToFloat(r.get<uint32_t>());
            uint F = r.get<uint32_t>();
            put(out, mslemu_probe::fixed(w, F));
            break;
        }
        case 6: {
            ushort h = r.get<uint16_t>();
            put(out, floatToBits(mslemu_probe::f16(h)));
            put(out, floatToBits(mslemu_probe::bf16(h)));
            break;
        }
        case 7: {
            ulong a = r.get<uint64_t>(), b = r.get<uint64_t>();
            put(out, mslemu_probe::mulhi64(a, b));
            break;
        }
        case 8: {
            uint32_t first = r.get<uint32_t>(), last = r.get<uint32_t>(), step = r.get<uint32_t>();
            uint64_t checked = 0, vsDouble = 0, vsLong = 0;
            uint32_t worst = 0, firstBad = 0;
            for (uint64_t b = first; b <= last; b += step) {
                float x = -bitsToFloat(uint32_t(b));
                uint32_t got = floatToBits(mslemu_probe::log1p(x));
                uint32_t d = floatToBits(float(std::log1p(double(x))));
                uint32_t l = floatToBits(float(log1pl((long double)(x))));
                checked++;
                if (got != d) {
                    vsDouble++;
                }
                if (got != l) {
                    vsLong++;
                    if (firstBad == 0) {
                        firstBad = uint32_t(b);
                    }
                    // Same sign: the patterns' distance is the distance in ulps.
                    worst = std::max(worst, got > l ? got - l : l - got);
                }
            }
            put(out, checked);
            put(out, vsDouble);
            put(out, vsLong);
            put(out, worst);
            put(out, firstBad);
            break;
        }
        case 9: {
            float a = bitsToFloat(r.get<uint32_t>()), b = bitsToFloat(r.get<uint32_t>());
            int32_t k = r.get<int32_t>();
            float q = a / b;
            uint32_t qb = floatToBits(q);
            if (std::isfinite(q) && q != 0.0f) {
                // Toward or away from zero by |k| ulps; the sign of q stays.
                qb = uint32_t(int64_t(qb) + k);
            }
            put(out, floatToBits(mslemu_probe::divrn(a, b)));
            put(out, floatToBits(mslemu_probe::divcorrect(a, b, bitsToFloat(qb))));
            break;
        }
        default:
            die("unknown probe " + std::to_string(probe));
        }
    }
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 3) {
        die("usage: driver INPUT OUTPUT");
    }
    FILE* in = std::fopen(argv[1], "rb");
    if (in == nullptr) {
        die(std::string("cannot open ") + argv[1]);
    }
    FILE* out = std::fopen(argv[2], "wb");
    if (out == nullptr) {
        die(std::string("cannot create ") + argv[2]);
    }
    Reader r{in};
    char magic[8];
    r.bytes(magic, 8);
    if (std::memcmp(magic, "MSLPROBE", 8) == 0) {
        runProbe(r, out);
        if (std::fclose(out) != 0) {
            die("writing the output failed");
        }
        return 0;
    }
    if (std::memcmp(magic, "MSLEMU08", 8) != 0) {
        die("bad magic");
    }
    std::fwrite("MSLEMU08", 1, 8, out);
    uint32_t cases = r.get<uint32_t>();
    for (uint32_t c = 0; c < cases; ++c) {
        uint32_t which = r.get<uint32_t>();
        uint32_t dtype = r.get<uint32_t>();
        uint32_t T = r.get<uint32_t>();
        uint32_t S = r.get<uint32_t>();
        uint32_t n = r.get<uint32_t>();
        uint32_t Y = r.get<uint32_t>();
        uint32_t D = r.get<uint32_t>();
        uint32_t vocab = r.get<uint32_t>();
        uint64_t stride = r.get<uint64_t>();
        uint32_t rows = r.get<uint32_t>();
        uint32_t maxGroups = r.get<uint32_t>();
        uint32_t yieldPercent = r.get<uint32_t>();
        uint32_t width = r.get<uint32_t>();
        uint64_t seed = r.get<uint64_t>();
        uint64_t partialWords = r.get<uint64_t>();
        uint64_t counterWords = r.get<uint64_t>();
        uint64_t logitBytes = r.get<uint64_t>();
        if ((which > kScore && which != kResidual && which != kShardSelect) || dtype > 2 || T == 0 || S == 0 || n == 0 || Y == 0 || D == 0 ||
            (which == kTopN && D != 1) || partialWords == 0 || counterWords == 0) {
            die("case " + std::to_string(c) + ": bad header");
        }
        Guarded logits(logitBytes, 0);
        r.bytes(logits.data, logitBytes);
        Guarded params(size_t(n) * 64, 0);
        r.bytes(params.data, size_t(n) * 64);
        // bias, counts, mask, bitmask: an absent one is 8 bytes of poison.
        std::vector<Guarded*> extra;
        uint64_t extraBytes[4];
        for (int i = 0; i < 4; ++i) {
            uint64_t bytes = r.get<uint64_t>();
            extraBytes[i] = bytes;
            Guarded* g = new Guarded(bytes == 0 ? 8 : bytes, 0xA5);
            if (bytes > 0) {
                r.bytes(g->data, bytes);
            }
            extra.push_back(g);
        }
        const uint32_t vocabOffset = r.get<uint32_t>();
        const bool wantShard = r.get<uint32_t>() != 0;
        const uint64_t givenShardBytes = r.get<uint64_t>();
        if (givenShardBytes % 8 != 0 || (givenShardBytes > 0 && !wantShard)) {
            die("case " + std::to_string(c) + ": bad shard contents");
        }
        std::vector<unsigned char> givenShard(givenShardBytes);
        r.bytes(givenShard.data(), givenShardBytes);
        const uint64_t draftBytes = r.get<uint64_t>();
        Guarded draft(draftBytes == 0 ? 8 : draftBytes, 0xA5);
        r.bytes(draft.data, draftBytes);
        const uint64_t givenRecordBytes = r.get<uint64_t>();
        const bool topn = which == kTopN;
        const bool oneSlot = which == kScore || which == kResidual || which == kShardSelect;
        size_t slots = topn ? size_t(rows) * 20 : oneSlot ? size_t(rows) : size_t(rows) * D;
        Guarded tokens(slots * 4, 0);
        Guarded status(slots * 4, 0);
        size_t records = topn ? 0 : slots * 4;
        Guarded logprobs(std::max<size_t>(records * 4, 8), 0);
        int32_t sentinel = 0x7EEEEEEE;
        for (size_t i = 0; i < slots; ++i) {
            std::memcpy(tokens.data + 4 * i, &sentinel, 4);
            std::memcpy(status.data + 4 * i, &sentinel, 4);
        }
        for (size_t i = 0; i < records; ++i) {
            std::memcpy(logprobs.data + 4 * i, &sentinel, 4);
        }
        if (givenRecordBytes > 0) {
            if (givenRecordBytes != records * 4) {
                die("case " + std::to_string(c) + ": the given records do not fill the logprobs buffer");
            }
            r.bytes(logprobs.data, givenRecordBytes);
        }
        const size_t keys = givenShardBytes > 0 ? givenShardBytes / 8 : wantShard && !topn ? slots : 0;
        Guarded shard(std::max<size_t>(keys * 8, 8), 0xA5);
        if (givenShardBytes > 0) {
            std::memcpy(shard.data, givenShard.data(), givenShardBytes);
        }
        Guarded partials(partialWords * 8, 0xA5);
        Guarded counters(counterWords * 4, 0);

        Launch l;
        l.which = which;
        l.dtype = dtype;
        l.logits = logits.data;
        l.params = reinterpret_cast<gb_row_params*>(params.data);
        l.tokens = tokens.data;
        l.status = status.data;
        l.partials = reinterpret_cast<metal::atomic_uint*>(partials.data);
        l.counters = reinterpret_cast<metal::atomic_uint*>(counters.data);
        l.rowStride = stride;
        l.vocab = vocab;
        l.logprobs = reinterpret_cast<float*>(logprobs.data);
        l.bias = reinterpret_cast<const float*>(extra[0]->data);
        l.counts = reinterpret_cast<uint*>(extra[1]->data);
        l.mask = reinterpret_cast<const uint*>(extra[2]->data);
        l.bitmask = reinterpret_cast<const uint*>(extra[3]->data);
        l.vocabOffset = vocabOffset;
        l.shard = reinterpret_cast<ulong*>(shard.data);
        l.draft = reinterpret_cast<const float*>(draft.data);

        mslemu::Dispatch d;
        d.grid[0] = which == kCategorical ? 1 : S;
        d.grid[1] = Y;
        d.grid[2] = D;
        d.T = T;
        d.width = width == 0 ? 32 : width;
        d.fn = thunk;
        d.ctx = &l;
        d.seed = seed;
        d.maxGroups = maxGroups;
        d.yieldPercent = yieldPercent;
        if (which == kFiltered) {
            // filter_max first, over (S, n, 1), its records argument unused.
            Guarded unused(8, 0xA5);
            Launch fm = l;
            fm.which = kFilterMax;
            fm.logprobs = reinterpret_cast<float*>(unused.data);
            mslemu::Dispatch dm = d;
            dm.grid[2] = 1;
            dm.ctx = &fm;
            dm.seed = seed ^ 0x9E3779B97F4A7C15ull;
            mslemu::run(dm);
        }
        mslemu::run(d);
        if (which == kGumbelArgmax) {
            // As the sampler does: gumbel_exact finishes the draws left with status 5.
            const int* st = reinterpret_cast<const int*>(status.data);
            if (std::find(st, st + slots, kStatusExact) != st + slots) {
                Launch ex = l;
                ex.which = kGumbelExact;
                mslemu::Dispatch de = d;
                de.grid[0] = 1;
                de.ctx = &ex;
                de.seed = seed ^ 0xC2B2AE3D27D4EB4Full;
                mslemu::run(de);
            }
        }

        uint32_t nonzero = 0;
        for (size_t i = 0; i < counterWords; ++i) {
            uint32_t v;
            std::memcpy(&v, counters.data + 4 * i, 4);
            nonzero += v != 0 ? 1 : 0;
        }
        std::fwrite(tokens.data, 1, slots * 4, out);
        std::fwrite(status.data, 1, slots * 4, out);
        std::fwrite(logprobs.data, 1, records * 4, out);
        std::fwrite(shard.data, 1, keys * 8, out);
        std::fwrite(extra[1]->data, 1, extraBytes[1], out);
        std::fwrite(params.data, 1, size_t(n) * 64, out);
        std::fwrite(&nonzero, 4, 1, out);
        for (Guarded* g : extra) {
            delete g;
        }
    }
    if (std::fclose(out) != 0) {
        die("writing the output failed");
    }
    std::fclose(in);
    return 0;
}
