package statistical

import (
	"errors"
	"fmt"
	"math"

	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/sampler"
)

// v2Checks are the property checks of the ABI version 2 features.
func v2Checks() []Check {
	return []Check{
		{"logprobs", "Result.Logprobs matches a float64 log-softmax of the raw and of the processed logits on every route, within LogprobTolerance", func(dev runtime.Device) error {
			_, err := MeasureLogprobs(dev, probeVocab)
			return err
		}},
		{"top-logprobs", "Result.Top lists the most likely raw tokens in order (ties to the lowest index) with their raw log-probabilities", checkTopLogprobs},
		{"draws-are-steps", "SampleN's draw z of a row is the token (and record) a Sample call at step+z gives", checkDrawsAreSteps},
		{"distinct", "SampleDistinct draws distinct tokens, the first Sample's token, with processed log-probabilities", checkDistinct},
		{"determinism", "the same seed and step give the same tokens, log-probabilities and device counts at any batch position, through Sample and through Batch.Launch", checkDeterminism},
		{"v2-bad-input", "bad penalties, top log-probabilities, distinct draws and processor settings get their own errors; the batch's other rows keep their tokens", checkV2BadInput},
	}
}

func checkV2BadInput(dev runtime.Device) error {
	vocab := probeVocab
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	good := randomRows(1, vocab, 1, 151)
	seeded := func(p sampler.Params) sampler.Params { p.Seed, p.HasSeed, p.Step = 21, true, 2; return p }
	rows := []badRow{
		{"gumbel", seeded(sampler.Params{Temperature: 0.8, Logprobs: true}), nil, nil},
		{"negative repetition penalty", seeded(sampler.Params{Temperature: 0.8, RepetitionPenalty: -1}), nil, sampler.ErrPenalty},
		{"infinite repetition penalty", seeded(sampler.Params{Temperature: 0.8, RepetitionPenalty: inf}), nil, sampler.ErrPenalty},
		{"NaN frequency penalty", seeded(sampler.Params{Temperature: 0.8, FrequencyPenalty: nan}), nil, sampler.ErrPenalty},
		{"infinite presence penalty", seeded(sampler.Params{TopK: 5, Temperature: 1, PresencePenalty: -inf}), nil, sampler.ErrPenalty},
		{"21 top log-probabilities", seeded(sampler.Params{Temperature: 0.8, TopLogprobs: sampler.MaxTopLogprobs + 1}), nil, sampler.ErrTopLogprobs},
		{"negative top log-probabilities", seeded(sampler.Params{TopLogprobs: -1}), nil, sampler.ErrTopLogprobs},
		{"filtered with logprobs", seeded(sampler.Params{Temperature: 1, TopP: 0.9, Logprobs: true, TopLogprobs: 3}), nil, nil},
	}
	s, err := newSampler(dev, sampler.Options{Gumbel: sampler.On, Split: sampler.On})
	if err != nil {
		return err
	}
	defer s.Close()
	if _, _, err := sampleAmongBad(s, good, vocab, rows); err != nil {
		return err
	}
	var res sampler.Result

	// Distinct draws: a filtered row, and more draws than finite tokens.
	few := append([]float32(nil), good...)
	for i := 3; i < vocab; i++ {
		few[i] = float32(math.Inf(-1))
	}
	distinctLogits := append(append(append([]float32(nil), good...), good...), few...)
	distinctParams := []sampler.Params{
		seeded(sampler.Params{Temperature: 1}),
		seeded(sampler.Params{Temperature: 1, MinP: 0.1}),
		seeded(sampler.Params{Temperature: 1}),
	}
	if err := s.SampleDistinctFloat32(distinctLogits, vocab, distinctParams, 4, &res); err != nil {
		return fmt.Errorf("distinct draws with bad rows failed as a whole: %w", err)
	}
	for i, want := range []error{nil, sampler.ErrDistinctFiltered, sampler.ErrTooFewTokens} {
		if !errors.Is(res.Errs[i], want) || (want == nil) != (res.Tokens[4*i] >= 0) {
			return fmt.Errorf("distinct row %d: token %d, err %v; want %v", i, res.Tokens[4*i], res.Errs[i], want)
		}
	}
	var r sampler.Result
	for _, n := range []int{0, sampler.MaxTopLogprobs + 1} {
		if err := s.SampleDistinctFloat32(good, vocab, distinctParams[:1], n, &r); !errors.Is(err, sampler.ErrDraws) {
			return fmt.Errorf("%d distinct draws: got %v, want ErrDraws", n, err)
		}
	}
	for _, n := range []int{0, sampler.MaxDraws + 1} {
		if err := s.SampleNFloat32(good, vocab, distinctParams[:1], n, &r); !errors.Is(err, sampler.ErrDraws) {
			return fmt.Errorf("SampleN with %d draws: got %v, want ErrDraws", n, err)
		}
	}

	// Processor setters.
	setters := []struct {
		name string
		err  error
		want error
	}{
		{"bias row out of range", s.SetLogitBias(-1, vocab, []int32{1}, []float32{1}), sampler.ErrRow},
		{"bias token out of range", s.SetLogitBias(0, vocab, []int32{int32(vocab)}, []float32{1}), sampler.ErrToken},
		{"bias token repeated", s.SetLogitBias(0, vocab, []int32{3, 3}, []float32{1, 2}), sampler.ErrToken},
		{"NaN bias", s.SetLogitBias(0, vocab, []int32{1}, []float32{nan}), sampler.ErrBias},
		{"bias lengths differ", s.SetLogitBias(0, vocab, []int32{1, 2}, []float32{1}), sampler.ErrBias},
		{"allowed token negative", s.SetAllowedTokens(0, vocab, []int32{-1}), sampler.ErrToken},
		{"banned row out of range", s.SetBannedTokens(sampler.MaxProcessorRows, vocab, []int32{1}), sampler.ErrRow},
		{"prompt token out of range", s.TrackTokens(0, vocab, []int32{int32(vocab) + 5}), sampler.ErrToken},
	}
	for _, st := range setters {
		if !errors.Is(st.err, st.want) {
			return fmt.Errorf("%s: got %v, want %v", st.name, st.err, st.want)
		}
	}
	// A processor vocabulary other than the one rows hold is a shape error.
	if err := s.SetBannedTokens(1, vocab, []int32{5}); err != nil {
		return err
	}
	if err := s.SetBannedTokens(2, vocab+1, []int32{5}); !errors.Is(err, sampler.ErrShape) {
		return fmt.Errorf("banned tokens for another vocabulary: got %v, want ErrShape", err)
	}
	return nil
}

// LogprobTolerance bounds the error of a log-probability against the float64 reference:
// 2e-5 relative to the larger of 1, the log-normaliser and the scaled logit. The ABI lets
// editions compute log-sum-exps with an exp of relative error 2^-20 (about 1e-6) and
// float32 sums, which it says agree to about 1e-5 relative; the subtraction x - LSE then
// loses at most that much of the larger operand.
func LogprobTolerance(lse, x float64) float64 {
	return 2e-5 * max(1, math.Abs(lse), math.Abs(x))
}

// LogprobReport is what MeasureLogprobs saw: the number of records compared, and for
// each field of the record the largest error relative to LogprobTolerance (1 = at the
// bound) and the largest absolute error.
type LogprobReport struct {
	// Records were compared; Ambiguous rows were not, their filter boundary being too
	// close to call (see ErrAmbiguous).
	Records, Ambiguous int
	// Relative errors (error / LogprobTolerance).
	RelRaw, RelProcessed, RelRawLSE, RelProcessedLSE float64
	// Absolute errors (the two log-normalisers share one).
	AbsRaw, AbsProcessed, AbsLSE float64
}

// logprobProbe is one row of the logprob check: its parameters and processors.
type logprobProbe struct {
	params sampler.Params
	proc   *Processors
}

// logprobProbes cycles through every route, with and without processors.
func logprobProbes(x []float32, rows int) []logprobProbe {
	kinds := []logprobProbe{
		{sampler.Params{Temperature: 0.8}, nil},
		{sampler.Params{Temperature: 1.3}, biasProcessors(x)},
		{sampler.Params{}, nil},
		{sampler.Params{}, allProcessors(x)},
		{sampler.Params{Temperature: 1, TopK: 40, TopP: 0.9}, nil},
		{sampler.Params{Temperature: 0.7, MinP: 0.02, RepetitionPenalty: 1.8}, repetitionProcessors(x)},
		{sampler.Params{Temperature: 1.2, TopP: 0.8}, bannedProcessors(x)},
		{sampler.Params{Temperature: 0.6}, allowedProcessors(x)},
		// T = 1 with processors: the raw and processed log-normalisers differ although
		// the temperature changes nothing (a shortcut that shares them must not fire).
		{sampler.Params{Temperature: 1}, allProcessors(x)},
	}
	out := make([]logprobProbe, rows)
	for i := range out {
		k := kinds[i%len(kinds)]
		k.params.Logprobs = true
		k.params.Seed, k.params.HasSeed, k.params.Step = uint64(i)*0x9E3779B9+3, true, uint64(i)
		if k.proc != nil {
			k.params.RepetitionPenalty = k.proc.Repetition
		}
		out[i] = k
	}
	return out
}

// MeasureLogprobs samples rows of a random vocab-token row on every route, with and
// without processors, asks for log-probabilities, and compares every field of the record
// with the float64 reference: raw log-softmax (no processors, no temperature); processed
// log-softmax of the processed logits over the temperature (1 for greedy rows), over the
// kept set for filtered rows. It returns the largest errors and an error naming the
// first record beyond LogprobTolerance.
func MeasureLogprobs(dev runtime.Device, vocab int) (LogprobReport, error) {
	var rep LogprobReport
	const rows = 16
	base := randomRows(1, vocab, 1.5, 91)
	probes := logprobProbes(base, rows)
	logits := make([]float32, rows*vocab)
	for r := range rows {
		copy(logits[r*vocab:], base)
	}
	s, err := newSampler(dev, sampler.Options{Seed: 3, Gumbel: sampler.On, Split: sampler.On})
	if err != nil {
		return rep, err
	}
	defer s.Close()
	params := make([]sampler.Params, rows)
	for r, p := range probes {
		params[r] = p.params
		if p.proc != nil {
			if err := attachProcessors(s, r, vocab, p.proc); err != nil {
				return rep, err
			}
			if p.proc.Prompt != nil {
				if err := s.TrackTokens(r, vocab, p.proc.Prompt); err != nil {
					return rep, err
				}
			}
		}
	}
	res, err := sampleHost(s, logits, vocab, params)
	if err != nil {
		return rep, err
	}
	if err := rowErrors(res); err != nil {
		return rep, err
	}
	rawLP, rawLSE, err := LogSoftmax(base, 1)
	if err != nil {
		return rep, err
	}
	for r, p := range probes {
		tok := res.Tokens[r]
		got := res.Logprobs[r]
		ref, err := referenceRecord(base, p, tok, rawLP, rawLSE)
		if errors.Is(err, ErrAmbiguous) {
			// float32 and float64 may keep different tokens, and so differ in the
			// kept set's log-normaliser: nothing to compare.
			rep.Ambiguous++
			continue
		}
		if err != nil {
			return rep, fmt.Errorf("row %d: %w", r, err)
		}
		rep.Records++
		fields := []struct {
			name      string
			got, want float64
			scale     float64
			rel       *float64
			abs       *float64
		}{
			{"raw", float64(got.Raw), ref.raw, LogprobTolerance(rawLSE, float64(base[tok])), &rep.RelRaw, &rep.AbsRaw},
			{"raw LSE", float64(got.RawLSE), rawLSE, LogprobTolerance(rawLSE, 0), &rep.RelRawLSE, &rep.AbsLSE},
			{"processed", float64(got.Processed), ref.processed, LogprobTolerance(ref.processedLSE, ref.scaled), &rep.RelProcessed, &rep.AbsProcessed},
			{"processed LSE", float64(got.ProcessedLSE), ref.processedLSE, LogprobTolerance(ref.processedLSE, 0), &rep.RelProcessedLSE, &rep.AbsLSE},
		}
		for _, f := range fields {
			e := math.Abs(f.got - f.want)
			if !(e <= f.scale) { // NaN fails too
				return rep, fmt.Errorf("row %d (route %v, token %d, %+v): %s log-probability field %v, reference %v (error %.3g > %.3g)",
					r, res.Routes[r], tok, p.params, f.name, f.got, f.want, e, f.scale)
			}
			*f.rel = max(*f.rel, e/f.scale)
			*f.abs = max(*f.abs, e)
		}
	}
	if rep.Records < rows*3/4 {
		return rep, fmt.Errorf("only %d of %d rows had filter boundaries clear enough to compare", rep.Records, rows)
	}
	return rep, nil
}

// record is the float64 reference of one log-probability record.
type record struct {
	raw, processed, processedLSE float64
	// scaled is the token's processed logit over the temperature.
	scaled float64
}

// referenceRecord computes the reference record of token tok of a probe's row.
func referenceRecord(x []float32, p logprobProbe, tok int32, rawLP []float64, rawLSE float64) (record, error) {
	rec := record{raw: rawLP[tok]}
	processed := x
	if p.proc != nil {
		var err error
		if processed, err = ProcessedLogits(x, *p.proc); err != nil {
			return rec, err
		}
	}
	t := p.params.Temperature
	filter := Filter{TopK: p.params.TopK, TopP: p.params.TopP, MinP: p.params.MinP}
	greedy := t == 0 || filter.TopK == 1
	if greedy || filter == (Filter{}) {
		if greedy {
			t = 1
		}
		lp, lse, err := LogSoftmax(processed, t)
		if err != nil {
			return rec, err
		}
		rec.processed, rec.processedLSE, rec.scaled = lp[tok], lse, float64(processed[tok])/float64(t)
		return rec, nil
	}
	probs, err := Probabilities(processed, t, filter)
	if err != nil {
		return rec, err
	}
	if probs[tok] == 0 {
		return rec, fmt.Errorf("token %d is outside the kept set", tok)
	}
	// The kept set's log-normaliser: log Σ over kept of exp(x'/T).
	top := math.Inf(-1)
	for i, q := range probs {
		if q > 0 {
			top = max(top, float64(processed[i])/float64(t))
		}
	}
	sum := 0.0
	for i, q := range probs {
		if q > 0 {
			sum += math.Exp(float64(processed[i])/float64(t) - top)
		}
	}
	rec.processedLSE = top + math.Log(sum)
	rec.scaled = float64(processed[tok]) / float64(t)
	rec.processed = rec.scaled - rec.processedLSE
	return rec, nil
}

func checkTopLogprobs(dev runtime.Device) error {
	vocab := probeVocab
	const rows = 6
	logits := randomRows(rows, vocab, 2, 101)
	neg := float32(math.Inf(-1))
	// Row 1: ties at the top, the lowest index first. Row 4: only three finite logits,
	// fewer than it asks for.
	for _, i := range []int{4000, 17, 2500} {
		logits[vocab+i] = 20
	}
	for i := range vocab {
		if i != 10 && i != 20 && i != 30 {
			logits[4*vocab+i] = neg
		}
	}
	asks := []int{1, 5, 20, 7, 5, 20}
	params := make([]sampler.Params, rows)
	for r := range params {
		params[r] = sampler.Params{Temperature: float32(r%3) * 0.5, TopLogprobs: asks[r], Seed: uint64(r), HasSeed: true}
	}
	params[5].TopK, params[5].Temperature = 10, 1 // a filtered row: top log-probabilities stay raw
	s, err := newSampler(dev, sampler.Options{Gumbel: sampler.On, Split: sampler.On})
	if err != nil {
		return err
	}
	defer s.Close()
	res, err := sampleHost(s, logits, vocab, params)
	if err != nil {
		return err
	}
	if err := rowErrors(res); err != nil {
		return err
	}
	if len(res.Top) < rows {
		return fmt.Errorf("Result.Top has %d rows, want %d", len(res.Top), rows)
	}
	for r := range rows {
		row := logits[r*vocab : (r+1)*vocab]
		lp, lse, err := LogSoftmax(row, 1)
		if err != nil {
			return err
		}
		order := ranked(row)
		want := asks[r]
		finite := 0
		for _, x := range row {
			if !math.IsInf(float64(x), -1) {
				finite++
			}
		}
		want = min(want, finite)
		top := res.Top[r]
		if top.Count != want {
			return fmt.Errorf("row %d: %d top log-probabilities, want %d", r, top.Count, want)
		}
		for j := 0; j < want; j++ {
			tok := order[j]
			if top.Tokens[j] != tok {
				return fmt.Errorf("row %d: top entry %d is token %d (logit %v), the sorted reference has %d (logit %v)",
					r, j, top.Tokens[j], row[max(0, top.Tokens[j])], tok, row[tok])
			}
			if e := math.Abs(float64(top.Logprobs[j]) - lp[tok]); !(e <= LogprobTolerance(lse, float64(row[tok]))) {
				return fmt.Errorf("row %d: top entry %d (token %d): log-probability %v, reference %v", r, j, tok, top.Logprobs[j], lp[tok])
			}
			if j > 0 && top.Logprobs[j] > top.Logprobs[j-1] {
				return fmt.Errorf("row %d: top entries %d and %d out of order", r, j-1, j)
			}
		}
	}
	return nil
}

func checkDrawsAreSteps(dev runtime.Device) error {
	vocab := probeVocab
	const rows, draws = 8, 5
	logits := randomRows(rows, vocab, 1.5, 111)
	params := mixedParams(rows, 40)
	for r := range params {
		params[r].Logprobs = true
	}
	s, err := newSampler(dev, sampler.Options{Seed: 8, Gumbel: sampler.On, Split: sampler.On})
	if err != nil {
		return err
	}
	defer s.Close()
	var many sampler.Result
	if err := s.SampleNFloat32(logits, vocab, params, draws, &many); err != nil {
		return err
	}
	if err := rowErrors(many); err != nil {
		return err
	}
	if many.Draws != draws {
		return fmt.Errorf("SampleN result has %d draws per row, want %d", many.Draws, draws)
	}
	distinctSteps := map[[2]int32]bool{}
	for z := 0; z < draws; z++ {
		stepped := append([]sampler.Params(nil), params...)
		for r := range stepped {
			stepped[r].Step += uint64(z)
		}
		one, err := sampleHost(s, logits, vocab, stepped)
		if err != nil {
			return err
		}
		for r := range rows {
			o := r*draws + z
			if many.Tokens[o] != one.Tokens[r] {
				return fmt.Errorf("row %d draw %d: SampleN drew %d, Sample at step %d drew %d", r, z, many.Tokens[o], stepped[r].Step, one.Tokens[r])
			}
			if !sameRecord(many.Logprobs[o], one.Logprobs[r]) {
				return fmt.Errorf("row %d draw %d: SampleN record %+v, Sample's %+v", r, z, many.Logprobs[o], one.Logprobs[r])
			}
			distinctSteps[[2]int32{int32(r), many.Tokens[o]}] = true
		}
	}
	if len(distinctSteps) <= rows {
		return errors.New("no row drew two different tokens over its draws: the steps do not reach the draws")
	}
	return nil
}

// sameRecord reports whether two records agree within LogprobTolerance (two launch shapes
// may sum the log-sum-exps in different orders).
func sameRecord(a, b sampler.Logprob) bool {
	near := func(x, y float32) bool {
		return math.Abs(float64(x)-float64(y)) <= LogprobTolerance(float64(y), 0)
	}
	return near(a.Raw, b.Raw) && near(a.Processed, b.Processed) && near(a.RawLSE, b.RawLSE) && near(a.ProcessedLSE, b.ProcessedLSE)
}

func checkDistinct(dev runtime.Device) error {
	vocab := probeVocab
	const rows, n = 6, 4
	logits := randomRows(rows, vocab, 1.5, 121)
	temps := []float32{0.7, 1, 0, 1.4, 0.5, 1}
	params := make([]sampler.Params, rows)
	for r := range params {
		params[r] = sampler.Params{Temperature: temps[r], Seed: uint64(r) + 50, HasSeed: true, Step: uint64(3 * r), Logprobs: true}
	}
	s, err := newSampler(dev, sampler.Options{Gumbel: sampler.On, Split: sampler.On})
	if err != nil {
		return err
	}
	defer s.Close()
	// Row 5 bans its top token: the processed distribution is the one drawn from.
	proc := &Processors{Banned: []int32{ranked(logits[5*vocab : 6*vocab])[0]}}
	if err := attachProcessors(s, 5, vocab, proc); err != nil {
		return err
	}
	var res sampler.Result
	if err := s.SampleDistinctFloat32(logits, vocab, params, n, &res); err != nil {
		return err
	}
	if err := rowErrors(res); err != nil {
		return err
	}
	one, err := sampleHost(s, logits, vocab, params)
	if err != nil {
		return err
	}
	for r := range rows {
		row := logits[r*vocab : (r+1)*vocab]
		if r == 5 {
			if row, err = ProcessedLogits(row, *proc); err != nil {
				return err
			}
		}
		lp, lse, err := LogSoftmax(row, temps[r])
		if err != nil {
			return err
		}
		got := res.Tokens[r*n : (r+1)*n]
		if got[0] != one.Tokens[r] {
			return fmt.Errorf("row %d: first distinct draw %d, Sample drew %d", r, got[0], one.Tokens[r])
		}
		seen := map[int32]bool{}
		for j, t := range got {
			if t < 0 || int(t) >= vocab || seen[t] || math.IsInf(float64(row[t]), -1) {
				return fmt.Errorf("row %d: draw %d is %d: out of range, repeated or banned (draws %v)", r, j, t, got)
			}
			seen[t] = true
			want := lp[t]
			if e := math.Abs(float64(res.Logprobs[r*n+j].Processed) - want); !(e <= LogprobTolerance(lse, float64(row[t]))) {
				return fmt.Errorf("row %d draw %d (token %d): processed log-probability %v, reference %v", r, j, t, res.Logprobs[r*n+j].Processed, want)
			}
		}
		if temps[r] == 0 {
			order := ranked(row)
			for j := range n {
				if got[j] != order[j] {
					return fmt.Errorf("greedy row %d: distinct draws %v, want the largest logits in order %v", r, got, order[:n])
				}
			}
		}
	}
	return nil
}

// determinismStep is one step's outputs of the probe rows.
type determinismStep struct {
	tokens []int32
	recs   []sampler.Logprob
}

func checkDeterminism(dev runtime.Device) error {
	vocab := probeVocab
	const steps = 4
	const firstStep = 100
	base := randomRows(1, vocab, 1.5, 131)
	probes := []logprobProbe{
		{sampler.Params{Temperature: 0.9, FrequencyPenalty: 0.5, PresencePenalty: 0.5, RepetitionPenalty: 1.2}, biasProcessors(base)},
		{sampler.Params{Temperature: 1, TopK: 50, MinP: 0.01, FrequencyPenalty: 1}, &Processors{Prompt: repetitionPrompt(base), Banned: []int32{7, 8}}},
		{sampler.Params{FrequencyPenalty: 2}, &Processors{Prompt: []int32{}}},
		{sampler.Params{Temperature: 0.7}, nil},
	}
	for i := range probes {
		probes[i].params.Seed, probes[i].params.HasSeed = uint64(i)+900, true
		probes[i].params.Logprobs = true
	}
	fillers := randomRows(3, vocab, 2, 141)
	fillerParams := mixedParams(3, 5)
	layouts := []struct {
		name      string
		positions []int
		size      int
	}{
		{"probes first", []int{0, 1, 2, 3}, 4},
		{"probes among fillers", []int{5, 1, 3, 6}, 7},
	}
	s, err := newSampler(dev, sampler.Options{Seed: 4, Gumbel: sampler.On, Split: sampler.On})
	if err != nil {
		return err
	}
	defer s.Close()

	// setup attaches the probes' processors at their positions (and clears the
	// fillers'), restarts tracking, and returns the batch's logits and parameters.
	setup := func(positions []int, size int) ([]float32, []sampler.Params, error) {
		logits := make([]float32, size*vocab)
		params := make([]sampler.Params, size)
		used := make([]bool, size)
		for i, pos := range positions {
			copy(logits[pos*vocab:], base)
			params[pos], used[pos] = probes[i].params, true
		}
		f := 0
		for pos := range size {
			if err := s.ClearProcessors(pos); err != nil {
				return nil, nil, err
			}
			if !used[pos] {
				copy(logits[pos*vocab:], fillers[f*vocab:(f+1)*vocab])
				params[pos] = fillerParams[f]
				f++
			}
		}
		for i, pos := range positions {
			p := probes[i].proc
			if p == nil {
				continue
			}
			if err := attachProcessors(s, pos, vocab, p); err != nil {
				return nil, nil, err
			}
			if p.Prompt != nil {
				if err := s.TrackTokens(pos, vocab, p.Prompt); err != nil {
					return nil, nil, err
				}
			}
		}
		return logits, params, nil
	}
	countsOf := func(positions []int) ([][]uint32, error) {
		out := make([][]uint32, len(positions))
		for i, pos := range positions {
			out[i] = make([]uint32, vocab)
			if err := s.TokenCounts(pos, out[i]); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	collect := func(res *sampler.Result, positions []int) (determinismStep, error) {
		var st determinismStep
		for _, pos := range positions {
			if res.Errs[pos] != nil {
				return st, fmt.Errorf("row %d: %w", pos, res.Errs[pos])
			}
			st.tokens = append(st.tokens, res.Tokens[pos])
			st.recs = append(st.recs, res.Logprobs[pos])
		}
		return st, nil
	}
	compare := func(what string, want, got []determinismStep, wantCounts, gotCounts [][]uint32) error {
		for k := range want {
			for i := range want[k].tokens {
				if got[k].tokens[i] != want[k].tokens[i] || !sameRecord(got[k].recs[i], want[k].recs[i]) {
					return fmt.Errorf("%s: step %d, probe %d: token %d record %+v; first layout: token %d record %+v",
						what, k, i, got[k].tokens[i], got[k].recs[i], want[k].tokens[i], want[k].recs[i])
				}
			}
		}
		for i := range wantCounts {
			for t := range wantCounts[i] {
				if gotCounts[i][t] != wantCounts[i][t] {
					return fmt.Errorf("%s: probe %d, token %d: device count %#x; first layout: %#x", what, i, t, gotCounts[i][t], wantCounts[i][t])
				}
			}
		}
		return nil
	}

	var first []determinismStep
	var firstCounts [][]uint32
	for li, lay := range layouts {
		logits, params, err := setup(lay.positions, lay.size)
		if err != nil {
			return err
		}
		var run []determinismStep
		for k := range steps {
			for _, pos := range lay.positions {
				params[pos].Step = firstStep + uint64(k)
			}
			res, err := sampleHost(s, logits, vocab, params)
			if err != nil {
				return err
			}
			st, err := collect(&res, lay.positions)
			if err != nil {
				return fmt.Errorf("%s, step %d: %w", lay.name, k, err)
			}
			run = append(run, st)
		}
		counts, err := countsOf(lay.positions)
		if err != nil {
			return err
		}
		if li == 0 {
			first, firstCounts = run, counts
			if err := checkCountsRecount(first, counts, probes); err != nil {
				return err
			}
			continue
		}
		if err := compare("Sample, "+lay.name, first, run, firstCounts, counts); err != nil {
			return err
		}
	}

	// The same steps through a Batch: parameters on the device, the step advanced there.
	lay := layouts[1]
	logits, params, err := setup(lay.positions, lay.size)
	if err != nil {
		return err
	}
	b, err := s.NewBatch(lay.size, vocab, sampler.Float32, 1)
	if err != nil {
		return fmt.Errorf("new batch: %w", err)
	}
	defer b.Close()
	for pos, p := range params {
		p.Step = firstStep
		if err := b.SetRow(pos, p); err != nil {
			return fmt.Errorf("batch row %d: %w", pos, err)
		}
	}
	buf, err := dev.Alloc(len(logits) * 4)
	if err != nil {
		return err
	}
	defer buf.Free()
	st := s.Stream()
	if err := st.CopyToDevice(buf, 0, runtime.BytesOf(logits)); err != nil {
		return err
	}
	lg := sampler.Logits{Data: buf, DType: sampler.Float32, Rows: lay.size, Vocab: vocab}
	var run []determinismStep
	var res sampler.Result
	for k := range steps {
		if err := b.Launch(lg); err != nil {
			return fmt.Errorf("launch %d: %w", k, err)
		}
		if err := b.Read(&res); err != nil {
			return fmt.Errorf("read %d: %w", k, err)
		}
		stp, err := collect(&res, lay.positions)
		if err != nil {
			return fmt.Errorf("batch launch %d: %w", k, err)
		}
		run = append(run, stp)
	}
	counts, err := countsOf(lay.positions)
	if err != nil {
		return err
	}
	return compare("Batch.Launch, "+lay.name, first, run, firstCounts, counts)
}

// checkCountsRecount checks that the device counts of the tracked probes are their
// prompt marks plus a recount of the tokens they drew.
func checkCountsRecount(run []determinismStep, counts [][]uint32, probes []logprobProbe) error {
	for i, p := range probes {
		want := make([]uint32, len(counts[i]))
		if p.proc != nil && p.proc.Prompt != nil {
			copy(want, PromptCounts(len(want), p.proc.Prompt))
			for _, st := range run {
				want[st.tokens[i]]++
			}
		}
		for t := range want {
			if counts[i][t] != want[t] {
				return fmt.Errorf("probe %d, token %d: device count %#x, recount %#x", i, t, counts[i][t], want[t])
			}
		}
	}
	return nil
}
