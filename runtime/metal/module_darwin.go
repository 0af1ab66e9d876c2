//go:build darwin

package metal

import (
	"crypto/sha256"
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/gumbel-go/gumbel/runtime"
)

// moduleKey identifies a compiled library: the same source, language version, math mode
// and GPU give the same code.
type moduleKey [sha256.Size]byte

func newModuleKey(source, language, arch string) moduleKey {
	h := sha256.New()
	for _, part := range []string{"gumbel/runtime/metal module v1", "msl " + language, "math safe", "gpu " + arch} {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	h.Write([]byte(source))
	var k moduleKey
	h.Sum(k[:0])
	return k
}

// module is a compiled MTLLibrary and the pipelines made from it. The device keeps it
// until Close, so a second Load of the same program compiles nothing. Its fields are
// guarded by the device's lock.
type module struct {
	dev      *Device
	lib      uintptr
	language string
	kernels  map[string]*kernel
}

// moduleHandle is what Load returns; closing it does not release the shared module.
type moduleHandle struct {
	mod    *module
	closed atomic.Bool
}

// Load compiles the program's Metal edition for this device, or returns the one compiled
// before. Compilation uses MTLMathModeSafe (fastMathEnabled = NO before macOS 15) and the
// newest Metal Shading Language version this macOS has, falling back to older versions
// if the newest fails.
func (d *Device) Load(p *runtime.Program) (runtime.Module, error) {
	if p == nil || p.Metal == "" {
		return nil, fmt.Errorf("%w: metal: the program has no Metal edition", runtime.ErrInvalidArgument)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.check("Load"); err != nil {
		return nil, err
	}
	key := newModuleKey(p.Metal, d.LanguageVersion(), d.info.Arch)
	if m, ok := d.cache[key]; ok {
		return &moduleHandle{mod: m}, nil
	}
	pool := d.c.enter()
	defer d.c.leave(pool)
	lib, language, err := d.compile(p.Name, p.Metal)
	if err != nil {
		return nil, err
	}
	m := &module{dev: d, lib: lib, language: language, kernels: map[string]*kernel{}}
	d.cache[key] = m
	return &moduleHandle{mod: m}, nil
}

// compile builds an MTLLibrary from source, trying each language version from the
// device's newest down. The error carries the newest version's compiler log.
func (d *Device) compile(name, source string) (uintptr, string, error) {
	c := &d.c
	opts := c.send0(c.send0(uintptr(d.b.classCompileOptions), mAlloc), mInit)
	if opts == 0 {
		return 0, "", &Error{Call: "[[MTLCompileOptions alloc] init]", Err: runtime.ErrUnavailable}
	}
	defer c.release(opts)
	// The kernels' arithmetic is specified operation by operation: no fast math.
	if c.sendBool1(opts, mRespondsToSelector, uintptr(d.b.sels[mSetMathMode])) {
		c.send1(opts, mSetMathMode, mathModeSafe)
	} else {
		c.send1(opts, mSetFastMathEnabled, 0)
	}
	src := c.newString(source)
	if src == 0 {
		return 0, "", &Error{Call: "NSString initWithBytes", Err: runtime.ErrOutOfMemory}
	}
	defer c.release(src)
	var first *Error
	for _, v := range languageVersions[d.msl:] {
		c.send1(opts, mSetLanguageVersion, uintptr(v.value))
		var nserr uintptr
		lib := c.send3(d.dev, mNewLibraryWithSource, src, opts, uintptr(unsafe.Pointer(&nserr)))
		if lib != 0 {
			return lib, v.name, nil
		}
		if first == nil {
			first = c.nsError("newLibraryWithSource (MSL "+v.name+")", nserr, nil)
		}
	}
	return 0, "", &runtime.CompileError{Backend: runtime.Metal, Program: name, Log: first.Description, Err: first}
}

// Kernel returns the compute pipeline of the named function.
func (h *moduleHandle) Kernel(name string) (runtime.Kernel, error) {
	if h.closed.Load() {
		return nil, fmt.Errorf("metal: Kernel %q: module: %w", name, runtime.ErrClosed)
	}
	m := h.mod
	d := m.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.check("Kernel"); err != nil {
		return nil, err
	}
	if k, ok := m.kernels[name]; ok {
		return k, nil
	}
	c := &d.c
	pool := c.enter()
	defer c.leave(pool)
	str := c.newString(name)
	fn := c.send1(m.lib, mNewFunctionWithName, str)
	c.release(str)
	if fn == 0 {
		return nil, fmt.Errorf("%w: metal: %q", runtime.ErrNoKernel, name)
	}
	defer c.release(fn)
	var nserr uintptr
	pso := c.send2(d.dev, mNewComputePipelineStateWithFunction, fn, uintptr(unsafe.Pointer(&nserr)))
	if pso == 0 {
		return nil, c.nsError("newComputePipelineStateWithFunction ("+name+")", nserr, runtime.ErrCompile)
	}
	k := &kernel{
		mod:        m,
		name:       name,
		pipeline:   pso,
		maxThreads: int(c.send0(pso, mMaxTotalThreadsPerThreadgroup)),
		width:      int(c.send0(pso, mThreadExecutionWidth)),
	}
	m.kernels[name] = k
	return k, nil
}

// Close marks the handle closed; the compiled module stays with the device.
func (h *moduleHandle) Close() error {
	h.closed.Store(true)
	return nil
}

// release frees the library and its pipelines (Device.Close, with the device locked and
// an autorelease pool pushed).
func (m *module) release() {
	c := &m.dev.c
	for _, k := range m.kernels {
		c.release(k.pipeline)
		k.pipeline = 0
	}
	clear(m.kernels)
	c.release(m.lib)
	m.lib = 0
}

// kernel is one compute pipeline.
type kernel struct {
	mod        *module
	name       string
	pipeline   uintptr
	maxThreads int
	width      int
}

// Name is the function's name.
func (k *kernel) Name() string { return k.name }

// MaxThreadsPerBlock is the pipeline's maxTotalThreadsPerThreadgroup.
func (k *kernel) MaxThreadsPerBlock() int { return k.maxThreads }

// SIMDWidth is the pipeline's threadExecutionWidth.
func (k *kernel) SIMDWidth() int { return k.width }
