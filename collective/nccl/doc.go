// Package nccl implements collective.Comm over NVIDIA's NCCL, loaded at run time from
// libnccl.so.2 through purego, without cgo, as package runtime/cuda loads the CUDA
// driver. [Open] finds the library (GUMBEL_NCCL_LIBRARY names it explicitly); a
// [Library] then makes communicators for devices of runtime/cuda: [Library.InitRank]
// for one process per rank (rank 0 makes a [UniqueID] and hands it to the others by any
// means), [Library.InitAll] for one process driving several GPUs.
//
// A [Comm]'s AllReduce is one ncclAllReduce, in place, on the stream it is given: it
// returns once the reduction is queued, without copying to the host or waiting, and it
// allocates nothing. Each call runs on a thread where the device's context is current,
// as NCCL requires. Unlike the in-process group of collective.NewLocal, NCCL cannot tell
// the other ranks that one refused its arguments: a rank whose AllReduce fails before
// reaching NCCL leaves the others waiting on the device, as a rank that skips a
// collective does.
//
// NCCL ships for Linux only; elsewhere, and on Linux architectures other than amd64 and
// arm64 (where purego passes the unique id by value), Open returns an error wrapping
// runtime.ErrUnavailable. Every error names the C call that failed, with NCCL's words
// for its status ([Result]) and, where the library keeps one, its last error message.
package nccl
