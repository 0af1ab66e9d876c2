package decode

import (
	"encoding/binary"
	"math"

	"github.com/gumbel-go/gumbel/runtime"
)

// Limits of the model kernels (the CUDA edition sizes its shared memory by them).
const (
	// MaxBatch is the largest batch the GEMV kernels take.
	MaxBatch = 8
	// maxActivations is the shared-memory staging area of one GEMV block in floats:
	// Batch times Hidden rounded up to 256 must fit.
	maxActivations = 8192
	// gemvBlock is the threads per block of the GEMV launches (the CUDA edition's
	// launch bounds).
	gemvBlock = 256
	// rowsPerWarp is how many matrix rows one warp streams at once, sharing each
	// activation read from shared memory among them.
	rowsPerWarp = 4
	// blocksPerSM is how many GEMV blocks the grid gives each multiprocessor: the CUDA
	// edition's launch bounds (256, 4) and 32 KiB of static shared memory per block
	// keep four resident, so the whole grid runs in one wave with no tail.
	blocksPerSM = 4
)

// paddedHidden is the per-batch-row stride of the CUDA edition's staged activations.
func paddedHidden(h int) int { return (h + 255) / 256 * 256 }

// Program is the decode model's kernel set: a CUDA edition and a Go edition (run by the
// CPU device). There is no Metal or HIP edition: the benchmark targets NVIDIA GPUs and
// the CPU device only.
var Program = &runtime.Program{
	Name: "gumbel/bench/decode",
	CUDA: cudaSource,
	Go: map[string]runtime.GoKernel{
		"embed_bf16":   goEmbed,
		"hidden_bf16":  goHidden,
		"lm_head_bf16": goLMHead,
	},
}

const cudaSource = `// gumbel decode-benchmark model kernels, CUDA edition (compiled by NVRTC: no headers).
//
// ABI (runtime.Args order; bf16 is raw bfloat16 bits, decoded by shifting into float32):
//
//   embed_bf16    grid (B,1,1)  block (T,1,1), T any multiple of 32 up to 1024
//     0 buffer E      bf16[V*H]   embedding table, row-major [V, H]
//     1 buffer tokens i32[B]      token of each batch row
//     2 buffer x      f32[B*H]    x[b, :] = E[tokens[b], :] (zeros for a token outside [0, V))
//     3 u32    V
//     4 u32    H
//
//   hidden_bf16   grid (G,1,1)  block (256,1,1)
//     0 buffer W      bf16[H*H]   row-major [H, H]
//     1 buffer x      f32[B*H]
//     2 buffer h      f32[B*H]    h[b, i] = tanh(dot(W[i, :], x[b, :])) + x[b, i]
//     3 u32    N      must equal H
//     4 u32    H
//     5 u32    B
//
//   lm_head_bf16  grid (G,1,1)  block (256,1,1)
//     0 buffer E      bf16[V*H]   the tied embedding as the LM head
//     1 buffer h      f32[B*H]
//     2 buffer logits f32[B*V]    logits[b, v] = dot(E[v, :], h[b, :])
//     3 u32    V
//     4 u32    H
//     5 u32    B
//
// GEMV limits: H % 8 == 0, 1 <= B <= 8, B * roundup(H, 256) <= 8192; any G >= 1. A launch
// outside them writes nothing. Each warp streams 4 matrix rows at a time with 16-byte
// loads, every row read once for all B batch rows (activations staged in shared memory),
// float32 fused multiply-add accumulation and a warp-shuffle reduction; the grid strides
// over row groups. The Go side launches 4 blocks per SM (launch bounds (256, 4) and 32 KiB
// of static shared memory keep that many resident: one wave, no tail).

typedef unsigned int dq_u32;
typedef unsigned short dq_u16;
typedef unsigned long long dq_u64;
typedef int dq_i32;

#define DQ_MAX_BATCH 8
#define DQ_MAX_ACT 8192
#define DQ_ROWS 4

// Eight bfloat16 values: one 16-byte load. Element 2k is the low half of word k.
struct __align__(16) dq_vec { dq_u32 w[4]; };
struct __align__(16) dq_f4 { float v[4]; };

__device__ __forceinline__ float dq_lo(dq_u32 w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float dq_hi(dq_u32 w) { return __uint_as_float(w & 0xffff0000u); }

extern "C" __global__ void embed_bf16(const dq_u16* __restrict__ E, const dq_i32* __restrict__ tokens,
                                      float* __restrict__ x, dq_u32 V, dq_u32 H) {
    const dq_u32 b = blockIdx.x;
    const dq_i32 t = tokens[b];
    float* out = x + (dq_u64)b * H;
    if (t < 0 || (dq_u32)t >= V) {
        for (dq_u32 j = threadIdx.x; j < H; j += blockDim.x) out[j] = 0.0f;
        return;
    }
    const dq_u16* row = E + (dq_u64)t * H;
    for (dq_u32 j = threadIdx.x; j < H; j += blockDim.x) out[j] = __uint_as_float(((dq_u32)row[j]) << 16);
}

// dq_stage_act copies the n = B*H activations into shared memory so that the two float4
// halves of lane l's 8-column chunk sit at [group][half][l]: a warp's float4 reads are then
// contiguous (no bank conflicts). Rows are hp floats apart. Ends with a barrier.
__device__ __forceinline__ void dq_stage_act(const float* __restrict__ act, float* sh, dq_u32 n, dq_u32 H,
                                             dq_u32 hp) {
    for (dq_u32 i = threadIdx.x; i < n; i += blockDim.x) {
        const dq_u32 b = i / H, col = i - b * H, c = col >> 3, k = col & 7u;
        sh[b * hp + (c >> 5) * 256u + (k >> 2) * 128u + (c & 31u) * 4u + (k & 3u)] = act[i];
    }
    __syncthreads();
}

// dq_gemv computes out[b*N + n] = dot(M[n, :], act[b, :]) for n < N, b < B, then, with
// residual, tanh(that) + act[b*H + n].
template <int B>
__device__ __forceinline__ void dq_gemv(const dq_u16* __restrict__ M, const float* __restrict__ act,
                                        float* __restrict__ out, dq_u32 N, dq_u32 H, bool residual,
                                        float* sh) {
    const dq_u32 chunks = H >> 3;
    const dq_u32 hp = (H + 255u) & ~255u;
    dq_stage_act(act, sh, (dq_u32)B * H, H, hp);
    const dq_u32 lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const dq_u32 step = gridDim.x * nw * DQ_ROWS;
    const dq_vec* mv = (const dq_vec*)M;
    for (dq_u32 n0 = (blockIdx.x * nw + warp) * DQ_ROWS; n0 < N; n0 += step) {
        float acc[DQ_ROWS][B];
#pragma unroll
        for (int r = 0; r < DQ_ROWS; r++)
#pragma unroll
            for (int b = 0; b < B; b++) acc[r][b] = 0.0f;
        // Unrolled twice so that the next chunk's loads are in flight during this one's math.
#pragma unroll 2
        for (dq_u32 c = lane; c < chunks; c += 32u) {
            dq_vec e[DQ_ROWS];
#pragma unroll
            for (int r = 0; r < DQ_ROWS; r++) {
                if (n0 + r < N) {
                    e[r] = mv[(dq_u64)(n0 + r) * chunks + c];
                } else {
                    e[r].w[0] = e[r].w[1] = e[r].w[2] = e[r].w[3] = 0u;
                }
            }
            const float* s = sh + (c >> 5) * 256u + (c & 31u) * 4u;
#pragma unroll
            for (int b = 0; b < B; b++) {
                const dq_f4 h0 = *(const dq_f4*)(s + b * hp);
                const dq_f4 h1 = *(const dq_f4*)(s + b * hp + 128u);
#pragma unroll
                for (int r = 0; r < DQ_ROWS; r++) {
                    float a = acc[r][b];
                    a = __fmaf_rn(dq_lo(e[r].w[0]), h0.v[0], a);
                    a = __fmaf_rn(dq_hi(e[r].w[0]), h0.v[1], a);
                    a = __fmaf_rn(dq_lo(e[r].w[1]), h0.v[2], a);
                    a = __fmaf_rn(dq_hi(e[r].w[1]), h0.v[3], a);
                    a = __fmaf_rn(dq_lo(e[r].w[2]), h1.v[0], a);
                    a = __fmaf_rn(dq_hi(e[r].w[2]), h1.v[1], a);
                    a = __fmaf_rn(dq_lo(e[r].w[3]), h1.v[2], a);
                    a = __fmaf_rn(dq_hi(e[r].w[3]), h1.v[3], a);
                    acc[r][b] = a;
                }
            }
        }
#pragma unroll
        for (int r = 0; r < DQ_ROWS; r++)
#pragma unroll
            for (int b = 0; b < B; b++) {
                float v = acc[r][b];
#pragma unroll
                for (int o = 16; o > 0; o >>= 1) v += __uint_as_float(__shfl_xor_sync(0xffffffffu, __float_as_uint(v), o));
                acc[r][b] = v;
            }
        if (lane == 0) {
#pragma unroll
            for (int r = 0; r < DQ_ROWS; r++) {
                const dq_u32 n = n0 + r;
                if (n < N) {
#pragma unroll
                    for (int b = 0; b < B; b++) {
                        float v = acc[r][b];
                        if (residual) v = tanhf(v) + act[(dq_u64)b * H + n];
                        out[(dq_u64)b * N + n] = v;
                    }
                }
            }
        }
    }
}

__device__ __forceinline__ bool dq_gemv_ok(dq_u32 H, dq_u32 B) {
    return B >= 1 && B <= DQ_MAX_BATCH && (H & 7u) == 0 && H > 0 && B * ((H + 255u) & ~255u) <= DQ_MAX_ACT &&
           (blockDim.x & 31u) == 0;
}

__device__ __forceinline__ void dq_gemv_any(const dq_u16* M, const float* act, float* out, dq_u32 N,
                                            dq_u32 H, dq_u32 B, bool residual, float* sh) {
    switch (B) {
    case 1: dq_gemv<1>(M, act, out, N, H, residual, sh); break;
    case 2: dq_gemv<2>(M, act, out, N, H, residual, sh); break;
    case 3: dq_gemv<3>(M, act, out, N, H, residual, sh); break;
    case 4: dq_gemv<4>(M, act, out, N, H, residual, sh); break;
    case 5: dq_gemv<5>(M, act, out, N, H, residual, sh); break;
    case 6: dq_gemv<6>(M, act, out, N, H, residual, sh); break;
    case 7: dq_gemv<7>(M, act, out, N, H, residual, sh); break;
    default: dq_gemv<8>(M, act, out, N, H, residual, sh); break;
    }
}

extern "C" __global__ void __launch_bounds__(256, 4) hidden_bf16(const dq_u16* __restrict__ W, const float* __restrict__ x,
                                                              float* __restrict__ h, dq_u32 N, dq_u32 H, dq_u32 B) {
    __shared__ dq_f4 sh[DQ_MAX_ACT / 4]; // dq_f4 for its 16-byte alignment
    if (!dq_gemv_ok(H, B) || N != H) return;
    dq_gemv_any(W, x, h, N, H, B, true, (float*)sh);
}

// lm_head_bf16 streams the LM head at batches above 1 too, where a GEMV written like
// hidden_bf16 is bound by instruction issue and registers rather than memory. Launch
// bounds (256, 2) give 128 registers a thread so that a warp keeps R = 8 rows
// (4 above batch 4) of 16-byte loads in flight; each lane holds its chunk's activations
// for every batch row in registers and converts each bf16 once for all B FMAs; rows
// past N are clamped to row N-1 (read, never written) instead of branched around; and
// the R*B partial sums are reduced by a reduce-scatter (31 shuffles for 32 sums instead
// of 160), ending with lane l holding sum l. The Go side launches 2 blocks per SM.

// dq_log2<V>::v is floor(log2(V)) as a compile-time constant.
template <int V>
struct dq_log2 {
    enum { v = 1 + dq_log2<V / 2>::v };
};
template <>
struct dq_log2<1> {
    enum { v = 0 };
};

// dq_rs halves the M live sums of a at butterfly distance O: a lane keeps the upper
// half when bit O of its lane is set, the lower half otherwise, and adds its partner's
// copy; with one sum left it finishes with a plain butterfly.
template <int M, int O>
struct dq_rs {
    static __device__ __forceinline__ void run(float* a, dq_u32 lane) {
        if (M > 1) {
            const bool up = (lane & (dq_u32)O) != 0u;
#pragma unroll
            for (int i = 0; i < M / 2; i++) {
                const float send = up ? a[i] : a[i + M / 2];
                const float keep = up ? a[i + M / 2] : a[i];
                a[i] = keep + __uint_as_float(__shfl_xor_sync(0xffffffffu, __float_as_uint(send), O));
            }
        } else {
            a[0] += __uint_as_float(__shfl_xor_sync(0xffffffffu, __float_as_uint(a[0]), O));
        }
        dq_rs<(M > 1 ? M / 2 : 1), O / 2>::run(a, lane);
    }
};
template <int M>
struct dq_rs<M, 0> {
    static __device__ __forceinline__ void run(float*, dq_u32) {}
};

template <int B, int R>
__device__ __forceinline__ void dq_head(const dq_u16* __restrict__ M, const float* __restrict__ act,
                                           float* __restrict__ out, dq_u32 N, dq_u32 H, float* sh) {
    const dq_u32 chunks = H >> 3;
    const dq_u32 hp = (H + 255u) & ~255u;
    dq_stage_act(act, sh, (dq_u32)B * H, H, hp);
    // Enums, not constexpr: NVRTC may compile as C++03.
    enum { NV = R * B };
    const bool scatter = (NV & (NV - 1)) == 0 && NV <= 32;
    const dq_u32 lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const dq_u32 step = gridDim.x * nw * R;
    const dq_vec* mv = (const dq_vec*)M;
    for (dq_u32 n0 = (blockIdx.x * nw + warp) * R; n0 < N; n0 += step) {
        const dq_vec* rows[R];
#pragma unroll
        for (int r = 0; r < R; r++) rows[r] = mv + (dq_u64)(n0 + r < N ? n0 + r : N - 1u) * chunks;
        float acc[NV];
#pragma unroll
        for (int i = 0; i < NV; i++) acc[i] = 0.0f;
#pragma unroll 2
        for (dq_u32 c = lane; c < chunks; c += 32u) {
            dq_vec e[R];
#pragma unroll
            for (int r = 0; r < R; r++) e[r] = rows[r][c];
            const float* s = sh + (c >> 5) * 256u + (c & 31u) * 4u;
            float h[B][8];
#pragma unroll
            for (int b = 0; b < B; b++) {
                const dq_f4 h0 = *(const dq_f4*)(s + b * hp);
                const dq_f4 h1 = *(const dq_f4*)(s + b * hp + 128u);
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    h[b][k] = h0.v[k];
                    h[b][4 + k] = h1.v[k];
                }
            }
#pragma unroll
            for (int r = 0; r < R; r++) {
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    const float lo = dq_lo(e[r].w[k]), hi = dq_hi(e[r].w[k]);
#pragma unroll
                    for (int b = 0; b < B; b++) {
                        float a = acc[r * B + b];
                        a = __fmaf_rn(lo, h[b][2 * k], a);
                        a = __fmaf_rn(hi, h[b][2 * k + 1], a);
                        acc[r * B + b] = a;
                    }
                }
            }
        }
        if (scatter) {
            dq_rs<NV, 16>::run(acc, lane);
            // Lane l now holds sum l >> (5 - log2 NV); the lowest lane of each group writes it.
            const int shift = 5 - dq_log2<NV>::v;
            const dq_u32 j = lane >> shift;
            const dq_u32 n = n0 + j / (dq_u32)B;
            if ((lane & ((1u << shift) - 1u)) == 0u && n < N) out[(dq_u64)(j % (dq_u32)B) * N + n] = acc[0];
        } else {
#pragma unroll
            for (int i = 0; i < NV; i++) {
                float v = acc[i];
#pragma unroll
                for (int o = 16; o > 0; o >>= 1) v += __uint_as_float(__shfl_xor_sync(0xffffffffu, __float_as_uint(v), o));
                acc[i] = v;
            }
            if (lane == 0) {
#pragma unroll
                for (int i = 0; i < NV; i++) {
                    const dq_u32 n = n0 + (dq_u32)(i / B);
                    if (n < N) out[(dq_u64)(i % B) * N + n] = acc[i];
                }
            }
        }
    }
}

extern "C" __global__ void __launch_bounds__(256, 2) lm_head_bf16(const dq_u16* __restrict__ E, const float* __restrict__ h,
                                                                  float* __restrict__ logits, dq_u32 V, dq_u32 H, dq_u32 B) {
    __shared__ dq_f4 sh[DQ_MAX_ACT / 4]; // dq_f4 for its 16-byte alignment
    if (!dq_gemv_ok(H, B)) return;
    float* s = (float*)sh;
    switch (B) {
    case 1: dq_head<1, 8>(E, h, logits, V, H, s); break;
    case 2: dq_head<2, 8>(E, h, logits, V, H, s); break;
    case 3: dq_head<3, 8>(E, h, logits, V, H, s); break;
    case 4: dq_head<4, 8>(E, h, logits, V, H, s); break;
    case 5: dq_head<5, 4>(E, h, logits, V, H, s); break;
    case 6: dq_head<6, 4>(E, h, logits, V, H, s); break;
    case 7: dq_head<7, 4>(E, h, logits, V, H, s); break;
    default: dq_head<8, 4>(E, h, logits, V, H, s); break;
    }
}
`

// The Go edition. Its arithmetic is the reference order of this package: a dot product
// is a float32 sum from column 0 up, each product rounded to float32 before it is added
// (no fused multiply-add), so a host loop written the same way matches it bit for bit.
// A launch whose buffers are too small for its sizes writes nothing (Run validates sizes
// before launching, so this only guards against misuse).

// bf16At returns element i of a little-endian bfloat16 array as float32.
func bf16At(b []byte, i int) float32 {
	return math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[2*i:])) << 16)
}

func f32At(b []byte, i int) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])) }

func putF32(b []byte, i int, v float32) { binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v)) }

// dotRow is the reference dot product of bf16 row m[n, :] with float32 activations
// act[b, :], both of length h.
func dotRow(m []byte, n int, act []byte, b, h int) float32 {
	var acc float32
	mo, ao := n*h, b*h
	for j := range h {
		acc += float32(bf16At(m, mo+j) * f32At(act, ao+j))
	}
	return acc
}

func goEmbed(c *runtime.BlockContext) {
	a := c.Args
	e, tokens, x := a.HostBytesArg(0), a.HostBytesArg(1), a.HostBytesArg(2)
	v, h, b := int(a.U32Arg(3)), int(a.U32Arg(4)), c.Block.X
	if len(tokens) < 4*(b+1) || len(x) < 4*h*(b+1) || len(e) < 2*v*h {
		return
	}
	t := int(int32(binary.LittleEndian.Uint32(tokens[4*b:])))
	for j := range h {
		var val float32
		if t >= 0 && t < v {
			val = bf16At(e, t*h+j)
		}
		putF32(x, b*h+j, val)
	}
}

// gemvRange returns the matrix rows [lo, hi) block blk of grid blocks computes.
func gemvRange(n, blk, grid int) (lo, hi int) {
	per := (n + grid - 1) / grid
	lo = min(n, blk*per)
	return lo, min(n, lo+per)
}

// goGEMV is the Go edition of both GEMV kernels; residual selects hidden_bf16's epilogue.
func goGEMV(c *runtime.BlockContext, residual bool) {
	a := c.Args
	m, act, out := a.HostBytesArg(0), a.HostBytesArg(1), a.HostBytesArg(2)
	n, h, batch := int(a.U32Arg(3)), int(a.U32Arg(4)), int(a.U32Arg(5))
	if batch < 1 || batch > MaxBatch || h < 1 || h%8 != 0 || (residual && n != h) ||
		len(m) < 2*n*h || len(act) < 4*batch*h || len(out) < 4*batch*n {
		return
	}
	lo, hi := gemvRange(n, c.Block.X, c.Grid.X)
	for row := lo; row < hi; row++ {
		for b := range batch {
			v := dotRow(m, row, act, b, h)
			if residual {
				v = float32(math.Tanh(float64(v))) + f32At(act, b*h+row)
			}
			putF32(out, b*n+row, v)
		}
	}
}

func goHidden(c *runtime.BlockContext) { goGEMV(c, true) }
func goLMHead(c *runtime.BlockContext) { goGEMV(c, false) }
