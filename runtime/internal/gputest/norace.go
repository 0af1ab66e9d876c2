//go:build !race

package gputest

// raceEnabled: the race detector instruments code with allocations of its own, so
// allocation counts mean nothing under it.
const raceEnabled = false
