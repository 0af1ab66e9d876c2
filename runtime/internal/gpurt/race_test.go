//go:build race

package gpurt

// raceEnabled: the race detector instruments code with allocations of its own, so
// allocation counts mean nothing under it.
const raceEnabled = true
