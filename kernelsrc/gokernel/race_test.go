//go:build race

package gokernel

// raceEnabled: the race detector makes allocation counts meaningless.
const raceEnabled = true
