// Package fakegpu is a fake GPU driver for the tests of the CUDA and HIP backends, so
// that their device, memory, stream, module and compile paths run end to end on machines
// without a GPU. HIP's runtime copies the CUDA driver API call for call, so one Go
// implementation of each call serves both: it is handed to the backends as C function
// pointers (purego callbacks) under CUDA's names (libcuda, NVRTC) and HIP's (libamdhip64,
// hiprtc), through [GPU.Lookup], which the backends bind as they would a loaded library.
//
// "Device memory" is Go memory, the compiler writes a recognisable fake code object,
// and a launch is recorded and, for the kernels of [Source], run in Go. Like the real
// drivers, the fake keeps a current device per OS thread and refuses a call that needs
// one on a thread where none, or another, is current: a call that escaped the thread
// the backend locked fails here as it would on a GPU.
//
// Only tests import the package. It needs purego callbacks and per-thread state, so it
// has its fake on Linux (amd64, arm64) only; elsewhere it holds just [Source].
package fakegpu

// Source holds the kernels the fake runs, in CUDA C++, so that the same test cases run
// on the fake and on a GPU. scale's launch bound gives it a smaller block limit than the
// device's, so launches can be checked against the kernel's own limit.
const Source = `
extern "C" __global__ void add_one(float* x, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += 1.0f;
}
extern "C" __global__ void __launch_bounds__(256) scale(float* x, float a, unsigned long long n) {
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}
`
