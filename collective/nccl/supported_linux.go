//go:build linux && (amd64 || arm64)

package nccl

// supported is nil: NCCL ships for Linux, and purego passes the unique id by value on
// these architectures.
func supported() error { return nil }
