package nccl

import (
	"fmt"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/gumbel-go/gumbel/collective"
	"github.com/gumbel-go/gumbel/internal/dynlib"
	"github.com/gumbel-go/gumbel/runtime"
)

// EnvLibrary holds the path of libnccl; when it is set, nothing else is tried.
const EnvLibrary = "GUMBEL_NCCL_LIBRARY"

// Result is an NCCL status (ncclResult_t). It is an error; errors.Is matches it as
// itself, and InvalidArgument also as collective.ErrArgument and
// runtime.ErrInvalidArgument.
type Result int32

// NCCL's statuses (nccl.h).
const (
	Success            Result = 0
	UnhandledCudaError Result = 1
	SystemError        Result = 2
	InternalError      Result = 3
	InvalidArgument    Result = 4
	InvalidUsage       Result = 5
	RemoteError        Result = 6
	InProgress         Result = 7
	Timeout            Result = 8
)

var resultNames = [...]string{"ncclSuccess", "ncclUnhandledCudaError", "ncclSystemError", "ncclInternalError",
	"ncclInvalidArgument", "ncclInvalidUsage", "ncclRemoteError", "ncclInProgress", "ncclTimeout"}

// String returns the status's name in nccl.h, e.g. "ncclInvalidUsage", or
// "ncclResult_t(n)" for a number it does not know.
func (r Result) String() string {
	if r >= 0 && int(r) < len(resultNames) {
		return resultNames[r]
	}
	return "ncclResult_t(" + strconv.Itoa(int(r)) + ")"
}

// Error returns the status's name and, once a library is loaded, its description
// (ncclGetErrorString), e.g. "ncclInvalidUsage: invalid usage (run with NCCL_DEBUG=WARN
// for details)".
func (r Result) Error() string {
	if f := describe.Load(); f != nil {
		if text := (*f)(r); text != "" {
			return r.String() + ": " + text
		}
	}
	return r.String()
}

// Is matches InvalidArgument to the sentinels of a bad argument.
func (r Result) Is(target error) bool {
	return r == InvalidArgument && (target == collective.ErrArgument || target == runtime.ErrInvalidArgument)
}

// describe is the loaded library's ncclGetErrorString, for Result.Error.
var describe atomic.Pointer[func(Result) string]

// The ncclDataType_t and ncclRedOp_t values of the reductions collective.Comm offers
// (nccl.h).
const (
	ncclUint64  = 5
	ncclFloat32 = 7
	ncclFloat64 = 8

	ncclSum = 0
	ncclMax = 2
)

// dataType returns NCCL's number and name for dt; "" when it has none.
func dataType(dt collective.DType) (uintptr, string) {
	switch dt {
	case collective.Uint64:
		return ncclUint64, "ncclUint64"
	case collective.Float32:
		return ncclFloat32, "ncclFloat32"
	case collective.Float64:
		return ncclFloat64, "ncclFloat64"
	}
	return 0, ""
}

// redOp returns NCCL's number and name for op; "" when it has none.
func redOp(op collective.Op) (uintptr, string) {
	switch op {
	case collective.OpMax:
		return ncclMax, "ncclMax"
	case collective.OpSum:
		return ncclSum, "ncclSum"
	}
	return 0, ""
}

// UniqueID is what the ranks of one communicator share to find each other
// (ncclUniqueId): rank 0 makes it with Library.UniqueID and passes it to the other
// processes, which hand it to InitRank.
type UniqueID [128]byte

// cUniqueID is ncclUniqueId as a C struct, so purego passes it by value the way the C ABI
// passes a 128-byte struct (in memory on amd64, by reference to a copy on arm64).
type cUniqueID struct{ Internal UniqueID }

// Library is a loaded libnccl. Its methods are safe for concurrent use.
type Library struct {
	path   string
	handle uintptr

	ncclGetVersion, ncclGetUniqueId, ncclCommInitRank, ncclCommInitAll   uintptr
	ncclCommDestroy, ncclAllReduce, ncclGetErrorString, ncclGetLastError uintptr
	// commInitRank calls ncclCommInitRank, which takes the unique id by value: purego's
	// RegisterFunc lays the struct out (by reflection, so only for this set-up call).
	commInitRank func(comm *uintptr, nranks int32, id cUniqueID, rank int32) int32

	// anyDevice lets tests run a fake library on the CPU device: devices that are not
	// CUDA devices make their calls on the calling thread.
	anyDevice bool
}

// Open loads libnccl: the path in GUMBEL_NCCL_LIBRARY when it is set, otherwise
// libnccl.so.2 where the system loader finds it, in the CUDA toolkit's folders or in
// NVIDIA's Python wheels. It returns an error wrapping runtime.ErrUnavailable when no
// library loads, when the one found lacks a function the package calls, and on
// platforms NCCL does not run on.
func Open() (*Library, error) {
	if err := supported(); err != nil {
		return nil, err
	}
	h, path, err := search().Find(dynlib.Open)
	if err != nil {
		return nil, err
	}
	return bind(path, func(name string) uintptr { return dynlib.Symbol(h, name) }, h)
}

// search is where libnccl is looked for.
func search() runtime.LibrarySearch {
	s := runtime.LibrarySearch{What: "libnccl (NVIDIA's collective communications library)", EnvVar: EnvLibrary,
		Names: []string{"libnccl.so.2", "libnccl.so"}}
	triple := "x86_64-linux-gnu"
	if goruntime.GOARCH == "arm64" {
		triple = "aarch64-linux-gnu"
	}
	s.Dirs = []string{"/usr/lib/" + triple, "/usr/lib64", "/usr/local/cuda/lib64", "/usr/local/nccl/lib"}
	// The nvidia-nccl-cu12 and -cu13 wheels, which PyTorch installs.
	s.Dirs = append(s.Dirs, runtime.PythonPackageDirs("nvidia", "nccl", "lib")...)
	return s
}

// bind looks up the functions the package calls in the library at path (handle h) and
// makes Result.Error ask it for descriptions.
func bind(path string, lookup func(name string) uintptr, h uintptr) (*Library, error) {
	l := &Library{path: path, handle: h}
	var missing []string
	for _, f := range []struct {
		dst      *uintptr
		name     string
		optional bool
	}{
		{&l.ncclGetVersion, "ncclGetVersion", false},
		{&l.ncclGetUniqueId, "ncclGetUniqueId", false},
		{&l.ncclCommInitRank, "ncclCommInitRank", false},
		{&l.ncclCommInitAll, "ncclCommInitAll", false},
		{&l.ncclCommDestroy, "ncclCommDestroy", false},
		{&l.ncclAllReduce, "ncclAllReduce", false},
		{&l.ncclGetErrorString, "ncclGetErrorString", false},
		// NCCL 2.13 and later; earlier errors go without the message.
		{&l.ncclGetLastError, "ncclGetLastError", true},
	} {
		if *f.dst = lookup(f.name); *f.dst == 0 && !f.optional {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: %s lacks %s (too old, or not libnccl)", runtime.ErrUnavailable, path, strings.Join(missing, ", "))
	}
	purego.RegisterFunc(&l.commInitRank, l.ncclCommInitRank)
	errorString := l.ncclGetErrorString
	f := func(r Result) string { return goString(callN(errorString, uintptr(r)), 512) }
	describe.Store(&f)
	return l, nil
}

// Version returns the library's version code (ncclGetVersion): 10000·major + 100·minor
// + patch, e.g. 22703 for 2.27.3 (1000·major for versions before 2.9).
func (l *Library) Version() (int, error) {
	var v int32
	if r := result(callN(l.ncclGetVersion, uintptr(unsafe.Pointer(&v)))); r != Success {
		return 0, l.failed("ncclGetVersion", r, 0)
	}
	return int(v), nil
}

// UniqueID makes a new id for one communicator (ncclGetUniqueId): call it on one rank
// and pass the id to every rank's InitRank.
func (l *Library) UniqueID() (UniqueID, error) {
	var id UniqueID
	if r := result(callN(l.ncclGetUniqueId, uintptr(unsafe.Pointer(&id)))); r != Success {
		return UniqueID{}, l.failed("ncclGetUniqueId", r, 0)
	}
	return id, nil
}

// InitRank makes rank's handle on the communicator of nranks ranks that id names
// (ncclCommInitRank), on dev, a device of runtime/cuda: one process (or goroutine) per
// rank. It returns once every rank has joined, so the ranks call it concurrently.
func (l *Library) InitRank(dev runtime.Device, id UniqueID, nranks, rank int) (*Comm, error) {
	call := fmt.Sprintf("ncclCommInitRank(nranks %d, rank %d)", nranks, rank)
	if nranks < 1 || rank < 0 || rank >= nranks || nranks > 1<<30 {
		return nil, fmt.Errorf("nccl: %s: %w: rank out of range", call, collective.ErrArgument)
	}
	p, err := l.place("InitRank", dev)
	if err != nil {
		return nil, err
	}
	var h uintptr
	err = p.run(func() error {
		if r := Result(l.commInitRank(&h, int32(nranks), cUniqueID{id}, int32(rank))); r != Success {
			return l.failed(call, r, 0)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return newComm(l, h, rank, nranks, p), nil
}

// InitAll makes one communicator over devs, devices of runtime/cuda driven by this
// process (ncclCommInitAll), and returns its ranks in the order of devs.
func (l *Library) InitAll(devs []runtime.Device) ([]*Comm, error) {
	if len(devs) == 0 || len(devs) > 1<<30 {
		return nil, fmt.Errorf("nccl: InitAll: %w: %d devices", collective.ErrArgument, len(devs))
	}
	places := make([]placement, len(devs))
	ordinals := make([]int32, len(devs))
	for i, dev := range devs {
		p, err := l.place("InitAll", dev)
		if err != nil {
			return nil, err
		}
		places[i] = p
		ordinals[i] = int32(p.ordinal)
		if p.ordinal < 0 {
			ordinals[i] = int32(i)
		}
	}
	handles := make([]uintptr, len(devs))
	var r Result
	// NCCL sets each device itself; the first one's context makes the call's thread a
	// CUDA thread to begin with.
	err := places[0].run(func() error {
		r = result(callN(l.ncclCommInitAll, uintptr(unsafe.Pointer(&handles[0])), uintptr(len(devs)), uintptr(unsafe.Pointer(&ordinals[0]))))
		return nil
	})
	if err != nil {
		return nil, err
	}
	if r != Success {
		return nil, l.failed(fmt.Sprintf("ncclCommInitAll(%d devices %v)", len(devs), ordinals), r, 0)
	}
	comms := make([]*Comm, len(devs))
	for i, h := range handles {
		comms[i] = newComm(l, h, i, len(devs), places[i])
	}
	return comms, nil
}

// placement is how a communicator's calls reach its device: run makes them on a thread
// where the device's context is current.
type placement struct {
	run     func(func() error) error
	ordinal int // the CUDA device number; -1 for a test's CPU device
}

// cudaDevice is what a communicator needs of a device of runtime/cuda.
type cudaDevice interface {
	Ordinal() int
	WithContext(f func() error) error
}

// place refuses a device NCCL cannot use, and says how to reach one it can.
func (l *Library) place(op string, dev runtime.Device) (placement, error) {
	if dev == nil {
		return placement{}, fmt.Errorf("nccl: %s: %w: nil device", op, collective.ErrArgument)
	}
	info := dev.Info()
	if d, ok := dev.(cudaDevice); ok && info.Backend == runtime.CUDA {
		return placement{run: d.WithContext, ordinal: d.Ordinal()}, nil
	}
	if l.anyDevice {
		return placement{run: onCaller, ordinal: -1}, nil
	}
	return placement{}, fmt.Errorf("nccl: %s: %w: %s is a %s device; NCCL runs on CUDA devices (runtime/cuda)", op, collective.ErrArgument, info.Name, info.Backend)
}

// onCaller runs f on the calling thread.
func onCaller(f func() error) error { return f() }

// failed wraps a status with the call that returned it and, when the library keeps one,
// its last error message.
func (l *Library) failed(call string, r Result, comm uintptr) error {
	if l.ncclGetLastError != 0 {
		if msg := goString(callN(l.ncclGetLastError, comm), 1024); msg != "" {
			return fmt.Errorf("nccl: %s: %w; NCCL's last error: %s", call, r, msg)
		}
	}
	return fmt.Errorf("nccl: %s: %w", call, r)
}

// result reads a C call's return word as a status.
func result(word uintptr) Result { return Result(int32(word)) }

// callN calls a C function for set-up work and returns its raw result word. Arguments
// written as uintptr(unsafe.Pointer(p)) in the call expression keep p alive and in place
// until the call returns (the uintptrescapes rule); the variadic slice makes this
// allocate, so AllReduce goes through its communicator's argument words instead.
//
//go:uintptrescapes
func callN(fn uintptr, args ...uintptr) uintptr {
	r, _, _ := purego.SyscallN(fn, args...)
	return r
}

// goString copies the NUL-terminated C string at p, of at most max bytes; NULL gives "".
func goString(p uintptr, max int) string {
	if p == 0 {
		return ""
	}
	// Through memory, so vet does not take C memory for Go memory.
	base := *(*unsafe.Pointer)(unsafe.Pointer(&p))
	n := 0
	for n < max && *(*byte)(unsafe.Add(base, n)) != 0 {
		n++
	}
	return string(unsafe.Slice((*byte)(base), n))
}
