package gokernel

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/gumbel-go/gumbel/runtime"
)

// selectRun launches shard_select over columns [lo, hi) of p's rows with one query per
// launch row and returns the shard buffer.
func selectRun(t *testing.T, p *problem, lo, hi int, queries []abi.SelectQuery, init uint64) []uint64 {
	t.Helper()
	sub := &problem{d: p.d, vocab: hi - lo, stride: hi - lo, params: append([]abi.RowParams(nil), p.params...)}
	for _, row := range p.rows {
		sub.rows = append(sub.rows, append([]float32(nil), row[lo:hi]...))
	}
	b := sub.layout(1)
	lay := abi.Launch{Rows: len(p.params)}
	b.shard = make([]uint64, lay.SelectWords())
	for i := range b.shard {
		b.shard[i] = init
	}
	for y, q := range queries {
		b.shard[lay.SelectQueryWord(y)], b.shard[lay.SelectQueryWord(y)+1] = q.Words()
	}
	b.vocabOffset = uint32(lo)
	grid := runtime.Dim3{X: 3, Y: len(p.params), Z: 1}
	launch(t, func(bc *runtime.BlockContext) { shardSelect(bc, p.d) }, grid, b.args(sub.stride, sub.vocab), onDevice, nil)
	return b.shard
}

// TestShardSelectShardsAdd: the histograms of two shards add up to the whole row's and
// the larger of their keys is the whole row's, for every digit, floors, prefixes, min-p
// and the draw; queries are left as they were.
func TestShardSelectShardsAdd(t *testing.T) {
	const vocab = 1003
	r := rand.New(rand.NewPCG(5, 6))
	for _, d := range dtypes {
		p := &problem{d: d, vocab: vocab, stride: vocab}
		var queries []abi.SelectQuery
		for y := range 8 {
			row := make([]float32, vocab)
			for i := range row {
				row[i] = float32(r.NormFloat64() * 3)
			}
			row[7], row[900] = float32(math.Inf(-1)), float32(math.Inf(-1))
			p.rows = append(p.rows, row)
			p.params = append(p.params, abi.RowParams{Row: uint32(y), Temperature: 0.7, Seed: uint64(y), Step: 3,
				MinP: []float32{0, 0.05, 1, 1e-30}[y%4], Flags: abi.FlagShard})
			k := orderKey(row[r.IntN(vocab)])
			shift := uint8(24 - 8*(y%4))
			m := float32(math.Inf(-1))
			for _, x := range row {
				m = max(m, x)
			}
			queries = append(queries, abi.SelectQuery{Floor: []uint32{0, k}[y%2], Prefix: k, Shift: shift,
				M: m, F: 53, MinP: y%3 != 0, Draw: y%2 == 0})
		}
		lay := abi.Launch{Rows: len(p.params)}
		whole := selectRun(t, p, 0, vocab, queries, 0)
		a := selectRun(t, p, 0, 500, queries, 0)
		b := selectRun(t, p, 500, vocab, queries, 0)
		nonzero := 0
		for y := range queries {
			for bin := range 2 * abi.SelectBins {
				w := lay.SelectHistWord(y, bin)
				require.Equal(t, whole[w], a[w]+b[w], "%v row %d bin %d", d, y, bin)
				if whole[w] != 0 {
					nonzero++
				}
			}
			k := lay.SelectKeyWord(y)
			require.Equal(t, whole[k], max(a[k], b[k]), "%v row %d", d, y)
			matched := uint64(0)
			for bin := range abi.SelectBins {
				matched += whole[lay.SelectHistWord(y, bin)]
			}
			if queries[y].Draw {
				assert.Equal(t, matched != 0, whole[k] != 0, "%v row %d draws when an element matches", d, y)
			} else {
				assert.Zero(t, whole[k], "%v row %d has no draw", d, y)
			}
			w0, w1 := queries[y].Words()
			assert.Equal(t, []uint64{w0, w1}, whole[lay.SelectQueryWord(y):][:2])
		}
		assert.Greater(t, nonzero, 8*4, "%v: the histograms count elements", d)
	}
}

// TestShardSelectRefusesBadRows: a row that breaks shard_select's rules raises its key
// word to a failed key and adds nothing; the good row beside it is served.
func TestShardSelectRefusesBadRows(t *testing.T) {
	const vocab = 64
	good := abi.RowParams{Temperature: 1, Flags: abi.FlagShard}
	q := abi.SelectQuery{Shift: 24, M: 1, F: 50, Draw: true}
	for _, tc := range []struct {
		name string
		p    func(*abi.RowParams)
		q    func(*abi.SelectQuery)
	}{
		{"no FlagShard", func(p *abi.RowParams) { p.Flags = 0 }, nil},
		{"greedy", func(p *abi.RowParams) { p.Temperature = 0 }, nil},
		{"NaN temperature", func(p *abi.RowParams) { p.Temperature = float32(math.NaN()) }, nil},
		{"LOGPROBS", func(p *abi.RowParams) { p.Flags |= abi.FlagLogprobs }, nil},
		{"RECORD", func(p *abi.RowParams) { p.Flags |= abi.FlagRecord }, nil},
		{"reserved flag", func(p *abi.RowParams) { p.Flags |= 1 << 20 }, nil},
		{"shift 12", nil, func(q *abi.SelectQuery) { q.Shift = 12 }},
		{"shift 32", nil, func(q *abi.SelectQuery) { q.Shift = 32 }},
		{"F 63", nil, func(q *abi.SelectQuery) { q.F = 63 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			row := make([]float32, vocab)
			for i := range row {
				row[i] = float32(i % 5)
			}
			bad, bq := good, q
			bad.Row = 1
			if tc.p != nil {
				tc.p(&bad)
			}
			if tc.q != nil {
				tc.q(&bq)
			}
			p := &problem{d: abi.F32, vocab: vocab, stride: vocab, rows: [][]float32{row, row},
				params: []abi.RowParams{good, bad}}
			out := selectRun(t, p, 0, vocab, []abi.SelectQuery{q, bq}, 0)
			lay := abi.Launch{Rows: 2}
			assert.Equal(t, abi.ShardKeyFailed|uint64(abi.StatusBadParams), out[lay.SelectKeyWord(1)])
			assert.Less(t, out[lay.SelectKeyWord(0)], abi.ShardKeyFailed, "the good row draws")
			for bin := range 2 * abi.SelectBins {
				assert.Zero(t, out[lay.SelectHistWord(1, bin)], "bin %d", bin)
			}
		})
	}
	// A misaligned offset fails every row of the launch.
	p := &problem{d: abi.F32, vocab: vocab, stride: vocab, rows: [][]float32{make([]float32, vocab)},
		params: []abi.RowParams{good}}
	out := selectRun(t, p, 2, vocab, []abi.SelectQuery{q}, 0)
	assert.Equal(t, abi.ShardKeyFailed|uint64(abi.StatusBadParams), out[abi.Launch{Rows: 1}.SelectKeyWord(0)])
}
