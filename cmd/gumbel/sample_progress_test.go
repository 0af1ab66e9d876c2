package main

import (
	"bytes"
	"strings"
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

// TestBarProgress: the terminal bar redraws its line at most every barInterval, with the
// count and an ETA from the rate since its first update, and blanks the line on close.
func TestBarProgress(t *testing.T) {
	var w bytes.Buffer
	now := time.Unix(1000, 0)
	b := &barProgress{w: &w, total: 100, cols: 80, now: func() time.Time { return now }}
	b.start(1, 3, "case-a")
	b.set(0)
	assert.Equal(t, "\r[2/3] case-a  ["+strings.Repeat(" ", 30)+"] 0/100", w.String())
	w.Reset()
	now = now.Add(barInterval / 2)
	b.set(10)
	assert.Empty(t, w.String(), "throttled")
	now = now.Add(barInterval*20 - barInterval/2) // 2 s for 25 draws: 6 s for the last 75
	b.set(25)
	quarter := "[2/3] case-a  [======>" + strings.Repeat(" ", 23) + "] 25/100  ETA 6s"
	assert.Equal(t, "\r"+quarter, w.String())
	w.Reset()
	b.start(2, 3, "b")
	now = now.Add(barInterval)
	b.set(100)
	line := "\r[3/3] b  [" + strings.Repeat("=", 30) + "] 100/100  ETA 0s"
	assert.Equal(t, line+strings.Repeat(" ", len(quarter)-len(line)+1), w.String(),
		"blanks what the longer line before left")
	w.Reset()
	b.close()
	assert.Equal(t, "\r"+strings.Repeat(" ", len(line)-1)+"\r", w.String())

	narrow := &barProgress{w: &w, total: 10, cols: 50, now: time.Now}
	narrow.start(0, 1, strings.Repeat("x", 100))
	w.Reset()
	narrow.set(5)
	assert.Len(t, []rune(w.String()), 1+49, "cut to the terminal's width")
}
