//go:build amd64 && !purego

package gokernel

import "golang.org/x/sys/cpu"

// scanBelowSSE is scanBelow over n elements from p in SSE (part of every amd64 CPU).
//
//go:noescape
func scanBelowSSE(p *float32, n int, floor float32) (scanned int, top float32)

// scanBelowAVX2 is scanBelow over n elements from p in AVX2, 32 elements a trip; its
// top may differ from scanBelowSSE's only in the sign of a zero.
//
//go:noescape
func scanBelowAVX2(p *float32, n int, floor float32) (scanned int, top float32)

// useScanAVX2 says that scanBelow takes scanBelowAVX2 (the tests turn it off to
// compare).
var useScanAVX2 = cpu.X86.HasAVX2

// scanBelow takes the AVX2 routine where the CPU has it and the row holds a block of
// 32; a shorter row is all tail, which the SSE routine walks the same way.
func scanBelow(row []float32, floor float32) (int, float32) {
	if len(row) < 4 {
		return 0, negInf
	}
	if !useScanAVX2 || len(row) < 32 {
		return scanBelowSSE(&row[0], len(row), floor)
	}
	n, top := scanBelowAVX2(&row[0], len(row), floor)
	if top == 0 {
		// Which zero comes back follows the lanes' order, and a log-sum-exp partial
		// carries its sign: the SSE pass over what was passed (rare: the largest of it
		// exactly zero) keeps every result the same with AVX2 or without.
		_, top = scanBelowSSE(&row[0], n, floor)
	}
	return n, top
}

// scanBelowVector says that scanBelow runs in vector code (SSE or AVX2), which pays even
// where it stops often.
const scanBelowVector = true
