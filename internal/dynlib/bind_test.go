package dynlib

import (
	"testing"

	"github.com/gumbel-go/gumbel/runtime"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBind(t *testing.T) {
	exported := map[string]uintptr{"a": 1, "b_v2": 2, "b": 3, "opt": 4}
	lookup := func(n string) uintptr { return exported[n] }
	var a, b, o, missingOpt uintptr = 9, 9, 9, 9
	err := Bind("lib", lookup, []Func{
		Required(&a, "a"),
		Required(&b, "b_v2", "b"),
		Optional(&o, "opt"),
		Optional(&missingOpt, "gone"),
	})
	require.NoError(t, err)
	assert.Equal(t, []uintptr{1, 2, 4, 0}, []uintptr{a, b, o, missingOpt}, "the first name that exists wins; a missing optional is 0")

	var c, d uintptr
	err = Bind("/usr/lib/libfoo.so", lookup, []Func{
		Required(&c, "c_v2", "c"),
		Required(&a, "a"),
		Required(&d, "d"),
	})
	require.Error(t, err)
	assert.ErrorIs(t, err, runtime.ErrUnavailable)
	assert.Contains(t, err.Error(), "/usr/lib/libfoo.so lacks c_v2 or c, d")
}
