package gpurt

import (
	goruntime "runtime"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
)

func TestCStrings(t *testing.T) {
	c := CString("gfx90a")
	assert.Equal(t, []byte("gfx90a\x00"), c)
	p := uintptr(unsafe.Pointer(&c[0]))
	assert.Equal(t, "gfx90a", GoString(p, 64))
	assert.Equal(t, "gfx", GoString(p, 3), "at most max bytes")
	assert.Equal(t, "", GoString(0, 64), "NULL")
	goruntime.KeepAlive(c)
	assert.Equal(t, []byte("ab"), TrimNUL([]byte("ab\x00cd")))
	assert.Equal(t, []byte("abc"), TrimNUL([]byte("abc")))
}
