//go:build amd64 && !purego

package gokernel

import (
	"testing"

	"golang.org/x/sys/cpu"
)

// TestGumbelFilterAVX2MatchesGo checks the assembly against gumbelFilterGo.
func TestGumbelFilterAVX2MatchesGo(t *testing.T) {
	if !cpu.X86.HasAVX2 {
		t.Skip("no AVX2 on this CPU")
	}
	checkFilter(t, gumbelFilter)
}
