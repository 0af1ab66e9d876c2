package hip

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"

	"github.com/gumbel-go/gumbel/runtime"
)

// targetPattern accepts an AMD GPU target: a processor (gfx90a, gfx1030, gfx10-3-generic)
// with optional feature settings (gfx90a:sramecc+:xnack-). Anything else could smuggle an
// option onto the compiler's command line.
var targetPattern = regexp.MustCompile(`^gfx[0-9a-z-]+(:[a-z]+[+-])*$`)

// compileOptions are the hiprtc options for one target. FMA contraction is off because
// the kernel ABI fixes every rounding step, and hiprtc contracts a*b+c into an FMA by
// default.
func compileOptions(target string) []string {
	return []string{"--offload-arch=" + target, "-O3", "-std=c++17", "-ffp-contract=off"}
}

// Compile compiles a program's HIP edition (HIPPrelude followed by CUDA) for one AMD GPU
// target, such as "gfx90a" or "gfx1030", and returns the code object hipModuleLoadData
// takes. It loads only hiprtc: no GPU, and no HIP device, is needed, so a machine without
// AMD hardware can check that every kernel compiles. Code objects are cached in memory
// for the life of the process. A compiler error is a *runtime.CompileError carrying
// hiprtc's log; without hiprtc the error wraps runtime.ErrUnavailable.
func Compile(p *runtime.Program, target string) ([]byte, error) {
	if err := checkProgram(p, target); err != nil {
		return nil, err
	}
	c, err := loadedCompiler()
	if err != nil {
		return nil, err
	}
	code, err := c.compileCached(p, target)
	if err != nil {
		return nil, err
	}
	return bytes.Clone(code), nil
}

// codeKey identifies one compilation: the source, the target, the options and the
// compiler.
type codeKey struct {
	source   [sha256.Size]byte
	target   string
	options  string
	compiler string
}

// codeEntry is one cached compilation; done is closed once code or err is set.
type codeEntry struct {
	done chan struct{}
	code []byte
	err  error
}

// codeCache holds the code objects compiled in this process. Concurrent requests for
// the same key wait for one compilation.
var codeCache struct {
	sync.Mutex
	m map[codeKey]*codeEntry
}

// sourceHash identifies a source and its headers.
func sourceHash(source string, headers map[string]string) [sha256.Size]byte {
	h := sha256.New()
	names := make([]string, 0, len(headers))
	for n := range headers {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(h, "header %q %d\x00%s\x00", n, len(headers[n]), headers[n])
	}
	fmt.Fprintf(h, "source %d\x00%s", len(source), source)
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}

// checkProgram rejects a program without source and a target that is not one.
func checkProgram(p *runtime.Program, target string) error {
	if p == nil || strings.TrimSpace(p.CUDA) == "" {
		return fmt.Errorf("%w: hip: the program has no CUDA/HIP source", runtime.ErrInvalidArgument)
	}
	if !targetPattern.MatchString(target) {
		return fmt.Errorf("%w: hip: %q is not an AMD GPU target such as gfx90a", runtime.ErrInvalidArgument, target)
	}
	return nil
}

// compileCached compiles with c, or takes the code object from the cache. The slice it
// returns is shared and must not be changed; checkProgram has accepted p and target.
func (c *compiler) compileCached(p *runtime.Program, target string) ([]byte, error) {
	source := p.HIPPrelude + "\n" + p.CUDA
	opts := compileOptions(target)
	key := codeKey{
		source:   sourceHash(source, p.CUDAHeaders),
		target:   target,
		options:  strings.Join(opts, "\x00"),
		compiler: c.Path + "@" + c.VersionString(),
	}
	codeCache.Lock()
	if codeCache.m == nil {
		codeCache.m = make(map[codeKey]*codeEntry)
	}
	e, found := codeCache.m[key]
	if !found {
		e = &codeEntry{done: make(chan struct{})}
		codeCache.m[key] = e
	}
	codeCache.Unlock()
	if found {
		<-e.done
		return e.code, e.err
	}

	code, log, err := c.compile(p.Name, source, p.CUDAHeaders, opts)
	if err != nil {
		e.err = &runtime.CompileError{Backend: runtime.HIP, Program: p.Name + " for " + target + " (hiprtc " + c.VersionString() + ")", Log: log, Err: err}
		// A failure is not kept: the next caller compiles again and gets a fresh log.
		codeCache.Lock()
		delete(codeCache.m, key)
		codeCache.Unlock()
	}
	e.code = code
	close(e.done)
	return e.code, e.err
}
