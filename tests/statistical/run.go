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
		out.Message = fmt.Sprintf("%d draws of zero-probability tokens (first: token %d, logit %v)",
			verdict.ZeroDrawn, verdict.FirstZero, c.Logits[verdict.FirstZero])
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
	// maxRowsPerCall bounds the batch of small-vocabulary cases.
	maxRowsPerCall = 4096
)

// SamplerDrawer draws a case's tokens with a [sampler.Sampler]: the case's row is copied
// into device memory once per batch row, and each Draw is one Sample call whose rows
// carry the case's seed and consecutive steps.
type SamplerDrawer struct {
	c      *Case
	dev    runtime.Device
	s      *sampler.Sampler
	buf    runtime.Buffer
	rows   int
	params []sampler.Params
	res    sampler.Result
}

// NewSamplerDrawer opens a sampler with the case's options on dev and uploads the rows.
func NewSamplerDrawer(dev runtime.Device, c *Case) (*SamplerDrawer, error) {
	v := c.Vocab()
	if v == 0 {
		return nil, errors.New("statistical: case has no logits")
	}
	budget := logitsBudget
	if dev.Info().Backend == runtime.CPU {
		budget = logitsBudgetCPU
	}
	rows := max(1, min(maxRowsPerCall, budget/(4*v), c.Draws))
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
	return d, nil
}

// Batch returns the rows of one Sample call.
func (d *SamplerDrawer) Batch() int { return d.rows }

// Draw samples len(tokens) rows with steps first, first+1, ... and checks that every row
// took the case's route without error.
func (d *SamplerDrawer) Draw(first uint64, tokens []int32) error {
	n := len(tokens)
	if n > d.rows {
		return fmt.Errorf("statistical: %d draws in one call, batch is %d", n, d.rows)
	}
	for i := 0; i < n; i++ {
		d.params[i] = d.c.Params(first + uint64(i))
	}
	logits := sampler.Logits{Data: d.buf, DType: sampler.Float32, Rows: n, Vocab: d.c.Vocab()}
	if err := d.s.Sample(logits, d.params[:n], &d.res); err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		if err := d.res.Errs[i]; err != nil {
			return fmt.Errorf("row %d (step %d): %w", i, first+uint64(i), err)
		}
		if r := d.res.Routes[i]; r != d.c.Route {
			return fmt.Errorf("row %d (step %d) took route %v, want %v", i, first+uint64(i), r, d.c.Route)
		}
		tokens[i] = d.res.Tokens[i]
	}
	return nil
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
