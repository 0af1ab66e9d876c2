package cpu_test

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/kernelsrc"
	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/gumbel-go/gumbel/runtime"
)

// TestSteadyLaunchAllocatesNothing: once warm, a launch (of an empty kernel and of the
// sampling kernels, split over several blocks) allocates nothing on the Go heap.
func TestSteadyLaunchAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector")
	}
	d := open(t)
	s := d.DefaultStream()
	ks := load(t, d, map[string]runtime.GoKernel{"empty": func(*runtime.BlockContext) {}})
	var a runtime.Args
	allocs := testing.AllocsPerRun(100, func() {
		if err := s.Launch(ks["empty"], runtime.Dim3{X: 8, Y: 2, Z: 1}, one, a.Reset()); err != nil {
			panic(err)
		}
	})
	assert.Zero(t, allocs, "empty kernel")

	const v, rows, split = 5000, 3, 4
	m, err := d.Load(kernelsrc.Sampling())
	require.NoError(t, err)
	alloc := func(n int) runtime.Buffer {
		b, err := d.Alloc(n)
		require.NoError(t, err)
		return b
	}
	scratch := abi.Launch{Rows: rows, Split: split, Draws: 1}
	logits, params := alloc(4*v*rows), alloc(abi.RowParamsSize*rows)
	tokens, status := alloc(4*rows), alloc(4*rows)
	partials := alloc(8 * scratch.PartialsWords(abi.GumbelArgmax))
	counters := alloc(4 * scratch.CountersWords(abi.GumbelArgmax))
	unused := alloc(8) // the buffers of features no row uses
	r := rand.New(rand.NewPCG(1, 2))
	lb := runtime.HostBytes(logits)
	for i := 0; i < v*rows; i++ {
		binary.LittleEndian.PutUint32(lb[4*i:], math.Float32bits(float32(r.NormFloat64()*2)))
	}
	pb := runtime.HostBytes(params)
	for y := range rows {
		p := abi.RowParams{Row: uint32(y), Temperature: 0.8, TopK: 40, TopP: 0.9}
		p.Encode(pb[abi.RowParamsSize*y:])
	}
	for _, c := range []struct {
		kernel string
		grid   runtime.Dim3
	}{
		{"gumbel_argmax_f32", runtime.Dim3{X: split, Y: rows, Z: 1}},
		{"gumbel_argmax_f32", runtime.Dim3{X: 1, Y: rows, Z: 1}},
		{"categorical_f32", runtime.Dim3{X: 1, Y: rows, Z: 1}},
	} {
		k, err := m.Kernel(c.kernel)
		require.NoError(t, err)
		step := uint32(0)
		launch := func() {
			step++
			binary.LittleEndian.PutUint32(pb[abi.StepOffset:], step)
			a.Reset().Buffer(logits).Buffer(params).Buffer(tokens).Buffer(status).
				Buffer(partials).Buffer(counters).U64(v).U32(v).
				Buffer(unused).Buffer(unused).Buffer(unused).Buffer(unused).Buffer(unused).
				U32(0).Buffer(unused).Buffer(unused)
			if err := s.Launch(k, c.grid, runtime.Dim3{X: 1024, Y: 1, Z: 1}, &a); err != nil {
				panic(err)
			}
		}
		st, tok := runtime.HostBytes(status), runtime.HostBytes(tokens)
		for i := range st {
			st[i], tok[i] = 0xFF, 0xFF // the launches must write every row's slot
		}
		launch() // warm the scratch
		assert.Zero(t, testing.AllocsPerRun(50, launch), "%s over %v", c.kernel, c.grid)
		for y := range rows {
			assert.Zero(t, binary.LittleEndian.Uint32(st[4*y:]), "%s: status of row %d", c.kernel, y)
			assert.Less(t, binary.LittleEndian.Uint32(tok[4*y:]), uint32(v), "%s: token of row %d", c.kernel, y)
		}
	}
}

// BenchmarkLaunchEmpty measures the device's own cost per launch: an empty kernel over
// one block, and over several blocks per worker.
func BenchmarkLaunchEmpty(b *testing.B) {
	d := open(b)
	k := load(b, d, map[string]runtime.GoKernel{"empty": func(*runtime.BlockContext) {}})["empty"]
	s := d.DefaultStream()
	for _, blocks := range []int{1, 4 * d.Info().Multiprocessors} {
		b.Run(fmt.Sprintf("blocks=%d", blocks), func(b *testing.B) {
			var a runtime.Args
			for b.Loop() {
				if err := s.Launch(k, runtime.Dim3{X: blocks, Y: 1, Z: 1}, one, a.Reset()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
