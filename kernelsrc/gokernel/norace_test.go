//go:build !race

package gokernel

const raceEnabled = false
