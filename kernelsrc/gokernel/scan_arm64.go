//go:build arm64 && !purego

package gokernel

// scanBelowNEON is scanBelow over n elements from p in NEON (part of every arm64 CPU).
//
//go:noescape
func scanBelowNEON(p *float32, n int, floor float32) (scanned int, top float32)

func scanBelow(row []float32, floor float32) (int, float32) {
	if len(row) < 4 {
		return 0, negInf
	}
	return scanBelowNEON(&row[0], len(row), floor)
}

// scanBelowVector says that scanBelow runs in vector code (NEON), which pays even where
// it stops often.
const scanBelowVector = true
