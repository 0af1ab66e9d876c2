package sampler

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
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

// VerifyChain verifies chains of draft tokens from a deterministic drafter (n-gram or
// prompt lookup, a greedy draft model) against the target model's logits, exactly: the
// emitted tokens of every request are the ones Sample draws one step at a time
// (temperature, top-k, top-p, min-p, logit processors and token bitmasks of params[b]
// and of its logits rows), so they follow the target distribution. It is VerifyTree
// for trees without branches: draft k's parent is draft k-1, and position k is logits
// row Row+k.
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
// The drafter is deterministic (each draft a point mass). Each node's token is drawn as
// Sample draws it at that position: the request's route (greedy arg-max, Gumbel-max,
// the filtered route for top-k, top-p or min-p, the categorical one with
// MLXCEL_SAMPLING_GUMBEL=0), its seed and step Step+depth. The walk follows the child
// whose token is the draw and emits the draw where no child has it (after a leaf, the
// bonus token). With point-mass drafts this is the rejection rule's law: child t is
// accepted with probability p(t), and the last token is drawn from p without the
// children's tokens. The emitted tokens and their records are Sample's, step by step:
// speculative decoding with gumbel gives the tokens of decoding one step at a time
// with the same seeds, and greedy requests those of greedy decoding. Every noise word
// is keyed by the request's seed and the decode position, never by its place in the
// batch.
//
// The call runs one round on the device (a draw at every node; its log-probability
// record too when Params.Logprobs asks) and waits once. Penalties read the token
// counts as they are at the call (drafts are not counted); nothing is recorded or
// advanced. A tree that does not fit (rows outside the logits or shared, a parent that
// is not an earlier node, a token outside the vocabulary) fails with ErrDraft; the
// others are verified. A node whose row cannot be sampled (NaN or +Inf logits, no
// allowed token) fails its request only when the walk reaches it.
func (s *Sampler) VerifyTree(logits Logits, params []Params, trees []DraftTree, res *Verified) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.verify(logits, params, trees, res)
}

// verify is VerifyChain and VerifyTree with the lock held.
func (s *Sampler) verify(logits Logits, params []Params, trees []DraftTree, res *Verified) error {
	v, err := s.startVerify(logits, params, trees, res, false)
	if err != nil {
		return err
	}
	if err := v.drawRound(); err != nil {
		return err
	}
	v.walk()
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
	if probs && s.scoreErr != nil {
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
	// first[b] is request b's first entry in top, status, rec, depth and kids (one per
	// node, the root first): VerifyChain's and VerifyTree's draw at each node (arg-max
	// for greedy requests), its row status and record, the node's depth and its child
	// count.
	first  []int
	top    []int32
	status []uint32
	rec    []Logprob
	depth  []int32
	kids   []int32
}

// greedyRequest reports whether request p verifies by arg-max.
func greedyRequest(p Params, vocab int) bool {
	return route(p, vocab, true) == RouteGreedy
}

// drawnRequest reports whether request p verifies with draft probabilities on the
// filtered route (VerifyChainProbs with top-k, top-p or min-p).
func drawnRequest(p Params, vocab int) bool {
	return !greedyRequest(p, vocab) && filtered(p, vocab)
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
	s.verifyDepth = resized(s.verifyDepth, total)
	s.verifyKids = resized(s.verifyKids, total)
	s.verifyTop = resized(s.verifyTop, total)
	s.verifyStatus = resized(s.verifyStatus, total)
	s.verifyRec = resized(s.verifyRec, total)
	v.depth, v.kids, v.top, v.status, v.rec = s.verifyDepth, s.verifyKids, s.verifyTop, s.verifyStatus, s.verifyRec
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

// launch runs one round of one draw per row: its RowParams already written in host
// (maxRows of them filtered rows that need their row maximum), the host masks listed in
// masks.
func (v *verifyCall) launch(groups [numGroups]int, maxRows int, host []byte, masks [][]int32) ([]byte, error) {
	pl := plan{logits: v.lg, stride: v.stride, draws: 1, groups: groups, maxRows: maxRows,
		out: outLayout{rows: v.lg.Rows, draws: 1}}
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

// drawRound draws, in one round, every node's token as Sample draws it at that
// position (the arg-max for greedy requests), with its record when the request asks
// for log-probabilities.
func (v *verifyCall) drawRound() error {
	s, res, vocab := v.s, v.res, v.lg.Vocab
	var groups [numGroups]int
	maxRows := 0
	for b, p := range v.params {
		if res.Errs[b] != nil {
			continue
		}
		nodes := len(v.trees[b].Tokens) + 1
		g := groupOf(route(p, vocab, s.set.Gumbel))
		groups[g] += nodes
		if g == groupFiltered && needsRowMax(p, vocab) {
			maxRows += nodes // filter_max runs first for them
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
		r := route(p, vocab, s.set.Gumbel)
		g := groupOf(r)
		for n := range len(v.trees[b].Tokens) + 1 {
			q, row := v.nodeParams(b, n), v.nodeRow(b, n)
			m := v.maskRow(q, row, &masks)
			flags := s.procs.flags(row, q) &^ abi.FlagRecord
			if p.Logprobs {
				flags |= abi.FlagLogprobs // any node's draw may be emitted
			}
			putRowParams(host[next[g]*RowParamsSize:], row, r, q, vocab, q.Seed, flags, 0, m)
			next[g]++
		}
	}
	s.hostMasks = masks[:0]
	results, err := v.launch(groups, maxRows, host, masks)
	if err != nil {
		return err
	}
	le := binary.LittleEndian
	out := outLayout{rows: v.lg.Rows, draws: 1}
	for b, p := range v.params {
		if res.Errs[b] != nil {
			continue
		}
		f := v.first[b]
		for n := range len(v.trees[b].Tokens) + 1 {
			row := v.nodeRow(b, n)
			v.top[f+n] = int32(le.Uint32(results[out.tokens()+4*row:]))
			v.status[f+n] = le.Uint32(results[out.status()+4*row:])
			if r := out.logprobs() + 16*row; p.Logprobs {
				v.rec[f+n] = recordAt(results, r)
			}
		}
	}
	return nil
}

// walk follows every request's draws from the root: into the child whose token is the
// node's draw, emitting it, until a node where no child has it emits its draw. A node
// whose row failed ends the request with its error when the walk reaches it.
func (v *verifyCall) walk() {
	res, vocab := v.res, v.lg.Vocab
	for b := range v.params {
		if res.Errs[b] != nil {
			continue
		}
		tr, f := v.trees[b], v.first[b]
		startTok, startNode := len(res.flat), len(res.flatNodes)
		cur := 0
	walk:
		for {
			tok, err := rowResult(v.nodeRow(b, cur), v.top[f+cur], v.status[f+cur], vocab)
			if err != nil {
				res.Errs[b] = fmt.Errorf("request %d: %w", b, err)
				res.flat, res.flatNodes = res.flat[:startTok], res.flatNodes[:startNode]
				break
			}
			res.flat = append(res.flat, tok)
			for j := range int(v.kids[f+cur]) {
				if c := v.child(b, cur, j); tr.Tokens[c] == tok {
					res.flatNodes = append(res.flatNodes, int32(c))
					cur = c + 1
					continue walk
				}
			}
			break
		}
		if res.Errs[b] != nil {
			continue
		}
		res.Accepted[b] = len(res.flatNodes) - startNode
		res.Nodes[b] = res.flatNodes[startNode:len(res.flatNodes):len(res.flatNodes)]
		res.Tokens[b] = res.flat[startTok:len(res.flat):len(res.flat)]
	}
}

// recordRound gives the emitted tokens of the requests that ask for log-probabilities
// (Params.Logprobs) their records. VerifyChain's and VerifyTree's are the draws' own.
// VerifyChainProbs scores every emitted token at its position's row, one more round,
// and keptRecordRound puts a filtered request's under the filtered law.
func (v *verifyCall) recordRound() error {
	s, res, vocab := v.s, v.res, v.lg.Vocab
	var groups [numGroups]int
	records := 0
	for b, p := range v.params {
		if res.Errs[b] != nil || !p.Logprobs {
			continue
		}
		records += len(res.Tokens[b])
		if v.probs {
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
			if res.Errs[b] != nil || !p.Logprobs {
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
		if results, err = v.launch(groups, 0, host, masks); err != nil {
			return err
		}
	}
	le := binary.LittleEndian
	out := outLayout{rows: v.lg.Rows, draws: 1}
	res.flatLogprobs = resized(res.flatLogprobs, records)[:0]
	for b, p := range v.params {
		if res.Errs[b] != nil || !p.Logprobs {
			continue
		}
		start := len(res.flatLogprobs)
		for i := range res.Tokens[b] {
			n := v.emitter(b, i)
			if !v.probs {
				res.flatLogprobs = append(res.flatLogprobs, v.rec[v.first[b]+n])
				continue
			}
			row := v.nodeRow(b, n)
			lp := nanLogprob
			if _, err := rowResult(row, 0, le.Uint32(results[out.status()+4*row:]), vocab); err == nil {
				r := out.logprobs() + 16*row
				lp = recordAt(results, r)
			}
			res.flatLogprobs = append(res.flatLogprobs, lp)
		}
		res.Logprobs[b] = res.flatLogprobs[start:len(res.flatLogprobs):len(res.flatLogprobs)]
	}
	return v.keptRecordRound()
}

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
	results, err := v.launch(groups, maxRows, host, masks)
	if err != nil {
		return err
	}
	le := binary.LittleEndian
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
			lp.Processed = f32At(results, d+4)
			lp.ProcessedLSE = float32(float64(f32At(results, d+8))*invT + float64(f32At(results, d+12)))
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
