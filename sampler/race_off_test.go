//go:build !race

package sampler

// raceEnabled: the race detector is off.
const raceEnabled = false
