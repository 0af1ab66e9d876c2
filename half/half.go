// Package half converts between float32 and the two 16-bit float formats that LLM logits
// come in: IEEE 754 binary16 ("float16") and bfloat16 (the top half of a float32).
// Narrowing rounds to nearest, ties to even, overflows to infinity and keeps NaN a NaN
// (with as much of its payload as fits); widening is exact.
package half

import "math"

// Float16 returns the IEEE binary16 value nearest to f (ties to even). Values too large
// for binary16 become ±Inf, values below half its smallest subnormal become ±0, and a NaN
// stays a NaN.
func Float16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23) & 0xff
	mant := b & 0x7fffff

	if exp == 0xff {
		if mant == 0 {
			return sign | 0x7c00
		}
		// Keep the payload's top bits; a payload living only in the dropped low bits
		// would otherwise turn the NaN into an infinity.
		m := uint16(mant >> 13)
		if m == 0 {
			m = 0x200
		}
		return sign | 0x7c00 | m
	}

	e := exp - 127 + 15 // binary16 biased exponent
	if e >= 31 {
		return sign | 0x7c00
	}
	if e >= 1 {
		q := uint32(e)<<10 | mant>>13
		rem := mant & 0x1fff
		// A carry out of the mantissa correctly bumps the exponent, up to Inf.
		if rem > 0x1000 || (rem == 0x1000 && q&1 == 1) {
			q++
		}
		return sign | uint16(q)
	}

	// Subnormal result: count units of 2^-24. The float32 value is m·2^(exp-150)
	// with the implicit bit in m, so the unit count is m >> (14 - e).
	shift := uint(14 - e)
	if shift > 24 {
		// Below 2^-25 (half the smallest subnormal): rounds to zero.
		return sign
	}
	m := mant
	if exp != 0 {
		m |= 0x800000
	}
	q := m >> shift
	rem := m & (1<<shift - 1)
	halfway := uint32(1) << (shift - 1)
	// A carry into 0x400 yields the smallest normal, which is the right answer.
	if rem > halfway || (rem == halfway && q&1 == 1) {
		q++
	}
	return sign | uint16(q)
}

// Float16ToFloat32 returns the float32 value of binary16 bits h; every binary16 value,
// subnormals, infinities and NaN payloads included, is exactly representable.
func Float16ToFloat32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	em := uint32(h & 0x7fff)
	if em >= 0x7c00 {
		// Inf or NaN: widen the exponent to all ones and keep the payload.
		return math.Float32frombits(sign | 0x7f800000 | (em&0x3ff)<<13)
	}
	// Placing exponent and mantissa 13 bits up gives a float32 with the right
	// mantissa but an exponent bias 112 too small (and, for binary16 subnormals, a
	// float32 subnormal with the same digits); scaling by 2^112 is exact for both.
	v := math.Float32frombits(em<<13) * 0x1p112
	return math.Float32frombits(math.Float32bits(v) | sign)
}

// BFloat16 returns the bfloat16 value nearest to f (ties to even). Values that round
// past the largest bfloat16 become ±Inf, and a NaN stays a NaN.
func BFloat16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		h := uint16(b >> 16)
		if h&0x7f == 0 {
			h |= 0x40
		}
		return h
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// BFloat16ToFloat32 returns the float32 value of bfloat16 bits b (exact: bfloat16 is the
// top half of a float32).
func BFloat16ToFloat32(b uint16) float32 {
	return math.Float32frombits(uint32(b) << 16)
}
