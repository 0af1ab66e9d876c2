package main

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"strings"

	"codeberg.org/sbinet/npyio/npy"
	"codeberg.org/sbinet/npyio/npy/float16"

	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/sampler"
)

// maxVocab is the largest vocabulary the kernels accept (ABI.md: V < 2^31).
const maxVocab = 1<<31 - 1

// hostLogits is a [rows, vocab] logits matrix read from a file, in row-major order.
type hostLogits struct {
	dtype sampler.DType
	rows  int
	vocab int
	// f32 holds float32 logits; bits holds float16 bit patterns. One of them is set.
	f32  []float32
	bits []uint16
	// note says what was done to the data on the way in (e.g. a float64 conversion).
	note string
}

// bytes returns the matrix as the bytes a device buffer holds.
func (h *hostLogits) bytes() []byte {
	if h.dtype == sampler.Float32 {
		return runtime.BytesOf(h.f32)
	}
	return runtime.BytesOf(h.bits)
}

// readNPY reads logits from a NumPy .npy file of shape [V] or [B, V] holding float32,
// float16 or float64 (converted to float32, rounding to nearest).
func readNPY(path string) (h *hostLogits, err error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	// npyio trusts the file's header; a hostile header must come back as an error,
	// not take the command down.
	defer func() {
		if p := recover(); p != nil {
			h, err = nil, fmt.Errorf("%s: malformed .npy file: %v", path, p)
		}
	}()
	h, err = decodeNPY(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return h, nil
}

// npyKind is the element type of a .npy file, without its byte order.
func npyKind(descr string) (string, error) {
	t := strings.Trim(strings.TrimSpace(descr), `'"`)
	if t != "" && strings.ContainsRune("<>|=", rune(t[0])) {
		t = t[1:]
	}
	switch t {
	case "f2", "f4", "f8":
		return t, nil
	}
	return "", fmt.Errorf("element type %s is not supported: save the logits as float32 (or float16, float64)", descr)
}

func decodeNPY(raw []byte) (*hostLogits, error) {
	br := bytes.NewReader(raw)
	r, err := npy.NewReader(br)
	if err != nil {
		return nil, fmt.Errorf("not a .npy file: %w", err)
	}
	kind, err := npyKind(r.Header.Descr.Type)
	if err != nil {
		return nil, err
	}
	shape := r.Header.Descr.Shape
	h := &hostLogits{}
	switch len(shape) {
	case 1:
		h.rows, h.vocab = 1, shape[0]
	case 2:
		h.rows, h.vocab = shape[0], shape[1]
	default:
		return nil, fmt.Errorf("shape %v: want [V] or [B, V]", shape)
	}
	if h.rows < 1 || h.vocab < 1 {
		return nil, fmt.Errorf("shape %v: empty", shape)
	}
	if h.vocab > maxVocab {
		return nil, fmt.Errorf("shape %v: vocabulary %d is too large (at most %d)", shape, h.vocab, maxVocab)
	}
	esize := int(kind[1] - '0')
	n := h.rows * h.vocab
	if n/h.rows != h.vocab || n > math.MaxInt/esize {
		return nil, fmt.Errorf("shape %v: too large", shape)
	}
	if br.Len() < n*esize {
		return nil, fmt.Errorf("shape %v needs %d bytes of %s data, the file holds %d", shape, n*esize, kind, br.Len())
	}
	switch kind {
	case "f4":
		h.dtype = sampler.Float32
		err = r.Read(&h.f32)
	case "f8":
		var f64 []float64
		if err = r.Read(&f64); err == nil {
			h.dtype, h.f32 = sampler.Float32, make([]float32, len(f64))
			for i, v := range f64 {
				h.f32[i] = float32(v)
			}
			h.note = "float64 logits converted to float32"
		}
	case "f2":
		var f16 []float16.Num
		if err = r.Read(&f16); err == nil {
			h.dtype, h.bits = sampler.Float16, make([]uint16, len(f16))
			for i, v := range f16 {
				h.bits[i] = v.Uint16()
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s data: %w", kind, err)
	}
	if got := max(len(h.f32), len(h.bits)); got != n {
		return nil, fmt.Errorf("shape %v: read %d elements, want %d", shape, got, n)
	}
	if r.Header.Descr.Fortran && h.rows > 1 {
		h.transpose()
	}
	return h, nil
}

// transpose turns column-major (Fortran-order) data into row-major.
func (h *hostLogits) transpose() {
	if h.f32 != nil {
		h.f32 = transposed(h.f32, h.rows, h.vocab)
	} else {
		h.bits = transposed(h.bits, h.rows, h.vocab)
	}
}

func transposed[T any](col []T, rows, cols int) []T {
	out := make([]T, len(col))
	for c := 0; c < cols; c++ {
		for r := 0; r < rows; r++ {
			out[r*cols+c] = col[c*rows+r]
		}
	}
	return out
}
