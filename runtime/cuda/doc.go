// Package cuda is gumbel's CUDA backend: the NVIDIA driver API (libcuda) and the run-time
// compiler NVRTC (libnvrtc), loaded at run time through purego, so the package builds and
// runs with CGO_ENABLED=0 and needs no CUDA toolkit at build time.
//
// Importing the package registers the backend with [runtime.Register]; [Open] opens one
// device directly. The device works in the device's primary context (the one the CUDA
// runtime and most engines use), so memory and streams an engine already owns can be
// wrapped with [WrapDevicePointer] and [WrapStream] and used in place.
//
// CUDA contexts are current per OS thread while goroutines move between threads, so
// every driver call runs with the goroutine locked to its thread and the device's context
// made current on it first. The per-step calls (Launch, the copies, Record, Synchronize)
// make their driver calls through function pointers looked up once and allocate nothing.
// That code, from the device down to kernel launches, is shared with the HIP backend,
// whose runtime copies the driver API call for call; this package binds libcuda for it
// and adds what is CUDA's alone: the primary context, NVRTC's targets and the module
// cache, and graph capture.
//
// Environment:
//   - GUMBEL_CUDA_LIBRARY: path of libcuda (nvcuda.dll); nothing else is tried when set.
//   - GUMBEL_NVRTC_LIBRARY: path of libnvrtc (nvrtc64_*.dll).
//   - GUMBEL_CACHE_DIR: folder of the compiled-module cache (default: the user cache
//     folder's gumbel/); "off" turns the disk cache off.
package cuda
