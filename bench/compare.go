package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"

	"github.com/gumbel-go/gumbel/sampler"
)

// ourColumns are gumbel's routes that a peer comparison can show, in column order: the
// sampler, the floor (greedy), the filtered routes that filtering peers are compared
// with and the masked routes that bitmask peers are compared with. The first two are
// always shown, the third (topk50-topp0.9) where the run has it, every filtered or
// masked route where a peer is set against it, and gumbel+bitmask-unfused beside
// gumbel+bitmask where the run has it.
var ourColumns = []Route{GumbelSplit, Greedy, TopKTopP, TopK40TopP09, TopK50, TopP095, MinP,
	GumbelBitmask, GumbelBitmaskUnfused, GreedyBitmask, TopKTopPBitmask}

// LoadMeasurements reads measurements written as JSON, either a bare array or an object
// with a "measurements" array (what `gumbel bench --json`, bench/peers/torch_peers.py and
// bench/peers/flashinfer_peers.cu write). Fields it does not know, such as the peer
// script's "graph", are ignored.
func LoadMeasurements(path string) ([]Measurement, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var ms []Measurement
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) > 0 && trimmed[0] == '[' {
		err = json.Unmarshal(trimmed, &ms)
	} else {
		var report struct {
			Measurements *[]Measurement `json:"measurements"`
		}
		err = json.Unmarshal(trimmed, &report)
		if err == nil && report.Measurements == nil {
			err = fmt.Errorf("no \"measurements\" array")
		}
		if err == nil {
			ms = *report.Measurements
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for i := range ms {
		if err := ms[i].validate(); err != nil {
			return nil, fmt.Errorf("%s: measurement %d: %w", path, i, err)
		}
	}
	return ms, nil
}

// validate checks a loaded measurement and sets DType, which JSON does not carry, from
// DTypeName.
func (m *Measurement) validate() error {
	if m.Route == "" {
		return fmt.Errorf("no route")
	}
	if m.Vocab <= 0 || m.Batch <= 0 {
		return fmt.Errorf("%s: vocab %d, batch %d: both must be positive", m.Route, m.Vocab, m.Batch)
	}
	i := slices.IndexFunc([]sampler.DType{sampler.Float32, sampler.Float16, sampler.BFloat16},
		func(d sampler.DType) bool { return d.String() == m.DTypeName })
	if i < 0 {
		return fmt.Errorf("%s: dtype %q: want float32, float16 or bfloat16", m.Route, m.DTypeName)
	}
	m.DType = []sampler.DType{sampler.Float32, sampler.Float16, sampler.BFloat16}[i]
	for _, v := range []float64{m.DeviceUs, m.GraphUs, m.HostUs, m.AllocsPerCall} {
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return fmt.Errorf("%s: times and allocations must be finite and non-negative", m.Route)
		}
	}
	return nil
}

// peerBase is the gumbel route a peer is compared with, told by the filter its name
// names (case, "_" and "-" ignored): top-k and top-p together (topk40-topp0.9 where the
// name says top-k 40, else topk50-topp0.9), top-k alone, top-p alone, min-p; a peer with
// no filter that names itself greedy is compared with greedy, any other with
// gumbel-split. So "flashinfer:softmax+top_k_top_p" and "torch.sort-topk50-topp0.9" go
// against topk50-topp0.9, "llamacpp:topk40-topp0.9" against topk40-topp0.9,
// "flashinfer:softmax+top_k" against topk50, "flashinfer:softmax+top_p" against topp0.95,
// "flashinfer:softmax+min_p" against minp0.05, "ollama:greedy" against greedy, and
// "flashinfer:sampling_from_logits" and "torch.argmax" against gumbel-split. A peer
// whose name says "bitmask" applies a token bitmask: it goes against the masked form of
// that route where gumbel has one (gumbel+bitmask, greedy+bitmask,
// topk50-topp0.9+bitmask), so "torch.bitmask-exponential-race" goes against
// gumbel+bitmask.
func peerBase(r Route) Route {
	s := strings.NewReplacer("_", "", "-", "").Replace(strings.ToLower(string(r)))
	b := unmaskedPeerBase(s)
	if m, ok := maskedPeerBase[b]; ok && strings.Contains(s, "bitmask") {
		return m
	}
	return b
}

// maskedPeerBase is the masked route a bitmask peer goes against, by the route it would
// go against without its mask.
var maskedPeerBase = map[Route]Route{GumbelSplit: GumbelBitmask, Greedy: GreedyBitmask, TopKTopP: TopKTopPBitmask}

// unmaskedPeerBase is peerBase for a name folded as peerBase folds it, its bitmask aside.
func unmaskedPeerBase(s string) Route {
	topK, topP := strings.Contains(s, "topk"), strings.Contains(s, "topp")
	switch {
	case topK && topP && topK40(s):
		return TopK40TopP09
	case topK && topP:
		return TopKTopP
	case topK:
		return TopK50
	case topP:
		return TopP095
	case strings.Contains(s, "minp"):
		return MinP
	case strings.Contains(s, "greedy"):
		return Greedy
	}
	return GumbelSplit
}

// topK40 reports whether s, a peer's name folded as peerBase folds it, names top-k 40:
// "topk40" or "topk=40" not followed by another digit.
func topK40(s string) bool {
	for _, k := range []string{"topk40", "topk=40"} {
		for rest := s; ; {
			_, after, ok := strings.Cut(rest, k)
			if !ok {
				break
			}
			if after == "" || after[0] < '0' || after[0] > '9' {
				return true
			}
			rest = after
		}
	}
	return false
}

// peerFamily is the peer's name up to its first "." or ":" ("torch", "flashinfer"):
// each family gets its own tables.
func peerFamily(r Route) string {
	if i := strings.IndexAny(string(r), ".:"); i > 0 {
		return string(r[:i])
	}
	return string(r)
}

// Compare renders gumbel's measurements against peers' as markdown: per dtype, one table
// per peer family (the name before its first "." or ":", such as torch or flashinfer),
// rows vocab x batch, columns the device µs of gumbel-split and greedy (and of
// topk50-topp0.9 where gumbel has it; of topk50-topp0.9, topk40-topp0.9, topk50,
// topp0.95, minp0.05 and the masked routes where a peer of the family is set against
// them; of gumbel+bitmask-unfused beside gumbel+bitmask where gumbel has both) and of
// every peer route of the family, then for each peer its time over its gumbel
// counterpart's (peerBase: peer / topk50-topp0.9 for a top-k + top-p peer, peer /
// minp0.05 for a min-p peer, peer / greedy for a greedy one, peer / gumbel+bitmask for
// an unfiltered bitmask one, ..., peer / gumbel-split for an unfiltered one). Ratios
// above 1 mean gumbel is faster. A missing cell reads "–".
//
// The first tables set DeviceUs against DeviceUs: for gumbel, back-to-back launches
// from Go; for the PyTorch and FlashInfer peers, CUDA-graph replay (their best case, as
// vLLM runs them). Where gumbel's measurements also have graph-replay times (GraphUs), a
// second set of tables compares graph replay with graph replay; peers without GraphUs
// show "–" there.
func Compare(ours, peers []Measurement) string {
	var sb strings.Builder
	sb.WriteString("Device time per sampling step (µs, median) of gumbel and its peers; " +
		"ratios are peer / gumbel, above 1 means gumbel is faster.\n")
	compareTables(&sb, "device time (gumbel: back-to-back launches; peers: their own timing, CUDA-graph replay for GPU peers, wall time for CPU peers)",
		ours, peers, func(m Measurement) float64 { return m.DeviceUs })
	if slices.ContainsFunc(ours, func(m Measurement) bool { return m.GraphUs > 0 }) {
		compareTables(&sb, "CUDA-graph replay, both sides", ours, peers, func(m Measurement) float64 { return m.GraphUs })
	}
	return sb.String()
}

// compareTables writes one table per dtype and peer family of the times that of reads
// from a measurement.
func compareTables(sb *strings.Builder, title string, ours, peers []Measurement, of func(Measurement) float64) {
	type cellKey struct{ vocab, batch int }
	type tableKey struct {
		dtype        string
		vocab, batch int
	}
	var dtypes []string
	rows := map[string][]cellKey{}
	cells := map[tableKey]map[Route]Measurement{}
	add := func(m Measurement) {
		if !slices.Contains(dtypes, m.DTypeName) {
			dtypes = append(dtypes, m.DTypeName)
		}
		k := tableKey{m.DTypeName, m.Vocab, m.Batch}
		if cells[k] == nil {
			cells[k] = map[Route]Measurement{}
			rows[m.DTypeName] = append(rows[m.DTypeName], cellKey{m.Vocab, m.Batch})
		}
		cells[k][m.Route] = m
	}
	measuredTopKTopP, measuredUnfused := false, false
	for _, m := range ours {
		if slices.Contains(ourColumns, m.Route) {
			add(m)
			measuredTopKTopP = measuredTopKTopP || m.Route == TopKTopP
			measuredUnfused = measuredUnfused || m.Route == GumbelBitmaskUnfused
		}
	}
	// The peer families in order of appearance, each with its routes, and the dtypes
	// each family has measurements of.
	var families []string
	familyRoutes := map[string][]Route{}
	familyDTypes := map[string][]string{}
	for _, m := range peers {
		if IsOwn(m.Route) {
			continue // one of ours in the peer file: not a peer
		}
		f := peerFamily(m.Route)
		if !slices.Contains(families, f) {
			families = append(families, f)
		}
		if !slices.Contains(familyRoutes[f], m.Route) {
			familyRoutes[f] = append(familyRoutes[f], m.Route)
		}
		if !slices.Contains(familyDTypes[f], m.DTypeName) {
			familyDTypes[f] = append(familyDTypes[f], m.DTypeName)
		}
		add(m)
	}

	for _, dt := range dtypes {
		ks := rows[dt]
		slices.SortFunc(ks, func(a, b cellKey) int {
			if a.vocab != b.vocab {
				return a.vocab - b.vocab
			}
			return a.batch - b.batch
		})
		var tables []string // the families with measurements of dt; "" for ours alone
		for _, f := range families {
			if slices.Contains(familyDTypes[f], dt) {
				tables = append(tables, f)
			}
		}
		if tables == nil {
			tables = []string{""}
		}
		for _, f := range tables {
			peerRoutes := familyRoutes[f]
			var cols []Route
			setAgainst := func(r Route) bool {
				return slices.ContainsFunc(peerRoutes, func(p Route) bool { return peerBase(p) == r })
			}
			for i, r := range ourColumns {
				if i < 2 || (r == TopKTopP && measuredTopKTopP) || setAgainst(r) ||
					(r == GumbelBitmaskUnfused && measuredUnfused && setAgainst(GumbelBitmask)) {
					cols = append(cols, r)
				}
			}
			heading := title
			if f != "" {
				heading += ", " + f + " peers"
			}
			fmt.Fprintf(sb, "\n%s, %s\n\n| vocab | batch |", dt, heading)
			for _, r := range slices.Concat(cols, peerRoutes) {
				fmt.Fprintf(sb, " %s |", r)
			}
			for _, r := range peerRoutes {
				fmt.Fprintf(sb, " %s / %s |", r, peerBase(r))
			}
			sb.WriteString("\n|---:|---:|" + strings.Repeat("---:|", len(cols)+2*len(peerRoutes)) + "\n")
			for _, ck := range ks {
				c := cells[tableKey{dt, ck.vocab, ck.batch}]
				if !slices.ContainsFunc(slices.Concat(cols, peerRoutes), func(r Route) bool { _, ok := c[r]; return ok }) {
					continue // the cell holds only another family's peers
				}
				fmt.Fprintf(sb, "| %d | %d |", ck.vocab, ck.batch)
				for _, r := range slices.Concat(cols, peerRoutes) {
					if m, ok := c[r]; ok && of(m) > 0 {
						fmt.Fprintf(sb, " %.2f |", of(m))
					} else {
						sb.WriteString(" – |")
					}
				}
				for _, r := range peerRoutes {
					fmt.Fprintf(sb, " %s |", speedRatio(c, r, peerBase(r), of))
				}
				sb.WriteString("\n")
			}
		}
	}
}

// speedRatio formats the time of route num over that of den in one cell.
func speedRatio(c map[Route]Measurement, num, den Route, of func(Measurement) float64) string {
	a, okA := c[num]
	b, okB := c[den]
	if !okA || !okB || of(a) <= 0 || of(b) <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.2fx", of(a)/of(b))
}
