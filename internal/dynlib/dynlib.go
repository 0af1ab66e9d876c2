// Package dynlib loads shared libraries and looks up their functions at run time, without
// cgo, for the GPU backends: dlopen and dlsym through purego on Linux, LoadLibrary and
// GetProcAddress on Windows. Elsewhere (macOS, where neither CUDA nor HIP ships a
// driver) nothing loads.
package dynlib
