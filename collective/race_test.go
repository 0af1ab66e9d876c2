//go:build race

package collective_test

// raceEnabled: the race detector makes sync.Pool drop entries at random, so allocation
// counts mean nothing under it.
const raceEnabled = true
