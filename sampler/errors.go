package sampler

import (
	"errors"
	"fmt"
)

// ErrKernelRejected: the kernel refused the row (status 3 of kernelsrc/ABI.md, "Bad
// input") although the host's checks passed. The host checks every parameter value
// first (ErrTemperature, ErrTopK, ...), so this names what only the device checks: a
// buffer the row needs that is missing, freed or too short for it (the logits among
// them), or flags or a vocabulary the kernel does not accept.
var ErrKernelRejected = errors.New("gumbel/sampler: row rejected by the kernel: a buffer it needs (logits, bias, mask, counts, outputs) is missing, freed or too small, or its flags or vocabulary are invalid")

// kernelRejected is row's error for kernel status 3 (abi.StatusBadParams).
func kernelRejected(row int) error {
	return fmt.Errorf("row %d: %w", row, ErrKernelRejected)
}
