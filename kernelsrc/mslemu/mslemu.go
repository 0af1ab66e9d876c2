// Package mslemu executes the Metal edition of the sampling kernels (kernelsrc/metal,
// joined into one source as kernelsrc.Metal) on the CPU, so that its logic is tested
// without Apple hardware.
//
// cxx/mslemu.h maps the MSL that the kernels use onto C++20 (address spaces, attributes,
// vector types, SIMD-group functions, barriers, atomics, precise and fast math);
// cxx/mslemu.cpp runs every GPU thread as a fiber under a seeded random scheduler;
// cxx/driver.cpp reads launch cases from a file (every kernel, with draws, processors
// and records; the filtered route as filter_max then filtered on the same buffers;
// shard_select with its shard buffer's starting contents), runs them and writes back
// tokens (score: ranks), status, records, topn outputs, shard keys (shard_select: the
// whole shard buffer), counts and params, and answers probes of the kernels' building
// blocks (cxx/probes.inc). The tests of this package translate kernelsrc.Metal
// (Translate), compile it with g++ through these files (the binary is cached under
// $GUMBEL_CACHE_DIR or the user cache folder, keyed by every source and the compiler
// version) and require the Go edition's tokens, status, counts, steps and shard buffers
// on random inputs, its log-probability records and topn values to 1e-5 of the
// normaliser, and package philox's noise bit for bit. Without g++ they skip.
//
// What the emulation proves: the kernels' control flow, indexing (every buffer, every
// threadgroup array and every fiber stack ends at a guard page; an optional buffer that
// no row uses is 8 bytes of poison), reductions, radix selections, the split-phase
// protocol and the once-per-row RECORD and ADVANCE under many interleavings, SIMD widths
// from 8 to 64, the noise arithmetic and the double-float log1p, as compiled C++ with the
// same float32 operations. What it cannot prove: that the Metal compiler accepts the
// source, Apple's precise::log and precise::exp (emulated correctly rounded) and
// fast::exp (emulated with a 2^-21 error, not Apple's), the correction in gb_div_rn (C++
// division is already correctly rounded), weak memory ordering on the GPU (the
// emulator is sequentially consistent), and how the GPU treats float32 subnormals.
package mslemu

import (
	"regexp"
)

// Source files of the emulator, relative to this package's directory.
var Sources = []string{"cxx/mslemu.h", "cxx/mslemu_run.h", "cxx/mslemu.cpp", "cxx/driver.cpp", "cxx/probes.inc",
	"cxx/include/metal_stdlib"}

var (
	tgArray  = regexp.MustCompile(`(?m)^([ \t]*)threadgroup[ \t]+([A-Za-z_][A-Za-z0-9_]*)[ \t]+([A-Za-z_][A-Za-z0-9_]*)[ \t]*\[([^\]\n]+)\][ \t]*;`)
	tgScalar = regexp.MustCompile(`(?m)^([ \t]*)threadgroup[ \t]+([A-Za-z_][A-Za-z0-9_]*)[ \t]+([A-Za-z_][A-Za-z0-9_]*)[ \t]*;`)
)

// Translate rewrites MSL source for the emulator and returns how many declarations it
// rewrote. A threadgroup variable declared in a kernel ("threadgroup T name[N];" or
// "threadgroup T name;") is one object shared by the whole threadgroup, which C++ has
// no way to say; the rewrite turns it into a reference to storage the emulator keeps per
// threadgroup. Everything else compiles as it stands under mslemu.h.
func Translate(src string) (string, int) {
	n := 0
	out := tgArray.ReplaceAllStringFunc(src, func(m string) string {
		n++
		g := tgArray.FindStringSubmatch(m)
		return g[1] + "MSL_TG_ARRAY(" + g[2] + ", " + g[3] + ", " + g[4] + ");"
	})
	out = tgScalar.ReplaceAllStringFunc(out, func(m string) string {
		n++
		g := tgScalar.FindStringSubmatch(m)
		return g[1] + "MSL_TG_SCALAR(" + g[2] + ", " + g[3] + ");"
	})
	return out, n
}
