package main

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// npyWithHeader builds a .npy file of format version major.0 around a header given as
// is (no padding added): the raw material of broken headers.
func npyWithHeader(major byte, hdr string, data []byte) []byte {
	var b bytes.Buffer
	b.WriteString("\x93NUMPY")
	b.WriteByte(major)
	b.WriteByte(0)
	if major == 1 {
		_ = binary.Write(&b, binary.LittleEndian, uint16(len(hdr)))
	} else {
		_ = binary.Write(&b, binary.LittleEndian, uint32(len(hdr)))
	}
	b.WriteString(hdr)
	b.Write(data)
	return b.Bytes()
}

// checkCleanError fails t unless err is a plain error: no Go panic text in it.
func checkCleanError(t *testing.T, err error) {
	t.Helper()
	require.Error(t, err)
	for _, bad := range []string{"runtime error", "panic", "out of range [", "index out of range", "slice bounds"} {
		assert.NotContains(t, err.Error(), bad)
	}
}

// TestDecodeNPYTruncated cuts valid files at every length: each prefix is an error that
// says what is wrong, never a panic (decodeNPY runs without readNPY's recover here).
func TestDecodeNPYTruncated(t *testing.T) {
	files := map[string][]byte{
		"v1 float32":    rawNPY("<f4", false, "(2, 3)", []float32{1, 2, 3, 4, 5, 6}),
		"v1 float16":    rawNPY("<f2", true, "(3,)", []uint16{1, 2, 3}),
		"v2 float64":    npyWithHeader(2, "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }\n", make([]byte, 16)),
		"v3 big-endian": npyWithHeader(3, "{'descr': '>f4', 'fortran_order': False, 'shape': (1, 2), }\n", make([]byte, 8)),
	}
	for name, full := range files {
		h, err := decodeNPY(full)
		require.NoError(t, err, name)
		require.NotNil(t, h)
		for n := range len(full) {
			h, err := decodeNPY(full[:n])
			assert.Nil(t, h, "%s cut at %d", name, n)
			checkCleanError(t, err)
		}
	}
}

func TestDecodeNPYMalformed(t *testing.T) {
	f4 := make([]byte, 64)
	tests := []struct {
		name string
		file []byte
		want string
	}{
		{"bad magic", append([]byte("\x93NUMPZ\x01\x00\x10\x00"), f4...), "not a .npy file"},
		{"text", []byte("{'descr': '<f4'}"), "not a .npy file"},
		{"unknown version", npyWithHeader(9, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }\n", f4), "version 9.0"},
		{"header past the end", []byte("\x93NUMPY\x01\x00\xff\xff{'descr"), "header of 65535 bytes"},
		{"v2 header past the end", []byte("\x93NUMPY\x02\x00\xff\xff\xff\x7f{'descr"), "header of 2147483647 bytes"},
		{"header not a dict", npyWithHeader(1, "['descr', '<f4']\n", f4), "malformed .npy header"},
		{"unterminated dict", npyWithHeader(1, "{'descr': '<f4', 'shape': (2,)\n", f4), "malformed .npy header"},
		{"unterminated string", npyWithHeader(1, "{'descr: '<f4'}\n", f4), "malformed .npy header"},
		{"unterminated tuple", npyWithHeader(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, }\n", f4), "malformed .npy header"},
		{"no descr", npyWithHeader(1, "{'fortran_order': False, 'shape': (2,), }\n", f4), "no 'descr'"},
		{"no shape", npyWithHeader(1, "{'descr': '<f4', 'fortran_order': False, }\n", f4), "no 'shape'"},
		{"shape not a tuple", npyWithHeader(1, "{'descr': '<f4', 'fortran_order': False, 'shape': 2, }\n", f4), "'shape'"},
		{"shape of strings", npyWithHeader(1, "{'descr': '<f4', 'fortran_order': False, 'shape': ('a',), }\n", f4), "'shape'"},
		{"descr not a string", npyWithHeader(1, "{'descr': 4, 'fortran_order': False, 'shape': (2,), }\n", f4), "element type 4 is not supported"},
		{"structured descr", npyWithHeader(1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }\n", f4), "not supported"},
		{"fortran_order not a bool", npyWithHeader(1, "{'descr': '<f4', 'fortran_order': 'yes', 'shape': (2,), }\n", f4), "'fortran_order'"},
		{"int32", npyWithHeader(1, "{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }\n", f4), "element type '<i4' is not supported"},
		{"bad byte order", npyWithHeader(1, "{'descr': '!f4', 'fortran_order': False, 'shape': (2,), }\n", f4), "not supported"},
		{"empty descr", npyWithHeader(1, "{'descr': '', 'fortran_order': False, 'shape': (2,), }\n", f4), "not supported"},
		{"dimension past int64", npyWithHeader(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }\n", f4), "too large"},
		{"huge vocabulary", npyWithHeader(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296,), }\n", f4), "too large"},
		{"huge matrix", npyWithHeader(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (2147483647, 2147483647), }\n", f4), "too large"},
		{"negative dimension", npyWithHeader(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, -1), }\n", f4), "empty"},
		{"non-ASCII header", npyWithHeader(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), '\xff': 1}\n", f4), "malformed .npy header"},
		{"trailing garbage", npyWithHeader(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), } x\n", f4), "malformed .npy header"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, err := decodeNPY(tc.file)
			assert.Nil(t, h)
			checkCleanError(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// TestDecodeNPYHeaderForms: the header forms NumPy writes (and a few it could) all read.
func TestDecodeNPYHeaderForms(t *testing.T) {
	data := []byte{0, 0, 0x80, 0x3f, 0, 0, 0, 0x40} // float32 1, 2
	for _, hdr := range []string{
		"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }\n",
		`{"descr": "<f4", "fortran_order": false, "shape": [2]}` + "\n", // JSON-ish
		"{'shape': (1, 2), 'fortran_order': True, 'descr': '<f4'}   \n",
		"{'descr':'<f4','fortran_order':False,'shape':(2,)}",
		"{'descr': '=f4', 'fortran_order': False, 'shape': (2L,), }\n",
	} {
		h, err := decodeNPY(npyWithHeader(1, hdr, data))
		require.NoError(t, err, hdr)
		assert.Equal(t, []float32{1, 2}, h.f32, hdr)
		assert.Equal(t, 2, h.rows*h.vocab, hdr)
	}
	h, err := decodeNPY(npyWithHeader(3, "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }\n", []byte{0x3f, 0x80, 0, 0, 0x40, 0, 0, 0}))
	require.NoError(t, err)
	assert.Equal(t, []float32{1, 2}, h.f32, "big-endian")
}

// TestReadNPYTruncatedHeaderMessage: the file of issue 21 says what is wrong in words.
func TestReadNPYTruncatedHeaderMessage(t *testing.T) {
	path := writeFile(t, "cut.npy", []byte("\x93NUMPY\x01\x00\xff\xff{'descr"))
	_, err := readNPY(path)
	checkCleanError(t, err)
	assert.True(t, strings.HasPrefix(err.Error(), path+": "), err.Error())
	assert.Contains(t, err.Error(), "truncated")
}
