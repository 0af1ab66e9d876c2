//go:build !amd64 || purego

package gokernel

// useMaskAVX2 says that the mask's vector code runs: not here, where the Go loops
// take every element.
const useMaskAVX2 = false

// maskApply covers nothing here: maskGroupGo takes every element.
func (p *processor) maskApply(xs []float32, w0 int, dst []float32) (int, bool) { return 0, false }

// maskSkip passes nothing here: the masked greedy scan's loop takes every element.
func (p *processor) maskSkip(xs []float32, w0 int, best float32) int { return 0 }
