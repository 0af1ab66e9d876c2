package sampler

import (
	"encoding/binary"
	"fmt"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
)

// VerifyChainProbs verifies chains of draft tokens that a drafter sampled from its own
// distributions (a draft model, EAGLE or MTP heads sampling at a temperature), exactly:
// the emitted tokens of every request follow the target distribution (temperature,
// top-k, top-p, min-p, logit processors and token bitmasks of params[b] and of its logits
// rows) as if each had been sampled one step at a time, and the accepted length has the
// law of the standard rejection rule. With filters the target at each position is the
// filtered law Sample draws from there: its kept set renormalised.
//
// draft holds the drafter's probabilities, float32, Vocab columns, rows of Vocab
// elements (RowStride 0 or Vocab, no Bitmask): row drafts[b].ProbsRow+k is the
// distribution draft token k of request b was drawn from, finite and non-negative (it
// need not sum to exactly 1). Draft token t at position k
// is accepted when u·q(t) < p(t), p the target's processed probability there and u
// philox.DraftUniform(seed, Step+k); at the first rejection the token is drawn from the
// residual max(p - q, 0), normalised, by Gumbel-max with the position's noise; when all
// K are accepted, the bonus token is the one Sample draws at position K (on the filtered
// route, for a request with filters). Every uniform and every noise word is keyed by the
// request's seed and the decode position, never by its place in the batch.
//
// Greedy requests (temperature 0, or top-k 1) verify by arg-max, as in VerifyChain,
// and ignore their draft probabilities. The call runs one round on the device (a
// scoring pass over the draft positions, or for a filtered request its kept sets, and
// the draws, queued back to back) and, when a request asks for log-probabilities
// (Params.Logprobs), one more, and a third when a filtered one does (its records are
// Sample's, under the filtered law); it waits after each.
// Penalties read the token counts as they are at the call; nothing is recorded or
// advanced. Errors are as for VerifyChain; a draft row outside draft is ErrDraft, a
// draft matrix of the wrong shape ErrShape.
func (s *Sampler) VerifyChainProbs(logits, draft Logits, params []Params, drafts []Draft, res *Verified) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if s.residualErr != nil {
		return s.residualErr
	}
	if len(drafts) != len(params) {
		return fmt.Errorf("%w: %d drafts for %d requests", ErrShape, len(drafts), len(params))
	}
	if err := checkDraftProbs(draft, logits.Vocab); err != nil {
		return err
	}
	positions := 0
	for _, d := range drafts {
		positions += len(d.Tokens) + 1
	}
	if positions > maxRowsPerLaunch {
		// The kernel finds a chain's start within its launch.
		return fmt.Errorf("%w: %d draft positions in one call, at most %d", ErrShape, positions, maxRowsPerLaunch)
	}
	v, err := s.startVerify(logits, params, s.chainTrees(drafts), res, true)
	if err != nil {
		return err
	}
	for b, d := range drafts {
		if res.Errs[b] != nil || greedyRequest(params[b], logits.Vocab) || len(d.Tokens) == 0 {
			continue
		}
		if d.ProbsRow < 0 || d.ProbsRow > draft.Rows-len(d.Tokens) {
			res.Errs[b] = fmt.Errorf("request %d: draft rows %d to %d, the draft probabilities hold %d rows: %w",
				b, d.ProbsRow, d.ProbsRow+len(d.Tokens)-1, draft.Rows, ErrDraft)
		}
	}
	if err := v.probsRound(draft, drafts); err != nil {
		return err
	}
	return v.recordRound()
}

// checkDraftProbs checks the draft probabilities of VerifyChainProbs: float32 rows of
// vocab elements, back to back, wholly inside their buffer.
func checkDraftProbs(draft Logits, vocab int) error {
	switch {
	case draft.DType != Float32:
		return fmt.Errorf("%w: draft probabilities are %s, want float32", ErrShape, draft.DType)
	case draft.Vocab != vocab:
		return fmt.Errorf("%w: draft probabilities of %d columns for vocab %d", ErrShape, draft.Vocab, vocab)
	case draft.RowStride != 0 && draft.RowStride != draft.Vocab:
		return fmt.Errorf("%w: draft probabilities need rows back to back (row stride %d, vocab %d)", ErrShape, draft.RowStride, draft.Vocab)
	case draft.Bitmask != nil:
		return fmt.Errorf("%w: draft probabilities take no bitmask", ErrShape)
	case draft.Rows < 1:
		return fmt.Errorf("%w: no draft probability rows", ErrShape)
	}
	_, err := checkLogits(draft, draft.Rows)
	return err
}

// probsRound queues, in one round, the arg-max of every position of the greedy
// requests, the score of every draft token of the unfiltered sampled ones under its
// position's distribution, the kept-set descriptor of every position of the filtered ones
// (the filtered kernel with FlagKeptSet, the draft token's log-probability under the
// filtered law among its words) and the residual kernel over their chains (a launch row
// per chain, a RowParams record per position), which decides each chain and draws its
// last token; then it reads the verdicts.
func (v *verifyCall) probsRound(draft Logits, drafts []Draft) error {
	s, res, vocab := v.s, v.res, v.lg.Vocab
	var groups [numGroups]int
	records := 0 // the residual group's records: every position of every chain
	maxRows := 0
	for b, p := range v.params {
		if res.Errs[b] != nil {
			continue
		}
		k := len(v.trees[b].Tokens)
		switch {
		case greedyRequest(p, vocab):
			groups[groupGumbel] += k + 1
			continue
		case filtered(p, vocab):
			groups[groupFiltered] += k + 1
			if needsRowMax(p, vocab) {
				maxRows += k + 1
			}
		default:
			groups[groupScore] += k
		}
		groups[groupResidual]++
		records += k + 1
	}
	slots := groups[groupGumbel] + groups[groupFiltered] + groups[groupScore] + records
	if slots == 0 {
		return nil
	}
	host, err := s.scratch.paramsHost.bytes(s.dev, slots*RowParamsSize)
	if err != nil {
		return err
	}
	var next [numGroups]int
	for g := 1; g < numGroups; g++ {
		next[g] = next[g-1] + groups[g-1]
	}
	chains := host[next[groupResidual]*RowParamsSize:]
	put := func(g int) []byte {
		rec := host[next[g]*RowParamsSize : (next[g]+1)*RowParamsSize]
		next[g]++
		return rec
	}
	le := binary.LittleEndian
	masks := s.hostMasks[:0]
	for b, p := range v.params {
		if res.Errs[b] != nil {
			continue
		}
		tr := v.trees[b]
		greedy := greedyRequest(p, vocab)
		for k := range len(tr.Tokens) + 1 {
			q, row := v.nodeParams(b, k), v.nodeRow(b, k)
			m := v.maskRow(q, row, &masks)
			flags := s.procs.flags(row, q) &^ abi.FlagRecord
			if greedy {
				putRowParams(put(groupGumbel), row, RouteGreedy, q, vocab, q.Seed, flags, 0, m)
				continue
			}
			last := k == len(tr.Tokens)
			// A filtered request's target is its filtered law: its residual records
			// read the descriptor at their slot and carry their min-p.
			r := RouteGumbel
			switch {
			case filtered(p, vocab):
				r, flags = RouteFiltered, flags|abi.FlagKeptSet
				rec := put(groupFiltered)
				putRowParams(rec, row, r, q, vocab, q.Seed, flags|abi.FlagLogprobs, 0, m)
				if !last {
					le.PutUint32(rec[abi.TokenOffset:], uint32(tr.Tokens[k]))
				}
			case !last:
				rec := put(groupScore)
				putRowParams(rec, row, r, q, vocab, q.Seed, flags, 0, m)
				le.PutUint32(rec[abi.TokenOffset:], uint32(tr.Tokens[k]))
			}
			rec := put(groupResidual)
			if last {
				putRowParams(rec, row, r, q, vocab, q.Seed, flags|abi.FlagChainEnd, 0, m)
			} else {
				putRowParams(rec, row, r, q, vocab, q.Seed, flags, uint32(drafts[b].ProbsRow+k), m)
				le.PutUint32(rec[abi.TokenOffset:], uint32(tr.Tokens[k]))
			}
		}
	}
	// Record y's TopK names launch row y's chain, written once every record is
	// (ABI.md, residual).
	chain, first := 0, 0
	for b, p := range v.params {
		if res.Errs[b] != nil || greedyRequest(p, vocab) {
			continue
		}
		le.PutUint32(chains[chain*RowParamsSize+abi.TopKOffset:], uint32(first))
		chain++
		first += len(v.trees[b].Tokens) + 1
	}
	s.hostMasks = masks[:0]
	pl := plan{logits: v.lg, stride: v.stride, draws: 1, groups: groups, maxRows: maxRows,
		out: outLayout{rows: v.lg.Rows, draws: 1}, draft: draft.Data, draftOff: draft.Offset, chainRecords: records}
	results, err := v.launchPlan(&pl, host, masks)
	if err != nil {
		return err
	}
	v.readProbsRound(results)
	return nil
}

// readProbsRound fills res from a probsRound's outputs: the greedy requests by their
// arg-max walk, the sampled ones from the residual kernel's verdict per position.
func (v *verifyCall) readProbsRound(results []byte) {
	res, vocab := v.res, v.lg.Vocab
	le := binary.LittleEndian
	out := outLayout{rows: v.lg.Rows, draws: 1}
	for b, p := range v.params {
		if res.Errs[b] != nil {
			continue
		}
		tr, f := v.trees[b], v.first[b]
		startTok, startNode := len(res.flat), len(res.flatNodes)
		if greedyRequest(p, vocab) {
			for k := range len(tr.Tokens) + 1 {
				row := v.nodeRow(b, k)
				tok, err := rowResult(row, int32(le.Uint32(results[out.tokens()+4*row:])), le.Uint32(results[out.status()+4*row:]), vocab)
				if err != nil {
					res.Errs[b] = fmt.Errorf("request %d: %w", b, err)
					break
				}
				v.top[f+k] = tok
			}
			if res.Errs[b] == nil {
				// The chain's arg-max walk: follow the drafts while they equal the
				// arg-max, then emit it.
				for k := range len(tr.Tokens) + 1 {
					res.flat = append(res.flat, v.top[f+k])
					if k == len(tr.Tokens) || tr.Tokens[k] != v.top[f+k] {
						break
					}
					res.flatNodes = append(res.flatNodes, int32(k))
				}
			}
		} else {
			// The stop is the last position the chain reached; the drafts before it
			// were accepted.
			stop := 0
			for stop < len(tr.Tokens) && abi.Status(le.Uint32(results[out.status()+4*v.nodeRow(b, stop+1):])) != abi.StatusNotReached {
				stop++
			}
			row := v.nodeRow(b, stop)
			tok, err := rowResult(row, int32(le.Uint32(results[out.tokens()+4*row:])), le.Uint32(results[out.status()+4*row:]), vocab)
			if err != nil {
				res.Errs[b] = fmt.Errorf("request %d: %w", b, err)
			} else {
				for k := range stop {
					res.flat = append(res.flat, tr.Tokens[k])
					res.flatNodes = append(res.flatNodes, int32(k))
				}
				res.flat = append(res.flat, tok)
			}
		}
		if res.Errs[b] != nil {
			res.flat, res.flatNodes = res.flat[:startTok], res.flatNodes[:startNode]
			continue
		}
		res.Accepted[b] = len(res.flatNodes) - startNode
		res.Nodes[b] = res.flatNodes[startNode:len(res.flatNodes):len(res.flatNodes)]
		res.Tokens[b] = res.flat[startTok:len(res.flat):len(res.flat)]
	}
}
