// Package cpu is gumbel's CPU device: it runs the Go edition of a program's kernels on a
// persistent pool of goroutines, one goroutine per block at a time, like the blocks of a
// GPU grid. Memory is ordinary Go memory (64-byte aligned), streams run their work
// synchronously, and the device registers itself as the last choice of "auto".
package cpu

import (
	"fmt"
	"math"
	goruntime "runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/gumbel-go/gumbel/runtime"
)

// Rank orders the CPU device after every GPU backend under "auto".
const Rank = 100

// maxThreadsPerBlock mirrors the GPU limit so that launch policies agree.
const maxThreadsPerBlock = 1024

// maxGridDim bounds each grid dimension (CUDA's grid.x limit), so block counts stay far
// from overflow.
const maxGridDim = 1<<31 - 1

// alignment of every buffer Alloc returns, in bytes (a cache line; the widest vector).
const alignment = 64

func init() {
	runtime.Register(runtime.CPU, Rank, func(ordinal int) (runtime.Device, error) {
		if ordinal != 0 {
			return nil, fmt.Errorf("%w: cpu: device %d (there is only device 0)", runtime.ErrInvalidArgument, ordinal)
		}
		return Open()
	}, probe)
}

func probe() runtime.ProbeResult {
	return runtime.ProbeResult{Backend: runtime.CPU, Devices: []runtime.DeviceInfo{info(goruntime.GOMAXPROCS(0))}}
}

func info(workers int) runtime.DeviceInfo {
	return runtime.DeviceInfo{
		Backend:            runtime.CPU,
		Name:               fmt.Sprintf("Go CPU (%d workers, %s)", workers, goruntime.GOARCH),
		Arch:               "go",
		Multiprocessors:    workers,
		MaxThreadsPerBlock: maxThreadsPerBlock,
		WarpSize:           1,
		UnifiedMemory:      true,
	}
}

// device is the CPU device.
type device struct {
	info   runtime.DeviceInfo
	closed atomic.Bool
	pool   *pool
	stream *stream // the default stream
}

// Open returns a CPU device with one worker per GOMAXPROCS.
func Open() (runtime.Device, error) {
	workers := max(goruntime.GOMAXPROCS(0), 1)
	d := &device{info: info(workers), pool: newPool(workers)}
	d.stream = &stream{dev: d, isDefault: true}
	return d, nil
}

func (d *device) check(call string) error {
	if d.closed.Load() {
		return fmt.Errorf("cpu: %s: %w", call, runtime.ErrClosed)
	}
	return nil
}

func (d *device) Info() runtime.DeviceInfo { return d.info }

func (d *device) Alloc(bytes int) (runtime.Buffer, error) {
	if err := d.check("Alloc"); err != nil {
		return nil, err
	}
	mem, err := alignedBytes("Alloc", bytes)
	if err != nil {
		return nil, err
	}
	return &buffer{mem: mem, dev: d}, nil
}

func (d *device) AllocHost(bytes int) (runtime.HostBuffer, error) {
	if err := d.check("AllocHost"); err != nil {
		return nil, err
	}
	mem, err := alignedBytes("AllocHost", bytes)
	if err != nil {
		return nil, err
	}
	return &hostBuffer{mem: mem}, nil
}

// alignedBytes returns zeroed Go memory of n bytes starting on an alignment boundary.
func alignedBytes(call string, n int) ([]byte, error) {
	if n < 0 {
		return nil, fmt.Errorf("cpu: %s(%d): %w: negative size", call, n, runtime.ErrInvalidArgument)
	}
	if uint64(n) > math.MaxInt64/2 {
		return nil, fmt.Errorf("cpu: %s(%d): %w", call, n, runtime.ErrOutOfMemory)
	}
	raw := make([]byte, n+alignment)
	off := int(-uintptr(unsafe.Pointer(unsafe.SliceData(raw))) & (alignment - 1))
	return raw[off : off+n : off+n], nil
}

func (d *device) Load(p *runtime.Program) (runtime.Module, error) {
	if err := d.check("Load"); err != nil {
		return nil, err
	}
	if p == nil {
		return nil, fmt.Errorf("cpu: Load: %w: nil program", runtime.ErrInvalidArgument)
	}
	if len(p.Go) == 0 {
		return nil, fmt.Errorf("cpu: Load %q: %w: the program has no Go edition", p.Name, runtime.ErrInvalidArgument)
	}
	m := &module{dev: d, name: p.Name, kernels: make(map[string]*kernel, len(p.Go))}
	for name, fn := range p.Go {
		if fn == nil {
			return nil, fmt.Errorf("cpu: Load %q: %w: kernel %q has no function", p.Name, runtime.ErrInvalidArgument, name)
		}
		m.kernels[name] = &kernel{name: name, fn: fn, mod: m}
	}
	return m, nil
}

func (d *device) NewStream() (runtime.Stream, error) {
	if err := d.check("NewStream"); err != nil {
		return nil, err
	}
	return &stream{dev: d}, nil
}

func (d *device) DefaultStream() runtime.Stream { return d.stream }

func (d *device) NewEvent() (runtime.Event, error) {
	if err := d.check("NewEvent"); err != nil {
		return nil, err
	}
	return &event{dev: d}, nil
}

// Close stops the workers once the launch in progress (if any) is done. A second Close
// does nothing and returns nil.
func (d *device) Close() error {
	if d.closed.Swap(true) {
		return nil
	}
	d.pool.close()
	return nil
}

// buffer is device memory: Go memory the host addresses directly.
type buffer struct {
	mem     []byte
	dev     *device // nil for Wrap
	freed   atomic.Bool
	wrapped bool
}

// Wrap returns a Buffer over caller-owned memory, without copying. Kernels and copies
// use b in place; Free forgets it but does not release it.
func Wrap(b []byte) runtime.Buffer { return &buffer{mem: b, wrapped: true} }

func (b *buffer) Size() int { return len(b.mem) }

func (b *buffer) DevicePtr() uintptr {
	if b.freed.Load() || len(b.mem) == 0 {
		return 0
	}
	return uintptr(unsafe.Pointer(unsafe.SliceData(b.mem)))
}

// HostBytes makes the buffer a runtime.HostMemory; nil once freed.
func (b *buffer) HostBytes() []byte {
	if b.freed.Load() {
		return nil
	}
	return b.mem
}

func (b *buffer) Free() error {
	if b.dev != nil {
		if err := b.dev.check("Buffer.Free"); err != nil {
			return err
		}
	}
	if b.freed.Swap(true) {
		return fmt.Errorf("cpu: Buffer.Free: %w: already freed", runtime.ErrInvalidArgument)
	}
	return nil
}

// hostBuffer is host memory for copies; on the CPU device any Go memory will do.
type hostBuffer struct {
	mem   []byte
	freed atomic.Bool
}

func (h *hostBuffer) Bytes() []byte {
	if h.freed.Load() {
		return nil
	}
	return h.mem
}

func (h *hostBuffer) Free() error {
	if h.freed.Swap(true) {
		return fmt.Errorf("cpu: HostBuffer.Free: %w: already freed", runtime.ErrInvalidArgument)
	}
	return nil
}

// module is a loaded program: its Go kernels.
type module struct {
	dev     *device
	name    string
	kernels map[string]*kernel
	closed  atomic.Bool
}

func (m *module) Kernel(name string) (runtime.Kernel, error) {
	if err := m.dev.check("Module.Kernel"); err != nil {
		return nil, err
	}
	if m.closed.Load() {
		return nil, fmt.Errorf("cpu: Module.Kernel: %w", runtime.ErrClosed)
	}
	k, ok := m.kernels[name]
	if !ok {
		return nil, fmt.Errorf("cpu: program %q: %w: %q", m.name, runtime.ErrNoKernel, name)
	}
	return k, nil
}

func (m *module) Close() error {
	if err := m.dev.check("Module.Close"); err != nil {
		return err
	}
	m.closed.Store(true) // a second Close is harmless, as on every backend
	return nil
}

// kernel is one Go kernel of a module.
type kernel struct {
	name string
	fn   runtime.GoKernel
	mod  *module
}

func (k *kernel) Name() string            { return k.name }
func (k *kernel) MaxThreadsPerBlock() int { return maxThreadsPerBlock }

// event is a recorded point in time (work before it is always done on this device).
type event struct {
	dev      *device
	nanos    atomic.Int64 // monotonic time since epoch; valid when recorded
	recorded atomic.Bool
	closed   atomic.Bool
}

// epoch anchors event times to the monotonic clock.
var epoch = time.Now()

func (e *event) check(call string) error {
	if err := e.dev.check(call); err != nil {
		return err
	}
	if e.closed.Load() {
		return fmt.Errorf("cpu: %s: %w", call, runtime.ErrClosed)
	}
	return nil
}

func (e *event) Synchronize() error { return e.check("Event.Synchronize") }

func (e *event) ElapsedSince(start runtime.Event) (float32, error) {
	if err := e.check("Event.ElapsedSince"); err != nil {
		return 0, err
	}
	s, ok := start.(*event)
	if !ok || s == nil || s.dev != e.dev {
		return 0, fmt.Errorf("cpu: Event.ElapsedSince: %w: start is not an event of this device", runtime.ErrInvalidArgument)
	}
	if err := s.check("Event.ElapsedSince"); err != nil {
		return 0, err
	}
	if !e.recorded.Load() || !s.recorded.Load() {
		return 0, fmt.Errorf("cpu: Event.ElapsedSince: %w: event not recorded", runtime.ErrInvalidArgument)
	}
	return float32(float64(e.nanos.Load()-s.nanos.Load()) / 1e6), nil
}

func (e *event) Close() error {
	if err := e.dev.check("Event.Close"); err != nil {
		return err
	}
	e.closed.Store(true) // a second Close is harmless, as on every backend
	return nil
}

// stream runs work at once, in the calling goroutine (helped by the pool for launches).
type stream struct {
	dev       *device
	isDefault bool
	closed    atomic.Bool
}

func (s *stream) check(call string) error {
	if err := s.dev.check(call); err != nil {
		return err
	}
	if s.closed.Load() {
		return fmt.Errorf("cpu: %s: %w", call, runtime.ErrClosed)
	}
	return nil
}

func (s *stream) Launch(k runtime.Kernel, grid, block runtime.Dim3, args *runtime.Args) error {
	if err := s.check("Launch"); err != nil {
		return err
	}
	kk, ok := k.(*kernel)
	if !ok || kk == nil || kk.mod.dev != s.dev {
		return fmt.Errorf("cpu: Launch: %w: the kernel does not belong to this device", runtime.ErrInvalidArgument)
	}
	if kk.mod.closed.Load() {
		return fmt.Errorf("cpu: Launch %s: %w: module closed", kk.name, runtime.ErrClosed)
	}
	if args == nil {
		return fmt.Errorf("cpu: Launch %s: %w: nil arguments", kk.name, runtime.ErrInvalidArgument)
	}
	if err := args.Err(); err != nil {
		return fmt.Errorf("cpu: Launch %s: %w", kk.name, err)
	}
	if !validDims(grid, maxGridDim) {
		return fmt.Errorf("cpu: Launch %s: %w: grid %v (every dimension must be in 1..%d)", kk.name, runtime.ErrInvalidArgument, grid, maxGridDim)
	}
	if !validDims(block, maxThreadsPerBlock) || block.X*block.Y*block.Z > maxThreadsPerBlock {
		return fmt.Errorf("cpu: Launch %s: %w: block %v (at most %d threads)", kk.name, runtime.ErrInvalidArgument, block, maxThreadsPerBlock)
	}
	if grid.X*grid.Y > maxGridDim || grid.X*grid.Y*grid.Z > maxGridDim {
		return fmt.Errorf("cpu: Launch %s: %w: grid %v has too many blocks", kk.name, runtime.ErrInvalidArgument, grid)
	}
	return s.dev.pool.run(kk, grid, block, args)
}

func validDims(d runtime.Dim3, limit int) bool {
	return d.X >= 1 && d.Y >= 1 && d.Z >= 1 && d.X <= limit && d.Y <= limit && d.Z <= limit
}

// hostSpan returns b's memory from off for n bytes, or an error naming call.
func hostSpan(call string, b runtime.Buffer, off, n int) ([]byte, error) {
	if b == nil {
		return nil, fmt.Errorf("cpu: %s: %w: nil buffer", call, runtime.ErrInvalidArgument)
	}
	mem, ok := b.(runtime.HostMemory)
	if !ok {
		return nil, fmt.Errorf("cpu: %s: %w: buffer is not host-addressable memory", call, runtime.ErrInvalidArgument)
	}
	bytes := mem.HostBytes()
	if bytes == nil && b.Size() > 0 {
		return nil, fmt.Errorf("cpu: %s: %w: buffer freed", call, runtime.ErrInvalidArgument)
	}
	if off < 0 || n < 0 || off > len(bytes) || n > len(bytes)-off {
		return nil, fmt.Errorf("cpu: %s: %w: %d bytes at offset %d of a %d-byte buffer", call, runtime.ErrInvalidArgument, n, off, len(bytes))
	}
	return bytes[off : off+n], nil
}

func (s *stream) CopyToDevice(dst runtime.Buffer, off int, src []byte) error {
	if err := s.check("CopyToDevice"); err != nil {
		return err
	}
	span, err := hostSpan("CopyToDevice", dst, off, len(src))
	if err != nil {
		return err
	}
	copy(span, src)
	return nil
}

func (s *stream) CopyToHost(dst []byte, src runtime.Buffer, off int) error {
	if err := s.check("CopyToHost"); err != nil {
		return err
	}
	span, err := hostSpan("CopyToHost", src, off, len(dst))
	if err != nil {
		return err
	}
	copy(dst, span)
	return nil
}

func (s *stream) Zero(dst runtime.Buffer, off, n int) error {
	if err := s.check("Zero"); err != nil {
		return err
	}
	span, err := hostSpan("Zero", dst, off, n)
	if err != nil {
		return err
	}
	clear(span)
	return nil
}

func (s *stream) Record(e runtime.Event) error {
	if err := s.check("Record"); err != nil {
		return err
	}
	ev, ok := e.(*event)
	if !ok || ev == nil || ev.dev != s.dev {
		return fmt.Errorf("cpu: Record: %w: not an event of this device", runtime.ErrInvalidArgument)
	}
	if err := ev.check("Record"); err != nil {
		return err
	}
	ev.nanos.Store(int64(time.Since(epoch)))
	ev.recorded.Store(true)
	return nil
}

// Synchronize returns at once: work is done when the call that queued it returns.
func (s *stream) Synchronize() error { return s.check("Synchronize") }

func (s *stream) Handle() uintptr { return 0 }

// Close closes a stream from NewStream; closing the default stream does nothing.
func (s *stream) Close() error {
	if err := s.dev.check("Stream.Close"); err != nil {
		return err
	}
	if s.isDefault {
		return nil
	}
	s.closed.Store(true) // a second Close is harmless, as on every backend
	return nil
}
