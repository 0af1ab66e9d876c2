package cuda

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/assert"
)

// miniELF builds a little-endian ELF64 file holding the named sections, enough for
// debug/elf to read them back.
func miniELF(sections map[string][]byte, order []string) []byte {
	le := binary.LittleEndian
	shstr := []byte{0}
	nameOff := map[string]int{}
	for _, n := range append(order, ".shstrtab") {
		nameOff[n] = len(shstr)
		shstr = append(append(shstr, n...), 0)
	}
	out := make([]byte, 64)
	type hdr struct{ name, off, size int }
	var hdrs []hdr
	for _, n := range order {
		hdrs = append(hdrs, hdr{nameOff[n], len(out), len(sections[n])})
		out = append(out, sections[n]...)
	}
	hdrs = append(hdrs, hdr{nameOff[".shstrtab"], len(out), len(shstr)})
	out = append(out, shstr...)
	for len(out)%8 != 0 {
		out = append(out, 0)
	}
	shoff := len(out)
	out = append(out, make([]byte, 64)...) // the null section
	for i, h := range hdrs {
		sh := make([]byte, 64)
		le.PutUint32(sh[0:], uint32(h.name))
		typ := uint32(0x70000000) // SHT_LOPROC, as CUBINs mark .nv.info sections
		if i == len(hdrs)-1 {
			typ = 3 // SHT_STRTAB
		}
		le.PutUint32(sh[4:], typ)
		le.PutUint64(sh[24:], uint64(h.off))
		le.PutUint64(sh[32:], uint64(h.size))
		le.PutUint64(sh[48:], 1)
		out = append(out, sh...)
	}
	copy(out[0:], []byte{0x7f, 'E', 'L', 'F', 2, 1, 1})
	le.PutUint16(out[16:], 2)   // ET_EXEC
	le.PutUint16(out[18:], 190) // EM_CUDA
	le.PutUint32(out[20:], 1)
	le.PutUint64(out[40:], uint64(shoff))
	le.PutUint16(out[52:], 64)
	le.PutUint16(out[58:], 64)
	le.PutUint16(out[60:], uint16(len(hdrs)+1))
	le.PutUint16(out[62:], uint16(len(hdrs)))
	return out
}

// kparam is an EIATTR_KPARAM_INFO entry for the parameter of that ordinal.
func kparam(ordinal, offset uint16) []byte {
	e := []byte{eiFormatSized, eiAttrKParam, 12, 0, 0, 0, 0, 0}
	e = binary.LittleEndian.AppendUint16(e, ordinal)
	e = binary.LittleEndian.AppendUint16(e, offset)
	return append(e, 0, 0, 0x10, 0) // flags: a 4-byte parameter
}

func TestCubinParamCount(t *testing.T) {
	var info []byte
	info = append(info, 0x04, 0x0a, 8, 0, 1, 0, 0, 0, 0x60, 1, 0x24, 0) // EIATTR_PARAM_CBANK
	info = append(info, 0x03, 0x19, 0x24, 0)                            // EIATTR_CBANK_PARAM_SIZE
	for _, o := range []uint16{2, 0, 1} {                               // any order
		info = append(info, kparam(o, 8*o)...)
	}
	info = append(info, 0x01, 0x50, 0, 0) // a flag entry without a value
	img := miniELF(map[string][]byte{".nv.info.k": info, ".nv.info.empty": {0x03, 0x19, 0, 0}}, []string{".nv.info.k", ".nv.info.empty"})

	tests := []struct {
		name   string
		image  []byte
		kernel string
		want   int
		ok     bool
	}{
		{"three parameters", img, "k", 3, true},
		{"no parameter entries", img, "empty", 0, false},
		{"no such kernel", img, "other", 0, false},
		{"not an ELF (PTX)", []byte(".version 8.0\n.target sm_90\n"), "k", 0, false},
		{"truncated entry", miniELF(map[string][]byte{".nv.info.k": {0x04, 0x17, 12, 0, 1}}, []string{".nv.info.k"}), "k", 0, false},
		{"unknown format", miniELF(map[string][]byte{".nv.info.k": {0x09, 0x17, 0, 0}}, []string{".nv.info.k"}), "k", 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n, ok := cubinParamCount(tc.image, tc.kernel)
			assert.Equal(t, tc.ok, ok)
			assert.Equal(t, tc.want, n)
		})
	}
}
