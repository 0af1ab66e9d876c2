package statistical

import (
	"fmt"
	"math"

	"github.com/gumbel-go/gumbel/sampler"
)

// Sizes of the pair cases (SampleN and SampleDistinct).
const (
	// CIPairDraws is the number of ordered pairs of each pair case in SizeCI.
	CIPairDraws = 400_000
	// PairVocab is the vocabulary of the pair cases: 64 ordered pairs, every one drawn
	// thousands of times.
	PairVocab = 8
)

// pairCases are the cases of several draws per row: ordered pairs of SampleN draws
// (with replacement) and of SampleDistinct draws (without), on a plain row and on a
// masked one.
func pairCases(cfg Config, seed uint64, alpha float64, draws func(int) int) []Case {
	full := cfg.Size == SizeFull
	n, temps := CIPairDraws, []float32{1}
	if full {
		n, temps = FullDraws, Temperatures
	}
	var out []Case
	for _, t := range temps {
		for _, masked := range []bool{false, true} {
			for _, mode := range []Mode{ModePairs, ModeDistinct} {
				logits := Logits(Spread, PairVocab, t)
				name := fmt.Sprintf("%s/V%d/T%.1f/%s/%s", Spread, PairVocab, t, pathGumbel.label, mode)
				var proc *Processors
				if masked {
					name, proc = name+"/mask", pairMaskProcessors(logits)
				}
				c := placed(Case{
					Name:        name,
					Shape:       Spread,
					Route:       sampler.RouteGumbel,
					Gumbel:      true,
					Temperature: t,
					Logits:      logits,
					Mode:        mode,
					Processors:  proc,
				}, seed, alpha, draws(n))
				if !full {
					c.Detects = detectsPairs(&c)
				}
				out = append(out, c)
			}
		}
	}
	return out
}

// pairMaskProcessors: a bitmask for the pair cases that rules out the first, fourth and
// seventh most likely tokens and sets every other bit, those past the vocabulary too, so
// that SampleN (every draw of a row under its mask) and SampleDistinct (the top-n kernel)
// are tested on a masked row.
func pairMaskProcessors(x []float32) *Processors {
	r := ranked(x)
	m := make([]int32, BitmaskWords(len(x)))
	for i := range m {
		m[i] = -1
	}
	for _, t := range []int32{r[0], r[3], r[6]} {
		m[t/32] &^= 1 << (t % 32)
	}
	return &Processors{Bitmask: m}
}

// detectsPairs states what a pair case catches half the time. With replacement: a
// second draw that copies the first with probability eps moves the pair law by a
// non-centrality n·eps²·(V - 1) per pair (the sum over cells of eps²·p_a²(1[a=b] -
// p_b)²/(p_a·p_b)). Without replacement: the non-centrality per pair of the wrong law
// "independent draws, repeats rejected", p_a·p_b/(1 - Σp²), which every sampler that
// forgets to renormalise after the first pick follows.
func detectsPairs(c *Case) string {
	v := c.Vocab()
	df := v*v - 1
	if c.Mode == ModeDistinct {
		df = v*(v-1) - 1
	}
	lambda := DetectableNoncentrality(df, c.Alpha, 0.5)
	n := float64(c.Draws)
	if c.Mode == ModePairs {
		eps := math.Sqrt(lambda / (n * float64(v-1)))
		return fmt.Sprintf("%d pairs catch (with probability 1/2) a second draw that copies the first %.2g of the time", c.Draws, eps)
	}
	perPair, err := rejectionLawNoncentrality(c)
	if err != nil {
		return "unknown: " + err.Error()
	}
	return fmt.Sprintf("%d pairs give the rejection law's error a non-centrality of %.0f, where %.0f is caught half the time",
		c.Draws, perPair*n, lambda)
}

// rejectionLawNoncentrality returns, per pair, the chi-square non-centrality between the
// successive-sampling law of a distinct case and the law of two independent draws with
// repeats rejected.
func rejectionLawNoncentrality(c *Case) (float64, error) {
	logits := c.Logits
	if c.Processors != nil {
		var err error
		if logits, err = ProcessedLogits(logits, *c.Processors); err != nil {
			return 0, err
		}
	}
	p, err := Probabilities(logits, c.Temperature, Filter{})
	if err != nil {
		return 0, err
	}
	want, err := PairProbabilities(p, false)
	if err != nil {
		return 0, err
	}
	return Noncentrality(want, rejectionLaw(p)), nil
}

// rejectionLaw is p_a·p_b/(1 - Σp²) off the diagonal: two independent draws, kept when
// they differ.
func rejectionLaw(p []float64) []float64 {
	v := len(p)
	sq := 0.0
	for _, q := range p {
		sq += q * q
	}
	out := make([]float64, v*v)
	for a := range p {
		for b := range p {
			if a != b {
				out[a*v+b] = p[a] * p[b] / (1 - sq)
			}
		}
	}
	return out
}
