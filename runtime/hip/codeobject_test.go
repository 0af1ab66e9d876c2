package hip

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The CI check reads the code objects hiprtc writes. Depending on the ROCm release that
// is a bare AMDGPU ELF or a clang offload bundle holding one ELF per target; this file
// unpacks both and lists the kernels inside.

// offloadBundleMagic starts an uncompressed clang offload bundle; compressedBundleMagic
// starts a compressed one (clang --offload-compress).
const (
	offloadBundleMagic    = "__CLANG_OFFLOAD_BUNDLE__"
	compressedBundleMagic = "CCOB"
)

// Bits of e_flags in an AMDGPU ELF (LLVM's ELF.h): the processor and, for code object
// v4 and later, the xnack and sramecc settings.
const amdgpuMachMask = 0x0ff

// bundleEntry is one item of an offload bundle.
type bundleEntry struct {
	id     string // e.g. "hipv4-amdgcn-amd-amdhsa--gfx90a"
	offset uint64
	size   uint64
}

// parseBundle reads the header of an uncompressed offload bundle: the magic, the
// number of entries, then for each entry its offset, size, id length and id, all
// little-endian 64-bit. Every entry is checked to lie inside the bundle.
func parseBundle(b []byte) ([]bundleEntry, error) {
	if !bytes.HasPrefix(b, []byte(offloadBundleMagic)) {
		return nil, errors.New("not a clang offload bundle")
	}
	r := bytes.NewReader(b[len(offloadBundleMagic):])
	var n uint64
	if err := binary.Read(r, binary.LittleEndian, &n); err != nil {
		return nil, fmt.Errorf("offload bundle: entry count: %w", err)
	}
	// Each entry takes at least 24 header bytes; a larger count is corrupt.
	if n == 0 || n > uint64(len(b))/24 {
		return nil, fmt.Errorf("offload bundle: implausible entry count %d", n)
	}
	entries := make([]bundleEntry, 0, n)
	for i := uint64(0); i < n; i++ {
		var hdr [3]uint64
		if err := binary.Read(r, binary.LittleEndian, &hdr); err != nil {
			return nil, fmt.Errorf("offload bundle: entry %d header: %w", i, err)
		}
		off, size, idLen := hdr[0], hdr[1], hdr[2]
		if idLen > uint64(r.Len()) {
			return nil, fmt.Errorf("offload bundle: entry %d id of %d bytes overruns the header", i, idLen)
		}
		id := make([]byte, idLen)
		if _, err := r.Read(id); err != nil && idLen > 0 {
			return nil, fmt.Errorf("offload bundle: entry %d id: %w", i, err)
		}
		if off > uint64(len(b)) || size > uint64(len(b))-off {
			return nil, fmt.Errorf("offload bundle: entry %q (%d bytes at %d) overruns the %d-byte bundle", id, size, off, len(b))
		}
		entries = append(entries, bundleEntry{id: string(id), offset: off, size: size})
	}
	return entries, nil
}

// codeObjectELF returns the AMDGPU ELF for target inside a code object: the object itself
// when it is an ELF, or the matching entry of an offload bundle.
func codeObjectELF(code []byte, target string) ([]byte, error) {
	switch {
	case bytes.HasPrefix(code, []byte(elf.ELFMAG)):
		return code, nil
	case bytes.HasPrefix(code, []byte(compressedBundleMagic)):
		return nil, errors.New("the code object is a compressed offload bundle, which this check does not unpack")
	case !bytes.HasPrefix(code, []byte(offloadBundleMagic)):
		n := min(len(code), 8)
		return nil, fmt.Errorf("the code object is neither an ELF nor an offload bundle (starts % x)", code[:n])
	}
	entries, err := parseBundle(code)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range entries {
		ids = append(ids, e.id)
		// An id is <kind>-<triple>-<target id>; the amdgcn triple has an empty
		// environment, hence "--" before the target id.
		_, tid, ok := strings.Cut(e.id, "amdgcn-amd-amdhsa-")
		if !ok {
			continue
		}
		tid = strings.TrimPrefix(tid, "-")
		if processorOf(tid) == processorOf(target) {
			return code[e.offset : e.offset+e.size], nil
		}
	}
	return nil, fmt.Errorf("the offload bundle has no entry for %s (entries: %s)", target, strings.Join(ids, ", "))
}

// kernelCodeProperties is where a kernel descriptor keeps its kernel_code_properties
// (16 bits), whose bit 10 says the kernel runs in wave32 (LLVM AMDGPUUsage, "Kernel
// Descriptor").
const (
	kernelCodePropertiesOffset = 56
	kernelDescriptorSize       = 64
	wave32Bit                  = 1 << 10
)

// waveSize returns the wavefront size a kernel descriptor asks for.
func waveSize(kd []byte) (int, error) {
	if len(kd) != kernelDescriptorSize {
		return 0, fmt.Errorf("kernel descriptor of %d bytes, not %d", len(kd), kernelDescriptorSize)
	}
	if binary.LittleEndian.Uint16(kd[kernelCodePropertiesOffset:])&wave32Bit != 0 {
		return 32, nil
	}
	return 64, nil
}

// amdgpuObject is what the check reads from an AMDGPU ELF.
type amdgpuObject struct {
	// mach is the processor number from e_flags (EF_AMDGPU_MACH).
	mach uint32
	// kernels maps each kernel, a global function with a kernel descriptor
	// (<name>.kd), to its descriptor's 64 bytes.
	kernels map[string][]byte
}

// parseAMDGPU checks that b is a 64-bit little-endian AMDGPU ELF (e_machine EM_AMDGPU,
// 224) and lists its kernels.
func parseAMDGPU(b []byte) (*amdgpuObject, error) {
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("not an ELF: %w", err)
	}
	defer f.Close()
	if f.Machine != elf.EM_AMDGPU {
		return nil, fmt.Errorf("ELF machine is %v, not EM_AMDGPU", f.Machine)
	}
	if f.Class != elf.ELFCLASS64 || f.Data != elf.ELFDATA2LSB {
		return nil, fmt.Errorf("ELF is %v %v, not 64-bit little-endian", f.Class, f.Data)
	}
	syms, err := f.Symbols()
	if err != nil {
		return nil, fmt.Errorf("ELF symbols: %w", err)
	}
	funcs := map[string]bool{}
	descriptors := map[string]elf.Symbol{}
	for _, s := range syms {
		if elf.ST_BIND(s.Info) != elf.STB_GLOBAL || s.Section == elf.SHN_UNDEF {
			continue
		}
		switch elf.ST_TYPE(s.Info) {
		case elf.STT_FUNC:
			funcs[s.Name] = true
		case elf.STT_OBJECT:
			if name, ok := strings.CutSuffix(s.Name, ".kd"); ok {
				descriptors[name] = s
			}
		}
	}
	obj := &amdgpuObject{mach: elfFlags(b) & amdgpuMachMask, kernels: map[string][]byte{}}
	for name, s := range descriptors {
		if !funcs[name] {
			continue
		}
		kd, err := symbolBytes(f, s)
		if err != nil {
			return nil, fmt.Errorf("kernel descriptor %s.kd: %w", name, err)
		}
		obj.kernels[name] = kd
	}
	return obj, nil
}

// elfFlags returns e_flags of a 64-bit little-endian ELF header (debug/elf does not
// expose it).
func elfFlags(b []byte) uint32 {
	const flagsOffset = 48 // e_ident(16) type(2) machine(2) version(4) entry(8) phoff(8) shoff(8)
	if len(b) < flagsOffset+4 {
		return 0
	}
	return binary.LittleEndian.Uint32(b[flagsOffset:])
}

// symbolBytes returns the bytes a symbol names inside its section.
func symbolBytes(f *elf.File, s elf.Symbol) ([]byte, error) {
	if int(s.Section) >= len(f.Sections) {
		return nil, fmt.Errorf("section %d does not exist", s.Section)
	}
	sec := f.Sections[s.Section]
	data, err := sec.Data()
	if err != nil {
		return nil, err
	}
	if s.Value < sec.Addr || s.Size > uint64(len(data)) || s.Value-sec.Addr > uint64(len(data))-s.Size {
		return nil, fmt.Errorf("%d bytes at %#x lie outside section %s", s.Size, s.Value, sec.Name)
	}
	off := s.Value - sec.Addr
	return data[off : off+s.Size], nil
}

// sortedKeys returns the keys of m in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// testSymbol is one symbol of a synthetic ELF.
type testSymbol struct {
	name string
	typ  elf.SymType
	bind elf.SymBind
	// data is what the symbol names (a kernel descriptor); nil for a function.
	data []byte
}

// buildELF writes a minimal 64-bit little-endian ELF: a .rodata section holding the
// symbols' data, a symbol table and the string tables.
func buildELF(machine elf.Machine, flags uint32, syms []testSymbol) []byte {
	var rodata []byte
	strtab := []byte{0}
	symtab := make([]elf.Sym64, 1, len(syms)+1) // entry 0 is the null symbol
	const rodataIndex = 1
	for _, s := range syms {
		sym := elf.Sym64{Name: uint32(len(strtab)), Info: elf.ST_INFO(s.bind, s.typ), Shndx: rodataIndex,
			Value: uint64(len(rodata)), Size: uint64(len(s.data))}
		strtab = append(append(strtab, s.name...), 0)
		rodata = append(rodata, s.data...)
		symtab = append(symtab, sym)
	}
	var symBytes bytes.Buffer
	binary.Write(&symBytes, binary.LittleEndian, symtab)
	shstrtab := []byte("\x00.rodata\x00.symtab\x00.strtab\x00.shstrtab\x00")
	names := map[string]uint32{".rodata": 1, ".symtab": 9, ".strtab": 17, ".shstrtab": 25}

	const ehdrSize, shdrSize = 64, 64
	bodies := [][]byte{rodata, symBytes.Bytes(), strtab, shstrtab}
	offsets := make([]uint64, len(bodies))
	off := uint64(ehdrSize)
	for i, b := range bodies {
		offsets[i] = off
		off += uint64(len(b))
	}
	shoff := (off + 7) &^ 7
	sections := []elf.Section64{
		{},
		{Name: names[".rodata"], Type: uint32(elf.SHT_PROGBITS), Flags: uint64(elf.SHF_ALLOC), Off: offsets[0], Size: uint64(len(rodata)), Addralign: 1},
		{Name: names[".symtab"], Type: uint32(elf.SHT_SYMTAB), Off: offsets[1], Size: uint64(symBytes.Len()), Link: 3, Info: 1, Addralign: 8, Entsize: 24},
		{Name: names[".strtab"], Type: uint32(elf.SHT_STRTAB), Off: offsets[2], Size: uint64(len(strtab)), Addralign: 1},
		{Name: names[".shstrtab"], Type: uint32(elf.SHT_STRTAB), Off: offsets[3], Size: uint64(len(shstrtab)), Addralign: 1},
	}
	hdr := elf.Header64{Type: uint16(elf.ET_DYN), Machine: uint16(machine), Version: uint32(elf.EV_CURRENT), Shoff: shoff,
		Flags: flags, Ehsize: ehdrSize, Shentsize: shdrSize, Shnum: uint16(len(sections)), Shstrndx: 4}
	copy(hdr.Ident[:], elf.ELFMAG)
	hdr.Ident[elf.EI_CLASS] = byte(elf.ELFCLASS64)
	hdr.Ident[elf.EI_DATA] = byte(elf.ELFDATA2LSB)
	hdr.Ident[elf.EI_VERSION] = byte(elf.EV_CURRENT)
	hdr.Ident[elf.EI_OSABI] = 64 // ELFOSABI_AMDGPU_HSA

	var out bytes.Buffer
	binary.Write(&out, binary.LittleEndian, hdr)
	for _, b := range bodies {
		out.Write(b)
	}
	out.Write(make([]byte, shoff-off))
	binary.Write(&out, binary.LittleEndian, sections)
	return out.Bytes()
}

// kernelSymbols returns a function and its descriptor; wave32 sets the descriptor's
// wavefront bit.
func kernelSymbols(name string, wave32 bool) []testSymbol {
	kd := make([]byte, kernelDescriptorSize)
	if wave32 {
		binary.LittleEndian.PutUint16(kd[kernelCodePropertiesOffset:], wave32Bit|0x8)
	} else {
		binary.LittleEndian.PutUint16(kd[kernelCodePropertiesOffset:], 0x8)
	}
	return []testSymbol{
		{name: name, typ: elf.STT_FUNC, bind: elf.STB_GLOBAL},
		{name: name + ".kd", typ: elf.STT_OBJECT, bind: elf.STB_GLOBAL, data: kd},
	}
}

// bundle writes an uncompressed clang offload bundle of the given entries.
func bundle(entries map[string][]byte, order []string) []byte {
	header := len(offloadBundleMagic) + 8
	for _, id := range order {
		header += 24 + len(id)
	}
	var out bytes.Buffer
	out.WriteString(offloadBundleMagic)
	binary.Write(&out, binary.LittleEndian, uint64(len(order)))
	off := uint64(header)
	for _, id := range order {
		binary.Write(&out, binary.LittleEndian, [3]uint64{off, uint64(len(entries[id])), uint64(len(id))})
		out.WriteString(id)
		off += uint64(len(entries[id]))
	}
	for _, id := range order {
		out.Write(entries[id])
	}
	return out.Bytes()
}

func TestParseAMDGPU(t *testing.T) {
	syms := append(kernelSymbols("k_wave64", false), kernelSymbols("k_wave32", true)...)
	syms = append(syms,
		testSymbol{name: "helper", typ: elf.STT_FUNC, bind: elf.STB_GLOBAL},                              // no descriptor: not a kernel
		testSymbol{name: "orphan.kd", typ: elf.STT_OBJECT, bind: elf.STB_GLOBAL, data: make([]byte, 64)}, // no function
		testSymbol{name: "local", typ: elf.STT_FUNC, bind: elf.STB_LOCAL},
	)
	obj, err := parseAMDGPU(buildELF(elf.EM_AMDGPU, 0x53f, syms))
	require.NoError(t, err)
	assert.Equal(t, uint32(0x3f), obj.mach)
	assert.Equal(t, []string{"k_wave32", "k_wave64"}, sortedKeys(obj.kernels))
	w, err := waveSize(obj.kernels["k_wave32"])
	require.NoError(t, err)
	assert.Equal(t, 32, w)
	w, err = waveSize(obj.kernels["k_wave64"])
	require.NoError(t, err)
	assert.Equal(t, 64, w)

	_, err = parseAMDGPU(buildELF(elf.EM_X86_64, 0, syms))
	assert.ErrorContains(t, err, "EM_AMDGPU")
	_, err = parseAMDGPU([]byte("\x7fELF garbage"))
	assert.Error(t, err)
	_, err = waveSize(make([]byte, 10))
	assert.Error(t, err)
}

func TestCodeObjectELF(t *testing.T) {
	elf90a := buildELF(elf.EM_AMDGPU, 0x3f, kernelSymbols("k", false))
	elf1030 := buildELF(elf.EM_AMDGPU, 0x36, kernelSymbols("k", true))
	host := []byte("host code")
	ids := []string{"host-x86_64-unknown-linux", "hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-", "hipv4-amdgcn-amd-amdhsa--gfx1030"}
	multi := bundle(map[string][]byte{ids[0]: host, ids[1]: elf90a, ids[2]: elf1030}, ids)

	tests := []struct {
		name    string
		code    []byte
		target  string
		want    []byte
		wantErr string
	}{
		{"bare ELF", elf90a, "gfx90a", elf90a, ""},
		{"bundle, first target", multi, "gfx90a", elf90a, ""},
		{"bundle, target with features", multi, "gfx90a:sramecc+", elf90a, ""},
		{"bundle, second target", multi, "gfx1030", elf1030, ""},
		{"bundle without the target", multi, "gfx942", nil, "no entry for gfx942"},
		{"compressed bundle", []byte("CCOB\x01\x00\x02\x00rest"), "gfx90a", nil, "compressed"},
		{"neither", []byte("MZ\x90\x00"), "gfx90a", nil, "neither an ELF"},
		{"empty", nil, "gfx90a", nil, "neither an ELF"},
		{"truncated header", multi[:len(offloadBundleMagic)+4], "gfx90a", nil, "entry count"},
		{"entry past the end", multi[:len(multi)-10], "gfx1030", nil, "overruns"},
		{"zero entries", append([]byte(offloadBundleMagic), make([]byte, 8)...), "gfx90a", nil, "implausible entry count"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := codeObjectELF(tc.code, tc.target)
			if tc.wantErr != "" {
				assert.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestParseBundleRejectsHugeCounts(t *testing.T) {
	b := []byte(offloadBundleMagic)
	b = binary.LittleEndian.AppendUint64(b, 1<<40)
	_, err := parseBundle(b)
	assert.ErrorContains(t, err, "implausible")

	// An id longer than what follows.
	b = []byte(offloadBundleMagic)
	b = binary.LittleEndian.AppendUint64(b, 1)
	for _, v := range []uint64{0, 0, 1 << 20} {
		b = binary.LittleEndian.AppendUint64(b, v)
	}
	_, err = parseBundle(b)
	assert.ErrorContains(t, err, "overruns the header")
}
