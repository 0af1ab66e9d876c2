//go:build linux

package cuda

// A fake libcuda and libnvrtc made of Go callbacks, so that the device, stream, module
// and cache code runs end to end on machines without a GPU. The fake keeps a current
// context per OS thread, as the real driver does, and refuses calls made on a thread
// where the device's context is not current (CUDA_ERROR_INVALID_CONTEXT): a call that
// escaped the locked thread fails here as it would on a GPU.

import (
	"bytes"
	"math"
	"strings"
	"sync"
	"syscall"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/gumbel-go/gumbel/runtime/internal/dynlib"
	"github.com/gumbel-go/gumbel/runtime/internal/gpurt"
	"github.com/stretchr/testify/require"
)

const (
	fakeCtx        = 0xC0DE0
	fakeForeignCtx = 0xF0E160
	// fakeForeignStream belongs to another context.
	fakeForeignStream = 0x9999
	fakeAddOne        = 1 // add_one(float* x, unsigned n): x[i] += 1 for i < n
	fakeScale         = 2 // scale(float* x, float a, unsigned long long n): x[i] *= a
)

// fakeGPU is the fake driver's state.
type fakeGPU struct {
	mu       sync.Mutex
	current  map[int]uintptr // OS thread id -> current context
	mem      map[uintptr][]byte
	streams  map[uintptr]bool
	events   map[uintptr]uint64 // event -> the clock when recorded
	clock    uint64
	retained int
	modules  map[uintptr]bool
	next     uintptr
	launches int
	// lastLaunch records the shape of the most recent launch.
	lastGrid, lastBlock [3]uintptr
	// programs are NVRTC programs: source, options, log, output.
	programs map[uintptr]*fakeProgram
	compiles int
}

type fakeProgram struct {
	src, log string
	out      []byte
}

var (
	fake     = &fakeGPU{}
	fakeOnce sync.Once
	fakeSyms map[string]uintptr
	// cStrings keeps the fake's C strings alive (the heap does not move them).
	cStrings   = map[string][]byte{}
	cStringsMu sync.Mutex
)

// ptr reinterprets an address the code under test handed to "C".
func ptr(p uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&p)) }

func staticCString(s string) uintptr {
	cStringsMu.Lock()
	defer cStringsMu.Unlock()
	if _, ok := cStrings[s]; !ok {
		cStrings[s] = gpurt.CString(s)
	}
	return uintptr(unsafe.Pointer(&cStrings[s][0]))
}

func (f *fakeGPU) reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.current = map[int]uintptr{}
	f.mem = map[uintptr][]byte{}
	f.streams = map[uintptr]bool{fakeForeignStream: true}
	f.events = map[uintptr]uint64{}
	f.modules = map[uintptr]bool{}
	f.programs = map[uintptr]*fakeProgram{}
	f.next = 0x1000
	f.retained, f.launches, f.compiles, f.clock = 0, 0, 0, 0
}

// inContext reports whether the calling thread has the fake context current. Callbacks
// run on the thread that made the C call.
func (f *fakeGPU) inContext() bool { return f.current[syscall.Gettid()] == fakeCtx }

// alloc keeps Go memory as fake device memory and returns its address.
func (f *fakeGPU) alloc(n uintptr) uintptr {
	b := make([]byte, n)
	p := uintptr(unsafe.Pointer(&b[0]))
	f.mem[p] = b
	return p
}

// region returns the fake memory [p, p+n), or nil when it is not inside one allocation.
func (f *fakeGPU) region(p, n uintptr) []byte {
	for base, b := range f.mem {
		if p >= base && p-base <= uintptr(len(b)) && n <= uintptr(len(b))-(p-base) {
			return b[p-base : p-base+n]
		}
	}
	return nil
}

// guarded wraps a fake entry point: the fake lock held, and the context checked.
func guarded(fn func() Result) uintptr {
	fake.mu.Lock()
	defer fake.mu.Unlock()
	if !fake.inContext() {
		return uintptr(ErrorInvalidContext)
	}
	return uintptr(fn())
}

func locked(fn func() Result) uintptr {
	fake.mu.Lock()
	defer fake.mu.Unlock()
	return uintptr(fn())
}

func setU32(p uintptr, v uint32)   { *(*uint32)(ptr(p)) = v }
func setWord(p uintptr, v uintptr) { *(*uintptr)(ptr(p)) = v }

var fakeNames = map[Result][2]string{
	ErrorInvalidValue:   {"CUDA_ERROR_INVALID_VALUE", "invalid argument"},
	ErrorOutOfMemory:    {"CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
	ErrorInvalidContext: {"CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
	ErrorNotFound:       {"CUDA_ERROR_NOT_FOUND", "named symbol not found"},
}

func fakeSymbols() map[string]uintptr {
	fakeOnce.Do(func() {
		fake.reset()
		cb := purego.NewCallback
		fakeSyms = map[string]uintptr{
			"cuInit": cb(func(flags uintptr) uintptr { return 0 }),
			"cuDriverGetVersion": cb(func(p uintptr) uintptr {
				setU32(p, 13000)
				return 0
			}),
			"cuGetErrorName": cb(func(code, pp uintptr) uintptr {
				n, ok := fakeNames[Result(code)]
				if !ok {
					return uintptr(ErrorInvalidValue)
				}
				setWord(pp, staticCString(n[0]))
				return 0
			}),
			"cuGetErrorString": cb(func(code, pp uintptr) uintptr {
				n, ok := fakeNames[Result(code)]
				if !ok {
					return uintptr(ErrorInvalidValue)
				}
				setWord(pp, staticCString(n[1]))
				return 0
			}),
			"cuDeviceGetCount": cb(func(p uintptr) uintptr {
				setU32(p, 1)
				return 0
			}),
			"cuDeviceGet": cb(func(p, ordinal uintptr) uintptr {
				if ordinal != 0 {
					return uintptr(ErrorInvalidDevice)
				}
				setU32(p, 0)
				return 0
			}),
			"cuDeviceGetName": cb(func(buf, n, dev uintptr) uintptr {
				copy(unsafe.Slice((*byte)(ptr(buf)), n), "Fake H200\x00")
				return 0
			}),
			"cuDeviceGetAttribute": cb(func(p, attr, dev uintptr) uintptr {
				v, ok := map[uintptr]uint32{1: 1024, 2: 1024, 3: 1024, 4: 64, 5: math.MaxInt32, 6: 65535, 7: 65535, 10: 32, 16: 132, 75: 9, 76: 0}[attr]
				if !ok {
					return uintptr(ErrorInvalidValue)
				}
				setU32(p, v)
				return 0
			}),
			"cuDeviceTotalMem_v2": cb(func(p, dev uintptr) uintptr {
				setWord(p, 141<<30)
				return 0
			}),
			"cuDevicePrimaryCtxRetain": cb(func(p, dev uintptr) uintptr {
				return locked(func() Result {
					fake.retained++
					setWord(p, fakeCtx)
					return 0
				})
			}),
			"cuDevicePrimaryCtxRelease_v2": cb(func(dev uintptr) uintptr {
				return locked(func() Result {
					fake.retained--
					return 0
				})
			}),
			"cuCtxSetCurrent": cb(func(ctx uintptr) uintptr {
				return locked(func() Result {
					fake.current[syscall.Gettid()] = ctx
					return 0
				})
			}),
			"cuMemAlloc_v2": cb(func(pp, n uintptr) uintptr {
				return guarded(func() Result {
					if n > 1<<30 {
						return ErrorOutOfMemory
					}
					setWord(pp, fake.alloc(n))
					return 0
				})
			}),
			"cuMemFree_v2": cb(func(p uintptr) uintptr {
				return guarded(func() Result {
					if _, ok := fake.mem[p]; !ok {
						return ErrorInvalidValue
					}
					delete(fake.mem, p)
					return 0
				})
			}),
			"cuMemHostAlloc": cb(func(pp, n, flags uintptr) uintptr {
				return guarded(func() Result {
					setWord(pp, fake.alloc(n))
					return 0
				})
			}),
			"cuMemFreeHost": cb(func(p uintptr) uintptr {
				return guarded(func() Result {
					if _, ok := fake.mem[p]; !ok {
						return ErrorInvalidValue
					}
					delete(fake.mem, p)
					return 0
				})
			}),
			"cuMemGetAddressRange_v2": cb(func(pbase, psize, p uintptr) uintptr {
				return guarded(func() Result {
					for base, b := range fake.mem {
						if p >= base && p < base+uintptr(len(b)) {
							setWord(pbase, base)
							setWord(psize, uintptr(len(b)))
							return 0
						}
					}
					return ErrorNotFound
				})
			}),
			"cuMemcpyHtoDAsync_v2": cb(func(dst, src, n, stream uintptr) uintptr {
				return guarded(func() Result {
					d := fake.region(dst, n)
					if d == nil || !fake.streams[stream] {
						return ErrorInvalidValue
					}
					copy(d, unsafe.Slice((*byte)(ptr(src)), n))
					return 0
				})
			}),
			"cuMemcpyDtoHAsync_v2": cb(func(dst, src, n, stream uintptr) uintptr {
				return guarded(func() Result {
					s := fake.region(src, n)
					if s == nil || !fake.streams[stream] {
						return ErrorInvalidValue
					}
					copy(unsafe.Slice((*byte)(ptr(dst)), n), s)
					return 0
				})
			}),
			"cuMemsetD8Async": cb(func(dst, v, n, stream uintptr) uintptr {
				return guarded(func() Result {
					d := fake.region(dst, n)
					if d == nil || !fake.streams[stream] {
						return ErrorInvalidValue
					}
					for i := range d {
						d[i] = byte(v)
					}
					return 0
				})
			}),
			"cuStreamCreate": cb(func(p, flags uintptr) uintptr {
				return guarded(func() Result {
					if flags != streamNonBlocking {
						return ErrorInvalidValue
					}
					fake.next++
					fake.streams[fake.next] = true
					setWord(p, fake.next)
					return 0
				})
			}),
			"cuStreamDestroy_v2": cb(func(s uintptr) uintptr {
				return guarded(func() Result {
					if !fake.streams[s] {
						return ErrorInvalidValue
					}
					delete(fake.streams, s)
					return 0
				})
			}),
			"cuStreamSynchronize": cb(func(s uintptr) uintptr {
				return guarded(func() Result {
					if !fake.streams[s] {
						return ErrorInvalidValue
					}
					return 0
				})
			}),
			"cuStreamGetCtx": cb(func(s, pctx uintptr) uintptr {
				return guarded(func() Result {
					switch {
					case s == fakeForeignStream:
						setWord(pctx, fakeForeignCtx)
					case fake.streams[s]:
						setWord(pctx, fakeCtx)
					default:
						return ErrorInvalidValue
					}
					return 0
				})
			}),
			"cuEventCreate": cb(func(p, flags uintptr) uintptr {
				return guarded(func() Result {
					fake.next++
					fake.events[fake.next] = 0
					setWord(p, fake.next)
					return 0
				})
			}),
			"cuEventDestroy_v2": cb(func(e uintptr) uintptr {
				return guarded(func() Result {
					delete(fake.events, e)
					return 0
				})
			}),
			"cuEventRecord": cb(func(e, s uintptr) uintptr {
				return guarded(func() Result {
					if _, ok := fake.events[e]; !ok || !fake.streams[s] {
						return ErrorInvalidValue
					}
					fake.clock++
					fake.events[e] = fake.clock
					return 0
				})
			}),
			"cuEventSynchronize": cb(func(e uintptr) uintptr {
				return guarded(func() Result { return 0 })
			}),
			"cuEventElapsedTime": cb(func(pms, start, end uintptr) uintptr {
				return guarded(func() Result {
					// One tick of the fake clock is 0.5 ms.
					*(*float32)(ptr(pms)) = float32(fake.events[end]-fake.events[start]) / 2
					return 0
				})
			}),
			"cuModuleLoadData": cb(func(pm, image uintptr) uintptr {
				return guarded(func() Result {
					if !bytes.HasPrefix(unsafe.Slice((*byte)(ptr(image)), 9), []byte("FAKECUBIN")) {
						return Result(200) // CUDA_ERROR_INVALID_IMAGE
					}
					fake.next++
					fake.modules[fake.next] = true
					setWord(pm, fake.next)
					return 0
				})
			}),
			"cuModuleUnload": cb(func(m uintptr) uintptr {
				return guarded(func() Result {
					delete(fake.modules, m)
					return 0
				})
			}),
			"cuModuleGetFunction": cb(func(pf, m, name uintptr) uintptr {
				return guarded(func() Result {
					fn := map[string]uintptr{"add_one": fakeAddOne, "scale": fakeScale}[gpurt.GoString(name, 256)]
					if !fake.modules[m] || fn == 0 {
						return ErrorNotFound
					}
					setWord(pf, fn)
					return 0
				})
			}),
			"cuFuncGetAttribute": cb(func(p, attr, fn uintptr) uintptr {
				return guarded(func() Result {
					if attr != funcAttrMaxThreadsPerBlock {
						return ErrorInvalidValue
					}
					setU32(p, map[uintptr]uint32{fakeAddOne: 1024, fakeScale: 256}[fn])
					return 0
				})
			}),
			"cuFuncGetParamInfo": cb(func(fn, i, poff, psize uintptr) uintptr {
				return guarded(func() Result {
					sizes := map[uintptr][]uintptr{fakeAddOne: {8, 4}, fakeScale: {8, 4, 8}}[fn]
					if i >= uintptr(len(sizes)) {
						return ErrorInvalidValue
					}
					setWord(poff, i*8)
					setWord(psize, sizes[i])
					return 0
				})
			}),
			"cuLaunchKernel": cb(func(fn, gx, gy, gz, bx, by, bz, shared, stream, params, extra uintptr) uintptr {
				return guarded(func() Result {
					if !fake.streams[stream] || params == 0 || extra != 0 || shared != 0 {
						return ErrorInvalidValue
					}
					fake.launches++
					fake.lastGrid, fake.lastBlock = [3]uintptr{gx, gy, gz}, [3]uintptr{bx, by, bz}
					arg := func(i int) unsafe.Pointer { return ptr((*[16]uintptr)(ptr(params))[i]) }
					threads := gx * gy * gz * bx * by * bz
					switch fn {
					case fakeAddOne:
						n := uintptr(*(*uint32)(arg(1)))
						x := fake.region(*(*uintptr)(arg(0)), 4*n)
						if x == nil {
							return Result(700) // CUDA_ERROR_ILLEGAL_ADDRESS
						}
						for i := uintptr(0); i < min(n, threads); i++ {
							v := math.Float32frombits(uint32(x[4*i]) | uint32(x[4*i+1])<<8 | uint32(x[4*i+2])<<16 | uint32(x[4*i+3])<<24)
							copy(x[4*i:], f32bytes(v+1))
						}
					case fakeScale:
						a, n := *(*float32)(arg(1)), uintptr(*(*uint64)(arg(2)))
						x := fake.region(*(*uintptr)(arg(0)), 4*n)
						if x == nil {
							return Result(700)
						}
						for i := uintptr(0); i < min(n, threads); i++ {
							v := math.Float32frombits(uint32(x[4*i]) | uint32(x[4*i+1])<<8 | uint32(x[4*i+2])<<16 | uint32(x[4*i+3])<<24)
							copy(x[4*i:], f32bytes(v*a))
						}
					default:
						return Result(400) // CUDA_ERROR_INVALID_HANDLE
					}
					return 0
				})
			}),

			"nvrtcGetErrorString": cb(func(r uintptr) uintptr {
				return staticCString(map[uintptr]string{0: "NVRTC_SUCCESS", 5: "NVRTC_ERROR_INVALID_OPTION", 6: "NVRTC_ERROR_COMPILATION"}[r])
			}),
			"nvrtcVersion": cb(func(pmaj, pmin uintptr) uintptr {
				setU32(pmaj, 13)
				setU32(pmin, 0)
				return 0
			}),
			"nvrtcGetNumSupportedArchs": cb(func(p uintptr) uintptr {
				setU32(p, uint32(len(fakeArchs)))
				return 0
			}),
			"nvrtcGetSupportedArchs": cb(func(p uintptr) uintptr {
				copy(unsafe.Slice((*int32)(ptr(p)), len(fakeArchs)), fakeArchs)
				return 0
			}),
			"nvrtcCreateProgram": cb(func(pprog, src, name, nh, headers, includes uintptr) uintptr {
				return locked(func() Result {
					fake.next++
					fake.programs[fake.next] = &fakeProgram{src: gpurt.GoString(src, 1<<20)}
					setWord(pprog, fake.next)
					return 0
				})
			}),
			"nvrtcDestroyProgram": cb(func(pprog uintptr) uintptr {
				return locked(func() Result {
					delete(fake.programs, *(*uintptr)(ptr(pprog)))
					return 0
				})
			}),
			"nvrtcCompileProgram": cb(func(prog, n, opts uintptr) uintptr {
				return locked(func() Result {
					p := fake.programs[prog]
					var options []string
					for _, o := range unsafe.Slice((*uintptr)(ptr(opts)), n) {
						options = append(options, gpurt.GoString(o, 256))
					}
					fake.compiles++
					if i := strings.Index(p.src, "#error"); i >= 0 {
						p.log = "prog.cu(1): error: #error directive: " + strings.TrimSpace(p.src[i+6:])
						return Result(NVRTCErrorCompilation)
					}
					p.out = []byte("FAKECUBIN " + strings.Join(options, " "))
					return 0
				})
			}),
			"nvrtcGetProgramLogSize": cb(func(prog, p uintptr) uintptr {
				return locked(func() Result {
					setWord(p, uintptr(len(fake.programs[prog].log)+1))
					return 0
				})
			}),
			"nvrtcGetProgramLog": cb(func(prog, buf uintptr) uintptr {
				return locked(func() Result {
					l := fake.programs[prog].log
					copy(unsafe.Slice((*byte)(ptr(buf)), len(l)+1), l+"\x00")
					return 0
				})
			}),
			"nvrtcGetCUBINSize": cb(func(prog, p uintptr) uintptr {
				return locked(func() Result {
					setWord(p, uintptr(len(fake.programs[prog].out)))
					return 0
				})
			}),
			"nvrtcGetCUBIN": cb(func(prog, buf uintptr) uintptr {
				return locked(func() Result {
					out := fake.programs[prog].out
					copy(unsafe.Slice((*byte)(ptr(buf)), len(out)), out)
					return 0
				})
			}),
		}
		fakeSyms["nvrtcGetPTXSize"] = fakeSyms["nvrtcGetCUBINSize"]
		fakeSyms["nvrtcGetPTX"] = fakeSyms["nvrtcGetCUBIN"]
	})
	return fakeSyms
}

var fakeArchs = []int32{75, 80, 86, 87, 89, 90, 100, 103, 110, 120, 121}

func f32bytes(v float32) []byte {
	b := math.Float32bits(v)
	return []byte{byte(b), byte(b >> 8), byte(b >> 16), byte(b >> 24)}
}

// fakeNVRTCMajor is a version no real NVRTC has, so the fake's "CUBIN" never shares a
// cache key with real code when fake and GPU tests run in one process.
const fakeNVRTCMajor = 99

// newFake binds a fresh fake driver and NVRTC and installs their error namers; restore
// puts the previous namers back.
func newFake(t testing.TB) (drv *driver, rtc *nvrtc, restore func()) {
	syms := fakeSymbols()
	fake.reset()
	lookup := func(name string) uintptr { return syms[name] }
	prevResult, prevNVRTC := resultNamer.Load(), nvrtcNamer.Load()
	drv = &driver{path: "/fake/libcuda.so.1", version: 13000}
	require.NoError(t, dynlib.Bind(drv.path, lookup, drv.symbols()))
	drv.installNamer()
	rtc = &nvrtc{path: "/fake/libnvrtc.so.13", major: fakeNVRTCMajor}
	require.NoError(t, dynlib.Bind(rtc.path, lookup, rtc.symbols()))
	rtc.installNamer()
	for _, a := range fakeArchs {
		rtc.archs = append(rtc.archs, int(a))
	}
	return drv, rtc, func() {
		resultNamer.Store(prevResult)
		nvrtcNamer.Store(prevNVRTC)
	}
}

// openFake opens device 0 of a fresh fake driver, with the disk cache in a temporary
// folder; it is closed when the test ends.
func openFake(t *testing.T) *Device {
	t.Helper()
	t.Setenv(EnvCacheDir, t.TempDir())
	drv, rtc, restore := newFake(t)
	d, err := open(drv, rtc, 0)
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, d.Close())
		restore()
	})
	return d
}
