//go:build race

package nccl

// raceEnabled: the race detector makes sync.Pool drop entries at random, so allocation
// counts mean nothing under it.
const raceEnabled = true
