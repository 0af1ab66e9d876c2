// Package runtime is the backend-neutral face of gumbel's GPU runtime: devices, buffers,
// streams, events, compiled modules and kernel launches. The sampler drives every backend
// (CUDA, HIP, Metal and the pure-Go CPU device) through these interfaces alone; it asks a
// device for kernels by name and launches them with a grid.
//
// Backends register themselves with [Register] from their package's init; [Open] picks
// one by name or, with "auto", takes the first that opens and records why the others did
// not. The root package gumbel links every backend in and re-exports Open.
package runtime

import (
	"unsafe"
)

// Backend names a family of devices.
type Backend string

// The backends gumbel knows.
const (
	CPU   Backend = "cpu"
	CUDA  Backend = "cuda"
	HIP   Backend = "hip"
	Metal Backend = "metal"
)

// Dim3 is a grid or block shape.
type Dim3 struct{ X, Y, Z int }

// Count returns X·Y·Z, with zero dimensions read as 1.
func (d Dim3) Count() int {
	n := 1
	for _, v := range [3]int{d.X, d.Y, d.Z} {
		if v > 0 {
			n *= v
		}
	}
	return n
}

// DeviceInfo describes what a kernel launch policy needs to know about a device.
type DeviceInfo struct {
	Backend Backend
	// Name is the device's own name, e.g. "NVIDIA H200".
	Name string
	// Arch is the compile target, e.g. "sm_90", "gfx90a", "apple9", "go".
	Arch string
	// Multiprocessors is the number of SMs, CUs or GPU cores; for the CPU device, the
	// number of worker goroutines.
	Multiprocessors int
	// MaxThreadsPerBlock is the largest block a kernel may be launched with.
	MaxThreadsPerBlock int
	// WarpSize is the SIMD width: 32 on NVIDIA and RDNA, 64 on CDNA, the SIMD-group
	// width on Apple GPUs, 1 on the CPU device.
	WarpSize int
	// TotalMemory is the device memory in bytes (0 when unknown).
	TotalMemory uint64
	// L2CacheBytes is the size of the device's last-level cache in bytes: CUDA reports
	// it; 0 elsewhere.
	L2CacheBytes int
	// UnifiedMemory is true when host and device share memory (Apple GPUs, the CPU
	// device): a host slice may be used in place.
	UnifiedMemory bool
	// Libraries lists the shared libraries the backend loaded, by path.
	Libraries []string
}

// Device is one accelerator (or the CPU device). Its methods are safe for concurrent use
// unless a method says otherwise.
type Device interface {
	// Info describes the device.
	Info() DeviceInfo
	// Alloc returns device memory of the given size in bytes, uninitialised.
	Alloc(bytes int) (Buffer, error)
	// AllocHost returns host memory that the device can copy from and to
	// asynchronously (pinned memory on CUDA and HIP).
	AllocHost(bytes int) (HostBuffer, error)
	// Load compiles (or takes from the cache) a program's edition for this backend.
	Load(p *Program) (Module, error)
	// NewStream returns a new stream of work; DefaultStream returns the device's own.
	NewStream() (Stream, error)
	DefaultStream() Stream
	// NewEvent returns an event that can be recorded on a stream and timed.
	NewEvent() (Event, error)
	// Close releases the device. Buffers, streams and modules must not be used after.
	// Close is idempotent on every backend, as the sampler's Close is: a second Close
	// (and any later one) does nothing and returns nil, so a deferred Close after an
	// explicit one is harmless.
	Close() error
}

// Buffer is device memory. Offsets and sizes are in bytes.
type Buffer interface {
	// Size is the buffer's length in bytes.
	Size() int
	// DevicePtr is the buffer's address on the device (for CUDA and HIP a device
	// pointer; for Metal the MTLBuffer object; for the CPU device the address of the
	// host memory). It is valid until Free.
	DevicePtr() uintptr
	// Free releases the memory, unless the buffer wraps memory the caller owns.
	Free() error
}

// HostBuffer is host memory a stream can copy to or from asynchronously.
type HostBuffer interface {
	// Bytes is the memory as a Go slice; it stays valid until Free.
	Bytes() []byte
	Free() error
}

// HostMemory is implemented by buffers whose memory the host can address directly (the
// CPU device, Apple's shared storage). Kernels of the Go edition read their arguments
// through it.
type HostMemory interface {
	HostBytes() []byte
}

// Stream orders work on a device. Methods return when the work is queued (or, on the CPU
// device, done); Synchronize waits for it.
type Stream interface {
	// Launch queues a kernel over grid blocks of block threads. args is read during the
	// call and may be reused as soon as Launch returns.
	Launch(k Kernel, grid, block Dim3, args *Args) error
	// CopyToDevice copies len(src) bytes of host memory to dst at byte offset off.
	// src must stay unchanged until the copy is done (after Synchronize, or at once
	// when src is not a HostBuffer's memory).
	CopyToDevice(dst Buffer, off int, src []byte) error
	// CopyToHost copies len(dst) bytes from src at byte offset off into host memory.
	// dst is valid after Synchronize.
	CopyToHost(dst []byte, src Buffer, off int) error
	// Zero sets n bytes of dst at byte offset off to zero.
	Zero(dst Buffer, off, n int) error
	// Record marks an event at the current point of the stream.
	Record(e Event) error
	// Synchronize waits until everything queued so far is done.
	Synchronize() error
	// Handle is the backend's stream handle (CUstream, hipStream_t, MTLCommandQueue);
	// 0 for the CPU device and for a default stream that has none.
	Handle() uintptr
	// Close releases the stream, unless it wraps one the caller owns. A second Close
	// does nothing and returns nil, as for every handle of every backend.
	Close() error
}

// Event is a point in a stream, for timing and waiting.
type Event interface {
	// Synchronize waits until the event has been reached.
	Synchronize() error
	// ElapsedSince returns the time in milliseconds from start to this event, both
	// recorded and reached.
	ElapsedSince(start Event) (float32, error)
	// Close releases the event; a second Close does nothing and returns nil.
	Close() error
}

// Module is a compiled program.
type Module interface {
	// Kernel returns the kernel of that name, or an error wrapping ErrNoKernel.
	Kernel(name string) (Kernel, error)
	// Close releases the module; a second Close does nothing and returns nil.
	Close() error
}

// Kernel is one entry point of a module.
type Kernel interface {
	Name() string
	// MaxThreadsPerBlock is the largest block this kernel can run with (register and
	// shared-memory use can make it smaller than the device's limit).
	MaxThreadsPerBlock() int
}

// Program is a kernel set in every language a backend can run: the same kernel names and
// arguments in each edition.
type Program struct {
	// Name identifies the program in errors and cache keys.
	Name string
	// CUDA is CUDA C++ source; HIP compiles it through its prelude.
	CUDA string
	// CUDAHeaders are the files CUDA includes, by include name; NVRTC and hiprtc get
	// them in memory.
	CUDAHeaders map[string]string
	// HIPPrelude is prepended to CUDA when compiling with hiprtc.
	HIPPrelude string
	// Metal is Metal Shading Language source.
	Metal string
	// Go is the Go edition, run by the CPU device: kernel name to function.
	Go map[string]GoKernel
}

// GoKernel is one kernel of the Go edition. The CPU device calls it once per block of the
// grid, blocks spread over goroutines; the function does the work of the whole block.
type GoKernel func(b *BlockContext)

// BlockContext is what a Go-edition kernel sees of its launch.
type BlockContext struct {
	// Block is this block's index in the grid; Grid the grid's shape and BlockDim the
	// block's (a Go kernel does the block's work itself, but launch policies agree
	// with the GPU editions through it).
	Block, Grid, BlockDim Dim3
	// Args are the launch arguments.
	Args *Args
	// Scratch is the Go edition's shared memory: state a kernel may keep in the
	// context between blocks. The CPU device gives each worker its own context and
	// never touches Scratch, so working memory stored here is reused by every later
	// block that worker runs, without a pool and without allocating.
	Scratch any
}

// HostBytes returns the host memory of a CPU or shared-storage buffer, or nil.
func HostBytes(b Buffer) []byte {
	if h, ok := b.(HostMemory); ok {
		return h.HostBytes()
	}
	return nil
}

// BytesOf views a slice of plain numbers as bytes, without copying.
func BytesOf[T ~uint8 | ~uint16 | ~uint32 | ~uint64 | ~int32 | ~int64 | ~float32 | ~float64](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(s[0])))
}

// DependentLauncher is implemented by streams that can start a kernel before the kernel
// queued just before it on the stream has finished (CUDA's programmatic dependent launch,
// sm_90 and later): the second kernel's launch and its first instructions then overlap the
// end of the first. Such a kernel must wait for the earlier grid (PTX griddepcontrol.wait)
// before it reads what that grid writes or writes what it reads, and on every path before
// it exits; the kernels of package kernelsrc that are launched this way do. Where the
// device, the driver or the compile target cannot overlap them, LaunchDependent is Launch
// and Overlaps reports false.
type DependentLauncher interface {
	LaunchDependent(k Kernel, grid, block Dim3, args *Args) error
	Overlaps() bool
}

// GraphCapturer is implemented by streams that can record the work queued on them into a
// graph and replay it with one launch (CUDA graphs). Between BeginCapture and EndCapture
// the stream records instead of running; only launches (no copies to or from Go memory,
// no synchronisation) may be queued meanwhile.
type GraphCapturer interface {
	BeginCapture() error
	EndCapture() (Graph, error)
}

// Graph is recorded work that can be replayed on a stream.
type Graph interface {
	// Launch queues one replay of the graph on s.
	Launch(s Stream) error
	Close() error
}
