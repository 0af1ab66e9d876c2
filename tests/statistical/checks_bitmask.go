package statistical

import (
	"errors"
	"fmt"
	"math"

	"github.com/gumbel-go/gumbel/philox"
	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/sampler"
)

// bitmaskKinds are the rows of the bitmask check, one per route and filter; with the
// Gumbel switch off the sampled ones take the categorical kernel.
var bitmaskKinds = []sampler.Params{
	{Temperature: 0},
	{Temperature: 0.8, TopK: 1},
	{Temperature: 0.7},
	{Temperature: 1.3},
	{Temperature: 1, TopK: 30},
	{Temperature: 0.9, TopP: 0.8},
	{Temperature: 1.1, MinP: 0.1},
	{Temperature: 0.8, TopK: 200, TopP: 0.9, MinP: 0.02},
}

// bitmaskRows builds the rows of the bitmask check: logits, and each row's mask (nil for
// none). A mask allows a pseudo-random third of the tokens, never the row's raw top
// token, and sets every bit past the vocabulary; every fourth row shares the mask of the
// row before it, and every eleventh has none.
func bitmaskRows(rows, vocab int) ([]float32, [][]int32) {
	logits := randomRows(rows, vocab, 1.5, 171)
	masks := make([][]int32, rows)
	for r := range rows {
		switch {
		case r%11 == 10:
			continue
		case r%4 == 1:
			masks[r] = masks[r-1]
			continue
		}
		row := logits[r*vocab : (r+1)*vocab]
		top := ranked(row)[0]
		var allowed []int32
		for i := range vocab {
			if int32(i) != top && philox.SplitMix64(uint64(r*vocab+i)^0x6269746d)%3 == 0 {
				allowed = append(allowed, int32(i))
			}
		}
		m := BitmaskOf(vocab, allowed)
		if vocab%32 != 0 {
			m[len(m)-1] |= -1 << (vocab % 32)
		}
		masks[r] = m
	}
	return logits, masks
}

// checkBitmask checks token bitmasks on every route: each row draws the token of the
// stream contract over the tokens its mask allows (the lowest-index largest one for
// greedy rows), its processed log-probability sees the mask and its raw one does not;
// masks in device memory (Logits.Bitmask, rows mapped by Index, shared or none) draw
// exactly what host masks (Params.Bitmask) draw; and a row whose mask allows no finite
// logit, or does not fit, fails alone.
func checkBitmask(dev runtime.Device) error {
	vocab := probeVocab // not a multiple of 32: the last word holds bits past V
	rows := 4 * len(bitmaskKinds)
	logits, masks := bitmaskRows(rows, vocab)
	params := make([]sampler.Params, rows)
	for r := range params {
		p := bitmaskKinds[r%len(bitmaskKinds)]
		p.Seed, p.HasSeed, p.Step, p.Logprobs = uint64(r)*0x9E3779B9+5, true, uint64(r), true
		p.Bitmask = masks[r]
		params[r] = p
	}
	buf, err := dev.Alloc(len(logits) * 4)
	if err != nil {
		return err
	}
	defer buf.Free()
	// The device masks, stored in reverse row order and mapped back by Index.
	words := BitmaskWords(vocab)
	stored := make([]int32, rows*words)
	index := make([]int32, rows)
	for r := range rows {
		index[r] = int32(rows - 1 - r)
		switch {
		case masks[r] == nil:
			index[r] = -1
		case r%4 == 1:
			index[r] = index[r-1]
		default:
			copy(stored[int(index[r])*words:], masks[r])
		}
	}
	maskBuf, err := dev.Alloc(len(stored) * 4)
	if err != nil {
		return err
	}
	defer maskBuf.Free()
	st := dev.DefaultStream()
	if err := st.CopyToDevice(buf, 0, runtime.BytesOf(logits)); err != nil {
		return err
	}
	if err := st.CopyToDevice(maskBuf, 0, runtime.BytesOf(stored)); err != nil {
		return err
	}
	if err := st.Synchronize(); err != nil {
		return err
	}
	lg := sampler.Logits{Data: buf, DType: sampler.Float32, Rows: rows, Vocab: vocab}

	compared := map[sampler.Route]int{}
	for _, sw := range []sampler.Switch{sampler.On, sampler.Off} {
		s, err := newSampler(dev, sampler.Options{Gumbel: sw, Split: sampler.On})
		if err != nil {
			return err
		}
		var host, device sampler.Result
		err = s.Sample(lg, params, &host)
		if err == nil {
			devParams := append([]sampler.Params(nil), params...)
			for r := range devParams {
				devParams[r].Bitmask = nil
			}
			devLg := lg
			devLg.Bitmask = &sampler.Bitmask{Data: maskBuf, Rows: rows, Words: words, Index: index}
			err = s.Sample(devLg, devParams, &device)
		}
		_ = s.Close()
		if err != nil {
			return fmt.Errorf("gumbel switch %s: %w", switchName(sw), err)
		}
		for r, p := range params {
			if err := checkMaskedRow(logits[r*vocab:(r+1)*vocab], p, sw, host, r, compared); err != nil {
				return fmt.Errorf("gumbel switch %s, row %d (%+v, mask %t): %w", switchName(sw), r,
					Filter{TopK: p.TopK, TopP: p.TopP, MinP: p.MinP}, p.Bitmask != nil, err)
			}
			if device.Errs[r] != nil || device.Tokens[r] != host.Tokens[r] || !sameRecord(device.Logprobs[r], host.Logprobs[r]) {
				return fmt.Errorf("gumbel switch %s, row %d (mask row %d): a device mask drew %d (%+v, err %v), a host mask %d (%+v)",
					switchName(sw), r, index[r], device.Tokens[r], device.Logprobs[r], device.Errs[r], host.Tokens[r], host.Logprobs[r])
			}
		}
	}
	// Greedy rows are always certain; sampled rows need a clear winner.
	for route, total := range map[sampler.Route]int{
		sampler.RouteGreedy: 16, sampler.RouteGumbel: 8, sampler.RouteFiltered: 16, sampler.RouteCategorical: 24,
	} {
		if compared[route] < total*3/4 {
			return fmt.Errorf("only %d of %d %v rows were clear of a boundary", compared[route], total, route)
		}
	}
	return checkBitmaskErrors(dev, logits[:vocab], masks[0], vocab)
}

// checkMaskedRow checks row r of a result against the stream contract over the tokens
// the row's mask allows, and its log-probability record against the float64 reference.
func checkMaskedRow(row []float32, p sampler.Params, sw sampler.Switch, res sampler.Result, r int, compared map[sampler.Route]int) error {
	f := Filter{TopK: p.TopK, TopP: p.TopP, MinP: p.MinP}
	greedy := p.Temperature == 0 || p.TopK == 1
	route := sampler.RouteCategorical
	switch {
	case greedy:
		route = sampler.RouteGreedy
	case sw == sampler.On && f == (Filter{}):
		route = sampler.RouteGumbel
	case sw == sampler.On:
		route = sampler.RouteFiltered
	}
	tok := res.Tokens[r]
	if res.Errs[r] != nil || res.Routes[r] != route {
		return fmt.Errorf("route %v (want %v), err %v", res.Routes[r], route, res.Errs[r])
	}
	if tok < 0 || int(tok) >= len(row) {
		return fmt.Errorf("token %d outside [0, %d)", tok, len(row))
	}
	proc := &Processors{Bitmask: p.Bitmask}
	masked, err := ProcessedLogits(row, *proc)
	if err != nil {
		return err
	}
	if math.IsInf(float64(masked[tok]), -1) {
		return fmt.Errorf("drew token %d, which its mask rules out", tok)
	}
	rawLP, rawLSE, err := LogSoftmax(row, 1)
	if err != nil {
		return err
	}
	ref, err := referenceRecord(row, logprobProbe{params: p, proc: proc}, tok, rawLP, rawLSE)
	switch {
	case errors.Is(err, ErrAmbiguous):
		return nil // a filter boundary too close to call: neither the token nor the record
	case err != nil:
		return err
	}
	got := res.Logprobs[r]
	for _, fd := range []struct {
		name      string
		got, want float64
		tol       float64
	}{
		{"raw", float64(got.Raw), ref.raw, LogprobTolerance(rawLSE, float64(row[tok]))},
		{"raw LSE", float64(got.RawLSE), rawLSE, LogprobTolerance(rawLSE, 0)},
		{"processed", float64(got.Processed), ref.processed, LogprobTolerance(ref.processedLSE, ref.scaled)},
		{"processed LSE", float64(got.ProcessedLSE), ref.processedLSE, LogprobTolerance(ref.processedLSE, 0)},
	} {
		if e := math.Abs(fd.got - fd.want); !(e <= fd.tol) {
			return fmt.Errorf("token %d: %s log-probability %v, reference %v", tok, fd.name, fd.got, fd.want)
		}
	}
	var want int32
	certain := true
	switch route {
	case sampler.RouteGreedy:
		want = ranked(masked)[0]
	case sampler.RouteGumbel:
		want, certain = gumbelReference(masked, p.Temperature, p.Seed, p.Step)
	default:
		probs, err := Probabilities(masked, p.Temperature, f)
		if err != nil {
			return err
		}
		if route == sampler.RouteFiltered {
			want, certain = filteredReference(masked, probs, p.Temperature, p.Seed, p.Step)
		} else {
			want, certain = categoricalReference(probs, philox.CategoricalUniform64(p.Seed, p.Step))
		}
	}
	if !certain {
		return nil
	}
	compared[route]++
	if tok != want {
		return fmt.Errorf("drew %d, the contract over the tokens its mask allows gives %d", tok, want)
	}
	return nil
}

// checkBitmaskErrors checks that a mask allowing no finite logit fails its row with
// ErrNoFiniteLogit and a mask of the wrong length or a device mask row out of range with
// ErrBitmask, while the call's good row keeps its token.
func checkBitmaskErrors(dev runtime.Device, row []float32, mask []int32, vocab int) error {
	s, err := newSampler(dev, sampler.Options{Gumbel: sampler.On, Split: sampler.On})
	if err != nil {
		return err
	}
	defer s.Close()
	neg := float32(math.Inf(-1))
	logits := make([]float32, 3*vocab)
	for r := range 3 {
		copy(logits[r*vocab:], row)
	}
	// Row 1's mask allows only tokens whose logits are -Inf.
	bad := logits[vocab : 2*vocab]
	dead := []int32{3, 40, int32(vocab - 1)}
	for _, t := range dead {
		bad[t] = neg
	}
	params := make([]sampler.Params, 3)
	for r := range params {
		params[r] = sampler.Params{Temperature: 1, Seed: 77, HasSeed: true, Step: 4, Bitmask: mask}
	}
	params[1].Bitmask = BitmaskOf(vocab, dead)
	params[1].Bitmask[len(mask)-1] |= -1 << (vocab % 32) // past V: row 2's finite logits
	params[2].Bitmask = mask[:len(mask)-1]
	alone, err := sampleHost(s, logits[:vocab], vocab, params[:1])
	if err != nil {
		return err
	}
	res, err := sampleHost(s, logits, vocab, params)
	if err != nil {
		return err
	}
	if res.Errs[0] != nil || res.Tokens[0] != alone.Tokens[0] {
		return fmt.Errorf("the good row drew %d (err %v) beside bad masks, %d alone", res.Tokens[0], res.Errs[0], alone.Tokens[0])
	}
	if !errors.Is(res.Errs[1], sampler.ErrNoFiniteLogit) || res.Tokens[1] != -1 {
		return fmt.Errorf("a mask allowing only -Inf logits: token %d, err %v, want ErrNoFiniteLogit", res.Tokens[1], res.Errs[1])
	}
	if !errors.Is(res.Errs[2], sampler.ErrBitmask) || res.Tokens[2] != -1 {
		return fmt.Errorf("a mask of %d words for %d tokens: token %d, err %v, want ErrBitmask", len(params[2].Bitmask), vocab, res.Tokens[2], res.Errs[2])
	}

	// In device memory: a mask row index out of range fails its row alone.
	buf, err := dev.Alloc(2 * vocab * 4)
	if err != nil {
		return err
	}
	defer buf.Free()
	maskBuf, err := dev.Alloc(len(mask) * 4)
	if err != nil {
		return err
	}
	defer maskBuf.Free()
	st := dev.DefaultStream()
	if err := st.CopyToDevice(buf, 0, runtime.BytesOf(logits[:2*vocab])); err != nil {
		return err
	}
	if err := st.CopyToDevice(maskBuf, 0, runtime.BytesOf(mask)); err != nil {
		return err
	}
	if err := st.Synchronize(); err != nil {
		return err
	}
	devParams := []sampler.Params{params[0], params[0]}
	devParams[0].Bitmask, devParams[1].Bitmask = nil, nil
	lg := sampler.Logits{Data: buf, DType: sampler.Float32, Rows: 2, Vocab: vocab,
		Bitmask: &sampler.Bitmask{Data: maskBuf, Rows: 1, Words: len(mask), Index: []int32{0, 1}}}
	var devRes sampler.Result
	if err := s.Sample(lg, devParams, &devRes); err != nil {
		return err
	}
	if devRes.Errs[0] != nil || devRes.Tokens[0] != alone.Tokens[0] {
		return fmt.Errorf("device mask: the good row drew %d (err %v), %d with the host mask", devRes.Tokens[0], devRes.Errs[0], alone.Tokens[0])
	}
	if !errors.Is(devRes.Errs[1], sampler.ErrBitmask) {
		return fmt.Errorf("device mask row 1 of 1: err %v, want ErrBitmask", devRes.Errs[1])
	}
	// One call takes host or device masks, not both.
	devParams[0].Bitmask = mask
	if err := s.Sample(lg, devParams, &devRes); !errors.Is(err, sampler.ErrShape) {
		return fmt.Errorf("host and device masks in one call: %v, want ErrShape", err)
	}
	return nil
}
