package mslemu

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/gumbel-go/gumbel/kernelsrc"
	"github.com/gumbel-go/gumbel/kernelsrc/gokernel"
)

func TestTranslate(t *testing.T) {
	cases := []struct {
		name, src, want string
		rewrites        int
	}{
		{"array", "    threadgroup ulong scratch[32];\n", "    MSL_TG_ARRAY(ulong, scratch, 32);\n", 1},
		{"atomic array", "\tthreadgroup atomic_uint hist[256];", "\tMSL_TG_ARRAY(atomic_uint, hist, 256);", 1},
		{"scalar", "  threadgroup uint flag;", "  MSL_TG_SCALAR(uint, flag);", 1},
		{"pointer parameter", "inline void f(threadgroup uint* p,\n", "inline void f(threadgroup uint* p,\n", 0},
		{"struct member", "    threadgroup atomic_uint* hist_lo;\n", "    threadgroup atomic_uint* hist_lo;\n", 0},
		{"two", "threadgroup uint a[1];\nthreadgroup float b;\n", "MSL_TG_ARRAY(uint, a, 1);\nMSL_TG_SCALAR(float, b);\n", 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, n := Translate(c.src)
			assert.Equal(t, c.want, got)
			assert.Equal(t, c.rewrites, n)
		})
	}
}

// TestMetalEditionHasEveryKernel: every kernel of the Go edition, the reference, is an
// entry point of the Metal edition (kernelsrc.Metal) by the same name. It needs no
// compiler, so it runs where the emulation tests skip.
func TestMetalEditionHasEveryKernel(t *testing.T) {
	for name := range gokernel.Kernels() {
		assert.Contains(t, kernelsrc.Metal, "kernel void "+name+"(", "the Metal edition has no kernel %s", name)
	}
}
