// Package gpurt is the logic gumbel's CUDA and HIP backends share: calling C through
// purego without allocating on the per-step paths, naming C status codes, packing kernel
// arguments, checking launch shapes and byte ranges, and the bookkeeping of devices,
// buffers, streams, events and kernels that the two driver APIs make alike.
//
// The backends stay the owners of everything that differs: their bindings (one file per
// C library), their typed status codes and sentinel mapping, how a device is made
// current on a thread (cuCtxSetCurrent or hipSetDevice), what each object costs to make
// and release, and their exported API. The shared code takes the C entry points as
// arguments at each call, reads the backend's names for its messages from a [Backend],
// and turns C status codes into the backend's own error type through it, so every error
// still names the C call that failed and unwraps to the backend's status.
package gpurt
