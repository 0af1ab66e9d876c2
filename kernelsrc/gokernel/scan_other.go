//go:build (!amd64 && !arm64) || purego

package gokernel

func scanBelow(row []float32, floor float32) (int, float32) { return scanBelowGo(row, floor) }

// scanBelowVector says that scanBelow runs in vector code: not here, where it is
// scanBelowGo and a plain loop does better.
const scanBelowVector = false
