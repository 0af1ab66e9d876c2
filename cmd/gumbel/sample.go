package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/sampler"
)

// sampleConfig is the parsed command line of `gumbel sample`.
type sampleConfig struct {
	file   string
	params sampler.Params
	draws  int
	counts bool
	device deviceFlags
}

// Batching of draws: a call samples many copies of the file's rows at once (the
// copies stay on the device for the whole run, so the logits cross the bus once).
// stagingBudget bounds the device memory the copies take; maxRowsPerCall keeps one
// call's parameter and result arrays small when the vocabulary is tiny.
const (
	stagingBudget  = 64 << 20
	maxRowsPerCall = 8192
	maxDraws       = 1 << 30
)

func parseSampleFlags(args []string, w io.Writer) (sampleConfig, error) {
	var c sampleConfig
	fs := newFlags("sample", "sample [flags] FILE.npy", w)
	temperature := fs.Float64("temperature", 1, "temperature; 0 is greedy")
	fs.IntVar(&c.params.TopK, "top-k", 0, "keep the K most likely tokens (0 = off)")
	topP := fs.Float64("top-p", 1, "keep the most likely tokens holding this much probability (0 or 1 = off)")
	minP := fs.Float64("min-p", 0, "keep tokens at least this fraction as likely as the top token (0 = off)")
	fs.Uint64Var(&c.params.Seed, "seed", 0, "seed of every row: a row's tokens depend only on its logits, the flags, the seed and the step")
	fs.Uint64Var(&c.params.Step, "step", 0, "decode step of the first draw; draw i uses step+i")
	fs.IntVar(&c.draws, "draws", 1, "draws per row")
	fs.BoolVar(&c.counts, "counts", false, `print JSON {"backend": ..., "rows": [{"counts": {"<token>": n}}]} instead of the tokens`)
	c.device.register(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return c, err
	}
	switch len(pos) {
	case 0:
		return c, usagef("missing the .npy file of logits")
	case 1:
		c.file = pos[0]
	default:
		return c, usagef("one .npy file expected, got %d arguments: %s", len(pos), strings.Join(pos, " "))
	}
	if c.draws < 1 || c.draws > maxDraws {
		return c, usagef("--draws %d: must be between 1 and %d", c.draws, maxDraws)
	}
	if err := c.device.validate(); err != nil {
		return c, err
	}
	// Range checks of the sampling parameters are the sampler's: it reports them as row
	// errors with the same wording a library user sees.
	c.params.Temperature = float32(*temperature)
	c.params.TopP = float32(*topP)
	c.params.MinP = float32(*minP)
	c.params.HasSeed = true
	return c, nil
}

func runSample(e env, args []string) error {
	cfg, err := parseSampleFlags(args, e.stderr)
	if err != nil {
		return err
	}
	logits, err := readNPY(cfg.file)
	if err != nil {
		return err
	}
	if logits.note != "" {
		fmt.Fprintf(e.stderr, "note: %s\n", logits.note)
	}
	dev, err := cfg.device.open()
	if err != nil {
		return err
	}
	defer dev.Close()
	s, err := sampler.New(dev, sampler.Options{})
	if err != nil {
		return err
	}
	defer s.Close()
	prog := newDrawProgress(e.stderr, logits.rows, cfg.draws)
	out, err := drawRows(dev, s, logits, cfg.params, cfg.draws, !cfg.counts, prog.set)
	prog.close()
	if err != nil {
		return err
	}
	if err := out.flagError(); err != nil {
		return err
	}
	if cfg.counts {
		err = writeCounts(e.stdout, dev.Info(), logits, cfg, out)
	} else {
		err = writeTokens(e.stdout, out)
	}
	if err != nil {
		return err
	}
	return out.failure()
}

// rowDraws is what the draws of one row of the file gave.
type rowDraws struct {
	// tokens in draw order (kept only when asked), counts by token, err of the row.
	tokens []int32
	counts map[int32]int
	err    error
}

type drawResult struct{ rows []rowDraws }

// paramFlags names the flag behind each parameter error of the sampler.
var paramFlags = []struct {
	flag string
	err  error
}{
	{"--temperature", sampler.ErrTemperature},
	{"--top-k", sampler.ErrTopK},
	{"--top-p", sampler.ErrTopP},
	{"--min-p", sampler.ErrMinP},
}

// flagError returns a usage error when the sampler rejected the parameters: every row
// shares them, so every row failed the same way, and the fix is on the command line.
func (d drawResult) flagError() error {
	for _, pf := range paramFlags {
		if errors.Is(d.rows[0].err, pf.err) {
			return usagef("%s: %w", pf.flag, pf.err)
		}
	}
	return nil
}

// failure reports the rows that could not be sampled, as one error.
func (d drawResult) failure() error {
	var failed []string
	for _, row := range d.rows {
		if row.err != nil {
			// The error already names its row: it comes from the first copy of the
			// matrix, whose call rows are the file's rows.
			failed = append(failed, row.err.Error())
		}
	}
	if failed == nil {
		return nil
	}
	return fmt.Errorf("%d of %d rows could not be sampled:\n  %s", len(failed), len(d.rows), strings.Join(failed, "\n  "))
}

// drawRows samples every row of logits draws times with steps p.Step, p.Step+1, ...
// Many draws go into one call: the device holds `copies` copies of the matrix and a
// call samples all of them, copy c with the step of draw d0+c. After each call,
// progress (when not nil) gets the number of draws per row done so far.
func drawRows(dev runtime.Device, s *sampler.Sampler, logits *hostLogits, p sampler.Params, draws int, keepTokens bool, progress func(done int)) (drawResult, error) {
	rows, rowBytes := logits.rows, logits.vocab*logits.dtype.Size()
	copies := max(1, min(draws, stagingBudget/(rows*rowBytes), maxRowsPerCall/rows))
	buf, err := uploadCopies(dev, logits.bytes(), copies)
	if err != nil {
		return drawResult{}, err
	}
	defer buf.Free()

	out := drawResult{rows: make([]rowDraws, rows)}
	for r := range out.rows {
		out.rows[r].counts = map[int32]int{}
		if keepTokens {
			out.rows[r].tokens = make([]int32, 0, min(draws, 1<<20))
		}
	}
	params := make([]sampler.Params, copies*rows)
	var res sampler.Result
	for d0 := 0; d0 < draws; d0 += copies {
		n := min(copies, draws-d0)
		for c := range n {
			for r := range rows {
				q := p
				q.Step = p.Step + uint64(d0+c)
				params[c*rows+r] = q
			}
		}
		in := sampler.Logits{Data: buf, DType: logits.dtype, Rows: n * rows, Vocab: logits.vocab}
		if err := s.Sample(in, params[:n*rows], &res); err != nil {
			return drawResult{}, err
		}
		failed := 0
		for r := range out.rows {
			row := &out.rows[r]
			// A row's error depends on its logits and parameters, not on the step:
			// the first copy of the first call has said everything about it.
			if d0 == 0 && res.Errs[r] != nil {
				row.err = res.Errs[r]
			}
			if row.err != nil {
				failed++
				continue
			}
			for c := range n {
				tok := res.Tokens[c*rows+r]
				row.counts[tok]++
				if keepTokens {
					row.tokens = append(row.tokens, tok)
				}
			}
		}
		if failed == rows {
			break
		}
		if progress != nil {
			progress(d0 + n)
		}
	}
	return out, nil
}

// progressDelay is how long `gumbel sample` runs before it shows a progress bar: a
// quick run prints nothing but its result.
const progressDelay = time.Second

// drawProgress shows the draws done on a terminal, as selftest's bar does, once the run
// has taken progressDelay. Elsewhere (a pipe, a file, a CI log) it writes nothing: stderr
// then carries only the notes and the errors.
type drawProgress struct {
	began time.Time
	now   func() time.Time
	open  func() caseProgress // nil: not a terminal
	bar   caseProgress        // opened after progressDelay
}

func newDrawProgress(w io.Writer, rows, draws int) *drawProgress {
	p := &drawProgress{began: time.Now(), now: time.Now}
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		label := fmt.Sprintf("sampling %d row(s)", rows)
		p.open = func() caseProgress {
			bar := newProgress(w, int64(draws))
			if b, ok := bar.(*barProgress); ok {
				b.label = label
			}
			return bar
		}
	}
	return p
}

// set reports done draws per row.
func (p *drawProgress) set(done int) {
	if p.open == nil {
		return
	}
	if p.bar == nil {
		if p.now().Sub(p.began) < progressDelay {
			return
		}
		p.bar = p.open()
	}
	p.bar.set(int64(done))
}

// close removes the bar, if one was shown, before the results are printed.
func (p *drawProgress) close() {
	if p.bar != nil {
		p.bar.close()
		p.bar = nil
	}
}

// uploadCopies returns a device buffer holding copies back-to-back copies of data.
func uploadCopies(dev runtime.Device, data []byte, copies int) (runtime.Buffer, error) {
	buf, err := dev.Alloc(copies * len(data))
	if err != nil {
		return nil, fmt.Errorf("allocating %d bytes of device memory for the logits: %w", copies*len(data), err)
	}
	st := dev.DefaultStream()
	for c := range copies {
		if err := st.CopyToDevice(buf, c*len(data), data); err != nil {
			buf.Free()
			return nil, err
		}
	}
	if err := st.Synchronize(); err != nil {
		buf.Free()
		return nil, err
	}
	return buf, nil
}

// writeTokens prints one line per row: its tokens in draw order, or for a row that
// could not be sampled "error: row R: " and why (stderr lists the failed rows too).
func writeTokens(w io.Writer, d drawResult) error {
	var line []byte
	for r, row := range d.rows {
		line = line[:0]
		if row.err != nil {
			// The error names its row already (see failure); add the number if not.
			msg := strings.ReplaceAll(row.err.Error(), "\n", " ")
			if !strings.HasPrefix(msg, fmt.Sprintf("row %d: ", r)) {
				msg = fmt.Sprintf("row %d: %s", r, msg)
			}
			line = append(line, "error: "+msg...)
		}
		for i, tok := range row.tokens {
			if i > 0 {
				line = append(line, ' ')
			}
			line = strconv.AppendInt(line, int64(tok), 10)
		}
		line = append(line, '\n')
		if _, err := w.Write(line); err != nil {
			return err
		}
	}
	return nil
}

// countsReport is what `gumbel sample --counts` prints.
type countsReport struct {
	Backend     string      `json:"backend"`
	Device      string      `json:"device"`
	DType       string      `json:"dtype"`
	Vocab       int         `json:"vocab"`
	Draws       int         `json:"draws"`
	Step        uint64      `json:"step"`
	Seed        uint64      `json:"seed"`
	Temperature float32     `json:"temperature"`
	TopK        int         `json:"top_k"`
	TopP        float32     `json:"top_p"`
	MinP        float32     `json:"min_p"`
	Rows        []rowCounts `json:"rows"`
}

type rowCounts struct {
	// Counts maps each drawn token (as a decimal string key) to how often it came.
	Counts map[int32]int `json:"counts"`
	Error  string        `json:"error,omitempty"`
}

func writeCounts(w io.Writer, info runtime.DeviceInfo, logits *hostLogits, cfg sampleConfig, d drawResult) error {
	rep := countsReport{
		Backend:     string(info.Backend),
		Device:      info.Name,
		DType:       logits.dtype.String(),
		Vocab:       logits.vocab,
		Draws:       cfg.draws,
		Step:        cfg.params.Step,
		Seed:        cfg.params.Seed,
		Temperature: cfg.params.Temperature,
		TopK:        cfg.params.TopK,
		TopP:        cfg.params.TopP,
		MinP:        cfg.params.MinP,
		Rows:        make([]rowCounts, len(d.rows)),
	}
	for r, row := range d.rows {
		rep.Rows[r].Counts = row.counts
		if row.err != nil {
			rep.Rows[r].Error = row.err.Error()
		}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}
