//go:build race

package cuda

// raceEnabled: the race detector instruments code with allocations of its own, so
// allocation counts mean nothing under it.
const raceEnabled = true
