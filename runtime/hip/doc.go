// Package hip is gumbel's HIP backend for AMD GPUs: the HIP runtime (libamdhip64) and the
// run-time compiler hiprtc, loaded at run time through purego, so the package builds and
// runs with CGO_ENABLED=0 and needs no ROCm at build time. It runs on Linux and Windows;
// elsewhere it reports itself unavailable.
//
// Importing the package registers the backend with [runtime.Register]; [Open] opens one
// device directly. Memory and streams an engine already owns can be wrapped with
// [WrapDevicePointer] and [WrapStream] and used in place. [Compile] compiles a program
// for any AMD GPU target with hiprtc alone, with no GPU: CI uses it to check that every
// kernel compiles for a wave64 (gfx90a) and a wave32 (gfx1030) processor.
//
// The current device is per OS thread in HIP while goroutines move between threads, so
// every runtime call runs with the goroutine locked to its thread and hipSetDevice made
// first. The per-step calls (Launch, the copies, Zero, Record, Synchronize) go through
// function pointers looked up once and allocate nothing. That code, from the device down
// to kernel launches, is shared with the CUDA backend, whose driver API HIP copies call
// for call; this package binds libamdhip64 and hiprtc for it. The wavefront size is read
// from the device (32 on RDNA, 64 on CDNA) and reported in DeviceInfo.WarpSize.
//
// The properties struct of hipGetDeviceProperties changed layout in ROCm 6; the package
// reads scalar properties with hipDeviceGetAttribute and only gcnArchName from the
// struct, through the edition whose layout it knows (hipGetDevicePropertiesR0600, or the
// ROCm 5 hipGetDeviceProperties), and checks what it read.
//
// Environment:
//   - GUMBEL_HIP_LIBRARY: path of libamdhip64 (amdhip64_*.dll); nothing else is tried
//     when set.
//   - GUMBEL_HIPRTC_LIBRARY: path of libhiprtc (hiprtc*.dll). Without it, the versioned
//     sonames are tried, then the hiprtc functions inside libamdhip64 (ROCm before 5.3
//     had no libhiprtc).
//   - ROCM_PATH, HIP_PATH: ROCm install folders searched after the system loader.
package hip
