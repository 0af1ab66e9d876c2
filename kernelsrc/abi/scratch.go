package abi

import "math"

// Launch is the shape of one launch as the buffers see it: n launch rows (grid.y), S
// blocks per row (grid.x) and D draws per row (grid.z; topn draws once).
type Launch struct {
	Rows, Split, Draws int
}

// draws is D, at least 1; topn and score launches count one.
func (l Launch) draws(family string) int {
	if family == TopN || family == Score || family == Residual || family == ShardSelect || l.Draws < 1 {
		return 1
	}
	return l.Draws
}

// PartialsWords is the uint64 words of partials a launch of the family needs.
//
// gumbel_argmax: block p = (z·n + y)·S + x keeps its packed key at word p, its raw and
// processed log-sum-exp pairs at words n·D·S + 2p and + 1, and its winner's payload at
// 3·n·D·S + p. topn: block p = y·S + x keeps TopNStride words from TopNStride·p.
// filter_max: block x of launch row y keeps its largest processed key at MaxWord(y, x).
// filtered: the filter_max words, then FilterStride words per block p = (z·n + y)·S + x
// from FilterWord(y, z, x, 0): its candidates, then FilterMeta words. score: block
// p = y·S + x keeps ScoreStride words from ScoreWord(y, x, 0): its raw and processed
// log-sum-exp pairs and its count. residual: block p = y·S + x keeps ResidualStride
// words from ResidualWord(y, x, 0). categorical uses none.
func (l Launch) PartialsWords(family string) int {
	s := max(l.Split, 1)
	switch family {
	case GumbelArgmax:
		return 4 * l.Rows * l.draws(family) * s
	case TopN:
		return TopNStride * l.Rows * s
	case FilterMax:
		return l.Rows * s
	case Filtered:
		return l.Rows*s + l.Rows*l.draws(family)*s*l.FilterStride()
	case Score:
		return ScoreStride * l.Rows * s
	case Residual:
		return ResidualStride * l.Rows * s
	}
	return 0
}

// ResidualStride is the partials words of one residual block: its packed winner over
// the residual, then its packed winner over p (the fallback when the residual holds no
// mass).
const ResidualStride = 2

// ChainSlack is the RowParams records a residual launch's params buffer holds past its
// last record (their contents unread for any result): a kernel may then read a warp's
// width of records from any record of a chain while it looks for the chain's end.
const ChainSlack = 64

// ResidualWord is word j (0 to ResidualStride-1) of residual block x of launch row (chain)
// y.
func (l Launch) ResidualWord(y, x, j int) int { return ResidualStride*(y*l.Split+x) + j }

// ScoreStride is the partials words of one score block: its raw and processed
// log-sum-exp pairs, then the count of its logits at or above the token's.
const ScoreStride = 3

// ScoreWord is word j (0 to ScoreStride-1) of score block x of launch row y.
func (l Launch) ScoreWord(y, x, j int) int { return ScoreStride*(y*l.Split+x) + j }

// FilterCands is the candidates one block of a filtered launch may publish:
// FilterList/S, and at least FilterMinCands.
func (l Launch) FilterCands() int { return max(FilterMinCands, FilterList/max(l.Split, 1)) }

// FilterStride is the partials words of one filtered block: its candidates and its
// FilterMeta words.
func (l Launch) FilterStride() int { return l.FilterCands() + FilterMeta }

// MaxWord is the partials word of filter_max block x of launch row y.
func (l Launch) MaxWord(y, x int) int { return y*l.Split + x }

// FilterWord is word j of filtered block x's words for draw z of launch row y: its
// candidates for j < FilterCands, then its FilterMeta words.
func (l Launch) FilterWord(y, z, x, j int) int {
	return l.Rows*l.Split + l.KeyWord(y, z, x)*l.FilterStride() + j
}

// CountersWords is the uint32 words of counters a launch of the family needs: a pair per
// draw of each row (arrivals, then the ORed Seen flags) and, for the sampling kernels,
// one per row counting its finished draws.
func (l Launch) CountersWords(family string) int {
	d := l.draws(family)
	switch family {
	case TopN, Score, Residual:
		return 2 * l.Rows
	case FilterMax, ShardSelect:
		return 0
	}
	return 2*l.Rows*d + l.Rows
}

// KeyWord is the partials word of block x's packed key for draw z of launch row y.
func (l Launch) KeyWord(y, z, x int) int {
	return (z*l.Rows+y)*l.Split + x
}

// PairWord is the partials word of block x's log-sum-exp pair of set 0 (raw) or 1
// (processed) for draw z of launch row y.
func (l Launch) PairWord(y, z, x, set int) int {
	return l.Rows*l.draws(GumbelArgmax)*l.Split + 2*l.KeyWord(y, z, x) + set
}

// PayloadWord is the partials word of block x's winner's raw logit (low half) and value
// (high half) for draw z of launch row y.
func (l Launch) PayloadWord(y, z, x int) int {
	return 3*l.Rows*l.draws(GumbelArgmax)*l.Split + l.KeyWord(y, z, x)
}

// TopNWord is word j (0 to TopNStride-1) of topn block x of launch row y.
func (l Launch) TopNWord(y, x, j int) int {
	return TopNStride*(y*l.Split+x) + j
}

// DrawCounter is the first counters word of draw z of launch row y: the arrivals; the
// next word holds the ORed Seen flags.
func (l Launch) DrawCounter(y, z int) int { return 2 * (z*l.Rows + y) }

// RowCounter is the counters word that counts launch row y's finished draws.
func (l Launch) RowCounter(y int) int { return 2*l.Rows*l.draws(GumbelArgmax) + y }

// SelectQueryWord is the first of launch row y's two query words in the shard argument
// of a shard_select launch.
func (l Launch) SelectQueryWord(y int) int { return 2 * y }

// SelectHistWord is launch row y's count of bin b in the shard argument of a
// shard_select launch; its mass follows SelectBins words later.
func (l Launch) SelectHistWord(y, b int) int { return 2*l.Rows + 2*SelectBins*y + b }

// SelectKeyWord is launch row y's key word in the shard argument of a shard_select
// launch.
func (l Launch) SelectKeyWord(y int) int { return 2*l.Rows + 2*SelectBins*l.Rows + y }

// SelectWords is the uint64 words of the shard argument of a shard_select launch: the
// queries, then the histograms, then the key words.
func (l Launch) SelectWords() int { return (2 + 2*SelectBins + 1) * l.Rows }

// SelectQuery is a shard_select query: which elements of a row match and what they add
// up (ABI.md, "shard_select").
type SelectQuery struct {
	// Floor: a matching key is at least Floor.
	Floor uint32
	// Prefix: a matching key's bits above Shift+8 are Prefix's.
	Prefix uint32
	// M is the largest processed logit of the whole row, over every shard.
	M float32
	// Shift is the lowest bit of the histogram's digit: 24, 16, 8 or 0.
	Shift uint8
	// F is the fixed-point scale of the weights, 63 - bitlen(V) for the whole
	// vocabulary V.
	F uint8
	// MinP and Draw are SelectMinP and SelectDraw.
	MinP, Draw bool
}

// Words encodes q as the two query words.
func (q SelectQuery) Words() (w0, w1 uint64) {
	w0 = uint64(q.Prefix)<<32 | uint64(q.Floor)
	w1 = uint64(q.F)<<40 | uint64(q.Shift)<<32 | uint64(math.Float32bits(q.M))
	if q.MinP {
		w1 |= SelectMinP
	}
	if q.Draw {
		w1 |= SelectDraw
	}
	return w0, w1
}

// DecodeSelectQuery reads a query from its two words.
func DecodeSelectQuery(w0, w1 uint64) SelectQuery {
	return SelectQuery{
		Floor: uint32(w0), Prefix: uint32(w0 >> 32), M: math.Float32frombits(uint32(w1)),
		Shift: uint8(w1 >> 32), F: uint8(w1 >> 40), MinP: w1&SelectMinP != 0, Draw: w1&SelectDraw != 0,
	}
}

// Slots is the output slots of rows logits rows with draws draws each: row r's draw z
// writes slot r·draws + z of tokens, status and logprobs.
func Slots(rows, draws int) int { return rows * max(draws, 1) }

// TopNSlots is the entries of the topn outputs for rows logits rows: row r's entry j is
// r·MaxTopN + j.
func TopNSlots(rows int) int { return rows * MaxTopN }
