package statistical

import (
	"errors"
	"fmt"
	"math"

	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/sampler"
)

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

// checkLogprobs checks the log-probability records at probeVocab.
func checkLogprobs(dev runtime.Device) error {
	_, err := MeasureLogprobs(dev, probeVocab)
	return err
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

// sameRecord reports whether two records agree within LogprobTolerance (two launch shapes
// may sum the log-sum-exps in different orders).
func sameRecord(a, b sampler.Logprob) bool {
	near := func(x, y float32) bool {
		return math.Abs(float64(x)-float64(y)) <= LogprobTolerance(float64(y), 0)
	}
	return near(a.Raw, b.Raw) && near(a.Processed, b.Processed) && near(a.RawLSE, b.RawLSE) && near(a.ProcessedLSE, b.ProcessedLSE)
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
	s, err := newSampler(dev, sampler.Options{HasSeed: true, Gumbel: sampler.On, Split: sampler.On})
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
