// Package kernelsrc holds gumbel's sampling kernel set in every language a backend runs:
// CUDA C++ (sampling.cu, also compiled for HIP through hip_prelude.h), Metal Shading
// Language (sampling.metal) and the Go edition (package gokernel) that the CPU device
// runs. Every edition has the same kernel names and arguments; ABI.md specifies them.
package kernelsrc

import (
	_ "embed"

	"github.com/gumbel-go/gumbel/kernelsrc/gokernel"
	"github.com/gumbel-go/gumbel/runtime"
)

// CUDA is the CUDA C++ edition.
//
//go:embed sampling.cu
var CUDA string

// HIPPrelude maps the CUDA edition's built-ins onto HIP; hiprtc compiles HIPPrelude+CUDA.
//
//go:embed hip_prelude.h
var HIPPrelude string

// Metal is the Metal Shading Language edition.
//
//go:embed sampling.metal
var Metal string

// Sampling returns the sampling program: every edition of the kernel set.
func Sampling() *runtime.Program {
	return &runtime.Program{
		Name:       "sampling",
		CUDA:       CUDA,
		HIPPrelude: HIPPrelude,
		Metal:      Metal,
		Go:         gokernel.Kernels(),
	}
}
