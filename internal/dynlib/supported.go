//go:build linux || windows

package dynlib

// Unsupported is nil: the vendors ship their drivers for this OS.
func Unsupported(vendor string) error { return nil }
