package emu

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/half"
	"github.com/gumbel-go/gumbel/internal/testenv"
	"github.com/gumbel-go/gumbel/philox"
)

// encodeJob writes the job file of testdata/emu_driver.cpp.
func encodeJob(t *testing.T, ls []*launch) []byte {
	t.Helper()
	var b bytes.Buffer
	size := 0
	for _, l := range ls {
		size += len(l.logits) // most of the job: one allocation rather than a series of doublings
	}
	b.Grow(size)
	w := func(v any) { require.NoError(t, binary.Write(&b, binary.LittleEndian, v)) }
	w(uint32(jobMagic))
	w(uint32(len(ls)))
	for _, l := range ls {
		w([]uint32{uint32(l.kernel), uint32(l.dtype), uint32(l.gridX), uint32(l.launchRows()), uint32(l.draws()),
			uint32(l.block), uint32(l.warp), uint32(l.vocab), uint32(l.slack), uint32(l.slots), uint32(len(l.params))})
		w(uint64(l.stride))
		list, minCands := l.filterLists()
		w(uint64(l.driverPartials()))
		w([]uint32{uint32(l.numCounters()), uint32(list), uint32(minCands)})
		w(uint64(len(l.logits)))
		b.Write(l.logits)
		b.Write(l.paramBytes())
		require.Equal(t, len(l.bias), len(l.counts), "%s: bias and counts travel together", l.name)
		w(uint32(len(l.bias)))
		w(l.bias)
		w(l.counts)
		w(uint32(len(l.mask)))
		w(l.mask)
		w(uint32(len(l.bitmask)))
		w(l.bitmask)
		lp := uint32(0)
		if l.logprobs {
			lp = 1
		}
		w(lp)
		w(uint32(l.vocabOffset))
		switch {
		case l.selectWords != nil:
			w(uint32(2))
			w(uint32(len(l.selectWords)))
			w(l.selectWords)
		case l.shard:
			w(uint32(1))
		default:
			w(uint32(0))
		}
		w(uint32(len(l.draft)))
		w(l.draft)
		if l.records != nil {
			require.True(t, l.logprobs, "%s: records need a logprobs buffer", l.name)
			rec := make([]float32, 4*l.outSlots())
			copy(rec, l.records)
			w(uint32(1))
			w(rec)
		} else {
			w(uint32(0))
		}
	}
	return b.Bytes()
}

// decodeResults reads the driver's result file.
func decodeResults(t *testing.T, data []byte, ls []*launch) []outcome {
	t.Helper()
	r := bytes.NewReader(data)
	out := make([]outcome, len(ls))
	for i, l := range ls {
		o := l.newOutcome()
		get := func(v any) { require.NoError(t, binary.Read(r, binary.LittleEndian, v), "result of %s", l.name) }
		get(o.tokens)
		get(o.status)
		if o.logprobs != nil {
			get(o.logprobs)
		}
		if o.keys != nil {
			get(o.keys)
		}
		get(o.counters)
		if l.kernel != kernelTopN {
			if len(l.counts) > 0 {
				o.counts = make([]uint32, len(l.counts))
				get(o.counts)
			}
			o.params = make([]byte, len(l.params)*paramsBytes)
			get(o.params)
		}
		if l.kernel == kernelFiltered {
			o.paths = make([]uint32, len(l.params)*l.draws())
			get(o.paths)
			o.partials = make([]uint64, l.driverPartials())
			get(o.partials)
		}
		if l.kernel == kernelTopN {
			o.passes = make([]uint32, 4*l.launchRows())
			get(o.passes)
		}
		out[i] = o
	}
	require.Zero(t, r.Len(), "trailing bytes in the result file")
	return out
}

// driver is the emulation driver, built once for every test of the package.
var driver struct {
	once sync.Once
	path string
	err  error
}

// driverFlags compile the driver. -O1 rather than -O2: the build costs a third less and the
// emulation runs about as fast (its time goes to switching fibers).
var driverFlags = []string{"-std=c++20", "-O1", "-ffp-contract=off", "-fno-strict-aliasing",
	"-pthread", "-Wall", "-Wextra", "-Wno-unknown-pragmas", "-I", filepath.Join("testdata", "shadow"), "-I", ".."}

// driverSources are what the driver is built from (as g++ -MM lists them): the key of
// its cache entry.
func driverSources() ([]string, error) {
	srcs := []string{filepath.Join("testdata", "emu_driver.cpp"), filepath.Join("testdata", "shadow", "abi.h"),
		"cuda_emu.h", filepath.Join("..", "abi.h")}
	cu, err := filepath.Glob(filepath.Join("..", "cuda", "*"))
	return append(srcs, cu...), err
}

// driverPath builds testdata/emu_driver.cpp (with ../cuda/sampling.cu) on first use, or
// takes the binary of an earlier identical build from the user cache (testenv.CachedBinary).
func driverPath(t *testing.T) string {
	t.Helper()
	gxx := testenv.GXX(t, "the CUDA edition's CPU emulation")
	driver.once.Do(func() { driver.path, driver.err = buildDriver(gxx) })
	require.NoError(t, driver.err, "building the emulation driver")
	return driver.path
}

// buildDriver is driverPath's build; g++'s warnings fail it.
func buildDriver(gxx string) (string, error) {
	srcs, err := driverSources()
	if err != nil {
		return "", err
	}
	key, err := testenv.BuildKey(gxx, driverFlags, srcs)
	if err != nil {
		return "", err
	}
	return testenv.CachedBinary("emu-driver", key, func(out string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		args := append(slices.Clone(driverFlags), "-o", out, filepath.Join("testdata", "emu_driver.cpp"))
		msg, err := exec.CommandContext(ctx, gxx, args...).CombinedOutput()
		if err != nil || len(msg) > 0 {
			return fmt.Errorf("g++ (err %v):\n%s", err, msg)
		}
		return nil
	})
}

// TestMain runs the tests in a temporary folder, the driver's among them, that is removed
// even when they are interrupted.
func TestMain(m *testing.M) { os.Exit(testenv.Run(m)) }

// runDriver runs the driver on an input file and returns its output file.
func runDriver(t *testing.T, input []byte, mode ...string) []byte {
	t.Helper()
	exe := driverPath(t)
	dir := t.TempDir()
	in, out := filepath.Join(dir, "in.bin"), filepath.Join(dir, "out.bin")
	require.NoError(t, os.WriteFile(in, input, 0o600))
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, exe, append(append(mode, in), out)...)
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Run(), "emu_driver failed (a SIGSEGV is an out-of-bounds access):\n%s", stderr.String())
	data, err := os.ReadFile(out)
	require.NoError(t, err)
	return data
}

// TestCUDAEditionMatchesGoEdition runs the CUDA edition under the CPU emulation and requires
// the tokens, statuses and counters of the Go edition.
func TestCUDAEditionMatchesGoEdition(t *testing.T) {
	ls := testLaunches(rand.New(rand.NewPCG(20240601, 7)), emuShape)
	got := decodeResults(t, runDriver(t, encodeJob(t, ls)), ls)
	compareWithGo(t, "emulated CUDA edition", ls, got)
}

// TestCUDANoiseMatchesPhilox checks the CUDA edition's Philox, Gumbel noise, noise bounds and
// 16-bit conversions against packages philox and half, value by value: the launches of
// the other test meet the rare branches (tail words, words near the bounds) too seldom
// to pin them down.
func TestCUDANoiseMatchesPhilox(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	edges := []uint32{0, 1, 2, 3, philox.TailThreshold - 1, philox.TailThreshold, philox.TailThreshold + 1,
		1<<31 - 1, 1 << 31, 1<<31 + 1, math.MaxUint32 - 1, math.MaxUint32}
	for p := range 32 {
		edges = append(edges, 1<<p-1, 1<<p, 1<<p+1)
	}
	var pairs [][2]uint32
	for _, w := range edges {
		for _, tail := range []uint32{0, 1, 1 << 31, math.MaxUint32, r.Uint32()} {
			pairs = append(pairs, [2]uint32{w, tail})
		}
	}
	for range 100000 {
		// Every magnitude of w equally often: the tail branch gets its share.
		pairs = append(pairs, [2]uint32{uint32(r.Uint64() >> (32 + r.IntN(33))), r.Uint32()})
	}
	var blocks [][6]uint32
	for _, c := range [][6]uint32{
		{0, 0, 0, 0, 0, 0},
		{math.MaxUint32, math.MaxUint32, math.MaxUint32, math.MaxUint32, math.MaxUint32, math.MaxUint32},
		{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0},
	} {
		blocks = append(blocks, c)
	}
	for range 1000 {
		var c [6]uint32
		for i := range c {
			c[i] = r.Uint32()
		}
		blocks = append(blocks, c)
	}

	var in bytes.Buffer
	put := func(v any) { require.NoError(t, binary.Write(&in, binary.LittleEndian, v)) }
	put(uint32(len(pairs)))
	put(pairs)
	put(uint32(len(blocks)))
	put(blocks)
	out := bytes.NewReader(runDriver(t, in.Bytes(), "--units"))
	get := func(v any) { require.NoError(t, binary.Read(out, binary.LittleEndian, v)) }

	var bounds [2]float32
	get(&bounds)
	minGumbel := bounds[0]
	require.Equal(t, philox.MaxGumbel, bounds[1], "GB_MAX_GUMBEL is philox.MaxGumbel")

	noise := make([][4]float32, len(pairs))
	get(noise)
	tails := 0
	for i, pr := range pairs {
		w, tail := pr[0], pr[1]
		want := philox.Gumbel(w, tail)
		g, bound, tight := noise[i][0], noise[i][1], noise[i][3]
		// gb_noise_bound holds here with room for the GPU's fast logarithms (errors near
		// 1e-6) a thousand times over, and stays within 2e-3 plus u^3 / 2 (at most 1/16)
		// of the noise where the tail's fraction cannot count (w >= 2^16).
		near := w < 1<<16 || tight-g <= 0.065
		// Checked by hand first: a require per check of every pair would cost most of the
		// test's time.
		if math.Float32bits(want) != math.Float32bits(g) ||
			!(g <= bound && g <= noise[i][2] && bound <= philox.MaxGumbel && g >= minGumbel) ||
			!(tight-g >= 1e-3 && near) {
			require.Equal(t, math.Float32bits(want), math.Float32bits(g), "gb_gumbel(%#x, %#x) = %v, philox.Gumbel = %v", w, tail, g, want)
			require.LessOrEqual(t, g, bound, "gb_gumbel_bound(%#x) is below the noise", w)
			require.LessOrEqual(t, g, noise[i][2], "gb_cheap_bound(%#x) is below the noise", w)
			require.LessOrEqual(t, bound, philox.MaxGumbel, "gb_gumbel_bound(%#x) is looser than MaxGumbel", w)
			require.GreaterOrEqual(t, g, minGumbel, "gb_gumbel(%#x, %#x) is below GB_MIN_GUMBEL", w, tail)
			require.GreaterOrEqual(t, tight-g, float32(1e-3), "gb_noise_bound(%#x) = %v, noise %v", w, tight, g)
			require.True(t, near, "gb_noise_bound(%#x) = %v is more than 0.065 above the noise %v", w, tight, g)
		}
		if w < philox.TailThreshold {
			tails++
		}
	}
	require.Greater(t, tails, len(pairs)/10, "too few words took the tail branch")

	got := make([][4]uint32, len(blocks))
	get(got)
	for i, c := range blocks {
		want := philox.Block([4]uint32{c[0], c[1], c[2], c[3]}, [2]uint32{c[4], c[5]})
		require.Equal(t, want, got[i], "gb_philox(counter %x, key %x)", c[:4], c[4:])
	}

	for _, conv := range []struct {
		name string
		ref  func(uint16) float32
	}{{"f16", half.Float16ToFloat32}, {"bf16", half.BFloat16ToFloat32}} {
		vals := make([]float32, 1<<16)
		get(vals)
		for h, v := range vals {
			if want := conv.ref(uint16(h)); math.Float32bits(want) != math.Float32bits(v) {
				require.Equal(t, math.Float32bits(want), math.Float32bits(v), "%s %#04x", conv.name, h)
			}
		}
	}
	require.Zero(t, out.Len(), "trailing bytes in the units output")
}
