package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/sampler"
)

// rawNPY builds a version 1.0 .npy file by hand: see npyFile.
func rawNPY(descr string, fortran bool, shape string, data any) []byte {
	return npyFile(1, descr, fortran, shape, data)
}

// npyFile builds a .npy file of format version major.0 as the NumPy format spec lays it
// out, independently of the reader under test: the header dict padded with spaces so
// that the preamble (10 bytes in version 1, 12 in version 2) and the header end on a
// multiple of 64 bytes with '\n', then data (nil for none) in little-endian order.
func npyFile(major byte, descr string, fortran bool, shape string, data any) []byte {
	order := "False"
	if fortran {
		order = "True"
	}
	hdr := fmt.Sprintf("{'descr': '%s', 'fortran_order': %s, 'shape': %s, }", descr, order, shape)
	pre := 10
	if major > 1 {
		pre = 12
	}
	hdr += strings.Repeat(" ", 63-(pre+len(hdr))%64) + "\n"
	var b bytes.Buffer
	if data != nil {
		_ = binary.Write(&b, binary.LittleEndian, data)
	}
	return npyWithHeader(major, hdr, b.Bytes())
}

// writeFile writes b into a fresh file of the test's temporary folder and returns its path.
func writeFile(t *testing.T, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, b, 0o644))
	return p
}

// writeNPY writes v, a []float32, []float64 or arrays of them ([B][V]float32), to a .npy
// file of version 2.0 (a 4-byte header length), the header's descr and shape taken from
// v's type, and returns its path.
func writeNPY(t *testing.T, v any) string {
	t.Helper()
	rv := reflect.ValueOf(v)
	dims := []string{fmt.Sprint(rv.Len())}
	elem := rv.Type().Elem()
	for ; elem.Kind() == reflect.Array; elem = elem.Elem() {
		dims = append(dims, fmt.Sprint(elem.Len()))
	}
	descr := map[reflect.Kind]string{reflect.Float32: "<f4", reflect.Float64: "<f8"}[elem.Kind()]
	require.NotEmpty(t, descr, "writeNPY: element type %v", elem)
	shape := strings.Join(dims, ", ")
	if len(dims) == 1 {
		shape += ","
	}
	return writeFile(t, "logits.npy", npyFile(2, descr, false, "("+shape+")", v))
}

func TestReadNPY(t *testing.T) {
	// float16 bit patterns of 1, -2, 0.5 and -Inf.
	f16 := []uint16{0x3C00, 0xC000, 0x3800, 0xFC00}
	tests := []struct {
		name  string
		path  func(t *testing.T) string
		dtype sampler.DType
		rows  int
		vocab int
		f32   []float32
		bits  []uint16
		note  string
	}{
		{
			name: "float32 [V], version 2.0", path: func(t *testing.T) string { return writeNPY(t, []float32{1, 2, 3}) },
			dtype: sampler.Float32, rows: 1, vocab: 3, f32: []float32{1, 2, 3},
		},
		{
			name: "float32 [B, V], version 2.0", path: func(t *testing.T) string { return writeNPY(t, [2][3]float32{{1, 2, 3}, {4, 5, 6}}) },
			dtype: sampler.Float32, rows: 2, vocab: 3, f32: []float32{1, 2, 3, 4, 5, 6},
		},
		{
			name: "float64 converted", path: func(t *testing.T) string { return writeNPY(t, []float64{0.1, -1e300}) },
			dtype: sampler.Float32, rows: 1, vocab: 2, f32: []float32{0.1, float32(math.Inf(-1))}, note: "float64 logits converted to float32",
		},
		{
			name: "float16 [B, V]", path: func(t *testing.T) string { return writeFile(t, "h.npy", rawNPY("<f2", false, "(2, 2)", f16)) },
			dtype: sampler.Float16, rows: 2, vocab: 2, bits: f16,
		},
		{
			name: "float32 Fortran order is transposed",
			path: func(t *testing.T) string {
				// column-major [2, 3] of {{1, 2, 3}, {4, 5, 6}}
				return writeFile(t, "f.npy", rawNPY("<f4", true, "(2, 3)", []float32{1, 4, 2, 5, 3, 6}))
			},
			dtype: sampler.Float32, rows: 2, vocab: 3, f32: []float32{1, 2, 3, 4, 5, 6},
		},
		{
			name: "big-endian float32",
			path: func(t *testing.T) string {
				b := rawNPY(">f4", false, "(2,)", nil)
				b = binary.BigEndian.AppendUint32(b, 0x3F800000) // 1
				b = binary.BigEndian.AppendUint32(b, 0xC0000000) // -2
				return writeFile(t, "be.npy", b)
			},
			dtype: sampler.Float32, rows: 1, vocab: 2, f32: []float32{1, -2},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, err := readNPY(tc.path(t))
			require.NoError(t, err)
			assert.Equal(t, tc.dtype, h.dtype)
			assert.Equal(t, tc.rows, h.rows)
			assert.Equal(t, tc.vocab, h.vocab)
			assert.Equal(t, tc.f32, h.f32)
			assert.Equal(t, tc.bits, h.bits)
			assert.Equal(t, tc.note, h.note)
			assert.Len(t, h.bytes(), tc.rows*tc.vocab*tc.dtype.Size())
		})
	}
}

func TestReadNPYErrors(t *testing.T) {
	tests := []struct {
		name string
		file []byte // nil: the file does not exist
		want string
	}{
		{name: "missing file", want: "no such file"},
		{name: "not npy", file: []byte("hello, world"), want: "not a .npy file"},
		{name: "empty file", file: []byte{}, want: "not a .npy file"},
		{name: "int32", file: rawNPY("<i4", false, "(2,)", []int32{1, 2}), want: "element type '<i4' is not supported"},
		{name: "scalar", file: rawNPY("<f4", false, "()", []float32{1}), want: "want [V] or [B, V]"},
		{name: "3-d", file: rawNPY("<f4", false, "(1, 1, 2)", []float32{1, 2}), want: "want [V] or [B, V]"},
		{name: "empty vocabulary", file: rawNPY("<f4", false, "(2, 0)", nil), want: "empty"},
		{name: "empty batch", file: rawNPY("<f4", false, "(0, 5)", nil), want: "empty"},
		{name: "negative dimension", file: rawNPY("<f4", false, "(-3,)", nil), want: "empty"},
		{name: "truncated data", file: rawNPY("<f4", false, "(4,)", []float32{1, 2, 3}), want: "needs 16 bytes of f4 data, the file holds 12"},
		{name: "huge header shape", file: rawNPY("<f4", false, "(4000000000, 4000000000)", []float32{1}), want: "too large"},
		{name: "overflowing shape", file: rawNPY("<f4", false, "(4611686018427387904, 8)", []float32{1}), want: "too large"},
		{name: "truncated header", file: []byte("\x93NUMPY\x01\x00\xff\xff{'descr"), want: "malformed .npy file"},
		{name: "garbled shape", file: rawNPY("<f4", false, "(x,)", []float32{1}), want: "malformed .npy header"},
		{name: "garbled descr", file: rawNPY("[(", false, "(1,)", []float32{1}), want: "not supported"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "missing.npy")
			if tc.file != nil {
				path = writeFile(t, "bad.npy", tc.file)
			}
			h, err := readNPY(path)
			require.Error(t, err)
			assert.Nil(t, h)
			assert.Contains(t, err.Error(), tc.want)
			assert.Contains(t, err.Error(), path, "the error names the file")
		})
	}
}
