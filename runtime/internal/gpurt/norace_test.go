//go:build !race

package gpurt

const raceEnabled = false
