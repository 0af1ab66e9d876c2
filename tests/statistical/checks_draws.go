package statistical

import (
	"errors"
	"fmt"
	"math"

	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/sampler"
)

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

func checkDistinct(dev runtime.Device) error {
	vocab := probeVocab
	const rows, n = 6, 4
	logits := randomRows(rows, vocab, 1.5, 121)
	temps := []float32{0.7, 1, 0, 1.4, 0.5, 1}
	params := make([]sampler.Params, rows)
	for r := range params {
		params[r] = sampler.Params{Temperature: temps[r], Seed: uint64(r) + 50, HasSeed: true, Step: uint64(3 * r), Logprobs: true}
	}
	s, err := newSampler(dev, sampler.Options{HasSeed: true, Gumbel: sampler.On, Split: sampler.On})
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

func checkBadDraws(dev runtime.Device) error {
	vocab := probeVocab
	good := randomRows(1, vocab, 1, 151)
	seeded := func(p sampler.Params) sampler.Params { p.Seed, p.HasSeed, p.Step = 21, true, 2; return p }
	s, err := newSampler(dev, sampler.Options{HasSeed: true, Gumbel: sampler.On, Split: sampler.On})
	if err != nil {
		return err
	}
	defer s.Close()

	// Distinct draws: a filtered row, and more draws than finite tokens.
	few := append([]float32(nil), good...)
	for i := 3; i < vocab; i++ {
		few[i] = float32(math.Inf(-1))
	}
	logits := append(append(append([]float32(nil), good...), good...), few...)
	params := []sampler.Params{
		seeded(sampler.Params{Temperature: 1}),
		seeded(sampler.Params{Temperature: 1, MinP: 0.1}),
		seeded(sampler.Params{Temperature: 1}),
	}
	var res sampler.Result
	if err := s.SampleDistinctFloat32(logits, vocab, params, 4, &res); err != nil {
		return fmt.Errorf("distinct draws with bad rows failed as a whole: %w", err)
	}
	for i, want := range []error{nil, sampler.ErrDistinctFiltered, sampler.ErrTooFewTokens} {
		if !errors.Is(res.Errs[i], want) || (want == nil) != (res.Tokens[4*i] >= 0) {
			return fmt.Errorf("distinct row %d: token %d, err %v; want %v", i, res.Tokens[4*i], res.Errs[i], want)
		}
	}
	for _, n := range []int{0, sampler.MaxTopLogprobs + 1} {
		if err := s.SampleDistinctFloat32(good, vocab, params[:1], n, &res); !errors.Is(err, sampler.ErrDraws) {
			return fmt.Errorf("%d distinct draws: got %v, want ErrDraws", n, err)
		}
	}
	for _, n := range []int{0, sampler.MaxDraws + 1} {
		if err := s.SampleNFloat32(good, vocab, params[:1], n, &res); !errors.Is(err, sampler.ErrDraws) {
			return fmt.Errorf("SampleN with %d draws: got %v, want ErrDraws", n, err)
		}
	}
	return nil
}
