package statistical

import (
	"errors"
	"fmt"
	"math"

	"github.com/gumbel-go/gumbel/half"
	"github.com/gumbel-go/gumbel/philox"
	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/sampler"
)

// Check is a property of a sampler that a handful of draws settles exactly (no
// statistics): reproducibility, independence from the batch, the kill switch, and so on.
// Every check goes through the public sampler API, so it runs unchanged on any device.
type Check struct {
	// Name is short and unique, e.g. "batch-invariance".
	Name string
	// About says what the check proves.
	About string
	// Run returns nil when the property holds on dev, and an error saying how it fails
	// otherwise.
	Run func(dev runtime.Device) error
}

// Checks returns the property checks, in a fixed order.
func Checks() []Check {
	return []Check{
		{"reproducible", "the same seed and step draw the same tokens, in another call and in a new sampler; another step draws others", checkReproducible},
		{"batch-invariance", "a row's token does not depend on the batch size, its position, the other rows or the split phase", checkBatchInvariance},
		{"greedy", "greedy rows (T = 0, top-k 1) take the lowest index of the largest logit, with the Gumbel switch on or off", checkGreedy},
		{"gumbel-stream", "Gumbel-max rows draw argmax(x/T + philox.ElementGumbel) of the stream contract", checkGumbelStream},
		{"kill-switch", "with the Gumbel switch off, every sampled row, filtered or not, takes the categorical path and draws the inverse CDF of philox.CategoricalUniform64 over its kept set; with it on, filtered rows take the filtered route and draw Gumbel-max (philox.ElementGumbel) over the same kept set, unfiltered rows Gumbel-max", checkKillSwitch},
		{"half-precision", "float16 and bfloat16 rows draw what their exact float32 values draw", checkHalfPrecision},
		{"bad-input", "bad rows (logits, temperature, filters, penalties, top log-probabilities) get their own error and token -1; the other rows of the batch keep their tokens; bad calls get call errors", checkBadInput},
		{"bad-processors", "processor settings out of range (row, token, bias, vocabulary) get call errors", checkBadProcessors},
		{"logprobs", "Result.Logprobs matches a float64 log-softmax of the raw and of the processed logits on every route, within LogprobTolerance", checkLogprobs},
		{"top-logprobs", "Result.Top lists the most likely raw tokens in order (ties to the lowest index) with their raw log-probabilities", checkTopLogprobs},
		{"draws-are-steps", "SampleN's draw z of a row is the token (and record) a Sample call at step+z gives", checkDrawsAreSteps},
		{"distinct", "SampleDistinct draws distinct tokens, the first Sample's token, with processed log-probabilities", checkDistinct},
		{"bad-draws", "SampleDistinct's filtered rows and rows with too few tokens get their own errors; draw counts out of range get call errors", checkBadDraws},
		{"bitmask", "token bitmasks (host and device, shared or none) restrict every route to the tokens they allow, greedy rows to the largest, under the stream contract; processed log-probabilities see them, raw ones do not; a row whose mask allows no finite logit or does not fit fails alone", checkBitmask},
		{"determinism", "the same seed and step give the same tokens, log-probabilities and device counts at any batch position, through Sample and through Batch.Launch", checkDeterminism},
	}
}

// probeVocab is the vocabulary of most checks: odd, so no row is a whole number of
// Philox blocks or of threads.
const probeVocab = 5003

// sampleHost samples host logits with a fresh Result and returns it.
func sampleHost(s *sampler.Sampler, logits []float32, vocab int, params []sampler.Params) (sampler.Result, error) {
	var res sampler.Result
	err := s.SampleFloat32(logits, vocab, params, &res)
	return res, err
}

// newSampler opens a sampler or says which one failed.
func newSampler(dev runtime.Device, opts sampler.Options) (*sampler.Sampler, error) {
	s, err := sampler.New(dev, opts)
	if err != nil {
		return nil, fmt.Errorf("new sampler: %w", err)
	}
	return s, nil
}

// randomRows returns rows x vocab Gaussian logits with the given spread; row r is shifted
// by r/8 so no two rows are alike.
func randomRows(rows, vocab int, spread float64, seed uint64) []float32 {
	g := gaussians{state: seed}
	out := make([]float32, rows*vocab)
	for i := range out {
		out[i] = float32(spread*g.next() + float64(i/vocab)/8)
	}
	return out
}

// mixedParams returns n rows' parameters cycling through every route and filter, seeded
// rows and request-id rows, at the given step.
func mixedParams(n int, step uint64) []sampler.Params {
	kinds := []sampler.Params{
		{Temperature: 0.7},
		{Temperature: 1.3},
		{Temperature: 1, TopK: 40},
		{Temperature: 0.9, TopP: 0.8},
		{Temperature: 1.1, MinP: 0.1},
		{Temperature: 0.8, TopK: 100, TopP: 0.95, MinP: 0.02},
		{Temperature: 0},
		{Temperature: 0.6, TopK: 1},
	}
	out := make([]sampler.Params, n)
	for i := range out {
		p := kinds[i%len(kinds)]
		if i%3 == 2 {
			p.RequestID = uint64(1000 + i)
		} else {
			p.Seed, p.HasSeed = philox.SplitMix64(uint64(i)), true
		}
		p.Step = step + uint64(i%5)
		out[i] = p
	}
	return out
}

// rowErrors returns the first row error of a result, naming the row.
func rowErrors(res sampler.Result) error {
	for i, err := range res.Errs {
		if err != nil {
			return fmt.Errorf("row %d: %w", i, err)
		}
	}
	return nil
}

func checkReproducible(dev runtime.Device) error {
	const rows = 48
	logits := randomRows(rows, probeVocab, 1, 11)
	params := mixedParams(rows, 7)
	opts := sampler.Options{Seed: 99, Gumbel: sampler.On, Split: sampler.On}
	s1, err := newSampler(dev, opts)
	if err != nil {
		return err
	}
	defer s1.Close()
	s2, err := newSampler(dev, opts)
	if err != nil {
		return err
	}
	defer s2.Close()

	first, err := sampleHost(s1, logits, probeVocab, params)
	if err != nil {
		return err
	}
	if err := rowErrors(first); err != nil {
		return err
	}
	again, err := sampleHost(s1, logits, probeVocab, params)
	if err != nil {
		return err
	}
	fresh, err := sampleHost(s2, logits, probeVocab, params)
	if err != nil {
		return err
	}
	for i := range params {
		if again.Tokens[i] != first.Tokens[i] || fresh.Tokens[i] != first.Tokens[i] {
			return fmt.Errorf("row %d: tokens %d, then %d, then %d in a new sampler", i, first.Tokens[i], again.Tokens[i], fresh.Tokens[i])
		}
	}

	// Another step must move the sampled rows (greedy rows stay put). With a spread of 1
	// over 5003 tokens no token holds more than a few percent, so a sampler that ignored
	// the step would keep nearly every row's token.
	next := append([]sampler.Params(nil), params...)
	for i := range next {
		next[i].Step += 1000
	}
	moved, err := sampleHost(s1, logits, probeVocab, next)
	if err != nil {
		return err
	}
	sampled, changed := 0, 0
	for i := range params {
		if first.Routes[i] == sampler.RouteGreedy {
			if moved.Tokens[i] != first.Tokens[i] {
				return fmt.Errorf("greedy row %d changed token with the step: %d then %d", i, first.Tokens[i], moved.Tokens[i])
			}
			continue
		}
		sampled++
		if moved.Tokens[i] != first.Tokens[i] {
			changed++
		}
	}
	if changed < sampled/2 {
		return fmt.Errorf("only %d of %d sampled rows changed token when the step changed", changed, sampled)
	}
	return nil
}

// switchName names an explicit switch value for messages.
func switchName(sw sampler.Switch) string {
	switch sw {
	case sampler.On:
		return "on"
	case sampler.Off:
		return "off"
	}
	return "from the environment"
}

// forcedSplit splits every gumbel_argmax row into as many blocks as it can, batch or no
// batch, so the split phase's partials meet every kind of row.
var forcedSplit = sampler.SplitPolicy{TargetBlocks: 1 << 20, MinElementsPerBlock: 1, MaxBlocksPerRow: 64}

func checkBatchInvariance(dev runtime.Device) error {
	// Probe rows of Qwen's vocabulary, each with its own logits and parameters, sampled
	// alone without the split phase; then inside batches of different sizes, at other
	// positions, among filler rows, with the split phase forced and by default.
	const vocab = LargeVocab
	const probes = 8
	probeLogits := randomRows(probes, vocab, 2, 21)
	probeParams := mixedParams(probes, 3)

	alone, err := newSampler(dev, sampler.Options{Seed: 5, Gumbel: sampler.On, Split: sampler.Off})
	if err != nil {
		return err
	}
	defer alone.Close()
	want := make([]int32, probes)
	for i := range probes {
		res, err := sampleHost(alone, probeLogits[i*vocab:(i+1)*vocab], vocab, probeParams[i:i+1])
		if err != nil {
			return err
		}
		if err := rowErrors(res); err != nil {
			return fmt.Errorf("probe %d alone: %w", i, err)
		}
		want[i] = res.Tokens[0]
	}

	const fillers = 5
	fillerLogits := randomRows(fillers, vocab, 3, 31)
	fillerParams := mixedParams(fillers, 50)
	layouts := []struct {
		name      string
		positions []int // where each probe goes; other slots hold fillers
		size      int
	}{
		{"probes in order", []int{0, 1, 2, 3, 4, 5, 6, 7}, probes},
		{"probes reversed among fillers", []int{12, 10, 9, 7, 5, 3, 2, 0}, probes + fillers},
		{"probes interleaved", []int{1, 3, 4, 6, 8, 9, 11, 12}, probes + fillers},
	}
	policies := []struct {
		name string
		opts sampler.Options
	}{
		{"split forced", sampler.Options{Seed: 5, Gumbel: sampler.On, Split: sampler.On, Policy: &forcedSplit}},
		{"split default", sampler.Options{Seed: 5, Gumbel: sampler.On, Split: sampler.On}},
	}
	for _, pol := range policies {
		s, err := newSampler(dev, pol.opts)
		if err != nil {
			return err
		}
		for _, lay := range layouts {
			logits := make([]float32, lay.size*vocab)
			params := make([]sampler.Params, lay.size)
			used := make([]bool, lay.size)
			for i, pos := range lay.positions {
				copy(logits[pos*vocab:], probeLogits[i*vocab:(i+1)*vocab])
				params[pos], used[pos] = probeParams[i], true
			}
			f := 0
			for pos := range lay.size {
				if !used[pos] {
					copy(logits[pos*vocab:], fillerLogits[f*vocab:(f+1)*vocab])
					params[pos] = fillerParams[f]
					f++
				}
			}
			res, err := sampleHost(s, logits, vocab, params)
			if err != nil {
				_ = s.Close()
				return fmt.Errorf("%s, %s: %w", pol.name, lay.name, err)
			}
			for i, pos := range lay.positions {
				if res.Errs[pos] != nil || res.Tokens[pos] != want[i] {
					_ = s.Close()
					return fmt.Errorf("%s, %s: probe %d at position %d drew %d (err %v), alone without split %d",
						pol.name, lay.name, i, pos, res.Tokens[pos], res.Errs[pos], want[i])
				}
			}
		}
		if err := s.Close(); err != nil {
			return err
		}
	}
	return nil
}

func checkGreedy(dev runtime.Device) error {
	const rows = 6
	vocab := probeVocab
	logits := randomRows(rows, vocab, 1, 41)
	neg := float32(math.Inf(-1))
	want := make([]int32, rows)
	for r := range rows {
		row := logits[r*vocab : (r+1)*vocab]
		// Ties at the top: the largest value at three places; the lowest must win.
		top := float32(10 + r)
		a, b, c := (r*977+13)%vocab, (r*977+2000)%vocab, (r*977+4000)%vocab
		row[a], row[b], row[c] = top, top, top
		want[r] = int32(min(a, b, c))
		// Masked entries below the lowest tie, and one row almost all masked.
		for i := 0; i < min(a, b, c); i += 7 {
			row[i] = neg
		}
		if r == rows-1 {
			for i := range row {
				if int32(i) != want[r] {
					row[i] = neg
				}
			}
		}
	}
	params := make([]sampler.Params, rows)
	for r := range params {
		params[r] = sampler.Params{Seed: uint64(r), HasSeed: true, Step: uint64(r)}
		if r%2 == 1 {
			params[r].Temperature, params[r].TopK = 0.8, 1 // top-k 1 is greedy too
		}
	}
	for _, sw := range []sampler.Switch{sampler.On, sampler.Off} {
		s, err := newSampler(dev, sampler.Options{Gumbel: sw, Split: sampler.On})
		if err != nil {
			return err
		}
		res, err := sampleHost(s, logits, vocab, params)
		_ = s.Close()
		if err != nil {
			return err
		}
		for r := range rows {
			if res.Errs[r] != nil || res.Routes[r] != sampler.RouteGreedy || res.Tokens[r] != want[r] {
				return fmt.Errorf("gumbel switch %s: row %d drew %d on route %v (err %v), want greedy %d",
					switchName(sw), r, res.Tokens[r], res.Routes[r], res.Errs[r], want[r])
			}
		}
	}
	return nil
}

// scoreTolerance is how close two Gumbel-max scores may be before a host comparison is
// skipped: editions may differ in the last place of log and log1p.
const scoreTolerance = 1e-5

// gumbelReference returns the Gumbel-max token of one row under the stream contract and
// whether the runner-up is far enough behind for the answer to be certain on any edition.
func gumbelReference(row []float32, temperature float32, seed, step uint64) (int32, bool) {
	return gumbelMaxOver(row, temperature, seed, step, func(int) bool { return true })
}

// filteredReference returns the filtered route's token of one row: Gumbel-max under the
// stream contract (each element's gumbel_argmax noise) over the kept set, the tokens that
// probs gives a positive probability; and whether the runner-up among them is far enough
// behind for the answer to be certain on any edition.
func filteredReference(row []float32, probs []float64, temperature float32, seed, step uint64) (int32, bool) {
	return gumbelMaxOver(row, temperature, seed, step, func(i int) bool { return probs[i] > 0 })
}

// gumbelMaxOver is gumbelReference over the finite elements that keep accepts.
func gumbelMaxOver(row []float32, temperature float32, seed, step uint64, keep func(int) bool) (int32, bool) {
	invT := 1 / temperature
	best, second := float32(math.Inf(-1)), float32(math.Inf(-1))
	token := int32(-1)
	for i, x := range row {
		if math.IsInf(float64(x), -1) || !keep(i) {
			continue
		}
		s := philox.Score(x, invT, philox.ElementGumbel(seed, step, uint32(i)))
		if s > best {
			best, second, token = s, best, int32(i)
		} else if s > second {
			second = s
		}
	}
	gap := float64(best) - float64(second)
	return token, gap > scoreTolerance*math.Max(1, math.Abs(float64(best)))
}

func checkGumbelStream(dev runtime.Device) error {
	const rows = 64
	logits := randomRows(rows, probeVocab, 1.5, 51)
	neg := float32(math.Inf(-1))
	for i := 0; i < len(logits); i += 11 {
		logits[i] = neg
	}
	params := make([]sampler.Params, rows)
	temps := []float32{0.5, 1, 1.5, 0.3}
	for r := range params {
		params[r] = sampler.Params{Temperature: temps[r%len(temps)], Step: uint64(r) * 3}
		if r%2 == 0 {
			params[r].Seed, params[r].HasSeed = uint64(r)<<40|7, true
		} else {
			params[r].RequestID = uint64(r)
		}
	}
	const samplerSeed = 1234
	s, err := newSampler(dev, sampler.Options{Seed: samplerSeed, Gumbel: sampler.On, Split: sampler.On})
	if err != nil {
		return err
	}
	defer s.Close()
	res, err := sampleHost(s, logits, probeVocab, params)
	if err != nil {
		return err
	}
	compared := 0
	for r, p := range params {
		if res.Errs[r] != nil || res.Routes[r] != sampler.RouteGumbel {
			return fmt.Errorf("row %d: route %v, err %v", r, res.Routes[r], res.Errs[r])
		}
		seed := p.Seed
		if !p.HasSeed {
			seed = philox.RowSeed(samplerSeed, p.RequestID)
		}
		want, certain := gumbelReference(logits[r*probeVocab:(r+1)*probeVocab], p.Temperature, seed, p.Step)
		if !certain {
			continue
		}
		compared++
		if res.Tokens[r] != want {
			return fmt.Errorf("row %d (T %v, seed %#x, step %d): drew %d, the stream contract gives %d",
				r, p.Temperature, seed, p.Step, res.Tokens[r], want)
		}
	}
	if compared < rows*9/10 {
		return fmt.Errorf("only %d of %d rows had a clear Gumbel-max winner", compared, rows)
	}
	return nil
}

// uniformMargin is how close the categorical uniform may come to a cumulative
// probability before a host comparison is skipped: the kernel sums float32 weights in
// fixed point.
const uniformMargin = 1e-6

// categoricalReference returns the inverse-CDF token of one row for a 64-bit uniform,
// with exact probabilities, and whether the uniform is far enough from every boundary for
// the answer to be certain.
func categoricalReference(probs []float64, u uint64) (int32, bool) {
	x := float64(u) * 0x1p-64
	cum := 0.0
	for i, p := range probs {
		if p == 0 {
			continue
		}
		prev := cum
		cum += p
		if cum > x {
			return int32(i), x-prev > uniformMargin && cum-x > uniformMargin
		}
	}
	return -1, false // rounding left x above the total: too close to call
}

func checkKillSwitch(dev runtime.Device) error {
	const rows = 64
	logits := randomRows(rows, probeVocab, 1.5, 61)
	neg := float32(math.Inf(-1))
	for i := 5; i < len(logits); i += 13 {
		logits[i] = neg
	}
	filters := []Filter{{}, {}, {TopK: 30}, {TopP: 0.7}, {MinP: 0.15}, {TopK: 200, TopP: 0.9}}
	temps := []float32{0.5, 1, 1.5, 0.8}
	params := make([]sampler.Params, rows)
	for r := range params {
		f := filters[r%len(filters)]
		params[r] = sampler.Params{
			Temperature: temps[r%len(temps)], TopK: f.TopK, TopP: f.TopP, MinP: f.MinP,
			Seed: uint64(r)*0x9E3779B9 + 1, HasSeed: true, Step: uint64(r),
		}
	}
	compared := map[sampler.Route]int{}
	tokens := map[sampler.Switch][]int32{}
	for _, sw := range []sampler.Switch{sampler.Off, sampler.On} {
		s, err := newSampler(dev, sampler.Options{Gumbel: sw, Split: sampler.On})
		if err != nil {
			return err
		}
		res, err := sampleHost(s, logits, probeVocab, params)
		_ = s.Close()
		if err != nil {
			return err
		}
		tokens[sw] = res.Tokens
		for r, p := range params {
			f := Filter{TopK: p.TopK, TopP: p.TopP, MinP: p.MinP}
			wantRoute := sampler.RouteCategorical
			switch {
			case sw == sampler.On && f == (Filter{}):
				wantRoute = sampler.RouteGumbel
			case sw == sampler.On:
				wantRoute = sampler.RouteFiltered
			}
			if res.Errs[r] != nil || res.Routes[r] != wantRoute {
				return fmt.Errorf("gumbel switch %s: row %d: route %v (want %v), err %v", switchName(sw), r, res.Routes[r], wantRoute, res.Errs[r])
			}
			row := logits[r*probeVocab : (r+1)*probeVocab]
			probs, err := Probabilities(row, p.Temperature, f)
			if errors.Is(err, ErrAmbiguous) {
				continue
			}
			if err != nil {
				return fmt.Errorf("row %d: %w", r, err)
			}
			if tok := res.Tokens[r]; tok < 0 || int(tok) >= probeVocab || probs[tok] == 0 {
				return fmt.Errorf("gumbel switch %s: row %d (T %v, %+v, route %v): drew token %d, outside the kept set",
					switchName(sw), r, p.Temperature, f, wantRoute, tok)
			}
			var want int32
			var certain bool
			var what string
			switch wantRoute {
			case sampler.RouteCategorical:
				want, certain = categoricalReference(probs, philox.CategoricalUniform64(p.Seed, p.Step))
				what = "the inverse CDF of the contract's uniform"
			case sampler.RouteFiltered:
				want, certain = filteredReference(row, probs, p.Temperature, p.Seed, p.Step)
				what = "Gumbel-max over the kept set"
			default:
				want, certain = gumbelReference(row, p.Temperature, p.Seed, p.Step)
				what = "Gumbel-max"
			}
			if !certain {
				continue
			}
			compared[wantRoute]++
			if res.Tokens[r] != want {
				return fmt.Errorf("gumbel switch %s: row %d (T %v, %+v): drew %d, %s gives %d",
					switchName(sw), r, p.Temperature, f, res.Tokens[r], what, want)
			}
		}
	}
	// Off: 64 categorical rows; on: the 42 filtered rows and the 22 others.
	filteredRows := 0
	for r := range rows {
		if r%len(filters) >= 2 {
			filteredRows++
		}
	}
	for route, total := range map[sampler.Route]int{
		sampler.RouteCategorical: rows, sampler.RouteFiltered: filteredRows, sampler.RouteGumbel: rows - filteredRows,
	} {
		if compared[route] < total*9/10 {
			return fmt.Errorf("only %d of %d %v rows were clear of a boundary", compared[route], total, route)
		}
	}
	// The switch must change the filtered rows' streams, not only their route.
	differ := 0
	for r := range rows {
		if r%len(filters) >= 2 && tokens[sampler.On][r] != tokens[sampler.Off][r] {
			differ++
		}
	}
	if differ < filteredRows/2 {
		return fmt.Errorf("only %d of %d filtered rows drew another token with the Gumbel switch on", differ, filteredRows)
	}
	return nil
}

func checkHalfPrecision(dev runtime.Device) error {
	const rows = 24
	logits := randomRows(rows, probeVocab, 2, 71)
	// Round every logit to a multiple of 1/16 in [-16, 16]: exact in both formats.
	for i, x := range logits {
		logits[i] = float32(math.Round(math.Max(-16, math.Min(16, float64(x)))*16) / 16)
	}
	for i := 3; i < len(logits); i += 17 {
		logits[i] = float32(math.Inf(-1))
	}
	params := mixedParams(rows, 11)
	s, err := newSampler(dev, sampler.Options{Seed: 77, Gumbel: sampler.On, Split: sampler.On})
	if err != nil {
		return err
	}
	defer s.Close()
	want, err := sampleHost(s, logits, probeVocab, params)
	if err != nil {
		return err
	}
	if err := rowErrors(want); err != nil {
		return err
	}
	for _, dt := range []struct {
		dtype  sampler.DType
		encode func(float32) uint16
		decode func(uint16) float32
	}{
		{sampler.Float16, half.Float16, half.Float16ToFloat32},
		{sampler.BFloat16, half.BFloat16, half.BFloat16ToFloat32},
	} {
		bits := make([]uint16, len(logits))
		for i, x := range logits {
			bits[i] = dt.encode(x)
			if got := dt.decode(bits[i]); got != x {
				return fmt.Errorf("logit %v does not survive %v (%v): the check needs exact inputs", x, dt.dtype, got)
			}
		}
		var res sampler.Result
		if err := s.SampleBits(bits, dt.dtype, probeVocab, params, &res); err != nil {
			return fmt.Errorf("%v: %w", dt.dtype, err)
		}
		for r := range params {
			if res.Errs[r] != nil || res.Tokens[r] != want.Tokens[r] {
				return fmt.Errorf("%v: row %d drew %d (err %v), its float32 values draw %d", dt.dtype, r, res.Tokens[r], res.Errs[r], want.Tokens[r])
			}
		}
	}
	return nil
}

// badRow is one row of a batch that mixes good and bad rows: a copy of the good logits,
// poisoned where asked, sampled with params; want is the row's error (nil: a good row).
type badRow struct {
	name   string
	params sampler.Params
	poison func([]float32)
	want   error
}

// sampleAmongBad samples rows in one batch and checks that every bad row gets token -1
// and its error, and every good row the token it gets when sampled alone. It returns the
// batch's logits and params.
func sampleAmongBad(s *sampler.Sampler, good []float32, vocab int, rows []badRow) ([]float32, []sampler.Params, error) {
	logits := make([]float32, len(rows)*vocab)
	params := make([]sampler.Params, len(rows))
	for i, c := range rows {
		row := logits[i*vocab : (i+1)*vocab]
		copy(row, good)
		if c.poison != nil {
			c.poison(row)
		}
		params[i] = c.params
	}
	res, err := sampleHost(s, logits, vocab, params)
	if err != nil {
		return nil, nil, fmt.Errorf("a batch with bad rows failed as a whole: %w", err)
	}
	for i, c := range rows {
		if c.want != nil {
			if !errors.Is(res.Errs[i], c.want) || res.Tokens[i] != -1 {
				return nil, nil, fmt.Errorf("row %d (%s): token %d, err %v; want -1 and %v", i, c.name, res.Tokens[i], res.Errs[i], c.want)
			}
			continue
		}
		alone, err := sampleHost(s, good, vocab, params[i:i+1])
		if err != nil {
			return nil, nil, err
		}
		if res.Errs[i] != nil || alone.Errs[0] != nil || res.Tokens[i] != alone.Tokens[0] {
			return nil, nil, fmt.Errorf("row %d (%s) among bad rows: token %d (err %v); alone: %d (err %v)",
				i, c.name, res.Tokens[i], res.Errs[i], alone.Tokens[0], alone.Errs[0])
		}
	}
	return logits, params, nil
}

func checkBadInput(dev runtime.Device) error {
	vocab := probeVocab
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	good := randomRows(1, vocab, 1, 81)
	seeded := func(p sampler.Params) sampler.Params { p.Seed, p.HasSeed, p.Step = 17, true, 4; return p }
	cases := []badRow{
		{"gumbel", seeded(sampler.Params{Temperature: 0.9}), nil, nil},
		{"NaN logit", seeded(sampler.Params{Temperature: 0.9}), func(x []float32) { x[vocab/2] = nan }, sampler.ErrNonFiniteLogit},
		{"+Inf logit", seeded(sampler.Params{Temperature: 0.9, TopK: 20}), func(x []float32) { x[vocab-1] = inf }, sampler.ErrNonFiniteLogit},
		{"greedy NaN", seeded(sampler.Params{}), func(x []float32) { x[0] = nan }, sampler.ErrNonFiniteLogit},
		{"categorical", seeded(sampler.Params{Temperature: 1.2, TopP: 0.9}), nil, nil},
		{"all -Inf", seeded(sampler.Params{Temperature: 0.9}), func(x []float32) {
			for i := range x {
				x[i] = float32(math.Inf(-1))
			}
		}, sampler.ErrNoFiniteLogit},
		{"all -Inf, filtered", seeded(sampler.Params{Temperature: 0.9, MinP: 0.1}), func(x []float32) {
			for i := range x {
				x[i] = float32(math.Inf(-1))
			}
		}, sampler.ErrNoFiniteLogit},
		{"negative temperature", seeded(sampler.Params{Temperature: -1}), nil, sampler.ErrTemperature},
		{"NaN temperature", seeded(sampler.Params{Temperature: nan}), nil, sampler.ErrTemperature},
		{"infinite temperature", seeded(sampler.Params{Temperature: inf}), nil, sampler.ErrTemperature},
		{"negative top-k", seeded(sampler.Params{Temperature: 1, TopK: -1}), nil, sampler.ErrTopK},
		{"top-p above 1", seeded(sampler.Params{Temperature: 1, TopP: 1.5}), nil, sampler.ErrTopP},
		{"NaN top-p", seeded(sampler.Params{Temperature: 1, TopP: nan}), nil, sampler.ErrTopP},
		{"negative min-p", seeded(sampler.Params{Temperature: 1, MinP: -0.1}), nil, sampler.ErrMinP},
		{"min-p above 1", seeded(sampler.Params{Temperature: 1, MinP: 2}), nil, sampler.ErrMinP},
		{"greedy", seeded(sampler.Params{}), nil, nil},
		{"min-p", seeded(sampler.Params{Temperature: 0.7, MinP: 0.05}), nil, nil},
		{"gumbel with logprobs", seeded(sampler.Params{Temperature: 0.8, Logprobs: true}), nil, nil},
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
	logits, params, err := sampleAmongBad(s, good, vocab, cases)
	if err != nil {
		return err
	}

	// Whole-call errors: shapes that disagree, and a closed sampler.
	var r sampler.Result
	if err := s.SampleFloat32(good[:vocab-1], vocab, params[:1], &r); !errors.Is(err, sampler.ErrShape) {
		return fmt.Errorf("logits shorter than a row: got %v, want ErrShape", err)
	}
	if err := s.SampleFloat32(logits[:2*vocab], vocab, params[:3], &r); !errors.Is(err, sampler.ErrShape) {
		return fmt.Errorf("two rows of logits for three params: got %v, want ErrShape", err)
	}
	if err := s.SampleFloat32(good, 0, params[:1], &r); !errors.Is(err, sampler.ErrShape) {
		return fmt.Errorf("vocab 0: got %v, want ErrShape", err)
	}
	if err := s.SampleBits(make([]uint16, vocab), sampler.Float32, vocab, params[:1], &r); !errors.Is(err, sampler.ErrShape) {
		return fmt.Errorf("SampleBits with float32: got %v, want ErrShape", err)
	}
	if err := s.Close(); err != nil {
		return err
	}
	if err := s.SampleFloat32(good, vocab, params[:1], &r); !errors.Is(err, sampler.ErrClosed) {
		return fmt.Errorf("closed sampler: got %v, want ErrClosed", err)
	}
	return nil
}

func checkBadProcessors(dev runtime.Device) error {
	vocab := probeVocab
	nan := float32(math.NaN())
	s, err := newSampler(dev, sampler.Options{Gumbel: sampler.On, Split: sampler.On})
	if err != nil {
		return err
	}
	defer s.Close()
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
