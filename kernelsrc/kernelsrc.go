// Package kernelsrc holds gumbel's sampling kernel set in every language a backend runs:
// CUDA C++ (cuda/, also compiled for HIP through cuda/hip_prelude.h), Metal Shading
// Language (metal/) and the Go edition (package gokernel) that the CPU device runs.
// Every edition has the same kernel names and arguments (ABI.md; package abi defines
// them once and generates abi.h for the C++ editions), and the same files by concern:
// philox, reduce, lse, process, draw, gumbel_argmax, categorical, topn, filtered, score,
// residual, shard_select and the entry points.
package kernelsrc

import (
	"embed"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"strings"

	"github.com/gumbel-go/gumbel/kernelsrc/gokernel"
	"github.com/gumbel-go/gumbel/runtime"
)

//go:embed abi.h cuda metal
var files embed.FS

// CUDA is the CUDA edition's main file (cuda/sampling.cu): the entry points, which
// include the files of CUDAHeaders.
var CUDA = mustRead("cuda/sampling.cu")

// CUDAHeaders are the files the CUDA edition includes, by include name: cuda/*.cuh and
// the generated abi.h. NVRTC and hiprtc get them in memory.
var CUDAHeaders = headers("cuda", ".cuh")

// HIPPrelude maps the CUDA edition's built-ins onto HIP; hiprtc compiles HIPPrelude
// followed by CUDA.
var HIPPrelude = mustRead("cuda/hip_prelude.h")

// Metal is the Metal edition as one source: metal/sampling.metal with its includes
// (metal/*.metal and abi.h) expanded in place, as Metal's compiler takes it.
var Metal = mustJoin("metal", "sampling.metal")

// Sampling returns the sampling program: every edition of the kernel set.
func Sampling() *runtime.Program {
	return &runtime.Program{
		Name:        "sampling",
		CUDA:        CUDA,
		CUDAHeaders: CUDAHeaders,
		HIPPrelude:  HIPPrelude,
		Metal:       Metal,
		Go:          gokernel.Kernels(),
	}
}

func mustRead(name string) string {
	b, err := files.ReadFile(name)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// headers returns the files of dir with the suffix, and abi.h, by base name.
func headers(dir, suffix string) map[string]string {
	m := map[string]string{"abi.h": mustRead("abi.h")}
	entries, err := fs.ReadDir(files, dir)
	if err != nil {
		panic(err)
	}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), suffix) {
			m[e.Name()] = mustRead(path.Join(dir, e.Name()))
		}
	}
	return m
}

var includeLine = regexp.MustCompile(`(?m)^#include "([^"]+)"[ \t]*\n`)

// join returns the file main of an edition's folder with every `#include "name"` line
// replaced by the file it names (from the folder, else the kernelsrc root, where abi.h
// lives), each file once. The CUDA edition joined so compiles as one source, as the
// Metal edition must.
func join(dir, main string) (string, error) {
	seen := map[string]bool{}
	var expand func(name string, depth int) (string, error)
	expand = func(name string, depth int) (string, error) {
		if depth > 8 {
			return "", fmt.Errorf("kernelsrc: includes nested too deep at %s", name)
		}
		src, err := files.ReadFile(path.Join(dir, name))
		if err != nil {
			src, err = files.ReadFile(name)
		}
		if err != nil {
			return "", fmt.Errorf("kernelsrc: %s includes %q, which is not in %s/ or kernelsrc/", dir, name, dir)
		}
		seen[name] = true
		var firstErr error
		out := includeLine.ReplaceAllStringFunc(string(src), func(m string) string {
			inc := includeLine.FindStringSubmatch(m)[1]
			if seen[inc] {
				return ""
			}
			s, err := expand(inc, depth+1)
			if err != nil && firstErr == nil {
				firstErr = err
			}
			return s
		})
		return out, firstErr
	}
	return expand(main, 0)
}

func mustJoin(dir, main string) string {
	s, err := join(dir, main)
	if err != nil {
		panic(err)
	}
	return s
}
