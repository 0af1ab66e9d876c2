// Package testenv is what the module's tests share about their environment: a temporary
// folder of their own, removed when they end, whether they pass, fail or are interrupted
// (Ctrl-C, SIGTERM), and the tools some of them need.
//
//	func TestMain(m *testing.M) { os.Exit(testenv.Run(m)) }
package testenv

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// EnvRequireGXX set to 1 makes a test that needs g++ fail where it is missing, instead of
// skipping: CI sets it, so that the emulations of the C++ editions always run there.
const EnvRequireGXX = "GUMBEL_REQUIRE_GXX"

// GXX returns the path of g++, or skips the test (fails it with GUMBEL_REQUIRE_GXX=1)
// saying what needed it.
func GXX(t testing.TB, what string) string {
	t.Helper()
	gxx, err := exec.LookPath("g++")
	if err == nil {
		return gxx
	}
	msg := fmt.Sprintf("g++ (C++20) is not installed: %s cannot be built here", what)
	if os.Getenv(EnvRequireGXX) == "1" {
		t.Fatal(msg + " (" + EnvRequireGXX + "=1)")
	}
	t.Skip(msg)
	return ""
}

// CacheDir is the folder kept between test runs for a build of the named tool with this
// key (a hash of its sources, flags and compiler): under $GUMBEL_CACHE_DIR (as the GPU
// backends' compiled modules), else the user cache folder's gumbel/. It returns "" where
// the variable is "off" or the folder cannot be made: the caller builds for this run only.
func CacheDir(tool, key string) string {
	root := os.Getenv("GUMBEL_CACHE_DIR")
	if root == "off" {
		return ""
	}
	if root == "" {
		user, err := os.UserCacheDir()
		if err != nil {
			return ""
		}
		root = filepath.Join(user, "gumbel")
	}
	dir := filepath.Join(root, tool, key)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return ""
	}
	return dir
}

// BuildKey is the cache key of a g++ build: a hash of the compiler's version, its flags,
// the named source files (name and contents) and any generated inputs.
func BuildKey(gxx string, flags, files []string, generated ...[]byte) (string, error) {
	version, err := exec.Command(gxx, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", gxx, err)
	}
	h := sha256.New()
	h.Write(version)
	h.Write([]byte(strings.Join(flags, " ")))
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			return "", err
		}
		h.Write([]byte(name))
		h.Write(b)
	}
	for _, b := range generated {
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:24], nil
}

// CachedBinary returns the binary of tool built with key: the one an earlier run left in
// CacheDir(tool, key), else one that build writes now to the path it is given (in a new
// temporary folder, which build may use for its own files) and that is then moved into
// the cache. Where the cache is off the binary stays in the temporary folder.
func CachedBinary(tool, key string, build func(out string) error) (string, error) {
	dir := CacheDir(tool, key)
	bin := filepath.Join(dir, tool)
	if dir != "" {
		if _, err := os.Stat(bin); err == nil {
			return bin, nil
		}
	}
	work, err := os.MkdirTemp("", tool+"-")
	if err != nil {
		return "", err
	}
	out := filepath.Join(work, tool)
	if err := build(out); err != nil {
		return "", err
	}
	// Rename is atomic: a concurrent test run sees the whole binary or none.
	if dir == "" || os.Rename(out, bin) != nil {
		return out, nil
	}
	return bin, nil
}

// Run runs the tests in a fresh temporary folder and returns m.Run's exit code: every
// os.TempDir, os.MkdirTemp("", ...) and t.TempDir of the tests lies inside it.
func Run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "gumbel-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "testenv:", err)
		return 1
	}
	// TMPDIR is what os.TempDir reads on Unix, TMP and TEMP on Windows.
	for _, v := range []string{"TMPDIR", "TMP", "TEMP"} {
		os.Setenv(v, dir)
	}
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-signals
		os.RemoveAll(dir)
		fmt.Fprintf(os.Stderr, "testenv: %v: removed %s\n", s, dir)
		os.Exit(1)
	}()
	code := m.Run()
	signal.Stop(signals)
	os.RemoveAll(dir)
	return code
}

// OnRanks runs f for every rank 0..n-1 in its own goroutine, as the ranks of a collective
// run, and returns each rank's error; it fails the test if they do not all return within
// guard, so that a hang is a failure rather than a stuck test.
func OnRanks(t testing.TB, n int, guard time.Duration, f func(rank int) error) []error {
	t.Helper()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() { errs[r] = f(r) })
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(guard):
		t.Fatalf("the ranks did not return within %v", guard)
	}
	return errs
}
