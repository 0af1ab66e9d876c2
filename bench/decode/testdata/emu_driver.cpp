// emu_driver.cpp runs the decode model's CUDA edition on the CPU under
// kernelsrc/emu/cuda_emu.h and checks every kernel against a float64 host computation.
// emu_test.go writes the CUDA source to decode.cu in a folder on the include path, builds
// this file with g++ and runs it; it prints one "ok" line per case, or a FAIL line and
// exits 1.
#include "cuda_emu.h" // brings __fmaf_rn, which NVRTC provides as a built-in

#include "decode.cu"

#include <random>

using gb_emu::dim3;

static unsigned short to_bf16(float f) {
    unsigned u;
    std::memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<unsigned short>(u >> 16);
}

static float from_bf16(unsigned short b) {
    const unsigned u = static_cast<unsigned>(b) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

// check_gemv launches lm_head_bf16 (hidden_bf16 with resid) over
// N rows of width H and batch B and compares with float64, relative to the sum of
// |products|.
static int check_gemv(int N, int H, int B, unsigned grid, bool resid) {
    std::mt19937 g(N * 31 + H * 7 + B);
    std::normal_distribution<float> d;
    std::vector<unsigned short> M(static_cast<size_t>(N) * H);
    for (auto& m : M) m = to_bf16(d(g));
    std::vector<float> act(static_cast<size_t>(B) * H);
    for (auto& a : act) a = d(g);
    std::vector<float> out(static_cast<size_t>(B) * N, -99.0f);
    auto k = resid ? hidden_bf16 : lm_head_bf16;
    gb_emu::launch(k, dim3{grid, 1, 1}, dim3{256, 1, 1}, 32, static_cast<const dq_u16*>(M.data()),
                   static_cast<const float*>(act.data()), out.data(), static_cast<dq_u32>(N),
                   static_cast<dq_u32>(H), static_cast<dq_u32>(B));
    double worst = 0;
    for (int b = 0; b < B; b++) {
        for (int n = 0; n < N; n++) {
            double s = 0, a = 0;
            for (int j = 0; j < H; j++) {
                const double p = double(from_bf16(M[size_t(n) * H + j])) * act[size_t(b) * H + j];
                s += p;
                a += std::fabs(p);
            }
            if (resid) s = std::tanh(s) + act[size_t(b) * H + n];
            const float got = out[size_t(b) * N + n];
            const double e = std::fabs(s - got) / (a + 1e-30);
            worst = e > worst ? e : worst;
            if (!(e <= 1e-5)) {
                std::printf("FAIL gemv N=%d H=%d B=%d resid=%d [%d,%d]: got %g want %g\n", N, H, B, resid, b, n, got, s);
                return 1;
            }
        }
    }
    std::printf("ok gemv N=%d H=%d B=%d grid=%u resid=%d worst=%.3g\n", N, H, B, grid, resid, worst);
    return 0;
}

static int check_embed() {
    const int V = 50, H = 40;
    std::vector<unsigned short> E(V * H);
    for (int i = 0; i < V * H; i++) E[i] = to_bf16(float(i) * 0.25f - 100.0f);
    const int tokens[5] = {3, 49, 0, -1, 50};
    std::vector<float> x(5 * H, -99.0f);
    gb_emu::launch(embed_bf16, dim3{5, 1, 1}, dim3{32, 1, 1}, 32, static_cast<const dq_u16*>(E.data()),
                   static_cast<const dq_i32*>(tokens), x.data(), static_cast<dq_u32>(V), static_cast<dq_u32>(H));
    for (int b = 0; b < 5; b++) {
        for (int j = 0; j < H; j++) {
            const float want = tokens[b] >= 0 && tokens[b] < V ? from_bf16(E[tokens[b] * H + j]) : 0.0f;
            if (x[b * H + j] != want) {
                std::printf("FAIL embed token %d column %d: got %g want %g\n", tokens[b], j, x[b * H + j], want);
                return 1;
            }
        }
    }
    std::printf("ok embed\n");
    return 0;
}

// check_rejects: sizes the GEMV kernels cannot take leave the output untouched.
static int check_rejects() {
    std::vector<unsigned short> M(64 * 64, to_bf16(1.0f));
    std::vector<float> act(8 * 64, 1.0f), out(8 * 64, -7.0f);
    const dq_u32 cases[4][3] = {{64, 60, 2}, {64, 64, 0}, {64, 64, 9}, {32, 64, 2}};
    for (const auto& c : cases) {
        gb_emu::launch(c[0] == 32 ? hidden_bf16 : lm_head_bf16, dim3{2, 1, 1}, dim3{256, 1, 1}, 32,
                       static_cast<const dq_u16*>(M.data()), static_cast<const float*>(act.data()), out.data(), c[0], c[1], c[2]);
        for (float v : out) {
            if (v != -7.0f) {
                std::printf("FAIL rejects N=%u H=%u B=%u wrote %g\n", c[0], c[1], c[2], v);
                return 1;
            }
        }
    }
    std::printf("ok rejects\n");
    return 0;
}

int main() {
    int f = check_embed() | check_rejects();
    f |= check_gemv(1000, 1024, 1, 3, false);
    f |= check_gemv(1001, 1024, 4, 2, false);
    f |= check_gemv(37, 264, 5, 1, false);
    f |= check_gemv(130, 24, 8, 2, false);
    f |= check_gemv(64, 64, 3, 7, false);
    f |= check_gemv(256, 256, 4, 2, true);
    f |= check_gemv(40, 40, 8, 1, true);
    // The LM head: every batch size (both reductions, both row counts), rows not a
    // multiple of the rows per warp, H not a multiple of 256 and a grid-stride loop.
    for (int b = 1; b <= 8; b++) f |= check_gemv(1003, 1024, b, 3, false);
    f |= check_gemv(37, 264, 5, 1, false);
    f |= check_gemv(130, 24, 8, 2, false);
    f |= check_gemv(5, 64, 4, 7, false);
    return f;
}
