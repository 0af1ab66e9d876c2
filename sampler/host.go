package sampler

import (
	"fmt"

	"github.com/gumbel-go/gumbel/runtime"
)

// SampleFloat32 samples from logits held in host memory: len(params) rows of vocab
// float32 elements, back to back. The logits are copied to a grow-only device buffer
// the sampler owns, then sampled as Sample does.
func (s *Sampler) SampleFloat32(logits []float32, vocab int, params []Params, res *Result) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	return s.sampleHost(runtime.BytesOf(logits), len(logits), Float32, vocab, params, 1, drawReplace, res)
}

// SampleBits samples from float16 or bfloat16 logits held in host memory as their bit
// patterns: len(params) rows of vocab elements, back to back. dtype must be Float16
// or BFloat16. The kernels read the 16-bit elements themselves, so a row samples as
// its exact float32 conversion would.
func (s *Sampler) SampleBits(logits []uint16, dtype DType, vocab int, params []Params, res *Result) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if dtype != Float16 && dtype != BFloat16 {
		return fmt.Errorf("%w: SampleBits takes float16 or bfloat16, not %s", ErrShape, dtype)
	}
	return s.sampleHost(runtime.BytesOf(logits), len(logits), dtype, vocab, params, 1, drawReplace, res)
}

// sampleHost stages n host elements of dtype (their bytes in src) on the device and
// samples them, draws tokens per row in the given mode.
func (s *Sampler) sampleHost(src []byte, n int, dtype DType, vocab int, params []Params, draws int, mode drawMode, res *Result) error {
	rows := len(params)
	if vocab < 1 || vocab >= maxVocab {
		return fmt.Errorf("%w: vocab %d outside [1, 2^31)", ErrShape, vocab)
	}
	if n/vocab != rows || n%vocab != 0 {
		return fmt.Errorf("%w: %d logits are not %d rows of vocab %d", ErrShape, n, rows, vocab)
	}
	if res == nil {
		return fmt.Errorf("%w: nil *Result", ErrShape)
	}
	if err := checkDraws(draws, mode); err != nil {
		return err
	}
	if rows == 0 {
		res.resize(0, draws, false, false)
		return nil
	}
	if s.dirty {
		// The staging buffer may still be read by a failed call's queued work.
		_ = s.stream.Synchronize()
	}
	staging := &s.scratch.logits
	if _, err := staging.ensure(s.dev, len(src)); err != nil {
		return err
	}
	// A plain Go slice is copied before CopyToDevice returns, so the caller may reuse
	// logits as soon as this call returns.
	if err := s.stream.CopyToDevice(staging.buf, 0, src); err != nil {
		s.dirty = true
		return fmt.Errorf("gumbel/sampler: uploading logits: %w", err)
	}
	return s.sample(Logits{Data: staging.buf, DType: dtype, Rows: rows, Vocab: vocab}, params, draws, mode, res)
}
