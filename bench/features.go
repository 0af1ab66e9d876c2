package bench

import (
	"fmt"
	"strings"

	"github.com/gumbel-go/gumbel/sampler"
)

// Serving-feature routes: the Gumbel step with one feature added, timed like the
// matrix routes so that each feature's cost reads as a ratio against GumbelSplit.
const (
	// GumbelLogprobs asks for the log-probability record of every token.
	GumbelLogprobs Route = "gumbel+logprobs"
	// GumbelTop20 asks for the record and the 20 most likely raw tokens (topn kernel).
	GumbelTop20 Route = "gumbel+top20"
	// TopPTop20 is top-p 0.95 (the filtered route) with GumbelTop20's outputs.
	TopPTop20 Route = "topp0.95+top20"
	// GumbelPenalties tracks token counts on the device (a 256-token prompt) with
	// repetition, frequency and presence penalties.
	GumbelPenalties Route = "gumbel+penalties"
	// GumbelBiasMask adds a 64-token logit bias and bans 64 tokens.
	GumbelBiasMask Route = "gumbel+bias+mask"
	// GumbelDraws4 draws four tokens per row with replacement in one launch (SampleN).
	GumbelDraws4 Route = "gumbel-4-draws"
	// GumbelDistinct4 draws four distinct tokens per row (SampleDistinct, Gumbel-top-k).
	GumbelDistinct4 Route = "gumbel-4-distinct"
	// GumbelBatch is the graph-capturable path: Batch.Launch with the row parameters
	// on the device and each row's step advanced there.
	GumbelBatch Route = "gumbel-batch-launch"
	// Score scores a given token per row (Sampler.Score: its raw and processed
	// log-probabilities and its rank) at temperature 0.8, nothing drawn: set it against
	// greedy, the other one-pass route without noise.
	Score Route = "score"
)

// FeatureRoutes lists the plain Gumbel step followed by every serving feature, and top-p
// with top log-probabilities (TopPTop20: its cost against the plain step includes the
// filtered route's).
var FeatureRoutes = []Route{GumbelSplit, GumbelLogprobs, GumbelTop20, TopPTop20, GumbelPenalties, GumbelBiasMask, GumbelDraws4, GumbelDistinct4, GumbelBatch, Score}

// FeatureMatrix is the serving-feature issue's matrix: each feature against the plain
// Gumbel step at the vocabulary of the log-probability target.
var FeatureMatrix = Matrix{
	Routes:  FeatureRoutes,
	DTypes:  []sampler.DType{sampler.Float32, sampler.BFloat16},
	Vocabs:  []int{151936},
	Batches: []int{1, 8, 64},
}

// featureParams sets a feature route's fields on the Gumbel route's row parameters.
func featureParams(r Route, p *sampler.Params) {
	switch r {
	case GumbelLogprobs:
		p.Logprobs = true
	case GumbelTop20:
		p.Logprobs, p.TopLogprobs = true, 20
	case TopPTop20:
		p.TopP, p.Logprobs, p.TopLogprobs = 0.95, true, 20
	case GumbelPenalties:
		p.RepetitionPenalty, p.FrequencyPenalty, p.PresencePenalty = 1.1, 0.2, 0.3
	}
}

// featureSetup gives the rows of a processor route their state on the sampler.
func featureSetup(s *sampler.Sampler, r Route, rows, vocab int) error {
	for row := range rows {
		switch r {
		case GumbelPenalties:
			prompt := make([]int32, min(256, vocab))
			for i := range prompt {
				prompt[i] = int32((i*7919 + row*31) % vocab)
			}
			if err := s.TrackTokens(row, vocab, dedupe(prompt)); err != nil {
				return err
			}
		case GumbelBiasMask:
			n := min(64, vocab/2)
			tokens, bias, banned := make([]int32, n), make([]float32, n), make([]int32, n)
			for i := range n {
				tokens[i] = int32((2*i*4099 + row) % vocab)
				bias[i] = float32(i%5) - 2
				banned[i] = int32(((2*i+1)*4099 + row) % vocab)
			}
			if err := s.SetLogitBias(row, vocab, dedupe(tokens), bias[:len(dedupe(tokens))]); err != nil {
				return err
			}
			if err := s.SetBannedTokens(row, vocab, dedupe(banned)); err != nil {
				return err
			}
		}
	}
	return nil
}

// dedupe drops repeated token ids, keeping the first of each.
func dedupe(tokens []int32) []int32 {
	seen := make(map[int32]bool, len(tokens))
	out := tokens[:0:0]
	for _, t := range tokens {
		if !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	return out
}

// featureCall returns the call that one step of route r makes.
func featureCall(s *sampler.Sampler, r Route, lg sampler.Logits, ps []sampler.Params, res *sampler.Result) func() error {
	switch r {
	case GumbelDraws4:
		return func() error { return s.SampleN(lg, ps, 4, res) }
	case GumbelDistinct4:
		return func() error { return s.SampleDistinct(lg, ps, 4, res) }
	case Score:
		tokens := make([]int32, len(ps))
		for i := range tokens {
			tokens[i] = int32((i*7919 + 13) % lg.Vocab)
		}
		var scores sampler.Scores
		return func() error {
			if err := s.Score(lg, ps, tokens, &scores); err != nil {
				return err
			}
			// The measurement reads tokens and errors from res: the ranks stand in.
			res.Tokens = append(res.Tokens[:0], scores.Ranks...)
			res.Errs = append(res.Errs[:0], scores.Errs...)
			return nil
		}
	}
	return func() error { return s.Sample(lg, ps, res) }
}

// batchStepper runs the GumbelBatch route: the rows' parameters are set once, and each
// step is one Launch (the device advances the steps) plus, for host latency, a Read.
type batchStepper struct {
	b   *sampler.Batch
	lg  sampler.Logits
	res *sampler.Result
}

func newBatchStepper(s *sampler.Sampler, lg sampler.Logits, ps []sampler.Params, res *sampler.Result) (*batchStepper, error) {
	b, err := s.NewBatch(lg.Rows, lg.Vocab, lg.DType, 1)
	if err != nil {
		return nil, err
	}
	for i, p := range ps {
		if err := b.SetRow(i, p); err != nil {
			b.Close()
			return nil, err
		}
		if lg.Bitmask != nil {
			// Batch row i applies mask row i of every launch's Logits.Bitmask.
			if err := b.SetBitmaskRow(i, i); err != nil {
				b.Close()
				return nil, err
			}
		}
	}
	return &batchStepper{b: b, lg: lg, res: res}, nil
}

func (bs *batchStepper) call() error {
	if err := bs.b.Launch(bs.lg); err != nil {
		return err
	}
	return bs.b.Read(bs.res)
}

func (bs *batchStepper) relaunch() error { return bs.b.Launch(bs.lg) }

// FeatureMarkdown renders the serving-feature measurements: device time per step for
// each route, and each feature's cost as a ratio to the plain Gumbel step.
func FeatureMarkdown(ms []Measurement) string {
	cells, order, _ := byCell(ms)
	var sb strings.Builder
	table := func(title string, of func(Measurement) float64) {
		fmt.Fprintf(&sb, "\n%s\n\n| dtype | vocab | batch |", title)
		for _, r := range FeatureRoutes {
			fmt.Fprintf(&sb, " %s |", r)
		}
		sb.WriteString("\n|---|---:|---:|")
		for range FeatureRoutes {
			sb.WriteString("---:|")
		}
		sb.WriteString("\n")
		for _, k := range order {
			c := cells[k]
			fmt.Fprintf(&sb, "| %s | %d | %d |", k.dtype, k.vocab, k.batch)
			base, hasBase := c[GumbelSplit]
			for _, r := range FeatureRoutes {
				m, ok := c[r]
				switch {
				case !ok || of(m) <= 0:
					sb.WriteString(" – |")
				case r == GumbelSplit || !hasBase || of(base) <= 0:
					fmt.Fprintf(&sb, " %.2f |", of(m))
				default:
					fmt.Fprintf(&sb, " %.2f (%+.0f%%) |", of(m), 100*(of(m)/of(base)-1))
				}
			}
			sb.WriteString("\n")
		}
	}
	table("Device time per step with each serving feature (µs, median; in brackets the cost against the plain Gumbel step)",
		func(m Measurement) float64 { return m.DeviceUs })
	if hasGraph(ms) {
		table("The same, replayed from a CUDA graph (µs, median)", func(m Measurement) float64 { return m.GraphUs })
	}
	table("Host-observed latency of one call, tokens on the host (µs, median)", func(m Measurement) float64 { return m.HostUs })
	return sb.String()
}
