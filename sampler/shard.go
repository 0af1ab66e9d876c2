package sampler

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"unsafe"

	"github.com/gumbel-go/gumbel/collective"
	"github.com/gumbel-go/gumbel/kernelsrc/abi"
)

// ErrShard: a vocabulary-shard call that cannot be served: a Shard whose offset, size or
// communicator does not fit (a call error), or a row that asks for what a shard cannot
// give yet (a row error): filters, the categorical route, log-probabilities, token
// tracking, several draws, or no seed and no request id to key its noise on every rank.
var ErrShard = errors.New("gumbel/sampler: not served on a vocabulary shard")

// Shard places a call's logits in a vocabulary split across ranks (tensor parallelism
// splits the LM head's output by vocabulary): the call's Vocab columns are global tokens
// [Offset, Offset+Vocab) of a vocabulary of Global tokens, and Comm joins the ranks that
// hold the other shards.
type Shard struct {
	// Offset is the global index of the shard's first token, a multiple of 4 (so that
	// the random stream's groups of four tokens never straddle two shards; engines pad
	// shards to multiples of 64).
	Offset int
	// Global is V, the whole vocabulary.
	Global int
	// Comm is this rank's communicator: collective.NewLocal for shards in one process,
	// or NCCL (package collective/nccl) across GPUs.
	Comm collective.Comm
}

// SampleShard samples rows whose logits are one vocabulary shard. Every rank of sh.Comm
// calls it with the same params (temperatures, seeds, steps, in the same order) on its
// own shard; each rank draws the winner of its shard with the noise of the global
// indices, one all-reduce with max over 8 bytes per row merges the winners, and every
// rank gets the tokens (global indices) that Sample would give over the whole
// vocabulary, bit for bit, for any number of shards and any split.
//
// Greedy and Gumbel-max rows are served, with their log-probabilities on request
// (Params.Logprobs: each rank scores its shard at the merged token, and one more
// all-reduce adds up the shards' log-normalisers, 8·(ranks+1) bytes per row); a row
// with top-k, top-p or min-p, on the categorical route (Options.Gumbel off), with
// TopLogprobs, tracked by TrackTokens, or without Seed and RequestID gets ErrShard, on
// every rank alike. The
// logit processors apply with the shard's own rows (SetLogitBias and the masks are
// indexed by the shard's local token ids; Params.Bitmask is ceil(Vocab/32) words of the
// shard). A row that fails on any rank fails on all of them. Sampler seeds must be the
// same on every rank for rows keyed by RequestID.
//
// Every rank must make the same calls in the same order: a call that returns an error
// before the merge (a bad Shard or shape) on one rank leaves the others waiting in it.
// Relaunch after SampleShard repeats the call's last kernels only (the log-probability
// pass's, when a row asked for them), never the merge.
func (s *Sampler) SampleShard(logits Logits, params []Params, sh Shard, res *Result) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if err := checkShard(sh, logits.Vocab); err != nil {
		return err
	}
	s.shard = sh // in the sampler, not escaping to the heap per call
	return s.sampleCall(logits, params, 1, drawReplace, &s.shard, res)
}

// checkShard checks a call's shard against its local vocabulary.
func checkShard(sh Shard, vocab int) error {
	switch {
	case sh.Comm == nil:
		return fmt.Errorf("%w: Shard.Comm is nil", ErrShard)
	case sh.Offset < 0 || sh.Offset%4 != 0:
		return fmt.Errorf("%w: Shard.Offset %d is not a non-negative multiple of 4", ErrShard, sh.Offset)
	case sh.Global > abi.MaxVocab || sh.Offset+vocab > sh.Global:
		return fmt.Errorf("%w: shard [%d, %d) does not fit a vocabulary of %d (at most %d)", ErrShard,
			sh.Offset, sh.Offset+vocab, sh.Global, abi.MaxVocab)
	}
	return nil
}

// checkShardRow is the row error of what a shard cannot serve.
func (s *Sampler) checkShardRow(i int, p Params, r Route) error {
	var why string
	switch {
	case r != RouteGreedy && r != RouteGumbel:
		why = fmt.Sprintf("route %v (filters and the categorical route are not merged across shards)", r)
	case p.TopLogprobs > 0:
		why = "top log-probabilities"
	case s.procs.flags(i, p)&abi.FlagRecord != 0:
		why = "a tracked row (TrackTokens)"
	case r == RouteGumbel && !named(p):
		why = "a sampled row without Seed or RequestID, which every rank needs to draw the same noise"
	default:
		return nil
	}
	return fmt.Errorf("row %d: %s: %w", i, why, ErrShard)
}

// stageShardKeys queues the upload of every slot's initial shard key: 0 for the rows
// the kernel will write, a failed key for rows with an error here, so that they fail on
// every rank. results is the host mirror of the results scratch.
func (s *Sampler) stageShardKeys(results []byte, out outLayout, errs []error) error {
	keys := results[out.keys() : out.keys()+8*out.slots()]
	for i := range out.rows {
		k := uint64(0)
		if errs[i] != nil {
			k = abi.ShardKey(0, abi.StatusBadParams)
		}
		for z := range out.draws {
			binary.LittleEndian.PutUint64(keys[8*(i*out.draws+z):], k)
		}
	}
	if err := s.stream.CopyToDevice(s.scratch.results.buf, out.keys(), keys); err != nil {
		return fmt.Errorf("gumbel/sampler: staging the shard keys: %w", err)
	}
	return nil
}

// decodeShard turns the merged shard keys into res: the rows without an error of their
// own here get the token or the error their merged key names.
func decodeShard(results []byte, out outLayout, global int, res *Result) {
	for i := range out.rows {
		if res.Errs[i] != nil {
			continue
		}
		for z := range out.draws {
			o := i*out.draws + z
			tok, st := abi.ShardResult(binary.LittleEndian.Uint64(results[out.keys()+8*o:]))
			token, err := rowResult(i, tok, uint32(st), global)
			if err != nil {
				res.failRow(i, err)
				break
			}
			res.Tokens[o] = token
		}
	}
}

// shardLogprobs fills the log-probability records of a SampleShard call whose tokens are
// merged: this rank scores its shard at each row's token (Score's pass: its shard's raw
// and processed log-normalisers, and the token's values where the token is its own),
// and one all-reduce (sum) over rows·(2·ranks + 2) float32 words gives every rank every
// shard's normalisers, in its own slot of each row, and the owner's values. The records
// agree with the whole vocabulary's to float32 rounding (the values are the shard's
// log-probability plus its normaliser).
func (s *Sampler) shardLogprobs(lg Logits, params []Params, sh *Shard, res *Result) error {
	rows, ranks, me := lg.Rows, sh.Comm.Size(), sh.Comm.Rank()
	s.shardParams = resized(s.shardParams, rows)
	s.shardTokens = resized(s.shardTokens, rows)
	for i, p := range params {
		p.TopLogprobs = 0
		s.shardParams[i], s.shardTokens[i] = p, 0
		if t := int(res.Tokens[i]); res.Errs[i] == nil && t >= sh.Offset && t < sh.Offset+lg.Vocab {
			s.shardTokens[i] = int32(t - sh.Offset)
		}
	}
	if err := s.score(lg, s.shardParams, s.shardTokens, &s.shardScores); err != nil {
		return fmt.Errorf("gumbel/sampler: scoring the shard for log-probabilities: %w", err)
	}
	w := 2*ranks + 2
	host, err := s.scratch.mergeHost.bytes(s.dev, 4*rows*w)
	if err != nil {
		return err
	}
	words := unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(host))), rows*w)
	clear(words)
	nan := float32(math.NaN())
	for i := range rows {
		row := words[i*w : (i+1)*w]
		lp, err := s.shardScores.Logprobs[i], s.shardScores.Errs[i]
		switch {
		case err == nil:
			row[2*me], row[2*me+1] = lp.RawLSE, lp.ProcessedLSE
			if t := int(res.Tokens[i]); res.Errs[i] == nil && t >= sh.Offset && t < sh.Offset+lg.Vocab {
				row[2*ranks], row[2*ranks+1] = float32(lp.Raw+lp.RawLSE), float32(lp.Processed+lp.ProcessedLSE)
			}
		case errors.Is(err, ErrNoFiniteLogit):
			// A shard without a finite logit adds nothing to the normalisers.
			row[2*me], row[2*me+1] = float32(math.Inf(-1)), float32(math.Inf(-1))
		default:
			row[2*me], row[2*me+1] = nan, nan
		}
	}
	if err := s.mergeSums(sh.Comm, host, rows*w); err != nil {
		return err
	}
	for i, p := range params {
		if !p.Logprobs || res.Errs[i] != nil {
			continue
		}
		row := words[i*w : (i+1)*w]
		raw, proc := logSumExp(row[:2*ranks], 0), logSumExp(row[:2*ranks], 1)
		if math.IsNaN(raw) || math.IsNaN(proc) {
			res.failRow(i, fmt.Errorf("row %d: a shard could not score the row for its log-probabilities: %w", i, ErrShard))
			continue
		}
		res.Logprobs[i] = Logprob{
			Raw: float32(float64(row[2*ranks]) - raw), Processed: float32(float64(row[2*ranks+1]) - proc),
			RawLSE: float32(raw), ProcessedLSE: float32(proc),
		}
	}
	return nil
}

// logSumExp is log Σ exp over pairs[k] for k = set, set+2, ... (NaN when one is NaN).
func logSumExp(pairs []float32, set int) float64 {
	m := math.Inf(-1)
	for k := set; k < len(pairs); k += 2 {
		v := float64(pairs[k])
		if math.IsNaN(v) {
			return v
		}
		m = math.Max(m, v)
	}
	if math.IsInf(m, -1) {
		return m
	}
	sum := 0.0
	for k := set; k < len(pairs); k += 2 {
		sum += math.Exp(float64(pairs[k]) - m)
	}
	return m + math.Log(sum)
}

// mergeSums adds up count float32 words of host over the ranks of c, in place: on the
// host where the ranks share it, otherwise through the device's merge scratch.
func (s *Sampler) mergeSums(c collective.Comm, host []byte, count int) error {
	if hr, ok := c.(collective.HostReducer); ok {
		if err := hr.AllReduceHost(host, count, collective.Float32, collective.OpSum); err != nil {
			return fmt.Errorf("gumbel/sampler: merging the shards' log-normalisers: %w", err)
		}
		return nil
	}
	if _, err := s.scratch.merge.ensure(s.dev, len(host)); err != nil {
		return err
	}
	buf := s.scratch.merge.buf
	if err := s.stream.CopyToDevice(buf, 0, host); err != nil {
		return fmt.Errorf("gumbel/sampler: staging the shard's log-normalisers: %w", err)
	}
	if err := c.AllReduce(buf, 0, count, collective.Float32, collective.OpSum, s.stream); err != nil {
		return fmt.Errorf("gumbel/sampler: merging the shards' log-normalisers: %w", err)
	}
	if err := s.stream.CopyToHost(host, buf, 0); err != nil {
		return fmt.Errorf("gumbel/sampler: copying the merged log-normalisers back: %w", err)
	}
	if err := s.stream.Synchronize(); err != nil {
		return fmt.Errorf("gumbel/sampler: waiting for the log-normaliser merge: %w", err)
	}
	return nil
}
