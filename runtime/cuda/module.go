package cuda

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/runtime/internal/gpurt"
)

// compileTarget is what NVRTC compiles a program for on one device.
type compileTarget struct {
	// arch is "sm_XY" (CUBIN, loaded as is) or "compute_XY" (PTX, compiled by the
	// driver when loaded).
	arch  string
	cubin bool
}

// chooseTarget picks the compile target for a device of compute capability
// major.minor, given the SM numbers this NVRTC supports (nil: it cannot say) and whether
// it can emit CUBIN:
//   - the device's own sm_XY when NVRTC knows it;
//   - else the newest known sm_XZ of the same major version below the device (a CUBIN
//     runs on later minor versions of its major);
//   - else PTX for the newest known architecture below the device, which the driver
//     compiles for the device (an NVRTC older than the device);
//   - an error when the device is older than everything NVRTC supports.
func chooseTarget(major, minor int, archs []int, canCUBIN bool) (compileTarget, error) {
	cc := major*10 + minor
	if archs == nil {
		if canCUBIN {
			return compileTarget{arch: "sm_" + strconv.Itoa(cc), cubin: true}, nil
		}
		return compileTarget{arch: "compute_" + strconv.Itoa(cc)}, nil
	}
	sameMajor, below, oldest := -1, -1, -1
	for _, a := range archs {
		if oldest < 0 || a < oldest {
			oldest = a
		}
		if a > cc {
			continue
		}
		if a/10 == major && a > sameMajor {
			sameMajor = a
		}
		if a > below {
			below = a
		}
	}
	switch {
	case canCUBIN && sameMajor >= 0:
		return compileTarget{arch: "sm_" + strconv.Itoa(sameMajor), cubin: true}, nil
	case below >= 0:
		return compileTarget{arch: "compute_" + strconv.Itoa(below)}, nil
	case oldest >= 0:
		return compileTarget{}, fmt.Errorf("the device (sm_%d) is older than every architecture this NVRTC supports (oldest sm_%d)", cc, oldest)
	}
	return compileTarget{}, errors.New("this NVRTC reports no supported architecture")
}

// compileOptions are NVRTC's options for a target. --fmad=false because the kernel ABI
// rounds the product and the sum of a score separately: a fused multiply-add would give
// different tokens from the other editions.
func compileOptions(t compileTarget) []string {
	return []string{"--gpu-architecture=" + t.arch, "--fmad=false", "-default-device", "--std=c++17"}
}

// LoadSource says where Load found a module's code.
type LoadSource uint8

// Where a module's code came from.
const (
	// Compiled: NVRTC compiled the source (a cold load).
	Compiled LoadSource = iota + 1
	// DiskCache: the code was read from the disk cache.
	DiskCache
	// MemoryCache: this process compiled or read it before.
	MemoryCache
)

// String returns "compiled", "disk cache" or "memory cache".
func (s LoadSource) String() string {
	switch s {
	case Compiled:
		return "compiled"
	case DiskCache:
		return "disk cache"
	case MemoryCache:
		return "memory cache"
	}
	return "LoadSource(" + strconv.Itoa(int(s)) + ")"
}

// LoadStats describes one Load: where the code came from and what each part cost.
type LoadStats struct {
	Program string
	// Target is the compile target, e.g. "sm_90".
	Target string
	// Key is the cache key (hex).
	Key    string
	Source LoadSource
	// Compile is NVRTC's time (zero unless Source is Compiled).
	Compile time.Duration
	// ModuleLoad is cuModuleLoadData's time (for a PTX target it includes the driver's
	// compilation).
	ModuleLoad time.Duration
	// Total is the whole Load.
	Total time.Duration
	// Log is NVRTC's log of a successful compilation (warnings), if any.
	Log string
	// CacheErr says why the disk cache could not be read (a corrupt entry, which was
	// recompiled) or written; nil when it worked or is off.
	CacheErr error
}

// LastLoad returns the stats of the device's most recent successful Load.
func (d *Device) LastLoad() LoadStats {
	d.statsMu.Lock()
	defer d.statsMu.Unlock()
	return d.lastLoad
}

// Load compiles the program's CUDA edition for this device with NVRTC, or takes it from
// the in-process or disk cache, and loads it into the device's context.
func (d *Device) Load(p *runtime.Program) (runtime.Module, error) {
	if p == nil || p.CUDA == "" {
		return nil, fmt.Errorf("%w: cuda: Load: the program has no CUDA edition", runtime.ErrInvalidArgument)
	}
	if d.core.Closed.Load() {
		return nil, d.core.ClosedError()
	}
	start := time.Now()
	opts := compileOptions(d.target)
	key := newCacheKey(p.CUDA, p.CUDAHeaders, opts, d.target.arch, d.rtc.version())
	stats := LoadStats{Program: p.Name, Target: d.target.arch, Key: key.String()}
	img, err := d.image(p, key, opts, &stats)
	if err != nil {
		return nil, err
	}
	m := &module{core: gpurt.Module{Dev: &d.core, Name: p.Name}, dev: d}
	if !img.ptx {
		m.cubin = img.data
	}
	loadStart := time.Now()
	err = d.own(func() (resource, error) {
		if r := Result(gpurt.CallN(d.drv.cuModuleLoadData, uintptr(unsafe.Pointer(&m.core.Handle)), uintptr(unsafe.Pointer(&img.data[0])))); r != Success {
			return nil, failed(fmt.Sprintf("cuModuleLoadData(%s, %s)", p.Name, d.target.arch), r)
		}
		return m, nil
	})
	if err != nil {
		return nil, err
	}
	stats.ModuleLoad = time.Since(loadStart)
	stats.Total = time.Since(start)
	d.statsMu.Lock()
	d.lastLoad = stats
	d.statsMu.Unlock()
	return m, nil
}

// compileMu serialises compilations, so that concurrent Loads of one program compile it
// once (the second finds the first's result in the memory cache).
var compileMu sync.Mutex

// image returns the program's code for this device's target from the memory cache, the
// disk cache or NVRTC, in that order, and fills in the stats.
func (d *Device) image(p *runtime.Program, key cacheKey, opts []string, stats *LoadStats) (moduleImage, error) {
	if img, ok := memoryCache.get(key); ok {
		stats.Source = MemoryCache
		return img, nil
	}
	compileMu.Lock()
	defer compileMu.Unlock()
	if img, ok := memoryCache.get(key); ok {
		stats.Source = MemoryCache
		return img, nil
	}
	dir := cacheDir()
	if dir != "" {
		img, err := readCacheEntry(dir, key)
		if err == nil {
			memoryCache.put(key, img)
			stats.Source = DiskCache
			return img, nil
		}
		if !errors.Is(err, errNotCached) {
			stats.CacheErr = err
		}
	}
	t := time.Now()
	data, log, err := d.rtc.compile(p.Name, p.CUDA, p.CUDAHeaders, opts, d.target.cubin)
	stats.Compile = time.Since(t)
	if err != nil {
		return moduleImage{}, &runtime.CompileError{Backend: runtime.CUDA, Program: p.Name, Log: log, Err: err}
	}
	img := moduleImage{data: data, ptx: !d.target.cubin}
	stats.Source, stats.Log = Compiled, log
	memoryCache.put(key, img)
	if dir != "" {
		if err := writeCacheEntry(dir, key, img); err != nil {
			stats.CacheErr = errors.Join(stats.CacheErr, err)
		}
	}
	return img, nil
}

// module is a loaded CUmodule.
type module struct {
	core gpurt.Module // Handle is the CUmodule
	dev  *Device
	// cubin is the module's CUBIN (nil for PTX), read for its kernels' parameter
	// counts.
	cubin []byte
}

// kernel is one CUfunction of a module. Its ParamSizes are nil when the driver cannot
// describe parameters (before CUDA 12.4).
type kernel struct {
	core gpurt.Kernel // Fn is the CUfunction
}

// Name returns the kernel's name.
func (k *kernel) Name() string { return k.core.Name }

// MaxThreadsPerBlock is the largest block this kernel can run with.
func (k *kernel) MaxThreadsPerBlock() int { return k.core.MaxThreads }

// Kernel returns the kernel of that name (an extern "C" __global__ function), or an
// error wrapping runtime.ErrNoKernel.
func (m *module) Kernel(name string) (runtime.Kernel, error) {
	return m.core.Lookup(name, func() (runtime.Kernel, error) {
		k := &kernel{core: gpurt.Kernel{Module: &m.core, Name: name}}
		drv := m.dev.drv
		cname := gpurt.CString(name)
		if r := Result(gpurt.CallN(drv.cuModuleGetFunction, uintptr(unsafe.Pointer(&k.core.Fn)), m.core.Handle, uintptr(unsafe.Pointer(&cname[0])))); r != Success {
			err := failed(fmt.Sprintf("cuModuleGetFunction(%s)", name), r)
			if r == ErrorNotFound {
				return nil, m.core.NoKernel(name, err)
			}
			return nil, err
		}
		var v int32
		if r := Result(gpurt.CallN(drv.cuFuncGetAttribute, uintptr(unsafe.Pointer(&v)), funcAttrMaxThreadsPerBlock, k.core.Fn)); r != Success {
			return nil, failed(fmt.Sprintf("cuFuncGetAttribute(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, %s)", name), r)
		}
		k.core.MaxThreads = int(v)
		count, ok := cubinParamCount(m.cubin, name)
		if !ok {
			count = -1
		}
		k.core.ParamSizes = paramSizes(drv, k.core.Fn, count)
		return k, nil
	})
}

// paramSizes asks the driver for the size of each of a kernel's parameters; nil when it
// cannot tell. count is the number of parameters when known (from the CUBIN, or from
// cuFuncGetParamCount where the driver has it), else -1: then indices are probed until
// one past the last gives CUDA_ERROR_INVALID_VALUE, a failing call that compute-sanitizer
// lists as an API error, so it is the last resort (a PTX image on an old driver).
func paramSizes(drv *driver, fn uintptr, count int) []int {
	if drv.cuFuncGetParamInfo == 0 {
		return nil
	}
	if count < 0 && drv.cuFuncGetParamCount != 0 {
		var n uintptr
		if Result(gpurt.CallN(drv.cuFuncGetParamCount, fn, uintptr(unsafe.Pointer(&n)))) != Success {
			return nil
		}
		count = int(n)
	}
	limit := runtime.MaxArgs + 1
	if count >= 0 {
		limit = min(count, runtime.MaxArgs+1)
	}
	sizes := []int{}
	for i := 0; i < limit; i++ {
		var off, size uintptr
		r := Result(gpurt.CallN(drv.cuFuncGetParamInfo, fn, uintptr(i), uintptr(unsafe.Pointer(&off)), uintptr(unsafe.Pointer(&size))))
		if r == ErrorInvalidValue && count < 0 {
			return sizes
		}
		if r != Success {
			return nil
		}
		sizes = append(sizes, int(size))
	}
	// More parameters than a launch can carry: every launch will be refused by count.
	return sizes
}

// Close unloads the module; its kernels can no longer be launched. A second Close does
// nothing.
func (m *module) Close() error { return m.dev.disown(m) }

func (m *module) release() error {
	return m.core.Release(func() error {
		if r := Result(gpurt.CallN(m.dev.drv.cuModuleUnload, m.core.Handle)); r != Success {
			return failed("cuModuleUnload", r)
		}
		return nil
	})
}
