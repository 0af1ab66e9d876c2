//go:build linux && (amd64 || arm64)

package hip

import (
	"math"
	"strconv"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/gumbel-go/gumbel/runtime/internal/gpurt"
)

// A fake HIP runtime and hiprtc, written in Go and handed to the package as C function
// pointers (purego callbacks), so the device, stream, module and compile paths run on
// machines without an AMD GPU: "device memory" is Go memory, a launch is recorded
// instead of run. The callbacks are made once per process (purego allows a few
// thousand); each test installs a fresh fakeState.

// fakeState is what the fake runtime knows and records.
type fakeState struct {
	mu sync.Mutex

	// Set up by the test.
	devices         int
	name, archName  string
	r0600           bool // export hipGetDevicePropertiesR0600 (ROCm 6) or only hipGetDeviceProperties (ROCm 5)
	warpSize        int
	multiprocessors int
	maxThreads      int
	maxGrid         [3]int
	totalMemory     uint64
	// kernelMaxThreads is what hipFuncGetAttribute reports per kernel name; kernels
	// not listed do not exist.
	kernelMaxThreads map[string]int
	// streamDevice is what hipStreamGetDevice answers.
	streamDevice int
	// fail makes the named call return the code.
	fail map[string]Result
	// compileLog and compileFails shape what hiprtc does.
	compileLog   string
	compileFails bool
	code         []byte

	// Recorded.
	allocs       map[uintptr][]byte // device and host allocations, by address
	freed        []uintptr
	hostFreed    []uintptr
	setDevice    []int
	streams      map[uintptr]bool
	destroyed    []uintptr
	events       map[uintptr]bool
	modules      map[uintptr][]byte
	functions    map[uintptr]string
	launches     []fakeLaunch
	syncs        []uintptr
	records      [][2]uintptr // event, stream
	memsets      int
	copies       []fakeCopy
	compiles     int
	lastSource   string
	lastOptions  []string
	programsLeft int // programs created and not destroyed
	nextHandle   uintptr
}

// fakeLaunch is one hipModuleLaunchKernel.
type fakeLaunch struct {
	kernel       string
	grid, block  [3]uintptr
	shared       uintptr
	stream       uintptr
	slots        [16]uint64
	extraWasNull bool
	device       int
}

// fakeCopy is one asynchronous copy.
type fakeCopy struct {
	call        string
	to, from, n uintptr
	stream      uintptr
}

var (
	fakeMu    sync.Mutex
	fake      *fakeState
	fakeOnce  sync.Once
	fakeFuncs map[string]uintptr
	// fakeStrings keeps the C strings the fake hands out alive.
	fakeStrings sync.Map
)

// newFake installs a fresh fake runtime with a plausible MI210-like device.
func newFake() *fakeState {
	f := &fakeState{
		devices: 1, name: "Fake Instinct MI210", archName: "gfx90a:sramecc+:xnack-", r0600: true,
		warpSize: 64, multiprocessors: 104, maxThreads: 1024, maxGrid: [3]int{math.MaxInt32, 65536, 65536},
		totalMemory:      64 << 30,
		kernelMaxThreads: map[string]int{"probe_fill": 1024, "probe_small": 256},
		fail:             map[string]Result{},
		code:             []byte("fake code object"),
		allocs:           map[uintptr][]byte{},
		streams:          map[uintptr]bool{},
		events:           map[uintptr]bool{},
		modules:          map[uintptr][]byte{},
		functions:        map[uintptr]string{},
		nextHandle:       0x1000,
	}
	fakeMu.Lock()
	fake = f
	fakeMu.Unlock()
	return f
}

// state returns the installed fake, locked; unlock with f.mu.Unlock.
func state() *fakeState {
	fakeMu.Lock()
	f := fake
	fakeMu.Unlock()
	f.mu.Lock()
	return f
}

func (f *fakeState) handle() uintptr {
	f.nextHandle += 0x10
	return f.nextHandle
}

// failing returns the injected failure of a call, or Success.
func (f *fakeState) failing(call string) uintptr {
	return uintptr(f.fail[call])
}

// cStr returns a pointer to a NUL-terminated copy of s that stays alive.
func cStr(s string) uintptr {
	if p, ok := fakeStrings.Load(s); ok {
		return p.(uintptr)
	}
	b := gpurt.CString(s)
	p := uintptr(unsafe.Pointer(&b[0]))
	fakeStrings.Store(s, p)
	fakeStrings.Store(p, b) // keep b alive
	return p
}

// at views n bytes at address p (Go memory the fake or the package owns).
func at(p uintptr, n int) []byte { return unsafe.Slice((*byte)(gpurt.CPointer(p)), n) }

func putPtr(dst, v uintptr)        { *(*uintptr)(gpurt.CPointer(dst)) = v }
func putI32(dst uintptr, v int)    { *(*int32)(gpurt.CPointer(dst)) = int32(v) }
func putU64(dst uintptr, v uint64) { *(*uint64)(gpurt.CPointer(dst)) = v }

// fakeFunctions makes the callbacks once.
func fakeFunctions() map[string]uintptr {
	fakeOnce.Do(func() {
		m := map[string]any{
			"hipInit":              func(uintptr) uintptr { return 0 },
			"hipRuntimeGetVersion": func(p uintptr) uintptr { putI32(p, 60241134); return 0 },
			"hipGetErrorName":      func(r uintptr) uintptr { return cStr("hipErrorFake" + strconv.Itoa(int(int32(r)))) },
			"hipGetErrorString":    func(r uintptr) uintptr { return cStr("fake error " + strconv.Itoa(int(int32(r)))) },
			"hipGetDeviceCount": func(p uintptr) uintptr {
				f := state()
				defer f.mu.Unlock()
				putI32(p, f.devices)
				return f.failing("hipGetDeviceCount")
			},
			"hipDeviceGet": func(p, ordinal uintptr) uintptr { putI32(p, int(ordinal)); return 0 },
			"hipSetDevice": func(ordinal uintptr) uintptr {
				f := state()
				defer f.mu.Unlock()
				f.setDevice = append(f.setDevice, int(ordinal))
				return f.failing("hipSetDevice")
			},
			"hipDeviceGetName": func(p, n, dev uintptr) uintptr {
				f := state()
				defer f.mu.Unlock()
				copy(at(p, int(n)), gpurt.CString(f.name))
				return 0
			},
			"hipDeviceGetAttribute": func(p, attr, dev uintptr) uintptr {
				f := state()
				defer f.mu.Unlock()
				v := map[uintptr]int{
					attrMultiprocessorCount: f.multiprocessors, attrMaxThreadsPerBlock: f.maxThreads, attrWarpSize: f.warpSize,
					attrMaxBlockDimX: 1024, attrMaxBlockDimX + 1: 1024, attrMaxBlockDimX + 2: 1024,
					attrMaxGridDimX: f.maxGrid[0], attrMaxGridDimY: f.maxGrid[1], attrMaxGridDimZ: f.maxGrid[2],
				}
				val, ok := v[attr]
				if !ok {
					return uintptr(ErrorInvalidValue)
				}
				putI32(p, val)
				return 0
			},
			"hipDeviceTotalMem": func(p, dev uintptr) uintptr {
				f := state()
				defer f.mu.Unlock()
				putU64(p, f.totalMemory)
				return 0
			},
			"hipGetDevicePropertiesR0600": func(p, dev uintptr) uintptr { return fakeProps(p, gcnArchNameOffsetR0600, 1472) },
			"hipGetDeviceProperties":      func(p, dev uintptr) uintptr { return fakeProps(p, gcnArchNameOffsetR0000, 792) },
			"hipMalloc": func(pp, size uintptr) uintptr {
				f := state()
				defer f.mu.Unlock()
				if r := f.failing("hipMalloc"); r != 0 {
					return r
				}
				b := make([]byte, size)
				p := uintptr(unsafe.Pointer(&b[0]))
				f.allocs[p] = b
				putPtr(pp, p)
				return 0
			},
			"hipFree": func(p uintptr) uintptr {
				f := state()
				defer f.mu.Unlock()
				if _, ok := f.allocs[p]; !ok {
					return uintptr(ErrorInvalidValue)
				}
				delete(f.allocs, p)
				f.freed = append(f.freed, p)
				return 0
			},
			"hipHostMalloc": func(pp, size, flags uintptr) uintptr {
				f := state()
				defer f.mu.Unlock()
				if r := f.failing("hipHostMalloc"); r != 0 {
					return r
				}
				b := make([]byte, size)
				p := uintptr(unsafe.Pointer(&b[0]))
				f.allocs[p] = b
				putPtr(pp, p)
				return 0
			},
			"hipHostFree": func(p uintptr) uintptr {
				f := state()
				defer f.mu.Unlock()
				if _, ok := f.allocs[p]; !ok {
					return uintptr(ErrorInvalidValue)
				}
				delete(f.allocs, p)
				f.hostFreed = append(f.hostFreed, p)
				return 0
			},
			"hipMemGetAddressRange": func(pbase, psize, p uintptr) uintptr {
				f := state()
				defer f.mu.Unlock()
				for base, b := range f.allocs {
					if p >= base && p < base+uintptr(len(b)) {
						putPtr(pbase, base)
						putPtr(psize, uintptr(len(b)))
						return 0
					}
				}
				return uintptr(ErrorNotFound)
			},
			"hipMemcpyHtoDAsync": func(dst, src, n, stream uintptr) uintptr {
				return fakeCopyCall("hipMemcpyHtoDAsync", dst, src, n, stream)
			},
			"hipMemcpyDtoHAsync": func(dst, src, n, stream uintptr) uintptr {
				return fakeCopyCall("hipMemcpyDtoHAsync", dst, src, n, stream)
			},
			"hipMemsetD8Async": func(dst, v, n, stream uintptr) uintptr {
				f := state()
				defer f.mu.Unlock()
				f.memsets++
				clear(at(dst, int(n)))
				return 0
			},
			"hipStreamCreateWithFlags": func(p, flags uintptr) uintptr {
				f := state()
				defer f.mu.Unlock()
				if flags != streamNonBlocking {
					return uintptr(ErrorInvalidValue)
				}
				h := f.handle()
				f.streams[h] = true
				putPtr(p, h)
				return 0
			},
			"hipStreamDestroy": func(h uintptr) uintptr {
				f := state()
				defer f.mu.Unlock()
				delete(f.streams, h)
				f.destroyed = append(f.destroyed, h)
				return 0
			},
			"hipStreamSynchronize": func(h uintptr) uintptr {
				f := state()
				defer f.mu.Unlock()
				f.syncs = append(f.syncs, h)
				return 0
			},
			"hipStreamGetDevice": func(h, p uintptr) uintptr {
				f := state()
				defer f.mu.Unlock()
				putI32(p, f.streamDevice)
				return 0
			},
			"hipEventCreate": func(p uintptr) uintptr {
				f := state()
				defer f.mu.Unlock()
				h := f.handle()
				f.events[h] = true
				putPtr(p, h)
				return 0
			},
			"hipEventDestroy": func(h uintptr) uintptr {
				f := state()
				defer f.mu.Unlock()
				delete(f.events, h)
				return 0
			},
			"hipEventRecord": func(ev, stream uintptr) uintptr {
				f := state()
				defer f.mu.Unlock()
				f.records = append(f.records, [2]uintptr{ev, stream})
				return 0
			},
			"hipEventSynchronize": func(ev uintptr) uintptr { return 0 },
			"hipEventElapsedTime": func(ms, start, stop uintptr) uintptr {
				*(*float32)(gpurt.CPointer(ms)) = float32(stop-start) / 16
				return 0
			},
			"hipModuleLoadData": func(p, image uintptr) uintptr {
				f := state()
				defer f.mu.Unlock()
				if r := f.failing("hipModuleLoadData"); r != 0 {
					return r
				}
				h := f.handle()
				f.modules[h] = append([]byte(nil), at(image, len(f.code))...)
				putPtr(p, h)
				return 0
			},
			"hipModuleUnload": func(h uintptr) uintptr {
				f := state()
				defer f.mu.Unlock()
				delete(f.modules, h)
				return 0
			},
			"hipModuleGetFunction": func(p, mod, name uintptr) uintptr {
				f := state()
				defer f.mu.Unlock()
				n := gpurt.GoString(name, 256)
				if _, ok := f.kernelMaxThreads[n]; !ok {
					return uintptr(ErrorNotFound)
				}
				h := f.handle()
				f.functions[h] = n
				putPtr(p, h)
				return 0
			},
			"hipFuncGetAttribute": func(p, attr, fn uintptr) uintptr {
				f := state()
				defer f.mu.Unlock()
				if attr != funcAttrMaxThreadsPerBlk {
					return uintptr(ErrorInvalidValue)
				}
				putI32(p, f.kernelMaxThreads[f.functions[fn]])
				return 0
			},
			"hipModuleLaunchKernel": func(fn, gx, gy, gz, bx, by, bz, shared, stream, params, extra uintptr) uintptr {
				f := state()
				defer f.mu.Unlock()
				if r := f.failing("hipModuleLaunchKernel"); r != 0 {
					return r
				}
				l := fakeLaunch{kernel: f.functions[fn], grid: [3]uintptr{gx, gy, gz}, block: [3]uintptr{bx, by, bz},
					shared: shared, stream: stream, extraWasNull: extra == 0}
				if len(f.setDevice) > 0 {
					l.device = f.setDevice[len(f.setDevice)-1]
				}
				table := unsafe.Slice((*uintptr)(gpurt.CPointer(params)), 16)
				for i, p := range table {
					l.slots[i] = *(*uint64)(gpurt.CPointer(p))
				}
				f.launches = append(f.launches, l)
				return 0
			},

			"hiprtcGetErrorString": func(r uintptr) uintptr { return cStr("HIPRTC_FAKE_" + strconv.Itoa(int(int32(r)))) },
			"hiprtcVersion":        func(maj, min uintptr) uintptr { putI32(maj, 6); putI32(min, 4); return 0 },
			"hiprtcCreateProgram": func(prog, src, name, n, headers, names uintptr) uintptr {
				f := state()
				defer f.mu.Unlock()
				f.lastSource = gpurt.GoString(src, 1<<30)
				f.programsLeft++
				putPtr(prog, f.handle())
				return 0
			},
			"hiprtcDestroyProgram": func(prog uintptr) uintptr {
				f := state()
				defer f.mu.Unlock()
				f.programsLeft--
				return 0
			},
			"hiprtcCompileProgram": func(prog, n, opts uintptr) uintptr {
				f := state()
				defer f.mu.Unlock()
				f.compiles++
				f.lastOptions = nil
				for _, p := range unsafe.Slice((*uintptr)(gpurt.CPointer(opts)), n) {
					f.lastOptions = append(f.lastOptions, gpurt.GoString(p, 1024))
				}
				if f.compileFails {
					return uintptr(RTCErrorCompilation)
				}
				return 0
			},
			"hiprtcGetProgramLogSize": func(prog, p uintptr) uintptr {
				f := state()
				defer f.mu.Unlock()
				putPtr(p, uintptr(len(f.compileLog)+1))
				return 0
			},
			"hiprtcGetProgramLog": func(prog, p uintptr) uintptr {
				f := state()
				defer f.mu.Unlock()
				copy(at(p, len(f.compileLog)+1), gpurt.CString(f.compileLog))
				return 0
			},
			"hiprtcGetCodeSize": func(prog, p uintptr) uintptr {
				f := state()
				defer f.mu.Unlock()
				putPtr(p, uintptr(len(f.code)))
				return 0
			},
			"hiprtcGetCode": func(prog, p uintptr) uintptr {
				f := state()
				defer f.mu.Unlock()
				copy(at(p, len(f.code)), f.code)
				return 0
			},
		}
		fakeFuncs = map[string]uintptr{}
		for name, fn := range m {
			fakeFuncs[name] = purego.NewCallback(fn)
		}
	})
	return fakeFuncs
}

// fakeProps fills a properties struct with the name and gcnArchName at the layout's
// offset, as a runtime whose struct is size bytes would.
func fakeProps(p uintptr, archOffset, size int) uintptr {
	f := state()
	defer f.mu.Unlock()
	b := at(p, size)
	clear(b)
	copy(b, gpurt.CString(f.name))
	copy(b[archOffset:archOffset+gcnArchNameSize-1], f.archName)
	return 0
}

// fakeCopyCall copies n bytes from src to dst and records the copy.
func fakeCopyCall(call string, dst, src, n, stream uintptr) uintptr {
	f := state()
	defer f.mu.Unlock()
	copy(at(dst, int(n)), at(src, int(n)))
	f.copies = append(f.copies, fakeCopy{call: call, to: dst, from: src, n: n, stream: stream})
	return 0
}

// fakeDriver returns a driver bound to the fake runtime, as loadDriver would bind a real
// one (without installing the fake's error names for the whole process).
func fakeDriver(f *fakeState) *driver {
	funcs := fakeFunctions()
	d := &driver{path: "libamdhip64.fake", version: 60241134}
	for _, s := range d.symbols() {
		*s.Dst = funcs[s.Names[0]]
	}
	if f.r0600 {
		d.hipGetDeviceProperties = 0
	} else {
		d.hipGetDevicePropertiesR0600 = 0
	}
	return d
}

// fakeCompiler returns a compiler bound to the fake hiprtc.
func fakeCompiler() *compiler {
	funcs := fakeFunctions()
	c := &compiler{path: "libhiprtc.fake", major: 6, minor: 4}
	for _, s := range c.symbols() {
		*s.Dst = funcs[s.Names[0]]
	}
	return c
}
