package sampler

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gumbel-go/gumbel/runtime"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// launchLog is a stream that can launch dependent kernels and records every launch, by
// kernel family, with "~" before those launched dependent; it runs them as Launch does.
type launchLog struct {
	runtime.Stream
	got []string
}

func (l *launchLog) record(k runtime.Kernel, dependent bool) {
	name := k.Name()
	name = name[:strings.LastIndexByte(name, '_')]
	if dependent {
		name = "~" + name
	}
	l.got = append(l.got, name)
}

func (l *launchLog) Launch(k runtime.Kernel, grid, block runtime.Dim3, args *runtime.Args) error {
	l.record(k, false)
	return l.Stream.Launch(k, grid, block, args)
}

func (l *launchLog) LaunchDependent(k runtime.Kernel, grid, block runtime.Dim3, args *runtime.Args) error {
	l.record(k, true)
	return l.Stream.Launch(k, grid, block, args)
}

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
		})
	}

	t.Run("logits over two fifths of the cache", func(t *testing.T) {
		log := &launchLog{Stream: dev.DefaultStream()}
		s := newSampler(t, dev, Options{Seed: 3, Stream: log})
		s.l2 = 2 * rowBytes // two fifths of it hold less than the one row of each group
		var res Result
		require.NoError(t, s.Sample(lg, []Params{{Temperature: 0.8, TopP: 0.9, TopLogprobs: 3}, {Temperature: 0.7}}, &res))
		assert.Equal(t, []string{"gumbel_argmax", "filter_max", "filtered", "topn"}, log.got)
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
		})
	}
}
