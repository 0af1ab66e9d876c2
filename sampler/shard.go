package sampler

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"unsafe"

	"github.com/gumbel-go/gumbel/collective"
	"github.com/gumbel-go/gumbel/half"
	"github.com/gumbel-go/gumbel/kernelsrc/abi"
)

// ErrShard: a vocabulary-shard call that cannot be served: a Shard whose offset, size or
// communicator does not fit (a call error), or a row that asks for what a shard cannot
// give yet (a row error): the categorical route, token tracking, a score beyond the
// exact-comparison limit, or no seed and no request id to key its noise on every rank.
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
// Greedy, Gumbel-max and filtered rows are served. A filtered row (top-k, top-p, min-p)
// takes rounds (kernelsrc/ABI.md, "shard_select"): a greedy draw whose merged key gives
// its largest logit, then one round per 8-bit digit of top-k's and top-p's thresholds
// (at most four each, usually fewer), each an all-reduce (sum) of a histogram of 256
// counts and 256 masses, 4 KB per row, and a last round that draws each shard's winner
// over the kept set and merges it by a maximum (8 bytes per row). The thresholds are
// integer selections over exact sums, so the token is the whole vocabulary's on every
// route, bit for bit. Filtered rows route by the whole vocabulary: top-k at or above
// Global is off on every rank. Each row has its log-probabilities on request
// (Params.Logprobs: each rank scores its shard at the merged token, and one more
// all-reduce adds up the shards' log-normalisers, 8·(ranks+1) bytes per row) and their
// top log-probabilities (Params.TopLogprobs: each rank lists its shard's top N, and one
// more all-reduce hands every rank every list, 320·ranks bytes per row; the merged list
// is the whole vocabulary's, its values agree to float32 rounding, and float32 logits of
// different shards within 16 units in the last place of each other count as equal and
// go in index order). A row on the categorical route (Options.Gumbel off), tracked by
// TrackTokens, or sampled without Seed and RequestID gets ErrShard, on every rank alike.
// The logit processors apply with the shard's own rows (SetLogitBias and the masks are
// indexed by the shard's local token ids; Params.Bitmask is ceil(Vocab/32) words of the
// shard). A row that fails on any rank fails on all of them. Sampler seeds must be the
// same on every rank for rows keyed by RequestID.
//
// Every rank must make the same calls in the same order: a call that returns an error
// before the merge (a bad Shard or shape) on one rank leaves the others waiting in it.
// Relaunch after SampleShard repeats the call's first launches, or the log-probability
// pass's when a row asked for them; never a merge nor a filtered row's rounds.
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
	case r == RouteCategorical:
		why = "the categorical route (its inverse CDF is not merged across shards)"
	case s.procs.flags(i, p)&abi.FlagRecord != 0:
		why = "a tracked row (TrackTokens)"
	case r != RouteGreedy && !named(p):
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

// shardLogprobs fills the log-probability records and top lists of a SampleShard call
// whose tokens are merged: this rank scores its shard at each row's token (Score's pass:
// its shard's raw and processed log-normalisers, and the token's values where the token
// is its own), and one all-reduce (sum) over rows·(2·ranks + 2) float32 words gives every
// rank every shard's normalisers, in its own slot of each row, and the owner's values.
// The records agree with the whole vocabulary's to float32 rounding (the values are the
// shard's log-probability plus its normaliser). res.Top holds this shard's lists in
// local tokens on entry; shardTop merges them.
func (s *Sampler) shardLogprobs(lg Logits, params []Params, sh *Shard, res *Result) error {
	rows, ranks, me := lg.Rows, sh.Comm.Size(), sh.Comm.Rank()
	s.shardParams = resized(s.shardParams, rows)
	s.shardTokens = resized(s.shardTokens, rows)
	for i, p := range params {
		// Score takes no filters: a filtered row's owner reports x'·invT, which the
		// kept law (s.shardKept) turns into its record.
		p.TopLogprobs, p.TopK, p.TopP, p.MinP = 0, 0, 0, 0
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
	// Before the merge overwrites them: this shard's raw normalisers, which turn its top
	// lists back into logits.
	s.shardLSE = resized(s.shardLSE, rows)
	for i := range rows {
		s.shardLSE[i] = float64(words[i*w+2*me])
	}
	top := s.shardTopKeys(lg, params, sh, res)
	if err := s.mergeShards(sh.Comm, host, rows*w, collective.Float32, collective.OpSum, "log-normalisers"); err != nil {
		return err
	}
	for i, p := range params {
		if (!p.Logprobs && p.TopLogprobs == 0) || res.Errs[i] != nil {
			continue
		}
		row := words[i*w : (i+1)*w]
		raw, proc := logSumExp(row[:2*ranks], 0), logSumExp(row[:2*ranks], 1)
		if math.IsNaN(raw) || math.IsNaN(proc) {
			res.failRow(i, fmt.Errorf("row %d: a shard could not score the row for its log-probabilities: %w", i, ErrShard))
			continue
		}
		s.shardLSE[i] = raw
		if p.Logprobs {
			if k := s.shardKept[i]; k.on {
				// A filtered row's processed law is its kept set renormalised.
				proc = float64(k.m)*float64(k.invT) + k.logKept
			}
			res.Logprobs[i] = Logprob{
				Raw: float32(float64(row[2*ranks]) - raw), Processed: float32(float64(row[2*ranks+1]) - proc),
				RawLSE: float32(raw), ProcessedLSE: float32(proc),
			}
		}
	}
	if !top {
		return nil
	}
	return s.mergeShardTop(params, sh, res)
}

// shardWords is the uint64 words of one row's top-list candidates in the exchange: two
// per entry (the ordering key and the logit) for MaxTopLogprobs entries of each rank.
func shardWords(ranks int) int { return 2 * MaxTopLogprobs * ranks }

// shardTopKeys writes this rank's top-list candidates into s.shardTop, in its own slots
// of each row (zero elsewhere, so that a maximum over the ranks hands every rank every
// list), and reports whether any row has a list. An entry is its ordering key
// (abi.Pack(q, global token), q the logit rounded to the logits' precision,
// float32 ones to 16 units in the last place) and its logit as a float64, both from the
// shard's log-probability plus its raw normaliser (s.shardLSE).
func (s *Sampler) shardTopKeys(lg Logits, params []Params, sh *Shard, res *Result) bool {
	me, w := sh.Comm.Rank(), shardWords(sh.Comm.Size())
	s.shardTop = resized(s.shardTop, lg.Rows*w)
	clear(s.shardTop)
	some := false
	for i, p := range params {
		if p.TopLogprobs == 0 || res.Errs[i] != nil {
			continue
		}
		some = true
		t := &res.Top[i]
		slot := s.shardTop[i*w+me*2*MaxTopLogprobs : i*w+(me+1)*2*MaxTopLogprobs]
		for j := range t.Count {
			x := float64(t.Logprobs[j]) + s.shardLSE[i]
			q := roundLogit(x, lg.DType)
			slot[2*j] = abi.Pack(q, uint32(int(t.Tokens[j])+sh.Offset))
			slot[2*j+1] = math.Float64bits(x)
		}
	}
	return some
}

// mergeShardTop merges the ranks' top lists (s.shardTop, filled by shardTopKeys) with
// one all-reduce (max) and writes each row's top N into res.Top, valued against the
// merged raw normaliser (s.shardLSE).
func (s *Sampler) mergeShardTop(params []Params, sh *Shard, res *Result) error {
	rows, w := len(params), shardWords(sh.Comm.Size())
	host, err := s.scratch.mergeHost.bytes(s.dev, 8*rows*w)
	if err != nil {
		return err
	}
	words := unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(host))), rows*w)
	copy(words, s.shardTop[:rows*w])
	if err := s.mergeShards(sh.Comm, host, rows*w, collective.Uint64, collective.OpMax, "top log-probabilities"); err != nil {
		return err
	}
	for i, p := range params {
		if p.TopLogprobs == 0 || res.Errs[i] != nil {
			continue
		}
		entries := words[i*w : (i+1)*w]
		t := &res.Top[i]
		t.Count = 0
		// Selection of the largest keys: at most 20 of ranks·20 entries.
		for t.Count < p.TopLogprobs {
			best := -1
			for e := 0; e < len(entries); e += 2 {
				if entries[e] != 0 && (best < 0 || entries[e] > entries[best]) {
					best = e
				}
			}
			if best < 0 {
				break // fewer finite logits than asked for
			}
			x := math.Float64frombits(entries[best+1])
			t.Tokens[t.Count] = int32(^uint32(entries[best]))
			t.Logprobs[t.Count] = float32(x - s.shardLSE[i])
			t.Count++
			entries[best] = 0
		}
	}
	return nil
}

// roundLogit rounds a logit recovered from a log-probability (off by a few units in the
// last place of float32) to what the logits can hold, so that equal logits of different
// shards compare equal: the nearest bfloat16 or float16, and for float32 the nearest
// multiple of 16 units in the last place.
func roundLogit(x float64, d DType) float32 {
	f := float32(x)
	switch d {
	case BFloat16:
		return half.BFloat16ToFloat32(half.BFloat16(f))
	case Float16:
		return half.Float16ToFloat32(half.Float16(f))
	}
	b := math.Float32bits(f)
	if r := (b&0x7FFFFFFF + 8) &^ 15; r < 0x7F800000 {
		b = b&0x80000000 | r
	}
	return math.Float32frombits(b)
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

// mergeShards reduces count words of type dt in host over the ranks of c with op, in
// place: on the host where the ranks share it, otherwise through the device's merge
// scratch. what names the words in errors.
func (s *Sampler) mergeShards(c collective.Comm, host []byte, count int, dt collective.DType, op collective.Op, what string) error {
	if hr, ok := c.(collective.HostReducer); ok {
		if err := hr.AllReduceHost(host, count, dt, op); err != nil {
			return fmt.Errorf("gumbel/sampler: merging the shards' %s: %w", what, err)
		}
		return nil
	}
	if _, err := s.scratch.merge.ensure(s.dev, len(host)); err != nil {
		return err
	}
	buf := s.scratch.merge.buf
	if err := s.stream.CopyToDevice(buf, 0, host); err != nil {
		return fmt.Errorf("gumbel/sampler: staging the shard's %s: %w", what, err)
	}
	if err := c.AllReduce(buf, 0, count, dt, op, s.stream); err != nil {
		return fmt.Errorf("gumbel/sampler: merging the shards' %s: %w", what, err)
	}
	if err := s.stream.CopyToHost(host, buf, 0); err != nil {
		return fmt.Errorf("gumbel/sampler: copying the merged %s back: %w", what, err)
	}
	if err := s.stream.Synchronize(); err != nil {
		return fmt.Errorf("gumbel/sampler: waiting for the merge of the %s: %w", what, err)
	}
	return nil
}
