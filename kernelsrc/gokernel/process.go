package gokernel

import (
	"math"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
)

// processor turns a row's logits into its processed logits x' (ABI.md): bias, then
// penalties, then the allowed-token mask and the token bitmask, each operation rounded
// to float32 on its own.
// The explicit float32 conversions keep Go from fusing a multiply and a subtract (the
// spec allows it to on arm64, ppc64 and s390x), so every platform rounds alike.
type processor struct {
	active bool
	bias   []float32 // the row's V biases (BIAS), else nil
	counts []uint32  // the row's V counts (PENALTIES), else nil
	mask   []uint32  // the row's ceil(V/32) mask words (MASK), else nil
	// bitmask is the ceil(V/32) words of the row's bitmask row (BITMASK), else nil.
	bitmask []uint32
	// The row's penalty values, validated by the host.
	repetition, frequency, presence float32
}

// unmasked returns the processed logit of element i before the mask.
func (p *processor) unmasked(x float32, i int) float32 {
	if p.bias != nil {
		x = float32(x + p.bias[i])
	}
	if p.counts != nil {
		c := p.counts[i]
		if c != 0 && p.repetition != 1 {
			if x > 0 {
				x = float32(x / p.repetition)
			} else {
				x = float32(x * p.repetition)
			}
		}
		if out := c & abi.CountMask; out > 0 {
			x = float32(x - float32(p.frequency*float32(out)))
			x = float32(x - p.presence)
		}
	}
	return x
}

// allowed reports whether the mask and the bitmask let element i through.
func (p *processor) allowed(i int) bool {
	return (p.mask == nil || p.mask[i>>5]>>(i&31)&1 != 0) &&
		(p.bitmask == nil || p.bitmask[i>>5]>>(i&31)&1 != 0)
}

// processed returns the processed logit x' of element i whose logit is x.
func (p *processor) processed(x float32, i int) float32 {
	if !p.active {
		return x
	}
	x = p.unmasked(x, i)
	if !p.allowed(i) {
		return negInf
	}
	return x
}

// processGroup writes the processed logits of xs (global index base) to dst, and returns
// abi.SeenNonFinite when a NaN or +Inf was masked away: the status is taken before the
// mask, but the scans that follow see only -Inf there.
func (p *processor) processGroup(xs []float32, base int, dst []float32) (s abi.Seen) {
	if p.bias == nil && p.counts == nil {
		return p.maskGroup(xs, base, dst)
	}
	dst = dst[:len(xs)]
	for j, x := range xs {
		i := base + j
		x = p.unmasked(x, i)
		if !p.allowed(i) {
			s |= seen(x) & abi.SeenNonFinite
			x = negInf
		}
		dst[j] = x
	}
	return s
}

// masksOnly reports whether the row's only processors are masks (MASK, BITMASK).
func (p *processor) masksOnly() bool {
	return p.active && p.bias == nil && p.counts == nil
}

// maskWord is the word of allowed bits, mask and bitmask together, of elements 32w to
// 32w+31.
func (p *processor) maskWord(w int) uint32 {
	m := ^uint32(0)
	if p.mask != nil {
		m = p.mask[w]
	}
	if p.bitmask != nil {
		m &= p.bitmask[w]
	}
	return m
}

// maskRows are words w0 to w0+n-1 of the mask and of the bitmask, for vector code that
// ANDs the two: a row with only one of them gets that one twice.
func (p *processor) maskRows(w0, n int) (a, b []uint32) {
	a, b = p.mask, p.bitmask
	if a == nil {
		a = b
	} else if b == nil {
		b = a
	}
	return a[w0 : w0+n : w0+n], b[w0 : w0+n : w0+n]
}

// maskGroup is processGroup for a row whose only processors are masks (a grammar's
// bitmask, allowed and banned tokens). The whole mask words go to maskApply (vector code
// where the CPU has it), the elements before the first word boundary and after the last
// to maskGroupGo.
func (p *processor) maskGroup(xs []float32, base int, dst []float32) abi.Seen {
	dst = dst[:len(xs)]
	head := min(len(xs), -base&31)
	n, hidden := p.maskApply(xs[head:], (base+head)>>5, dst[head:])
	s := p.maskGroupGo(xs[:head], base, dst[:head])
	s |= p.maskGroupGo(xs[head+n:], base+head+n, dst[head+n:])
	if hidden {
		s |= abi.SeenNonFinite
	}
	return s
}

// maskGroupGo is maskGroup in Go, which the tests check the vector code against: one
// mask word per 32 elements and a select per element without a branch, since a
// grammar's bits are too irregular to predict.
func (p *processor) maskGroupGo(xs []float32, base int, dst []float32) abi.Seen {
	dst = dst[:len(xs)]
	var hidden uint32 // a NaN or +Inf the mask removed
	for j := 0; j < len(xs); {
		i := base + j
		w := p.maskWord(i>>5) >> (i & 31)
		n := min(len(xs)-j, 32-i&31)
		seg, out := xs[j:j+n], dst[j:j+n]
		switch {
		case w|^uint32(0)<<n == ^uint32(0): // all allowed: most words of an open grammar state
			copy(out, seg)
			j += n
			continue
		case w&^(^uint32(0)<<n) == 0: // none allowed: most words of a closed one
			for k, x := range seg {
				hidden |= nanOrPosInf(math.Float32bits(x))
				out[k] = negInf
			}
			j += n
			continue
		}
		out = out[:len(seg)]
		var odd uint32 // bit 31: a masked NaN or infinity, -Inf included
		for k, x := range seg {
			keep := -(w >> uint(k) & 1) // all ones where allowed
			b := math.Float32bits(x)
			out[k] = math.Float32frombits(b&keep | negInfBits&^keep)
			odd |= b&^keep&0x7FFFFFFF + 0x00800000
		}
		if odd>>31 != 0 { // rare: tell a masked -Inf from a masked NaN or +Inf
			for k, x := range seg {
				if w>>uint(k)&1 == 0 {
					hidden |= nanOrPosInf(math.Float32bits(x))
				}
			}
		}
		j += n
	}
	if hidden != 0 {
		return abi.SeenNonFinite
	}
	return 0
}

// negInfBits are the bits of -Inf.
const negInfBits = 0xFF800000

// nanOrPosInf has bit 31 set when the float32 of bits b is NaN or +Inf (not -Inf).
func nanOrPosInf(b uint32) uint32 {
	v := b ^ negInfBits
	isNegInf := (v - 1) &^ v
	return (b&0x7FFFFFFF + 0x00800000) &^ isNegInf & 0x80000000
}

// seen is what one processed logit shows the row's observations: SeenNonFinite for NaN
// or +Inf, SeenFinite for a finite value, nothing for -Inf. The hot scans inline the
// same test.
func seen(x float32) abi.Seen {
	switch {
	case x-x == 0:
		return abi.SeenFinite
	case x == negInf:
		return 0
	}
	return abi.SeenNonFinite
}
