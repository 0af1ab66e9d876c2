package main

import (
	"testing"

	"github.com/gumbel-go/gumbel/sampler"
)

// FuzzReadNPY feeds arbitrary bytes to the .npy decoder `gumbel sample` uses, directly
// (readNPY's recover would hide a panic). Whatever the bytes hold, it must return an
// error or a well-formed matrix: at least one row and one element per row, exactly rows
// x vocab elements of its dtype, and the byte view a device buffer gets.
func FuzzReadNPY(f *testing.F) {
	f16 := []uint16{0x3C00, 0xC000, 0x3800, 0xFC00}
	seeds := [][]byte{
		rawNPY("<f4", false, "(3,)", []float32{1, 2, 3}),
		rawNPY("<f4", false, "(2, 2)", []float32{1, 2, 3, 4}),
		rawNPY("<f4", true, "(2, 3)", []float32{1, 2, 3, 4, 5, 6}),
		rawNPY("<f2", false, "(4,)", f16),
		rawNPY("<f8", false, "(1, 2)", []float64{0.5, -1e300}),
		rawNPY(">f4", false, "(2,)", []float32{1, 2}),
		rawNPY("<i4", false, "(2,)", []int32{1, 2}),
		rawNPY("<f4", false, "(2, 2, 2)", make([]float32, 8)),
		rawNPY("<f4", false, "(0,)", nil),
		rawNPY("<f4", false, "(-1,)", nil),
		rawNPY("<f4", false, "(4294967296, 4294967296)", nil),
		rawNPY("<f4", false, "(3,)", []float32{1}),
		[]byte("\x93NUMPY\x01\x00"),
		[]byte("\x93NUMPY\x02\x00\x10\x00\x00\x00{'descr': '<f4'}"),
		[]byte("not a numpy file at all"),
		{},
	}
	// Truncated headers: the file ends inside the header it announces.
	full := seeds[0]
	for _, n := range []int{9, 10, 11, 20, len(full) / 2, len(full) - 1} {
		seeds = append(seeds, full[:n])
	}
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var (
			h   *hostLogits
			err error
		)
		h, err = decodeNPY(raw)
		if err != nil {
			if h != nil {
				t.Fatalf("error %v with a matrix", err)
			}
			return
		}
		checkLogits(t, h)
	})
}

// checkLogits fails t unless h is a well-formed matrix.
func checkLogits(t *testing.T, h *hostLogits) {
	t.Helper()
	if h == nil {
		t.Fatal("nil matrix without an error")
	}
	if h.rows < 1 || h.vocab < 1 || h.vocab > maxVocab {
		t.Fatalf("shape [%d, %d]", h.rows, h.vocab)
	}
	n := h.rows * h.vocab
	switch h.dtype {
	case sampler.Float32:
		if len(h.f32) != n || h.bits != nil {
			t.Fatalf("float32 [%d, %d]: %d float32 and %d float16 elements", h.rows, h.vocab, len(h.f32), len(h.bits))
		}
	case sampler.Float16:
		if len(h.bits) != n || h.f32 != nil {
			t.Fatalf("float16 [%d, %d]: %d float16 and %d float32 elements", h.rows, h.vocab, len(h.bits), len(h.f32))
		}
	default:
		t.Fatalf("dtype %v", h.dtype)
	}
	if got, want := len(h.bytes()), n*h.dtype.Size(); got != want {
		t.Fatalf("bytes(): %d, want %d", got, want)
	}
}
