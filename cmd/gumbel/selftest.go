package main

import (
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"golang.org/x/term"

	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/tests/statistical"
)

// selftestConfig is the parsed command line of `gumbel selftest`.
type selftestConfig struct {
	full   bool
	scale  float64
	match  *regexp.Regexp
	seed   uint64
	device deviceFlags
}

func parseSelftestFlags(args []string, w io.Writer) (selftestConfig, error) {
	var c selftestConfig
	fs := newFlags("selftest", "selftest [flags]", w)
	fs.BoolVar(&c.full, "full", false, "the full-size suite (at least a million draws per case, vocabularies up to 151936: meant for a GPU); default the CI size")
	fs.Float64Var(&c.scale, "scale", 1, "multiply every case's draws by this (0.01 for a quick look; fewer draws catch less)")
	match := fs.String("run", "", "run only the cases whose name matches this regular expression (e.g. 'V151936' or 'gumbel')")
	fs.Uint64Var(&c.seed, "seed", 0, "base seed of the suite (0: the suite's fixed default, so runs are repeatable)")
	c.device.register(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return c, err
	}
	if len(pos) > 0 {
		return c, usagef("unexpected argument %q", pos[0])
	}
	if !(c.scale > 0 && c.scale <= 100) {
		return c, usagef("--scale %v: must be in (0, 100]", c.scale)
	}
	if c.match, err = regexp.Compile(*match); err != nil {
		return c, usagef("--run: %v", err)
	}
	return c, c.device.validate()
}

// selfTest runs cases on a device; run is statistical.Run outside tests.
type selfTest struct {
	run      func(dev runtime.Device, c statistical.Case, progress func(done, total int)) statistical.Outcome
	progress func(total int64) caseProgress
}

func runSelftest(e env, args []string) error {
	st := selfTest{run: statistical.Run, progress: func(total int64) caseProgress { return newProgress(e.stderr, total) }}
	return st.main(e, args)
}

func (st selfTest) main(e env, args []string) error {
	cfg, err := parseSelftestFlags(args, e.stderr)
	if err != nil {
		return err
	}
	size := statistical.SizeCI
	if cfg.full {
		size = statistical.SizeFull
	}
	var cases []statistical.Case
	for _, c := range statistical.Cases(statistical.Config{Size: size, Seed: cfg.seed, DrawScale: cfg.scale}) {
		if cfg.match.MatchString(c.Name) {
			cases = append(cases, c)
		}
	}
	if len(cases) == 0 {
		return usagef("--run %q matches no case of the %s suite", cfg.match, size)
	}

	dev, err := cfg.device.open()
	if err != nil {
		return err
	}
	defer dev.Close()
	fmt.Fprintln(e.stdout, cfg.device.choice(dev))
	var total int64
	for _, c := range cases {
		total += int64(c.Draws)
	}
	fmt.Fprintf(e.stdout, "%s suite: %d cases, %d draws, reject at p < %g\n\n", size, len(cases), total, cases[0].Alpha)

	prog := st.progress(total)
	results := make([]caseResult, len(cases))
	var done int64
	for i, c := range cases {
		prog.start(i, len(cases), c.Name)
		began := time.Now()
		results[i] = caseResult{c: c, out: st.run(dev, c, func(d, _ int) { prog.set(done + int64(d)) })}
		results[i].elapsed = time.Since(began)
		done += int64(c.Draws)
		prog.set(done)
		prog.finished(fmt.Sprintf("%s (%s)", results[i].verdict(), results[i].elapsed.Round(time.Millisecond)))
	}
	prog.close()

	failed, err := printSelftest(e.stdout, results)
	if err != nil {
		return err
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d cases failed on %s", failed, len(results), dev.Info().Backend)
	}
	return nil
}

// caseResult is one row of the table.
type caseResult struct {
	c       statistical.Case
	out     statistical.Outcome
	elapsed time.Duration
}

func (r caseResult) verdict() string {
	if r.out.Pass {
		return "pass"
	}
	return "FAIL"
}

// printSelftest prints the pass/fail table, the failures' reasons and what the
// reduced-size cases can detect; it returns the number of failed cases.
func printSelftest(w io.Writer, results []caseResult) (int, error) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "case\troute\tdraws\tchi2\tdf\tp\ttime\tresult")
	failed := 0
	for _, r := range results {
		if !r.out.Pass {
			failed++
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.1f\t%d\t%.3g\t%s\t%s\n", r.c.Name, r.c.Route, r.out.Draws, r.out.ChiSquare, r.out.DF, r.out.PValue, r.elapsed.Round(time.Millisecond), r.verdict())
	}
	if err := tw.Flush(); err != nil {
		return 0, err
	}
	if failed > 0 {
		fmt.Fprintln(w, "\nfailures:")
		for _, r := range results {
			if !r.out.Pass {
				fmt.Fprintf(w, "  %s: %s\n", r.c.Name, r.out.Message)
			}
		}
	}
	var notes []string
	for _, r := range results {
		if r.c.Detects != "" {
			notes = append(notes, fmt.Sprintf("  %s: %s", r.c.Name, r.c.Detects))
		}
	}
	if notes != nil {
		fmt.Fprintf(w, "\nwhat the reduced-size cases can detect:\n%s\n", strings.Join(notes, "\n"))
	}
	fmt.Fprintf(w, "\n%d of %d cases passed\n", len(results)-failed, len(results))
	return failed, nil
}

// caseProgress shows a run's progress: a bar on a terminal, a line per item elsewhere
// (a CI log would fill with redrawn bars). An item starts, advances the total, and
// finishes with a short summary.
type caseProgress interface {
	start(i, n int, name string)
	set(done int64)
	finished(summary string)
	close()
}

func newProgress(w io.Writer, total int64) caseProgress {
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		cols := 80
		if c, _, err := term.GetSize(int(f.Fd())); err == nil && c > 40 {
			cols = c
		}
		return &barProgress{w: w, total: max(total, 1), cols: cols, now: time.Now}
	}
	return lineProgress{w: w}
}

// barProgress keeps one terminal line, redrawn after "\r":
// "[i/n] name  [=====>    ] done/total  ETA 12s".
type barProgress struct {
	w     io.Writer
	total int64
	cols  int // the terminal's width: "\r" returns to the start of a wrapped line's last row only
	now   func() time.Time
	label string
	// began and base are the time and count of the first set, which the ETA's rate is
	// taken from (`gumbel sample` opens its bar with draws already done).
	began time.Time
	base  int64
	drawn time.Time // the last redraw
	shown int       // the last line's width, blanked by the next one
}

// barInterval is the least time between redraws: the draws report far more often than
// the eye can follow, and each redraw is a write to the terminal.
const barInterval = 100 * time.Millisecond

func (b *barProgress) start(i, n int, name string) { b.label = fmt.Sprintf("[%d/%d] %s", i+1, n, name) }
func (b *barProgress) finished(string)             {}

func (b *barProgress) set(done int64) {
	now := b.now()
	if b.began.IsZero() {
		b.began, b.base = now, done
	}
	if now.Sub(b.drawn) < barInterval {
		return
	}
	b.drawn = now
	done = min(max(done, 0), b.total)
	const width = 30
	fill := int(width * done / b.total)
	bar := strings.Repeat("=", fill) + strings.Repeat(" ", width-fill)
	if fill > 0 && fill < width {
		bar = bar[:fill-1] + ">" + bar[fill:]
	}
	tail := fmt.Sprintf("  [%s] %d/%d", bar, done, b.total)
	if elapsed := now.Sub(b.began); done > b.base && elapsed > 0 {
		eta := time.Duration(float64(elapsed) * float64(b.total-done) / float64(done-b.base))
		tail += "  ETA " + eta.Round(time.Second).String()
	}
	label := []rune(b.label)
	label = label[:min(len(label), max(b.cols-1-utf8.RuneCountInString(tail), 0))]
	b.draw(string(label) + tail)
}

// close blanks the line and leaves the cursor at its start, for what is printed next.
func (b *barProgress) close() {
	if b.shown > 0 {
		b.draw("")
		fmt.Fprint(b.w, "\r")
	}
}

// draw overwrites the line with s, blanking what is left of the line before.
func (b *barProgress) draw(s string) {
	n := utf8.RuneCountInString(s)
	fmt.Fprintf(b.w, "\r%s%s", s, strings.Repeat(" ", max(b.shown-n, 0)))
	b.shown = n
}

type lineProgress struct{ w io.Writer }

func (l lineProgress) start(i, n int, name string) { fmt.Fprintf(l.w, "[%d/%d] %s ... ", i+1, n, name) }
func (l lineProgress) set(int64)                   {}
func (l lineProgress) finished(summary string)     { fmt.Fprintln(l.w, summary) }
func (l lineProgress) close()                      {}
