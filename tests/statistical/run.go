package statistical

import (
	"errors"
	"fmt"

	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/sampler"
)

// Outcome is the result of one case.
type Outcome struct {
	// Case is the case's name.
	Case string
	// Draws is the number of tokens drawn.
	Draws int
	// ChiSquare, DF and PValue are the test's statistic, degrees of freedom and p-value;
	// Bins is the number of merged bins (DF + 1).
	ChiSquare float64
	DF        int
	PValue    float64
	Bins      int
	// Pass is true when the sampler drew only possible tokens, on the expected route,
	// without errors, and p >= the case's Alpha.
	Pass bool
	// Message explains a failure, or summarises a pass.
	Message string
}

// Drawer draws tokens for one case.
type Drawer interface {
	// Batch is the most tokens one Draw call returns.
	Batch() int
	// Draw fills tokens (at most Batch long) with draw numbers first, first+1, ...
	// of the case: draw d samples the case's row with step d.
	Draw(first uint64, tokens []int32) error
}

// Run draws c.Draws tokens of a case on a device through the sampler and tests them.
// progress, when not nil, is called after every batch with the draws done so far.
func Run(dev runtime.Device, c Case, progress func(done, total int)) Outcome {
	d, err := NewSamplerDrawer(dev, &c)
	if err != nil {
		return Outcome{Case: c.Name, Message: err.Error()}
	}
	defer d.Close()
	return RunDrawer(d, c, progress)
}

// RunDrawer draws c.Draws tokens of a case from any drawer and tests them.
func RunDrawer(d Drawer, c Case, progress func(done, total int)) Outcome {
	out := Outcome{Case: c.Name}
	probs, err := Expected(&c)
	if err != nil {
		out.Message = "exact distribution: " + err.Error()
		return out
	}
	v := len(probs)
	counts := make([]int64, v)
	tokens := make([]int32, max(1, min(d.Batch(), c.Draws)))
	for done := 0; done < c.Draws; {
		n := min(len(tokens), c.Draws-done)
		if err := d.Draw(uint64(done), tokens[:n]); err != nil {
			out.Draws = done
			out.Message = fmt.Sprintf("draws %d..%d: %v", done, done+n-1, err)
			return out
		}
		for j, t := range tokens[:n] {
			if t < 0 || int(t) >= v {
				out.Draws = done
				out.Message = fmt.Sprintf("draw %d: token %d outside [0, %d)", done+j, t, v)
				return out
			}
			counts[t]++
		}
		done += n
		out.Draws = done
		if progress != nil {
			progress(done, c.Draws)
		}
	}
	verdict, err := ChiSquareTest(probs, counts, c.Binning)
	if err != nil {
		out.Message = err.Error()
		return out
	}
	out.ChiSquare, out.DF, out.PValue, out.Bins = verdict.ChiSquare, verdict.DF, verdict.PValue, verdict.Bins
	out.Pass = verdict.Pass(c.Alpha)
	switch {
	case verdict.ZeroDrawn > 0:
		out.Message = fmt.Sprintf("%d draws of zero-probability outcomes (first: %s)",
			verdict.ZeroDrawn, c.describe(verdict.FirstZero))
	case !out.Pass:
		out.Message = fmt.Sprintf("chi2 = %.1f on %d df: p = %.3g < %.0e", out.ChiSquare, out.DF, out.PValue, c.Alpha)
	default:
		out.Message = fmt.Sprintf("chi2 = %.1f on %d df: p = %.3g", out.ChiSquare, out.DF, out.PValue)
	}
	return out
}

// Logits buffers hold this many bytes at most (many copies of the case's row, one per
// row of a Sample call); the CPU device gets less, since its "device" memory is RAM.
const (
	logitsBudget    = 256 << 20
	logitsBudgetCPU = 32 << 20
	// maxRowsPerCall bounds the batch of small-vocabulary cases. The CPU device takes
	// fewer: a filtered batch's partials are 32 KB a row whatever V, and each case's new
	// sampler zeroes them, while a call costs it little. Draws are batch-invariant, so
	// the batch never changes a case's tokens.
	maxRowsPerCall    = 4096
	maxRowsPerCallCPU = 1024
)

// SamplerDrawer draws a case's tokens with a [sampler.Sampler]: the case's row is copied
// into device memory once per batch row (with the case's processors attached to every
// row), and each Draw is one Sample call whose rows carry the case's seed and consecutive
// steps (SampleN or SampleDistinct for the pair modes).
type SamplerDrawer struct {
	c      *Case
	dev    runtime.Device
	s      *sampler.Sampler
	buf    runtime.Buffer
	rows   int
	params []sampler.Params
	res    sampler.Result
}

// pairDraws is the number of SampleN draws per row of a ModePairs case: two pairs.
const pairDraws = 4

// outcomesPerRow is the number of counted outcomes one row of a call gives.
func (c *Case) outcomesPerRow() int {
	if c.Mode == ModePairs {
		return pairDraws / 2
	}
	return 1
}

// NewSamplerDrawer opens a sampler with the case's options on dev, uploads the rows and
// attaches the case's processors to each.
func NewSamplerDrawer(dev runtime.Device, c *Case) (*SamplerDrawer, error) {
	v := c.Vocab()
	if v == 0 {
		return nil, errors.New("statistical: case has no logits")
	}
	budget, maxRows := logitsBudget, maxRowsPerCall
	if dev.Info().Backend == runtime.CPU {
		budget, maxRows = logitsBudgetCPU, maxRowsPerCallCPU
	}
	per := c.outcomesPerRow()
	rows := max(1, min(maxRows, budget/(4*v), (c.Draws+per-1)/per))
	s, err := sampler.New(dev, c.Options())
	if err != nil {
		return nil, fmt.Errorf("statistical: new sampler: %w", err)
	}
	buf, err := dev.Alloc(rows * v * 4)
	if err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("statistical: allocate %d logits rows: %w", rows, err)
	}
	d := &SamplerDrawer{c: c, dev: dev, s: s, buf: buf, rows: rows, params: make([]sampler.Params, rows)}
	st := dev.DefaultStream()
	row := runtime.BytesOf(c.Logits)
	for r := 0; r < rows; r++ {
		if err := st.CopyToDevice(buf, r*len(row), row); err != nil {
			d.Close()
			return nil, fmt.Errorf("statistical: upload logits: %w", err)
		}
	}
	if err := st.Synchronize(); err != nil {
		d.Close()
		return nil, fmt.Errorf("statistical: upload logits: %w", err)
	}
	if p := c.Processors; p != nil {
		for r := 0; r < rows; r++ {
			if err := attachProcessors(s, r, v, p); err != nil {
				d.Close()
				return nil, err
			}
		}
	}
	return d, nil
}

// attachProcessors gives logits row r of s the static processors of p: bias, allowed and
// banned tokens. Token tracking is (re)started before every draw (see retrack); the
// bitmask goes with every draw's Params (see Case.Params).
func attachProcessors(s *sampler.Sampler, r, vocab int, p *Processors) error {
	if p.BiasTokens != nil {
		if err := s.SetLogitBias(r, vocab, p.BiasTokens, p.BiasValues); err != nil {
			return fmt.Errorf("statistical: row %d: logit bias: %w", r, err)
		}
	}
	if p.Allowed != nil {
		if err := s.SetAllowedTokens(r, vocab, p.Allowed); err != nil {
			return fmt.Errorf("statistical: row %d: allowed tokens: %w", r, err)
		}
	}
	if p.Banned != nil {
		if err := s.SetBannedTokens(r, vocab, p.Banned); err != nil {
			return fmt.Errorf("statistical: row %d: banned tokens: %w", r, err)
		}
	}
	return nil
}

// retrack restarts the token counts of rows [0, n) at the case's prompt. Every sampled
// token of a tracked row is counted on the device, which would change the next draw's
// penalties: restarting before each call keeps every draw at the same counts (the
// prompt's), so that all draws share one distribution.
func (d *SamplerDrawer) retrack(n int) error {
	p := d.c.Processors
	if p == nil || p.Prompt == nil {
		return nil
	}
	for r := 0; r < n; r++ {
		if err := d.s.TrackTokens(r, d.c.Vocab(), p.Prompt); err != nil {
			return fmt.Errorf("row %d: track tokens: %w", r, err)
		}
	}
	return nil
}

// Batch returns the outcomes of one call: rows for single draws and distinct pairs, two
// pairs per row for SampleN pairs.
func (d *SamplerDrawer) Batch() int { return d.rows * d.c.outcomesPerRow() }

// Draw samples len(tokens) outcomes with draw numbers first, first+1, ... and checks
// that every row took the case's route without error. Draw number k of a ModeSample or
// ModeDistinct case uses step k; pair k of a ModePairs case is the SampleN draws at steps
// 2k and 2k+1 (a row's four draws are two consecutive pairs), so no two outcomes share a
// step. A pair outcome is first·V + second.
func (d *SamplerDrawer) Draw(first uint64, tokens []int32) error {
	per := d.c.outcomesPerRow()
	n := (len(tokens) + per - 1) / per
	if n > d.rows {
		return fmt.Errorf("statistical: %d draws in one call, batch is %d", len(tokens), d.Batch())
	}
	if err := d.retrack(n); err != nil {
		return err
	}
	v := d.c.Vocab()
	logits := sampler.Logits{Data: d.buf, DType: sampler.Float32, Rows: n, Vocab: v}
	var err error
	switch d.c.Mode {
	case ModeSample:
		for i := 0; i < n; i++ {
			d.params[i] = d.c.Params(first + uint64(i))
		}
		err = d.s.Sample(logits, d.params[:n], &d.res)
	case ModePairs:
		for i := 0; i < n; i++ {
			d.params[i] = d.c.Params(2*first + uint64(pairDraws*i))
		}
		err = d.s.SampleN(logits, d.params[:n], pairDraws, &d.res)
	case ModeDistinct:
		for i := 0; i < n; i++ {
			d.params[i] = d.c.Params(first + uint64(i))
		}
		err = d.s.SampleDistinct(logits, d.params[:n], 2, &d.res)
	default:
		return fmt.Errorf("statistical: unknown mode %d", d.c.Mode)
	}
	if err != nil {
		return err
	}
	draws := d.c.Mode.draws()
	if d.res.Draws != draws || len(d.res.Tokens) < n*draws {
		return fmt.Errorf("result holds %d draws per row (%d tokens) for %d rows, want %d", d.res.Draws, len(d.res.Tokens), n, draws)
	}
	for i := 0; i < n; i++ {
		if err := d.res.Errs[i]; err != nil {
			return fmt.Errorf("row %d (step %d): %w", i, d.params[i].Step, err)
		}
		// SampleDistinct draws through the topn kernel whatever the row's route.
		if r := d.res.Routes[i]; r != d.c.Route && d.c.Mode != ModeDistinct {
			return fmt.Errorf("row %d (step %d) took route %v, want %v", i, d.params[i].Step, r, d.c.Route)
		}
		row := d.res.Tokens[i*draws : (i+1)*draws]
		for _, t := range row {
			if t < 0 || int(t) >= v {
				return fmt.Errorf("row %d (step %d): token %d outside [0, %d)", i, d.params[i].Step, t, v)
			}
		}
		switch d.c.Mode {
		case ModeSample:
			tokens[i] = row[0]
		case ModeDistinct:
			tokens[i] = row[0]*int32(v) + row[1]
		case ModePairs:
			for j := 0; j < per && i*per+j < len(tokens); j++ {
				tokens[i*per+j] = row[2*j]*int32(v) + row[2*j+1]
			}
		}
	}
	return nil
}

// draws returns the tokens per row of one call in a mode.
func (m Mode) draws() int {
	switch m {
	case ModePairs:
		return pairDraws
	case ModeDistinct:
		return 2
	}
	return 1
}

// Close releases the sampler and the logits buffer.
func (d *SamplerDrawer) Close() error {
	var errs []error
	if d.s != nil {
		errs = append(errs, d.s.Close())
		d.s = nil
	}
	if d.buf != nil {
		errs = append(errs, d.buf.Free())
		d.buf = nil
	}
	return errors.Join(errs...)
}

// describe names outcome i of a case: a token and its logit, or a pair of them.
func (c *Case) describe(i int) string {
	v := c.Vocab()
	token := func(t int) string { return fmt.Sprintf("token %d, logit %v", t, c.Logits[t]) }
	if c.Mode == ModeSample {
		return token(i)
	}
	return fmt.Sprintf("pair (%s; %s)", token(i/v), token(i%v))
}
