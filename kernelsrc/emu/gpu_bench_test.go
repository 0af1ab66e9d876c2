//go:build gpu

package emu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/gumbel-go/gumbel/runtime"
	_ "github.com/gumbel-go/gumbel/runtime/cuda" // registers the CUDA backend
)

// BenchmarkGPUKernelFeatures times one launch of the CUDA edition per serving feature
// at the size (V = 151936, batch 8, bf16 logits), by CUDA events around 200
// back-to-back launches, so that it is device time, free of launch overhead; S = 16 is
// what the sampler's split policy gives batch 8 on 132 SMs, S = 17 the split the first
// measurements used (136 blocks: a short second wave). Compare
// each line's device-µs/launch with "gumbel" (log-probabilities must cost < 10%):
//
//	CGO_ENABLED=0 go test -tags gpu -c -o .gpu/kernelsrc_emu.test ./kernelsrc/emu
//	(cd kernelsrc/emu && ../../.gpu/kernelsrc_emu.test -test.run '^$' -test.bench GPUKernelFeatures)
func BenchmarkGPUKernelFeatures(b *testing.B) {
	dev, mod := openCUDA(b)

	const vocab, batch, launches = 151936, 8, 200
	r := rand.New(rand.NewPCG(7, 7))
	base := &launch{kernel: kernelGumbel, dtype: dtBF16, vocab: vocab, stride: vocab, slots: batch + 1}
	base.fill(r)
	base.withProcessors(r)
	for i := range base.mask {
		base.mask[i] = ^uint32(0) // every token allowed: the work of a mask, not its effect
	}
	for i := range base.bitmask {
		base.bitmask[i] = ^uint32(0) // likewise
	}
	procs := abi.FlagBias | abi.FlagMask | abi.FlagPenalties
	// topn ranks LLM-shaped rows: base's rows of ±3e38 would send a perturbed list to its
	// exact path (ABI.md, "topn"), the rare rows' cost, not the feature's.
	llm := *base
	llm.fillWith(r, []func(*rand.Rand, int) []float32{llmRow})
	cases := []struct {
		name   string
		kernel int
		flags  abi.Flags
		temp   float32
		draws  int
		shards int // with FlagShard: the row's first 1/shards of the vocabulary, as one rank of a split
	}{
		{"gumbel", kernelGumbel, 0, 0.8, 1, 1},
		{"gumbel+logprobs", kernelGumbel, abi.FlagLogprobs, 0.8, 1, 1},
		{"gumbel T=1", kernelGumbel, 0, 1, 1, 1},
		{"gumbel+logprobs T=1", kernelGumbel, abi.FlagLogprobs, 1, 1, 1},
		{"greedy", kernelGumbel, 0, 0, 1, 1},
		{"greedy+logprobs", kernelGumbel, abi.FlagLogprobs, 0, 1, 1},
		{"gumbel+processors", kernelGumbel, procs, 0.8, 1, 1},
		{"gumbel+processors+logprobs", kernelGumbel, procs | abi.FlagLogprobs, 0.8, 1, 1},
		{"gumbel+bitmask", kernelGumbel, abi.FlagBitmask, 0.8, 1, 1},
		{"gumbel draws=4", kernelGumbel, 0, 0.8, 4, 1},
		{"gumbel shard half", kernelGumbel, abi.FlagShard, 0.8, 1, 2},
		{"greedy shard half", kernelGumbel, abi.FlagShard, 0, 1, 2},
		{"gumbel shard quarter", kernelGumbel, abi.FlagShard, 0.8, 1, 4},
		{"topn 20", kernelTopN, 0, 0.8, 1, 1},
		{"topn 20 perturbed", kernelTopN, abi.FlagPerturbed, 0.8, 1, 1},
	}
	for _, s := range []int{1, 16, 17} {
		for _, c := range cases {
			b.Run(fmt.Sprintf("S=%d/%s", s, c.name), func(b *testing.B) {
				l := *base
				if c.kernel == kernelTopN {
					l = llm
				}
				l.kernel, l.gridX, l.gridZ, l.block = c.kernel, s, c.draws, 1024
				l.logprobs = c.flags&abi.FlagLogprobs != 0
				if c.shards > 1 {
					l.vocab = (vocab / c.shards) &^ 3 // rows keep their stride: a view of the first shard
					l.shard = true
				}
				l.params = make([]rowParams, batch)
				for y := range l.params {
					l.params[y] = rowParams{Row: uint32(y), Temperature: c.temp, Seed: uint64(y), Step: 9,
						Flags: c.flags, RepetitionPenalty: 1.1, FrequencyPenalty: 0.2, PresencePenalty: 0.1, TopN: 20,
						BitmaskRow: uint32(y % l.bitmaskRows())}
				}
				us := timeLaunches(b, dev, mod, &l, launches)
				b.ReportMetric(us, "device-µs/launch")
			})
		}
	}
}

// deviceArgs uploads launch l (logits, parameters, processor buffers) to dev and returns
// its kernel arguments over fresh output and scratch buffers, the partials buffer (with
// room for extraPartialWords more words) and a function that frees them all.
func deviceArgs(b *testing.B, dev runtime.Device, l *launch, extraPartialWords int) (*runtime.Args, runtime.Buffer, func()) {
	s := dev.DefaultStream()
	var bufs []runtime.Buffer
	free := func() {
		for _, buf := range bufs {
			require.NoError(b, buf.Free())
		}
	}
	upload := func(data []byte, size int) runtime.Buffer {
		buf, err := dev.Alloc(max(size, len(data), 8))
		require.NoError(b, err)
		bufs = append(bufs, buf)
		if len(data) > 0 {
			require.NoError(b, s.CopyToDevice(buf, 0, data))
		}
		return buf
	}
	out := l.newOutcome()
	logits := upload(l.logits, 0)
	params := upload(l.paramBytes(), len(l.paramBytes())+abi.ChainSlack*abi.RowParamsSize) // residual may read the slack
	tokens := upload(nil, 4*len(out.tokens))
	status := upload(nil, 4*len(out.status))
	logprobs := upload(runtime.BytesOf(out.logprobs), 0) // residual's records, if any
	partials := upload(nil, 8*(l.numPartials()+extraPartialWords))
	counters := upload(nil, 4*l.numCounters())
	require.NoError(b, s.Zero(counters, 0, 4*l.numCounters()))
	bias, counts, mask := upload(auxBuffer(l.bias), 0), upload(auxBuffer(l.counts), 0), upload(auxBuffer(l.mask), 0)
	bitmask := upload(auxBuffer(l.bitmask), 0)
	a := new(runtime.Args)
	a.Buffer(logits).Buffer(params).Buffer(tokens).Buffer(status).Buffer(partials).Buffer(counters).
		U64(uint64(l.stride)).U32(uint32(l.vocab)).Buffer(logprobs).Buffer(bias).Buffer(counts).Buffer(mask).
		Buffer(bitmask).U32(uint32(l.vocabOffset)).Buffer(upload(nil, 8*len(out.keys))).
		Buffer(upload(auxBuffer(l.draft), 0))
	require.NoError(b, a.Err())
	return a, partials, free
}

// timeLaunches runs the launch n times back to back, b.N times over, and returns the mean
// device time of one launch in microseconds.
func timeLaunches(b *testing.B, dev runtime.Device, mod runtime.Module, l *launch, n int) float64 {
	k, err := mod.Kernel(kernelNames[l.kernel] + abi.Suffixes[l.dtype])
	require.NoError(b, err)
	s := dev.DefaultStream()
	a, _, free := deviceArgs(b, dev, l, 0)
	defer free()
	grid := runtime.Dim3{X: l.gridX, Y: l.launchRows(), Z: l.draws()}
	block := runtime.Dim3{X: min(l.block, k.MaxThreadsPerBlock()), Y: 1, Z: 1}
	start, err := dev.NewEvent()
	require.NoError(b, err)
	defer start.Close()
	stop, err := dev.NewEvent()
	require.NoError(b, err)
	defer stop.Close()
	require.NoError(b, s.Launch(k, grid, block, a)) // warm-up
	require.NoError(b, s.Synchronize())
	var total float64
	b.ResetTimer()
	for range b.N {
		require.NoError(b, s.Record(start))
		for range n {
			if err := s.Launch(k, grid, block, a); err != nil {
				b.Fatal(err)
			}
		}
		require.NoError(b, s.Record(stop))
		require.NoError(b, stop.Synchronize())
		ms, err := stop.ElapsedSince(start)
		require.NoError(b, err)
		total += float64(ms) * 1000 / float64(n)
	}
	return total / float64(b.N)
}
