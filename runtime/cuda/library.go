package cuda

import (
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"sort"
	"strings"
	"sync"

	"github.com/gumbel-go/gumbel/internal/dynlib"
	"github.com/gumbel-go/gumbel/runtime"
)

// Environment variables that name the libraries explicitly.
const (
	EnvCUDALibrary  = "GUMBEL_CUDA_LIBRARY"
	EnvNVRTCLibrary = "GUMBEL_NVRTC_LIBRARY"
)

// isStub reports a path inside a folder named stubs: the CUDA toolkit ships a libcuda
// there for linking only, and loading it makes every call fail with
// CUDA_ERROR_STUB_LIBRARY.
func isStub(path string) bool {
	parts := strings.FieldsFunc(path, func(r rune) bool { return r == '/' || r == '\\' })
	for _, p := range parts[:max(len(parts)-1, 0)] {
		if strings.EqualFold(p, "stubs") {
			return true
		}
	}
	return false
}

// linuxTriple is the multiarch folder name of the running architecture.
func linuxTriple() string {
	if goruntime.GOARCH == "arm64" {
		return "aarch64-linux-gnu"
	}
	return "x86_64-linux-gnu"
}

// toolkitTargets are the CUDA toolkit's per-target library folders for this
// architecture (sbsa for Arm servers, aarch64 for Jetson).
func toolkitTargets() []string {
	if goruntime.GOARCH == "arm64" {
		return []string{"sbsa-linux", "aarch64-linux"}
	}
	return []string{"x86_64-linux"}
}

// driverSearch is where libcuda is looked for. The driver is installed system-wide, so the
// loader's own search finds it almost always; the folders cover a missing ld.so.cache
// entry and WSL.
func driverSearch() runtime.LibrarySearch {
	s := runtime.LibrarySearch{What: "libcuda (the NVIDIA driver)", EnvVar: EnvCUDALibrary, Reject: isStub}
	if goruntime.GOOS == "windows" {
		s.Names = []string{"nvcuda.dll"}
		return s
	}
	s.Names = []string{"libcuda.so.1", "libcuda.so"}
	s.Dirs = []string{"/usr/lib/" + linuxTriple(), "/usr/lib64", "/usr/lib/wsl/lib"}
	return s
}

// nvrtcSearch is where libnvrtc is looked for: the versioned sonames, then the toolkit's
// folders and the pip wheels' (nvidia-cuda-nvrtc for CUDA 12, nvidia-cu13 for 13).
func nvrtcSearch() runtime.LibrarySearch {
	s := runtime.LibrarySearch{What: "libnvrtc (the CUDA run-time compiler)", EnvVar: EnvNVRTCLibrary, Reject: isStub}
	var roots []string
	for _, env := range []string{"CUDA_HOME", "CUDA_PATH"} {
		if v := os.Getenv(env); v != "" {
			roots = append(roots, v)
		}
	}
	if goruntime.GOOS == "windows" {
		s.Names = []string{"nvrtc64_130_0.dll", "nvrtc64_120_0.dll"}
		for _, r := range roots {
			// CUDA 13 moved the DLLs to bin\x64.
			s.Dirs = append(s.Dirs, filepath.Join(r, "bin", "x64"), filepath.Join(r, "bin"))
		}
		return s
	}
	s.Names = []string{"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"}
	roots = append(roots, "/usr/local/cuda")
	roots = append(roots, newestFirst(glob("/usr/local/cuda-*"))...)
	for _, r := range roots {
		s.Dirs = append(s.Dirs, filepath.Join(r, "lib64"))
		for _, t := range toolkitTargets() {
			s.Dirs = append(s.Dirs, filepath.Join(r, "targets", t, "lib"))
		}
	}
	s.Dirs = append(s.Dirs, runtime.PythonPackageDirs("nvidia", "cu13", "lib")...)
	s.Dirs = append(s.Dirs, runtime.PythonPackageDirs("nvidia", "cuda_nvrtc", "lib")...)
	return s
}

// glob is filepath.Glob without the error (only a malformed pattern fails, and ours are
// fixed).
func glob(pattern string) []string {
	m, _ := filepath.Glob(pattern)
	return m
}

// newestFirst orders versioned folders such as /usr/local/cuda-12.4 from the highest
// version down, so the newest toolkit wins.
func newestFirst(dirs []string) []string {
	sort.SliceStable(dirs, func(i, j int) bool { return versionLess(dirs[j], dirs[i]) })
	return dirs
}

// versionLess compares the dotted numbers after the last '-' of two names.
func versionLess(a, b string) bool {
	va, vb := versionOf(a), versionOf(b)
	for i := 0; i < len(va) && i < len(vb); i++ {
		if va[i] != vb[i] {
			return va[i] < vb[i]
		}
	}
	return len(va) < len(vb)
}

func versionOf(name string) []int {
	_, v, _ := strings.Cut(filepath.Base(name), "-")
	var out []int
	for _, f := range strings.Split(v, ".") {
		n := 0
		for _, c := range f {
			if c < '0' || c > '9' {
				break
			}
			n = n*10 + int(c-'0')
		}
		out = append(out, n)
	}
	return out
}

// openFound loads the first candidate of s that opens, and reports the file the loader
// really mapped (found through probe, one of its functions), refusing a stub library that
// a bare soname resolved to.
func openFound(s runtime.LibrarySearch, probe string) (handle uintptr, path string, err error) {
	h, candidate, err := s.Find(dynlib.Open)
	if err != nil {
		return 0, "", err
	}
	path = candidate
	if p := dynlib.Symbol(h, probe); p != 0 {
		if real := dynlib.LoadedPath(p); real != "" {
			path = real
		}
	}
	if isStub(path) {
		return 0, "", fmt.Errorf("%w: %s resolved to %s, the toolkit's stub library, which cannot run anything (set %s to the real driver library)", runtime.ErrUnavailable, candidate, path, s.EnvVar)
	}
	return h, path, nil
}

// process holds the libraries, loaded once per process: the driver is initialised once,
// and devices of every ordinal share it.
var process struct {
	once sync.Once
	drv  *driver
	rtc  *nvrtc
	err  error
}

// libraries loads and initialises libcuda and libnvrtc once.
func libraries() (*driver, *nvrtc, error) {
	process.once.Do(func() {
		if err := dynlib.Unsupported("CUDA"); err != nil {
			process.err = err
			return
		}
		drv, err := loadDriver(driverSearch())
		if err != nil {
			process.err = err
			return
		}
		rtc, err := loadNVRTC(nvrtcSearch())
		if err != nil {
			// The driver still answers the probe; only compiling needs NVRTC.
			process.drv, process.err = drv, err
			return
		}
		process.drv, process.rtc = drv, rtc
	})
	return process.drv, process.rtc, process.err
}
