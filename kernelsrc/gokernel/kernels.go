// Package gokernel is the Go edition of the sampling kernel set (see ../ABI.md), run by
// the CPU device: the readable reference for the GPU editions, which are checked against
// it (bit for bit for tokens, to about 1e-5 relative for log-probabilities). The ABI's
// names, constants and buffer layouts come from package abi.
//
// A Go kernel is called once per block of the grid, blocks of one launch running
// concurrently on goroutines. Every argument is checked before it is used: a buffer that
// is too short, misaligned or missing for a feature the row uses makes the row report
// status 3; a launch with fewer than abi.NumArgs arguments, or a launch row without its
// RowParams, leaves everything untouched. No input makes a kernel read or write out of
// bounds or panic.
//
// The files follow the other editions' split by concern: kernels (the entry points),
// launch (argument checks), base, reduce, lse, process, draw, gumbel_argmax, categorical,
// exact, topn, filtered, score, residual and shard_select.
package gokernel

import (
	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/gumbel-go/gumbel/runtime"
)

// Kernels returns the Go edition: kernel name to function.
func Kernels() map[string]runtime.GoKernel {
	m := make(map[string]runtime.GoKernel, 9*len(abi.DTypes))
	for _, d := range abi.DTypes {
		m[abi.KernelName(abi.GumbelArgmax, d)] = gumbelArgmaxKernel(d, true)
		m[abi.KernelName(abi.Categorical, d)] = categoricalKernel(d)
		m[abi.KernelName(abi.TopN, d)] = topnKernel(d)
		m[abi.KernelName(abi.FilterMax, d)] = func(b *runtime.BlockContext) { filterMax(b, d) }
		m[abi.KernelName(abi.Filtered, d)] = func(b *runtime.BlockContext) { filtered(b, d) }
		m[abi.KernelName(abi.Score, d)] = func(b *runtime.BlockContext) { score(b, d) }
		m[abi.KernelName(abi.Residual, d)] = func(b *runtime.BlockContext) { residual(b, d) }
		m[abi.KernelName(abi.GumbelExact, d)] = func(b *runtime.BlockContext) { gumbelExact(b, d) }
		m[abi.KernelName(abi.ShardSelect, d)] = func(b *runtime.BlockContext) { shardSelect(b, d) }
	}
	return m
}

// gumbelArgmaxKernel returns gumbel_argmax for one element type. skip turns the noise-skipping
// shortcut on; the results are bit-identical either way (the tests prove it), so only
// the tests turn it off.
func gumbelArgmaxKernel(d abi.DType, skip bool) runtime.GoKernel {
	return func(b *runtime.BlockContext) { gumbelArgmax(b, d, skip) }
}

// categoricalKernel returns categorical for one element type: one block per row (blocks with
// Block.X > 0 do nothing).
func categoricalKernel(d abi.DType) runtime.GoKernel {
	return func(b *runtime.BlockContext) { categorical(b, d) }
}

// topnKernel returns topn for one element type: the N largest keys of each row (raw logits, or
// with PERTURBED the Gumbel scores of gumbel_argmax), largest first, with their
// log-probabilities. Grid (S, n, 1); blocks with Block.Z > 0 do nothing.
func topnKernel(d abi.DType) runtime.GoKernel {
	return func(b *runtime.BlockContext) { topn(b, d) }
}
