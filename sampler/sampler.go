package sampler

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/gumbel-go/gumbel/kernelsrc"
	"github.com/gumbel-go/gumbel/runtime"
)

// maxRowsPerLaunch is the most rows one launch carries (grid.y): CUDA's and HIP's
// gridDim.y limit. Larger batches take a few launches per route, never one per row.
const maxRowsPerLaunch = 65535

// Kernel slots of the sampling program.
const (
	kernelGumbel = iota
	kernelCategorical
	numKernels
)

const numDTypes = 3

// launchKernel is a kernel with the block width it is launched with.
type launchKernel struct {
	kernel runtime.Kernel
	block  int
}

// Sampler samples tokens from batches of logits on one device. It owns its kernels and
// its grow-only scratch memory. Its methods may be called from several goroutines, but
// Sample calls are serialised by a mutex: a Sampler runs one batch at a time (use one
// Sampler per stream for concurrent batches).
type Sampler struct {
	mu      sync.Mutex
	closed  bool
	dev     runtime.Device
	stream  runtime.Stream
	module  runtime.Module
	kernels [numDTypes][numKernels]launchKernel
	set     Settings
	args    runtime.Args
	scratch scratch
	// dirty is set when a call failed after queuing work: the next call waits for
	// the stream and zeroes the counters, which a half-done launch may have left set.
	dirty bool
	// last is the launch plan of the last successful call, for Relaunch.
	last lastLaunch
}

// lastLaunch is what Relaunch needs to queue a call's kernels again.
type lastLaunch struct {
	ok       bool
	logits   Logits
	launched [numKernels]int
	stride   int
}

// New loads the sampling kernels on dev and resolves the options.
func New(dev runtime.Device, opts Options) (*Sampler, error) {
	if dev == nil {
		return nil, fmt.Errorf("gumbel/sampler: %w: nil device", runtime.ErrInvalidArgument)
	}
	gumbel, err := opts.Gumbel.resolve(EnvGumbel)
	if err != nil {
		return nil, err
	}
	split, err := opts.Split.resolve(EnvSplit)
	if err != nil {
		return nil, err
	}
	info := dev.Info()
	policy := DefaultSplitPolicy(info)
	if opts.Policy != nil {
		policy = *opts.Policy
	}
	stream := opts.Stream
	if stream == nil {
		stream = dev.DefaultStream()
		if stream == nil {
			return nil, fmt.Errorf("gumbel/sampler: %w: device has no default stream", runtime.ErrInvalidArgument)
		}
	}
	module, err := dev.Load(kernelsrc.Sampling())
	if err != nil {
		return nil, fmt.Errorf("gumbel/sampler: loading the sampling kernels: %w", err)
	}
	s := &Sampler{
		dev:     dev,
		stream:  stream,
		module:  module,
		scratch: newScratch(),
		set:     Settings{Seed: opts.Seed, Gumbel: gumbel, Split: split, Policy: policy},
	}
	bases := [numKernels]string{kernelGumbel: kernelsrc.GumbelArgmax, kernelCategorical: kernelsrc.Categorical}
	for d := range numDTypes {
		for k, base := range bases {
			name := base + kernelsrc.Suffixes[d]
			kern, err := module.Kernel(name)
			if err == nil {
				var block int
				block, err = blockSize(opts.BlockSize, kern.MaxThreadsPerBlock(), info.WarpSize)
				s.kernels[d][k] = launchKernel{kernel: kern, block: block}
			}
			if err != nil {
				_ = module.Close()
				return nil, fmt.Errorf("gumbel/sampler: kernel %s: %w", name, err)
			}
		}
	}
	s.set.GumbelBlockSize = s.kernels[Float32][kernelGumbel].block
	s.set.CategoricalBlockSize = s.kernels[Float32][kernelCategorical].block
	return s, nil
}

// Device returns the device the sampler runs on.
func (s *Sampler) Device() runtime.Device { return s.dev }

// Settings returns the resolved options.
func (s *Sampler) Settings() Settings { return s.set }

// Close frees the sampler's scratch memory and kernels. Later calls return ErrClosed;
// closing again does nothing. It does not close the device or the stream.
func (s *Sampler) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if s.dirty {
		_ = s.stream.Synchronize()
	}
	return errors.Join(s.scratch.free(), s.module.Close())
}

// Sample draws one token for each row of logits, with params[i] for row i, and writes
// them to res. A bad row (bad parameters, NaN or +Inf logits, no finite logit) gets
// token -1 and its error in res.Errs; the other rows still get their tokens. Sample
// returns an error only when the call as a whole cannot run: a closed sampler
// (ErrClosed), sizes that do not agree (ErrShape) or a device failure.
//
// The call queues one parameter upload, one launch per route present (gumbel_argmax
// for greedy and Gumbel-max rows, categorical for the rest), one copy of the tokens
// back, and waits for the stream once.
func (s *Sampler) Sample(logits Logits, params []Params, res *Result) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	return s.sample(logits, params, res)
}

// sample is Sample with the lock held.
func (s *Sampler) sample(lg Logits, params []Params, res *Result) error {
	stride, err := checkLogits(lg, len(params))
	if err != nil {
		return err
	}
	if res == nil {
		return fmt.Errorf("%w: nil *Result", ErrShape)
	}
	rows, vocab := lg.Rows, lg.Vocab
	res.resize(rows)
	if rows == 0 {
		return nil
	}

	// Route and check every row; count the launched rows of each kernel.
	var launched [numKernels]int
	for i, p := range params {
		r := route(p, vocab, s.set.Gumbel)
		res.Routes[i], res.Tokens[i] = r, -1
		res.Errs[i] = checkParams(i, p)
		if res.Errs[i] == nil {
			launched[kernelOf(r)]++
		}
	}
	total := launched[kernelGumbel] + launched[kernelCategorical]
	if total == 0 {
		return nil
	}

	if err := s.prepare(rows, launched[kernelGumbel], vocab); err != nil {
		return err
	}
	sc := &s.scratch
	host, err := sc.paramsHost.bytes(s.dev, total*RowParamsSize)
	if err != nil {
		return err
	}
	// gumbel_argmax rows take the first slots, categorical rows the rest, each group
	// in row order.
	next := [numKernels]int{0, launched[kernelGumbel]}
	for i, p := range params {
		if res.Errs[i] != nil {
			continue
		}
		r := res.Routes[i]
		k := kernelOf(r)
		putRowParams(host[next[k]*RowParamsSize:], i, r, p, vocab, rowSeed(s.set.Seed, p))
		next[k]++
	}
	results, err := sc.resultsHost.bytes(s.dev, 8*rows)
	if err != nil {
		return err
	}

	s.dirty, s.last.ok = true, false
	if err := s.stream.CopyToDevice(sc.params.buf, 0, host); err != nil {
		return fmt.Errorf("gumbel/sampler: uploading row parameters: %w", err)
	}
	first := 0
	for k := range numKernels {
		if err := s.launch(lg, k, first, launched[k], stride); err != nil {
			return err
		}
		first += launched[k]
	}
	if err := s.stream.CopyToHost(results, sc.results.buf, 0); err != nil {
		return fmt.Errorf("gumbel/sampler: copying tokens back: %w", err)
	}
	if err := s.stream.Synchronize(); err != nil {
		return fmt.Errorf("gumbel/sampler: waiting for the sampling kernels: %w", err)
	}
	s.dirty = false
	s.last = lastLaunch{ok: true, logits: lg, launched: launched, stride: stride}

	for i := range rows {
		if res.Errs[i] != nil {
			continue
		}
		token := int32(binary.LittleEndian.Uint32(results[4*i:]))
		status := binary.LittleEndian.Uint32(results[4*(rows+i):])
		res.Tokens[i], res.Errs[i] = rowResult(i, token, status, vocab)
	}
	return nil
}

// Relaunch queues the kernel launches of the last successful call again on the sampler's
// stream (same logits, the row parameters already on the device, the same launch
// shapes) and returns without copying or waiting. The tokens it writes equal the last
// call's. It exists to time the device work of a sampling step: record events around
// many Relaunch calls, or capture one in a graph. It fails after a call that returned an
// error, or when the logits buffer of that call may have gone (after Close).
func (s *Sampler) Relaunch() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if !s.last.ok {
		return fmt.Errorf("gumbel/sampler: Relaunch: %w: no successful call to repeat", runtime.ErrInvalidArgument)
	}
	first := 0
	for k := range numKernels {
		if err := s.launch(s.last.logits, k, first, s.last.launched[k], s.last.stride); err != nil {
			s.last.ok = false
			return err
		}
		first += s.last.launched[k]
	}
	return nil
}

// Stream returns the stream the sampler queues its work on.
func (s *Sampler) Stream() runtime.Stream { return s.stream }

// kernelOf returns the kernel slot of a route: greedy rows are gumbel_argmax rows with
// temperature 0.
func kernelOf(r Route) int {
	if r == RouteCategorical {
		return kernelCategorical
	}
	return kernelGumbel
}

// blocksPerRow is the split of a gumbel_argmax launch of rows rows.
func (s *Sampler) blocksPerRow(rows, vocab int) int {
	if !s.set.Split {
		return 1
	}
	return s.set.Policy.BlocksPerRow(rows, vocab)
}

// prepare grows the scratch for a call of rows rows, gumbelRows of them launched on
// gumbel_argmax, and restores the counters after a failed call.
func (s *Sampler) prepare(rows, gumbelRows, vocab int) error {
	sc := &s.scratch
	if s.dirty {
		// A failed call may have left work queued and counters set.
		_ = s.stream.Synchronize()
	}
	perLaunch := min(rows, maxRowsPerLaunch)
	if _, err := sc.params.ensure(s.dev, rows*RowParamsSize); err != nil {
		return err
	}
	if _, err := sc.results.ensure(s.dev, 8*rows); err != nil {
		return err
	}
	gumbelPerLaunch := min(gumbelRows, maxRowsPerLaunch)
	if _, err := sc.partials.ensure(s.dev, 8*gumbelPerLaunch*s.blocksPerRow(gumbelRows, vocab)); err != nil {
		return err
	}
	grew, err := sc.counters.ensure(s.dev, 8*perLaunch)
	if err != nil {
		return err
	}
	if grew || s.dirty {
		if err := s.stream.Zero(sc.counters.buf, 0, sc.counters.buf.Size()); err != nil {
			return fmt.Errorf("gumbel/sampler: zeroing the counter scratch: %w", err)
		}
	}
	s.dirty = false
	return nil
}

// launch queues kernel k over n launched rows whose RowParams start at slot first, in
// launches of at most maxRowsPerLaunch rows.
func (s *Sampler) launch(lg Logits, k, first, n int, stride int) error {
	if n == 0 {
		return nil
	}
	sc := &s.scratch
	lk := s.kernels[lg.DType][k]
	perRow := 1
	if k == kernelGumbel {
		perRow = s.blocksPerRow(n, lg.Vocab)
	}
	for done := 0; done < n; done += maxRowsPerLaunch {
		chunk := min(n-done, maxRowsPerLaunch)
		a := s.args.Reset()
		a.BufferAt(lg.Data, lg.Offset).
			BufferAt(sc.params.buf, (first+done)*RowParamsSize).
			BufferAt(sc.results.buf, 0).
			BufferAt(sc.results.buf, 4*lg.Rows).
			Buffer(sc.partials.buf).
			Buffer(sc.counters.buf).
			U64(uint64(stride)).
			U32(uint32(lg.Vocab))
		grid := runtime.Dim3{X: perRow, Y: chunk, Z: 1}
		block := runtime.Dim3{X: lk.block, Y: 1, Z: 1}
		if err := s.stream.Launch(lk.kernel, grid, block, a); err != nil {
			return fmt.Errorf("gumbel/sampler: launching %s over %d rows x %d blocks: %w", lk.kernel.Name(), chunk, perRow, err)
		}
	}
	return nil
}

// rowResult turns a row's kernel output into its token and error.
func rowResult(row int, token int32, status uint32, vocab int) (int32, error) {
	switch status {
	case 0:
		if token < 0 || int(token) >= vocab {
			return -1, fmt.Errorf("row %d: token %d outside the vocabulary of %d: %w", row, token, vocab, ErrDevice)
		}
		return token, nil
	case 1:
		return -1, fmt.Errorf("row %d: %w", row, ErrNonFiniteLogit)
	case 2:
		return -1, fmt.Errorf("row %d: %w", row, ErrNoFiniteLogit)
	case 3:
		return -1, fmt.Errorf("row %d: rejected by the kernel: %w", row, ErrTemperature)
	}
	return -1, fmt.Errorf("row %d: unknown kernel status %d: %w", row, status, ErrDevice)
}

// checkLogits checks the shape of a call and returns the row stride in elements.
func checkLogits(lg Logits, nParams int) (int, error) {
	switch {
	case lg.Data == nil:
		return 0, fmt.Errorf("%w: logits buffer is nil", ErrShape)
	case lg.DType > BFloat16:
		return 0, fmt.Errorf("%w: unknown logits dtype %d", ErrShape, lg.DType)
	case lg.Rows != nParams:
		return 0, fmt.Errorf("%w: %d logits rows but %d params", ErrShape, lg.Rows, nParams)
	case lg.Rows > math.MaxInt32:
		return 0, fmt.Errorf("%w: %d rows exceed %d", ErrShape, lg.Rows, math.MaxInt32)
	case lg.Vocab < 1 || lg.Vocab >= maxVocab:
		return 0, fmt.Errorf("%w: vocab %d outside [1, 2^31)", ErrShape, lg.Vocab)
	case lg.RowStride < 0:
		return 0, fmt.Errorf("%w: negative row stride %d", ErrShape, lg.RowStride)
	case lg.Offset < 0 || lg.Offset%lg.DType.Size() != 0:
		return 0, fmt.Errorf("%w: logits offset %d is negative or not a multiple of the %s size %d", ErrShape, lg.Offset, lg.DType, lg.DType.Size())
	}
	stride := lg.RowStride
	if stride == 0 {
		stride = lg.Vocab
	}
	if stride < lg.Vocab {
		return 0, fmt.Errorf("%w: row stride %d shorter than vocab %d", ErrShape, stride, lg.Vocab)
	}
	if lg.Rows == 0 {
		return stride, nil
	}
	// Bytes the matrix spans, checked without overflow: the last row starts at
	// (rows-1)*stride and holds vocab elements.
	size, avail := lg.DType.Size(), lg.Data.Size()-lg.Offset
	if avail < 0 || uint64(lg.Rows-1) > (math.MaxInt64/uint64(size)-uint64(lg.Vocab))/uint64(stride) ||
		((lg.Rows-1)*stride+lg.Vocab)*size > avail {
		return 0, fmt.Errorf("%w: %d rows x stride %d (vocab %d) of %s from byte %d need more than the buffer's %d bytes",
			ErrShape, lg.Rows, stride, lg.Vocab, lg.DType, lg.Offset, lg.Data.Size())
	}
	return stride, nil
}

// resize makes res hold rows entries, reallocating a slice only when it is too short.
func (res *Result) resize(rows int) {
	res.Tokens = resized(res.Tokens, rows)
	res.Errs = resized(res.Errs, rows)
	res.Routes = resized(res.Routes, rows)
}

func resized[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}
