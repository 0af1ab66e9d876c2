package cuda

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
)

// The per-kernel attribute section of a CUBIN, ".nv.info.<kernel>", is a list of
// entries: a format byte, an attribute byte, then either a 16-bit value or (format
// eiFormatSized) a 16-bit payload size and the payload. Each kernel parameter has one
// EIATTR_KPARAM_INFO entry whose payload holds the parameter's ordinal at bytes 4-5.
const (
	eiFormatNone  = 0x01
	eiFormatByte  = 0x02
	eiFormatHalf  = 0x03
	eiFormatSized = 0x04
	eiAttrKParam  = 0x17
)

// cubinParamCount returns how many parameters a kernel of a CUBIN takes, read from its
// .nv.info section, and false when the image is not an ELF or holds no such entries.
// It lets a launch check the argument count without probing cuFuncGetParamInfo past the
// last parameter, a failing call that compute-sanitizer reports as an API error.
func cubinParamCount(image []byte, kernel string) (int, bool) {
	f, err := elf.NewFile(bytes.NewReader(image))
	if err != nil {
		return 0, false
	}
	sec := f.Section(".nv.info." + kernel)
	if sec == nil {
		return 0, false
	}
	data, err := sec.Data()
	if err != nil {
		return 0, false
	}
	count, found := 0, false
	for len(data) >= 4 {
		format, attr := data[0], data[1]
		switch format {
		case eiFormatNone, eiFormatByte, eiFormatHalf:
			data = data[4:]
		case eiFormatSized:
			size := int(binary.LittleEndian.Uint16(data[2:4]))
			if len(data) < 4+size {
				return 0, false
			}
			if attr == eiAttrKParam && size >= 8 {
				ordinal := int(binary.LittleEndian.Uint16(data[8:10]))
				count, found = max(count, ordinal+1), true
			}
			data = data[4+size:]
		default:
			return 0, false
		}
	}
	return count, found
}
