package sampler

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/gumbel-go/gumbel/runtime"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// launchLog is a stream that can launch dependent kernels and records every launch, by
// kernel family, with "~" before those launched dependent; it runs them as Launch does.
// splits holds each launch's blocks per row (grid.X) and scratch the partials and
// counters it may touch. With serial, the stream says it cannot overlap kernels
// (Overlaps), as on a GPU before sm_90.
type launchLog struct {
	runtime.Stream
	serial  bool
	got     []string
	splits  []int
	scratch [][2]scratchSpan
}

// scratchSpan is the bytes [from, to) of buf that a launch may use.
type scratchSpan struct {
	buf      runtime.Buffer
	from, to int
}

func (s scratchSpan) overlaps(o scratchSpan) bool {
	return s.buf == o.buf && s.from < o.to && o.from < s.to
}

func (l *launchLog) record(k runtime.Kernel, grid runtime.Dim3, args *runtime.Args, dependent bool) {
	name := k.Name()
	name = name[:strings.LastIndexByte(name, '_')]
	// The words the ABI gives a launch of this shape (kernelsrc/ABI.md, "Arguments").
	shape := abi.Launch{Rows: grid.Y, Split: grid.X, Draws: grid.Z}
	var spans [2]scratchSpan
	for i, size := range [2]int{8 * shape.PartialsWords(name), 4 * shape.CountersWords(name)} {
		buf, off := args.BufferArg(4 + i)
		spans[i] = scratchSpan{buf, off, off + size}
	}
	if dependent {
		name = "~" + name
	}
	l.got = append(l.got, name)
	l.splits = append(l.splits, grid.X)
	l.scratch = append(l.scratch, spans)
}

func (l *launchLog) Launch(k runtime.Kernel, grid, block runtime.Dim3, args *runtime.Args) error {
	l.record(k, grid, args, false)
	return l.Stream.Launch(k, grid, block, args)
}

func (l *launchLog) LaunchDependent(k runtime.Kernel, grid, block runtime.Dim3, args *runtime.Args) error {
	l.record(k, grid, args, true)
	return l.Stream.Launch(k, grid, block, args)
}

// checkTopNApart checks the ABI's rule for topn's scratch: its partials and counters
// overlap no other kernel's of the call, and lie inside their buffers.
func (l *launchLog) checkTopNApart(t *testing.T) {
	t.Helper()
	for i, name := range l.got {
		for j, s := range l.scratch[i] {
			if s.to > s.from {
				assert.LessOrEqual(t, s.to, s.buf.Size(), "launch %d (%s), scratch %d", i, name, j)
			}
		}
		if strings.TrimPrefix(name, "~") != "topn" {
			continue
		}
		for o, other := range l.got {
			if o == i {
				continue
			}
			for j := range l.scratch[i] {
				assert.False(t, l.scratch[i][j].overlaps(l.scratch[o][j]),
					"%s's scratch %d overlaps %s's: %+v, %+v", name, j, other, l.scratch[i][j], l.scratch[o][j])
			}
		}
	}
}

func (l *launchLog) Overlaps() bool { return !l.serial }

func TestDependentLaunches(t *testing.T) {
	dev := openCPU(t)
	const vocab = 300
	logits := randomLogits(rand.New(rand.NewPCG(7, 8)), 2, vocab, 2)
	lg := Logits{Data: upload(t, dev, runtime.BytesOf(logits)), Rows: 2, Vocab: vocab}
	// l2 is a last-level cache of 2.5 times the logits: the rereading kernels overlap.
	const rowBytes = vocab * 4
	const l2 = 5 * rowBytes
	for _, c := range []struct {
		name   string
		params []Params
		want   []string
	}{
		{"top-p waits for filter_max", []Params{{Temperature: 0.8, TopP: 0.9}, {Temperature: 1, MinP: 0.1}},
			[]string{"filter_max", "~filtered"}},
		{"top-k needs no filter_max", []Params{{Temperature: 0.8, TopK: 20}, {Temperature: 0.8, TopK: 5, TopP: 0.5}},
			[]string{"filtered"}},
		{"topn after the step", []Params{{Temperature: 0.8, TopLogprobs: 5}, {}},
			[]string{"gumbel_argmax", "~topn"}},
		{"topn alone in its call", nil, []string{"topn"}},
		{"every route", []Params{{Temperature: 0.8, TopP: 0.9, TopLogprobs: 3}, {Temperature: 0.7}},
			[]string{"gumbel_argmax", "filter_max", "~filtered", "~topn"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			log := &launchLog{Stream: dev.DefaultStream()}
			s := newSampler(t, dev, Options{Seed: 3, Stream: log})
			s.l2 = l2
			var res Result
			if c.params == nil {
				require.NoError(t, s.SampleDistinct(lg, []Params{{Temperature: 0.8}, {Temperature: 1}}, 3, &res))
			} else {
				require.NoError(t, s.Sample(lg, c.params, &res))
				assert.Equal(t, []error{nil, nil}, res.Errs)
			}
			assert.Equal(t, c.want, log.got)
			log.checkTopNApart(t)
		})
	}

	t.Run("topn after distinct draws", func(t *testing.T) {
		log := &launchLog{Stream: dev.DefaultStream()}
		s := newSampler(t, dev, Options{Seed: 3, Stream: log, Split: On})
		s.l2 = l2
		var res Result
		require.NoError(t, s.SampleDistinct(lg, []Params{{Temperature: 0.8, TopLogprobs: 4}, {Temperature: 1}}, 3, &res))
		assert.Equal(t, []error{nil, nil}, res.Errs)
		assert.Equal(t, []string{"topn", "~topn"}, log.got)
		log.checkTopNApart(t)
	})

	t.Run("logits over two fifths of the cache", func(t *testing.T) {
		log := &launchLog{Stream: dev.DefaultStream()}
		s := newSampler(t, dev, Options{Seed: 3, Stream: log})
		s.l2 = 2 * rowBytes // two fifths of it hold less than the one row of each group
		var res Result
		require.NoError(t, s.Sample(lg, []Params{{Temperature: 0.8, TopP: 0.9, TopLogprobs: 3}, {Temperature: 0.7}}, &res))
		assert.Equal(t, []string{"gumbel_argmax", "filter_max", "filtered", "topn"}, log.got)
		log.checkTopNApart(t)
	})

	for _, c := range []struct {
		name string
		l2   int
		want []string
	}{
		{"batch", l2, []string{"gumbel_argmax", "~topn", "filter_max", "~filtered", "~gumbel_exact"}},
		{"batch over two fifths of the cache", 2 * rowBytes, []string{"gumbel_argmax", "topn", "filter_max", "filtered", "~gumbel_exact"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			log := &launchLog{Stream: dev.DefaultStream()}
			s := newSampler(t, dev, Options{Seed: 3, Stream: log})
			s.l2 = c.l2
			b, err := s.NewBatch(2, vocab, Float32, 1)
			require.NoError(t, err)
			t.Cleanup(func() { _ = b.Close() })
			require.NoError(t, b.SetRow(0, Params{Temperature: 0.8, TopP: 0.9, TopLogprobs: 2}))
			require.NoError(t, b.SetRow(1, Params{Temperature: 0.8}))
			require.NoError(t, b.Launch(lg))
			assert.Equal(t, c.want, log.got)
			log.checkTopNApart(t)
		})
	}
}

// TestSharedSplit pins when gumbel_argmax and topn split the device between them (each
// half the policy's blocks) and when each takes all of it.
func TestSharedSplit(t *testing.T) {
	dev := openCPU(t)
	const vocab = 300
	logits := randomLogits(rand.New(rand.NewPCG(9, 10)), 2, vocab, 2)
	lg := Logits{Data: upload(t, dev, runtime.BytesOf(logits)), Rows: 2, Vocab: vocab}
	// Two rows of 8 blocks (one of 16), or of 4 where the kernels share the device.
	pol := SplitPolicy{TargetBlocks: 16, MinElementsPerBlock: 1, MaxBlocksPerRow: 64}
	top := Params{Temperature: 0.8, TopLogprobs: 5}
	greedyTop := Params{TopLogprobs: 2}
	for _, c := range []struct {
		name   string
		params []Params
		serial bool
		l2     int
		got    []string
		splits []int
	}{
		{"topn beside the step", []Params{top, greedyTop}, false, 5 * vocab * 4,
			[]string{"gumbel_argmax", "~topn"}, []int{4, 4}},
		{"a filtered row between them", []Params{top, {Temperature: 0.8, TopK: 20, TopLogprobs: 1}}, false, 5 * vocab * 4,
			[]string{"gumbel_argmax", "filtered", "~topn"}, []int{16, 16, 8}},
		{"logits over two fifths of the cache", []Params{top, greedyTop}, false, 2 * vocab * 4,
			[]string{"gumbel_argmax", "topn"}, []int{8, 8}},
		{"a stream that cannot overlap kernels", []Params{top, greedyTop}, true, 5 * vocab * 4,
			[]string{"gumbel_argmax", "topn"}, []int{8, 8}},
	} {
		t.Run(c.name, func(t *testing.T) {
			log := &launchLog{Stream: dev.DefaultStream(), serial: c.serial}
			s := newSampler(t, dev, Options{Seed: 3, Stream: log, Split: On, Policy: &pol})
			s.l2 = c.l2
			var res Result
			require.NoError(t, s.Sample(lg, c.params, &res))
			assert.Equal(t, []error{nil, nil}, res.Errs)
			assert.Equal(t, c.got, log.got)
			assert.Equal(t, c.splits, log.splits)
			log.checkTopNApart(t)
		})
	}

	t.Run("batch", func(t *testing.T) {
		log := &launchLog{Stream: dev.DefaultStream()}
		s := newSampler(t, dev, Options{Seed: 3, Stream: log, Split: On, Policy: &pol})
		s.l2 = 5 * vocab * 4
		b, err := s.NewBatch(2, vocab, Float32, 1)
		require.NoError(t, err)
		t.Cleanup(func() { _ = b.Close() })
		require.NoError(t, b.SetRow(0, top))
		require.NoError(t, b.SetRow(1, Params{Temperature: 0.8, TopP: 0.9}))
		require.NoError(t, b.Launch(lg))
		assert.Equal(t, []string{"gumbel_argmax", "~topn", "filter_max", "~filtered", "~gumbel_exact"}, log.got)
		assert.Equal(t, []int{4, 4, 8, 8, 1}, log.splits)
		log.checkTopNApart(t)
	})
}
