// Package gpurt is the code gumbel's CUDA and HIP backends share. HIP's runtime copies
// the CUDA driver API call for call, and hiprtc copies NVRTC, so one implementation of
// the runtime's devices, buffers, pinned memory, streams, events, modules and kernels
// serves both: it calls the driver through an [API], a table of entry points each
// backend binds from its own library, and compiles through an [RTC]. It also holds what
// that needs: calling C through purego without allocating on the per-step paths, typed
// status codes ([Codes]), kernel argument packing, launch-shape and byte-range checks,
// and the bookkeeping that lets a device's Close release whatever its owners did not.
//
// The backends keep what differs: their bindings (one file per C library), their typed
// status codes and which of them mean which runtime sentinel, what makes a device
// current (a context or an ordinal), how they compile and cache programs, CUDA's graph
// capture, and their exported API. A [Backend] carries their names for messages and the
// few ways their drivers behave differently; every error names the C call that failed
// and unwraps to the backend's own status type.
package gpurt
