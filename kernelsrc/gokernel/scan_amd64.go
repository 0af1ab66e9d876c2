//go:build amd64 && !purego

package gokernel

// scanBelowSSE is scanBelow over n elements from p in SSE (part of every amd64 CPU).
//
//go:noescape
func scanBelowSSE(p *float32, n int, floor float32) (scanned int, top float32)

func scanBelow(row []float32, floor float32) (int, float32) {
	if len(row) < 4 {
		return 0, negInf
	}
	return scanBelowSSE(&row[0], len(row), floor)
}

// scanBelowVector says that scanBelow runs in vector code (SSE), which pays even where
// it stops often.
const scanBelowVector = true
