//go:build linux && (amd64 || arm64)

package hip

import (
	"testing"

	"github.com/ebitengine/purego"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/runtime"
)

// noopC returns the address of a C function that ignores its arguments and returns 0
// (fegetround: the default rounding mode, FE_TONEAREST, is 0 on x86-64 and arm64), for
// counting and timing the Go side of a call without a GPU or the fake's Go callbacks,
// which allocate.
func noopC(t testing.TB) uintptr {
	t.Helper()
	libm, err := purego.Dlopen("libm.so.6", purego.RTLD_NOW|purego.RTLD_LOCAL)
	require.NoError(t, err)
	fn, err := purego.Dlsym(libm, "fegetround")
	require.NoError(t, err)
	return fn
}

// hotDevice opens a fake device whose per-step calls then go to a C no-op.
func hotDevice(t testing.TB) (*Device, runtime.Stream, runtime.Kernel, *runtime.Args, runtime.Buffer, runtime.HostBuffer, runtime.Event) {
	d, err := open(fakeDriver(newFake()), fakeCompiler(), 0)
	require.NoError(t, err)
	forgetCode()
	mod, err := d.Load(fakeProgram)
	require.NoError(t, err)
	k, err := mod.Kernel("probe_fill")
	require.NoError(t, err)
	buf, err := d.Alloc(4096)
	require.NoError(t, err)
	host, err := d.AllocHost(4096)
	require.NoError(t, err)
	ev, err := d.NewEvent()
	require.NoError(t, err)
	s, err := d.NewStream()
	require.NoError(t, err)
	noop := noopC(t)
	drv := d.drv
	drv.hipSetDevice, drv.hipModuleLaunchKernel, drv.hipMemcpyHtoDAsync = noop, noop, noop
	drv.hipMemcpyDtoHAsync, drv.hipMemsetD8Async, drv.hipEventRecord, drv.hipStreamSynchronize = noop, noop, noop, noop
	args := new(runtime.Args)
	args.Buffer(buf).Buffer(buf).Buffer(buf).Buffer(buf).Buffer(buf).Buffer(buf).U64(1024).U32(1000)
	return d, s, k, args, buf, host, ev
}

func TestPerStepCallsDoNotAllocate(t *testing.T) {
	_, s, k, args, buf, host, ev := hotDevice(t)
	grid, block := runtime.Dim3{X: 8, Y: 4}, runtime.Dim3{X: 1024}
	steps := []struct {
		name string
		op   func() error
	}{
		{"Launch", func() error { return s.Launch(k, grid, block, args) }},
		{"CopyToDevice from a HostBuffer", func() error { return s.CopyToDevice(buf, 64, host.Bytes()[:256]) }},
		{"CopyToHost into a HostBuffer", func() error { return s.CopyToHost(host.Bytes()[:256], buf, 64) }},
		{"Zero", func() error { return s.Zero(buf, 0, 512) }},
		{"Record", func() error { return s.Record(ev) }},
		{"Synchronize", func() error { return s.Synchronize() }},
	}
	for _, step := range steps {
		t.Run(step.name, func(t *testing.T) {
			require.NoError(t, step.op())
			allocs := testing.AllocsPerRun(100, func() {
				if err := step.op(); err != nil {
					t.Fatal(err)
				}
			})
			assert.Zero(t, allocs)
		})
	}
}

// BenchmarkLaunchOverhead measures the Go side of a launch: checks, argument packing,
// thread locking and two purego calls (hipSetDevice, hipModuleLaunchKernel) into a C
// no-op.
func BenchmarkLaunchOverhead(b *testing.B) {
	_, s, k, args, _, _, _ := hotDevice(b)
	grid, block := runtime.Dim3{X: 8, Y: 4}, runtime.Dim3{X: 1024}
	b.ReportAllocs()
	for b.Loop() {
		if err := s.Launch(k, grid, block, args); err != nil {
			b.Fatal(err)
		}
	}
}
