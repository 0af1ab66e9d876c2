//go:build linux && (amd64 || arm64)

package fakegpu

import (
	"bytes"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/gumbel-go/gumbel/runtime/internal/gpurt"
	"github.com/stretchr/testify/require"
)

// Status codes the fake returns. HIP numbers its errors as CUDA does, and hiprtc as
// NVRTC, so one set serves both.
const (
	InvalidValue   = 1
	OutOfMemory    = 2
	NoDevice       = 100
	InvalidDevice  = 101
	InvalidImage   = 200
	InvalidContext = 201
	InvalidHandle  = 400
	NotFound       = 500
	IllegalAddress = 700
	NotSupported   = 801
	// CompilationFailed is NVRTC_ERROR_COMPILATION and HIPRTC_ERROR_COMPILATION.
	CompilationFailed = 6
)

// codePrefix starts every code object the fake compiler writes; module loads refuse
// anything else (CUDA_ERROR_INVALID_IMAGE).
const codePrefix = "FAKECODE"

// rtcMajor is the version the fake NVRTC and hiprtc report: one no real compiler has, so
// fake code never shares a cache key with real code when fake and GPU tests run in one
// process.
const rtcMajor = 99

// Device is what one fake device reports.
type Device struct {
	Name string
	// CC is the compute capability CUDA's attributes report; ArchName is the
	// gcnArchName HIP's properties report.
	CC                                    [2]int
	ArchName                              string
	Multiprocessors, MaxThreads, WarpSize int
	MaxBlock, MaxGrid                     [3]int
	TotalMemory                           uint64
	// L2 is the last-level cache in bytes, which CUDA's attributes report.
	L2 int
}

// H200 is a device like NVIDIA's H200.
func H200() Device {
	return Device{Name: "Fake H200", CC: [2]int{9, 0}, Multiprocessors: 132, MaxThreads: 1024, WarpSize: 32,
		MaxBlock: [3]int{1024, 1024, 64}, MaxGrid: [3]int{math.MaxInt32, 65535, 65535}, TotalMemory: 141 << 30, L2: 50 << 20}
}

// MI210 is a device like AMD's Instinct MI210 (CDNA, 64-wide wavefronts).
func MI210() Device {
	return Device{Name: "Fake Instinct MI210", ArchName: "gfx90a:sramecc+:xnack-", Multiprocessors: 104, MaxThreads: 1024,
		WarpSize: 64, MaxBlock: [3]int{1024, 1024, 1024}, MaxGrid: [3]int{math.MaxInt32, 65536, 65536}, TotalMemory: 64 << 30}
}

// Launch is one recorded kernel launch.
type Launch struct {
	Kernel      string
	Grid, Block [3]uintptr
	Shared      uintptr
	Stream      uintptr
	// Slots are the sixteen argument values, read through the kernelParams table.
	Slots [16]uint64
	// Device was current on the launching thread.
	Device int
	// Attrs are the launch attributes of cuLaunchKernelEx, ID to the first 32-bit word
	// of the value; nil for cuLaunchKernel.
	Attrs map[uint32]uint32
}

// Copy is one recorded asynchronous copy.
type Copy struct {
	Call        string
	To, From, N uintptr
	Stream      uintptr
}

// Record is one recorded cuEventRecord or hipEventRecord.
type Record struct{ Event, Stream uintptr }

// Live counts the driver objects that exist, made by the backend or by Engine calls.
type Live struct{ Memory, Streams, Events, Modules int }

// GPU is the fake driver's state: its devices, what the test set up, what exists, and a
// record of the calls made. A test reads the record between calls.
type GPU struct {
	mu      sync.Mutex
	devices []Device

	// Fail makes the named call (as the backend binds it, e.g. "hipMalloc") return the
	// code instead of running.
	Fail map[string]int32
	// CompileFails makes every compilation fail; CompileLog, when set, is every
	// compilation's log. A source that holds "#error" fails as with a real compiler.
	CompileFails bool
	CompileLog   string

	hidden   map[string]bool
	current  map[int]int // OS thread id -> the device current there
	retained []int       // CUDA primary-context retains per device
	mem      map[uintptr]*block
	streams  map[uintptr]int // stream -> device
	events   map[uintptr]*event
	modules  map[uintptr][]byte
	funcs    map[uintptr]string // function -> kernel name
	programs map[uintptr]*program
	next     uintptr
	clock    uint64

	// Recorded calls.
	Launches  []Launch
	Copies    []Copy
	Syncs     []uintptr // synchronised streams
	Records   []Record
	Memsets   int
	Freed     []uintptr // device memory freed
	HostFreed []uintptr // pinned host memory freed
	Destroyed []uintptr // streams destroyed
	Compiles  int
	// Source and Options are the last compilation's.
	Source  string
	Options []string
}

type block struct {
	b    []byte // the memory and a guard, so one allocation never abuts the next
	size int
	host bool
}

type event struct {
	device int
	at     uint64 // the clock when recorded, 0 before
}

type program struct {
	src, log string
	out      []byte
}

// guard is the unused tail of every fake allocation: the byte after one allocation is
// never another's, as on a GPU.
const guard = 64

// active is the GPU the callbacks serve.
var active atomic.Pointer[GPU]

// New makes a fake GPU with the given devices, numbered from 0, and makes it the one the
// callbacks serve, for the rest of the test.
func New(devices ...Device) *GPU {
	g := &GPU{devices: devices, Fail: map[string]int32{}, hidden: map[string]bool{}, current: map[int]int{},
		retained: make([]int, len(devices)), mem: map[uintptr]*block{}, streams: map[uintptr]int{},
		events: map[uintptr]*event{}, modules: map[uintptr][]byte{}, funcs: map[uintptr]string{},
		programs: map[uintptr]*program{}, next: 0x1000}
	active.Store(g)
	return g
}

// Hide makes Lookup miss the named functions, as an older library would.
func (g *GPU) Hide(names ...string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, n := range names {
		g.hidden[n] = true
	}
}

// Lookup returns the fake function of that name, CUDA's or HIP's, or 0 when there is
// none or it is hidden: what a backend binds its symbols through.
func (g *GPU) Lookup(name string) uintptr {
	g.mu.Lock()
	hidden := g.hidden[name]
	g.mu.Unlock()
	if hidden {
		return 0
	}
	return callbacks()[name]
}

// Context is the CUDA primary context of device i.
func Context(i int) uintptr { return 0xC0DE0 + uintptr(i)<<8 }

// Retained returns how many holds there are on the CUDA primary context of device i.
func (g *GPU) Retained(i int) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.retained[i]
}

// Live counts what exists now: device and host memory, streams, events and modules.
func (g *GPU) Live() Live {
	g.mu.Lock()
	defer g.mu.Unlock()
	return Live{Memory: len(g.mem), Streams: len(g.streams), Events: len(g.events), Modules: len(g.modules)}
}

// Memory returns a copy of n bytes of fake memory at p, or nil when that is not inside
// one allocation.
func (g *GPU) Memory(p uintptr, n int) []byte {
	g.mu.Lock()
	defer g.mu.Unlock()
	return bytes.Clone(g.region(p, uintptr(n)))
}

// Modules returns the code objects of the loaded modules.
func (g *GPU) Modules() [][]byte {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out [][]byte
	for _, m := range g.modules {
		out = append(out, m)
	}
	return out
}

// Programs returns how many compiler programs exist (created and not destroyed).
func (g *GPU) Programs() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.programs)
}

// EngineStream makes a stream of device i outside the backend, as an engine that shares
// the device would own one.
func (g *GPU) EngineStream(i int) uintptr {
	g.mu.Lock()
	defer g.mu.Unlock()
	h := g.handle()
	g.streams[h] = i
	return h
}

// EngineAlloc makes n bytes of device memory outside the backend, as an engine would.
func (g *GPU) EngineAlloc(n int) uintptr {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.alloc(uintptr(n), false)
}

func (g *GPU) handle() uintptr {
	g.next += 0x10
	return g.next
}

// alloc keeps Go memory as fake memory and returns its address.
func (g *GPU) alloc(n uintptr, host bool) uintptr {
	b := make([]byte, n+guard)
	p := uintptr(unsafe.Pointer(&b[0]))
	g.mem[p] = &block{b: b, size: int(n), host: host}
	return p
}

// region returns the fake memory [p, p+n), or nil when it is not inside one allocation.
func (g *GPU) region(p, n uintptr) []byte {
	for base, m := range g.mem {
		if p >= base && gpurt.Fits(uint64(p-base), uint64(n), uint64(m.size)) {
			return m.b[p-base : p-base+n]
		}
	}
	return nil
}

// at views n bytes at address p, memory the backend handed to "C".
func at(p, n uintptr) []byte { return unsafe.Slice((*byte)(gpurt.CPointer(p)), n) }

func putWord(p, v uintptr)     { *(*uintptr)(gpurt.CPointer(p)) = v }
func putI32(p uintptr, v int)  { *(*int32)(gpurt.CPointer(p)) = int32(v) }
func word(p uintptr) uintptr   { return *(*uintptr)(gpurt.CPointer(p)) }
func slot(p uintptr) uint64    { return *(*uint64)(gpurt.CPointer(p)) }
func f32(p uintptr) float32    { return math.Float32frombits(uint32(slot(p))) }
func cString(p uintptr) string { return gpurt.GoString(p, 1<<20) }

// The calls, shared by both dialects: each takes the words its CUDA and HIP editions
// take and returns a status. enter runs them with the fake locked.

func (g *GPU) ok() int32 { return 0 }

// thread returns the calling OS thread: callbacks run on the thread that made the C call.
func thread() int { return syscall.Gettid() }

// setDevice makes device i current on the calling thread.
func (g *GPU) setDevice(i uintptr) int32 {
	if i >= uintptr(len(g.devices)) {
		return InvalidDevice
	}
	g.current[thread()] = int(i)
	return 0
}

// setContext makes the device of a CUDA context current on the calling thread; context 0
// makes none current.
func (g *GPU) setContext(ctx uintptr) int32 {
	if ctx == 0 {
		delete(g.current, thread())
		return 0
	}
	for i := range g.devices {
		if Context(i) == ctx {
			g.current[thread()] = i
			return 0
		}
	}
	return InvalidContext
}

// onDevice reports whether a device is current on the calling thread.
func (g *GPU) onDevice() bool {
	_, ok := g.current[thread()]
	return ok
}

// stream checks a stream for use on the calling thread: one of the current device's.
func (g *GPU) stream(s uintptr) int32 {
	dev, ok := g.streams[s]
	switch {
	case !ok:
		return InvalidHandle
	case dev != g.current[thread()]:
		return InvalidContext
	}
	return 0
}

func (g *GPU) deviceCount(p uintptr) int32 {
	putI32(p, len(g.devices))
	return 0
}

func (g *GPU) deviceGet(p, ordinal uintptr) int32 {
	if ordinal >= uintptr(len(g.devices)) {
		return InvalidDevice
	}
	putI32(p, int(ordinal))
	return 0
}

func (g *GPU) deviceName(buf, size, dev uintptr) int32 {
	if dev >= uintptr(len(g.devices)) || size == 0 {
		return InvalidValue
	}
	n := copy(at(buf, size-1), g.devices[dev].Name)
	at(buf, size)[n] = 0
	return 0
}

// attribute answers a device attribute query, the attribute numbered as the dialect
// numbers it (attrs).
func (g *GPU) attribute(attrs map[uintptr]func(Device) int, p, attr, dev uintptr) int32 {
	get, ok := attrs[attr]
	if !ok || dev >= uintptr(len(g.devices)) {
		return InvalidValue
	}
	putI32(p, get(g.devices[dev]))
	return 0
}

func (g *GPU) totalMem(p, dev uintptr) int32 {
	if dev >= uintptr(len(g.devices)) {
		return InvalidValue
	}
	putWord(p, uintptr(g.devices[dev].TotalMemory))
	return 0
}

// properties fills a hipDeviceProp_t of size bytes whose gcnArchName is at archOffset.
func (g *GPU) properties(p, dev uintptr, archOffset, size int) int32 {
	if dev >= uintptr(len(g.devices)) {
		return InvalidDevice
	}
	b := at(p, uintptr(size))
	clear(b)
	copy(b[:255], g.devices[dev].Name)
	copy(b[archOffset:archOffset+255], g.devices[dev].ArchName)
	return 0
}

func (g *GPU) retain(pctx, dev uintptr) int32 {
	if dev >= uintptr(len(g.devices)) {
		return InvalidDevice
	}
	g.retained[dev]++
	putWord(pctx, Context(int(dev)))
	return 0
}

func (g *GPU) release(dev uintptr) int32 {
	if dev >= uintptr(len(g.devices)) || g.retained[dev] == 0 {
		return InvalidDevice
	}
	g.retained[dev]--
	return 0
}

func (g *GPU) memAlloc(pp, n uintptr) int32 {
	if n > 1<<30 {
		return OutOfMemory
	}
	putWord(pp, g.alloc(n, false))
	return 0
}

func (g *GPU) hostAlloc(pp, n, flags uintptr) int32 {
	putWord(pp, g.alloc(n, true))
	return 0
}

// free releases an allocation of the kind host says, recording it in freed.
func (g *GPU) free(p uintptr, host bool, freed *[]uintptr) int32 {
	if m, ok := g.mem[p]; !ok || m.host != host {
		return InvalidValue
	}
	delete(g.mem, p)
	*freed = append(*freed, p)
	return 0
}

func (g *GPU) memFree(p uintptr) int32  { return g.free(p, false, &g.Freed) }
func (g *GPU) hostFree(p uintptr) int32 { return g.free(p, true, &g.HostFreed) }

func (g *GPU) addressRange(pbase, psize, p uintptr) int32 {
	for base, m := range g.mem {
		if !m.host && p >= base && p < base+uintptr(m.size) {
			putWord(pbase, base)
			putWord(psize, uintptr(m.size))
			return 0
		}
	}
	return NotFound
}

// copyAsync copies n bytes from host to device (toDevice) or back, on stream s.
func (g *GPU) copyAsync(call string, toDevice bool, to, from, n, s uintptr) int32 {
	if r := g.stream(s); r != 0 {
		return r
	}
	dev := from
	if toDevice {
		dev = to
	}
	if g.region(dev, n) == nil {
		return InvalidValue
	}
	copy(at(to, n), at(from, n))
	g.Copies = append(g.Copies, Copy{Call: call, To: to, From: from, N: n, Stream: s})
	return 0
}

func (g *GPU) memset(dst, v, n, s uintptr) int32 {
	if r := g.stream(s); r != 0 {
		return r
	}
	d := g.region(dst, n)
	if d == nil {
		return InvalidValue
	}
	for i := range d {
		d[i] = byte(v)
	}
	g.Memsets++
	return 0
}

// streamNonBlocking is CU_STREAM_NON_BLOCKING and hipStreamNonBlocking: every stream
// the backends make is one.
const streamNonBlocking = 1

func (g *GPU) streamCreate(p, flags uintptr) int32 {
	if flags != streamNonBlocking {
		return InvalidValue
	}
	h := g.handle()
	g.streams[h] = g.current[thread()]
	putWord(p, h)
	return 0
}

func (g *GPU) streamDestroy(s uintptr) int32 {
	if _, ok := g.streams[s]; !ok {
		return InvalidHandle
	}
	delete(g.streams, s)
	g.Destroyed = append(g.Destroyed, s)
	return 0
}

func (g *GPU) streamSync(s uintptr) int32 {
	if r := g.stream(s); r != 0 {
		return r
	}
	g.Syncs = append(g.Syncs, s)
	return 0
}

// streamOwner answers the device of a stream through put (CUDA writes its context, HIP
// its ordinal); the NULL stream answers the current device.
func (g *GPU) streamOwner(s, p uintptr, put func(p uintptr, device int)) int32 {
	dev, ok := g.streams[s]
	if s == 0 {
		dev, ok = g.current[thread()], true
	}
	if !ok {
		return InvalidHandle
	}
	put(p, dev)
	return 0
}

func (g *GPU) eventCreate(p, flags uintptr) int32 {
	if flags != 0 {
		return InvalidValue
	}
	h := g.handle()
	g.events[h] = &event{device: g.current[thread()]}
	putWord(p, h)
	return 0
}

func (g *GPU) eventDestroy(e uintptr) int32 {
	if _, ok := g.events[e]; !ok {
		return InvalidHandle
	}
	delete(g.events, e)
	return 0
}

func (g *GPU) eventRecord(e, s uintptr) int32 {
	if r := g.stream(s); r != 0 {
		return r
	}
	ev, ok := g.events[e]
	if !ok {
		return InvalidHandle
	}
	g.clock++
	ev.at = g.clock
	g.Records = append(g.Records, Record{Event: e, Stream: s})
	return 0
}

func (g *GPU) eventSync(e uintptr) int32 {
	if _, ok := g.events[e]; !ok {
		return InvalidHandle
	}
	return 0
}

// eventElapsed answers half a millisecond for each record between start and end.
func (g *GPU) eventElapsed(pms, start, end uintptr) int32 {
	s, e := g.events[start], g.events[end]
	if s == nil || e == nil || s.at == 0 || e.at == 0 {
		return InvalidHandle
	}
	*(*float32)(gpurt.CPointer(pms)) = (float32(e.at) - float32(s.at)) / 2
	return 0
}

func (g *GPU) moduleLoad(pm, image uintptr) int32 {
	code := []byte(cString(image))
	if !bytes.HasPrefix(code, []byte(codePrefix)) {
		return InvalidImage
	}
	h := g.handle()
	g.modules[h] = append(code, 0)
	putWord(pm, h)
	return 0
}

func (g *GPU) moduleUnload(m uintptr) int32 {
	if _, ok := g.modules[m]; !ok {
		return InvalidHandle
	}
	delete(g.modules, m)
	return 0
}

func (g *GPU) getFunction(pf, m, name uintptr) int32 {
	n := cString(name)
	if _, ok := g.modules[m]; !ok {
		return InvalidHandle
	}
	if _, ok := kernels[n]; !ok {
		return NotFound
	}
	h := g.handle()
	g.funcs[h] = n
	putWord(pf, h)
	return 0
}

// funcMaxThreads is CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK and its HIP twin.
const funcMaxThreads = 0

func (g *GPU) funcAttribute(p, attr, fn uintptr) int32 {
	k, ok := kernels[g.funcs[fn]]
	if !ok || attr != funcMaxThreads {
		return InvalidValue
	}
	putI32(p, k.maxThreads)
	return 0
}

// paramInfo answers cuFuncGetParamInfo: NotSupported for a kernel the fake cannot
// describe, InvalidValue one past the last parameter.
func (g *GPU) paramInfo(fn, i, poff, psize uintptr) int32 {
	k, ok := kernels[g.funcs[fn]]
	switch {
	case !ok:
		return InvalidHandle
	case k.params == nil:
		return NotSupported
	case i >= uintptr(len(k.params)):
		return InvalidValue
	}
	putWord(poff, i*8)
	putWord(psize, k.params[i])
	return 0
}

func (g *GPU) launch(fn, gx, gy, gz, bx, by, bz, shared, s, params, extra uintptr) int32 {
	if r := g.stream(s); r != 0 {
		return r
	}
	name, ok := g.funcs[fn]
	if !ok || params == 0 || extra != 0 {
		return InvalidValue
	}
	l := Launch{Kernel: name, Grid: [3]uintptr{gx, gy, gz}, Block: [3]uintptr{bx, by, bz}, Shared: shared, Stream: s,
		Device: g.current[thread()]}
	table := unsafe.Slice((*uintptr)(gpurt.CPointer(params)), len(l.Slots))
	for i, p := range table {
		l.Slots[i] = slot(p)
	}
	g.Launches = append(g.Launches, l)
	if run := kernels[name].run; run != nil {
		return run(g, table, gx*gy*gz*bx*by*bz)
	}
	return 0
}

// launchEx is cuLaunchKernelEx: the configuration's shape, stream and attributes (the
// 64-bit CUlaunchConfig and CUlaunchAttribute layouts), then the launch as launch runs it.
func (g *GPU) launchEx(config, fn, params, extra uintptr) int32 {
	if config == 0 {
		return InvalidValue
	}
	u32 := func(off uintptr) uintptr { return uintptr(*(*uint32)(gpurt.CPointer(config + off))) }
	attrs, n := word(config+40), u32(48)
	if n != 0 && attrs == 0 {
		return InvalidValue
	}
	got := map[uint32]uint32{}
	for i := range n {
		a := attrs + 72*i
		got[*(*uint32)(gpurt.CPointer(a))] = *(*uint32)(gpurt.CPointer(a + 8))
	}
	before := len(g.Launches)
	r := g.launch(fn, u32(0), u32(4), u32(8), u32(12), u32(16), u32(20), u32(24), word(config+32), params, extra)
	if len(g.Launches) > before {
		g.Launches[before].Attrs = got
	}
	return r
}

// kernel is one kernel the fake's modules hold.
type kernel struct {
	maxThreads int
	// params are the parameters' sizes; nil: the driver cannot describe them.
	params []uintptr
	// run does the kernel's work over threads threads, its arguments at table's
	// addresses; nil kernels only record their launches.
	run func(g *GPU, table []uintptr, threads uintptr) int32
}

// kernels are those of Source, and probe, which takes any arguments and does nothing.
var kernels = map[string]kernel{
	"add_one": {maxThreads: 1024, params: []uintptr{8, 4}, run: func(g *GPU, a []uintptr, threads uintptr) int32 {
		return g.each(word(a[0]), uintptr(uint32(slot(a[1]))), threads, func(v float32) float32 { return v + 1 })
	}},
	"scale": {maxThreads: 256, params: []uintptr{8, 4, 8}, run: func(g *GPU, a []uintptr, threads uintptr) int32 {
		factor := f32(a[1])
		return g.each(word(a[0]), uintptr(slot(a[2])), threads, func(v float32) float32 { return v * factor })
	}},
	"probe": {maxThreads: 1024},
}

// each applies f to the first min(n, threads) floats at x.
func (g *GPU) each(x, n, threads uintptr, f func(float32) float32) int32 {
	m := g.region(x, 4*n)
	if m == nil {
		return IllegalAddress
	}
	for i := uintptr(0); i < min(n, threads); i++ {
		p := (*float32)(unsafe.Pointer(&m[4*i]))
		*p = f(*p)
	}
	return 0
}

// architectures are what the fake NVRTC says it can compile for.
var architectures = []int32{75, 80, 86, 87, 89, 90, 100, 103, 110, 120, 121}

func (g *GPU) rtcVersion(pmajor, pminor uintptr) int32 {
	putI32(pmajor, rtcMajor)
	putI32(pminor, 0)
	return 0
}

func (g *GPU) archCount(p uintptr) int32 {
	putI32(p, len(architectures))
	return 0
}

func (g *GPU) archs(p uintptr) int32 {
	copy(unsafe.Slice((*int32)(gpurt.CPointer(p)), len(architectures)), architectures)
	return 0
}

func (g *GPU) createProgram(pprog, src, name, nHeaders, headers, includes uintptr) int32 {
	h := g.handle()
	g.programs[h] = &program{src: cString(src)}
	putWord(pprog, h)
	return 0
}

func (g *GPU) destroyProgram(pprog uintptr) int32 {
	if _, ok := g.programs[word(pprog)]; !ok {
		return InvalidValue
	}
	delete(g.programs, word(pprog))
	return 0
}

// compileProgram writes codePrefix and the options as the code, or fails.
func (g *GPU) compileProgram(prog, n, opts uintptr) int32 {
	p, ok := g.programs[prog]
	if !ok {
		return InvalidValue
	}
	g.Compiles++
	g.Source, g.Options = p.src, nil
	for _, o := range unsafe.Slice((*uintptr)(gpurt.CPointer(opts)), n) {
		g.Options = append(g.Options, cString(o))
	}
	p.log = g.CompileLog
	if i := strings.Index(p.src, "#error"); i >= 0 && p.log == "" {
		p.log = "program(1): error: #error directive: " + strings.TrimSpace(p.src[i+len("#error"):])
	}
	if g.CompileFails || strings.Contains(p.src, "#error") {
		return CompilationFailed
	}
	p.out = Code(g.Options...)
	return 0
}

// programText answers a size query (size, for the log or the code) or copies it out.
func (g *GPU) programText(prog, p uintptr, log, size bool) int32 {
	pr, ok := g.programs[prog]
	if !ok {
		return InvalidValue
	}
	text := pr.out
	if log {
		text = append([]byte(pr.log), 0)
	}
	if size {
		putWord(p, uintptr(len(text)))
	} else {
		copy(at(p, uintptr(len(text))), text)
	}
	return 0
}

// Code returns the code object the fake compiler writes for these options.
func Code(options ...string) []byte {
	return append([]byte(codePrefix+" "+strings.Join(options, " ")), 0)
}

// NoopC returns a C function that ignores its arguments and returns 0, the success
// status of every driver here: libm's fegetround (FE_TONEAREST is 0 on x86-64 and
// arm64). Unlike the fake's Go callbacks it allocates nothing, so a test counts and
// times the backend's own work through it.
func NoopC(t testing.TB) uintptr {
	t.Helper()
	libm, err := purego.Dlopen("libm.so.6", purego.RTLD_NOW|purego.RTLD_LOCAL)
	require.NoError(t, err)
	fn, err := purego.Dlsym(libm, "fegetround")
	require.NoError(t, err)
	require.Zero(t, gpurt.CallN(fn), "fegetround must return 0 to stand in for a driver")
	return fn
}
