package bench

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/sampler"
)

// Token-bitmask routes (structured output): each is an unmasked route with a grammar's
// token bitmask on every row, timed like the matrix routes so that the mask's cost reads
// as a ratio against the unmasked route (BitmaskMarkdown). Every row has its own mask
// row from GrammarMask: random bits, about half the vocabulary allowed, drawn from a
// fixed seed. Random bits are the conservative content for a fused kernel: almost no
// 32-token word is all allowed or all banned, so no word can be skipped.
const (
	// GreedyBitmask is greedy with the masks in device memory (Logits.Bitmask).
	GreedyBitmask Route = "greedy+bitmask"
	// GumbelBitmask is the Gumbel step with the masks in device memory (Logits.Bitmask):
	// the mask applied inside the sampling kernel's one pass, with nothing copied per
	// call, so its Relaunch and graph replay time the device work alone.
	GumbelBitmask Route = "gumbel+bitmask"
	// GumbelBitmaskHost is the Gumbel step with host masks (Params.Bitmask), copied to
	// the device by every call: its host latency includes the copy. Relaunch reuses the
	// copy already on the device, so its device times are those of GumbelBitmask.
	GumbelBitmaskHost Route = "gumbel+bitmask-host"
	// GumbelBitmaskUnfused is the unfused form: a separate mask kernel
	// (apply_bitmask_*, bitmaskProgram) writes -Inf into the banned logits in place, as
	// xgrammar's apply_token_bitmask_inplace does, then the unmasked Gumbel step runs.
	// The logits are a private copy, since the pass rewrites them; in place is
	// idempotent, so every replay does the same work.
	GumbelBitmaskUnfused Route = "gumbel+bitmask-unfused"
	// TopKTopPBitmask is top-k 50 with top-p 0.9 (filtered route) with device masks.
	TopKTopPBitmask Route = "topk50-topp0.9+bitmask"
	// CategoricalBitmask is the categorical route (the Gumbel switch off) with device
	// masks.
	CategoricalBitmask Route = "categorical+bitmask"
	// GumbelBatchBitmask is the graph-capturable Batch.Launch with device masks, each
	// batch row applying its own mask row (Batch.SetBitmaskRow).
	GumbelBatchBitmask Route = "gumbel-batch-launch+bitmask"
)

// BitmaskRoutes lists each unmasked route followed by its masked forms
// (`gumbel bench --route bitmask`): what BitmaskMarkdown sets against each other.
var BitmaskRoutes = []Route{
	Greedy, GreedyBitmask,
	GumbelSplit, GumbelBitmask, GumbelBitmaskHost, GumbelBitmaskUnfused,
	TopKTopP, TopKTopPBitmask,
	Categorical, CategoricalBitmask,
	GumbelBatch, GumbelBatchBitmask,
}

// bitmaskBase maps each masked route to the unmasked route it adds the mask to: its row
// parameters and sampler options are that route's, and its cost is read against it.
var bitmaskBase = map[Route]Route{
	GreedyBitmask:        Greedy,
	GumbelBitmask:        GumbelSplit,
	GumbelBitmaskHost:    GumbelSplit,
	GumbelBitmaskUnfused: GumbelSplit,
	TopKTopPBitmask:      TopKTopP,
	CategoricalBitmask:   Categorical,
	GumbelBatchBitmask:   GumbelBatch,
}

// unmasked returns the route r adds a bitmask to, or r itself.
func unmasked(r Route) Route {
	if b, ok := bitmaskBase[r]; ok {
		return b
	}
	return r
}

// maskSeed seeds GrammarMask in every measurement.
const maskSeed = 0x6d61736b

// GrammarMask returns rows token bitmask rows of ceil(vocab/32) words for vocab tokens,
// in the layout of sampler.Params.Bitmask: random bits (about half the tokens allowed,
// every row different) from seed, the bits beyond the vocabulary clear. A row that drew
// no allowed token (possible only for tiny vocabularies) allows token row % vocab, so
// that every row can be sampled.
func GrammarMask(rows, vocab int, seed uint64) []int32 {
	w := (vocab + 31) / 32
	rng := rand.New(rand.NewPCG(seed, uint64(vocab)))
	out := make([]int32, rows*w)
	for r := range rows {
		row := out[r*w : (r+1)*w]
		allowed := false
		for i := range row {
			row[i] = int32(rng.Uint32())
			if i == w-1 && vocab%32 != 0 {
				row[i] &= int32(uint32(1)<<(vocab%32) - 1)
			}
			allowed = allowed || row[i] != 0
		}
		if !allowed {
			t := r % vocab
			row[t/32] |= int32(uint32(1) << (t % 32))
		}
	}
	return out
}

// bitmaskState is a masked route's device state for one measurement.
type bitmaskState struct {
	// masks holds GrammarMask's rows on the device (nil for the host-mask route).
	masks runtime.Buffer
	// The unfused route's mask pass: the private logits copy it rewrites, and its
	// kernel, launched on the sampler's stream.
	logits runtime.Buffer
	mod    runtime.Module
	kernel runtime.Kernel
	st     runtime.Stream
	args   runtime.Args
	grid   runtime.Dim3
}

// setupBitmask gives the rows of masked route r their masks: device masks in
// lg.Bitmask, host masks in ps, or, for the unfused route, the mask pass over a private
// copy of the logits, which lg then names. It returns nil for an unmasked route.
func setupBitmask(dev runtime.Device, s *sampler.Sampler, r Route, lg *sampler.Logits, ps []sampler.Params) (*bitmaskState, error) {
	if _, ok := bitmaskBase[r]; !ok {
		return nil, nil
	}
	words := GrammarMask(lg.Rows, lg.Vocab, maskSeed)
	w := (lg.Vocab + 31) / 32
	if r == GumbelBitmaskHost {
		for i := range ps {
			ps[i].Bitmask = words[i*w : (i+1)*w : (i+1)*w]
		}
		return &bitmaskState{}, nil
	}
	bs := &bitmaskState{}
	var err error
	if bs.masks, err = uploadBytes(dev, runtime.BytesOf(words)); err != nil {
		return nil, err
	}
	if r != GumbelBitmaskUnfused {
		lg.Bitmask = &sampler.Bitmask{Data: bs.masks, Rows: lg.Rows, Words: w}
		return bs, nil
	}
	if err := bs.setupUnfused(dev, s, lg); err != nil {
		bs.close()
		return nil, err
	}
	return bs, nil
}

// setupUnfused copies the logits to a buffer of the route's own and loads the mask pass.
func (bs *bitmaskState) setupUnfused(dev runtime.Device, s *sampler.Sampler, lg *sampler.Logits) error {
	n := lg.Rows * lg.Vocab * lg.DType.Size()
	host := make([]byte, n)
	st := dev.DefaultStream()
	if err := st.CopyToHost(host, lg.Data, lg.Offset); err != nil {
		return err
	}
	if err := st.Synchronize(); err != nil {
		return err
	}
	var err error
	if bs.logits, err = uploadBytes(dev, host); err != nil {
		return err
	}
	if bs.mod, err = dev.Load(bitmaskProgram); err != nil {
		return err
	}
	if bs.kernel, err = bs.mod.Kernel(bitmaskKernel(lg.DType)); err != nil {
		return err
	}
	lg.Data, lg.Offset = bs.logits, 0
	bs.st = s.Stream()
	bs.grid = bitmaskGrid(lg.Rows, lg.Vocab)
	bs.args.Buffer(bs.logits).Buffer(bs.masks).U32(uint32(lg.Vocab)).U32(uint32((lg.Vocab + 31) / 32))
	return bs.args.Err()
}

// maskPass queues the unfused route's mask kernel on the sampler's stream.
func (bs *bitmaskState) maskPass() error {
	return bs.st.Launch(bs.kernel, bs.grid, runtime.Dim3{X: bitmaskBlock, Y: 1, Z: 1}, &bs.args)
}

// unfused returns the unfused route's step and relaunch: the mask pass, then the
// unmasked step's own.
func (bs *bitmaskState) unfused(step, relaunch func() error) (func() error, func() error) {
	return func() error {
			if err := bs.maskPass(); err != nil {
				return err
			}
			return step()
		}, func() error {
			if err := bs.maskPass(); err != nil {
				return err
			}
			return relaunch()
		}
}

func (bs *bitmaskState) close() {
	if bs == nil {
		return
	}
	if bs.mod != nil {
		bs.mod.Close()
	}
	for _, b := range []runtime.Buffer{bs.masks, bs.logits} {
		if b != nil {
			b.Free()
		}
	}
}

// uploadBytes copies src to a new device buffer.
func uploadBytes(dev runtime.Device, src []byte) (runtime.Buffer, error) {
	buf, err := dev.Alloc(len(src))
	if err != nil {
		return nil, err
	}
	st := dev.DefaultStream()
	if err := st.CopyToDevice(buf, 0, src); err != nil {
		buf.Free()
		return nil, err
	}
	if err := st.Synchronize(); err != nil {
		buf.Free()
		return nil, err
	}
	return buf, nil
}

// The mask pass's launch shape: blocks of bitmaskBlock threads, each thread
// bitmaskPerThread tokens a block's width apart, so that a warp covers 32 consecutive
// tokens (one mask word) at a time.
const (
	bitmaskBlock     = 256
	bitmaskPerThread = 4
)

// bitmaskGrid is the mask pass's grid over rows of vocab tokens.
func bitmaskGrid(rows, vocab int) runtime.Dim3 {
	per := bitmaskBlock * bitmaskPerThread
	return runtime.Dim3{X: (vocab + per - 1) / per, Y: rows, Z: 1}
}

// bitmaskKernel names the mask pass's kernel for a logits type.
func bitmaskKernel(dt sampler.DType) string {
	switch dt {
	case sampler.BFloat16:
		return "apply_bitmask_bf16"
	case sampler.Float16:
		return "apply_bitmask_f16"
	}
	return "apply_bitmask_f32"
}

// bitmaskProgram is the unfused route's mask pass: a CUDA edition and a Go edition (run
// by the CPU device), like bench/decode's kernels.
var bitmaskProgram = &runtime.Program{
	Name: "gumbel/bench/bitmask",
	CUDA: bitmaskCUDA,
	Go: map[string]runtime.GoKernel{
		"apply_bitmask_f32":  func(c *runtime.BlockContext) { goApplyBitmask(c, 4, 0xff800000) },
		"apply_bitmask_bf16": func(c *runtime.BlockContext) { goApplyBitmask(c, 2, 0xff80) },
		"apply_bitmask_f16":  func(c *runtime.BlockContext) { goApplyBitmask(c, 2, 0xfc00) },
	},
}

const bitmaskCUDA = `// gumbel bench: the unfused token-bitmask pass, CUDA edition (compiled by NVRTC: no headers).
//
// ABI (runtime.Args order), for apply_bitmask_f32, apply_bitmask_bf16, apply_bitmask_f16:
//
//   grid (ceil(V/(4*T)), B, 1)  block (T,1,1), T a multiple of 32
//     0 buffer logits  [B*V] of the kernel's type (float32, bfloat16, float16), rewritten in place
//     1 buffer mask    u32[B*W]  bit j%32 of word j/32 of row b allows token j of logits row b
//     2 u32    V
//     3 u32    W       words per mask row, at least ceil(V/32)
//
// Every banned token's logit becomes -Inf and the others are not touched, as xgrammar's
// apply_token_bitmask_inplace does. Each thread takes 4 tokens T apart, so a warp covers
// 32 consecutive tokens at a time: one mask word, read by all its lanes, and one
// coalesced store of the banned ones.

typedef unsigned int bm_u32;
typedef unsigned short bm_u16;
typedef unsigned long long bm_u64;

template <typename T>
__device__ __forceinline__ void bm_apply(T* __restrict__ logits, const bm_u32* __restrict__ mask, bm_u32 V, bm_u32 W,
                                         T ninf) {
    T* row = logits + (bm_u64)blockIdx.y * V;
    const bm_u32* m = mask + (bm_u64)blockIdx.y * W;
    const bm_u32 first = blockIdx.x * blockDim.x * 4u + threadIdx.x;
#pragma unroll
    for (bm_u32 k = 0; k < 4u; k++) {
        const bm_u32 j = first + k * blockDim.x;
        if (j < V && ((__ldg(m + (j >> 5)) >> (j & 31u)) & 1u) == 0u) row[j] = ninf;
    }
}

extern "C" __global__ void apply_bitmask_f32(float* __restrict__ logits, const bm_u32* __restrict__ mask, bm_u32 V,
                                             bm_u32 W) {
    bm_apply<float>(logits, mask, V, W, __uint_as_float(0xff800000u));
}

extern "C" __global__ void apply_bitmask_bf16(bm_u16* __restrict__ logits, const bm_u32* __restrict__ mask, bm_u32 V,
                                              bm_u32 W) {
    bm_apply<bm_u16>(logits, mask, V, W, (bm_u16)0xff80u);
}

extern "C" __global__ void apply_bitmask_f16(bm_u16* __restrict__ logits, const bm_u32* __restrict__ mask, bm_u32 V,
                                             bm_u32 W) {
    bm_apply<bm_u16>(logits, mask, V, W, (bm_u16)0xfc00u);
}
`

// goApplyBitmask is the Go edition of apply_bitmask_*: block (x, b) writes ninf, the
// -Inf bits of elements of size bytes, into the banned tokens among the BlockDim.X *
// bitmaskPerThread of logits row b that it covers. A launch whose buffers are too small
// for its sizes writes nothing.
func goApplyBitmask(c *runtime.BlockContext, size int, ninf uint32) {
	a := c.Args
	logits, mask := a.HostBytesArg(0), a.HostBytesArg(1)
	v, w, b := int(a.U32Arg(2)), int(a.U32Arg(3)), c.Block.Y
	if w < (v+31)/32 || len(logits) < size*v*(b+1) || len(mask) < 4*w*(b+1) {
		return
	}
	row, m := logits[size*v*b:size*v*(b+1)], mask[4*w*b:4*w*(b+1)]
	per := c.BlockDim.X * bitmaskPerThread
	le := binary.LittleEndian
	for j := c.Block.X * per; j < min(v, (c.Block.X+1)*per); j++ {
		if le.Uint32(m[4*(j>>5):])>>(j&31)&1 != 0 {
			continue
		}
		if size == 4 {
			le.PutUint32(row[4*j:], ninf)
		} else {
			le.PutUint16(row[2*j:], uint16(ninf))
		}
	}
}

// BitmaskMarkdown renders the masked routes among ms: per measure, the time of each
// masked route in brackets against the unmasked route it adds the mask to (greedy+bitmask
// against greedy, gumbel+bitmask and its host and unfused forms against gumbel-split,
// ...), and the unfused form over the fused one (above 1: the fused mask is faster).
// It returns "" when ms has no masked route.
func BitmaskMarkdown(ms []Measurement) string {
	cells, order, routes := byCell(ms)
	var masked []Route
	for _, r := range BitmaskRoutes {
		if _, ok := bitmaskBase[r]; ok && slices.Contains(routes, r) {
			masked = append(masked, r)
		}
	}
	if masked == nil {
		return ""
	}
	unfusedRatio := slices.Contains(masked, GumbelBitmask) && slices.Contains(masked, GumbelBitmaskUnfused)
	var sb strings.Builder
	table := func(title string, of func(Measurement) float64) {
		fmt.Fprintf(&sb, "\n%s\n\n| dtype | vocab | batch |", title)
		for _, r := range masked {
			fmt.Fprintf(&sb, " %s |", r)
		}
		if unfusedRatio {
			fmt.Fprintf(&sb, " %s / %s |", GumbelBitmaskUnfused, GumbelBitmask)
		}
		sb.WriteString("\n|---|---:|---:|" + strings.Repeat("---:|", len(masked)))
		if unfusedRatio {
			sb.WriteString("---:|")
		}
		sb.WriteString("\n")
		for _, k := range order {
			c := cells[k]
			fmt.Fprintf(&sb, "| %s | %d | %d |", k.dtype, k.vocab, k.batch)
			for _, r := range masked {
				m, ok := c[r]
				base, hasBase := c[bitmaskBase[r]]
				switch {
				case !ok || of(m) <= 0:
					sb.WriteString(" – |")
				case !hasBase || of(base) <= 0:
					fmt.Fprintf(&sb, " %.2f |", of(m))
				default:
					fmt.Fprintf(&sb, " %.2f (%+.1f%%) |", of(m), 100*(of(m)/of(base)-1))
				}
			}
			if unfusedRatio {
				fmt.Fprintf(&sb, " %s |", speedRatio(c, GumbelBitmaskUnfused, GumbelBitmask, of))
			}
			sb.WriteString("\n")
		}
	}
	table("Device time per step with a token bitmask (µs, median; in brackets the cost against the unmasked route)",
		func(m Measurement) float64 { return m.DeviceUs })
	if hasGraph(ms) {
		table("The same, replayed from a CUDA graph (µs, median)", func(m Measurement) float64 { return m.GraphUs })
	}
	table("Host-observed latency of one call with a token bitmask, tokens on the host (µs, median)",
		func(m Measurement) float64 { return m.HostUs })
	return sb.String()
}
