package runtime

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeBuffer is a Buffer with host memory at a made-up device address.
type fakeBuffer struct {
	mem  []byte
	addr uintptr
}

func (b *fakeBuffer) Size() int          { return len(b.mem) }
func (b *fakeBuffer) DevicePtr() uintptr { return b.addr }
func (b *fakeBuffer) Free() error        { return nil }
func (b *fakeBuffer) HostBytes() []byte  { return b.mem }

func TestDim3Count(t *testing.T) {
	tests := []struct {
		d    Dim3
		want int
	}{
		{Dim3{}, 1},
		{Dim3{X: 4}, 4},
		{Dim3{X: 4, Y: 3, Z: 2}, 24},
		{Dim3{X: 0, Y: 5, Z: 0}, 5},
		{Dim3{X: -2, Y: 3}, 3},
	}
	for _, tc := range tests {
		assert.Equal(t, tc.want, tc.d.Count(), "%+v", tc.d)
	}
}

func TestArgs(t *testing.T) {
	buf := &fakeBuffer{mem: make([]byte, 64), addr: 0x1000}
	var a Args
	a.Reset().Buffer(buf).BufferAt(buf, 16).U32(7).U64(math.MaxUint64).F32(1.5)
	require.NoError(t, a.Err())
	require.Equal(t, 5, a.Len())
	assert.Equal(t, []ArgKind{ArgBuffer, ArgBuffer, ArgU32, ArgU64, ArgF32}, []ArgKind{a.Kind(0), a.Kind(1), a.Kind(2), a.Kind(3), a.Kind(4)})
	assert.Equal(t, uint64(0x1000), *a.Word(0))
	assert.Equal(t, uint64(0x1010), *a.Word(1), "a buffer argument's word is its address plus the offset")
	b, off := a.BufferArg(1)
	assert.Same(t, buf, b)
	assert.Equal(t, 16, off)
	assert.Len(t, a.HostBytesArg(1), 48)
	assert.Equal(t, uint32(7), a.U32Arg(2))
	assert.Equal(t, uint64(math.MaxUint64), a.U64Arg(3))
	assert.Equal(t, float32(1.5), a.F32Arg(4))
	assert.Equal(t, []int{8, 8, 4, 8, 4}, []int{a.Kind(0).Size(), a.Kind(1).Size(), a.Kind(2).Size(), a.Kind(3).Size(), a.Kind(4).Size()})

	// Reset forgets the buffers and the error.
	a.Reset()
	assert.Zero(t, a.Len())
	b, _ = a.BufferArg(0)
	assert.Nil(t, b)

	errCases := []struct {
		name  string
		build func(*Args)
	}{
		{"nil buffer", func(a *Args) { a.Buffer(nil) }},
		{"negative offset", func(a *Args) { a.BufferAt(buf, -1) }},
		{"offset past the end", func(a *Args) { a.BufferAt(buf, 65) }},
		{"too many arguments", func(a *Args) {
			for range MaxArgs + 1 {
				a.U32(1)
			}
		}},
	}
	for _, tc := range errCases {
		t.Run(tc.name, func(t *testing.T) {
			var a Args
			tc.build(&a)
			assert.ErrorIs(t, a.Err(), ErrInvalidArgument)
			assert.LessOrEqual(t, a.Len(), MaxArgs)
		})
	}
	assert.Zero(t, testing.AllocsPerRun(100, func() {
		a.Reset().Buffer(buf).BufferAt(buf, 8).U32(1).U64(2).F32(3)
	}), "building arguments allocates nothing")
}

func TestBytesOfAndHostBytes(t *testing.T) {
	f := []float32{1, 2}
	b := BytesOf(f)
	require.Len(t, b, 8)
	b[0], b[1], b[2], b[3] = 0, 0, 0x40, 0x40 // 3.0 little-endian
	assert.Equal(t, float32(3), f[0], "BytesOf views the slice without copying")
	assert.Nil(t, BytesOf([]uint64(nil)))
	assert.NotNil(t, HostBytes(&fakeBuffer{mem: make([]byte, 1)}))
	assert.Nil(t, HostBytes(deviceOnly{}))
}

type deviceOnly struct{}

func (deviceOnly) Size() int          { return 0 }
func (deviceOnly) DevicePtr() uintptr { return 0 }
func (deviceOnly) Free() error        { return nil }

func TestCompileError(t *testing.T) {
	inner := errors.New("NVRTC_ERROR_COMPILATION")
	err := error(&CompileError{Backend: CUDA, Program: "sampling", Log: "line 3: error", Err: inner})
	assert.ErrorIs(t, err, ErrCompile)
	assert.ErrorIs(t, err, inner)
	assert.Equal(t, "cuda: compiling sampling: NVRTC_ERROR_COMPILATION\nline 3: error", err.Error())
}

// withRegistry runs f with only the given backends registered.
func withRegistry(t *testing.T, regs ...registration) {
	registryMu.Lock()
	saved := registry
	registry = nil
	registryMu.Unlock()
	t.Cleanup(func() {
		registryMu.Lock()
		registry = saved
		registryMu.Unlock()
	})
	for _, r := range regs {
		Register(r.name, r.rank, r.open, r.probe)
	}
}

// openedDevice is a Device that only reports its backend.
type openedDevice struct {
	Device
	backend Backend
}

func (d openedDevice) Info() DeviceInfo { return DeviceInfo{Backend: d.backend} }

func opener(b Backend, err error) Opener {
	return func(int) (Device, error) {
		if err != nil {
			return nil, err
		}
		return openedDevice{backend: b}, nil
	}
}

func TestOpen(t *testing.T) {
	noGPU := fmt.Errorf("%w: no libcuda", ErrUnavailable)
	withRegistry(t,
		registration{name: CPU, rank: 100, open: opener(CPU, nil)},
		registration{name: CUDA, rank: 10, open: opener(CUDA, noGPU),
			probe: func() ProbeResult { return ProbeResult{Err: noGPU} }},
		registration{name: HIP, rank: 20, open: opener(HIP, fmt.Errorf("%w: no ROCm", ErrUnavailable))},
	)
	assert.Equal(t, []Backend{CUDA, HIP, CPU}, Backends(), "auto order follows rank")

	t.Setenv(EnvBackend, "")
	d, err := Open(OpenOptions{})
	require.NoError(t, err)
	assert.Equal(t, CPU, d.Info().Backend)
	require.Len(t, d.Skipped, 2, "auto records why each GPU backend did not open")
	assert.ErrorIs(t, d.Skipped[0], ErrUnavailable)
	assert.Contains(t, d.Skipped[0].Error(), "cuda")

	t.Setenv(EnvBackend, "cpu")
	d, err = Open(OpenOptions{})
	require.NoError(t, err)
	assert.Equal(t, CPU, d.Info().Backend)
	assert.Empty(t, d.Skipped)

	_, err = Open(OpenOptions{Backend: " CUDA "})
	assert.ErrorIs(t, err, ErrUnavailable, "an explicit backend that cannot open is an error, not a fallback")

	_, err = Open(OpenOptions{Backend: "tpu"})
	assert.ErrorIs(t, err, ErrUnknownBackend)

	probes := ProbeAll()
	require.Len(t, probes, 3)
	assert.Equal(t, CUDA, probes[0].Backend)
	assert.ErrorIs(t, probes[0].Err, ErrUnavailable)
	assert.Error(t, probes[1].Err, "a backend without a probe says so")
}

func TestOpenWithoutBackends(t *testing.T) {
	withRegistry(t)
	_, err := Open(OpenOptions{Backend: "auto"})
	assert.ErrorIs(t, err, ErrUnavailable)
}

func TestLibrarySearch(t *testing.T) {
	s := LibrarySearch{
		What:   "libcuda",
		EnvVar: "GUMBEL_TEST_LIBRARY",
		Names:  []string{"libcuda.so.1", "libcuda.so"},
		Dirs:   []string{"/usr/local/cuda/lib64/stubs", "/usr/lib"},
		Reject: func(p string) bool { return strings.Contains(p, "/stubs/") },
	}
	t.Setenv("GUMBEL_TEST_LIBRARY", "")
	assert.Equal(t, []string{"libcuda.so.1", "libcuda.so",
		"/usr/local/cuda/lib64/stubs/libcuda.so.1", "/usr/local/cuda/lib64/stubs/libcuda.so",
		"/usr/lib/libcuda.so.1", "/usr/lib/libcuda.so"}, s.Candidates())

	var tried []string
	h, path, err := s.Find(func(p string) (uintptr, error) {
		tried = append(tried, p)
		if p == "/usr/lib/libcuda.so" {
			return 42, nil
		}
		return 0, fmt.Errorf("%s: cannot open shared object file", p)
	})
	require.NoError(t, err)
	assert.Equal(t, uintptr(42), h)
	assert.Equal(t, "/usr/lib/libcuda.so", path)
	assert.NotContains(t, tried, "/usr/local/cuda/lib64/stubs/libcuda.so.1", "the stub is never loaded")

	_, _, err = s.Find(func(p string) (uintptr, error) { return 0, errors.New(p + ": not found") })
	require.ErrorIs(t, err, ErrUnavailable)
	msg := err.Error()
	assert.Contains(t, msg, "set GUMBEL_TEST_LIBRARY")
	assert.Contains(t, msg, "/usr/local/cuda/lib64/stubs/libcuda.so.1: refused")
	assert.NotContains(t, msg, "libcuda.so.1: libcuda.so.1", "a loader message that names the path is not prefixed again")

	t.Setenv("GUMBEL_TEST_LIBRARY", "/opt/x/libcuda.so.1")
	assert.Equal(t, []string{"/opt/x/libcuda.so.1"}, s.Candidates(), "an explicit path is the only candidate")
}
