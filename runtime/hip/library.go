package hip

import (
	"os"
	"path/filepath"
	goruntime "runtime"
	"sort"

	"github.com/gumbel-go/gumbel/runtime"
)

// Environment variables that name the libraries explicitly; when one is set, nothing else
// is tried for that library.
const (
	EnvHIPLibrary    = "GUMBEL_HIP_LIBRARY"
	EnvHIPRTCLibrary = "GUMBEL_HIPRTC_LIBRARY"
)

// hipSearch says where the HIP runtime (libamdhip64) lives.
func hipSearch() runtime.LibrarySearch {
	s := runtime.LibrarySearch{What: "the HIP runtime (libamdhip64)", EnvVar: EnvHIPLibrary, Dirs: libraryDirs()}
	switch goruntime.GOOS {
	case "linux":
		s.Names = []string{"libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5", "libamdhip64.so"}
	case "windows":
		s.Names = []string{"amdhip64_7.dll", "amdhip64_6.dll", "amdhip64.dll"}
	}
	return s
}

// hiprtcSearch says where hiprtc lives. Before ROCm 5.3 it had no library of its own: its
// functions were exported by libamdhip64, which loadCompiler falls back to.
func hiprtcSearch() runtime.LibrarySearch {
	s := runtime.LibrarySearch{What: "the HIP run-time compiler (libhiprtc)", EnvVar: EnvHIPRTCLibrary, Dirs: libraryDirs()}
	switch goruntime.GOOS {
	case "linux":
		s.Names = []string{"libhiprtc.so.7", "libhiprtc.so.6", "libhiprtc.so.5", "libhiprtc.so"}
	case "windows":
		// The HIP SDK for Windows names hiprtc after its major and minor version.
		for _, v := range []string{"0705", "0704", "0703", "0702", "0701", "0700",
			"0605", "0604", "0603", "0602", "0601", "0600", "0507", "0505"} {
			s.Names = append(s.Names, "hiprtc"+v+".dll")
		}
		s.Names = append(s.Names, "hiprtc.dll")
	}
	return s
}

// libraryDirs lists the folders ROCm installs into, for when the system loader does not
// know them.
func libraryDirs() []string {
	var dirs []string
	add := func(d string) {
		if d != "" {
			dirs = append(dirs, d)
		}
	}
	switch goruntime.GOOS {
	case "linux":
		for _, env := range []string{"ROCM_PATH", "HIP_PATH"} {
			if p := os.Getenv(env); p != "" {
				add(filepath.Join(p, "lib"))
			}
		}
		add("/opt/rocm/lib")
		add("/opt/rocm/lib64")
		// Side-by-side installs (/opt/rocm-6.2.0/lib), newest first.
		dirs = append(dirs, globDescending("/opt/rocm-*/lib")...)
	case "windows":
		if p := os.Getenv("HIP_PATH"); p != "" {
			add(filepath.Join(p, "bin"))
		}
		dirs = append(dirs, globDescending(`C:\Program Files\AMD\ROCm\*\bin`)...)
	}
	return dirs
}

// globDescending returns the matches of a pattern, the highest version (by name) first.
func globDescending(pattern string) []string {
	m, err := filepath.Glob(pattern)
	if err != nil {
		return nil
	}
	sort.Sort(sort.Reverse(sort.StringSlice(m)))
	return m
}
