package gokernel

import (
	"math"

	"github.com/gumbel-go/gumbel/half"
	"github.com/gumbel-go/gumbel/kernelsrc/abi"
)

// convertChunk is the elements a scan loads (converting 16-bit floats) per step.
const convertChunk = 512

var negInf = float32(math.Inf(-1))

// rowView is one row of logits, typed.
type rowView struct {
	d   abi.DType
	f   []float32
	u16 []uint16
}

// load returns elements [start, start+n) as float32: the row itself for f32, or dst
// filled with the exact conversions of the 16-bit values.
func (v *rowView) load(dst *[convertChunk]float32, start, n int) []float32 {
	switch v.d {
	case abi.F32:
		return v.f[start : start+n]
	case abi.F16:
		src := v.u16[start : start+n]
		out := dst[:len(src)]
		for i, h := range src {
			out[i] = half.Float16ToFloat32(h)
		}
		return out
	default:
		src := v.u16[start : start+n]
		out := dst[:len(src)]
		for i, h := range src {
			out[i] = half.BFloat16ToFloat32(h)
		}
		return out
	}
}

// loadAll returns the whole row as float32: the row itself for f32, or dst (grown to the
// row's length) filled with the exact conversions of the 16-bit values.
func (v *rowView) loadAll(dst *[]float32) []float32 {
	if v.d == abi.F32 {
		return v.f
	}
	out := grow(*dst, len(v.u16))
	*dst = out
	if v.d == abi.F16 {
		for i, h := range v.u16 {
			out[i] = half.Float16ToFloat32(h)
		}
	} else {
		for i, h := range v.u16 {
			out[i] = half.BFloat16ToFloat32(h)
		}
	}
	return out
}

// at returns element i as float32.
func (v *rowView) at(i int) float32 {
	switch v.d {
	case abi.F32:
		return v.f[i]
	case abi.F16:
		return half.Float16ToFloat32(v.u16[i])
	default:
		return half.BFloat16ToFloat32(v.u16[i])
	}
}

// badRow reports the rows the ABI answers with status 3 whatever their buffers hold: a
// temperature that is negative, NaN, infinite, or so small that 1/T overflows (then x·invT
// would be NaN for x = 0); a vocabulary outside [1, abi.MaxVocab].
func badRow(t float32, vocab uint32) bool {
	if !(t >= 0) || t > math.MaxFloat32 || (t > 0 && float32(1/t) > math.MaxFloat32) {
		return true
	}
	return vocab == 0 || vocab > abi.MaxVocab
}

// stepPlus is the row's step plus z, mod 2^64: draw z samples at step + z, and ADVANCE
// moves the step by D.
func stepPlus(p *abi.RowParams, z int) uint64 { return p.Step + uint64(z) }

// grow returns s with length n, reallocated only when its capacity is short: the
// categorical kernel's working memory grows to the largest row and then stays.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// firstIndexOf is the lowest index holding v (0 when none does).
func firstIndexOf(row []float32, v float32) int {
	for i, x := range row {
		if x == v {
			return i
		}
	}
	return 0
}
