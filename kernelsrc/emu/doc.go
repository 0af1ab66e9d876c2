// Package emu proves the CUDA edition of the sampling kernels (../sampling.cu) on
// machines without a GPU. cuda_emu.h supplies the CUDA language (threads, blocks,
// __syncthreads, warp shuffles, atomics, intrinsics) on top of C++20 threads;
// testdata/emu_driver.cpp includes sampling.cu under it and runs launches read from a
// file. The test builds the driver with g++, runs it on random rows of every dtype,
// launch shape and filter, and requires the tokens, statuses and counters that the Go
// edition (package gokernel, run by the CPU device) produces, bit for bit. The ABI
// version 2 workload (v2_test.go) adds logit processors, several draws per row, RECORD
// and ADVANCE (counts and params compared bit for bit), device routing, topn (tokens
// bit for bit) and log-probability records (within 1e-5 relative: the emulation's fast
// 2^x is exact, the GPU's is not, and the Go edition sums in float64).
//
// With the gpu build tag, the same workload (plus full-size vocabularies) runs on a real
// NVIDIA GPU through the CUDA backend: see gpu_test.go for the command.
//
// The package has no Go API: everything is in its tests.
package emu
