package statistical

import (
	"errors"
	"fmt"

	"github.com/gumbel-go/gumbel/philox"
	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/sampler"
)

// TrackedCase is a penalties case whose counts the device keeps: every row is tracked
// with the case's prompt (sampler.TrackTokens), draws BuildSteps tokens one Sample call
// at a time (each counted by the sampling kernel itself, the RECORD flag), and then
// draws the tested token. The device's counts are compared with a recount of the
// returned tokens, and the tested token with the processed distribution computed from
// that recount.
//
// Rows end up with different counts, so the tested draws do not share one distribution.
// The chi-square compares the token counts with the sum of the rows' distributions.
// Under a correct sampler the counts are a sum of independent multinomials whose
// covariance is at most that of one multinomial with the mean law (Σ p_i p_iᵀ ≥ N·p̄ p̄ᵀ),
// so the test keeps its level (it is conservative) and loses a little power; the
// non-centralities that RunTracked reports are computed the same way.
type TrackedCase struct {
	Case
	// BuildSteps is the number of counted draws before the tested one.
	BuildSteps int
}

// Tracked-case sizes.
const (
	// CITrackedDraws is the number of tested draws of a tracked case in SizeCI (each
	// costs BuildSteps + 1 Sample rows and four reference distributions). RunTracked
	// reports what they can see; TestTrackedCPU checks that it is each broken sampler of
	// TrackedReport with probability 0.99 (the closest, a frequency penalty that counts
	// once, with about 1.4 times the non-centrality that needs).
	CITrackedDraws = 30_000
	// trackedBuildSteps is the BuildSteps of the suite's tracked cases: enough for many
	// rows to draw a token two or three times despite the penalties, so that a frequency
	// penalty applied to the wrong count shows (with 6 steps and stronger presence and
	// repetition penalties the count-category test gave that bug a seventeenth of the
	// non-centrality it gets with these).
	trackedBuildSteps = 10
	// trackedRows bounds the rows of one Sample call of a tracked case.
	trackedRows = 1024
	// countChecksPerRound is the number of rows whose device counts are read back and
	// compared after the first round (the first round compares every row).
	countChecksPerRound = 64
)

// TrackedCases returns the tracked penalty cases of a configuration: repetition,
// frequency and presence penalties together, on the Gumbel route, on a filtered route and
// with the same filter behind the kill switch (the categorical kernel).
func TrackedCases(cfg Config) []TrackedCase {
	seed, alpha, scale := cfg.resolved()
	n := CITrackedDraws
	if cfg.Size == SizeFull {
		n = FullDraws
	}
	var out []TrackedCase
	for _, p := range []path{pathGumbel, pathMinPLoose, pathMinPLoose.killSwitch()} {
		logits := Logits(Bimodal, SmallVocab, 1)
		name := fmt.Sprintf("%s/V%d/T1.0/%s/tracked-penalties", Bimodal, SmallVocab, p.label)
		out = append(out, TrackedCase{
			Case: Case{
				Name:        name,
				Shape:       Bimodal,
				Route:       p.route,
				Gumbel:      p.gumbel,
				Temperature: 1,
				TopK:        p.topK,
				TopP:        p.topP,
				MinP:        p.minP,
				Draws:       max(1, int(float64(n)*scale)),
				Seed:        philox.SplitMix64(seed ^ hashName(name)),
				Logits:      logits,
				Alpha:       alpha,
				Processors: &Processors{
					Prompt:     repetitionPrompt(logits),
					Repetition: 1.2,
					Frequency:  0.7,
					Presence:   0.3,
				},
			},
			BuildSteps: trackedBuildSteps,
		})
	}
	return out
}

// TrackedReport is what a tracked case measured beside its verdict.
type TrackedReport struct {
	// CountsCompared is the number of rows whose device counts were read back and
	// matched the recount of their tokens.
	CountsCompared int
	// Ambiguous is the number of tested draws left out because a filter boundary of
	// their row was too close to call (chosen before the draw, so no bias).
	Ambiguous int
	// Tokens and Counts are the sensitivities of the two tests: over tokens, and over
	// the count category of the drawn token (see countCategory).
	Tokens, Counts Sensitivity
}

// Sensitivity is what a tracked case's test could see: the non-centralities, at the
// case's draws, of a sampler that ignores the penalties, of one that never counts its
// output tokens (only the prompt's marks reach the penalties), and of one whose frequency
// penalty counts a token once however often it was drawn; and the non-centrality the
// test catches with probability 0.99 at its degrees of freedom.
type Sensitivity struct {
	Ignored, Unrecorded, CountedOnce, Detectable float64
}

// trackedCategories is the number of count categories (see countCategory).
const trackedCategories = 8

// countCategory sorts a token by what the penalties see of it: its output count (0, 1,
// 2, 3 or more) and whether the prompt holds it. Rows differ in which tokens they drew,
// so a per-token test blurs the penalties' effect over the row; over these categories a
// penalty applied to the wrong count shows at full strength.
func countCategory(c uint32) int {
	k := int(min(c&^PromptBit, 3))
	if c&PromptBit != 0 {
		k += 4
	}
	return k
}

// pooledLaw sums the laws of the tested draws: per token, and per count category.
type pooledLaw struct {
	tokens     []float64
	categories [trackedCategories]float64
}

func newPooledLaw(v int) *pooledLaw { return &pooledLaw{tokens: make([]float64, v)} }

// add adds one draw's law p, at the row's counts.
func (l *pooledLaw) add(p []float64, counts []uint32) {
	for i, q := range p {
		l.tokens[i] += q
		l.categories[countCategory(counts[i])] += q
	}
}

// normalise divides by the number of draws added.
func (l *pooledLaw) normalise(n int) {
	for i := range l.tokens {
		l.tokens[i] /= float64(n)
	}
	for i := range l.categories {
		l.categories[i] /= float64(n)
	}
}

// processedLaw is the law of a tracked case's draw at the given counts.
func processedLaw(c *Case, counts []uint32, filter Filter) ([]float64, error) {
	proc := *c.Processors
	proc.Counts = counts
	x, err := ProcessedLogits(c.Logits, proc)
	if err != nil {
		return nil, err
	}
	return Probabilities(x, c.Temperature, filter)
}

// RunTracked runs a tracked case on dev.
func RunTracked(dev runtime.Device, tc TrackedCase) (Outcome, TrackedReport) {
	out := Outcome{Case: tc.Name}
	var rep TrackedReport
	if err := runTracked(dev, &tc, &out, &rep); err != nil {
		out.Pass = false
		out.Message = err.Error()
	}
	return out, rep
}

func runTracked(dev runtime.Device, tc *TrackedCase, out *Outcome, rep *TrackedReport) error {
	c := &tc.Case
	v := c.Vocab()
	if c.Processors == nil || v == 0 || tc.BuildSteps < 1 {
		return errors.New("statistical: a tracked case needs logits, processors and build steps")
	}
	filter := Filter{TopK: c.TopK, TopP: c.TopP, MinP: c.MinP}
	rows := max(1, min(trackedRows, c.Draws))
	s, err := newSampler(dev, c.Options())
	if err != nil {
		return err
	}
	defer s.Close()
	buf, err := dev.Alloc(rows * v * 4)
	if err != nil {
		return fmt.Errorf("allocate %d logits rows: %w", rows, err)
	}
	defer buf.Free()
	st := dev.DefaultStream()
	row := runtime.BytesOf(c.Logits)
	for r := 0; r < rows; r++ {
		if err := st.CopyToDevice(buf, r*len(row), row); err != nil {
			return fmt.Errorf("upload logits: %w", err)
		}
	}
	if err := st.Synchronize(); err != nil {
		return fmt.Errorf("upload logits: %w", err)
	}

	// What the test is compared with: the law the processed logits give (want), and
	// the laws of three broken samplers (see TrackedReport).
	laws := []*pooledLaw{newPooledLaw(v), newPooledLaw(v), newPooledLaw(v), newPooledLaw(v)}
	want, ignored, unrecorded, countedOnce := laws[0], laws[1], laws[2], laws[3]
	brokenCounts := make([]uint32, v)
	counts := make([]int64, v)
	var categories [trackedCategories]int64
	host := make([][]uint32, rows)
	for r := range host {
		host[r] = make([]uint32, v)
	}
	device := make([]uint32, v)
	params := make([]sampler.Params, rows)
	var res sampler.Result
	tested := 0
	for done, round := 0, 0; done < c.Draws; round++ {
		n := min(rows, c.Draws-done)
		for r := 0; r < n; r++ {
			if err := s.TrackTokens(r, v, c.Processors.Prompt); err != nil {
				return fmt.Errorf("row %d: track tokens: %w", r, err)
			}
			copy(host[r], PromptCounts(v, c.Processors.Prompt))
		}
		lg := sampler.Logits{Data: buf, DType: sampler.Float32, Rows: n, Vocab: v}
		// Row r of this round is draw number done+r; its steps are
		// (done+r)·(BuildSteps+1) + k, the last one tested: no step is used twice.
		sample := func(k int) error {
			for r := 0; r < n; r++ {
				params[r] = c.Params(uint64(done+r)*uint64(tc.BuildSteps+1) + uint64(k))
			}
			if err := s.Sample(lg, params[:n], &res); err != nil {
				return fmt.Errorf("round %d, step %d: %w", round, k, err)
			}
			for r := 0; r < n; r++ {
				if res.Errs[r] != nil || res.Routes[r] != c.Route {
					return fmt.Errorf("round %d, step %d, row %d: route %v (want %v), err %v", round, k, r, res.Routes[r], c.Route, res.Errs[r])
				}
				if t := res.Tokens[r]; t < 0 || int(t) >= v {
					return fmt.Errorf("round %d, step %d, row %d: token %d outside [0, %d)", round, k, r, t, v)
				}
			}
			return nil
		}
		for k := 0; k < tc.BuildSteps; k++ {
			if err := sample(k); err != nil {
				return err
			}
			for r := 0; r < n; r++ {
				host[r][res.Tokens[r]]++
			}
		}
		checks := n
		if round > 0 {
			checks = min(n, countChecksPerRound)
		}
		for r := 0; r < checks; r++ {
			if err := s.TokenCounts(r, device); err != nil {
				return fmt.Errorf("row %d: token counts: %w", r, err)
			}
			for i := range device {
				if device[i] != host[r][i] {
					return fmt.Errorf("round %d, row %d, token %d: the device counted %#x, its %d tokens recount to %#x",
						round, r, i, device[i], tc.BuildSteps, host[r][i])
				}
			}
		}
		rep.CountsCompared += checks

		if err := sample(tc.BuildSteps); err != nil {
			return err
		}
		for r := 0; r < n; r++ {
			p, err := processedLaw(c, host[r], filter)
			if errors.Is(err, ErrAmbiguous) {
				rep.Ambiguous++
				continue
			}
			if err != nil {
				return fmt.Errorf("row %d: %w", r, err)
			}
			t := res.Tokens[r]
			if p[t] == 0 {
				return fmt.Errorf("round %d, row %d: drew token %d (logit %v, counts %#x), whose processed probability is 0",
					round, r, t, c.Logits[t], host[r][t])
			}
			want.add(p, host[r])
			// The broken samplers' laws at this row's counts; a row too close to call
			// for one of them adds the true law there (no evidence either way).
			broken := []struct {
				law    *pooledLaw
				counts func(i int, n uint32) uint32
			}{
				{ignored, func(int, uint32) uint32 { return 0 }},
				{unrecorded, func(_ int, n uint32) uint32 { return n & PromptBit }},
				{countedOnce, func(_ int, n uint32) uint32 {
					if n&^PromptBit > 1 {
						return n&PromptBit | 1
					}
					return n
				}},
			}
			for _, b := range broken {
				for i, n := range host[r] {
					brokenCounts[i] = b.counts(i, n)
				}
				q, err := processedLaw(c, brokenCounts, filter)
				switch {
				case errors.Is(err, ErrAmbiguous):
					q = p
				case err != nil:
					return fmt.Errorf("row %d: %w", r, err)
				}
				b.law.add(q, host[r])
			}
			counts[t]++
			categories[countCategory(host[r][t])]++
			tested++
		}
		done += n
	}
	out.Draws = c.Draws
	if tested == 0 {
		return errors.New("every tested draw was ambiguous")
	}
	for _, l := range laws {
		l.normalise(tested)
	}
	tokens, err := ChiSquareTest(want.tokens, counts, BinTokens)
	if err != nil {
		return err
	}
	byCount, err := ChiSquareTest(want.categories[:], categories[:], BinTokens)
	if err != nil {
		return err
	}
	out.ChiSquare, out.DF, out.PValue, out.Bins = tokens.ChiSquare, tokens.DF, tokens.PValue, tokens.Bins
	out.Pass = tokens.Pass(c.Alpha) && byCount.Pass(c.Alpha)
	n := float64(tested)
	rep.Tokens = Sensitivity{
		Ignored:     n * Noncentrality(want.tokens, ignored.tokens),
		Unrecorded:  n * Noncentrality(want.tokens, unrecorded.tokens),
		CountedOnce: n * Noncentrality(want.tokens, countedOnce.tokens),
		Detectable:  DetectableNoncentrality(max(1, tokens.DF), c.Alpha, 0.99),
	}
	rep.Counts = Sensitivity{
		Ignored:     n * Noncentrality(want.categories[:], ignored.categories[:]),
		Unrecorded:  n * Noncentrality(want.categories[:], unrecorded.categories[:]),
		CountedOnce: n * Noncentrality(want.categories[:], countedOnce.categories[:]),
		Detectable:  DetectableNoncentrality(max(1, byCount.DF), c.Alpha, 0.99),
	}
	out.Message = fmt.Sprintf("tokens: chi2 = %.1f on %d df, p = %.3g; count categories: chi2 = %.1f on %d df, p = %.3g; "+
		"%d tested draws (%d ambiguous left out); counts of %d rows matched the recount; non-centralities (tokens / categories) "+
		"if penalties were ignored %.0f / %.0f, if outputs were never counted %.0f / %.0f, if the frequency penalty counted each token once %.0f / %.0f "+
		"(caught at 99%%: %.0f / %.0f)",
		tokens.ChiSquare, tokens.DF, tokens.PValue, byCount.ChiSquare, byCount.DF, byCount.PValue,
		tested, rep.Ambiguous, rep.CountsCompared, rep.Tokens.Ignored, rep.Counts.Ignored, rep.Tokens.Unrecorded, rep.Counts.Unrecorded,
		rep.Tokens.CountedOnce, rep.Counts.CountedOnce, rep.Tokens.Detectable, rep.Counts.Detectable)
	switch {
	case tokens.ZeroDrawn+byCount.ZeroDrawn > 0:
		out.Message = "FAIL: impossible draws: " + out.Message
	case !out.Pass:
		out.Message = "FAIL: p < alpha: " + out.Message
	}
	return nil
}
