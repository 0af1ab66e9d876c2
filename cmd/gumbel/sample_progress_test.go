package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/runtime/cpu"
	"github.com/gumbel-go/gumbel/sampler"
)

// recordProgress is a caseProgress that remembers what it was told.
type recordProgress struct {
	sets   []int64
	closed bool
}

func (r *recordProgress) start(int, int, string) {}
func (r *recordProgress) set(done int64)         { r.sets = append(r.sets, done) }
func (r *recordProgress) finished(string)        {}
func (r *recordProgress) close()                 { r.closed = true }

// TestDrawProgressNotATerminal: off a terminal, `gumbel sample` writes no progress,
// however long it runs.
func TestDrawProgressNotATerminal(t *testing.T) {
	var w bytes.Buffer
	p := newDrawProgress(&w, 2, 1000)
	p.began = time.Now().Add(-time.Hour)
	for d := 1; d <= 1000; d += 100 {
		p.set(d)
	}
	p.close()
	assert.Empty(t, w.String())
}

// TestDrawProgressDelay: on a terminal the bar appears only once the run has taken
// progressDelay, then follows the draws and is closed before the results print.
func TestDrawProgressDelay(t *testing.T) {
	now := time.Unix(1000, 0)
	bar := &recordProgress{}
	opened := 0
	p := &drawProgress{began: now, now: func() time.Time { return now }, open: func() caseProgress {
		opened++
		return bar
	}}
	p.set(10)
	now = now.Add(progressDelay / 2)
	p.set(20)
	assert.Zero(t, opened, "a quick run shows no bar")
	now = now.Add(progressDelay)
	p.set(30)
	p.set(40)
	assert.Equal(t, 1, opened)
	assert.Equal(t, []int64{30, 40}, bar.sets)
	p.close()
	assert.True(t, bar.closed)
	p.close() // nothing left to close
}

// TestDrawRowsProgress: drawRows reports the draws per row done after each call, up to
// the total.
func TestDrawRowsProgress(t *testing.T) {
	dev, err := cpu.Open()
	require.NoError(t, err)
	defer dev.Close()
	s, err := sampler.New(dev, sampler.Options{})
	require.NoError(t, err)
	defer s.Close()
	// Two copies of the matrix fit in a call: calls of 2, 2 and 1 draws.
	const rows, vocab, draws = maxRowsPerCall / 2, 4, 5
	logits := &hostLogits{dtype: sampler.Float32, rows: rows, vocab: vocab, f32: make([]float32, rows*vocab)}
	var seen []int
	p := sampler.Params{Temperature: 1, Seed: 1, HasSeed: true}
	out, err := drawRows(dev, s, logits, p, draws, false, func(done int) { seen = append(seen, done) })
	require.NoError(t, err)
	assert.Equal(t, []int{2, 4, 5}, seen)
	for _, row := range out.rows {
		assert.NoError(t, row.err)
	}
}
