package sampler

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/gumbel-go/gumbel/philox"
)

// ErrDraft: a draft that does not fit the call: its logits rows outside the matrix or
// shared with another draft, a draft token outside the vocabulary, or a bitmask list of
// the wrong length.
var ErrDraft = errors.New("gumbel/sampler: draft does not fit the logits")

// Draft is one request's chain of draft tokens: K tokens proposed for the K positions
// after the request's last token, checked against the target model's logits at K+1
// positions. VerifyChain takes them from a deterministic drafter (n-gram lookup, prompt
// lookup, a greedy draft model); VerifyChainProbs from a drafter that sampled them from
// known distributions.
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
	// ProbsRow is read by VerifyChainProbs only: the row of its draft probabilities
	// that draft token 0 was drawn from; token k's is ProbsRow+k.
	ProbsRow int
}

// DraftTree is one request's tree of draft tokens for VerifyTree, as tree drafters
// (EAGLE, Medusa, SpecInfer) send it: N draft nodes, each proposing a token for the
// position after its parent, checked against the target model's logits at the root
// and at every node. Siblings are alternatives, tried in index order.
type DraftTree struct {
	// Tokens[i] is draft node i's token.
	Tokens []int32
	// Parents[i] is node i's parent: a lower node index, or -1 for the root (the
	// request's last token).
	Parents []int32
	// Row is the root's logits row; node i's logits are row Row+1+i.
	Row int
	// Bitmasks, when not nil, are N+1 host token bitmasks (see Params.Bitmask): the
	// root's first, then node i's at 1+i; nil entries leave a node free. The request's
	// own Params.Bitmask must then be nil.
	Bitmasks [][]int32
}

// MaxDraftSiblings is the most children a draft node may have: after rejecting them
// all, the correction is the first of MaxDraftSiblings+1 distinct draws outside them.
const MaxDraftSiblings = MaxTopLogprobs - 1

// Verified receives what VerifyChain or VerifyTree decided, per request. Reuse it
// across calls.
type Verified struct {
	// Accepted[b] is how many of request b's draft tokens were accepted.
	Accepted []int
	// Nodes[b] are the accepted draft nodes, from the root down (VerifyChain: 0 to
	// Accepted[b]-1): the path whose KV cache an engine keeps.
	Nodes [][]int32
	// Tokens[b] are the tokens request b emits: the accepted nodes' tokens, then one more
	// (the target's token where verification stopped, or the bonus token after a leaf);
	// nil when Errs[b] is set.
	Tokens [][]int32
	// Logprobs[b][i] is the log-probability record of Tokens[b][i] under the target
	// at its position (Raw; Processed with the request's temperature, processors and
	// bitmask, under its filters' kept set for a filtered request, at temperature 1 for
	// greedy requests: Sample's record there; the two LSEs), when params[b] asks
	// (Params.Logprobs); nil otherwise.
	Logprobs [][]Logprob
	// Errs[b] is request b's error, or nil.
	Errs []error

	// flat, flatNodes and flatLogprobs back Tokens, Nodes and Logprobs; valid until the
	// next call.
	flat, flatNodes []int32
	flatLogprobs    []Logprob
}

// VerifyChain verifies chains of draft tokens against the target model's logits,
// exactly: the emitted tokens of every request follow the target distribution
// (temperature, logit processors and token bitmasks of params[b] and of its logits
// rows) as if each had been sampled one step at a time. It is VerifyTree for trees
// without branches: draft k's parent is draft k-1, and position k is logits row
// Row+k.
func (s *Sampler) VerifyChain(logits Logits, params []Params, drafts []Draft, res *Verified) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(drafts) != len(params) {
		return fmt.Errorf("%w: %d drafts for %d requests", ErrShape, len(drafts), len(params))
	}
	return s.verify(logits, params, s.chainTrees(drafts), res)
}

// chainTrees views chains of drafts as trees without branches: draft k's parent is
// draft k-1.
func (s *Sampler) chainTrees(drafts []Draft) []DraftTree {
	s.verifyTrees = resized(s.verifyTrees, len(drafts))
	total := 0
	for _, d := range drafts {
		total += len(d.Tokens)
	}
	if cap(s.verifyParents) < total {
		s.verifyParents = make([]int32, total)
	}
	parents := s.verifyParents[:0]
	for b, d := range drafts {
		start := len(parents)
		for k := range d.Tokens {
			parents = append(parents, int32(k-1))
		}
		s.verifyTrees[b] = DraftTree{Tokens: d.Tokens, Parents: parents[start:], Row: d.Row, Bitmasks: d.Bitmasks}
	}
	return s.verifyTrees
}

// VerifyTree verifies trees of draft tokens against the target model's logits,
// exactly, as VerifyChain does chains.
//
// For a sampled request (temperature > 0) the drafter is deterministic (each draft a
// point mass). At a node whose distribution is p, its children are tried in order:
// child c with token t is accepted with probability p(t) / (1 - the mass of the
// siblings' tokens already rejected), decided by philox.SpeculativeUniform(seed,
// Step+depth, j) for the j-th child; an accepted child becomes the node. Where no child
// is accepted (a leaf included), the last token is drawn from p without the rejected
// tokens: the first of the distinct Gumbel-max draws at step Step+depth outside them,
// which after a leaf is the token Sample draws there. A greedy request (temperature 0,
// or top-k 1) follows the child whose token is the arg-max and emits the arg-max where
// none is: byte-identical to greedy decoding. A request with top-k, top-p or min-p
// draws each node's token as Sample would at that position (its route, seed and step
// Step+depth) and follows the child with that token, emitting the draw where none has
// it: with point-mass drafts this is the same law (child t accepted with probability
// p(t), the last token drawn from p without the rejected ones), and the emitted tokens
// are byte-identical to sampling step by step. Every uniform and every noise word is
// keyed by the request's seed and the decode position, never by its place in the
// batch.
//
// The call runs one round on the device per sibling rank (scoring each node's j-th
// child, and the draws of the filtered requests; a chain needs one), one draw round
// and, when a request asks for log-probabilities (Params.Logprobs), one scoring round
// of the emitted tokens, and waits after each. Penalties read the token counts as they
// are at the call (drafts are not counted); nothing is recorded or advanced. A tree
// that does not fit (rows outside the logits or shared, a parent that is not an
// earlier node, more than MaxDraftSiblings children, a token outside the vocabulary)
// fails with ErrDraft; the others are verified.
func (s *Sampler) VerifyTree(logits Logits, params []Params, trees []DraftTree, res *Verified) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.verify(logits, params, trees, res)
}

// verify is VerifyChain and VerifyTree with the lock held.
func (s *Sampler) verify(logits Logits, params []Params, trees []DraftTree, res *Verified) error {
	if s.topnErr != nil && !s.closed {
		return s.topnErr // the draw round's topn; VerifyChainProbs needs none
	}
	v, err := s.startVerify(logits, params, trees, res, false)
	if err != nil {
		return err
	}
	if err := v.scoreRounds(); err != nil {
		return err
	}
	v.walk()
	if err := v.drawRound(); err != nil {
		return err
	}
	return v.recordRound()
}

// startVerify checks a verification call and every request in it (a bad request gets
// its error in res.Errs) and lays out the call's state.
// probs says the call is VerifyChainProbs.
func (s *Sampler) startVerify(logits Logits, params []Params, trees []DraftTree, res *Verified, probs bool) (*verifyCall, error) {
	if s.closed {
		return nil, ErrClosed
	}
	if res == nil {
		return nil, fmt.Errorf("%w: nil *Verified", ErrShape)
	}
	if len(trees) != len(params) {
		return nil, fmt.Errorf("%w: %d drafts for %d requests", ErrShape, len(trees), len(params))
	}
	stride, err := checkLogits(logits, logits.Rows)
	if err != nil {
		return nil, err
	}
	vocab := logits.Vocab
	if err := s.procs.checkCall(logits.Rows, vocab); err != nil {
		return nil, err
	}
	if err := checkCallBitmasks(logits, params, logits.Rows); err != nil {
		return nil, err
	}
	if logits.Bitmask != nil {
		for b := range trees {
			if trees[b].Bitmasks != nil {
				return nil, fmt.Errorf("%w: request %d has host bitmasks in a call with a device one (Logits.Bitmask)", ErrShape, b)
			}
		}
	}
	if s.scoreErr != nil {
		return nil, s.scoreErr
	}
	v := &verifyCall{s: s, lg: logits, stride: stride, params: params, trees: trees, res: res, probs: probs}
	v.check()
	return v, nil
}

// verifyCall is one verification call's state.
type verifyCall struct {
	s      *Sampler
	lg     Logits
	stride int
	params []Params
	trees  []DraftTree
	res    *Verified
	probs  bool
	// owner[r] is 1 + the request whose tree covers logits row r, 0 for none.
	owner []int
	seeds []uint64
	// first[b] is request b's first entry in nodeLP, top, rec, depth and kids (one per
	// node, the root first): each draft node's processed log-probability under its
	// parent's distribution (unfiltered sampled requests), each node's arg-max (greedy
	// ones) or draw (filtered ones) and the draw's record, its depth and its child count.
	first  []int
	nodeLP []float32
	top    []int32
	rec    []Logprob
	depth  []int32
	kids   []int32
	// maxKids is the most children of a node of a sampled request.
	maxKids int
	// stop[b] is the node where request b's walk stopped and rejected the tokens
	// listed from rejStart[b] in rejected.
	stop, rejStart, rejEnd []int
	rejected               []int32
}

// greedyRequest reports whether request p verifies by arg-max.
func greedyRequest(p Params, vocab int) bool {
	return route(p, vocab, true) == RouteGreedy
}

// drawnRequest reports whether request p verifies by drawing each node's token on its
// own route (a sampled request with filters) and following the child that has it.
func drawnRequest(p Params, vocab int) bool {
	return !greedyRequest(p, vocab) && filtered(p, vocab)
}

// byToken reports whether request p walks its tree by one token per node (its arg-max
// or its draw) rather than by the acceptance rule.
func byToken(p Params, vocab int) bool {
	return greedyRequest(p, vocab) || filtered(p, vocab)
}

// nodeRow is the logits row of node n of request b: 0 the root, 1+i draft node i.
func (v *verifyCall) nodeRow(b, n int) int { return v.trees[b].Row + n }

// check validates every request and lays out the per-node state; a bad request gets its
// error.
func (v *verifyCall) check() {
	s, res, vocab := v.s, v.res, v.lg.Vocab
	n := len(v.params)
	res.Accepted = resized(res.Accepted, n)
	res.Logprobs = resized(res.Logprobs, n)
	clear(res.Logprobs)
	res.Tokens = resized(res.Tokens, n)
	res.Nodes = resized(res.Nodes, n)
	res.Errs = resized(res.Errs, n)
	s.verifyOwner = resized(s.verifyOwner, v.lg.Rows)
	clear(s.verifyOwner)
	s.verifySeeds = resized(s.verifySeeds, n)
	s.verifyFirst = resized(s.verifyFirst, n+1)
	v.owner, v.seeds, v.first = s.verifyOwner, s.verifySeeds, s.verifyFirst
	total := 0
	for b, p := range v.params {
		res.Accepted[b], res.Tokens[b], res.Nodes[b] = 0, nil, nil
		v.first[b] = total
		tr := v.trees[b]
		nodes := len(tr.Tokens)
		err := checkParams(b, p)
		switch {
		case err != nil:
		case len(tr.Parents) != nodes:
			err = fmt.Errorf("request %d: %d parents for %d draft tokens: %w", b, len(tr.Parents), nodes, ErrDraft)
		case tr.Row < 0 || tr.Row+nodes >= v.lg.Rows || tr.Row+nodes < tr.Row:
			err = fmt.Errorf("request %d: nodes at logits rows %d to %d, the logits hold %d rows: %w", b, tr.Row, tr.Row+nodes, v.lg.Rows, ErrDraft)
		case tr.Bitmasks != nil && len(tr.Bitmasks) != nodes+1:
			err = fmt.Errorf("request %d: %d bitmasks for %d nodes and the root: %w", b, len(tr.Bitmasks), nodes, ErrDraft)
		case tr.Bitmasks != nil && p.Bitmask != nil:
			err = fmt.Errorf("request %d: per-node bitmasks and Params.Bitmask: %w", b, ErrDraft)
		}
		for j := 0; err == nil && j <= nodes; j++ {
			row := tr.Row + j
			mask := p.Bitmask
			if tr.Bitmasks != nil {
				mask = tr.Bitmasks[j]
			}
			switch {
			case j > 0 && (tr.Tokens[j-1] < 0 || int(tr.Tokens[j-1]) >= vocab):
				err = fmt.Errorf("request %d: draft token %d outside [0, %d): %w", b, tr.Tokens[j-1], vocab, ErrDraft)
			case j > 0 && (tr.Parents[j-1] < -1 || int(tr.Parents[j-1]) >= j-1):
				err = fmt.Errorf("request %d: node %d's parent %d is not an earlier node: %w", b, j-1, tr.Parents[j-1], ErrDraft)
			case v.owner[row] != 0:
				err = fmt.Errorf("request %d: logits row %d is also request %d's: %w", b, row, v.owner[row]-1, ErrDraft)
			case mask != nil && len(mask) != maskWords(vocab):
				err = fmt.Errorf("request %d: node %d's bitmask of %d words, vocab %d needs %d: %w", b, j, len(mask), vocab, maskWords(vocab), ErrBitmask)
			case mask == nil:
				_, err = v.lg.Bitmask.deviceRow(row)
			}
		}
		if err == nil {
			for j := range nodes + 1 {
				v.owner[tr.Row+j] = b + 1
			}
			v.seeds[b] = s.seedOf(p)
			total += nodes + 1
		}
		res.Errs[b] = err
	}
	v.first[n] = total
	s.verifyLP = resized(s.verifyLP, total)
	s.verifyDepth = resized(s.verifyDepth, total)
	s.verifyKids = resized(s.verifyKids, total)
	s.verifyTop = resized(s.verifyTop, total)
	s.verifyRec = resized(s.verifyRec, total)
	v.nodeLP, v.depth, v.kids, v.top, v.rec = s.verifyLP, s.verifyDepth, s.verifyKids, s.verifyTop, s.verifyRec
	clear(v.kids)
	for b := range v.params {
		if res.Errs[b] != nil {
			continue
		}
		f, tr := v.first[b], v.trees[b]
		v.depth[f] = 0
		for i, par := range tr.Parents {
			v.depth[f+1+i] = v.depth[f+1+int(par)] + 1
			v.kids[f+1+int(par)]++
		}
		for j := range len(tr.Tokens) + 1 {
			if v.kids[f+j] > MaxDraftSiblings {
				res.Errs[b] = fmt.Errorf("request %d: node %d has %d children, at most %d: %w", b, j-1, v.kids[f+j], MaxDraftSiblings, ErrDraft)
				break
			}
			if !byToken(v.params[b], vocab) {
				v.maxKids = max(v.maxKids, int(v.kids[f+j]))
			}
		}
	}
	if cap(res.flat) < total {
		res.flat = make([]int32, total)
		res.flatNodes = make([]int32, total)
	}
	res.flat, res.flatNodes = res.flat[:0], res.flatNodes[:0]
}

// nodeParams are the row parameters at node n (0 the root) of request b.
func (v *verifyCall) nodeParams(b, n int) Params {
	p := v.params[b]
	p.Step += uint64(v.depth[v.first[b]+n])
	p.Seed, p.HasSeed = v.seeds[b], true
	p.Logprobs, p.TopLogprobs = false, 0
	if m := v.trees[b].Bitmasks; m != nil {
		p.Bitmask = m[n]
	}
	return p
}

// maskRow is the bitmask row a node with params p at logits row row applies: its host
// mask's row in the scratch (appended to masks), the device bitmask's row of its logits
// row, or -1. check has vetted both.
func (v *verifyCall) maskRow(p Params, row int, masks *[][]int32) int {
	if p.Bitmask != nil {
		*masks = append(*masks, p.Bitmask)
		return len(*masks) - 1
	}
	m, _ := v.lg.Bitmask.deviceRow(row)
	return m
}

// launch runs one round: its RowParams already written in host, the host masks listed
// in masks.
func (v *verifyCall) launch(groups [numGroups]int, draws int, host []byte, masks [][]int32) ([]byte, error) {
	pl := plan{logits: v.lg, stride: v.stride, draws: draws, groups: groups, out: outLayout{rows: v.lg.Rows, draws: draws}}
	return v.launchPlan(&pl, host, masks)
}

// launchPlan runs one round of plan pl, its logits bitmask taken from the call.
func (v *verifyCall) launchPlan(pl *plan, host []byte, masks [][]int32) ([]byte, error) {
	s := v.s
	switch {
	case v.lg.Bitmask != nil:
		pl.bitmask, pl.bitmaskOff = v.lg.Bitmask.Data, v.lg.Bitmask.Offset
	case len(masks) > 0:
		pl.hostBitmask = true
	}
	if err := s.prepare(pl); err != nil {
		return nil, err
	}
	if err := s.stageBitmasks(masks, v.lg.Vocab); err != nil {
		return nil, err
	}
	return s.runPlan(pl, host, true)
}

// child returns the index of node n's j-th child (draft node index), or -1.
func (v *verifyCall) child(b, n, j int) int {
	for i, par := range v.trees[b].Parents {
		if int(par)+1 == n {
			if j == 0 {
				return i
			}
			j--
		}
	}
	return -1
}

// inRound reports whether node n of request b has a row in scoring round j: every node
// of a request that walks by token in round 0 (its arg-max or draw), a node of another
// sampled one while it has a j-th child.
func (v *verifyCall) inRound(b, n, j int, token bool) bool {
	if token {
		return j == 0
	}
	return int(v.kids[v.first[b]+n]) > j
}

// roundGroup is the launch group of request p's rows in a scoring round: arg-max, the
// draw of its route, or the score of a child's token.
func (v *verifyCall) roundGroup(p Params) int {
	vocab := v.lg.Vocab
	switch {
	case greedyRequest(p, vocab):
		return groupGumbel
	case drawnRequest(p, vocab):
		return groupOf(route(p, vocab, v.s.set.Gumbel))
	}
	return groupScore
}

// scoreRounds scores, in round j, the token of the j-th child of every node of the
// unfiltered sampled requests under that node's distribution, and takes in round 0 the
// arg-max of every node of the greedy requests and the draw of every node of the
// filtered ones.
func (v *verifyCall) scoreRounds() error {
	s, res, vocab := v.s, v.res, v.lg.Vocab
	for j := 0; j == 0 || j < v.maxKids; j++ {
		var groups [numGroups]int
		maxRows := 0
		for b, p := range v.params {
			if res.Errs[b] != nil {
				continue
			}
			token, g := byToken(p, vocab), v.roundGroup(p)
			for n := range len(v.trees[b].Tokens) + 1 {
				if !v.inRound(b, n, j, token) {
					continue
				}
				groups[g]++
				if g == groupFiltered && needsRowMax(p, vocab) {
					maxRows++
				}
			}
		}
		rows := 0
		var next [numGroups]int
		for g := range numGroups {
			next[g] = rows
			rows += groups[g]
		}
		if rows == 0 {
			return nil
		}
		host, err := s.scratch.paramsHost.bytes(s.dev, rows*RowParamsSize)
		if err != nil {
			return err
		}
		masks := s.hostMasks[:0]
		for b, p := range v.params {
			if res.Errs[b] != nil {
				continue
			}
			token, g := byToken(p, vocab), v.roundGroup(p)
			r := RouteGumbel
			if g != groupScore {
				r = route(p, vocab, s.set.Gumbel)
			}
			for n := range len(v.trees[b].Tokens) + 1 {
				if !v.inRound(b, n, j, token) {
					continue
				}
				q, row := v.nodeParams(b, n), v.nodeRow(b, n)
				m := v.maskRow(q, row, &masks)
				flags := s.procs.flags(row, q) &^ abi.FlagRecord
				if g != groupGumbel && g != groupScore && p.Logprobs {
					flags |= abi.FlagLogprobs // a drawn node's token may be emitted
				}
				rec := host[next[g]*RowParamsSize:]
				putRowParams(rec, row, r, q, vocab, q.Seed, flags, 0, m)
				if g == groupScore {
					binary.LittleEndian.PutUint32(rec[abi.TokenOffset:], uint32(v.trees[b].Tokens[v.child(b, n, j)]))
				}
				next[g]++
			}
		}
		s.hostMasks = masks[:0]
		pl := plan{logits: v.lg, stride: v.stride, draws: 1, groups: groups, maxRows: maxRows,
			out: outLayout{rows: v.lg.Rows, draws: 1}}
		results, err := v.launchPlan(&pl, host, masks)
		if err != nil {
			return err
		}
		v.readRound(j, results)
	}
	return nil
}

// readRound takes scoring round j's results: the arg-max or draw of every node of the
// requests that walk by token, the log-probability of every scored child.
func (v *verifyCall) readRound(j int, results []byte) {
	res, vocab := v.res, v.lg.Vocab
	le := binary.LittleEndian
	f32 := func(off int) float32 { return math.Float32frombits(le.Uint32(results[off:])) }
	out := outLayout{rows: v.lg.Rows, draws: 1}
	for b, p := range v.params {
		if res.Errs[b] != nil {
			continue
		}
		f := v.first[b]
		token := byToken(p, vocab)
		for n := range len(v.trees[b].Tokens) + 1 {
			if !v.inRound(b, n, j, token) {
				continue
			}
			row := v.nodeRow(b, n)
			status := le.Uint32(results[out.status()+4*row:])
			if token {
				tok, err := rowResult(row, int32(le.Uint32(results[out.tokens()+4*row:])), status, vocab)
				if err != nil {
					res.Errs[b] = fmt.Errorf("request %d: %w", b, err)
					break
				}
				v.top[f+n] = tok
				if r := out.logprobs() + 16*row; p.Logprobs && !greedyRequest(p, vocab) {
					v.rec[f+n] = Logprob{Raw: f32(r), Processed: f32(r + 4), RawLSE: f32(r + 8), ProcessedLSE: f32(r + 12)}
				}
				continue
			}
			if _, err := rowResult(row, 0, status, vocab); err != nil {
				res.Errs[b] = fmt.Errorf("request %d: %w", b, err)
				break
			}
			c := v.child(b, n, j)
			v.nodeLP[f+1+c] = f32(out.logprobs() + 16*row + 4)
		}
	}
}

// walk decides every request's path: greedy requests follow the arg-max, filtered ones
// their draws, other sampled ones the acceptance rule; each ends at stop[b] with its
// rejected tokens listed.
func (v *verifyCall) walk() {
	s, res, vocab := v.s, v.res, v.lg.Vocab
	n := len(v.params)
	s.verifyStop = resized(s.verifyStop, 3*n)
	v.stop, v.rejStart, v.rejEnd = s.verifyStop[:n], s.verifyStop[n:2*n], s.verifyStop[2*n:]
	rejected := s.verifyRejected[:0]
	for b, p := range v.params {
		if res.Errs[b] != nil {
			continue
		}
		tr, f := v.trees[b], v.first[b]
		token := byToken(p, vocab)
		startTok, startNode := len(res.flat), len(res.flatNodes)
		cur := 0
		v.rejStart[b] = len(rejected)
	walk:
		for {
			kids := int(v.kids[f+cur])
			if token {
				top := v.top[f+cur]
				for j := range kids {
					c := v.child(b, cur, j)
					if tr.Tokens[c] == top {
						res.flat = append(res.flat, top)
						res.flatNodes = append(res.flatNodes, int32(c))
						cur = c + 1
						continue walk
					}
				}
				res.flat = append(res.flat, top)
				break
			}
			gone := 0.0 // the mass of the rejected siblings' tokens
			for j := range kids {
				c := v.child(b, cur, j)
				pc := math.Exp(float64(v.nodeLP[f+1+c]))
				for _, r := range rejected[v.rejStart[b]:] {
					if r == tr.Tokens[c] {
						pc = 0
					}
				}
				u := philox.SpeculativeUniform(v.seeds[b], p.Step+uint64(v.depth[f+cur]), uint32(j))
				if pc > 0 && u*(1-gone) < pc {
					res.flat = append(res.flat, tr.Tokens[c])
					res.flatNodes = append(res.flatNodes, int32(c))
					cur = c + 1
					rejected = rejected[:v.rejStart[b]]
					continue walk
				}
				if pc > 0 {
					gone += pc
					rejected = append(rejected, tr.Tokens[c])
				}
			}
			break
		}
		v.stop[b], v.rejEnd[b] = cur, len(rejected)
		res.Accepted[b] = len(res.flatNodes) - startNode
		res.Nodes[b] = res.flatNodes[startNode:len(res.flatNodes):len(res.flatNodes)]
		if !token {
			res.flat = append(res.flat, -1) // the draw round's token
		}
		res.Tokens[b] = res.flat[startTok:len(res.flat):len(res.flat)]
	}
	s.verifyRejected = rejected[:0]
	v.rejected = rejected
}

// drawRound draws the last token of every unfiltered sampled request at the node where
// its walk stopped: the first of its distinct Gumbel-max draws outside the rejected
// tokens.
func (v *verifyCall) drawRound() error {
	s, res, vocab := v.s, v.res, v.lg.Vocab
	var groups [numGroups]int
	for b, p := range v.params {
		if res.Errs[b] == nil && !byToken(p, vocab) {
			groups[groupDistinct]++
		}
	}
	if groups[groupDistinct] == 0 {
		return nil
	}
	host, err := s.scratch.paramsHost.bytes(s.dev, groups[groupDistinct]*RowParamsSize)
	if err != nil {
		return err
	}
	masks := s.hostMasks[:0]
	next := 0
	for b, p := range v.params {
		if res.Errs[b] != nil || byToken(p, vocab) {
			continue
		}
		q, row := v.nodeParams(b, v.stop[b]), v.nodeRow(b, v.stop[b])
		m := v.maskRow(q, row, &masks)
		flags := abi.FlagPerturbed | s.procs.flags(row, q)&^abi.FlagRecord
		draws := uint32(v.rejEnd[b]-v.rejStart[b]) + 1
		putRowParams(host[next*RowParamsSize:], row, RouteGumbel, q, vocab, q.Seed, flags, draws, m)
		next++
	}
	s.hostMasks = masks[:0]
	results, err := v.launch(groups, 1, host, masks)
	if err != nil {
		return err
	}
	le := binary.LittleEndian
	out := outLayout{rows: v.lg.Rows, draws: 1}
	for b, p := range v.params {
		if res.Errs[b] != nil || byToken(p, vocab) {
			continue
		}
		row := v.nodeRow(b, v.stop[b])
		rejected := v.rejected[v.rejStart[b]:v.rejEnd[b]]
		tok := int32(-1)
	draw:
		for z := range len(rejected) + 1 {
			o := 4 * (row*MaxTopLogprobs + z)
			t, err := distinctResult(row, z, int32(le.Uint32(results[out.distinctTokens()+o:])),
				math.Float32frombits(le.Uint32(results[out.distinctValues()+o:])), vocab)
			if err != nil {
				if z == 0 || !errors.Is(err, ErrTooFewTokens) {
					res.Errs[b] = fmt.Errorf("request %d: %w", b, err)
				} else {
					// Only rejected tokens have mass: they held all of it up to
					// rounding, so the last one rejected stands.
					tok = rejected[len(rejected)-1]
				}
				break
			}
			for _, r := range rejected {
				if t == r {
					continue draw
				}
			}
			tok = t
			break
		}
		if res.Errs[b] != nil {
			res.Tokens[b], res.Nodes[b] = nil, nil
			continue
		}
		res.Tokens[b][len(res.Tokens[b])-1] = tok
	}
	return nil
}

// recordRound scores every emitted token of the requests that ask for log-probabilities
// (Params.Logprobs) at its position's row: one more round, only when asked. A filtered
// request's tokens are its nodes' draws, whose records the draws wrote already; in
// VerifyChainProbs they are scored too, and keptRecordRound puts them under the filtered
// law.
func (v *verifyCall) recordRound() error {
	s, res, vocab := v.s, v.res, v.lg.Vocab
	var groups [numGroups]int
	records := 0
	for b, p := range v.params {
		if res.Errs[b] != nil || !p.Logprobs {
			continue
		}
		records += len(res.Tokens[b])
		if v.scored(p) {
			groups[groupScore] += len(res.Tokens[b])
		}
	}
	if records == 0 {
		return nil
	}
	var results []byte
	if groups[groupScore] > 0 {
		host, err := s.scratch.paramsHost.bytes(s.dev, groups[groupScore]*RowParamsSize)
		if err != nil {
			return err
		}
		masks := s.hostMasks[:0]
		next := 0
		for b, p := range v.params {
			if res.Errs[b] != nil || !p.Logprobs || !v.scored(p) {
				continue
			}
			for i, tok := range res.Tokens[b] {
				q, row := v.nodeParams(b, v.emitter(b, i)), v.nodeRow(b, v.emitter(b, i))
				if greedyRequest(p, vocab) {
					q.Temperature = 0 // scored at 1, as greedy records are
				}
				m := v.maskRow(q, row, &masks)
				rec := host[next*RowParamsSize:]
				putRowParams(rec, row, RouteGumbel, q, vocab, q.Seed, s.procs.flags(row, q)&^abi.FlagRecord, 0, m)
				binary.LittleEndian.PutUint32(rec[abi.TokenOffset:], uint32(tok))
				next++
			}
		}
		s.hostMasks = masks[:0]
		if results, err = v.launch(groups, 1, host, masks); err != nil {
			return err
		}
	}
	le := binary.LittleEndian
	f32 := func(off int) float32 { return math.Float32frombits(le.Uint32(results[off:])) }
	out := outLayout{rows: v.lg.Rows, draws: 1}
	res.flatLogprobs = resized(res.flatLogprobs, records)[:0]
	for b, p := range v.params {
		if res.Errs[b] != nil || !p.Logprobs {
			continue
		}
		start := len(res.flatLogprobs)
		for i := range res.Tokens[b] {
			n := v.emitter(b, i)
			if !v.scored(p) {
				res.flatLogprobs = append(res.flatLogprobs, v.rec[v.first[b]+n])
				continue
			}
			row := v.nodeRow(b, n)
			lp := nanLogprob
			if _, err := rowResult(row, 0, le.Uint32(results[out.status()+4*row:]), vocab); err == nil {
				r := out.logprobs() + 16*row
				lp = Logprob{Raw: f32(r), Processed: f32(r + 4), RawLSE: f32(r + 8), ProcessedLSE: f32(r + 12)}
			}
			res.flatLogprobs = append(res.flatLogprobs, lp)
		}
		res.Logprobs[b] = res.flatLogprobs[start:len(res.flatLogprobs):len(res.flatLogprobs)]
	}
	return v.keptRecordRound()
}

// scored reports whether recordRound scores request p's emitted tokens: every request
// but VerifyChain's filtered ones, whose draws wrote their records.
func (v *verifyCall) scored(p Params) bool { return v.probs || !drawnRequest(p, v.lg.Vocab) }

// keptRecordRound gives the emitted tokens of VerifyChainProbs's filtered requests that
// ask for log-probabilities the processed words Sample's record has on the filtered
// route: the filtered kernel's kept-set descriptor of each token (FlagKeptSet with the
// token) holds word 1 as that record computes it, and m and ln(S·2^-F), from which
// word 3 is m·invT + ln(S·2^-F); the raw words stay score's. One more round, only when
// asked.
func (v *verifyCall) keptRecordRound() error {
	s, res, vocab := v.s, v.res, v.lg.Vocab
	if !v.probs {
		return nil
	}
	kept := func(b int, p Params) bool { return res.Errs[b] == nil && p.Logprobs && drawnRequest(p, vocab) }
	var groups [numGroups]int
	maxRows := 0
	for b, p := range v.params {
		if !kept(b, p) {
			continue
		}
		groups[groupFiltered] += len(res.Tokens[b])
		if needsRowMax(p, vocab) {
			maxRows += len(res.Tokens[b])
		}
	}
	if groups[groupFiltered] == 0 {
		return nil
	}
	host, err := s.scratch.paramsHost.bytes(s.dev, groups[groupFiltered]*RowParamsSize)
	if err != nil {
		return err
	}
	masks := s.hostMasks[:0]
	next := 0
	for b, p := range v.params {
		if !kept(b, p) {
			continue
		}
		for i, tok := range res.Tokens[b] {
			q, row := v.nodeParams(b, v.emitter(b, i)), v.nodeRow(b, v.emitter(b, i))
			m := v.maskRow(q, row, &masks)
			rec := host[next*RowParamsSize:]
			flags := s.procs.flags(row, q)&^abi.FlagRecord | abi.FlagLogprobs | abi.FlagKeptSet
			putRowParams(rec, row, RouteFiltered, q, vocab, q.Seed, flags, 0, m)
			binary.LittleEndian.PutUint32(rec[abi.TokenOffset:], uint32(tok))
			next++
		}
	}
	s.hostMasks = masks[:0]
	pl := plan{logits: v.lg, stride: v.stride, draws: 1, groups: groups, maxRows: maxRows,
		out: outLayout{rows: v.lg.Rows, draws: 1}}
	results, err := v.launchPlan(&pl, host, masks)
	if err != nil {
		return err
	}
	le := binary.LittleEndian
	f32 := func(off int) float32 { return math.Float32frombits(le.Uint32(results[off:])) }
	out := outLayout{rows: v.lg.Rows, draws: 1}
	for b, p := range v.params {
		if !kept(b, p) {
			continue
		}
		invT := float64(float32(1 / p.Temperature))
		for i := range res.Tokens[b] {
			row := v.nodeRow(b, v.emitter(b, i))
			lp := &res.Logprobs[b][i]
			if _, err := rowResult(row, 0, le.Uint32(results[out.status()+4*row:]), vocab); err != nil {
				*lp = nanLogprob
				continue
			}
			d := out.logprobs() + 16*row
			lp.Processed = f32(d + 4)
			lp.ProcessedLSE = float32(float64(f32(d+8))*invT + float64(f32(d+12)))
		}
	}
	return nil
}

// emitter is the node that emits request b's i-th token: the root the first, then each
// accepted node the next.
func (v *verifyCall) emitter(b, i int) int {
	if i == 0 {
		return 0
	}
	return int(v.res.Nodes[b][i-1]) + 1
}
