package statistical

import (
	"fmt"
	"math"

	"github.com/gumbel-go/gumbel/philox"
	"github.com/gumbel-go/gumbel/sampler"
)

// The filtered paths of the Extreme rows: top-k 2 keeps a flat row whole (ties at the
// k-th value are kept), top-p 0.9 and min-p 0.05 keep the two tied 25s, and top-k 3 with
// top-p 0.9 keeps them too, after top-k has cut one token.
var (
	pathTopK2     = path{label: "topk2", gumbel: true, route: sampler.RouteFiltered, topK: 2}
	pathTopP      = path{label: "topp0.9", gumbel: true, route: sampler.RouteFiltered, topP: 0.9}
	pathTopK3TopP = path{label: "topk3-topp0.9", gumbel: true, route: sampler.RouteFiltered, topK: 3, topP: 0.9}
)

// extremeCases are the Extreme rows, each on the Gumbel route, behind the kill switch,
// drawn twice without replacement (SampleDistinct, the topn kernel) and on the filtered
// route: constant rows of huge logits at T = 1, where only the noise decides (each token
// 1/4, each ordered pair 1/12), and a tie of two logits above two small ones at
// temperatures from 1e-3 to 1e-30, where the tied tokens take 1/2 each (and the pairs of
// them). A float32 score
// fl(x/T) + g loses the noise here and hands the ties to the lowest index.
func extremeCases(cfg Config, seed uint64, alpha float64, draws func(int) int) []Case {
	n := CIExtremeDraws
	if cfg.Size == SizeFull {
		n = FullDraws
	}
	var out []Case
	add := func(name string, logits []float32, t float32, paths ...path) {
		ties := 0
		for _, x := range logits {
			if x == logits[0] {
				ties++
			}
		}
		type drawn struct {
			p    path
			mode Mode
		}
		all := []drawn{{pathGumbel, ModeSample}, {pathCategorical, ModeSample}, {pathGumbel, ModeDistinct}}
		for _, p := range paths {
			all = append(all, drawn{p, ModeSample})
		}
		for _, c := range all {
			full := fmt.Sprintf("%s/%s/T%g/%s", Extreme, name, t, c.p.label)
			outcomes := ties // the equally likely tokens, or ordered pairs of them
			if c.mode == ModeDistinct {
				full += "/" + c.mode.String()
				outcomes = ties * (ties - 1)
			}
			out = append(out, Case{
				Name:        full,
				Shape:       Extreme,
				Route:       c.p.route,
				Gumbel:      c.p.gumbel,
				Temperature: t,
				TopK:        c.p.topK,
				TopP:        c.p.topP,
				MinP:        c.p.minP,
				Binning:     BinTokens,
				Draws:       draws(n),
				Seed:        philox.SplitMix64(seed ^ hashName(full)),
				Logits:      logits,
				Alpha:       alpha,
				Mode:        c.mode,
			})
			if cfg.Size != SizeFull {
				out[len(out)-1].Detects = detectsTies(draws(n), outcomes, alpha)
			}
		}
	}
	for _, c := range []float32{1e7, 1e9, -1e9, math.MaxFloat32, -math.MaxFloat32} {
		add(fmt.Sprintf("flat%g", c), []float32{c, c, c, c}, 1, pathTopK2)
	}
	for _, t := range []float32{1e-3, 1e-5, 1e-7, 1e-30} {
		add("tie25", []float32{25, 25, 3, 1}, t, pathTopP, pathMinP, pathTopK3TopP)
	}
	return out
}

// detectsTies states the share of the mass moved from one of k equally likely outcomes
// (tokens, or ordered pairs) to another that n draws catch with probability 1/2 at
// alpha: that shift's non-centrality is n·2δ²/(1/k), against k - 1 degrees of freedom.
func detectsTies(n, k int, alpha float64) string {
	lambda := DetectableNoncentrality(k-1, alpha, 0.5)
	delta := math.Sqrt(lambda / (2 * float64(k) * float64(n)))
	return fmt.Sprintf("%d draws catch (with probability 1/2) a shift of %.2g of the mass between two of the %d equally likely outcomes "+
		"(float32 scores moved several percent)", n, delta, k)
}
