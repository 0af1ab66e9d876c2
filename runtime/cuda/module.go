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
	key := newCacheKey(p.CUDA, p.CUDAHeaders, opts, d.target.arch, d.rtc.VersionString())
	stats := LoadStats{Program: p.Name, Target: d.target.arch, Key: key.String()}
	img, err := d.image(p, key, opts, &stats)
	if err != nil {
		return nil, err
	}
	loadStart := time.Now()
	m, err := d.core.LoadModule(p.Name, d.target.arch, img.data, d.kernelParams)
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

// kernelParams describes a kernel's parameters for checking launches: their sizes, nil
// when the driver cannot describe them (before CUDA 12.4). The count comes from the
// module's CUBIN when it is one.
func (d *Device) kernelParams(k *gpurt.Kernel) []int {
	count, ok := cubinParamCount(k.Module.Image, k.Name())
	if !ok {
		count = -1
	}
	return paramSizes(d.drv, k.Fn, count)
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
