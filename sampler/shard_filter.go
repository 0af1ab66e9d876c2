package sampler

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"unsafe"

	"github.com/gumbel-go/gumbel/collective"
	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/gumbel-go/gumbel/runtime"
)

// selectPhase is where a filtered shard row stands in its rounds.
type selectPhase uint8

const (
	selectTopK selectPhase = iota // choosing Kk's digits on counts
	selectTopP                    // choosing Kp's digits on mass
	selectDraw                    // the draw over the kept set
	selectDone
)

// shardSelectRow is one filtered row of a SampleShard call during its rounds
// (kernelsrc/ABI.md, "shard_select"): the thresholds found so far and the digit being
// chosen. Every rank holds the same values, since they come from merged histograms.
type shardSelectRow struct {
	row    int
	m      float32 // the row's largest processed logit, over every shard
	topK   uint64  // k, or 0 when top-k is off
	topP   float32 // p, or 0 when top-p is off
	phase  selectPhase
	prefix uint32
	shift  uint8
	above  uint64 // count (top-k) or mass (top-p) of the keys above the prefix's range
	target uint64 // top-p's target mass, from its first round's histogram
	kk, kp uint32
	// key is the merged winner of the draw and kept S_kept, the kept set's fixed-point
	// mass, for the record.
	key  uint64
	kept uint64
}

// query is the row's shard_select query for its next round.
func (r *shardSelectRow) query(f uint8) abi.SelectQuery {
	q := abi.SelectQuery{M: r.m, F: f, Prefix: r.prefix, Shift: r.shift}
	switch r.phase {
	case selectTopP:
		q.Floor = r.kk
	case selectDraw:
		q = abi.SelectQuery{M: r.m, F: f, Shift: 24, Floor: max(r.kk, r.kp), MinP: true, Draw: true}
	}
	return q
}

// advance takes the row's merged histogram (counts, then masses) and key word of the
// round it was in, and moves it to its next round.
func (r *shardSelectRow) advance(counts, masses []uint64, key uint64) {
	switch r.phase {
	case selectTopK:
		d := abi.SelectDigit(counts, counts, r.topK, &r.above)
		low := r.prefix | d<<r.shift
		// The bin holds exactly the elements still needed: its lowest key keeps the
		// same elements as Kk does.
		if r.shift == 0 || r.above+counts[d] == r.topK {
			r.kk = low
			r.next()
			return
		}
		r.prefix, r.shift = low, r.shift-8
	case selectTopP:
		if r.shift == 24 { // the first round: its masses add up to Z, top-k's set's
			var z uint64
			for _, q := range masses {
				z += q
			}
			r.target = abi.TopPTarget(z, r.topP)
		}
		d := abi.SelectDigit(counts, masses, r.target, &r.above)
		low := r.prefix | d<<r.shift
		// A bin of one element holds Kp itself.
		if r.shift == 0 || counts[d] == 1 {
			r.kp = low
			r.phase = selectDraw
			return
		}
		r.prefix, r.shift = low, r.shift-8
	case selectDraw:
		for _, q := range masses {
			r.kept += q
		}
		r.key = key
		r.phase = selectDone
	}
}

// next leaves top-k for top-p, or for the draw.
func (r *shardSelectRow) next() {
	r.prefix, r.shift, r.above = 0, 24, 0
	r.phase = selectDraw
	if r.topP != 0 {
		r.phase = selectTopP
	}
}

// shardFilter draws the filtered rows of a SampleShard call, whose first pass drew them
// greedily so that their merged keys hold each row's largest processed logit: rounds of
// shard_select find top-k's and top-p's thresholds digit by digit from histograms
// summed over the ranks, and a last round draws each shard's winner over the kept set,
// merged by a maximum. The tokens are Sample's over the whole vocabulary.
func (s *Sampler) shardFilter(pl *plan, params []Params, keys []byte, res *Result) error {
	sh := pl.shard
	s.selRows = s.selRows[:0]
	s.shardKept = resized(s.shardKept, len(params))
	clear(s.shardKept)
	for i, p := range params {
		if res.Errs[i] != nil || res.Routes[i] != RouteFiltered {
			continue
		}
		key := binary.LittleEndian.Uint64(keys[8*i:])
		r := shardSelectRow{row: i, m: abi.OrderKeyValue(uint32(key >> 32)), shift: 24, phase: selectDraw}
		if topKOn(p.TopK, sh.Global) {
			r.topK, r.phase = uint64(p.TopK), selectTopK
		}
		if topPOn(p.TopP) {
			r.topP = p.TopP
			if r.phase == selectDraw {
				r.phase = selectTopP
			}
		}
		s.selRows = append(s.selRows, r)
	}
	if len(s.selRows) == 0 {
		return nil
	}
	if s.selectErr != nil {
		for _, r := range s.selRows {
			res.failRow(r.row, s.selectErr)
		}
		return nil
	}
	f := uint8(63 - bits.Len32(uint32(sh.Global)))
	s.dirty = true // until the rounds are done: a failed one leaves work queued
	for {
		n, err := s.selectRound(pl, params, f)
		if err != nil {
			return err
		}
		if n == 0 {
			break
		}
	}
	s.dirty = false
	for _, r := range s.selRows {
		tok, st := abi.ShardResult(r.key)
		if st == abi.StatusOK && abi.Inexact(r.key) {
			st = abi.StatusExact
		}
		token, err := rowResult(r.row, tok, uint32(st), sh.Global)
		if err != nil {
			res.failRow(r.row, err)
			continue
		}
		res.Tokens[r.row] = token
		p := params[r.row]
		s.shardKept[r.row] = keptLaw{on: true, m: r.m, invT: 1 / p.Temperature,
			logKept: math.Log(float64(r.kept)) - float64(f)*math.Ln2}
	}
	return nil
}

// selectRound runs one round of shard_select over the rows still selecting, merges the
// ranks' histograms and keys, and advances the rows. It returns how many rows took part.
func (s *Sampler) selectRound(pl *plan, params []Params, f uint8) (int, error) {
	lg, sh, sc := pl.logits, pl.shard, &s.scratch
	n := 0
	for _, r := range s.selRows {
		if r.phase != selectDone {
			n++
		}
	}
	if n == 0 {
		return 0, nil
	}
	lay := abi.Launch{Rows: n, Split: 1, Draws: 1}
	words := lay.SelectWords()
	host, err := sc.selHost.bytes(s.dev, 8*words+n*RowParamsSize)
	if err != nil {
		return 0, err
	}
	w := unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(host))), words)
	clear(w)
	rp := host[8*words:]
	y := 0
	draw := false
	for _, r := range s.selRows {
		if r.phase == selectDone {
			continue
		}
		p := params[r.row]
		w[lay.SelectQueryWord(y)], w[lay.SelectQueryWord(y)+1] = r.query(f).Words()
		draw = draw || r.phase == selectDraw
		putRowParams(rp[y*RowParamsSize:], r.row, RouteFiltered, p, lg.Vocab, s.seedOf(p),
			s.procs.flags(r.row, p)|abi.FlagShard, 0, s.maskRows[r.row])
		y++
	}
	if _, err := sc.sel.ensure(s.dev, len(host)); err != nil {
		return 0, err
	}
	if err := s.stream.CopyToDevice(sc.sel.buf, 0, host); err != nil {
		return 0, fmt.Errorf("gumbel/sampler: staging the shard selection: %w", err)
	}
	lk := s.kernels[pl.logits.DType][kernelSelect]
	a := s.args.Reset()
	a.BufferAt(lg.Data, lg.Offset).
		BufferAt(sc.sel.buf, 8*words).
		Buffer(sc.unused.buf).
		Buffer(sc.unused.buf).
		Buffer(sc.unused.buf).
		Buffer(sc.unused.buf).
		U64(uint64(pl.stride)).
		U32(uint32(lg.Vocab)).
		Buffer(sc.unused.buf)
	s.procs.appendArgs(a, sc.unused.buf)
	s.appendBitmask(a, pl)
	a.U32(uint32(sh.Offset)).Buffer(sc.sel.buf).Buffer(sc.unused.buf)
	grid := runtime.Dim3{X: s.blocksPerRow(n, lg.Vocab), Y: n, Z: 1}
	if err := s.stream.Launch(lk.kernel, grid, runtime.Dim3{X: lk.block, Y: 1, Z: 1}, a); err != nil {
		return 0, fmt.Errorf("gumbel/sampler: launching %s over %d rows: %w", lk.kernel.Name(), n, err)
	}
	hist := host[8*lay.SelectHistWord(0, 0) : 8*lay.SelectKeyWord(0)]
	if err := s.mergeSelect(sh.Comm, hist, 8*lay.SelectHistWord(0, 0), collective.OpSum, "selection histograms"); err != nil {
		return 0, err
	}
	if draw {
		k := host[8*lay.SelectKeyWord(0) : 8*words]
		if err := s.mergeSelect(sh.Comm, k, 8*lay.SelectKeyWord(0), collective.OpMax, "kept-set winners"); err != nil {
			return 0, err
		}
	}
	y = 0
	for i := range s.selRows {
		r := &s.selRows[i]
		if r.phase == selectDone {
			continue
		}
		h := w[lay.SelectHistWord(y, 0):][:2*abi.SelectBins]
		r.advance(h[:abi.SelectBins], h[abi.SelectBins:], w[lay.SelectKeyWord(y)])
		y++
	}
	return n, nil
}

// mergeSelect reduces the uint64 words of the selection scratch from byte off (host,
// their host mirror) over the ranks with op and leaves the result in host: on the host
// where the ranks share it, otherwise on the device and copied back.
func (s *Sampler) mergeSelect(c collective.Comm, host []byte, off int, op collective.Op, what string) error {
	buf := s.scratch.sel.buf
	count := len(host) / 8
	if hr, ok := c.(collective.HostReducer); ok {
		if err := s.stream.CopyToHost(host, buf, off); err != nil {
			return fmt.Errorf("gumbel/sampler: copying the shard's %s back: %w", what, err)
		}
		if err := s.stream.Synchronize(); err != nil {
			return fmt.Errorf("gumbel/sampler: waiting for the shard's %s: %w", what, err)
		}
		if err := hr.AllReduceHost(host, count, collective.Uint64, op); err != nil {
			return fmt.Errorf("gumbel/sampler: merging the shards' %s: %w", what, err)
		}
		return nil
	}
	if err := c.AllReduce(buf, off, count, collective.Uint64, op, s.stream); err != nil {
		return fmt.Errorf("gumbel/sampler: merging the shards' %s: %w", what, err)
	}
	if err := s.stream.CopyToHost(host, buf, off); err != nil {
		return fmt.Errorf("gumbel/sampler: copying the merged %s back: %w", what, err)
	}
	if err := s.stream.Synchronize(); err != nil {
		return fmt.Errorf("gumbel/sampler: waiting for the merge of the %s: %w", what, err)
	}
	return nil
}

// keptLaw is what a filtered shard row's record needs of its kept set: the record's
// processed values are those of ABI.md "The log-probability record" for a categorical
// row, fl((x' - m)·invT) - logKept and m·invT + logKept.
type keptLaw struct {
	on      bool
	m, invT float32
	logKept float64 // ln(S_kept·2^-F)
}
