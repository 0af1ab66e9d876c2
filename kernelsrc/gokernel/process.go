package gokernel

import "github.com/gumbel-go/gumbel/kernelsrc/abi"

// processor turns a row's logits into its processed logits x' (ABI.md): bias, then
// penalties, then the allowed-token mask, each operation rounded to float32 on its own.
// The explicit float32 conversions keep Go from fusing a multiply and a subtract (the
// spec allows it to on arm64, ppc64 and s390x), so every platform rounds alike.
type processor struct {
	active bool
	bias   []float32 // the row's V biases (BIAS), else nil
	counts []uint32  // the row's V counts (PENALTIES), else nil
	mask   []uint32  // the row's ceil(V/32) mask words (MASK), else nil
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

// allowed reports whether the mask lets element i through.
func (p *processor) allowed(i int) bool {
	return p.mask == nil || p.mask[i>>5]>>(i&31)&1 != 0
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
