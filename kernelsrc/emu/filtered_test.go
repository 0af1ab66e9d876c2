package emu

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/half"
	"github.com/gumbel-go/gumbel/kernelsrc/abi"
)

// This file tests the filtered route (filter_max, then filtered: ../cuda/filtered.cuh)
// against the Go edition, which filters the whole row in block 0 of each draw. The CUDA
// edition's blocks publish their largest keys and the largest key each left out; the
// row's last block draws on that list when it provably holds the kept set, and otherwise
// runs the categorical kernel's one-block path over the row. The driver reports which
// way each draw went (pathList, pathRow), so the test can require both: LLM-shaped rows
// (a normal body of standard deviation 2.5 and a few strong logits of 12 to 18) with
// top-k up to 50 take the list, flat rows (equal logits with any filter, or a spread of
// 1e-3 with top-p alone) the row (see probe). A second run shrinks the candidate lists
// (testdata/shadow/abi.h) so that the same LLM rows fall back, and must give the same
// answers.

// strongRow is an LLM-shaped row: bodyRow plus one to six strong logits (12 to 18).
func strongRow(r *rand.Rand, v int) []float32 {
	row := bodyRow(r, v)
	for range 1 + r.IntN(6) {
		row[r.IntN(v)] = 12 + 6*r.Float32()
	}
	return row
}

// flatRows is flatRow as a row shape: constant, or spread by 1e-3 or 0.05.
func flatRows(r *rand.Rand, v int) []float32 { return flatRow(r, v, 1) }

// faintRow is constant but for a spread of 1e-3: every element is a candidate.
func faintRow(r *rand.Rand, v int) []float32 {
	row := make([]float32, v)
	c := float32(r.NormFloat64() * 4)
	for i := range row {
		row[i] = c + float32(r.NormFloat64()*1e-3)
	}
	return row
}

// filteredShapes are the workload's rows: mostly LLM-shaped, then ties (at the k-th
// value, and across blocks), flat rows, masked and sparse rows (k above the finite
// count), and the rows of every status.
var filteredShapes = []func(*rand.Rand, int) []float32{
	strongRow, strongRow, strongRow, strongRow, llmRow, steppedRow, tiedRow, equalRow, flatRows, maskedRow,
	sparseRow, farRow, zeroRow, hugeRow, nanRow, posInfRow, negInfRow,
}

// filterConfig is a row's filters; k < 0 stands for V + k.
type filterConfig struct {
	k     int
	p, mp float32
}

// kOff is a top-k at or above every vocabulary: no top-k.
const kOff = 1<<31 - 1

var filterConfigs = []filterConfig{
	{50, 0.9, 0}, {50, 0.9, 0}, // the LLM serving default
	{1, 0, 0}, {2, 0, 0}, {20, 0, 0}, {50, 0, 0}, {1000, 0, 0}, {-1, 0, 0}, // top-k alone
	{0, 0.5, 0}, {0, 0.9, 0}, {0, 0.95, 0}, {0, 0.999, 0}, // top-p alone
	{0, 0, 0.05}, {0, 0, 0.5}, {0, 0, 1}, // min-p alone
	{50, 0.9, 0.05}, {2, 0.5, 0.5}, {1000, 0.95, 0.05}, {20, 0.999, 1}, // all three
	{0, 0.9, 0.05}, {50, 0, 0.05}, {-1, 0.95, 0}, // two of them
	{kOff, 1, 0}, {0, 0, 0}, // none: the kept set is the row (not a row the sampler routes here)
}

func (c filterConfig) apply(p *rowParams, v int) {
	k := c.k
	if k < 0 {
		k = max(v+k, 0)
	}
	p.TopK, p.TopP, p.MinP = uint32(k), c.p, c.mp
}

// filteredShape is a launch shape of the workload: S blocks per row of block threads in
// warps of warp lanes.
type filteredShape struct{ s, block, warp int }

// filteredBlocks are the block shapes the workload draws from (32 to 256 threads; one
// launch below runs 1024).
var filteredBlocks = [][2]int{{32, 8}, {32, 16}, {64, 32}, {96, 32}, {128, 64}, {256, 32}}

// routeFlags makes some rows ROUTED: most to the filtered route (FILTERED), which must
// sample them, some to gumbel_argmax or categorical, which it must leave alone.
func routeFlags(r *rand.Rand, p *rowParams) {
	switch r.IntN(10) {
	case 0, 1:
		p.Flags |= abi.FlagRouted | abi.FlagFiltered
	case 2:
		p.Flags |= abi.FlagRouted
	case 3:
		p.Flags |= abi.FlagRouted | abi.FlagCategorical
	}
}

// newFiltered is a filtered-route launch of the given shape with rows of shapes, filters
// drawn from configs, and (half the time) logit processors.
func newFiltered(r *rand.Rand, dt, v int, sh filteredShape, d, slots int, shapes []func(*rand.Rand, int) []float32,
	configs []filterConfig, processors bool) *launch {
	l := &launch{kernel: kernelFiltered, dtype: dt, gridX: sh.s, gridZ: d, block: sh.block, warp: sh.warp, vocab: v,
		stride: stride(r, v), slack: r.IntN(16), slots: slots}
	l.name = fmt.Sprintf("filtered dtype=%d S=%d D=%d V=%d T=%d warp=%d", dt, sh.s, d, v, sh.block, sh.warp)
	l.fillWith(r, shapes)
	if processors {
		l.withProcessors(r)
		l.name += " processors"
	}
	l.logprobs = true
	l.rows(r, func(p *rowParams) {
		configs[r.IntN(len(configs))].apply(p, v)
		if l.bias != nil {
			l.featureFlags(r, p)
		} else if r.IntN(2) == 0 {
			p.Flags |= abi.FlagLogprobs
		}
		if r.IntN(4) == 0 {
			// The kept set's descriptor in place of the record, for a token that is
			// sometimes past V.
			p.Flags |= abi.FlagLogprobs | abi.FlagKeptSet
			p.Token = uint32(r.IntN(v + 1))
		}
		if r.IntN(25) == 0 {
			p.Flags |= 1 << 14 // a reserved bit: bad parameters
		}
		routeFlags(r, p)
	})
	return l
}

// filteredLaunches is the route's workload: every dtype, S in {1, 2, 5, 33}, D in {1, 3},
// vocabularies of 37 and 1000 (several rows each) and 151936 (few rows), rows with top-k
// above their finite count, launches whose every row applies the bitmask, the probes
// whose paths TestFilteredMatchesGoEdition checks, and rows whose only processors are
// masks over aligned chunks of several trips.
func filteredLaunches(r *rand.Rand) []*launch {
	var ls []*launch
	for dt := range 3 {
		for _, c := range []struct{ v, s int }{{37, 1}, {37, 2}, {37, 5}, {1000, 1}, {1000, 2}, {1000, 5}, {1000, 33}} {
			for d := 1; d <= 3; d += 2 {
				b := filteredBlocks[r.IntN(len(filteredBlocks))]
				if c.s == 33 {
					b = [2]int{32, 8} // many blocks: keep each cheap
				}
				ls = append(ls, newFiltered(r, dt, c.v, filteredShape{c.s, b[0], b[1]}, d, 4+r.IntN(3), filteredShapes,
					filterConfigs, r.IntN(2) == 0))
			}
		}
	}
	// Full-width blocks (one element per thread at V = 1000), and a full vocabulary: a
	// full-width block, a split row, and 33 blocks.
	for _, c := range []struct {
		dt, v int
		sh    filteredShape
		d     int
	}{
		{dtF16, 1000, filteredShape{1, 1024, 32}, 3}, {dtF32, 1000, filteredShape{2, 1024, 32}, 1},
		{dtBF16, 151936, filteredShape{2, 1024, 32}, 1}, {dtF32, 151936, filteredShape{33, 64, 32}, 3},
		{dtF16, 151936, filteredShape{1, 128, 64}, 1},
	} {
		shapes := filteredShapes
		if c.v > 1000 {
			shapes = []func(*rand.Rand, int) []float32{strongRow, strongRow, tiedRow, maskedRow}
		}
		ls = append(ls, newFiltered(r, c.dt, c.v, c.sh, c.d, 3, shapes, filterConfigs, c.dt == dtF32))
	}
	// Top-k above the finite count: few finite logits among -Inf, whose keys then enter
	// the kept set (with weight 0).
	sparse := []filterConfig{{50, 0, 0}, {20, 0.9, 0}, {-1, 0, 0}, {1000, 0, 0.05}, {50, 0.9, 0}}
	for i, c := range []struct{ v, s int }{{37, 1}, {1000, 1}, {1000, 5}} {
		l := newFiltered(r, i, c.v, filteredShape{c.s, 32, 16}, 1+i%2*2, 5,
			[]func(*rand.Rand, int) []float32{sparseRow, sparseRow, maskedRow}, sparse, false)
		for y := range l.params {
			l.params[y].Temperature = []float32{0.7, 1, 1.8}[r.IntN(3)]
			l.params[y].Flags &^= abi.FlagRouted | 1<<14
		}
		ls = append(ls, l)
	}
	// Constrained decoding: every row applies a mask row of the bitmask (grammar masks of
	// a few tokens, a forced token, nothing, a run, most or all tokens), on LLM-shaped
	// rows with the serving filters, one and several blocks per row.
	for i, s := range []int{1, 5} {
		l := newFiltered(r, dtBF16-i, 1000, filteredShape{s, 64, 32}, 1+2*i, 6,
			[]func(*rand.Rand, int) []float32{strongRow, strongRow, llmRow, steppedRow}, filterConfigs, true)
		l.name = "grammar " + l.name
		for y := range l.params {
			l.params[y].Flags |= abi.FlagBitmask
			l.params[y].BitmaskRow = uint32(r.IntN(l.bitmaskRows()))
		}
		ls = append(ls, l)
	}
	ls = append(ls, probeLaunches(r)...)
	// Masks only (the bitmask, the allowed-token mask, or both) on aligned rows of several
	// trips per warp: the scans' fast paths for such rows. After the probes, whose rows
	// the generator's earlier draws decide.
	for _, dt := range []int{dtF32, dtBF16} {
		shapes := []func(*rand.Rand, int) []float32{strongRow, llmRow, steppedRow}
		l := newFiltered(r, dt, 1000, filteredShape{1, 64, 32}, 1, 6, shapes, filterConfigs, true)
		l.stride, l.slack = 1000, 0
		l.fillWith(r, shapes)
		l.name = "masks only " + l.name
		for y := range l.params {
			p := &l.params[y]
			p.Flags = abi.FlagLogprobs * abi.Flags(r.IntN(2))
			if y%3 != 1 {
				p.Flags |= abi.FlagBitmask
				p.BitmaskRow = uint32(r.IntN(l.bitmaskRows()))
			}
			if y%3 != 0 {
				p.Flags |= abi.FlagMask
			}
			if y%3 == 2 {
				// The mask bans about half of what the bitmask allows, and allows all
				// it bans: a scan that read one of the two arrays would draw a banned token.
				words := (l.vocab + 31) / 32
				bm := l.bitmask[int(p.BitmaskRow)*words:][:words]
				for w, m := range bm {
					l.mask[int(p.Row)*words+w] = ^(m & r.Uint32())
				}
			}
			p.Temperature = []float32{0.7, 1, 1.3}[r.IntN(3)]
			filterConfigs[r.IntN(len(filterConfigs)-2)].apply(p, l.vocab)
		}
		ls = append(ls, l)
	}
	return ls
}

// probe is a launch of rows whose path is known: LLM-shaped rows at temperature 1 with
// top-k 2 to 50 (with top-p and min-p) keep a few strong logits, which the blocks always
// publish, and in these shapes at least 50 candidates lie above every block's Kcov, so
// the list serves; equal rows in shapes where some thread holds more than
// GB_FILTER_THREAD elements (or some warp more than it hands on) publish nothing above
// what they left out (every key is equal), and faint rows (a spread of 1e-3) with top-p alone keep about p of the row,
// far more than a list holds, so both run the one-block path. (A faint float32 row with
// top-k alone may be served by the list: its keys are distinct, and hundreds can lie
// above the row's Kcov.)
type probe struct {
	kind    string // "llm", "equal", "faint", "none", "spread"
	dt, v   int
	sh      filteredShape
	want    int // pathList or pathRow
	shape   func(*rand.Rand, int) []float32
	configs []filterConfig
}

var (
	llmProbe    = []filterConfig{{50, 0.9, 0}, {2, 0, 0}, {20, 0, 0}, {50, 0, 0}, {50, 0.9, 0.05}, {2, 0.5, 0.5}}
	equalProbe  = []filterConfig{{50, 0.9, 0}, {50, 0, 0}, {2, 0, 0}, {1000, 0, 0}, {0, 0.9, 0}, {0, 0.5, 0}, {20, 0.999, 0.05}}
	faintProbe  = []filterConfig{{0, 0.5, 0}, {0, 0.9, 0}, {0, 0.95, 0}}
	noneProbe   = []filterConfig{{kOff, 1, 0}, {0, 0, 0}}
	spreadProbe = []filterConfig{{50, 0, 0}, {20, 0, 0}}
)

// spreadRow is a row of V = spreadBlocks·2048 for blocks of 512 threads in 32-lane warps,
// where warp w scans elements [128w, 128w + 128) of its block's chunk. Block 3 holds one
// strong logit in each of its first 12 warps, and a body higher than the other blocks'.
// Top-k 50 over 20 blocks publishes 12 candidates a block, so block 3's are exactly its
// strong logits, and the largest key it leaves out (Kcov) is one of its body's, not a
// key let go in the scan: the row's kept set reaches below it, so the row cannot be
// certified from the list.
const spreadBlocks = 20

func spreadRow(r *rand.Rand, v int) []float32 {
	row := bodyRow(r, v)
	chunk := v / spreadBlocks
	for i := 3 * chunk; i < 4*chunk; i++ {
		row[i] += 8
	}
	for w := range 12 {
		row[3*chunk+128*w+r.IntN(128)] = 30 + float32(w)
	}
	return row
}

// The shapes give threads from one trip of their chunk (V = 16 and 37) to hundreds (the
// V = 151936 shapes, 8-lane warps among them).
var probes = []probe{
	{"llm", dtF32, 1000, filteredShape{2, 128, 64}, pathList, strongRow, llmProbe},
	{"llm", dtF16, 151936, filteredShape{1, 256, 32}, pathList, strongRow, llmProbe},
	{"llm", dtBF16, 151936, filteredShape{33, 32, 8}, pathList, strongRow, llmProbe},
	{"llm", dtF32, 151936, filteredShape{5, 128, 64}, pathList, strongRow, llmProbe},
	{"equal", dtBF16, 1000, filteredShape{1, 32, 16}, pathRow, equalRow, equalProbe},
	{"equal", dtF32, 151936, filteredShape{2, 256, 32}, pathRow, equalRow, equalProbe},
	{"faint", dtF32, 151936, filteredShape{33, 32, 8}, pathRow, faintRow, faintProbe},
	{"faint", dtF32, 151936, filteredShape{1, 128, 64}, pathRow, faintRow, faintProbe},
	// No filter: the kept set is the row, which a list holds only when its blocks left
	// nothing out: at most GB_FILTER_THREAD elements per thread and GB_FILTER_WARP per
	// warp, as at V = 16, but not at V = 37 in one warp.
	{"none", dtF16, 16, filteredShape{1, 32, 32}, pathList, strongRow, noneProbe},
	{"none", dtF16, 37, filteredShape{1, 32, 32}, pathRow, strongRow, noneProbe},
	{"none", dtF32, 1000, filteredShape{2, 32, 8}, pathRow, strongRow, noneProbe},
	// Lists of a few dozen keys or more in blocks of 512 threads, which the last block
	// ranks with several threads a key (gb_rank_keys).
	{"llm", dtF32, 40 * 2048, filteredShape{40, 512, 32}, pathList, strongRow, llmProbe},
	// Blocks taking more keys than they have warps (top-k 50 over 10 blocks takes 22 in 16
	// warps): the thresholded publish bounds them by each warp's two largest keys.
	{"llm", dtF32, 10 * 4096, filteredShape{10, 512, 32}, pathList, strongRow, llmProbe},
	// A block whose candidates are exactly its warps' largest keys (the thresholded
	// publish with no key between T and the block's largest left out).
	{"spread", dtF32, spreadBlocks * 2048, filteredShape{spreadBlocks, 512, 32}, pathRow, spreadRow, spreadProbe},
}

// probeLaunches makes a launch of each probe.
func probeLaunches(r *rand.Rand) []*launch {
	var ls []*launch
	for i, pr := range probes {
		l := &launch{kernel: kernelFiltered, dtype: pr.dt, gridX: pr.sh.s, gridZ: 1 + 2*(i%2), block: pr.sh.block,
			warp: pr.sh.warp, vocab: pr.v, stride: pr.v, slots: 4}
		l.name = fmt.Sprintf("probe %d %s dtype=%d S=%d V=%d T=%d", i, pr.kind, pr.dt, pr.sh.s, pr.v, pr.sh.block)
		l.fillWith(r, []func(*rand.Rand, int) []float32{pr.shape})
		l.logprobs = true
		l.rows(r, func(p *rowParams) {
			p.Temperature = 1
			pr.configs[r.IntN(len(pr.configs))].apply(p, pr.v)
			p.Flags = abi.FlagLogprobs
		})
		ls = append(ls, l)
	}
	return ls
}

// probeOf returns the probe a launch was made from, or nil.
func probeOf(l *launch) *probe {
	var i int
	if _, err := fmt.Sscanf(l.name, "probe %d ", &i); err != nil {
		return nil
	}
	return &probes[i]
}

// filteredCoverage counts what a run of the workload reached, from outcomes that match
// the Go edition: paths by filter kind, records, routing, ADVANCE and RECORD.
func filteredCoverage(ls []*launch, got []outcome) map[string]int {
	c := map[string]int{}
	for i, l := range ls {
		o := got[i]
		n, d := len(l.params), l.draws()
		for y, p := range l.params {
			routedAway := p.Flags&abi.FlagRouted != 0 && p.Flags&abi.FlagFiltered == 0
			for z := range d {
				slot := int(p.Row)*d + z
				switch path := o.paths[z*n+y]; {
				case routedAway:
					if o.status[slot] == untouched {
						c["routed row left alone"]++
					}
					if path != pathNone {
						c["routed-away row reached the list decision"]++
					}
				case path == pathList:
					c["list "+rowKind(l, p)]++
				case path == pathRow:
					c["row "+rowKind(l, p)]++
				case o.status[slot] == 0 && p.Temperature != 0 && p.MinP > 0 && rowKind(l, p) == "min-p":
					c["min-p alone"]++
				}
				if routedAway {
					continue
				}
				l.bitmaskCoverage(c, p, abi.Filtered, o.status[slot] == 0, o.status[slot])
				if path := o.paths[z*n+y]; p.Flags&abi.FlagBitmask != 0 && path != pathNone {
					c[[]string{"", "bitmask list", "bitmask row"}[path]]++
				}
				if p.Flags&abi.FlagRouted != 0 && o.status[slot] == 0 {
					c["routed filtered row sampled"]++
				}
				switch {
				case o.status[slot] == 0 && p.Flags&abi.FlagLogprobs != 0:
					c["record"]++
					if p.Flags&abi.FlagsProcessors != 0 {
						c["record of a processed row"]++
					}
					if z > 0 {
						c["record of a later draw"]++
					}
				case o.status[slot] > 0 && p.Flags&abi.FlagLogprobs != 0:
					c["NaN record"]++
				}
				if o.status[slot] == 0 && z > 0 && o.tokens[slot] != o.tokens[slot-1] {
					c["draws differ"]++
				}
				if o.status[slot] == 0 && z == 0 && p.Temperature != 0 && p.Flags&abi.FlagsProcessors == 0 &&
					p.TopK > 0 && int(p.TopK) < l.vocab {
					path := []string{"", "list", "row"}[o.paths[z*n+y]]
					sorted := l.rowValues(int(p.Row))
					slices.SortFunc(sorted, func(a, b float32) int { return cmp.Compare(b, a) })
					k := int(p.TopK)
					if math.IsInf(float64(sorted[k-1]), -1) {
						c["k above the finite count "+path]++
					} else if sorted[k-1] == sorted[k] {
						c["tie at the k-th "+path]++
					}
				}
			}
		}
		if l.kernel == kernelFiltered && l.gridX > 1 {
			c[fmt.Sprintf("S=%d", l.gridX)]++
		}
		for k := range o.counts {
			if o.counts[k] != l.counts[k] {
				c["count recorded"]++
			}
		}
		params := l.paramBytes()
		for y := range l.params {
			if string(params[y*paramsBytes+16:y*paramsBytes+24]) != string(o.params[y*paramsBytes+16:y*paramsBytes+24]) {
				c["step advanced"]++
			}
		}
	}
	return c
}

// rowValues returns logits row row of the launch as float32.
func (l *launch) rowValues(row int) []float32 {
	v := make([]float32, l.vocab)
	for i := range v {
		at := (row*l.stride + i) * l.elemSize()
		switch l.dtype {
		case dtF16:
			v[i] = half.Float16ToFloat32(binary.LittleEndian.Uint16(l.logits[at:]))
		case dtBF16:
			v[i] = half.BFloat16ToFloat32(binary.LittleEndian.Uint16(l.logits[at:]))
		default:
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(l.logits[at:]))
		}
	}
	return v
}

// runFiltered runs the launches in the emulation and requires the Go edition's outcomes
// (wants); it returns the emulation's.
func runFiltered(t *testing.T, ls []*launch, wants []outcome) (got []outcome, seen [4]int, kinds map[string]int) {
	t.Helper()
	got = decodeResults(t, runDriver(t, encodeJob(t, ls)), ls)
	seen, kinds = matchOutcomes(t, ls, wants, got)
	return got, seen, kinds
}

// TestFilteredMatchesGoEdition runs the filtered workload in the emulation, with the
// ABI's candidate lists and with lists of a few candidates per block (most rows then
// fall back to the one-block path, and the list is certified right at its edge), and
// requires the Go edition's tokens, statuses, records, counts and steps from both, every
// status, every filter kind on both paths, and the probes' paths.
func TestFilteredMatchesGoEdition(t *testing.T) { matchFiltered(t, 60) }

// matchFiltered is TestFilteredMatchesGoEdition on the workload of one seed.
func matchFiltered(t *testing.T, seed uint64) {
	t.Helper()
	ls := filteredLaunches(rand.New(rand.NewPCG(20261130, seed)))
	wants := goEdition(t, ls)

	got, seen, kinds := runFiltered(t, ls, wants)
	cov := filteredCoverage(ls, got)
	t.Logf("ABI lists: slots by status %v; sampled by kind %v; coverage %v", seen, kinds, cov)
	for s, n := range seen {
		require.Positive(t, n, "no slot ended with status %d", s)
	}
	for _, k := range []string{"greedy", "top-k", "top-p", "min-p", "top-k+top-p+min-p", "combined filters"} {
		require.Positive(t, kinds[k], "no slot sampled a token on the %s path", k)
	}
	for _, k := range []string{"list top-k", "list top-p", "list top-k+top-p+min-p", "list combined filters",
		"row top-k", "row top-p", "row top-k+top-p+min-p", "row combined filters", "min-p alone",
		"list categorical", "row categorical", "tie at the k-th list", "tie at the k-th row",
		"k above the finite count row",
		"routed row left alone", "routed filtered row sampled", "record", "record of a processed row",
		"record of a later draw", "NaN record", "draws differ", "count recorded", "step advanced", "S=2", "S=5", "S=33"} {
		require.Positive(t, cov[k], "the workload never reached %q", k)
	}
	require.Zero(t, cov["routed-away row reached the list decision"])
	requireBitmaskCoverage(t, cov, true, abi.Filtered)
	for _, k := range []string{"bitmask list", "bitmask row"} {
		require.Positive(t, cov[k], "the workload never reached %q", k)
	}
	requireProbePaths(t, ls, got, func(pr *probe, _ rowParams) int { return pr.want })

	// Lists of 16 candidates per row (4 per block at least): the LLM probes' rows with a
	// top-k above them cannot be certified and must fall back; the others may be, and so
	// may the unfiltered rows of a vocabulary that fits in the lists (the V = 16 probe,
	// whichever of its configs a row drew: top-k 0 and top-k above V both keep the row).
	for _, l := range ls {
		l.filterList, l.filterMinCands = 16, 4
	}
	got, _, _ = runFiltered(t, ls, wants)
	short := filteredCoverage(ls, got)
	t.Logf("short lists: coverage %v", short)
	for _, k := range []string{"list top-k", "row top-k", "row top-k+top-p+min-p", "row top-p"} {
		require.Positive(t, short[k], "short lists: the workload never reached %q", k)
	}
	requireProbePaths(t, ls, got, func(pr *probe, p rowParams) int {
		kept := int(p.TopK)
		if kept == 0 || kept > pr.v {
			kept = pr.v
		}
		if pr.want == pathList && kept <= max(4, 16/pr.sh.s)*pr.sh.s {
			return pathNone // either
		}
		return pathRow
	})
}

// requireProbePaths requires each probe's slots to have taken the path want gives
// (pathNone: either), and the probes to have taken each path at least once.
func requireProbePaths(t *testing.T, ls []*launch, got []outcome, want func(*probe, rowParams) int) {
	t.Helper()
	taken := map[uint32]int{}
	for i, l := range ls {
		pr := probeOf(l)
		if pr == nil {
			continue
		}
		n, d := len(l.params), l.draws()
		for y, p := range l.params {
			w := want(pr, p)
			for z := range d {
				path := got[i].paths[z*n+y]
				taken[path]++
				if w == pathNone {
					require.Contains(t, []uint32{pathList, pathRow}, path, "%s: launch row %d draw %d (%+v)", l.name, y, z, p)
				} else {
					require.Equal(t, uint32(w), path, "%s: launch row %d draw %d (%+v): path (1 list, 2 row)", l.name, y, z, p)
				}
			}
		}
	}
	require.Positive(t, taken[pathList], "no probe was drawn on the list")
	require.Positive(t, taken[pathRow], "no probe fell back to the row")
}

// exactFilterConfigs are the filters of exact filtered rows: filterConfigs with min-p
// alone, whose blocks draw for themselves, three times as often.
var exactFilterConfigs = append(slices.Clone(filterConfigs), filterConfig{0, 0, 0.05}, filterConfig{0, 0, 0.5},
	filterConfig{0, 0, 1}, filterConfig{0, 0, 0.05}, filterConfig{0, 0, 0.5}, filterConfig{0, 0, 1})

// newExactFiltered is a filtered-route launch (newFiltered) of rows whose scores need the
// exact comparison: exactRows at exactTemperatures (ABI.md, "filtered").
func newExactFiltered(r *rand.Rand, dt, v int, sh filteredShape, d, slots int) *launch {
	l := newFiltered(r, dt, v, sh, d, slots, exactRows, exactFilterConfigs, r.IntN(2) == 0)
	l.name = "exact " + l.name
	for y := range l.params {
		if p := &l.params[y]; slices.Contains(temperatures[1:], p.Temperature) {
			p.Temperature = exactTemperatures[r.IntN(len(exactTemperatures))]
		}
	}
	return l
}

// filteredExactLaunches is newExactFiltered over every dtype, one block and splits, one
// and several draws, blocks shaped by sh.
func filteredExactLaunches(r *rand.Rand, sh func(s int) filteredShape) []*launch {
	var ls []*launch
	for i := range 6 {
		for _, c := range []struct{ v, s int }{{4, 1}, {37, 1}, {37, 3}, {257, 2}, {1000, 1}, {1000, 5}} {
			ls = append(ls, newExactFiltered(r, i%3, c.v, sh(c.s), 1+2*r.IntN(2), 8))
		}
	}
	return ls
}

// emuFilteredShape is a block shape of filteredBlocks for s blocks per row.
func emuFilteredShape(r *rand.Rand) func(s int) filteredShape {
	return func(s int) filteredShape {
		b := filteredBlocks[r.IntN(len(filteredBlocks))]
		return filteredShape{s, b[0], b[1]}
	}
}

// filteredExactCoverage counts the sampled slots whose row's largest |x/T| reaches
// ExactLimit (rows without processors, so x' = x), where the largest logit, which is
// always kept, scores beyond it: the draws that take the exact redraw, by the path they
// took.
func filteredExactCoverage(ls []*launch, got []outcome) map[string]int {
	c := map[string]int{}
	for i, l := range ls {
		n, d := len(l.params), l.draws()
		for y, p := range l.params {
			if p.Temperature == 0 || p.Flags&abi.FlagsProcessors != 0 || p.Flags&abi.FlagRouted != 0 && p.Flags&abi.FlagFiltered == 0 {
				continue
			}
			top := float32(0)
			for _, x := range l.rowValues(int(p.Row)) {
				top = max(top, float32(math.Abs(float64(x))))
			}
			if !(float32(top*float32(1/p.Temperature)) >= abi.ExactLimit) {
				continue
			}
			for z := range d {
				if got[i].status[int(p.Row)*d+z] != 0 {
					continue
				}
				switch got[i].paths[z*n+y] {
				case pathList:
					c["list"]++
				case pathRow:
					c["row"]++
				default:
					if rowKind(l, p) == "min-p" {
						c["min-p alone"]++
					}
				}
			}
		}
	}
	return c
}

// TestCUDAFilteredExactMatchesGoEdition runs the filtered route on rows whose float32
// scores lose the noise, with the ABI's candidate lists and with short ones (most rows
// then take the one-block path), and requires the Go edition's tokens, statuses,
// records, counts and steps, with the exact redraw reached on the list, on the row and
// by min-p rows whose blocks drew themselves.
func TestCUDAFilteredExactMatchesGoEdition(t *testing.T) {
	r := rand.New(rand.NewPCG(20261201, 24))
	ls := filteredExactLaunches(r, emuFilteredShape(r))
	wants := goEdition(t, ls)
	got, seen, _ := runFiltered(t, ls, wants)
	cov := filteredExactCoverage(ls, got)
	for _, l := range ls {
		l.filterList, l.filterMinCands = 16, 4
	}
	got, _, _ = runFiltered(t, ls, wants)
	short := filteredExactCoverage(ls, got)
	t.Logf("%d launches; slots by status %v; exact redraws by path: ABI lists %v, short lists %v", len(ls), seen, cov, short)
	for _, k := range []string{"list", "row", "min-p alone"} {
		require.Greater(t, cov[k]+short[k], 30, "too few exact redraws on the %s path", k)
	}
}

// The filtered kernel's thread lists and warp hand-offs (GB_FILTER_THREAD, GB_FILTER_WARP).
const (
	filterThreadKeys = 4
	filterWarpKeys   = 16
)

// filterTake is gb_filter_take for a top-k row (k < V) of a launch of s blocks a row.
func filterTake(k, s, cands int) int {
	want := cands
	if k < 1<<28 {
		want = (4*k+s-1)/s + 2
	}
	want = min(max(want, 4), cands)
	return min(want, k)
}

// filterPublish names the way gb_filter_publish_lists first tries to place a block's
// candidates (a bound that meets too many candidates falls back to the merge).
func filterPublish(take, busy, warps, warp int) string {
	switch {
	case take >= 24:
		return "ranks"
	case take >= 8 && take <= min(busy, warp):
		return "bound"
	case take >= 8 && take <= 2*busy && 2*warps <= min(abi.MaxWarps, warp):
		return "bound of two keys a warp"
	}
	return "merge"
}

// TestFilteredBlocksPublishTheirLargestKeys reads what each block of the LLM probes'
// top-k rows published (the partials after the launch) and requires, besides the Go
// edition's outcomes: the published slots are keys of the block's chunk, largest first,
// then empty; every key of the chunk above the block's Kcov is among them; and where no
// thread holds more of the block's take largest keys than its list does, nor a warp
// more than it hands on, they are exactly those keys, whichever way the block placed
// them. A block that leaves out keys it could have published does not change a token
// (the row falls back to the one-block path), so only this check sees, for example, a
// thresholded publish whose bound T is too high.
func TestFilteredBlocksPublishTheirLargestKeys(t *testing.T) {
	r := rand.New(rand.NewPCG(61, 62))
	var ls []*launch
	for _, l := range probeLaunches(r) {
		if pr := probeOf(l); pr != nil && pr.kind == "llm" {
			ls = append(ls, l)
		}
	}
	got, _, _ := runFiltered(t, ls, goEdition(t, ls))
	exact := map[string]int{}
	for i, l := range ls {
		sh := l.shape()
		cands := sh.FilterCands()
		for y, p := range l.params {
			require.NotZero(t, p.TopK, "%s: the probes' rows carry top-k", l.name)
			values := l.rowValues(int(p.Row))
			take := filterTake(int(p.TopK), l.gridX, cands)
			for z := range l.draws() {
				for x := range l.gridX {
					at := sh.FilterWord(y, z, x, 0)
					pub := got[i].partials[at : at+take]
					kcov := uint32(got[i].partials[at+cands+1])
					start, end := chunkOf(l.vocab, l.gridX, x)
					var keys []uint64
					for e := start; e < end; e++ {
						if !math.IsInf(float64(values[e]), -1) {
							keys = append(keys, abi.Pack(values[e], uint32(e)))
						}
					}
					slices.SortFunc(keys, func(a, b uint64) int { return cmp.Compare(b, a) })
					what := fmt.Sprintf("%s: row %d draw %d block %d (take %d)", l.name, y, z, x, take)
					for j, k := range pub {
						if k == 0 {
							require.Zero(t, slices.Max(pub[j:]), "%s: a key after an empty slot", what)
							break
						}
						require.True(t, j == 0 || k < pub[j-1], "%s: slot %d out of order", what, j)
						_, found := slices.BinarySearchFunc(keys, k, func(a, b uint64) int { return cmp.Compare(b, a) })
						require.True(t, found, "%s: slot %d holds %#x, not a key of the chunk", what, j, k)
					}
					for _, k := range keys {
						if uint32(k>>32) <= kcov {
							break
						}
						require.Contains(t, pub, k, "%s: %#x lies above Kcov %#x but was not published", what, k, kcov)
					}
					top := keys[:min(take, len(keys))]
					perThread, perWarp := map[int]int{}, map[int]int{}
					for _, k := range top {
						th := (int(^uint32(k)) - start) / 4 % l.block
						perThread[th]++
						perWarp[th/l.warp]++
					}
					if len(perThread) == 0 || maxCount(perThread) > filterThreadKeys || maxCount(perWarp) > filterWarpKeys {
						continue
					}
					want := append(slices.Clone(top), make([]uint64, take-len(top))...)
					require.Equal(t, want, pub, "%s: not the block's take largest keys", what)
					busy := max(1, min(l.block/l.warp, ((end-start+3)/4+l.warp-1)/l.warp))
					exact[filterPublish(take, busy, l.block/l.warp, l.warp)]++
				}
			}
		}
	}
	t.Logf("blocks that published exactly their take largest keys, by the way they tried first: %v", exact)
	for _, way := range []string{"ranks", "bound", "bound of two keys a warp", "merge"} {
		require.Positive(t, exact[way], "no block placed its candidates by %s", way)
	}
}

// maxCount is the largest count of m.
func maxCount(m map[int]int) int {
	c := 0
	for _, n := range m {
		c = max(c, n)
	}
	return c
}
