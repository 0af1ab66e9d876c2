//go:build !amd64 || purego

package gokernel

// weights is weightsGo.
func weights(w []float32, q []uint64, xs []float32, wt weigher, twoPowF float32) uint64 {
	return weightsGo(w, q, xs, wt, twoPowF)
}
