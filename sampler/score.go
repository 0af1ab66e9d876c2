package sampler

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
)

// ErrScoreFiltered: Score was asked for a row with top-k, top-p or min-p. Scoring gives
// the log-probability under the processed logits at the row's temperature; the filters'
// renormalised kept set is not computed by the score kernel.
var ErrScoreFiltered = errors.New("gumbel/sampler: scoring needs a row without top-k, top-p or min-p")

// Scores receives what Score computes, one entry per row. Reuse it across calls: its
// slices grow when a batch is larger and are not reallocated otherwise.
type Scores struct {
	// Logprobs[i] is the record of row i's token: its raw log-probability (log-softmax
	// of the logits as given), its processed one (processors, token bitmask, then
	// 1/temperature; temperature 0 scores at 1) and both log-normalisers. All NaN when
	// row i failed.
	Logprobs []Logprob
	// Ranks[i] is how many raw logits of row i are at or above its token's, the token
	// itself and its ties included: 1 for the most likely token. 0 when row i failed.
	Ranks []int32
	// Top[i] holds row i's top raw log-probabilities (Params.TopLogprobs). It is empty
	// when no row of the call asked.
	Top []TopLogprobs
	// Errs[i] is row i's error, or nil.
	Errs []error
}

// Score computes, for each row of logits, the log-probabilities and the rank of the
// given token tokens[i] (prompt log-probabilities, evaluation, reinforcement-learning
// rollouts), with params[i] for row i: its temperature, logit processors and token
// bitmask shape the processed log-probability, its TopLogprobs adds the row's most
// likely raw tokens. Nothing is drawn and no stream is read: Seed, Step and RequestID do
// not matter, and tracked rows count nothing. One pass over each row (split over blocks
// as sampling is), plus one topn pass when a row asks for top log-probabilities.
//
// A row with top-k, top-p or min-p fails with ErrScoreFiltered, a token outside [0,
// vocab) with ErrToken, a row with NaN or +Inf (after processors) with
// ErrNonFiniteLogit, a row whose processed logits are all -Inf with ErrNoFiniteLogit;
// the other rows are scored. Call errors are as for Sample.
func (s *Sampler) Score(logits Logits, params []Params, tokens []int32, res *Scores) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	return s.score(logits, params, tokens, res)
}

// score is Score with the lock held.
func (s *Sampler) score(logits Logits, params []Params, tokens []int32, res *Scores) error {
	if res == nil {
		return fmt.Errorf("%w: nil *Scores", ErrShape)
	}
	if len(tokens) != len(params) {
		return fmt.Errorf("%w: %d tokens for %d rows", ErrShape, len(tokens), len(params))
	}
	stride, err := checkLogits(logits, len(params))
	if err != nil {
		return err
	}
	rows, vocab := logits.Rows, logits.Vocab
	if err := s.procs.checkCall(rows, vocab); err != nil {
		return err
	}
	if err := checkCallBitmasks(logits, params, rows); err != nil {
		return err
	}
	if s.scoreErr != nil {
		return s.scoreErr
	}
	res.resize(rows)
	s.maskRows = resized(s.maskRows, rows)
	masks := bitmaskCall{dev: logits.Bitmask, host: s.hostMasks[:0]}
	var groups [numGroups]int
	for i, p := range params {
		err := checkParams(i, p)
		switch {
		case err != nil:
		case filtered(p, vocab):
			err = fmt.Errorf("row %d: %w", i, ErrScoreFiltered)
		case tokens[i] < 0 || int(tokens[i]) >= vocab:
			err = fmt.Errorf("row %d: token %d outside [0, %d): %w", i, tokens[i], vocab, ErrToken)
		}
		s.maskRows[i] = -1
		if err == nil {
			s.maskRows[i], err = masks.rowOf(i, p, vocab)
		}
		res.Errs[i] = err
		if err != nil {
			continue
		}
		groups[groupScore]++
		if p.TopLogprobs > 0 {
			groups[groupTop]++
		}
	}
	s.hostMasks = masks.host[:0] // the list's memory, for the next call
	wantTop := groups[groupTop] > 0
	if wantTop {
		res.Top = resized(res.Top, rows)
		for i := range res.Top {
			res.Top[i].Count = 0
		}
	}
	if groups[groupScore] == 0 {
		return nil
	}
	if wantTop && s.topnErr != nil {
		return s.topnErr
	}

	pl := plan{logits: logits, stride: stride, draws: 1, groups: groups, out: outLayout{rows: rows, draws: 1}}
	switch {
	case logits.Bitmask != nil:
		pl.bitmask, pl.bitmaskOff = logits.Bitmask.Data, logits.Bitmask.Offset
	case len(masks.host) > 0:
		pl.hostBitmask = true
	}
	if err := s.prepare(&pl); err != nil {
		return err
	}
	sc := &s.scratch
	host, err := sc.paramsHost.bytes(s.dev, (groups[groupScore]+groups[groupTop])*RowParamsSize)
	if err != nil {
		return err
	}
	// Slots in group order: the topn rows, then the score rows.
	next := [numGroups]int{groupTop: 0, groupScore: groups[groupTop]}
	for i, p := range params {
		if res.Errs[i] != nil {
			continue
		}
		rec := host[next[groupScore]*RowParamsSize:]
		// RECORD and ADVANCE are for draws: scoring leaves counts and steps alone.
		putRowParams(rec, i, RouteGumbel, p, vocab, 0, s.procs.flags(i, p)&^abi.FlagRecord, 0, s.maskRows[i])
		binary.LittleEndian.PutUint32(rec[abi.TokenOffset:], uint32(tokens[i]))
		next[groupScore]++
		if p.TopLogprobs > 0 {
			putRowParams(host[next[groupTop]*RowParamsSize:], i, RouteGumbel, p, vocab, 0, 0, uint32(p.TopLogprobs), -1)
			next[groupTop]++
		}
	}
	s.dirty, s.last.ok = true, false
	if err := s.stageBitmasks(masks.host, vocab); err != nil {
		return err
	}
	results, err := s.runPlan(&pl, host, true)
	if err != nil {
		return err
	}

	le := binary.LittleEndian
	out := pl.out
	for i, p := range params {
		if res.Errs[i] != nil {
			continue
		}
		rank := int32(le.Uint32(results[out.tokens()+4*i:]))
		status := le.Uint32(results[out.status()+4*i:])
		if _, err := rowResult(i, 0, status, vocab); err != nil {
			res.fail(i, err)
			continue
		}
		if rank < 1 || int(rank) > vocab {
			res.fail(i, fmt.Errorf("row %d: rank %d outside [1, %d]: %w", i, rank, vocab, ErrDevice))
			continue
		}
		r := out.logprobs() + 16*i
		res.Logprobs[i] = recordAt(results, r)
		res.Ranks[i] = rank
		if p.TopLogprobs > 0 {
			decodeTop(results, out, i, p.TopLogprobs, vocab, &res.Top[i])
		}
	}
	return nil
}

// resize makes res hold rows rows: records NaN, ranks 0, no top lists.
func (res *Scores) resize(rows int) {
	res.Logprobs = resized(res.Logprobs, rows)
	res.Ranks = resized(res.Ranks, rows)
	res.Errs = resized(res.Errs, rows)
	for i := range rows {
		res.Logprobs[i], res.Ranks[i], res.Errs[i] = nanLogprob, 0, nil
	}
	res.Top = res.Top[:0]
}

// fail marks row i failed.
func (res *Scores) fail(i int, err error) {
	res.Errs[i], res.Logprobs[i], res.Ranks[i] = err, nanLogprob, 0
	if len(res.Top) > 0 {
		res.Top[i].Count = 0
	}
}
