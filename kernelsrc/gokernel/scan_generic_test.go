//go:build !amd64 || purego

package gokernel

import "testing"

// scanBelowForms are this build's editions of scanBelow, which the tests compare with
// scanBelowGo: scanBelow itself (NEON on arm64, scanBelowGo elsewhere).
func scanBelowForms() []scanBelowForm { return []scanBelowForm{{"scanBelow", scanBelow}} }

// checkScanExact has nothing to add where scanBelow has a single edition.
func checkScanExact(t *testing.T, row []float32, floor float32, what string, args ...any) {}
