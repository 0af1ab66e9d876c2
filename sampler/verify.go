package sampler

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/gumbel-go/gumbel/philox"
	"github.com/gumbel-go/gumbel/runtime"
)

// ErrVerifyFiltered: VerifyChain was asked for a request with top-k, top-p or min-p;
// verification covers the temperature, processors and bitmasks of the target so far.
var ErrVerifyFiltered = errors.New("gumbel/sampler: verification needs a request without top-k, top-p or min-p")

// ErrDraft: a draft that does not fit the call: its logits rows outside the matrix or
// shared with another draft, a draft token outside the vocabulary, or a bitmask list of
// the wrong length.
var ErrDraft = errors.New("gumbel/sampler: draft does not fit the logits")

// Draft is one request's chain of draft tokens for VerifyChain: K tokens proposed for
// the K positions after the request's last token by a deterministic drafter (n-gram
// lookup, prompt lookup, a greedy draft model), checked against the target model's logits
// at K+1 positions.
type Draft struct {
	// Tokens are the K draft tokens; K may be 0 (then one token is sampled).
	Tokens []int32
	// Row is the logits row of the first position: position k (0 to K) is row Row+k,
	// the last one giving the bonus token when every draft is accepted.
	Row int
	// Bitmasks, when not nil, are K+1 host token bitmasks (see Params.Bitmask), one per
	// position, as a grammar gives them along the draft; nil entries leave a position
	// free. The request's own Params.Bitmask must then be nil.
	Bitmasks [][]int32
}

// Verified receives what VerifyChain decided, per request. Reuse it across calls.
type Verified struct {
	// Accepted[b] is how many of request b's draft tokens were accepted, 0 to K.
	Accepted []int
	// Tokens[b] are the tokens request b emits: its accepted drafts, then one more (the
	// target's token at the first rejected position, or the bonus token after all K);
	// nil when Errs[b] is set. The slices share one buffer, valid until the next call.
	Tokens [][]int32
	// Errs[b] is request b's error, or nil.
	Errs []error

	flat []int32
}

// VerifyChain verifies speculative drafts against the target model's logits, exactly:
// the emitted tokens of every request follow the target distribution (temperature,
// logit processors and token bitmasks of params[b] and of its logits rows) as if each
// had been sampled one step at a time.
//
// For a sampled request (temperature > 0) the drafter is deterministic (its draft
// distribution a point mass), so draft token t at position k is accepted with
// probability p_k(t), decided by philox.SpeculativeUniform(seed, Step+k); at the first
// rejection the token is drawn from p_k without t (Gumbel-max over the rest, with the
// stream of step Step+k), and after K acceptances the bonus token is the one Sample
// draws at step Step+K. A greedy request (temperature 0, or top-k 1) accepts while the
// draft equals the arg-max and emits the arg-max where it stops: byte-identical to
// greedy decoding. Every uniform is keyed by the request's seed and the decode position,
// never by its place in the batch.
//
// The call runs two rounds on the device (score or arg-max over the draft positions,
// then one draw per sampled request) and waits after each. Penalties read the token
// counts as they are at the call (drafts are not counted); nothing is recorded or
// advanced. A request with top-k, top-p or min-p fails with ErrVerifyFiltered; a draft
// that does not fit with ErrDraft; the others are verified.
func (s *Sampler) VerifyChain(logits Logits, params []Params, drafts []Draft, res *Verified) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if res == nil {
		return fmt.Errorf("%w: nil *Verified", ErrShape)
	}
	if len(drafts) != len(params) {
		return fmt.Errorf("%w: %d drafts for %d requests", ErrShape, len(drafts), len(params))
	}
	if logits.Rows < 0 {
		return fmt.Errorf("%w: %d logits rows", ErrShape, logits.Rows)
	}
	stride, err := checkLogits(logits, logits.Rows)
	if err != nil {
		return err
	}
	vocab := logits.Vocab
	if err := s.procs.checkCall(logits.Rows, vocab); err != nil {
		return err
	}
	if err := checkBitmask(logits.Bitmask, logits.Rows, vocab, false); err != nil {
		return err
	}
	if s.scoreErr != nil {
		return s.scoreErr
	}
	if s.topnErr != nil {
		return s.topnErr
	}
	if logits.Bitmask != nil {
		for b := range params {
			if params[b].Bitmask != nil || drafts[b].Bitmasks != nil {
				return fmt.Errorf("%w: request %d has host bitmasks in a call with a device one (Logits.Bitmask)", ErrShape, b)
			}
		}
	}
	v := &verifyCall{s: s, lg: logits, stride: stride, params: params, drafts: drafts, res: res}
	v.check()
	if err := v.round1(); err != nil {
		return err
	}
	return v.round2()
}

// verifyCall is one VerifyChain call's state.
type verifyCall struct {
	s      *Sampler
	lg     Logits
	stride int
	params []Params
	drafts []Draft
	res    *Verified
	// owner[r] is 1 + the request whose draft covers logits row r, 0 for none.
	owner []int
	seeds []uint64
}

// greedyRequest reports whether request p verifies by arg-max.
func greedyRequest(p Params, vocab int) bool {
	return route(p, vocab, true) == RouteGreedy
}

// check validates every request, sizing the result; a bad request gets its error.
func (v *verifyCall) check() {
	s, res, vocab := v.s, v.res, v.lg.Vocab
	n := len(v.params)
	res.Accepted = resized(res.Accepted, n)
	res.Tokens = resized(res.Tokens, n)
	res.Errs = resized(res.Errs, n)
	s.verifyOwner = resized(s.verifyOwner, v.lg.Rows)
	clear(s.verifyOwner)
	s.verifySeeds = resized(s.verifySeeds, n)
	v.owner, v.seeds = s.verifyOwner, s.verifySeeds
	total := 0
	for b, p := range v.params {
		res.Accepted[b], res.Tokens[b] = 0, nil
		d := v.drafts[b]
		k := len(d.Tokens)
		err := checkParams(b, p)
		switch {
		case err != nil:
		case filtered(p, vocab):
			err = fmt.Errorf("request %d: %w", b, ErrVerifyFiltered)
		case d.Row < 0 || d.Row+k >= v.lg.Rows || d.Row+k < d.Row:
			err = fmt.Errorf("request %d: positions at logits rows %d to %d, the logits hold %d rows: %w", b, d.Row, d.Row+k, v.lg.Rows, ErrDraft)
		case d.Bitmasks != nil && len(d.Bitmasks) != k+1:
			err = fmt.Errorf("request %d: %d bitmasks for %d positions: %w", b, len(d.Bitmasks), k+1, ErrDraft)
		case d.Bitmasks != nil && p.Bitmask != nil:
			err = fmt.Errorf("request %d: per-position bitmasks and Params.Bitmask: %w", b, ErrDraft)
		}
		for j := 0; err == nil && j <= k; j++ {
			row := d.Row + j
			mask := p.Bitmask
			if d.Bitmasks != nil {
				mask = d.Bitmasks[j]
			}
			switch {
			case j < k && (d.Tokens[j] < 0 || int(d.Tokens[j]) >= vocab):
				err = fmt.Errorf("request %d: draft token %d outside [0, %d): %w", b, d.Tokens[j], vocab, ErrDraft)
			case v.owner[row] != 0:
				err = fmt.Errorf("request %d: logits row %d is also request %d's: %w", b, row, v.owner[row]-1, ErrDraft)
			case mask != nil && len(mask) != maskWords(vocab):
				err = fmt.Errorf("request %d: position %d's bitmask of %d words, vocab %d needs %d: %w", b, j, len(mask), vocab, maskWords(vocab), ErrBitmask)
			case mask == nil:
				_, err = v.lg.Bitmask.deviceRow(row)
			}
		}
		res.Errs[b] = err
		if err != nil {
			continue
		}
		for j := 0; j <= k; j++ {
			v.owner[d.Row+j] = b + 1
		}
		v.seeds[b] = s.seedOf(p)
		total += k + 1
	}
	if cap(res.flat) < total {
		res.flat = make([]int32, total)
	}
}

// positionParams are the row parameters of position j of request b.
func (v *verifyCall) positionParams(b, j int) Params {
	p := v.params[b]
	p.Step += uint64(j)
	p.Seed, p.HasSeed = v.seeds[b], true
	p.Logprobs, p.TopLogprobs = false, 0
	if m := v.drafts[b].Bitmasks; m != nil {
		p.Bitmask = m[j]
	}
	return p
}

// maskRow is the bitmask row a position with params p at logits row row applies: its
// host mask's row in the scratch (appended to masks), the device bitmask's row of its
// logits row, or -1. check has vetted both.
func (v *verifyCall) maskRow(p Params, row int, masks *[][]int32) int {
	if p.Bitmask != nil {
		*masks = append(*masks, p.Bitmask)
		return len(*masks) - 1
	}
	m, _ := v.lg.Bitmask.deviceRow(row)
	return m
}

// launch runs one round: rows rows of RowParams already written in host, the host masks
// listed in masks.
func (v *verifyCall) launch(groups [numGroups]int, draws int, host []byte, masks [][]int32) ([]byte, error) {
	s := v.s
	pl := plan{logits: v.lg, stride: v.stride, draws: draws, groups: groups, out: outLayout{rows: v.lg.Rows, draws: draws}}
	switch {
	case v.lg.Bitmask != nil:
		pl.bitmask, pl.bitmaskOff = v.lg.Bitmask.Data, v.lg.Bitmask.Offset
	case len(masks) > 0:
		pl.hostBitmask = true
	}
	if err := s.prepare(&pl); err != nil {
		return nil, err
	}
	if len(masks) > 0 {
		words := maskWords(v.lg.Vocab)
		sc := &s.scratch
		if _, err := sc.bitmask.ensure(s.dev, 4*words*len(masks)); err != nil {
			return nil, err
		}
		stage, err := sc.bitmaskHost.bytes(s.dev, 4*words*len(masks))
		if err != nil {
			return nil, err
		}
		for i, m := range masks {
			copy(stage[4*words*i:], runtime.BytesOf(m))
		}
		s.dirty = true
		if err := s.stream.CopyToDevice(sc.bitmask.buf, 0, stage); err != nil {
			return nil, fmt.Errorf("gumbel/sampler: uploading token bitmasks: %w", err)
		}
	}
	return s.runPlan(&pl, host, true)
}

// rowParamsHost returns the pinned staging of n RowParams records.
func (v *verifyCall) rowParamsHost(n int) ([]byte, error) {
	return v.s.scratch.paramsHost.bytes(v.s.dev, n*RowParamsSize)
}

// round1 scores every draft token of the sampled requests and takes the arg-max of
// every position of the greedy ones, then decides the greedy requests.
func (v *verifyCall) round1() error {
	s, res, vocab := v.s, v.res, v.lg.Vocab
	var groups [numGroups]int
	for b := range v.params {
		if res.Errs[b] != nil {
			continue
		}
		if k := len(v.drafts[b].Tokens); greedyRequest(v.params[b], vocab) {
			groups[groupGumbel] += k + 1
		} else {
			groups[groupScore] += k
		}
	}
	if groups[groupGumbel]+groups[groupScore] == 0 {
		return nil
	}
	host, err := v.rowParamsHost(groups[groupGumbel] + groups[groupScore])
	if err != nil {
		return err
	}
	next := [numGroups]int{groupGumbel: 0, groupScore: groups[groupGumbel]}
	masks := s.verifyMasks[:0]
	for b := range v.params {
		if res.Errs[b] != nil {
			continue
		}
		d := v.drafts[b]
		greedy := greedyRequest(v.params[b], vocab)
		positions := len(d.Tokens)
		g := groupScore
		if greedy {
			positions++
			g = groupGumbel
		}
		for j := range positions {
			p, row := v.positionParams(b, j), d.Row+j
			m := v.maskRow(p, row, &masks)
			rec := host[next[g]*RowParamsSize:]
			flags := s.procs.flags(row, p) &^ abi.FlagRecord
			if greedy {
				putRowParams(rec, row, RouteGreedy, p, vocab, p.Seed, flags, 0, m)
			} else {
				putRowParams(rec, row, RouteGumbel, p, vocab, p.Seed, flags, 0, m)
				binary.LittleEndian.PutUint32(rec[abi.TokenOffset:], uint32(d.Tokens[j]))
			}
			next[g]++
		}
	}
	s.verifyMasks = masks[:0]
	results, err := v.launch(groups, 1, host, masks)
	if err != nil {
		return err
	}
	le := binary.LittleEndian
	out := outLayout{rows: v.lg.Rows, draws: 1}
	flat := res.flat[:0]
	for b, p := range v.params {
		if res.Errs[b] != nil {
			continue
		}
		d := v.drafts[b]
		k := len(d.Tokens)
		accepted := k
		for j := 0; j <= k; j++ {
			row := d.Row + j
			status := le.Uint32(results[out.status()+4*row:])
			val := le.Uint32(results[out.tokens()+4*row:])
			if greedyRequest(p, vocab) {
				tok, err := rowResult(row, int32(val), status, vocab)
				if err != nil {
					res.Errs[b] = fmt.Errorf("request %d: %w", b, err)
					break
				}
				if j == k || tok != d.Tokens[j] {
					accepted = j
					start := len(flat)
					flat = append(flat, d.Tokens[:j]...)
					flat = append(flat, tok)
					res.Tokens[b] = flat[start:]
					break
				}
				continue
			}
			if j == k {
				break // every draft accepted: round 2 draws the bonus token
			}
			if _, err := rowResult(row, 0, status, vocab); err != nil {
				res.Errs[b] = fmt.Errorf("request %d: %w", b, err)
				break
			}
			lp := math.Float32frombits(le.Uint32(results[out.logprobs()+16*row+4:]))
			if !(philox.SpeculativeUniform(v.seeds[b], p.Step+uint64(j)) < math.Exp(float64(lp))) {
				accepted = j
				break
			}
		}
		res.Accepted[b] = accepted
	}
	res.flat = flat
	return nil
}

// round2 draws the last token of every sampled request: at its first rejected
// position, p there without the rejected draft (the first of the two distinct Gumbel-max
// draws that is not it); after all K, the bonus token (the first draw, Sample's token).
func (v *verifyCall) round2() error {
	s, res, vocab := v.s, v.res, v.lg.Vocab
	var groups [numGroups]int
	for b, p := range v.params {
		if res.Errs[b] == nil && !greedyRequest(p, vocab) {
			groups[groupDistinct]++
		}
	}
	if groups[groupDistinct] == 0 {
		return nil
	}
	host, err := v.rowParamsHost(groups[groupDistinct])
	if err != nil {
		return err
	}
	masks := s.verifyMasks[:0]
	next := 0
	for b, p := range v.params {
		if res.Errs[b] != nil || greedyRequest(p, vocab) {
			continue
		}
		j := res.Accepted[b]
		q, row := v.positionParams(b, j), v.drafts[b].Row+j
		m := v.maskRow(q, row, &masks)
		flags := abi.FlagPerturbed | s.procs.flags(row, q)&^abi.FlagRecord
		putRowParams(host[next*RowParamsSize:], row, RouteGumbel, q, vocab, q.Seed, flags, 2, m)
		next++
	}
	groups[groupDistinct] = next
	if next == 0 {
		return nil
	}
	s.verifyMasks = masks[:0]
	results, err := v.launch(groups, 2, host[:next*RowParamsSize], masks)
	if err != nil {
		return err
	}
	le := binary.LittleEndian
	out := outLayout{rows: v.lg.Rows, draws: 2}
	flat := res.flat
	for b, p := range v.params {
		if res.Errs[b] != nil || greedyRequest(p, vocab) {
			continue
		}
		d, j := v.drafts[b], res.Accepted[b]
		row := d.Row + j
		var tok int32 = -1
		for z := range 2 {
			o := 4 * (row*MaxTopLogprobs + z)
			t, err := distinctResult(row, z, int32(le.Uint32(results[out.distinctTokens()+o:])),
				math.Float32frombits(le.Uint32(results[out.distinctValues()+o:])), vocab)
			if err != nil {
				if z == 0 || j == len(d.Tokens) || !errors.Is(err, ErrTooFewTokens) {
					res.Errs[b] = fmt.Errorf("request %d: %w", b, err)
				} else {
					// p_j holds the rejected draft alone: it was accepted with
					// probability 1, so this cannot happen but through rounding.
					tok = d.Tokens[j]
				}
				break
			}
			if j == len(d.Tokens) || t != d.Tokens[j] {
				tok = t
				break
			}
		}
		if res.Errs[b] != nil {
			continue
		}
		start := len(flat)
		flat = append(flat, d.Tokens[:j]...)
		flat = append(flat, tok)
		res.Tokens[b] = flat[start:]
	}
	res.flat = flat
	return nil
}
