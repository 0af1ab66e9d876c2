//go:build linux

package dynlib

import (
	"bufio"
	"os"
	"strconv"
	"strings"

	"github.com/ebitengine/purego"
)

// Open loads a shared library by name or path. RTLD_LOCAL keeps the library's symbols
// (a driver's, or the LLVM inside a run-time compiler) out of the process's global
// namespace.
func Open(path string) (uintptr, error) {
	return purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
}

// Symbol returns the address of an exported function, or 0 when it is missing.
func Symbol(lib uintptr, name string) uintptr {
	p, err := purego.Dlsym(lib, name)
	if err != nil {
		return 0
	}
	return p
}

// LoadedPath returns the file the loader mapped for the library that holds the function
// at addr: the loader may resolve a bare soname through LD_LIBRARY_PATH to a path the
// caller never named (such as the CUDA toolkit's stub libcuda). Empty when unknown.
func LoadedPath(addr uintptr) string {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// address-range perms offset dev inode path
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 {
			continue
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		if !ok {
			continue
		}
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		if uint64(addr) >= start && uint64(addr) < end {
			return strings.Join(fields[5:], " ")
		}
	}
	return ""
}
