// Command gumbel drives the gumbel sampling runtime from the command line.
//
// Usage:
//
//	gumbel [run]             sample synthetic LLM-shaped logits on the default device and time each route
//	gumbel info [--json]     list every backend: found or why not, its devices and libraries
//	gumbel sample FILE.npy   sample tokens from logits saved by NumPy ([V] or [B, V])
//	gumbel selftest          run the statistical suite on a device; exit status 1 on any failure
//	gumbel bench             device and host time of a sampling step over routes x dtypes x vocabularies x batches
//	                         (--features: each serving feature's cost; --split-sweep: every blocks-per-row value)
//
// Every command takes -h for its flags. --backend picks cpu, cuda, hip, metal or auto;
// without it $GUMBEL_BACKEND decides, then auto (a GPU if one opens, else the CPU).
//
// Exit status: 0 on success, 1 when the work failed (a device error, a failed check, a row
// that could not be sampled), 2 for a usage error (unknown command, bad flag value).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/gumbel-go/gumbel/runtime"
)

// env is what a command may touch of the outside world, so tests can run commands in
// process and read what they print.
type env struct {
	stdout, stderr io.Writer
}

// command is one subcommand.
type command struct {
	name    string
	summary string
	run     func(e env, args []string) error
}

// commands lists the subcommands in the order the usage text shows them.
func commands() []command {
	return []command{
		{"run", "sample synthetic LLM-shaped logits on the default device and time each route (the default)", runJob},
		{"info", "list every backend: found or why not, its devices and libraries", runInfo},
		{"sample", "sample tokens from logits in a .npy file of shape [V] or [B, V]", runSample},
		{"selftest", "run the statistical suite on a device; exit status 1 on any failure", runSelftest},
		{"bench", "time a sampling step over routes x dtypes x vocabularies x batches (markdown or --json)", runBench},
	}
}

func main() {
	os.Exit(run(os.Args[1:], env{stdout: os.Stdout, stderr: os.Stderr}))
}

// usageError marks an error the user can fix by changing the command line; it exits 2.
type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }
func (u usageError) Unwrap() error { return u.err }

func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// Exit statuses.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// run executes one command line (without the program name) and returns the exit status.
func run(args []string, e env) int {
	if len(args) > 0 && slices.Contains([]string{"help", "-h", "-help", "--help"}, args[0]) {
		printUsage(e.stdout)
		return exitOK
	}
	name := "run"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	}
	for _, c := range commands() {
		if c.name != name {
			continue
		}
		err := c.run(e, args)
		switch {
		case err == nil:
			return exitOK
		case errors.Is(err, flag.ErrHelp):
			return exitOK
		case errors.As(err, new(usageError)), errors.Is(err, runtime.ErrUnknownBackend):
			fmt.Fprintf(e.stderr, "gumbel %s: %v\n(run 'gumbel %s -h' for its flags)\n", name, err, name)
			return exitUsage
		default:
			fmt.Fprintf(e.stderr, "gumbel %s: %v\n", name, err)
			return exitFailure
		}
	}
	fmt.Fprintf(e.stderr, "gumbel: unknown command %q\n\n", name)
	printUsage(e.stderr)
	return exitUsage
}

func printUsage(w io.Writer) {
	fmt.Fprintln(w, "gumbel: token sampling on GPUs from pure Go.")
	fmt.Fprintln(w, "\nUsage: gumbel [command] [flags]")
	fmt.Fprintln(w, "\nCommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'gumbel COMMAND -h' for a command's flags. --backend (or $GUMBEL_BACKEND) picks")
	fmt.Fprintln(w, "cpu, cuda, hip, metal or auto (a GPU if one opens, else the CPU).")
}

// newFlags returns a flag set that reports errors instead of exiting, printing its
// messages and -h text to w.
func newFlags(name, synopsis string, w io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("gumbel "+name, flag.ContinueOnError)
	fs.SetOutput(w)
	fs.Usage = func() {
		fmt.Fprintf(w, "Usage: gumbel %s\n\nFlags:\n", synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parseArgs parses flags that may come before, between or after positional arguments
// (the standard flag package stops at the first positional one), and returns the
// positional arguments. Everything after "--" is positional. A --backend flag (or
// $GUMBEL_BACKEND) that names no backend is a usage error here, before any work.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	pos, err := parseAll(fs, args)
	if err != nil {
		return nil, err
	}
	if err := checkBackend(fs); err != nil {
		return nil, err
	}
	return pos, nil
}

// checkBackend returns a usage error when fs has a --backend flag and it, or when it is
// empty $GUMBEL_BACKEND, names neither a registered backend nor auto.
func checkBackend(fs *flag.FlagSet) error {
	f := fs.Lookup("backend")
	if f == nil {
		return nil
	}
	source, value := "--backend", f.Value.String()
	if strings.TrimSpace(value) == "" {
		source, value = "$"+runtime.EnvBackend, os.Getenv(runtime.EnvBackend)
	}
	name := strings.ToLower(strings.TrimSpace(value))
	if name == "" || name == "auto" {
		return nil
	}
	var known []string
	for _, b := range runtime.Backends() {
		if string(b) == name {
			return nil
		}
		known = append(known, string(b))
	}
	return usagef("%s %q: %w (want %s or auto)", source, value, runtime.ErrUnknownBackend, strings.Join(known, ", "))
}

func parseAll(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, usageError{err}
		}
		rest := fs.Args()
		consumed := args[:len(args)-len(rest)]
		if len(consumed) > 0 && consumed[len(consumed)-1] == "--" {
			return append(positional, rest...), nil
		}
		if len(rest) == 0 {
			return positional, nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}
