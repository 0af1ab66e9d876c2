//go:build !amd64 || purego

package gokernel

// sumExp is sumExpGo.
func sumExp(xs []float32, m float64, invT float32) float64 { return sumExpGo(xs, m, invT) }
