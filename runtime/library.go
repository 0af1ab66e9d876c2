package runtime

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// LibrarySearch describes where to look for one shared library: an explicit path from an
// environment variable, then names the system loader resolves (versioned sonames first),
// then well-known folders.
type LibrarySearch struct {
	// What names the library in errors, e.g. "libcuda".
	What string
	// EnvVar holds an explicit path; when set, nothing else is tried.
	EnvVar string
	// Names are handed to the system loader in order (e.g. "libcuda.so.1").
	Names []string
	// Dirs are folders to try each name in when the loader finds none.
	Dirs []string
	// Reject reports paths that must never be loaded (e.g. CUDA's stub library).
	Reject func(path string) bool
}

// Candidates lists what to try, in order: the explicit path alone when EnvVar is set;
// otherwise each name, then each name inside each folder.
func (s LibrarySearch) Candidates() []string {
	if s.EnvVar != "" {
		if p := strings.TrimSpace(os.Getenv(s.EnvVar)); p != "" {
			return []string{p}
		}
	}
	var out []string
	out = append(out, s.Names...)
	for _, d := range s.Dirs {
		for _, n := range s.Names {
			out = append(out, filepath.Join(d, n))
		}
	}
	return out
}

// Find calls load on each candidate until one succeeds, skipping rejected paths, and
// returns the handle and the candidate that worked; the error lists every attempt.
func (s LibrarySearch) Find(load func(path string) (uintptr, error)) (uintptr, string, error) {
	var tried []string
	for _, c := range s.Candidates() {
		if s.Reject != nil && s.Reject(c) {
			tried = append(tried, c+": refused")
			continue
		}
		h, err := load(c)
		if err == nil && h != 0 {
			return h, c, nil
		}
		switch {
		case err == nil:
			tried = append(tried, c+": loader returned no handle")
		case strings.Contains(err.Error(), c):
			// dlopen's message already names the path.
			tried = append(tried, err.Error())
		default:
			tried = append(tried, c+": "+err.Error())
		}
	}
	return 0, "", s.notFound(tried)
}

// notFound is Find's error: what is missing and how to name it on the first line, then
// one line per path tried, in order, with why it did not load.
func (s LibrarySearch) notFound(tried []string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s not found", s.What)
	if s.EnvVar != "" {
		fmt.Fprintf(&b, " (set %s to its path)", s.EnvVar)
	}
	switch len(tried) {
	case 0:
		b.WriteString("; nothing to try")
	case 1:
		b.WriteString("; tried 1 path:")
	default:
		fmt.Fprintf(&b, "; tried %d paths:", len(tried))
	}
	for _, t := range tried {
		b.WriteString("\n  ")
		b.WriteString(t)
	}
	return fmt.Errorf("%w: %s", ErrUnavailable, b.String())
}

// PythonPackageDirs lists folder sub (e.g. "nvidia/nccl/lib") inside every Python
// site-packages or dist-packages folder found (the active virtual or conda environment,
// the user's, the system's), where NVIDIA's pip wheels put their libraries.
func PythonPackageDirs(sub ...string) []string {
	var roots []string
	for _, env := range []string{"VIRTUAL_ENV", "CONDA_PREFIX"} {
		if v := os.Getenv(env); v != "" {
			roots = append(roots, glob(filepath.Join(v, "lib", "python3*", "site-packages"))...)
		}
	}
	if home, err := os.UserHomeDir(); err == nil {
		roots = append(roots, glob(filepath.Join(home, ".local", "lib", "python3*", "site-packages"))...)
	}
	roots = append(roots, glob("/usr/local/lib/python3*/dist-packages")...)
	roots = append(roots, glob("/usr/lib/python3*/dist-packages")...)
	dirs := make([]string, len(roots))
	for i, r := range roots {
		dirs[i] = filepath.Join(append([]string{r}, sub...)...)
	}
	return dirs
}

// glob is filepath.Glob without the error (only a malformed pattern fails, and these
// are fixed).
func glob(pattern string) []string {
	m, _ := filepath.Glob(pattern)
	return m
}
