package sampler

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/gumbel-go/gumbel/runtime"
)

// Batch is a fixed batch whose row parameters live on the device, so that a sampling
// step is launches only: no copy, no memset, no wait and no allocation. That makes
// Launch capturable in a CUDA graph (runtime.GraphCapturer) and replayable. The device
// routes each row (greedy and Gumbel rows to gumbel_argmax, filtered rows to
// filter_max and filtered, and every sampled row to categorical with the Gumbel switch
// off) and advances each row's step by Draws after every Launch, so replaying a captured
// Launch k times samples steps Step, Step+Draws, ..., exactly as Sample calls with those
// steps would (k uncaptured Launch calls do the same). A tracked row (TrackTokens)
// counts its tokens on the device, so its penalties stay current across replays. A batch
// with greedy or Gumbel rows also launches gumbel_exact, one more kernel node in a
// captured graph, which finishes the draws whose winning scores reach ±4032 (|logit/T| that large:
// kernelsrc/ABI.md, "Exact scores") and otherwise returns at once; Sample launches it
// only after a call that needs it.
//
// Launch row i samples logits row i, and row i's processors are those of logits row i.
// The batch reserves the processor buffers for its rows at NewBatch, and while it is
// open they never move, so a captured graph stays valid across processor changes. A Batch belongs to one
// Sampler and queues on its stream; it is not safe for concurrent use. Close it before
// the Sampler.
type Batch struct {
	s                  *Sampler
	rows, vocab, draws int
	dtype              DType
	split, topSplit    int
	sharedSplit        int // gumbel_argmax's and topn's when they share the device
	params             runtime.Buffer
	// out holds the outputs, one buffer per region of layout; host mirrors them
	// all, laid out as layout says, for decode.
	out                [numRegions]runtime.Buffer
	partials, counters runtime.Buffer
	topScratch         scratchAt // where topn's scratch starts
	layout             outLayout
	host               hostScratch
	args               runtime.Args
	// set, rowParams and routes are the host's record of each row's SetRow;
	// kernelRows counts the rows of each kernel and logprobRows those with
	// log-probabilities, so that Launch and Read decide from host state alone.
	set         []bool
	rowParams   []Params
	routes      []Route
	kernelRows  [numKernels]int
	logprobRows int
	closed      bool
	record      []byte
	// maskRows[i] is the bitmask row batch row i applies (SetBitmaskRow), -1 for
	// none; maskedRows counts the rows with one. rowFlags are the flags SetRow wrote,
	// without abi.FlagBitmask.
	maskRows   []int
	maskedRows int
	rowFlags   []abi.Flags
}

// Output regions of a Batch, each its own device buffer.
const (
	regionTokens = iota
	regionStatus
	regionLogprobs
	regionTopTokens
	regionTopValues
	numRegions
)

// regions returns the host offset and size in bytes of each output region.
func (l outLayout) regions() [numRegions][2]int {
	top := 4 * MaxTopLogprobs * l.rows
	return [numRegions][2]int{
		regionTokens:    {l.tokens(), 4 * l.slots()},
		regionStatus:    {l.status(), 4 * l.slots()},
		regionLogprobs:  {l.logprobs(), 16 * l.slots()},
		regionTopTokens: {l.topTokens(), top},
		regionTopValues: {l.topValues(), top},
	}
}

// NewBatch makes a batch of rows rows of vocab elements of dtype, drawing draws tokens
// per row and launch (with replacement; draw z of a launch uses the row's current step
// plus z, as SampleN does). rows must be in [1, 65535], draws in [1, MaxDraws]. The
// split of the gumbel_argmax and topn launches is fixed here, from the sampler's policy.
// It reserves the processor buffers for rows x vocab (about 8 bytes per element); while
// a Batch is open they cannot grow, so open the largest batch first.
func (s *Sampler) NewBatch(rows, vocab int, dtype DType, draws int) (*Batch, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	switch {
	case rows < 1 || rows > maxRowsPerLaunch:
		return nil, fmt.Errorf("%w: batch of %d rows, want 1 to %d", ErrShape, rows, maxRowsPerLaunch)
	case vocab < 1 || vocab >= maxVocab:
		return nil, fmt.Errorf("%w: vocab %d outside [1, 2^31)", ErrShape, vocab)
	case dtype > BFloat16:
		return nil, fmt.Errorf("%w: unknown logits dtype %d", ErrShape, dtype)
	}
	if err := checkDraws(draws, drawReplace); err != nil {
		return nil, err
	}
	if s.dirty {
		_ = s.stream.Synchronize()
	}
	if err := s.reserveProcessors(rows, vocab); err != nil {
		return nil, err
	}
	if _, err := s.scratch.unused.ensure(s.dev, 8); err != nil {
		return nil, err
	}
	b := &Batch{
		s: s, rows: rows, vocab: vocab, draws: draws, dtype: dtype,
		split:       s.blocksPerRow(rows, vocab),
		topSplit:    s.blocksPerRow(rows, vocab),
		sharedSplit: s.sharedSplit(rows, vocab),
		layout:      outLayout{rows: rows, draws: draws},
		host:        hostScratch{name: "batch output"},
		set:         make([]bool, rows),
		rowParams:   make([]Params, rows),
		routes:      make([]Route, rows),
		record:      make([]byte, RowParamsSize),
		maskRows:    make([]int, rows),
		rowFlags:    make([]abi.Flags, rows),
	}
	for i := range b.maskRows {
		b.maskRows[i] = -1
	}
	mainPartials, mainCounters := scratchNeeds(groupGumbel, rows, draws, b.split)
	filterPartials, filterCounters := scratchNeeds(groupFiltered, rows, draws, b.split)
	topPartials, topCounters := scratchNeeds(groupTop, rows, 1, b.topSplit)
	var err error
	alloc := func(dst *runtime.Buffer, size int, what string) {
		if err != nil {
			return
		}
		*dst, err = s.dev.Alloc(max(size, 8))
		if err != nil {
			err = fmt.Errorf("gumbel/sampler: allocating %d bytes of batch %s: %w", size, what, err)
		}
	}
	alloc(&b.params, rows*RowParamsSize, "row parameters")
	for r, reg := range b.layout.regions() {
		alloc(&b.out[r], reg[1], "outputs")
	}
	// topn's scratch follows the other kernels' (Sampler.prepare).
	b.topScratch = scratchAt{max(mainPartials, filterPartials), max(mainCounters, filterCounters)}
	alloc(&b.partials, b.topScratch.partials+topPartials, "partials")
	alloc(&b.counters, b.topScratch.counters+topCounters, "counters")
	if err == nil {
		err = s.stream.Zero(b.counters, 0, b.counters.Size())
	}
	if err == nil {
		err = s.stream.Zero(b.params, 0, b.params.Size())
	}
	if err == nil {
		err = s.stream.Synchronize()
	}
	if err != nil {
		_ = b.free()
		return nil, err
	}
	s.batches++
	return b, nil
}

// Rows returns the number of rows of the batch.
func (b *Batch) Rows() int { return b.rows }

// Draws returns the tokens each row draws per launch.
func (b *Batch) Draws() int { return b.draws }

// SetRow validates p and uploads it as row i's parameters: its route, its processors'
// flags (RECORD when tracked), and p.Step as the next launch's step. It waits for the
// stream; it is not the hot path. A row whose parameters are bad keeps its previous ones
// and the error (wrapping a row error such as ErrTemperature) is returned.
func (b *Batch) SetRow(i int, p Params) error {
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := b.checkRow(i); err != nil {
		return err
	}
	if err := checkParams(i, p); err != nil {
		return err
	}
	if p.Bitmask != nil {
		return fmt.Errorf("row %d: a Batch launch copies nothing: give its masks in device memory (Logits.Bitmask, SetBitmaskRow): %w", i, ErrBitmask)
	}
	if err := s.procs.checkCall(i+1, b.vocab); err != nil {
		return err
	}
	r := route(p, b.vocab, s.set.Gumbel)
	flags := abi.FlagRouted | abi.FlagAdvance | s.procs.flags(i, p)
	switch r {
	case RouteCategorical:
		flags |= abi.FlagCategorical
	case RouteFiltered:
		flags |= abi.FlagFiltered
	}
	if p.Logprobs {
		flags |= abi.FlagLogprobs
	}
	putRowParams(b.record, i, r, p, b.vocab, s.seedOf(p), flags, uint32(p.TopLogprobs), b.maskRows[i])
	if err := s.stream.CopyToDevice(b.params, i*RowParamsSize, b.record); err != nil {
		return fmt.Errorf("gumbel/sampler: uploading row %d's parameters: %w", i, err)
	}
	if err := s.stream.Synchronize(); err != nil {
		return fmt.Errorf("gumbel/sampler: uploading row %d's parameters: %w", i, err)
	}
	if b.set[i] {
		b.forget(i)
	}
	b.set[i], b.rowParams[i], b.routes[i], b.rowFlags[i] = true, p, r, flags
	b.kernelRows[kernelOf(r)]++
	if kernelOf(r) == kernelGumbel {
		b.kernelRows[kernelExact]++
	}
	if r == RouteFiltered && needsRowMax(p, b.vocab) {
		b.kernelRows[kernelFilterMax]++
	}
	if p.TopLogprobs > 0 {
		b.kernelRows[kernelTopN]++
	}
	if p.Logprobs {
		b.logprobRows++
	}
	return nil
}

// SetBitmaskRow makes batch row i apply row m of the token bitmask every Launch is
// given (Logits.Bitmask, in device memory), or none for m = -1. The mapping lasts
// across SetRow calls; Launch then needs a bitmask holding row m. Only the row's flags
// and mask row are uploaded (its step on the device is kept); it waits for the stream.
func (b *Batch) SetBitmaskRow(i, m int) error {
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := b.checkRow(i); err != nil {
		return err
	}
	if m < -1 || m > math.MaxInt32 {
		return fmt.Errorf("row %d: bitmask row %d outside [-1, 2^31): %w", i, m, ErrBitmask)
	}
	if (m >= 0) != (b.maskRows[i] >= 0) {
		if m >= 0 {
			b.maskedRows++
		} else {
			b.maskedRows--
		}
	}
	b.maskRows[i] = m
	if !b.set[i] {
		return nil // SetRow writes it
	}
	flags, row := b.rowFlags[i], uint32(0)
	if m >= 0 {
		flags, row = flags|abi.FlagBitmask, uint32(m)
	}
	le := binary.LittleEndian
	le.PutUint32(b.record[abi.FlagsOffset:], uint32(flags))
	le.PutUint32(b.record[abi.BitmaskRowOffset:], row)
	for _, off := range [...]int{abi.FlagsOffset, abi.BitmaskRowOffset} {
		if err := s.stream.CopyToDevice(b.params, i*RowParamsSize+off, b.record[off:off+4]); err != nil {
			return fmt.Errorf("gumbel/sampler: uploading row %d's bitmask row: %w", i, err)
		}
	}
	if err := s.stream.Synchronize(); err != nil {
		return fmt.Errorf("gumbel/sampler: uploading row %d's bitmask row: %w", i, err)
	}
	return nil
}

// checkMasks checks that the bitmask of a launch holds every mask row the batch's rows
// apply.
func (b *Batch) checkMasks(m *Bitmask) error {
	if b.maskedRows == 0 {
		return checkBitmask(m, b.rows, b.vocab, true)
	}
	if m == nil {
		return fmt.Errorf("%w: batch rows apply bitmask rows (SetBitmaskRow), but the launch has no Logits.Bitmask", ErrShape)
	}
	if err := checkBitmask(m, b.rows, b.vocab, true); err != nil {
		return err
	}
	for i, r := range b.maskRows {
		if r >= m.Rows {
			return fmt.Errorf("%w: batch row %d applies bitmask row %d, the bitmask holds %d rows", ErrShape, i, r, m.Rows)
		}
	}
	return nil
}

// checkRow returns the error of a row setter's call for row i (the lock held).
func (b *Batch) checkRow(i int) error {
	if b.closed || b.s.closed {
		return ErrClosed
	}
	if i < 0 || i >= b.rows {
		return fmt.Errorf("%w: row %d outside the batch's %d rows", ErrRow, i, b.rows)
	}
	return nil
}

// forget removes row i's old parameters from the launch counts.
func (b *Batch) forget(i int) {
	b.kernelRows[kernelOf(b.routes[i])]--
	if kernelOf(b.routes[i]) == kernelGumbel {
		b.kernelRows[kernelExact]--
	}
	if b.routes[i] == RouteFiltered && needsRowMax(b.rowParams[i], b.vocab) {
		b.kernelRows[kernelFilterMax]--
	}
	if b.rowParams[i].TopLogprobs > 0 {
		b.kernelRows[kernelTopN]--
	}
	if b.rowParams[i].Logprobs {
		b.logprobRows--
	}
}

// Launch queues one sampling step of every row on the sampler's stream: gumbel_argmax
// over the greedy and Gumbel rows, filter_max and filtered over the filtered rows,
// categorical over the rest (each kernel skips the others' rows on the device; a
// kernel no row needs is not launched, as SetRow decided), and topn when a row asked
// for top log-probabilities. logits must have the batch's
// rows, vocab and dtype. It allocates nothing, copies nothing and does not wait: read
// the outputs with Read, or from the device buffers Tokens, Status and Logprobs. Every
// row must have been given its parameters (SetRow).
func (b *Batch) Launch(logits Logits) error {
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if b.closed || s.closed {
		return ErrClosed
	}
	stride, err := checkLogits(logits, b.rows)
	if err != nil {
		return err
	}
	if logits.Vocab != b.vocab || logits.DType != b.dtype {
		return fmt.Errorf("%w: logits of vocab %d, %s for a batch of vocab %d, %s", ErrShape, logits.Vocab, logits.DType, b.vocab, b.dtype)
	}
	if err := b.checkMasks(logits.Bitmask); err != nil {
		return err
	}
	set := b.kernelRows[kernelGumbel] + b.kernelRows[kernelCategorical] + b.kernelRows[kernelFiltered]
	if set != b.rows {
		for i, ok := range b.set {
			if !ok {
				return fmt.Errorf("%w: row %d", ErrRowNotSet, i)
			}
		}
	}
	for k := range numKernels {
		if b.kernelRows[k] == 0 {
			continue
		}
		if err := b.launch(logits, stride, k); err != nil {
			return err
		}
	}
	return nil
}

// launch queues kernel k over every row of the batch.
func (b *Batch) launch(lg Logits, stride, k int) error {
	s := b.s
	lk := s.kernels[lg.DType][k]
	if lk.kernel == nil {
		return s.topnErr
	}
	split, draws := 1, b.draws
	out0, out1, records := b.out[regionTokens], b.out[regionStatus], b.out[regionLogprobs]
	var at scratchAt
	switch k {
	case kernelGumbel, kernelFiltered:
		split = b.split
		if k == kernelGumbel && b.sharesDevice(lg) {
			split = b.sharedSplit
		}
	case kernelFilterMax:
		split, draws = b.split, 1
	case kernelExact:
		// After gumbel_argmax, whenever the batch has greedy or Gumbel rows: only the
		// device knows whether a draw needs it, and its blocks return at once where none
		// does.
		split = 1
	case kernelTopN:
		split, draws = b.topSplit, 1
		if b.sharesDevice(lg) {
			split = b.sharedSplit
		}
		out0, out1, records, at = b.out[regionTopTokens], b.out[regionTopValues], s.scratch.unused.buf, b.topScratch
	}
	a := b.args.Reset()
	a.BufferAt(lg.Data, lg.Offset).
		Buffer(b.params).
		Buffer(out0).
		Buffer(out1).
		BufferAt(b.partials, at.partials).
		BufferAt(b.counters, at.counters).
		U64(uint64(stride)).
		U32(uint32(lg.Vocab)).
		Buffer(records)
	s.procs.appendArgs(a, s.scratch.unused.buf)
	if m := lg.Bitmask; m != nil {
		a.BufferAt(m.Data, m.Offset)
	} else {
		a.Buffer(s.scratch.unused.buf)
	}
	a.U32(0).Buffer(s.scratch.unused.buf) // no vocabulary shard
	a.Buffer(s.scratch.unused.buf)        // no draft probabilities
	grid := runtime.Dim3{X: split, Y: b.rows, Z: draws}
	block := runtime.Dim3{X: lk.block, Y: 1, Z: 1}
	// filtered right after filter_max waits for its words on the device; topn after
	// gumbel_argmax or categorical, and gumbel_exact, last, for everything before them.
	// gumbel_exact reads the few rows left to it, so the cache does not decide for it.
	reread := k == kernelFiltered && b.kernelRows[kernelFilterMax] > 0 ||
		k == kernelTopN && b.kernelRows[kernelGumbel]+b.kernelRows[kernelCategorical] > 0
	dependent := k == kernelExact || reread && s.overlaps(b.kernelRows[k], lg)
	if err := s.launchAfter(lk.kernel, grid, block, a, dependent); err != nil {
		return fmt.Errorf("gumbel/sampler: launching %s over a batch of %d rows x %d blocks x %d draws: %w", lk.kernel.Name(), b.rows, split, draws, err)
	}
	return nil
}

// sharesDevice reports whether the next launch runs its gumbel_argmax and topn side by
// side (Sampler.sharesDevice). A batch queues topn before filter_max and filtered, so
// only categorical rows come between them.
func (b *Batch) sharesDevice(lg Logits) bool {
	k := &b.kernelRows
	return b.s.sharesDevice(k[kernelGumbel], k[kernelTopN], k[kernelCategorical], lg)
}

// Read waits for the stream, copies the last launch's outputs back and decodes them into
// res as Sample would (res.Draws = the batch's draws). Before the first Launch it reads
// whatever the output buffers hold.
func (b *Batch) Read(res *Result) error {
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if b.closed || s.closed {
		return ErrClosed
	}
	if res == nil {
		return fmt.Errorf("%w: nil *Result", ErrShape)
	}
	host, err := b.host.bytes(s.dev, b.layout.size())
	if err != nil {
		return err
	}
	regions := b.layout.regions()
	for r, on := range [numRegions]bool{
		regionTokens:    true,
		regionStatus:    true,
		regionLogprobs:  b.logprobRows > 0,
		regionTopTokens: b.kernelRows[kernelTopN] > 0,
		regionTopValues: b.kernelRows[kernelTopN] > 0,
	} {
		if !on {
			continue
		}
		off, size := regions[r][0], regions[r][1]
		if err := s.stream.CopyToHost(host[off:off+size], b.out[r], 0); err != nil {
			return fmt.Errorf("gumbel/sampler: copying the batch outputs back: %w", err)
		}
	}
	if err := s.stream.Synchronize(); err != nil {
		return fmt.Errorf("gumbel/sampler: waiting for the batch: %w", err)
	}
	res.resize(b.rows, b.draws, b.logprobRows > 0, b.kernelRows[kernelTopN] > 0)
	for i := range b.rows {
		res.Routes[i], res.Errs[i] = b.routes[i], nil
		if !b.set[i] {
			res.Errs[i] = fmt.Errorf("%w: row %d", ErrRowNotSet, i)
		}
	}
	s.decode(host, b.layout, b.rowParams, drawReplace, b.vocab, res)
	return nil
}

// Tokens is the device buffer of the last launch's tokens: int32[rows*draws], row i's
// draw z at i*draws+z, -1 for a failed row.
func (b *Batch) Tokens() runtime.Buffer { return b.out[regionTokens] }

// Status is the device buffer of the ABI status codes, int32[rows*draws], laid out as
// Tokens.
func (b *Batch) Status() runtime.Buffer { return b.out[regionStatus] }

// Logprobs is the device buffer of the log-probability records, float32[4*rows*draws]:
// raw, processed, raw log-normaliser and processed log-normaliser per token (rows with
// Params.Logprobs only).
func (b *Batch) Logprobs() runtime.Buffer { return b.out[regionLogprobs] }

// Close frees the batch's device memory. It waits for the stream first. Closing again
// does nothing.
func (b *Batch) Close() error {
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	s.batches--
	if !s.closed {
		_ = s.stream.Synchronize()
	}
	return b.free()
}

func (b *Batch) free() error {
	var errs []error
	bufs := []*runtime.Buffer{&b.params, &b.partials, &b.counters}
	for r := range b.out {
		bufs = append(bufs, &b.out[r])
	}
	for _, buf := range bufs {
		if *buf != nil {
			errs = append(errs, (*buf).Free())
			*buf = nil
		}
	}
	errs = append(errs, b.host.free())
	return errors.Join(errs...)
}
