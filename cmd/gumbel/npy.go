package main

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"

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
	// decodeNPY checks every size before it uses it; this is a last line of defence, so
	// that a file it did not foresee is still an error, not a crash.
	defer func() {
		if p := recover(); p != nil {
			h, err = nil, fmt.Errorf("%s: malformed .npy file: the reader failed on it (%v)", path, p)
		}
	}()
	h, err = decodeNPY(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return h, nil
}

// The .npy format (numpy.lib.format): the magic, a major and minor version byte, the
// header's length (2 bytes little-endian in version 1, 4 in versions 2 and 3), the
// header (a Python dict literal), then the data.
const (
	npyMagic = "\x93NUMPY"
	// maxNPYHeader bounds the header (NumPy writes about a hundred bytes; its reader
	// refuses more than 10000 by default).
	maxNPYHeader = 1 << 20
)

// npyKind is the element type of a .npy file and its byte order.
func npyKind(descr string) (kind string, order binary.ByteOrder, err error) {
	t := descr
	order = binary.NativeEndian
	if t != "" {
		switch t[0] {
		case '<':
			order, t = binary.LittleEndian, t[1:]
		case '>':
			order, t = binary.BigEndian, t[1:]
		case '=', '|':
			t = t[1:]
		}
	}
	switch t {
	case "f2", "f4", "f8":
		return t, order, nil
	}
	return "", nil, fmt.Errorf("element type '%s' is not supported: save the logits as float32 (or float16, float64)", descr)
}

// npyHeader is what decodeNPY needs of a header.
type npyHeader struct {
	descr   string
	order   binary.ByteOrder
	kind    string
	fortran bool
	shape   []int64
	// huge is set when a dimension does not fit in an int64.
	huge bool
}

// splitNPY checks the preamble of raw and returns its header text and the data after it.
func splitNPY(raw []byte) (header string, data []byte, err error) {
	if len(raw) < len(npyMagic) || string(raw[:len(npyMagic)]) != npyMagic {
		if len(raw) < len(npyMagic) && string(raw) == npyMagic[:len(raw)] && len(raw) > 0 {
			return "", nil, fmt.Errorf("malformed .npy file: truncated after %d bytes, inside the magic", len(raw))
		}
		return "", nil, fmt.Errorf("not a .npy file: it does not start with the \\x93NUMPY magic")
	}
	rest := raw[len(npyMagic):]
	if len(rest) < 2 {
		return "", nil, fmt.Errorf("malformed .npy file: truncated after %d bytes, before its format version", len(raw))
	}
	major, minor := rest[0], rest[1]
	rest = rest[2:]
	var size uint64
	switch major {
	case 1:
		if len(rest) < 2 {
			return "", nil, fmt.Errorf("malformed .npy file: truncated after %d bytes, inside the header length", len(raw))
		}
		size, rest = uint64(binary.LittleEndian.Uint16(rest)), rest[2:]
	case 2, 3:
		if len(rest) < 4 {
			return "", nil, fmt.Errorf("malformed .npy file: truncated after %d bytes, inside the header length", len(raw))
		}
		size, rest = uint64(binary.LittleEndian.Uint32(rest)), rest[4:]
	default:
		return "", nil, fmt.Errorf("not a .npy file this reader knows: format version %d.%d (want 1.0, 2.0 or 3.0)", major, minor)
	}
	if size > uint64(len(rest)) {
		return "", nil, fmt.Errorf("malformed .npy file: truncated: a header of %d bytes announced, %d bytes follow the preamble", size, len(rest))
	}
	if size > maxNPYHeader {
		return "", nil, fmt.Errorf("malformed .npy file: a header of %d bytes (at most %d)", size, maxNPYHeader)
	}
	return string(rest[:size]), rest[size:], nil
}

// parseNPYHeader reads the dict of a header: 'descr' (a type string), 'fortran_order' (a
// bool, False when absent) and 'shape' (a tuple of integers).
func parseNPYHeader(text string) (npyHeader, error) {
	var h npyHeader
	for i := 0; i < len(text); i++ {
		if c := text[i]; c >= 0x7f || (c < ' ' && c != '\n' && c != '\r' && c != '\t') {
			return h, fmt.Errorf("malformed .npy header: byte %#x at offset %d is not printable ASCII", c, i)
		}
	}
	p := &pyParser{s: text}
	v, err := p.value(0)
	if err == nil {
		p.skipSpace()
		if p.i < len(p.s) {
			err = p.errorf("unexpected %q after the dict", snippet(p.s[p.i:]))
		}
	}
	if err != nil {
		return h, fmt.Errorf("malformed .npy header: %w", err)
	}
	if v.kind != pyDict {
		return h, fmt.Errorf("malformed .npy header: not a dict: %s", v.text)
	}
	descr, ok := v.get("descr")
	if !ok {
		return h, fmt.Errorf("malformed .npy header: no 'descr' key (the element type)")
	}
	if descr.kind != pyString {
		// A structured or subarray type: a list or tuple of fields.
		return h, fmt.Errorf("element type %s is not supported: save the logits as float32 (or float16, float64)", descr.text)
	}
	h.descr = descr.str
	if h.kind, h.order, err = npyKind(descr.str); err != nil {
		return h, err
	}
	if f, ok := v.get("fortran_order"); ok {
		if f.kind != pyBool {
			return h, fmt.Errorf("malformed .npy header: 'fortran_order' must be True or False, got %s", f.text)
		}
		h.fortran = f.b
	}
	shape, ok := v.get("shape")
	if !ok {
		return h, fmt.Errorf("malformed .npy header: no 'shape' key")
	}
	if shape.kind != pyTuple {
		return h, fmt.Errorf("malformed .npy header: 'shape' must be a tuple of integers, got %s", shape.text)
	}
	for _, d := range shape.items {
		if d.kind != pyInt {
			return h, fmt.Errorf("malformed .npy header: 'shape' must be a tuple of integers, got %s", shape.text)
		}
		h.shape = append(h.shape, d.num)
		h.huge = h.huge || d.huge
	}
	return h, nil
}

func decodeNPY(raw []byte) (*hostLogits, error) {
	text, data, err := splitNPY(raw)
	if err != nil {
		return nil, err
	}
	hdr, err := parseNPYHeader(text)
	if err != nil {
		return nil, err
	}
	shape := hdr.shape
	h := &hostLogits{}
	switch len(shape) {
	case 1:
		h.rows, h.vocab = 1, int(shape[0])
	case 2:
		h.rows, h.vocab = int(shape[0]), int(shape[1])
	default:
		return nil, fmt.Errorf("shape %v: want [V] or [B, V]", shape)
	}
	if hdr.huge {
		return nil, fmt.Errorf("shape %s: too large", hdr.shapeText())
	}
	if h.rows < 1 || h.vocab < 1 {
		return nil, fmt.Errorf("shape %v: empty", shape)
	}
	if h.vocab > maxVocab {
		return nil, fmt.Errorf("shape %v: vocabulary %d is too large (at most %d)", shape, h.vocab, maxVocab)
	}
	esize := int(hdr.kind[1] - '0')
	n := h.rows * h.vocab
	if n/h.rows != h.vocab || n > math.MaxInt/esize {
		return nil, fmt.Errorf("shape %v: too large", shape)
	}
	if len(data) < n*esize {
		return nil, fmt.Errorf("shape %v needs %d bytes of %s data, the file holds %d", shape, n*esize, hdr.kind, len(data))
	}
	data = data[:n*esize]
	order := hdr.order
	switch hdr.kind {
	case "f4":
		h.dtype, h.f32 = sampler.Float32, make([]float32, n)
		for i := range h.f32 {
			h.f32[i] = math.Float32frombits(order.Uint32(data[4*i:]))
		}
	case "f8":
		h.dtype, h.f32 = sampler.Float32, make([]float32, n)
		for i := range h.f32 {
			h.f32[i] = float32(math.Float64frombits(order.Uint64(data[8*i:])))
		}
		h.note = "float64 logits converted to float32"
	case "f2":
		h.dtype, h.bits = sampler.Float16, make([]uint16, n)
		for i := range h.bits {
			h.bits[i] = order.Uint16(data[2*i:])
		}
	}
	if hdr.fortran && h.rows > 1 {
		h.transpose()
	}
	return h, nil
}

// shapeText is the shape as the header wrote it, for a shape with a dimension past int64.
func (h npyHeader) shapeText() string {
	if h.huge {
		return "(a dimension beyond 2^63)"
	}
	return fmt.Sprint(h.shape)
}

// pyParser reads the Python literals a .npy header is made of: dicts with string keys,
// tuples and lists, strings, integers, True, False and None.
type pyParser struct {
	s string
	i int
}

type pyKind uint8

const (
	pyString pyKind = iota
	pyInt
	pyBool
	pyNone
	pyTuple // a tuple or a list
	pyDict
)

type pyValue struct {
	kind  pyKind
	str   string
	num   int64
	huge  bool // an integer beyond int64
	b     bool
	items []pyValue // tuple and list items; dict values
	keys  []string  // dict keys
	text  string    // the literal as written
}

// get returns the dict value of key (the last one when repeated, as Python keeps).
func (v pyValue) get(key string) (pyValue, bool) {
	for i := len(v.keys) - 1; i >= 0; i-- {
		if v.keys[i] == key {
			return v.items[i], true
		}
	}
	return pyValue{}, false
}

// maxPyDepth bounds nesting: a header nests two levels deep.
const maxPyDepth = 8

// snippet is the start of s for an error message.
func snippet(s string) string {
	return strings.TrimSpace(s[:min(16, len(s))])
}

func (p *pyParser) errorf(format string, a ...any) error {
	return fmt.Errorf("at offset %d: %s", p.i, fmt.Sprintf(format, a...))
}

func (p *pyParser) skipSpace() {
	for p.i < len(p.s) && strings.IndexByte(" \t\r\n", p.s[p.i]) >= 0 {
		p.i++
	}
}

func (p *pyParser) value(depth int) (pyValue, error) {
	if depth > maxPyDepth {
		return pyValue{}, p.errorf("nested more than %d levels", maxPyDepth)
	}
	p.skipSpace()
	if p.i >= len(p.s) {
		return pyValue{}, p.errorf("the header ends where a value should be")
	}
	start := p.i
	var v pyValue
	var err error
	switch c := p.s[p.i]; {
	case c == '\'' || c == '"':
		v, err = p.str()
	case c == '{':
		v, err = p.dict(depth)
	case c == '(':
		v, err = p.seq(depth, ')')
	case c == '[':
		v, err = p.seq(depth, ']')
	case c == '-' || c == '+' || (c >= '0' && c <= '9'):
		v, err = p.integer()
	default:
		v, err = p.word()
	}
	if err != nil {
		return v, err
	}
	v.text = p.s[start:p.i]
	return v, nil
}

func (p *pyParser) str() (pyValue, error) {
	q := p.s[p.i]
	end := strings.IndexByte(p.s[p.i+1:], q)
	if end < 0 {
		return pyValue{}, p.errorf("unterminated string")
	}
	v := pyValue{kind: pyString, str: p.s[p.i+1 : p.i+1+end]}
	if strings.IndexByte(v.str, '\\') >= 0 {
		return pyValue{}, p.errorf("escapes in strings are not supported")
	}
	p.i += end + 2
	return v, nil
}

func (p *pyParser) integer() (pyValue, error) {
	start := p.i
	if c := p.s[p.i]; c == '-' || c == '+' {
		p.i++
	}
	digits := p.i
	for p.i < len(p.s) && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
		p.i++
	}
	if p.i == digits {
		return pyValue{}, p.errorf("a sign without digits")
	}
	lit := p.s[start:p.i]
	if p.i < len(p.s) && (p.s[p.i] == 'L' || p.s[p.i] == 'l') {
		p.i++ // Python 2's long suffix
	}
	n, err := strconv.ParseInt(lit, 10, 64)
	if err != nil {
		// Only a range error is left: the digits were checked above.
		return pyValue{kind: pyInt, huge: true}, nil
	}
	return pyValue{kind: pyInt, num: n}, nil
}

func (p *pyParser) word() (pyValue, error) {
	start := p.i
	for p.i < len(p.s) && (p.s[p.i] >= 'a' && p.s[p.i] <= 'z' || p.s[p.i] >= 'A' && p.s[p.i] <= 'Z') {
		p.i++
	}
	switch p.s[start:p.i] {
	case "True", "true":
		return pyValue{kind: pyBool, b: true}, nil
	case "False", "false":
		return pyValue{kind: pyBool}, nil
	case "None", "null":
		return pyValue{kind: pyNone}, nil
	}
	p.i = start
	return pyValue{}, p.errorf("unexpected %q", snippet(p.s[start:]))
}

// seq reads a tuple or a list up to close; a trailing comma is allowed.
func (p *pyParser) seq(depth int, close byte) (pyValue, error) {
	p.i++
	v := pyValue{kind: pyTuple}
	for {
		p.skipSpace()
		if p.i >= len(p.s) {
			return pyValue{}, p.errorf("unterminated %q", string(close))
		}
		if p.s[p.i] == close {
			p.i++
			return v, nil
		}
		item, err := p.value(depth + 1)
		if err != nil {
			return pyValue{}, err
		}
		v.items = append(v.items, item)
		if err := p.separator(close); err != nil {
			return pyValue{}, err
		}
	}
}

// separator consumes the comma after an item, or sees the closing bracket.
func (p *pyParser) separator(close byte) error {
	p.skipSpace()
	switch {
	case p.i >= len(p.s):
		return p.errorf("unterminated %q", string(close))
	case p.s[p.i] == ',':
		p.i++
		return nil
	case p.s[p.i] == close:
		return nil
	}
	return p.errorf("want ',' or %q, got %q", string(close), p.s[p.i:p.i+1])
}

func (p *pyParser) dict(depth int) (pyValue, error) {
	p.i++
	v := pyValue{kind: pyDict}
	for {
		p.skipSpace()
		if p.i >= len(p.s) {
			return pyValue{}, p.errorf("unterminated '}'")
		}
		if p.s[p.i] == '}' {
			p.i++
			return v, nil
		}
		key, err := p.value(depth + 1)
		if err != nil {
			return pyValue{}, err
		}
		if key.kind != pyString {
			return pyValue{}, p.errorf("dict key %s is not a string", key.text)
		}
		p.skipSpace()
		if p.i >= len(p.s) || p.s[p.i] != ':' {
			return pyValue{}, p.errorf("want ':' after the key %s", key.text)
		}
		p.i++
		val, err := p.value(depth + 1)
		if err != nil {
			return pyValue{}, err
		}
		v.keys, v.items = append(v.keys, key.str), append(v.items, val)
		if err := p.separator('}'); err != nil {
			return pyValue{}, err
		}
	}
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
