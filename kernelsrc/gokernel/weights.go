package gokernel

// weightsGo is the categorical kernel's steps 2 and 4 over xs: w[j] = wt.weight(xs[j]),
// q[j] = fixed(w[j], twoPowF), and it returns Z = Σ q[j]. It is the reference that the
// vector form (weights) is checked against, and the form every other target runs.
func weightsGo(w []float32, q []uint64, xs []float32, wt weigher, twoPowF float32) uint64 {
	w, q = w[:len(xs)], q[:len(xs)]
	var z uint64
	for j, x := range xs {
		w[j] = wt.weight(x)
		q[j] = fixed(w[j], twoPowF)
		z += q[j]
	}
	return z
}
