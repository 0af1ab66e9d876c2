package statistical

import (
	"fmt"

	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/sampler"
)

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
