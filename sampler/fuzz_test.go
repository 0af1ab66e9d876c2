package sampler

import (
	"errors"
	"math"
	"testing"
)

// FuzzSampleFloat32 feeds random parameters and shapes to a CPU sampler's SampleFloat32.
// Whatever comes in, the call must not panic; a shape that does not add up fails the
// call with ErrShape; otherwise every row whose parameters or logits are bad gets its
// own error (and token -1) without harming the others, and every good row draws a token
// in range whose logit is finite (the largest one for a greedy row).
//
// Row 0 takes the fuzzed parameters; row 1, when there is one, takes good ones.
// `go test` runs the seeds below; .ci/run fuzzes for a while:
//
//	go test -run '^$' -fuzz '^FuzzSampleFloat32$' -fuzztime 30s ./sampler/
func FuzzSampleFloat32(f *testing.F) {
	// good rows, each route
	f.Add(uint16(8), uint8(2), int16(0), []byte{1, 2, 3, 200}, float32(1), int32(0), float32(1), float32(0), uint8(0), float32(0), float32(0), float32(0), false, uint64(1), uint64(0))
	f.Add(uint16(8), uint8(1), int16(0), []byte{1, 2, 3, 200}, float32(0), int32(0), float32(1), float32(0), uint8(0), float32(0), float32(0), float32(0), false, uint64(1), uint64(0))
	f.Add(uint16(300), uint8(3), int16(0), []byte{9, 7, 250, 1, 80}, float32(0.7), int32(40), float32(0.9), float32(0.05), uint8(5), float32(1.1), float32(0.5), float32(0.2), true, uint64(7), uint64(3))
	f.Add(uint16(5000), uint8(2), int16(0), []byte{100, 101, 102}, float32(1), int32(1), float32(0), float32(0), uint8(20), float32(1), float32(0), float32(0), true, uint64(2), uint64(9))
	f.Add(uint16(1), uint8(1), int16(0), []byte{5}, float32(2), int32(0), float32(0.5), float32(1), uint8(1), float32(0), float32(0), float32(0), false, uint64(0), uint64(0))
	// bad parameters, one field at a time
	nan := float32(math.NaN())
	inf := float32(math.Inf(1))
	f.Add(uint16(16), uint8(2), int16(0), []byte{1, 2}, float32(-1), int32(0), float32(1), float32(0), uint8(0), float32(0), float32(0), float32(0), false, uint64(0), uint64(0))
	f.Add(uint16(16), uint8(2), int16(0), []byte{1, 2}, nan, int32(0), float32(1), float32(0), uint8(0), float32(0), float32(0), float32(0), false, uint64(0), uint64(0))
	f.Add(uint16(16), uint8(2), int16(0), []byte{1, 2}, inf, int32(0), float32(1), float32(0), uint8(0), float32(0), float32(0), float32(0), false, uint64(0), uint64(0))
	f.Add(uint16(16), uint8(2), int16(0), []byte{1, 2}, float32(1), int32(-3), float32(1), float32(0), uint8(0), float32(0), float32(0), float32(0), false, uint64(0), uint64(0))
	f.Add(uint16(16), uint8(2), int16(0), []byte{1, 2}, float32(1), int32(0), float32(1.5), float32(0), uint8(0), float32(0), float32(0), float32(0), false, uint64(0), uint64(0))
	f.Add(uint16(16), uint8(2), int16(0), []byte{1, 2}, float32(1), int32(0), nan, float32(0), uint8(0), float32(0), float32(0), float32(0), false, uint64(0), uint64(0))
	f.Add(uint16(16), uint8(2), int16(0), []byte{1, 2}, float32(1), int32(0), float32(1), float32(-0.1), uint8(0), float32(0), float32(0), float32(0), false, uint64(0), uint64(0))
	f.Add(uint16(16), uint8(2), int16(0), []byte{1, 2}, float32(1), int32(0), float32(1), float32(0), uint8(21), float32(0), float32(0), float32(0), false, uint64(0), uint64(0))
	f.Add(uint16(16), uint8(2), int16(0), []byte{1, 2}, float32(1), int32(0), float32(1), float32(0), uint8(0), float32(-2), float32(0), float32(0), false, uint64(0), uint64(0))
	f.Add(uint16(16), uint8(2), int16(0), []byte{1, 2}, float32(1), int32(0), float32(1), float32(0), uint8(0), float32(0), inf, float32(0), false, uint64(0), uint64(0))
	f.Add(uint16(16), uint8(2), int16(0), []byte{1, 2}, float32(1), int32(0), float32(1), float32(0), uint8(0), float32(0), float32(0), nan, false, uint64(0), uint64(0))
	// bad logits: NaN, +Inf, all -Inf
	f.Add(uint16(16), uint8(2), int16(0), []byte{1, 0xFF}, float32(1), int32(0), float32(1), float32(0), uint8(0), float32(0), float32(0), float32(0), false, uint64(0), uint64(0))
	f.Add(uint16(16), uint8(2), int16(0), []byte{0xFE, 3}, float32(0), int32(0), float32(1), float32(0), uint8(0), float32(0), float32(0), float32(0), false, uint64(0), uint64(0))
	f.Add(uint16(16), uint8(1), int16(0), []byte{0xFD}, float32(1), int32(5), float32(0.5), float32(0), uint8(3), float32(0), float32(0), float32(0), true, uint64(0), uint64(0))
	f.Add(uint16(64), uint8(2), int16(0), []byte{0xFD, 0xFD, 0xFD, 7}, float32(0.5), int32(2), float32(1), float32(0.5), uint8(0), float32(0), float32(0), float32(0), false, uint64(0), uint64(0))
	// bad shapes: logits that are not rows x vocab, no rows, a vocab of 0
	f.Add(uint16(16), uint8(2), int16(-1), []byte{1}, float32(1), int32(0), float32(1), float32(0), uint8(0), float32(0), float32(0), float32(0), false, uint64(0), uint64(0))
	f.Add(uint16(16), uint8(2), int16(5), []byte{1}, float32(1), int32(0), float32(1), float32(0), uint8(0), float32(0), float32(0), float32(0), false, uint64(0), uint64(0))
	f.Add(uint16(16), uint8(0), int16(0), []byte{1}, float32(1), int32(0), float32(1), float32(0), uint8(0), float32(0), float32(0), float32(0), false, uint64(0), uint64(0))
	f.Add(uint16(0), uint8(2), int16(0), []byte{1}, float32(1), int32(0), float32(1), float32(0), uint8(0), float32(0), float32(0), float32(0), false, uint64(0), uint64(0))

	s := newSampler(f, openCPU(f), Options{})
	var res Result
	f.Fuzz(func(t *testing.T, vocab16 uint16, rows8 uint8, skew int16, pattern []byte,
		temperature float32, topK int32, topP, minP float32, topLogprobs uint8,
		repetition, frequency, presence float32, logprobs bool, seed, step uint64) {
		// vocab 0 stays 0 (a bad shape); others span one block to several.
		vocab := int(vocab16) % 20000
		rows := int(rows8) % 5
		p := Params{
			Temperature: temperature, TopK: int(topK), TopP: topP, MinP: minP,
			TopLogprobs: int(topLogprobs), RepetitionPenalty: repetition,
			FrequencyPenalty: frequency, PresencePenalty: presence,
			Logprobs: logprobs, Seed: seed, HasSeed: true, Step: step,
		}
		params := make([]Params, rows)
		for i := range params {
			params[i] = Params{Temperature: 1, Seed: seed + uint64(i), HasSeed: true, Step: step}
		}
		if rows > 0 {
			params[0] = p
		}
		n := max(0, rows*vocab+int(skew))
		logits := make([]float32, n)
		for j := range logits {
			logits[j] = fuzzLogit(pattern, j)
		}

		err := s.SampleFloat32(logits, vocab, params, &res)
		if vocab < 1 || n != rows*vocab {
			if !errors.Is(err, ErrShape) {
				t.Fatalf("rows %d, vocab %d, %d logits: err %v, want ErrShape", rows, vocab, n, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("rows %d, vocab %d: call error %v", rows, vocab, err)
		}
		if len(res.Errs) != rows || len(res.Tokens) != rows {
			t.Fatalf("%d rows: %d errors, %d tokens", rows, len(res.Errs), len(res.Tokens))
		}
		for i, q := range params {
			row := logits[i*vocab : (i+1)*vocab]
			want := rowFaults(q, row)
			tok, rowErr := res.Tokens[i], res.Errs[i]
			if len(want) > 0 {
				if rowErr == nil || tok != -1 {
					t.Fatalf("row %d (%+v): token %d, err %v; want -1 and one of %v", i, q, tok, rowErr, want)
				}
				matched := false
				for _, w := range want {
					matched = matched || errors.Is(rowErr, w)
				}
				if !matched {
					t.Fatalf("row %d (%+v): err %v, want one of %v", i, q, rowErr, want)
				}
				continue
			}
			if rowErr != nil {
				t.Fatalf("row %d (%+v): unexpected error %v", i, q, rowErr)
			}
			if tok < 0 || int(tok) >= vocab {
				t.Fatalf("row %d (%+v): token %d outside [0, %d)", i, q, tok, vocab)
			}
			if math.IsInf(float64(row[tok]), -1) {
				t.Fatalf("row %d (%+v): drew token %d, whose logit is -Inf", i, q, tok)
			}
			if q.Temperature == 0 || q.TopK == 1 {
				top := float32(math.Inf(-1))
				for _, v := range row {
					top = max(top, v)
				}
				if row[tok] != top {
					t.Fatalf("row %d (%+v): greedy row drew token %d (logit %v), the largest is %v", i, q, tok, row[tok], top)
				}
			}
		}
	})
}

// fuzzLogit is element j of a matrix built from pattern: byte 0xFF is NaN, 0xFE +Inf,
// 0xFD -Inf, any other b is (b-128)/8. The pattern is walked with a stride, so that rows
// do not all repeat it from the same place.
func fuzzLogit(pattern []byte, j int) float32 {
	if len(pattern) == 0 {
		return 0
	}
	switch b := pattern[(j*7+j/len(pattern))%len(pattern)]; b {
	case 0xFF:
		return float32(math.NaN())
	case 0xFE:
		return float32(math.Inf(1))
	case 0xFD:
		return float32(math.Inf(-1))
	default:
		return (float32(b) - 128) / 8
	}
}

// rowFaults lists the row errors a row may get, from the documented rules of Params and
// of the logits; none for a good row.
func rowFaults(p Params, row []float32) []error {
	var errs []error
	bad := func(e error) { errs = append(errs, e) }
	t := float64(p.Temperature)
	if math.IsNaN(t) || math.IsInf(t, 0) || t < 0 {
		bad(ErrTemperature)
	}
	if p.TopK < 0 {
		bad(ErrTopK)
	}
	if !(p.TopP >= 0 && p.TopP <= 1) {
		bad(ErrTopP)
	}
	if !(p.MinP >= 0 && p.MinP <= 1) {
		bad(ErrMinP)
	}
	if p.TopLogprobs < 0 || p.TopLogprobs > MaxTopLogprobs {
		bad(ErrTopLogprobs)
	}
	fin := func(x float32) bool { return !math.IsNaN(float64(x)) && !math.IsInf(float64(x), 0) }
	if !fin(p.RepetitionPenalty) || p.RepetitionPenalty < 0 || !fin(p.FrequencyPenalty) || !fin(p.PresencePenalty) {
		bad(ErrPenalty)
	}
	anyFinite, nonFinite := false, false
	for _, v := range row {
		switch {
		case math.IsNaN(float64(v)) || math.IsInf(float64(v), 1):
			nonFinite = true
		case !math.IsInf(float64(v), -1):
			anyFinite = true
		}
	}
	if nonFinite {
		bad(ErrNonFiniteLogit)
	}
	if !anyFinite {
		bad(ErrNoFiniteLogit)
	}
	return errs
}
