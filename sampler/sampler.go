package sampler

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/gumbel-go/gumbel/collective"
	"github.com/gumbel-go/gumbel/kernelsrc"
	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/gumbel-go/gumbel/runtime"
)

// maxRowsPerLaunch is the most rows one launch carries (grid.y): CUDA's and HIP's
// gridDim.y limit. Larger batches take a few launches per route, never one per row.
const maxRowsPerLaunch = 65535

// Kernel slots of the sampling program.
const (
	kernelGumbel = iota
	kernelCategorical
	kernelTopN
	kernelFilterMax
	kernelFiltered
	kernelScore
	kernelResidual
	// kernelExact finishes the Gumbel draws gumbel_argmax leaves with status 5.
	kernelExact
	// kernelSelect is the filtered route's part on a vocabulary shard (SampleShard).
	kernelSelect
	numKernels
)

const numDTypes = len(abi.DTypes)

// kernelFamilies are the ABI's kernel families of the slots.
var kernelFamilies = [numKernels]string{kernelGumbel: abi.GumbelArgmax, kernelCategorical: abi.Categorical,
	kernelTopN: abi.TopN, kernelFilterMax: abi.FilterMax, kernelFiltered: abi.Filtered, kernelScore: abi.Score,
	kernelResidual: abi.Residual, kernelExact: abi.GumbelExact, kernelSelect: abi.ShardSelect}

// launchKernel is a kernel with the block width it is launched with.
type launchKernel struct {
	kernel runtime.Kernel
	block  int
}

// Sampler samples tokens from batches of logits on one device. It owns its kernels, its
// grow-only scratch memory and the logit processors' device state. Its methods may be
// called from several goroutines, but calls are serialised by a mutex: a Sampler runs one
// batch at a time (use one Sampler per stream for concurrent batches).
type Sampler struct {
	mu     sync.Mutex
	closed bool
	dev    runtime.Device
	stream runtime.Stream
	// dep is stream's dependent launch, where it overlaps kernels (launchAfter), and l2
	// the device's last-level cache in bytes, which decides where it is used (overlaps).
	dep     runtime.DependentLauncher
	l2      int
	module  runtime.Module
	kernels [numDTypes][numKernels]launchKernel
	// topnErr says why the module has no topn kernels (an edition without them);
	// calls that need them report it.
	topnErr error
	// scoreErr says why the module has no score kernels; Score reports it.
	scoreErr error
	// residualErr says why the module has no residual kernels; VerifyChainProbs
	// reports it.
	residualErr error
	// selectErr says why the module has no shard_select kernels; the filtered rows of
	// SampleShard report it.
	selectErr error
	set       Settings
	args      runtime.Args
	scratch   scratch
	procs     processors
	// dirty is set when a call failed after queuing work: the next call waits for
	// the stream and zeroes the counters, which a half-done launch may have left set.
	dirty bool
	// last is the launch plan of the last successful call, for Relaunch.
	last plan
	// batches counts the open Batches, which hold the processor buffers' layout.
	batches int
	// unnamedRows counts the rows sampled without a seed or request id (seedOf).
	unnamedRows uint64
	// maskRows holds each row's bitmask row during a call (-1: none); hostMasks the
	// call's host masks in bitmask-scratch order.
	maskRows  []int
	hostMasks [][]int32
	// shard is the Shard of the SampleShard call in progress (kept here so that the
	// call does not allocate one); shardParams, shardTokens and shardScores are its
	// log-probability pass's.
	shard       Shard
	shardParams []Params
	shardTokens []int32
	shardScores Scores
	// shardLSE holds each row's merged raw log-normaliser, and shardTop the merged
	// top-log-probability candidates (two words per entry, ranks x MaxTopLogprobs per
	// row), of a SampleShard call.
	shardLSE []float64
	shardTop []uint64
	// selRows are the filtered rows of a SampleShard call during their selection
	// rounds, and shardKept each row's kept law for its record (shardFilter).
	selRows   []shardSelectRow
	shardKept []keptLaw
	// The verification calls' reused state (verifyCall).
	verifyOwner, verifyFirst   []int
	verifySeeds                []uint64
	verifyMasks                [][]int32
	verifyTrees                []DraftTree
	verifyParents, verifyDepth []int32
	verifyKids, verifyTop      []int32
	verifyStatus               []uint32
	verifyRec                  []Logprob
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
	seed, err := opts.resolveSeed()
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
		procs:   newProcessors(),
		set:     Settings{Seed: seed, Gumbel: gumbel, Split: split, Policy: policy},
	}
	if d, ok := stream.(runtime.DependentLauncher); ok && d.Overlaps() {
		s.dep = d
	}
	s.l2 = info.L2CacheBytes
	for d, dt := range abi.DTypes {
		for k, family := range kernelFamilies {
			name := abi.KernelName(family, dt)
			kern, err := module.Kernel(name)
			if err != nil && (k == kernelTopN || k == kernelScore || k == kernelResidual || k == kernelSelect) &&
				errors.Is(err, runtime.ErrNoKernel) {
				// Sampling works without topn, score, residual and shard_select; only the
				// calls that need them fail.
				missing := fmt.Errorf("gumbel/sampler: kernel %s: %w", name, err)
				switch k {
				case kernelTopN:
					s.topnErr = missing
				case kernelScore:
					s.scoreErr = missing
				case kernelSelect:
					s.selectErr = missing
				default:
					s.residualErr = missing
				}
				continue
			}
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

// Close frees the sampler's scratch memory, processor state and kernels. Later calls
// return ErrClosed; closing again does nothing. It does not close the device or the
// stream. Close the sampler's Batches first.
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
	return errors.Join(s.scratch.free(), s.procs.free(), s.module.Close())
}

// Sample draws one token for each row of logits, with params[i] for row i, and writes
// them to res. A bad row (bad parameters, NaN or +Inf logits, no finite logit) gets
// token -1 and its error in res.Errs; the other rows still get their tokens. Sample
// returns an error only when the call as a whole cannot run: a closed sampler
// (ErrClosed), sizes that do not agree (ErrShape) or a device failure.
//
// The call queues one parameter upload, one launch per route present (gumbel_argmax
// for greedy and Gumbel-max rows, filtered for filtered rows, after filter_max when a
// row's filters need its maximum, categorical with the Gumbel switch off) and one topn
// launch when a row asks for top log-probabilities, the copies of the outputs back, and
// waits for the stream once. Rows with logit processors (SetLogitBias, SetAllowedTokens,
// SetBannedTokens, TrackTokens) sample from their processed logits; a tracked row's
// token is counted on the device.
func (s *Sampler) Sample(logits Logits, params []Params, res *Result) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	return s.sample(logits, params, 1, drawReplace, res)
}

// drawMode is how a call draws its tokens.
type drawMode uint8

const (
	// drawReplace: Sample and SampleN, gumbel_argmax and categorical with grid.z
	// draws.
	drawReplace drawMode = iota
	// drawDistinct: SampleDistinct, the topn kernel's perturbed mode.
	drawDistinct
)

// Launch groups of a call. The RowParams of each group take consecutive slots, in this
// order, rows in row order within a group.
const (
	groupGumbel = iota
	groupCategorical
	groupFiltered
	groupDistinct
	groupTop
	groupScore
	// groupResidual follows groupScore: its rows read the records score wrote.
	groupResidual
	numGroups
)

// kernelOfGroup is the kernel each launch group runs.
var kernelOfGroup = [numGroups]int{kernelGumbel, kernelCategorical, kernelFiltered, kernelTopN, kernelTopN, kernelScore, kernelResidual}

// plan is what a call launched: enough to queue the same launches again (Relaunch).
type plan struct {
	ok     bool
	logits Logits
	stride int
	draws  int
	groups [numGroups]int
	// maxRows counts the filtered rows whose filters need the row's maximum first
	// (needsRowMax): filter_max runs before filtered when there are any.
	maxRows int
	out     outLayout
	// bitmask (from byte bitmaskOff) is the caller's device bitmask; hostBitmask says
	// the rows' host masks sit in the bitmask scratch instead.
	bitmask     runtime.Buffer
	bitmaskOff  int
	hostBitmask bool
	// shard is the vocabulary shard of a SampleShard call; nil otherwise.
	shard *Shard
	// draft (from byte draftOff) holds the draft probabilities of a VerifyChainProbs
	// call; nil otherwise.
	draft    runtime.Buffer
	draftOff int
	// chainRecords counts the RowParams records of the residual group, whose launch
	// rows are chains of several records each.
	chainRecords int
	// exact: the Gumbel group's draws needed gumbel_exact (kernelsrc/ABI.md, "Exact
	// scores"), which Relaunch then repeats too.
	exact bool
	// topScratch is where the top log-probabilities' topn launches keep their scratch
	// (prepare).
	topScratch scratchAt
}

// scratchAt is a launch's byte offsets into the partials and counters scratch.
type scratchAt struct{ partials, counters int }

// appendBitmask appends the bitmask argument (ABI argument 12) of a plan's launches.
func (s *Sampler) appendBitmask(a *runtime.Args, pl *plan) {
	switch {
	case pl.bitmask != nil:
		a.BufferAt(pl.bitmask, pl.bitmaskOff)
	case pl.hostBitmask:
		a.Buffer(s.scratch.bitmask.buf)
	default:
		a.Buffer(s.scratch.unused.buf)
	}
}

// outLayout places a call's outputs in the results scratch, for rows rows of draws
// draws: tokens, status and log-probability records per output slot, then the topn
// lists of the top log-probabilities and of the distinct draws (MaxTopLogprobs entries
// per row each).
type outLayout struct{ rows, draws int }

func (l outLayout) slots() int    { return l.rows * l.draws }
func (l outLayout) tokens() int   { return 0 }
func (l outLayout) status() int   { return 4 * l.slots() }
func (l outLayout) logprobs() int { return 8 * l.slots() }
func (l outLayout) topTokens() int {
	return 24 * l.slots()
}
func (l outLayout) topValues() int      { return l.topTokens() + 4*MaxTopLogprobs*l.rows }
func (l outLayout) distinctTokens() int { return l.topValues() + 4*MaxTopLogprobs*l.rows }
func (l outLayout) distinctValues() int { return l.distinctTokens() + 4*MaxTopLogprobs*l.rows }

// keys holds the shard keys of a SampleShard call, 8-byte aligned for the all-reduce.
func (l outLayout) keys() int { return (l.distinctValues() + 4*MaxTopLogprobs*l.rows + 7) &^ 7 }
func (l outLayout) size() int { return l.keys() + 8*l.slots() }

// sample is Sample, SampleN and SampleDistinct with the lock held.
func (s *Sampler) sample(lg Logits, params []Params, draws int, mode drawMode, res *Result) error {
	return s.sampleCall(lg, params, draws, mode, nil, res)
}

// sampleCall is sample over the whole vocabulary (sh nil) or over a vocabulary shard
// (SampleShard).
func (s *Sampler) sampleCall(lg Logits, params []Params, draws int, mode drawMode, sh *Shard, res *Result) error {
	stride, err := checkLogits(lg, len(params))
	if err != nil {
		return err
	}
	if res == nil {
		return fmt.Errorf("%w: nil *Result", ErrShape)
	}
	if err := checkDraws(draws, mode); err != nil {
		return err
	}
	rows, vocab := lg.Rows, lg.Vocab
	if err := s.procs.checkCall(rows, vocab); err != nil {
		return err
	}
	if err := checkCallBitmasks(lg, params, rows); err != nil {
		return err
	}
	// Route and check every row; count the launched rows of each group.
	var groups [numGroups]int
	maxRows := 0
	wantLogprobs, wantTop := false, false
	res.Routes = resized(res.Routes, rows)
	res.Errs = resized(res.Errs, rows)
	s.maskRows = resized(s.maskRows, rows)
	masks := bitmaskCall{dev: lg.Bitmask, host: s.hostMasks[:0]}
	// A shard routes by the whole vocabulary, so that every rank routes a row alike.
	routeVocab := vocab
	if sh != nil {
		routeVocab = sh.Global
	}
	for i, p := range params {
		r := route(p, routeVocab, s.set.Gumbel)
		err := checkParams(i, p)
		if err == nil && mode == drawDistinct {
			if r != RouteGreedy && filtered(p, vocab) {
				err = fmt.Errorf("row %d: %w", i, ErrDistinctFiltered)
			}
			// The Gumbel switch does not apply: Gumbel-top-k is the only way to
			// draw without replacement.
			r = distinctRoute(r)
		}
		s.maskRows[i] = -1
		if err == nil {
			s.maskRows[i], err = masks.rowOf(i, p, vocab)
		}
		if err == nil && sh != nil {
			err = s.checkShardRow(i, p, r)
		}
		res.Routes[i], res.Errs[i] = r, err
		if err != nil {
			continue
		}
		switch {
		case mode == drawDistinct:
			groups[groupDistinct]++
		case r == RouteFiltered && sh != nil:
			// Drawn greedily first: the merged key holds the row's largest logit,
			// which its selection rounds start from (shardFilter).
			groups[groupGumbel]++
		case r == RouteFiltered:
			groups[groupFiltered]++
			if needsRowMax(p, vocab) {
				maxRows++
			}
		default:
			groups[kernelOf(r)]++
		}
		if p.TopLogprobs > 0 {
			groups[groupTop]++
			wantTop = true
		}
		wantLogprobs = wantLogprobs || p.Logprobs
	}
	s.hostMasks = masks.host[:0] // the list's memory, for the next call
	res.resize(rows, draws, wantLogprobs, wantTop)
	if rows == 0 {
		return nil
	}
	total := 0
	for _, n := range groups {
		total += n
	}
	if total == 0 && sh == nil {
		return nil // a shard call still takes part in the merge
	}
	if (groups[groupDistinct] > 0 || groups[groupTop] > 0) && s.topnErr != nil {
		return s.topnErr
	}

	pl := plan{logits: lg, stride: stride, draws: draws, groups: groups, maxRows: maxRows,
		out: outLayout{rows: rows, draws: draws}, shard: sh}
	switch {
	case lg.Bitmask != nil:
		pl.bitmask, pl.bitmaskOff = lg.Bitmask.Data, lg.Bitmask.Offset
	case len(masks.host) > 0:
		pl.bitmask = nil // the scratch, which prepare may still grow
		pl.hostBitmask = true
	}
	if err := s.prepare(&pl); err != nil {
		return err
	}
	sc := &s.scratch
	host, err := sc.paramsHost.bytes(s.dev, total*RowParamsSize)
	if err != nil {
		return err
	}
	var next [numGroups]int
	for g := 1; g < numGroups; g++ {
		next[g] = next[g-1] + groups[g-1]
	}
	for i, p := range params {
		if res.Errs[i] != nil {
			continue
		}
		r := res.Routes[i]
		seed := s.seedOf(p)
		procFlags := s.procs.flags(i, p)
		g := groupDistinct
		var flags abi.Flags
		var topn uint32
		if mode == drawDistinct {
			flags, topn = abi.FlagPerturbed|procFlags&^abi.FlagRecord, uint32(draws)
		} else {
			g = groupOf(r)
			flags = procFlags
			switch {
			case sh != nil:
				flags |= abi.FlagShard // a shard's log-probabilities come from shardLogprobs
				if r == RouteFiltered {
					g, r = groupGumbel, RouteGreedy
				}
			case p.Logprobs:
				flags |= abi.FlagLogprobs
			}
		}
		putRowParams(host[next[g]*RowParamsSize:], i, r, p, vocab, seed, flags, topn, s.maskRows[i])
		next[g]++
		if p.TopLogprobs > 0 {
			// Plain topn ranks raw logits: no processors, no mask, no step.
			putRowParams(host[next[groupTop]*RowParamsSize:], i, r, p, vocab, seed, 0, uint32(p.TopLogprobs), -1)
			next[groupTop]++
		}
	}
	results, err := sc.resultsHost.bytes(s.dev, pl.out.size())
	if err != nil {
		return err
	}

	s.dirty, s.last.ok = true, false
	if err := s.stream.CopyToDevice(sc.params.buf, 0, host); err != nil {
		return fmt.Errorf("gumbel/sampler: uploading row parameters: %w", err)
	}
	if err := s.stageBitmasks(masks.host, vocab); err != nil {
		return err
	}
	if sh != nil {
		if err := s.stageShardKeys(results, pl.out, res.Errs); err != nil {
			return err
		}
	}
	if err := s.queue(&pl); err != nil {
		return err
	}
	hostMerge := false
	if sh != nil {
		_, hostMerge = sh.Comm.(collective.HostReducer)
	}
	if sh != nil && !hostMerge {
		if err := sh.Comm.AllReduce(sc.results.buf, pl.out.keys(), pl.out.slots(), collective.Uint64, collective.OpMax, s.stream); err != nil {
			return fmt.Errorf("gumbel/sampler: merging the shards' keys: %w", err)
		}
	}
	if err := s.copyBack(results, &pl, wantLogprobs); err != nil {
		return err
	}
	if err := s.stream.Synchronize(); err != nil {
		return fmt.Errorf("gumbel/sampler: waiting for the sampling kernels: %w", err)
	}
	if hostMerge {
		// Ranks in one process merge the keys where they are now, on the host.
		keys := results[pl.out.keys() : pl.out.keys()+8*pl.out.slots()]
		hr := sh.Comm.(collective.HostReducer)
		if err := hr.AllReduceHost(keys, pl.out.slots(), collective.Uint64, collective.OpMax); err != nil {
			return fmt.Errorf("gumbel/sampler: merging the shards' keys: %w", err)
		}
	}
	if err := s.finishExact(&pl, results, wantLogprobs); err != nil {
		return err
	}
	s.dirty = false
	pl.ok = true
	s.last = pl

	if sh != nil {
		decodeShard(results, pl.out, sh.Global, res)
		if err := s.shardFilter(&pl, params, results[pl.out.keys():], res); err != nil {
			return err
		}
		if !wantLogprobs && !wantTop {
			return nil
		}
		for i, p := range params {
			if p.TopLogprobs > 0 && res.Errs[i] == nil {
				// This shard's list, in local tokens, before the score pass reuses the
				// results scratch; shardLogprobs merges the ranks' lists.
				decodeTop(results, pl.out, i, p.TopLogprobs, vocab, &res.Top[i])
			}
		}
		return s.shardLogprobs(lg, params, sh, res)
	}
	s.decode(results, pl.out, params, mode, vocab, res)
	return nil
}

// runPlan uploads a plan's row parameters (host, in group order), queues its launches
// and the copies of their outputs, and waits: the work of a call after its checks, for
// calls that build their own plans (Score, VerifyChain). It returns the host mirror of
// the outputs and makes the plan the one Relaunch repeats.
func (s *Sampler) runPlan(pl *plan, host []byte, wantLogprobs bool) ([]byte, error) {
	results, err := s.scratch.resultsHost.bytes(s.dev, pl.out.size())
	if err != nil {
		return nil, err
	}
	s.dirty, s.last.ok = true, false
	if err := s.stream.CopyToDevice(s.scratch.params.buf, 0, host); err != nil {
		return nil, fmt.Errorf("gumbel/sampler: uploading row parameters: %w", err)
	}
	if err := s.queue(pl); err != nil {
		return nil, err
	}
	if err := s.copyBack(results, pl, wantLogprobs); err != nil {
		return nil, err
	}
	if err := s.stream.Synchronize(); err != nil {
		return nil, fmt.Errorf("gumbel/sampler: waiting for the kernels: %w", err)
	}
	if err := s.finishExact(pl, results, wantLogprobs); err != nil {
		return nil, err
	}
	s.dirty = false
	pl.ok = true
	s.last = *pl
	return results, nil
}

// finishExact runs gumbel_exact after a plan whose Gumbel draws left status 5 (scores so
// large that float32 lost the noise: kernelsrc/ABI.md, "Exact scores") and copies the
// outputs back again. Ordinary rows never get here, so their step costs nothing more.
func (s *Sampler) finishExact(pl *plan, results []byte, wantLogprobs bool) error {
	if pl.exact || pl.shard != nil || pl.groups[groupGumbel] == 0 || !exactPending(results, pl.out) {
		return nil
	}
	pl.exact = true
	if err := s.launchExact(pl); err != nil {
		return err
	}
	if err := s.copyBack(results, pl, wantLogprobs); err != nil {
		return err
	}
	if err := s.stream.Synchronize(); err != nil {
		return fmt.Errorf("gumbel/sampler: waiting for gumbel_exact: %w", err)
	}
	return nil
}

// exactPending reports an output slot with status 5.
func exactPending(results []byte, out outLayout) bool {
	st := results[out.status() : out.status()+4*out.slots()]
	for o := 0; o < len(st); o += 4 {
		if abi.Status(binary.LittleEndian.Uint32(st[o:])) == abi.StatusExact {
			return true
		}
	}
	return false
}

// launchExact queues gumbel_exact over the Gumbel group's rows (whose RowParams come
// first), on the outputs gumbel_argmax wrote.
func (s *Sampler) launchExact(pl *plan) error {
	out := pl.out
	lk := s.kernels[pl.logits.DType][kernelExact]
	return s.launchRows(pl, lk, 0, pl.groups[groupGumbel], 1, pl.draws, out.tokens(), out.status(), out.logprobs(), scratchAt{}, false)
}

// copyBack queues the copies of the outputs a plan's groups wrote into results, the
// host mirror of the results scratch.
func (s *Sampler) copyBack(results []byte, pl *plan, wantLogprobs bool) error {
	buf, out := s.scratch.results.buf, pl.out
	type region struct {
		on        bool
		off, size int
	}
	mainRows := pl.groups[groupGumbel] + pl.groups[groupCategorical] + pl.groups[groupFiltered] + pl.groups[groupScore] +
		pl.groups[groupResidual]
	for _, r := range [...]region{
		{mainRows > 0, out.tokens(), 8 * out.slots()},
		{mainRows > 0 && wantLogprobs, out.logprobs(), 16 * out.slots()},
		{pl.groups[groupTop] > 0, out.topTokens(), 8 * MaxTopLogprobs * out.rows},
		{pl.groups[groupDistinct] > 0, out.distinctTokens(), 8 * MaxTopLogprobs * out.rows},
		{pl.shard != nil, out.keys(), 8 * out.slots()},
	} {
		if !r.on {
			continue
		}
		if err := s.stream.CopyToHost(results[r.off:r.off+r.size], buf, r.off); err != nil {
			return fmt.Errorf("gumbel/sampler: copying the outputs back: %w", err)
		}
	}
	return nil
}

// Relaunch queues the kernel launches of the last successful call again on the sampler's
// stream (same logits, the row parameters already on the device, the same launch
// shapes, draws and topn launches) and returns without copying or waiting. The tokens it
// writes equal the last call's, except for tracked rows with penalties: their counts
// grow with every launch, as they would in a decode loop. It exists to time the device
// work of a sampling step: record events around many Relaunch calls, or capture one in
// a graph. It fails after a call that returned an error, or when the logits buffer of
// that call may have gone (after Close).
func (s *Sampler) Relaunch() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if !s.last.ok {
		return fmt.Errorf("gumbel/sampler: Relaunch: %w: no successful call to repeat", runtime.ErrInvalidArgument)
	}
	if err := s.queue(&s.last); err != nil {
		s.last.ok = false
		return err
	}
	return nil
}

// Stream returns the stream the sampler queues its work on.
func (s *Sampler) Stream() runtime.Stream { return s.stream }

// kernelOf returns the kernel slot of a route: greedy rows are gumbel_argmax rows with
// temperature 0.
func kernelOf(r Route) int {
	switch r {
	case RouteCategorical:
		return kernelCategorical
	case RouteFiltered:
		return kernelFiltered
	}
	return kernelGumbel
}

// groupOf returns the launch group of a route's rows (Sample and SampleN).
func groupOf(r Route) int {
	switch r {
	case RouteCategorical:
		return groupCategorical
	case RouteFiltered:
		return groupFiltered
	}
	return groupGumbel
}

// distinctRoute is the route of a row drawing without replacement: greedy stays greedy,
// every sampled row ranks Gumbel scores.
func distinctRoute(r Route) Route {
	if r == RouteGreedy {
		return RouteGreedy
	}
	return RouteGumbel
}

// checkDraws checks a call's draw count.
func checkDraws(draws int, mode drawMode) error {
	limit := MaxDraws
	if mode == drawDistinct {
		limit = MaxTopLogprobs
	}
	if draws < 1 || draws > limit {
		return fmt.Errorf("%w: %d draws per row, want 1 to %d", ErrDraws, draws, limit)
	}
	return nil
}

// blocksPerRow is the split of a gumbel_argmax or topn launch of rows rows.
func (s *Sampler) blocksPerRow(rows, vocab int) int {
	if !s.set.Split {
		return 1
	}
	return s.set.Policy.BlocksPerRow(rows, vocab)
}

// groupSplit is the blocks per row of launch group g of n rows.
func (s *Sampler) groupSplit(pl *plan, g, n, vocab int) int {
	switch {
	case g == groupCategorical:
		return 1
	case (g == groupGumbel || g == groupTop) && s.sharesDevice(pl.groups[groupGumbel], pl.groups[groupTop],
		pl.groups[groupCategorical]+pl.groups[groupFiltered], pl.logits):
		return s.sharedSplit(n, vocab)
	}
	return s.blocksPerRow(n, vocab)
}

// sharesDevice reports whether a call's gumbel_argmax (over gumbel rows) and topn (over
// top rows) run side by side, each on half of the device: topn queued right after
// gumbel_argmax (no categorical or filtered rows between them), launched dependent. A
// topn block of raw logits scans its chunk and selects its list before it waits for
// gumbel_argmax (gb_grid_wait), which lets it start as it begins (gb_grid_release), so
// on the multiprocessors gumbel_argmax leaves free topn does most of its work beside it
// instead of after it (docs/benchmark_results/filtered-h200.md).
func (s *Sampler) sharesDevice(gumbel, top, between int, lg Logits) bool {
	return s.dep != nil && s.set.Split && gumbel > 0 && top > 0 && between == 0 && s.overlaps(max(gumbel, top), lg)
}

// sharedSplit is the blocks per row of a gumbel_argmax or topn launch of rows rows that
// shares the device with the other (sharesDevice): the policy's for half its target.
func (s *Sampler) sharedSplit(rows, vocab int) int {
	p := s.set.Policy
	p.TargetBlocks = max(p.TargetBlocks/2, 1)
	return p.BlocksPerRow(rows, vocab)
}

// scratchNeeds returns the partials and counters bytes a launch of n rows (at most
// maxRowsPerLaunch) of group g with draws draws and split blocks per row uses (ABI.md).
func scratchNeeds(g, n, draws, split int) (partials, counters int) {
	l := abi.Launch{Rows: n, Split: split, Draws: draws}
	family := kernelFamilies[kernelOfGroup[g]]
	return 8 * l.PartialsWords(family), 4 * l.CountersWords(family)
}

// prepare grows the scratch for a plan and restores the counters after a failed call.
func (s *Sampler) prepare(pl *plan) error {
	sc := &s.scratch
	if s.dirty {
		// A failed call may have left work queued and counters set.
		_ = s.stream.Synchronize()
	}
	slots := 0
	// The top log-probabilities' scratch follows every other group's, so that topn may
	// merge its blocks' lists beside the kernel it is launched after (ABI.md,
	// "Dependent launches").
	var others, top scratchAt
	for g, n := range pl.groups {
		slots += n
		if g == groupResidual && n > 0 {
			// Its records, and the slack the kernel may read past them (ABI.md).
			slots += pl.chainRecords - n + abi.ChainSlack
		}
		if n == 0 {
			continue
		}
		p, c := scratchNeeds(g, min(n, maxRowsPerLaunch), pl.draws, s.groupSplit(pl, g, n, pl.logits.Vocab))
		need := &others
		if g == groupTop {
			need = &top
		}
		need.partials, need.counters = max(need.partials, p), max(need.counters, c)
	}
	pl.topScratch = others
	needPartials, needCounters := others.partials+top.partials, others.counters+top.counters
	if _, err := sc.params.ensure(s.dev, slots*RowParamsSize); err != nil {
		return err
	}
	if _, err := sc.results.ensure(s.dev, pl.out.size()); err != nil {
		return err
	}
	if _, err := sc.partials.ensure(s.dev, needPartials); err != nil {
		return err
	}
	if _, err := sc.unused.ensure(s.dev, 8); err != nil {
		return err
	}
	grew, err := sc.counters.ensure(s.dev, needCounters)
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

// queue queues every launch of a plan, whose row parameters are on the device.
func (s *Sampler) queue(pl *plan) error {
	first := 0
	for g, n := range pl.groups {
		if err := s.launchGroup(pl, g, first, n, first > 0); err != nil {
			return err
		}
		first += n
		if g == groupResidual {
			first += pl.chainRecords - n
		}
	}
	if pl.exact {
		return s.launchExact(pl)
	}
	return nil
}

// launchGroup queues group g's kernel over n launched rows whose RowParams start at
// slot first, in launches of at most maxRowsPerLaunch rows; after says that a kernel of
// the call was queued before it.
func (s *Sampler) launchGroup(pl *plan, g, first, n int, after bool) error {
	if n == 0 {
		return nil
	}
	lg, out := pl.logits, pl.out
	lk := s.kernels[lg.DType][kernelOfGroup[g]]
	if lk.kernel == nil {
		return s.topnErr
	}
	split := s.groupSplit(pl, g, n, lg.Vocab)
	if g == groupFiltered {
		// filter_max and filtered chunk by chunk: each chunk's maxima sit at the same
		// partials words.
		for done := 0; done < n; done += maxRowsPerLaunch {
			c := min(n-done, maxRowsPerLaunch)
			if pl.maxRows > 0 {
				if err := s.launchRows(pl, s.kernels[lg.DType][kernelFilterMax], first+done, c, split, 1, out.tokens(), out.status(), -1, scratchAt{}, false); err != nil {
					return err
				}
			}
			// filtered waits for filter_max's words on the device (gb_grid_wait), so it
			// may start while filter_max ends.
			dependent := pl.maxRows > 0 && s.overlaps(c, lg)
			if err := s.launchRows(pl, lk, first+done, c, split, pl.draws, out.tokens(), out.status(), out.logprobs(), scratchAt{}, dependent); err != nil {
				return err
			}
		}
		return nil
	}
	// Output buffers 0 and 1 (tokens and status, or the topn lists) and the
	// log-probability records, by group.
	out0, out1, records, draws := out.tokens(), out.status(), out.logprobs(), pl.draws
	var at scratchAt
	switch g {
	case groupTop:
		out0, out1, records, draws, at = out.topTokens(), out.topValues(), -1, 1, pl.topScratch
	case groupDistinct:
		out0, out1, records, draws = out.distinctTokens(), out.distinctValues(), -1, 1
	case groupScore, groupResidual:
		draws = 1
	}
	// topn waits for the kernels before it on the device (gb_grid_wait).
	return s.launchRows(pl, lk, first, n, split, draws, out0, out1, records, at, after && g == groupTop && s.overlaps(n, lg))
}

// overlaps reports whether a kernel that reads rows rows of lg after the kernel before
// it, which read them too, may be launched to overlap that kernel's end (launchAfter):
// only while those logits take at most two fifths of the L2 cache. Larger ones ran
// slower overlapped on an H200 (docs/benchmark_results/filtered-h200.md), most likely
// because the early blocks land on other SMs than the first kernel's blocks of the same
// chunk, and read it from the other half of the L2.
func (s *Sampler) overlaps(rows int, lg Logits) bool {
	return 5*int64(rows)*int64(lg.Vocab)*int64(lg.DType.Size()) <= 2*int64(s.l2)
}

// launchRows queues kernel lk over n launched rows whose RowParams start at slot first,
// in launches of at most maxRowsPerLaunch rows, with the outputs at results offsets out0
// and out1, the records at records (-1: none) and its partials and counters from at.
// With dependent, the first launch may
// overlap the kernel queued before it (launchAfter).
func (s *Sampler) launchRows(pl *plan, lk launchKernel, first, n, split, draws, out0, out1, records int, at scratchAt, dependent bool) error {
	sc := &s.scratch
	lg := pl.logits
	for done := 0; done < n; done += maxRowsPerLaunch {
		chunk := min(n-done, maxRowsPerLaunch)
		a := s.args.Reset()
		a.BufferAt(lg.Data, lg.Offset).
			BufferAt(sc.params.buf, (first+done)*RowParamsSize).
			BufferAt(sc.results.buf, out0).
			BufferAt(sc.results.buf, out1).
			BufferAt(sc.partials.buf, at.partials).
			BufferAt(sc.counters.buf, at.counters).
			U64(uint64(pl.stride)).
			U32(uint32(lg.Vocab))
		if records < 0 {
			a.Buffer(sc.unused.buf)
		} else {
			a.BufferAt(sc.results.buf, records)
		}
		s.procs.appendArgs(a, sc.unused.buf)
		s.appendBitmask(a, pl)
		if pl.shard != nil {
			a.U32(uint32(pl.shard.Offset)).BufferAt(sc.results.buf, pl.out.keys())
		} else {
			a.U32(0).Buffer(sc.unused.buf)
		}
		if pl.draft != nil {
			a.BufferAt(pl.draft, pl.draftOff)
		} else {
			a.Buffer(sc.unused.buf)
		}
		grid := runtime.Dim3{X: split, Y: chunk, Z: draws}
		block := runtime.Dim3{X: lk.block, Y: 1, Z: 1}
		if err := s.launchAfter(lk.kernel, grid, block, a, dependent && done == 0); err != nil {
			return fmt.Errorf("gumbel/sampler: launching %s over %d rows x %d blocks x %d draws: %w", lk.kernel.Name(), chunk, split, draws, err)
		}
	}
	return nil
}

// launchAfter queues k on the sampler's stream; with dependent, through the stream's
// dependent launch where it has one, for a kernel that waits for the one before it on the
// device (gb_grid_wait) and so may start while that one ends.
func (s *Sampler) launchAfter(k runtime.Kernel, grid, block runtime.Dim3, a *runtime.Args, dependent bool) error {
	if dependent && s.dep != nil {
		return s.dep.LaunchDependent(k, grid, block, a)
	}
	return s.stream.Launch(k, grid, block, a)
}

// decode turns the outputs in results (laid out by out) into res.
func (s *Sampler) decode(results []byte, out outLayout, params []Params, mode drawMode, vocab int, res *Result) {
	le := binary.LittleEndian
	draws := out.draws
	for i, p := range params {
		if res.Errs[i] != nil {
			continue
		}
		var rowErr error
		for z := range draws {
			o := i*draws + z
			var token int32
			var err error
			if mode == drawDistinct {
				j := 4 * (i*MaxTopLogprobs + z)
				token = int32(le.Uint32(results[out.distinctTokens()+j:]))
				value := f32At(results, out.distinctValues()+j)
				token, err = distinctResult(i, z, token, value, vocab)
				if err == nil && p.Logprobs {
					res.Logprobs[o].Processed = value
				}
			} else {
				token = int32(le.Uint32(results[out.tokens()+4*o:]))
				status := le.Uint32(results[out.status()+4*o:])
				token, err = rowResult(i, token, status, vocab)
				if err == nil && p.Logprobs {
					r := out.logprobs() + 16*o
					res.Logprobs[o] = recordAt(results, r)
				}
			}
			res.Tokens[o] = token
			if err != nil && rowErr == nil {
				rowErr = err
			}
		}
		if rowErr != nil {
			res.failRow(i, rowErr)
			continue
		}
		if p.TopLogprobs > 0 {
			decodeTop(results, out, i, p.TopLogprobs, vocab, &res.Top[i])
		}
	}
}

// decodeTop fills top from row i's plain topn list.
func decodeTop(results []byte, out outLayout, i, n, vocab int, top *TopLogprobs) {
	le := binary.LittleEndian
	top.Count = 0
	for j := range n {
		off := 4 * (i*MaxTopLogprobs + j)
		token := int32(le.Uint32(results[out.topTokens()+off:]))
		value := math.Float32frombits(le.Uint32(results[out.topValues()+off:]))
		if token < 0 || int(token) >= vocab || value != value {
			// Slots past the row's finite logits hold -1; the row's own status
			// already reported NaN and +Inf.
			break
		}
		top.Tokens[j], top.Logprobs[j] = token, value
		top.Count++
	}
}

// failRow marks row i failed: every draw -1, every record NaN, no top list.
func (res *Result) failRow(i int, err error) {
	res.Errs[i] = err
	d := res.Draws
	for o := i * d; o < (i+1)*d; o++ {
		res.Tokens[o] = -1
		if len(res.Logprobs) > 0 {
			res.Logprobs[o] = nanLogprob
		}
	}
	if len(res.Top) > 0 {
		res.Top[i].Count = 0
	}
}

var nanLogprob = Logprob{
	Raw: float32(math.NaN()), Processed: float32(math.NaN()),
	RawLSE: float32(math.NaN()), ProcessedLSE: float32(math.NaN()),
}

// f32At reads the float32 at byte off of a results mirror.
func f32At(results []byte, off int) float32 {
	return math.Float32frombits(binary.LittleEndian.Uint32(results[off:]))
}

// recordAt reads the log-probability record (raw, processed, raw LSE, processed LSE) at
// byte off of a results mirror.
func recordAt(results []byte, off int) Logprob {
	return Logprob{Raw: f32At(results, off), Processed: f32At(results, off+4),
		RawLSE: f32At(results, off+8), ProcessedLSE: f32At(results, off+12)}
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
		return -1, kernelRejected(row)
	case uint32(abi.StatusExact):
		// Only a shard leaves it: the sampler finishes such draws everywhere else.
		return -1, fmt.Errorf("row %d: %w: its scores reach %v in magnitude, where only the exact comparison over the whole row can draw its token", row, ErrShard, abi.ExactLimit)
	}
	return -1, fmt.Errorf("row %d: unknown kernel status %d: %w", row, status, ErrDevice)
}

// distinctResult turns entry j of a row's perturbed topn list into its token and error:
// NaN with token -1 marks a row with NaN or +Inf, with token abi.TopNRefused one the
// kernel refused; -1 otherwise a slot past the row's finite processed logits. A token
// with a NaN value is a draw whose log-probability overflowed (x'/T beyond float32).
func distinctResult(row, j int, token int32, value float32, vocab int) (int32, error) {
	switch {
	case value != value && token == abi.TopNRefused:
		return -1, kernelRejected(row)
	case value != value && token == -1:
		return -1, fmt.Errorf("row %d: %w", row, ErrNonFiniteLogit)
	case token == -1 && j == 0:
		return -1, fmt.Errorf("row %d: %w", row, ErrNoFiniteLogit)
	case token == -1:
		return -1, fmt.Errorf("row %d: %d distinct draws asked, %d tokens have a finite logit: %w", row, j+1, j, ErrTooFewTokens)
	case token < 0 || int(token) >= vocab:
		return -1, fmt.Errorf("row %d: token %d outside the vocabulary of %d: %w", row, token, vocab, ErrDevice)
	}
	return token, nil
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

// resize makes res hold rows rows of draws tokens, reallocating a slice only when it is
// too short. Tokens start at -1; the log-probability records (when any row asked) at
// NaN; top lists (when any row asked) empty.
func (res *Result) resize(rows, draws int, logprobs, top bool) {
	res.Draws = draws
	res.Tokens = resized(res.Tokens, rows*draws)
	res.Errs = resized(res.Errs, rows)
	res.Routes = resized(res.Routes, rows)
	for i := range res.Tokens {
		res.Tokens[i] = -1
	}
	res.Logprobs = res.Logprobs[:0]
	if logprobs {
		res.Logprobs = resized(res.Logprobs, rows*draws)
		for i := range res.Logprobs {
			res.Logprobs[i] = nanLogprob
		}
	}
	res.Top = res.Top[:0]
	if top {
		res.Top = resized(res.Top, rows)
		for i := range res.Top {
			res.Top[i].Count = 0
		}
	}
}

func resized[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}
