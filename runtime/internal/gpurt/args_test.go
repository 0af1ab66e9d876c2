package gpurt

import (
	"math"
	"testing"
	"unsafe"

	"github.com/gumbel-go/gumbel/runtime"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var testBackend = &Backend{Pkg: "test", Brand: "TEST", Status: func(code int32) error { return testStatus(code) }}

type testStatus int32

func (s testStatus) Error() string { return "status " + string(rune('0'+s)) }

// fakeBuffer is a runtime.Buffer at a made-up device address.
type fakeBuffer struct{ ptr uintptr }

func (b fakeBuffer) Size() int          { return 4096 }
func (b fakeBuffer) DevicePtr() uintptr { return b.ptr }
func (b fakeBuffer) Free() error        { return nil }

func TestParamBlockPacking(t *testing.T) {
	assert.Equal(t, 16*runtime.MaxArgs, ParamBlockBytes)
	block := InitParamBlock(unsafe.Pointer(new(ParamBlock)))
	for i := range runtime.MaxArgs {
		assert.Equal(t, uintptr(unsafe.Pointer(&block.slots[i])), block.Entry(i), "entry %d points at its slot", i)
	}

	buf := fakeBuffer{ptr: 0x7f0000001000}
	var a runtime.Args
	a.Buffer(buf).BufferAt(buf, 256).U32(0xDEADBEEF).U64(0x0123456789ABCDEF).F32(-1.5)
	require.NoError(t, a.Err())
	block.Pack(&a)

	// Read each argument as the driver does: through its table entry, at its own size.
	at := func(i int) unsafe.Pointer { return unsafe.Pointer(&block.slots[i]) }
	assert.Equal(t, uint64(0x7f0000001000), *(*uint64)(at(0)))
	assert.Equal(t, uint64(0x7f0000001100), *(*uint64)(at(1)))
	assert.Equal(t, uint32(0xDEADBEEF), *(*uint32)(at(2)))
	assert.Equal(t, uint64(0x0123456789ABCDEF), *(*uint64)(at(3)))
	assert.Equal(t, float32(-1.5), *(*float32)(at(4)))
	assert.Equal(t, uint64(math.Float32bits(-1.5)), block.Slot(4))

	// Repacking a shorter list rewrites the slots and zeroes the rest, so a kernel given
	// too few arguments reads zeros, not the last launch's pointers; the table stays.
	table := block.table
	a.Reset().U32(7)
	block.Pack(&a)
	assert.Equal(t, uint64(7), block.Slot(0))
	for i := 1; i < runtime.MaxArgs; i++ {
		assert.Zero(t, block.Slot(i), "slot %d", i)
	}
	assert.Equal(t, table, block.table)
	assert.Zero(t, testing.AllocsPerRun(100, func() { block.Pack(&a) }))
}

func TestLaunchShape(t *testing.T) {
	limit := [3]int{1024, 1024, 64}
	cases := []struct {
		d    runtime.Dim3
		want [3]uintptr
		ok   bool
	}{
		{runtime.Dim3{X: 256}, [3]uintptr{256, 1, 1}, true},
		{runtime.Dim3{}, [3]uintptr{1, 1, 1}, true},
		{runtime.Dim3{X: 1024, Y: 1024, Z: 64}, [3]uintptr{1024, 1024, 64}, true},
		{runtime.Dim3{X: 1025}, [3]uintptr{}, false},
		{runtime.Dim3{X: 1, Z: 65}, [3]uintptr{}, false},
		{runtime.Dim3{X: -1}, [3]uintptr{}, false},
		{runtime.Dim3{X: 1, Y: math.MinInt}, [3]uintptr{}, false},
	}
	for _, c := range cases {
		got, err := testBackend.LaunchShape("block", c.d, limit)
		if c.ok {
			require.NoError(t, err, "%v", c.d)
			assert.Equal(t, c.want, got)
		} else {
			assert.ErrorIs(t, err, runtime.ErrInvalidArgument, "%v", c.d)
			assert.ErrorContains(t, err, "test: block")
		}
	}
}

func TestCheckRange(t *testing.T) {
	cases := []struct {
		off, n, size int
		ok           bool
	}{
		{0, 0, 0, true},
		{0, 64, 64, true},
		{64, 0, 64, true},
		{60, 4, 64, true},
		{61, 4, 64, false},
		{65, 0, 64, false},
		{-1, 1, 64, false},
		{0, -1, 64, false},
		{math.MaxInt, 2, 64, false},
		{2, math.MaxInt, 64, false},
		{math.MaxInt, math.MaxInt, math.MaxInt, false},
	}
	for _, c := range cases {
		err := testBackend.CheckRange("op", c.off, c.n, c.size)
		if c.ok {
			assert.NoError(t, err, "%+v", c)
		} else {
			assert.ErrorIs(t, err, runtime.ErrInvalidArgument, "%+v", c)
		}
	}
}
