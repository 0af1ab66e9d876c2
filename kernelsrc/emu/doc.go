// Package emu proves the CUDA edition of the sampling kernels (../cuda) on machines
// without a GPU. cuda_emu.h supplies the CUDA language (threads, blocks, __syncthreads,
// warp shuffles, atomics, intrinsics) in C++20, each CUDA thread a fiber under a seeded
// random scheduler; testdata/emu_driver.cpp includes sampling.cu under it and runs
// launches read from a file. The tests build the driver with g++ once, run it on random
// rows of every dtype, launch shape and filter, and require the tokens, statuses and
// counters that the Go edition (package gokernel, run by the CPU device) produces, bit
// for bit. The features workload (features_test.go) adds logit processors (bias,
// penalties, the allowed-token mask and the token bitmask of a grammar), several draws
// per row, RECORD and ADVANCE (counts and params compared bit for bit), device routing,
// topn (tokens bit for bit) and log-probability records (within 1e-5 relative: the
// emulation's fast 2^x is exact, the GPU's is not, and the Go edition sums in float64).
// The filtered route (filter_max, then filtered, filtered_test.go) is run on both of its
// paths, which the driver observes without code in the kernel: the draw on the blocks'
// published candidates and the one-block fallback. The topn kernel's further passes
// (a thread's short list let go of keys of its block's top n) are observed the same way
// and driven by rows whose top n bunches in one thread (topn_test.go). The score kernel (score_test.go) is
// compared the same way (ranks and statuses bit for bit, records within 1e-5 relative),
// and the Go edition's ranks, statuses and raw records are checked against the rows.
// The residual kernel (residual_test.go) verifies chains of draft tokens on the Go
// edition's score records: every slot's token and status bit for bit, and the Go
// edition's verdicts and draws checked against the chains decided on the host.
// shard_select (shard_select_test.go), whose S blocks per row meet in global atomics,
// must leave the Go edition's whole shard argument (queries, histograms, key words) word
// for word, and the Go edition's is checked against the text of ABI.md.
//
// With the gpu build tag, the same workloads (plus full-size vocabularies) run on a real
// NVIDIA GPU through the CUDA backend (gpu_test.go), and BenchmarkGPUKernelFeatures
// times one launch per feature.
//
// The package has no Go API: everything is in its tests.
package emu
