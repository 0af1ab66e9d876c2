// emu_driver runs the launches of a job file through sampling.cu on the CPU (cuda_emu.h)
// and writes what the kernels left in their output and scratch buffers. emu_test.go
// writes the jobs and compares the results with the Go edition.
//
// Usage: emu_driver JOB RESULT, or emu_driver --units UNITS RESULT (see units below).
//
// JOB (little-endian): u32 magic "GBE8", u32 count, then per launch:
//   u32 kernel (0 gumbel_argmax, 1 categorical, 2 topn, 3 the filtered route: filter_max
//   with grid (grid_x, grid_y, 1), then filtered with grid (grid_x, grid_y, grid_z), on the
//   same buffers, 4 score: grid (grid_x, grid_y, grid_z), whose blocks with z > 0 must do
//   nothing, and one output slot per logits row, 5 residual: as score, a launch row per
//   chain, 6 shard_select: as score, writing only its shard argument), u32 dtype (0 f32,
//   1 f16, 2 bf16),
//   u32 grid_x, u32 grid_y, u32 grid_z, u32 block_x, u32 warp_size, u32 vocab, u32 slack,
//   u32 slots (logits rows), u32 nparams (RowParams records: grid_y, but residual's
//   launch rows are its chains, each of one record per position),
//   u64 row_stride, u64 partials_words, u32 counters_words, u32 filter_list,
//   u32 filter_min_cands (GB_FILTER_LIST and GB_FILTER_MIN_CANDS for this launch: see
//   shadow/abi.h), u64 logits_bytes, logits, params (nparams * 64), u32 aux (elements of
//   bias and counts: 0, or slots * vocab), f32 bias[aux], u32 counts[aux], u32 mask_words,
//   u32 mask[mask_words], u32 bitmask_words, u32 bitmask[bitmask_words] (the token
//   bitmasks, ceil(vocab / 32) words per mask row: kernel argument 12), u32 logprobs (1: a
//   logprobs buffer, 0: none), u32 vocab_offset (kernel argument 13), u32 shard (kernel
//   argument 14; 1: a buffer of shard keys, one per output slot, each 0xA5A5A5A5A5A5A5A5
//   beforehand; 2: a buffer of the u32 shard_words, u64 shard[shard_words] that follow,
//   shard_select's queries, histograms and key words; 0: none), u32
//   draft_words, f32 draft[draft_words] (kernel argument 15), u32 records (1: the
//   logprobs buffer starts with the f32 words[4 * output slots] that follow, the records
//   residual reads; 0: it starts with -7 in every word).
// The scratch sizes come from the job (package abi's formulas, on the Go side): partials
// and counters hold exactly that many words, so that a kernel that reaches past them
// ends the process. A buffer of no elements is passed as an 8-byte one, as ABI.md allows
// for a feature no row uses.
// RESULT, per launch: the sampling kernels, score and residual: i32 tokens[slots * grid_z],
//   i32 status[slots * grid_z], f32 logprobs[4 * slots * grid_z] (when asked for; score
//   and residual: slots in place of slots * grid_z, and score's tokens hold the ranks),
//   u64 shard keys[slots *
//   grid_z] (when asked for; with shard 2, the shard_words words of the buffer),
//   u32 counters[counters_words], u32 counts[aux], params (nparams * 64), and for the
//   filtered route u32 path[grid_z * grid_y] (draw z of launch row y at z * grid_y + y):
//   0 when the row's last block never asked whether its candidate list holds the kept
//   set (greedy, min-p alone, bad or skipped rows, a non-finite row), 1 when it drew on
//   the list, 2 when it fell back to the one-block path, then u64
//   partials[partials_words] as the launch left them (the blocks' published words);
//   topn: i32 tokens[slots * 20], f32 values[slots * 20], u32 counters[counters_words],
//   u32 passes[4 * grid_y]: for launch row y, at 4y the passes its blocks made over their
//   chunks beyond the first (summed over the blocks), at 4y + 1 those its last block made
//   over the published lists beyond the first, at 4y + 2 and 4y + 3 the thresholded
//   selections that placed a chunk's and the published lists' top N (see gb_emu_topn).
//
// With GB_EMU_TRACE set, each launch is named on stderr as it ends (to see where the
// time goes: the emulation is slow per barrier, not per element).
//
// Every buffer sits between two inaccessible pages, the logits ending slack bytes before
// the second one: a read or write out of bounds ends the process with SIGSEGV.
//
// Build with -I testdata/shadow ahead of the kernelsrc folder: shadow/abi.h stands in
// for the generated abi.h and turns GB_FILTER_LIST and GB_FILTER_MIN_CANDS into the
// variables below, so that a job can shrink the filtered kernel's candidate lists.
#include "../cuda_emu.h"

#include <cstdint>
#include <vector>

// The filtered route's observables, with no code in the kernel: the candidate-list sizes
// of the running launch, and which way each draw's last block went. gb_filter_finish_list
// (filtered.cuh) reports whether the kept set lies in the published list, and draws on it
// if so; the macro below renames its definition, and the kernel's one call,
// gb_filter_finish_list<KIND>(...), which the macro does not match (no parenthesis after
// the name), reaches the wrapper instead. Should filtered.cuh rename the function or call
// it another way, the wrapper never runs and the tests that require both paths fail.
namespace gb_emu_filter {
inline unsigned int list = 0, min_cands = 0; // the job's, per launch
inline std::vector<std::uint32_t> path;      // per draw and launch row: see RESULT

inline void note(bool listed) {
    const std::size_t at = std::size_t{gb_emu::block_idx.z} * gb_emu::grid_dim.y + gb_emu::block_idx.y;
    if (at >= path.size() || path[at] != 0u) {
        gb_emu::fail("gb_filter_finish_list: called twice for a draw, or outside a filtered launch");
    }
    path[at] = listed ? 1u : 2u;
}
} // namespace gb_emu_filter

template <int KIND, typename... A>
bool gb_filter_finish_list(A&&... a) {
    // Found by argument-dependent lookup when the kernel instantiates this (C++20: a name
    // followed by < names a template even before its declaration).
    const bool listed = gb_filter_finish_list_impl<KIND>(static_cast<A&&>(a)...);
    if (threadIdx.x == 0u) {
        gb_emu_filter::note(listed); // uniform: every thread returns the same
    }
    return listed;
}
#define gb_filter_finish_list(...) gb_filter_finish_list_impl(__VA_ARGS__)

// The topn kernel's observable, the same way: gb_topn_merge (topn.cuh) reports whether
// the block is sure of its top N or passes again below its sure keys (a thread's short
// list let go of keys that belong). A block's merges of its chunk come first, until one
// is sure; any later ones are the last block's merges of the published lists. The
// wrapper's call to the definition is declared ahead (its arguments are all of built-in
// types, which argument-dependent lookup does not search): should topn.cuh change the
// function's parameters, the declared template is never defined and the link fails.
// The thresholded selections (gb_topn_select over a chunk, gb_topn_select_published
// over the published lists) report when they place the top N, so that a test sees both
// them and the per-key merges they give up to.
namespace gb_emu_topn {
inline std::vector<std::uint32_t> passes; // per launch row: see RESULT
inline std::vector<std::uint8_t> merged;  // per block: whether its chunk's merge is sure

inline std::size_t block() {
    const std::size_t b = std::size_t{gb_emu::block_idx.y} * gb_emu::grid_dim.x + gb_emu::block_idx.x;
    if (b >= merged.size()) {
        gb_emu::fail("gb_topn_merge: called outside a topn launch");
    }
    return b;
}

inline void note(bool sure) {
    const std::size_t b = block();
    if (!sure) {
        ++passes[4u * std::size_t{gb_emu::block_idx.y} + merged[b]];
    }
    merged[b] = sure ? 1u : merged[b];
}

// note_selected counts a thresholded selection that placed the top N: of the chunk
// (lists false) or of the published lists.
inline void note_selected(bool lists) {
    const std::size_t b = block();
    ++passes[4u * std::size_t{gb_emu::block_idx.y} + 2u + (lists ? 1u : 0u)];
    merged[b] = 1u;
}
} // namespace gb_emu_topn

template <int L>
inline bool gb_topn_merge_impl(unsigned long long lst[L], unsigned long long thr, unsigned int N, unsigned int& have,
                               unsigned long long* s_top, unsigned long long* s_wtop, unsigned long long* s_wthr,
                               unsigned int* s_have);

template <int L, typename... A>
bool gb_topn_merge(A&&... a) {
    const bool sure = gb_topn_merge_impl<L>(static_cast<A&&>(a)...);
    if (threadIdx.x == 0u) {
        gb_emu_topn::note(sure); // uniform: every thread returns the same
    }
    return sure;
}
#define gb_topn_merge(...) gb_topn_merge_impl(__VA_ARGS__)

template <int L>
inline bool gb_topn_select_impl(const unsigned long long lst[L], unsigned long long thr, unsigned int N,
                                unsigned int len, unsigned long long* s_top, unsigned long long* s_wtop,
                                struct gb_topn_sel* sel);

template <int L, typename... A>
bool gb_topn_select(A&&... a) {
    const bool sure = gb_topn_select_impl<L>(static_cast<A&&>(a)...);
    if (sure && threadIdx.x == 0u) {
        gb_emu_topn::note_selected(false); // uniform
    }
    return sure;
}
#define gb_topn_select(...) gb_topn_select_impl(__VA_ARGS__)

template <unsigned int STRIDE>
inline bool gb_topn_select_published_impl(const unsigned long long* row_part, unsigned int nblocks, unsigned int N,
                                          unsigned long long* s_top, unsigned long long* s_wtop,
                                          struct gb_topn_sel* sel);

template <unsigned int STRIDE, typename... A>
bool gb_topn_select_published(A&&... a) {
    const bool sure = gb_topn_select_published_impl<STRIDE>(static_cast<A&&>(a)...);
    if (sure && threadIdx.x == 0u) {
        gb_emu_topn::note_selected(true); // uniform
    }
    return sure;
}
#define gb_topn_select_published(...) gb_topn_select_published_impl(__VA_ARGS__)

#include "../../cuda/sampling.cu"

#undef gb_filter_finish_list
#undef gb_topn_merge
#undef gb_topn_select
#undef gb_topn_select_published
#if !defined(GB_EMU_SHADOW_ABI)
#error "build with -I testdata/shadow ahead of the kernelsrc folder (see shadow/abi.h)"
#endif

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <iterator>
#include <string>

namespace {

constexpr std::uint32_t kMagic = 0x38454247u; // "GBE8"
constexpr std::int32_t kUntouched = -7;

// guarded is memory of n bytes that ends slack bytes before an inaccessible page and
// starts after another.
class guarded {
  public:
    guarded(std::size_t n, std::size_t slack) {
        const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
        const std::size_t body = (n + slack + page - 1) / page * page;
        total_ = body + 2 * page;
        void* m = mmap(nullptr, total_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) {
            gb_emu::fail("mmap");
        }
        base_ = static_cast<unsigned char*>(m);
        if (mprotect(base_, page, PROT_NONE) != 0 || mprotect(base_ + page + body, page, PROT_NONE) != 0) {
            gb_emu::fail("mprotect");
        }
        data_ = base_ + page + body - slack - n;
    }
    guarded(const guarded&) = delete;
    guarded& operator=(const guarded&) = delete;
    ~guarded() { munmap(base_, total_); }
    template <typename T>
    T* as() {
        return reinterpret_cast<T*>(data_);
    }

  private:
    unsigned char* base_ = nullptr;
    unsigned char* data_ = nullptr;
    std::size_t total_ = 0;
};

struct reader {
    std::vector<unsigned char> buf;
    std::size_t off = 0;
    template <typename T>
    T get() {
        if (buf.size() - off < sizeof(T)) {
            gb_emu::fail("job file truncated");
        }
        T v;
        std::memcpy(&v, buf.data() + off, sizeof(T));
        off += sizeof(T);
        return v;
    }
    const unsigned char* take(std::size_t n) {
        if (buf.size() - off < n) {
            gb_emu::fail("job file truncated");
        }
        const unsigned char* p = buf.data() + off;
        off += n;
        return p;
    }
};

template <typename T>
using sample_fn = void (*)(const T*, gb_row_params*, gb_i32*, gb_i32*, gb_u64*, gb_u32*, gb_u64, gb_u32, float*,
                           const float*, gb_u32*, const gb_u32*, const gb_u32*, gb_u32, gb_u64*, const float*);
template <typename T>
using topn_fn = void (*)(const T*, const gb_row_params*, gb_i32*, float*, gb_u64*, gb_u32*, gb_u64, gb_u32, float*,
                         const float*, const gb_u32*, const gb_u32*, const gb_u32*, gb_u32, gb_u64*, const float*);

// copy_in fills a guarded buffer of n elements of T (at least 8 bytes) from the job.
template <typename T>
std::unique_ptr<guarded> copy_in(reader& r, std::size_t n) {
    auto g = std::make_unique<guarded>(n == 0 ? 8 : n * sizeof(T), 0);
    if (n == 0) {
        std::memset(g->as<unsigned char>(), 0x5A, 8);
    } else {
        std::memcpy(g->as<unsigned char>(), r.take(n * sizeof(T)), n * sizeof(T));
    }
    return g;
}

template <typename T>
void put(std::ofstream& out, const T* p, std::size_t n) {
    out.write(reinterpret_cast<const char*>(p), static_cast<std::streamsize>(n * sizeof(T)));
}

} // namespace

// units evaluates sampling.cu's device functions on the inputs of UNITS (u32 n, n pairs
// of u32 (w, tail); u32 m, m Philox inputs of six u32: counter, key) and writes, in
// order: f32 GB_MIN_GUMBEL and GB_MAX_GUMBEL; n fours of f32 (gb_gumbel(w, tail),
// gb_gumbel_bound(w), gb_cheap_bound(w), gb_noise_bound(w)); m blocks of four u32;
// the f32 of all 65536 f16 bit patterns; the same for bf16.
int units(reader& r, std::ofstream& out) {
    const float bounds[2] = {GB_MIN_GUMBEL, GB_MAX_GUMBEL};
    out.write(reinterpret_cast<const char*>(bounds), sizeof bounds);
    const std::uint32_t n = r.get<std::uint32_t>();
    for (std::uint32_t i = 0; i < n; ++i) {
        const gb_u32 w = r.get<std::uint32_t>();
        const gb_u32 tail = r.get<std::uint32_t>();
        const float v[4] = {gb_gumbel(w, tail), gb_gumbel_bound(w), gb_cheap_bound(w), gb_noise_bound(w)};
        out.write(reinterpret_cast<const char*>(v), sizeof v);
    }
    const std::uint32_t m = r.get<std::uint32_t>();
    for (std::uint32_t i = 0; i < m; ++i) {
        gb_u32 in[6];
        for (auto& x : in) {
            x = r.get<std::uint32_t>();
        }
        gb_u32 blk[4];
        gb_philox(in[0], in[1], in[2], in[3], in[4], in[5], blk);
        out.write(reinterpret_cast<const char*>(blk), sizeof blk);
    }
    for (gb_u32 h = 0; h < 65536u; ++h) {
        const float f = gb_half_to_float(h);
        out.write(reinterpret_cast<const char*>(&f), sizeof f);
    }
    for (gb_u32 h = 0; h < 65536u; ++h) {
        const float f = gb_bf16_to_float(h);
        out.write(reinterpret_cast<const char*>(&f), sizeof f);
    }
    if (r.off != r.buf.size()) {
        gb_emu::fail("trailing bytes in units file");
    }
    out.close();
    return out ? 0 : 1;
}

int main(int argc, char** argv) {
    const bool unit_mode = argc == 4 && std::string(argv[1]) == "--units";
    if (argc != 3 && !unit_mode) {
        std::fprintf(stderr, "usage: %s JOB RESULT | %s --units UNITS RESULT\n", argv[0], argv[0]);
        return 2;
    }
    reader r;
    {
        std::ifstream in(argv[unit_mode ? 2 : 1], std::ios::binary);
        r.buf.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    if (unit_mode) {
        std::ofstream out(argv[3], std::ios::binary);
        return units(r, out);
    }
    if (r.get<std::uint32_t>() != kMagic) {
        gb_emu::fail("bad job magic");
    }
    const std::uint32_t count = r.get<std::uint32_t>();
    std::ofstream out(argv[2], std::ios::binary);
    for (std::uint32_t i = 0; i < count; ++i) {
        const std::uint32_t kernel = r.get<std::uint32_t>();
        const std::uint32_t dtype = r.get<std::uint32_t>();
        const std::uint32_t grid_x = r.get<std::uint32_t>();
        const std::uint32_t grid_y = r.get<std::uint32_t>();
        const std::uint32_t grid_z = r.get<std::uint32_t>();
        const std::uint32_t block_x = r.get<std::uint32_t>();
        const std::uint32_t warp = r.get<std::uint32_t>();
        const std::uint32_t vocab = r.get<std::uint32_t>();
        const std::uint32_t slack = r.get<std::uint32_t>();
        const std::uint32_t slots = r.get<std::uint32_t>();
        const std::uint32_t nparams = r.get<std::uint32_t>();
        const std::uint64_t stride = r.get<std::uint64_t>();
        const std::uint64_t npart = r.get<std::uint64_t>();
        const std::uint32_t ncnt = r.get<std::uint32_t>();
        gb_emu_filter::list = r.get<std::uint32_t>();
        gb_emu_filter::min_cands = r.get<std::uint32_t>();
        const std::uint64_t nbytes = r.get<std::uint64_t>();
        if (kernel > 6 || dtype > 2 || grid_x == 0 || grid_y == 0 || grid_z == 0 || slots == 0 ||
            nparams < grid_y) {
            gb_emu::fail("bad launch header");
        }
        const bool topn = kernel == 2;
        const bool filtered = kernel == 3;
        const bool score = kernel == 4;
        const bool residual = kernel == 5;
        const bool select = kernel == 6;

        guarded logits(nbytes, slack);
        std::memcpy(logits.as<unsigned char>(), r.take(nbytes), nbytes);
        // residual may read GB_CHAIN_SLACK records past the last (ABI.md).
        guarded params(std::size_t{nparams} * 64, residual ? std::size_t{GB_CHAIN_SLACK} * 64 : 0);
        std::memcpy(params.as<unsigned char>(), r.take(std::size_t{nparams} * 64), std::size_t{nparams} * 64);
        const std::uint32_t aux = r.get<std::uint32_t>();
        auto bias = copy_in<float>(r, aux);
        auto counts = copy_in<gb_u32>(r, aux);
        const std::uint32_t mask_words = r.get<std::uint32_t>();
        auto mask = copy_in<gb_u32>(r, mask_words);
        const std::uint32_t bitmask_words = r.get<std::uint32_t>();
        auto bitmask = copy_in<gb_u32>(r, bitmask_words);
        const bool want_lp = r.get<std::uint32_t>() != 0;
        const std::uint32_t voff = r.get<std::uint32_t>();
        const std::uint32_t shard_mode = r.get<std::uint32_t>();
        if (shard_mode > 2) {
            gb_emu::fail("bad shard mode");
        }
        const bool want_shard = shard_mode != 0;
        const std::uint32_t shard_words = shard_mode == 2 ? r.get<std::uint32_t>() : 0u;
        const unsigned char* shard_init = r.take(std::size_t{shard_words} * 8);
        const std::uint32_t draft_words = r.get<std::uint32_t>();
        auto draft = copy_in<float>(r, draft_words);

        const std::size_t outs = topn    ? std::size_t{slots} * GB_MAX_TOPN
                                 : score || residual || select ? std::size_t{slots}
                                         : std::size_t{slots} * grid_z;
        guarded tokens(outs * 4, 0);
        guarded status(outs * 4, 0);
        for (std::size_t s = 0; s < outs; ++s) {
            tokens.as<gb_i32>()[s] = kUntouched;
            status.as<gb_i32>()[s] = kUntouched;
        }
        const std::size_t nlp = want_lp ? 4 * outs : 2;
        guarded logprobs(nlp * 4, 0);
        if (r.get<std::uint32_t>() != 0) {
            if (!want_lp) {
                gb_emu::fail("records without a logprobs buffer");
            }
            std::memcpy(logprobs.as<unsigned char>(), r.take(nlp * 4), nlp * 4);
        } else {
            for (std::size_t s = 0; s < nlp; ++s) {
                logprobs.as<float>()[s] = -7.0f;
            }
        }
        const std::size_t nkeys = shard_mode == 2 ? shard_words : want_shard ? outs : 1;
        guarded shard(nkeys * 8, 0);
        for (std::size_t s = 0; s < nkeys; ++s) {
            shard.as<gb_u64>()[s] = 0xA5A5A5A5A5A5A5A5ull;
        }
        if (shard_mode == 2) {
            std::memcpy(shard.as<unsigned char>(), shard_init, nkeys * 8);
        }
        guarded partials(npart * 8, 0);
        std::memset(partials.as<unsigned char>(), 0xA5, npart * 8);
        guarded counters(std::size_t{ncnt} * 4, 0);
        std::memset(counters.as<unsigned char>(), 0, std::size_t{ncnt} * 4);

        const gb_emu::dim3 grid{grid_x, grid_y, grid_z};
        const gb_emu::dim3 block{block_x, 1, 1};
        auto* prm = params.as<gb_row_params>();
        gb_i32* tok = tokens.as<gb_i32>();
        gb_i32* st = status.as<gb_i32>();
        gb_u64* part = partials.as<gb_u64>();
        gb_u32* cnt = counters.as<gb_u32>();
        float* lp = logprobs.as<float>();
        const float* bs = bias->as<const float>();
        gb_u32* cs = counts->as<gb_u32>();
        const gb_u32* mk = mask->as<const gb_u32>();
        const gb_u32* bm = bitmask->as<const gb_u32>();
        gb_u64* sk = shard.as<gb_u64>();
        const float* df = draft->as<const float>();
        const int w = static_cast<int>(warp);
        if (topn) {
            gb_emu_topn::passes.assign(4u * std::size_t{grid_y}, 0u);
            gb_emu_topn::merged.assign(std::size_t{grid_y} * grid_x, 0u);
            float* values = reinterpret_cast<float*>(st);
            if (dtype == 0) {
                gb_emu::launch(topn_fn<float>(topn_f32), grid, block, w, logits.as<const float>(), prm, tok, values,
                               part, cnt, static_cast<gb_u64>(stride), vocab, lp, bs, cs, mk, bm, voff, sk, df);
            } else {
                const topn_fn<gb_u16> fns[2] = {topn_f16, topn_bf16};
                gb_emu::launch(fns[dtype - 1], grid, block, w, logits.as<const gb_u16>(), prm, tok, values, part, cnt,
                               static_cast<gb_u64>(stride), vocab, lp, bs, cs, mk, bm, voff, sk, df);
            }
        } else if (filtered) {
            gb_emu_filter::path.assign(std::size_t{grid_y} * grid_z, 0u);
            const gb_emu::dim3 grid1{grid_x, grid_y, 1};
            if (dtype == 0) {
                gb_emu::launch(sample_fn<float>(filter_max_f32), grid1, block, w, logits.as<const float>(), prm, tok,
                               st, part, cnt, static_cast<gb_u64>(stride), vocab, lp, bs, cs, mk, bm, voff, sk, df);
                gb_emu::launch(sample_fn<float>(filtered_f32), grid, block, w, logits.as<const float>(), prm, tok, st,
                               part, cnt, static_cast<gb_u64>(stride), vocab, lp, bs, cs, mk, bm, voff, sk, df);
            } else {
                const sample_fn<gb_u16> fns[2][2] = {{filter_max_f16, filtered_f16}, {filter_max_bf16, filtered_bf16}};
                for (int k = 0; k < 2; ++k) {
                    gb_emu::launch(fns[dtype - 1][k], k == 0 ? grid1 : grid, block, w, logits.as<const gb_u16>(), prm,
                                   tok, st, part, cnt, static_cast<gb_u64>(stride), vocab, lp, bs, cs, mk, bm, voff, sk,
                                   df);
                }
            }
        } else if (score) {
            if (dtype == 0) {
                gb_emu::launch(sample_fn<float>(score_f32), grid, block, w, logits.as<const float>(), prm, tok, st,
                               part, cnt, static_cast<gb_u64>(stride), vocab, lp, bs, cs, mk, bm, voff, sk, df);
            } else {
                const sample_fn<gb_u16> fns[2] = {score_f16, score_bf16};
                gb_emu::launch(fns[dtype - 1], grid, block, w, logits.as<const gb_u16>(), prm, tok, st, part, cnt,
                               static_cast<gb_u64>(stride), vocab, lp, bs, cs, mk, bm, voff, sk, df);
            }
        } else if (select) {
            if (dtype == 0) {
                gb_emu::launch(sample_fn<float>(shard_select_f32), grid, block, w, logits.as<const float>(), prm, tok,
                               st, part, cnt, static_cast<gb_u64>(stride), vocab, lp, bs, cs, mk, bm, voff, sk, df);
            } else {
                const sample_fn<gb_u16> fns[2] = {shard_select_f16, shard_select_bf16};
                gb_emu::launch(fns[dtype - 1], grid, block, w, logits.as<const gb_u16>(), prm, tok, st, part, cnt,
                               static_cast<gb_u64>(stride), vocab, lp, bs, cs, mk, bm, voff, sk, df);
            }
        } else if (residual) {
            if (dtype == 0) {
                gb_emu::launch(sample_fn<float>(residual_f32), grid, block, w, logits.as<const float>(), prm, tok, st,
                               part, cnt, static_cast<gb_u64>(stride), vocab, lp, bs, cs, mk, bm, voff, sk, df);
            } else {
                const sample_fn<gb_u16> fns[2] = {residual_f16, residual_bf16};
                gb_emu::launch(fns[dtype - 1], grid, block, w, logits.as<const gb_u16>(), prm, tok, st, part, cnt,
                               static_cast<gb_u64>(stride), vocab, lp, bs, cs, mk, bm, voff, sk, df);
            }
        } else if (dtype == 0) {
            const sample_fn<float> fns[2] = {gumbel_argmax_f32, categorical_f32};
            gb_emu::launch(fns[kernel], grid, block, w, logits.as<const float>(), prm, tok, st, part, cnt,
                           static_cast<gb_u64>(stride), vocab, lp, bs, cs, mk, bm, voff, sk, df);
        } else {
            const sample_fn<gb_u16> fns[2][2] = {{gumbel_argmax_f16, categorical_f16},
                                                 {gumbel_argmax_bf16, categorical_bf16}};
            gb_emu::launch(fns[dtype - 1][kernel], grid, block, w, logits.as<const gb_u16>(), prm, tok, st, part, cnt,
                           static_cast<gb_u64>(stride), vocab, lp, bs, cs, mk, bm, voff, sk, df);
        }
        // As the sampler does: gumbel_exact finishes the draws gumbel_argmax left with
        // status 5, on the same buffers.
        if (kernel == 0 && std::find(st, st + outs, GB_STATUS_EXACT) != st + outs) {
            const gb_emu::dim3 grid1{1, grid_y, grid_z};
            if (dtype == 0) {
                gb_emu::launch(sample_fn<float>(gumbel_exact_f32), grid1, block, w, logits.as<const float>(), prm, tok,
                               st, part, cnt, static_cast<gb_u64>(stride), vocab, lp, bs, cs, mk, bm, voff, sk, df);
            } else {
                const sample_fn<gb_u16> fns[2] = {gumbel_exact_f16, gumbel_exact_bf16};
                gb_emu::launch(fns[dtype - 1], grid1, block, w, logits.as<const gb_u16>(), prm, tok, st, part, cnt,
                               static_cast<gb_u64>(stride), vocab, lp, bs, cs, mk, bm, voff, sk, df);
            }
        }
        if (std::getenv("GB_EMU_TRACE") != nullptr) {
            std::fprintf(stderr, "launch %u: kernel %u dtype %u grid %ux%ux%u block %u vocab %u\n", i, kernel, dtype,
                         grid_x, grid_y, grid_z, block_x, vocab);
        }
        put(out, tok, outs);
        put(out, st, outs);
        if (!topn) {
            if (want_lp) {
                put(out, lp, 4 * outs);
            }
            if (want_shard) {
                put(out, sk, nkeys);
            }
        }
        put(out, cnt, ncnt);
        if (!topn) {
            put(out, cs, aux);
            put(out, params.as<const unsigned char>(), std::size_t{nparams} * 64);
        }
        if (filtered) {
            put(out, gb_emu_filter::path.data(), gb_emu_filter::path.size());
            put(out, part, npart);
        }
        if (topn) {
            put(out, gb_emu_topn::passes.data(), gb_emu_topn::passes.size());
        }
        gb_emu_filter::path.clear();
        gb_emu_topn::passes.clear();
        gb_emu_topn::merged.clear();
    }
    if (r.off != r.buf.size()) {
        gb_emu::fail("trailing bytes in job file");
    }
    out.close();
    return out ? 0 : 1;
}
