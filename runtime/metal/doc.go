// Package metal is gumbel's Metal backend for Apple GPUs: Metal, Foundation, CoreGraphics
// and IOKit driven through the Objective-C runtime with purego, so the package builds
// with CGO_ENABLED=0 and needs no Xcode. On other systems it still builds and registers
// itself, and Open reports runtime.ErrUnavailable.
//
// Memory is MTLBuffer in shared storage: the host and the GPU address the same bytes, so
// the copies of a stream are memory copies made once the stream's queued work is done,
// and Device.WrapBytes uses page-aligned Go memory in place. A stream is an
// MTLCommandQueue and the command buffer being encoded: Launch encodes a dispatch into
// it, Synchronize commits it and waits. Events take the command buffers' GPUEndTime.
//
// Programs compile from source with newLibraryWithSource at the newest Metal Shading
// Language version the macOS has (3.2 down to 2.4), with MTLMathModeSafe; compiled
// libraries are cached per device.
//
// Every Objective-C message runs with the goroutine locked to its thread and inside an
// autorelease pool that is drained before the call returns. Launch and the copies
// allocate nothing on the Go heap: their messages go through purego.SyscallN with
// argument storage that lives in the stream.
//
// What has been verified without a Mac: the package cross-compiles and vets for
// darwin/arm64 and darwin/amd64; every selector, argument count and argument kind is
// checked against Apple's documented declarations (decl_test.go); the kernels it runs
// (kernelsrc/metal, joined into one source as kernelsrc.Metal) are executed by the
// emulator in kernelsrc/mslemu. The gpu-tagged tests (go test -tags gpu ./runtime/metal/
// on a Mac) are what runs it on a GPU.
package metal
