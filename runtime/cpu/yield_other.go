//go:build !linux

package cpu

// osYield does nothing where the OS offers no cheap yield to the syscall package.
func osYield() {}
