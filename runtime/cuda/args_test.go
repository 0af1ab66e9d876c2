package cuda

import (
	"math"
	"testing"
	"unsafe"

	"github.com/gumbel-go/gumbel/runtime"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParamBlockPacking(t *testing.T) {
	assert.Equal(t, 16*runtime.MaxArgs, paramBlockBytes)
	block := new(paramBlock)
	base := uintptr(unsafe.Pointer(block))
	block.initTable(base)
	for i, p := range block.table {
		assert.Equal(t, uintptr(unsafe.Pointer(&block.slots[i])), p, "entry %d points at its slot", i)
	}

	buf := &buffer{ptr: 0x7f0000001000, size: 4096}
	var a runtime.Args
	a.Buffer(buf).BufferAt(buf, 256).U32(0xDEADBEEF).U64(0x0123456789ABCDEF).F32(-1.5)
	require.NoError(t, a.Err())
	block.pack(&a)

	// Read each argument as the driver does: through its table entry, at its own size.
	at := func(i int) unsafe.Pointer { return unsafe.Pointer(&block.slots[i]) }
	assert.Equal(t, uint64(0x7f0000001000), *(*uint64)(at(0)))
	assert.Equal(t, uint64(0x7f0000001100), *(*uint64)(at(1)))
	assert.Equal(t, uint32(0xDEADBEEF), *(*uint32)(at(2)))
	assert.Equal(t, uint64(0x0123456789ABCDEF), *(*uint64)(at(3)))
	assert.Equal(t, float32(-1.5), *(*float32)(at(4)))
	assert.Equal(t, uint32(math.Float32bits(-1.5)), uint32(block.slots[4]))
	for i := range 5 {
		assert.Equal(t, a.Kind(i).Size(), []int{8, 8, 4, 8, 4}[i])
	}

	// Repacking a shorter list rewrites only its own slots; the table is untouched.
	table := block.table
	a.Reset().U32(7)
	block.pack(&a)
	assert.Equal(t, uint64(7), block.slots[0])
	assert.Equal(t, table, block.table)
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
		got, err := launchShape("block", c.d, limit)
		if c.ok {
			require.NoError(t, err, "%v", c.d)
			assert.Equal(t, c.want, got)
		} else {
			assert.ErrorIs(t, err, runtime.ErrInvalidArgument, "%v", c.d)
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
		err := checkRange("op", c.off, c.n, c.size)
		if c.ok {
			assert.NoError(t, err, "%+v", c)
		} else {
			assert.ErrorIs(t, err, runtime.ErrInvalidArgument, "%+v", c)
		}
	}
}
