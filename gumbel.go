// Package gumbel samples tokens from LLM logits on GPUs, from pure Go (no cgo).
//
// It loads the vendor libraries at run time, compiles its embedded kernels with the
// vendor's run-time compiler (NVRTC for CUDA, hiprtc for HIP, Metal's own compiler) and
// runs the same kernel set, with the same results, on a pure-Go CPU device when no GPU
// is found. Importing this package links every backend in; [Open] picks a device.
//
// A sampling step, with the logits of a batch on the host:
//
//	dev, err := gumbel.Open(runtime.OpenOptions{}) // $GUMBEL_BACKEND, else GPU, else CPU
//	if err != nil { ... }
//	defer dev.Close()
//	s, err := sampler.New(dev, sampler.Options{})
//	if err != nil { ... }
//	defer s.Close()
//	params := []sampler.Params{
//		{Temperature: 0},                                          // greedy
//		{Temperature: 0.8, Seed: 42, HasSeed: true, Step: step},   // Gumbel-max
//		{Temperature: 0.7, TopK: 50, TopP: 0.9, Seed: 7, HasSeed: true, Step: step},
//	}
//	var res sampler.Result // reuse across steps: steady-state calls allocate nothing
//	err = s.SampleFloat32(logits, vocab, params, &res) // res.Tokens[i], res.Errs[i]
//
// Logits already in device memory go through [sampler.Sampler.Sample] without a copy.
// A row's token depends only on its logits, its parameters (seed and step) and the
// random stream contract of package philox, never on the batch it shares.
//
// The packages: runtime (the backend-neutral device API), runtime/cpu, runtime/cuda,
// runtime/hip and runtime/metal (the backends), sampler (the sampling API), philox (the
// random stream and noise reference), kernelsrc (the kernels in every language), half
// (float16 and bfloat16 conversions), tests/statistical (the chi-square suite, for any
// device), bench (sampling-step measurements) and cmd/gumbel (a command-line tool: a
// demonstration run, info, sample, selftest and bench).
package gumbel

import (
	"github.com/gumbel-go/gumbel/runtime"

	// Every backend registers itself from init.
	_ "github.com/gumbel-go/gumbel/runtime/cpu"
	_ "github.com/gumbel-go/gumbel/runtime/cuda"
	_ "github.com/gumbel-go/gumbel/runtime/hip"
	_ "github.com/gumbel-go/gumbel/runtime/metal"
)

// Open opens a device with every backend of the module available. With Backend "auto"
// (the default when neither the option nor $GUMBEL_BACKEND names one) it takes the
// first GPU backend that opens and otherwise the CPU device; the returned value's
// Skipped field says why each backend before it did not open.
func Open(opts runtime.OpenOptions) (*runtime.Opened, error) {
	return runtime.Open(opts)
}
