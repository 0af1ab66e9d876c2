//go:build gpu

package emu

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/kernelsrc"
	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/gumbel-go/gumbel/runtime"
	_ "github.com/gumbel-go/gumbel/runtime/cuda" // registers the CUDA backend
)

// The CUDA edition on a real GPU, against the Go edition: the emulation's workload
// (blocks rounded up to the device's warp size) plus full-size launches. Build and run on
// the GPU host, from the repository root:
//
//	CGO_ENABLED=0 go test -tags gpu -c -o .gpu/kernelsrc_emu.test ./kernelsrc/emu
//	(cd kernelsrc/emu && ../../.gpu/kernelsrc_emu.test -test.run GPU -test.v)

// gpuShape uses the real warp size (32) and mostly full-width blocks.
func gpuShape(r *rand.Rand, _ int) (block, warp int) {
	return []int{1024, 1024, 256, 96, 32}[r.IntN(5)], 32
}

// gpuLaunches adds vocabularies of real models, split into as many blocks as a launch
// policy might choose, and a categorical launch with more chunks than the draw has tiles.
func gpuLaunches(r *rand.Rand) []*launch {
	var ls []*launch
	for dt := range 3 {
		for _, s := range []int{1, 4, 37, 132} {
			v := []int{32000, 151936}[r.IntN(2)]
			l := &launch{kernel: kernelGumbel, dtype: dt, gridX: s, block: 1024, vocab: v,
				stride: stride(r, v), slack: r.IntN(16), slots: 9}
			l.name = fmt.Sprintf("gpu gumbel dtype=%d S=%d V=%d stride=%d", dt, s, v, l.stride)
			l.rows(r, nil)
			l.fill(r)
			ls = append(ls, l)
		}
		for _, block := range []int{1024, 128} {
			l := &launch{kernel: kernelCategorical, dtype: dt, gridX: 1, block: block, vocab: 151936,
				stride: 151936 + 3*dt, slack: r.IntN(16), slots: 9}
			l.name = fmt.Sprintf("gpu categorical dtype=%d V=151936 T=%d", dt, block)
			l.rows(r, func(p *rowParams) {
				p.TopK = []uint32{0, 0, 1, 50, 1000}[r.IntN(5)]
				p.TopP = []float32{0, 0, 0.5, 0.9, 0.95}[r.IntN(5)]
				p.MinP = []float32{0, 0, 0, 0.05}[r.IntN(4)]
			})
			l.fill(r)
			ls = append(ls, l)
		}
	}
	return ls
}

// runDevice runs the launch on dev, twice: the second run starts from the counters the
// first left behind (zero, by the ABI) and from fresh copies of params and counts (which
// ADVANCE and RECORD change), and must give the same answer.
func runDevice(t *testing.T, dev runtime.Device, mod runtime.Module, l *launch) outcome {
	t.Helper()
	k, err := mod.Kernel(kernelNames[l.kernel] + abi.Suffixes[l.dtype])
	require.NoError(t, err)
	warp := max(dev.Info().WarpSize, 1)
	block := min((l.block+warp-1)/warp*warp, k.MaxThreadsPerBlock())
	n := len(l.params)
	rows := l.launchRows() // grid.y
	s := dev.DefaultStream()

	var bufs []runtime.Buffer
	defer func() {
		for _, b := range bufs {
			assert.NoError(t, b.Free())
		}
	}()
	alloc := func(bytes int) runtime.Buffer {
		b, err := dev.Alloc(max(bytes, 8))
		require.NoError(t, err)
		bufs = append(bufs, b)
		return b
	}
	upload := func(data []byte) runtime.Buffer {
		b := alloc(len(data))
		require.NoError(t, s.CopyToDevice(b, 0, data))
		return b
	}
	// The logits start slack bytes (rounded to the element size) into their buffer, so
	// that rows meet every alignment of the vector loads.
	off := l.slack &^ (l.elemSize() - 1)
	logits := alloc(len(l.logits) + 16)
	require.NoError(t, s.CopyToDevice(logits, off, l.logits))
	params := alloc((n + abi.ChainSlack) * paramsBytes) // residual may read the slack (ABI.md)
	fresh := l.newOutcome()
	tokens, status := alloc(4*len(fresh.tokens)), alloc(4*len(fresh.status))
	logprobs := alloc(4 * len(fresh.logprobs))
	keys := alloc(8 * len(fresh.keys))
	partials := alloc(8 * l.numPartials())
	counters := alloc(4 * l.numCounters())
	require.NoError(t, s.Zero(counters, 0, 4*l.numCounters()))
	bias, mask, bitmask := upload(auxBuffer(l.bias)), upload(auxBuffer(l.mask)), upload(auxBuffer(l.bitmask))
	counts := alloc(len(auxBuffer(l.counts)))
	draft := upload(auxBuffer(l.draft))

	var fm runtime.Kernel // the filtered route's first pass
	if l.kernel == kernelFiltered {
		fm, err = mod.Kernel(abi.FilterMax + abi.Suffixes[l.dtype])
		require.NoError(t, err)
	}

	var ek runtime.Kernel // what finishes gumbel_argmax's draws left with status 5
	if l.kernel == kernelGumbel {
		ek, err = mod.Kernel(abi.KernelName(abi.GumbelExact, abi.DType(l.dtype)))
		require.NoError(t, err)
	}

	var a runtime.Args
	var runs [2]outcome
	for i := range runs {
		o := l.newOutcome()
		require.NoError(t, s.CopyToDevice(tokens, 0, runtime.BytesOf(o.tokens)))
		require.NoError(t, s.CopyToDevice(status, 0, runtime.BytesOf(o.status)))
		if o.logprobs != nil {
			require.NoError(t, s.CopyToDevice(logprobs, 0, runtime.BytesOf(o.logprobs)))
		}
		if o.keys != nil {
			require.NoError(t, s.CopyToDevice(keys, 0, runtime.BytesOf(o.keys)))
		}
		require.NoError(t, s.CopyToDevice(params, 0, l.paramBytes()))
		require.NoError(t, s.CopyToDevice(counts, 0, auxBuffer(l.counts)))
		a.Reset().BufferAt(logits, off).Buffer(params).Buffer(tokens).Buffer(status).
			Buffer(partials).Buffer(counters).U64(uint64(l.stride)).U32(uint32(l.vocab)).
			Buffer(logprobs).Buffer(bias).Buffer(counts).Buffer(mask).Buffer(bitmask).
			U32(uint32(l.vocabOffset)).Buffer(keys).Buffer(draft)
		grid := runtime.Dim3{X: l.gridX, Y: rows, Z: l.draws()}
		if fm != nil {
			require.NoError(t, s.Launch(fm, runtime.Dim3{X: l.gridX, Y: rows, Z: 1}, runtime.Dim3{X: block, Y: 1, Z: 1}, &a),
				"%s: filter_max", l.name)
		}
		require.NoError(t, s.Launch(k, grid, runtime.Dim3{X: block, Y: 1, Z: 1}, &a), "%s", l.name)
		if ek != nil {
			// Always: its blocks of slots without status 5 must leave them alone.
			grid.X = 1
			require.NoError(t, s.Launch(ek, grid, runtime.Dim3{X: block, Y: 1, Z: 1}, &a), "%s: gumbel_exact", l.name)
		}
		require.NoError(t, s.CopyToHost(runtime.BytesOf(o.tokens), tokens, 0))
		require.NoError(t, s.CopyToHost(runtime.BytesOf(o.status), status, 0))
		if o.logprobs != nil {
			require.NoError(t, s.CopyToHost(runtime.BytesOf(o.logprobs), logprobs, 0))
		}
		if o.keys != nil {
			require.NoError(t, s.CopyToHost(runtime.BytesOf(o.keys), keys, 0))
		}
		require.NoError(t, s.CopyToHost(runtime.BytesOf(o.counters), counters, 0))
		if l.kernel != kernelTopN {
			if len(l.counts) > 0 {
				o.counts = make([]uint32, len(l.counts))
				require.NoError(t, s.CopyToHost(runtime.BytesOf(o.counts), counts, 0))
			}
			o.params = make([]byte, n*paramsBytes)
			require.NoError(t, s.CopyToHost(o.params, params, 0))
		}
		require.NoError(t, s.Synchronize(), "%s", l.name)
		runs[i] = o
	}
	// Records are compared bit for bit (each launch merges in the same order), with
	// every NaN made one value: NaN != NaN would fail an equal pair.
	require.Equal(t, canonicalNaNs(runs[0]), canonicalNaNs(runs[1]), "%s: a second launch gave another answer", l.name)
	return runs[0]
}

// canonicalNaNs returns o with every NaN of its records replaced by -12345.5, a value no
// record holds, so that two outcomes compare with ==.
func canonicalNaNs(o outcome) outcome {
	lp := slices.Clone(o.logprobs)
	for i, v := range lp {
		if v != v {
			lp[i] = -12345.5
		}
	}
	o.logprobs = lp
	return o
}

// openCUDA opens the first CUDA device and loads the sampling program on it; both are
// closed when the test or benchmark ends.
func openCUDA(tb testing.TB) (runtime.Device, runtime.Module) {
	tb.Helper()
	opened, err := runtime.Open(runtime.OpenOptions{Backend: string(runtime.CUDA)})
	require.NoError(tb, err)
	dev := opened.Device
	tb.Cleanup(func() { dev.Close() })
	mod, err := dev.Load(kernelsrc.Sampling())
	require.NoError(tb, err)
	tb.Cleanup(func() { mod.Close() })
	return dev, mod
}

func TestGPUCUDAEditionMatchesGoEdition(t *testing.T) {
	dev, mod := openCUDA(t)
	t.Logf("device: %+v", dev.Info())

	r := rand.New(rand.NewPCG(20240601, 8))
	ls := append(testLaunches(r, gpuShape), gpuLaunches(r)...)
	got := make([]outcome, len(ls))
	for i, l := range ls {
		got[i] = runDevice(t, dev, mod, l)
	}
	compareWithGo(t, "CUDA edition on "+dev.Info().Name, ls, got)
}

// TestGPUCUDAFeaturesMatchGoEdition runs the features workload (processors, the bitmask
// among them, draws, RECORD, ADVANCE, routing, log-probability records, topn) on the
// GPU, plus full-size log-probability and topn launches.
func TestGPUCUDAFeaturesMatchGoEdition(t *testing.T) {
	dev, mod := openCUDA(t)

	r := rand.New(rand.NewPCG(20261130, 4))
	ls := featureLaunches(r)
	for _, l := range ls {
		l.block, l.warp = gpuShape(r, l.gridX)
	}
	for dt := range 3 {
		for _, kernel := range []int{kernelGumbel, kernelTopN} {
			for _, s := range []int{1, 37} {
				l := &launch{kernel: kernel, dtype: dt, gridX: s, gridZ: 1 + 2*(s%2), block: 1024, vocab: 151936,
					stride: 151936, slots: 9}
				if kernel == kernelTopN {
					l.gridZ = 1
				}
				l.name = fmt.Sprintf("gpu features %s dtype=%d S=%d V=151936", kernelNames[kernel], dt, s)
				l.fill(r)
				l.withProcessors(r)
				l.logprobs = kernel != kernelTopN
				l.rows(r, func(p *rowParams) {
					l.featureFlags(r, p)
					p.TopN = 20
					if r.IntN(2) == 0 {
						p.Flags |= abi.FlagPerturbed
					}
					if kernel == kernelTopN {
						p.Flags &^= abi.FlagLogprobs | abi.FlagRecord | abi.FlagAdvance
					}
				})
				ls = append(ls, l)
			}
		}
	}
	got := make([]outcome, len(ls))
	for i, l := range ls {
		got[i] = runDevice(t, dev, mod, l)
	}
	seen, kinds := matchGo(t, ls, got)
	cov := featureCoverage(ls, got)
	t.Logf("slots by status %v; sampled by path %v; coverage %v", seen, kinds, cov)
	require.Positive(t, seen[0])
	requireBitmaskCoverage(t, cov, true, abi.GumbelArgmax, abi.Categorical, "topn")
}

// TestGPUMaskedTripsMatchGoEdition runs the masks-only workload (masked_trips_test.go)
// on the GPU at full size: V = 151936, blocks of 1024 and 256, 1, 2, 4 and 16 blocks a
// row.
func TestGPUMaskedTripsMatchGoEdition(t *testing.T) {
	dev, mod := openCUDA(t)
	shapes := []tripShape{{1024, 32, 1}, {1024, 32, 16}, {256, 32, 4}, {1024, 32, 2}}
	ls := maskedTripLaunches(rand.New(rand.NewPCG(20261204, 2)), 151936, 151936, shapes)
	got := make([]outcome, len(ls))
	for i, l := range ls {
		got[i] = runDevice(t, dev, mod, l)
	}
	requireMaskedTripStatuses(t, ls, got)
}

// TestGPULargeMagnitudeLogProbs runs TestCUDALargeMagnitudeLogProbs's rows on the GPU,
// where the log-sum-exps use the hardware's approximate 2^x, in small launches and in
// full-size ones (V = 151936, blocks of 1024, one block per row and 16), and compares
// every record word with the Go edition's, each log-probability on its own.
func TestGPULargeMagnitudeLogProbs(t *testing.T) {
	dev, mod := openCUDA(t)
	r := rand.New(rand.NewPCG(20261130, 14))
	ls := largeMagnitudeLaunches(r, []int{1, 3}, 1001, 1003, 96, 32)
	ls = append(ls, largeMagnitudeLaunches(r, []int{1, 16}, 151936, 151936, 1024, 32)...)
	got := make([]outcome, len(ls))
	for i, l := range ls {
		got[i] = runDevice(t, dev, mod, l)
	}
	seen, _ := matchGoStrict(t, ls, got)
	require.Positive(t, seen[0], "no slot sampled a token")
}

// TestGPUFilteredMatchesGoEdition runs the filtered route's workload (filtered_test.go)
// on the GPU, and full-size launches: V = 151936 and 32000, blocks of 1024, S from 1 to
// 132, LLM-shaped rows with the serving filters and flat rows.
func TestGPUFilteredMatchesGoEdition(t *testing.T) {
	dev, mod := openCUDA(t)
	r := rand.New(rand.NewPCG(20261130, 61))
	ls := filteredLaunches(r)
	for dt := range 3 {
		for _, s := range []int{1, 4, 37, 132} {
			v := []int{32000, 151936}[r.IntN(2)]
			d := 1 + 2*(s%2)
			ls = append(ls, newFiltered(r, dt, v, filteredShape{s, 1024, 32}, d, 9,
				[]func(*rand.Rand, int) []float32{strongRow, strongRow, strongRow, steppedRow, tiedRow, equalRow, faintRow, maskedRow},
				filterConfigs, dt == dtBF16))
		}
	}
	got := make([]outcome, len(ls))
	for i, l := range ls {
		got[i] = runDevice(t, dev, mod, l)
	}
	seen, kinds := matchGo(t, ls, got)
	t.Logf("slots by status %v; sampled by kind %v", seen, kinds)
	for s, n := range seen {
		require.Positive(t, n, "no slot ended with status %d", s)
	}
}

// TestGPUScoreMatchesGoEdition runs the score workload (score_test.go) on the GPU, blocks
// rounded up to the device's warp size, plus full-size launches: V = 32000 and 151936,
// blocks of 1024 and 256, S from 1 to 132, every dtype, with and without processors. The
// ranks and statuses are the Go edition's bit for bit, the records within the record
// tolerance (the GPU's 2^x is approximate).
func TestGPUScoreMatchesGoEdition(t *testing.T) {
	dev, mod := openCUDA(t)
	r := rand.New(rand.NewPCG(20261201, 3))
	ls := scoreLaunches(r)
	for dt := range 3 {
		for i, s := range []int{1, 16, 37, 132} {
			v := []int{32000, 151936}[r.IntN(2)]
			ls = append(ls, newScore(r, dt, s, v, []int{1024, 256}[i%2], 32, 9, r.IntN(3) != 0))
		}
	}
	got := make([]outcome, len(ls))
	for i, l := range ls {
		got[i] = runDevice(t, dev, mod, l)
	}
	cov := checkScore(t, ls, got)
	t.Logf("%d launches on %s; coverage %v", len(ls), dev.Info().Name, cov)
	requireScoreCoverage(t, cov)
}

// TestGPUResidualMatchesGoEdition runs the residual workload (residual_test.go) on the
// GPU, blocks rounded up to the device's warp size, plus full-size launches: V = 32000
// and 151936, blocks of 1024, S of 1, 16 and 37, every dtype, with and without
// processors. Tokens and statuses are the Go edition's bit for bit; q = p is drawn 1%
// off p (newResidual), so that the device's expf cannot redraw a residual of rounding
// noise.
func TestGPUResidualMatchesGoEdition(t *testing.T) {
	dev, mod := openCUDA(t)
	r := rand.New(rand.NewPCG(20261215, 2))
	ls, metas := residualLaunches(t, r, gpuShape, false)
	for dt := range 3 {
		for _, s := range []int{1, 16, 37} {
			v := []int{32000, 151936}[r.IntN(2)]
			l, m := newResidual(t, r, ordinaryResidualRows, dt, s, v, 1024, 32, []int{5, 4, 3, 2, 1}, r.IntN(2) == 0, false)
			ls, metas = append(ls, l), append(metas, m)
		}
	}
	got := make([]outcome, len(ls))
	for i, l := range ls {
		got[i] = runDevice(t, dev, mod, l)
	}
	cov := checkResidual(t, ls, metas, got)
	t.Logf("%d launches on %s; coverage %v", len(ls), dev.Info().Name, cov)
	requireResidualCoverage(t, cov)
}

// TestGPUShardsMatchGoEdition is TestCUDAShardsMatchGoEdition on the GPU, with
// full-width blocks and a vocabulary split over up to 132 blocks per row.
func TestGPUShardsMatchGoEdition(t *testing.T) {
	dev, mod := openCUDA(t)
	r := rand.New(rand.NewPCG(20261201, 25))
	ls := shardLaunches(r)
	for dt := range 3 {
		for _, s := range []int{1, 37, 132} {
			v := 75968 // half of Qwen's 151936: the shard of a two-GPU split
			l := &launch{kernel: kernelGumbel, dtype: dt, gridX: s, gridZ: 2, block: 1024, warp: 32, vocab: v, stride: v,
				slots: 5, vocabOffset: v, shard: true, name: fmt.Sprintf("GPU shard dtype=%d S=%d", dt, s)}
			l.fill(r)
			l.rows(r, func(p *rowParams) { p.Flags |= abi.FlagShard })
			ls = append(ls, l)
		}
	}
	got := make([]outcome, len(ls))
	for i, l := range ls {
		got[i] = runDevice(t, dev, mod, l)
	}
	wants := goEdition(t, ls)
	cov := checkShardKeys(t, ls, wants)
	matchOutcomes(t, ls, wants, got)
	t.Logf("%d launches on %s; shard slots %v", len(ls), dev.Info().Name, cov)
}

// TestGPUExactScoresMatchGoEdition is TestCUDAExactScoresMatchGoEdition,
// TestCUDAFilteredExactMatchesGoEdition and TestCUDAExactResidualMatchesGoEdition on the
// GPU, with full-width blocks and Qwen's vocabulary split over up to 132 blocks per row.
func TestGPUExactScoresMatchGoEdition(t *testing.T) {
	dev, mod := openCUDA(t)
	r := rand.New(rand.NewPCG(20261201, 22))
	ls := exactLaunches(r)
	ls = append(ls, filteredExactLaunches(r, func(s int) filteredShape {
		block, warp := gpuShape(r, s)
		return filteredShape{s, block, warp}
	})...)
	for dt := range 3 {
		for _, s := range []int{1, 37, 132} {
			ls = append(ls, newExactFiltered(r, dt, 151936, filteredShape{s, 1024, 32}, 2, 5))
		}
	}
	for dt := range 3 {
		for _, s := range []int{1, 37, 132} {
			const v = 151936
			for _, kernel := range []int{kernelGumbel, kernelTopN} {
				l := &launch{kernel: kernel, dtype: dt, gridX: s, gridZ: 2, block: 1024, warp: 32, vocab: v, stride: v,
					slots: 5, logprobs: kernel == kernelGumbel, name: fmt.Sprintf("GPU exact %s dtype=%d S=%d", kernelNames[kernel], dt, s)}
				if kernel == kernelTopN {
					l.gridZ = 1
				}
				l.fill(r)
				for row := range l.slots {
					vals := exactRows[r.IntN(len(exactRows))](r, v)
					for i, x := range vals {
						l.store(row*l.stride+i, x)
					}
				}
				l.rows(r, func(p *rowParams) {
					p.Temperature = exactTemperatures[r.IntN(len(exactTemperatures))]
					if kernel == kernelTopN {
						p.Flags |= abi.FlagPerturbed
						p.TopN = []uint32{1, 5, 20}[r.IntN(3)]
					} else if r.IntN(2) == 0 {
						p.Flags |= abi.FlagLogprobs
					}
				})
				ls = append(ls, l)
			}
		}
	}
	got := make([]outcome, len(ls))
	for i, l := range ls {
		got[i] = runDevice(t, dev, mod, l)
	}
	seen, kinds := matchGo(t, ls, got)
	t.Logf("%d launches on %s; slots by status %v; entries %v; %d launch rows need the exact comparison", len(ls),
		dev.Info().Name, seen, kinds, exactCoverage(ls))

	var rls []*launch
	var metas [][]residualMeta
	for dt := range 3 {
		for _, s := range []int{1, 2, 5, 37} {
			v := []int{130, 1001, 151936}[r.IntN(3)]
			l, m := newResidual(t, r, exactResidualRows, dt, s, v, 1024, 32, []int{1, 2, 3, 1, 2, 1}, r.IntN(2) == 0, false)
			rls, metas = append(rls, l), append(metas, m)
		}
	}
	got = make([]outcome, len(rls))
	for i, l := range rls {
		got[i] = runDevice(t, dev, mod, l)
	}
	cov := checkResidual(t, rls, metas, got)
	t.Logf("%d residual launches; coverage %v", len(rls), cov)
	require.Positive(t, cov["stop: drawn from p by the exact comparison"], "no draw from p needed the exact comparison")
}
