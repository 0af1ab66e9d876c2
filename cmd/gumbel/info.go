package main

import (
	"encoding/json"
	"fmt"
	"io"
	goruntime "runtime"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/gumbel-go/gumbel/philox"
	"github.com/gumbel-go/gumbel/runtime"
)

// infoReport is what `gumbel info --json` prints.
type infoReport struct {
	GOOS           string          `json:"goos"`
	GOARCH         string          `json:"goarch"`
	StreamContract int             `json:"stream_contract"`
	Backends       []backendReport `json:"backends"`
}

type backendReport struct {
	Backend   string         `json:"backend"`
	Available bool           `json:"available"`
	Error     string         `json:"error,omitempty"`
	Libraries []string       `json:"libraries"`
	Devices   []deviceReport `json:"devices"`
}

type deviceReport struct {
	Name               string `json:"name"`
	Arch               string `json:"arch"`
	Multiprocessors    int    `json:"multiprocessors"`
	MaxThreadsPerBlock int    `json:"max_threads_per_block"`
	WarpSize           int    `json:"warp_size"`
	TotalMemory        uint64 `json:"total_memory_bytes"`
	UnifiedMemory      bool   `json:"unified_memory"`
}

func runInfo(e env, args []string) error {
	fs := newFlags("info", "info [--json]", e.stderr)
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q", pos[0])
	}
	report := collectInfo(runtime.ProbeAll())
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(report)
	}
	return printInfo(e.stdout, report)
}

// collectInfo turns probe results into the report, keeping the registry's "auto" order.
func collectInfo(probes []runtime.ProbeResult) infoReport {
	r := infoReport{
		GOOS:           goruntime.GOOS,
		GOARCH:         goruntime.GOARCH,
		StreamContract: philox.ContractVersion,
		Backends:       make([]backendReport, 0, len(probes)),
	}
	for _, p := range probes {
		b := backendReport{
			Backend:   string(p.Backend),
			Available: p.Err == nil && len(p.Devices) > 0,
			Libraries: append([]string{}, p.Libraries...),
			Devices:   make([]deviceReport, 0, len(p.Devices)),
		}
		switch {
		case p.Err != nil:
			b.Error = p.Err.Error()
		case len(p.Devices) == 0:
			b.Error = "no devices"
		}
		for _, d := range p.Devices {
			b.Devices = append(b.Devices, deviceReport{
				Name:               d.Name,
				Arch:               d.Arch,
				Multiprocessors:    d.Multiprocessors,
				MaxThreadsPerBlock: d.MaxThreadsPerBlock,
				WarpSize:           d.WarpSize,
				TotalMemory:        d.TotalMemory,
				UnifiedMemory:      d.UnifiedMemory,
			})
			for _, l := range d.Libraries {
				if !slices.Contains(b.Libraries, l) {
					b.Libraries = append(b.Libraries, l)
				}
			}
		}
		r.Backends = append(r.Backends, b)
	}
	return r
}

func printInfo(w io.Writer, r infoReport) error {
	fmt.Fprintf(w, "gumbel on %s/%s, random stream contract v%d\n", r.GOOS, r.GOARCH, r.StreamContract)
	if len(r.Backends) == 0 {
		fmt.Fprintln(w, "no backend registered")
		return nil
	}
	for _, b := range r.Backends {
		if !b.Available {
			fmt.Fprintf(w, "\n%s: not available: %s\n", b.Backend, oneLine(b.Error))
		} else {
			fmt.Fprintf(w, "\n%s: %d device(s)\n", b.Backend, len(b.Devices))
		}
		if len(b.Devices) > 0 {
			tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "  #\tname\tarch\tSMs\tmemory\twarp\tmax block")
			for i, d := range b.Devices {
				fmt.Fprintf(tw, "  %d\t%s\t%s\t%d\t%s\t%d\t%d\n", i, d.Name, d.Arch, d.Multiprocessors, formatBytes(d.TotalMemory, d.UnifiedMemory), d.WarpSize, d.MaxThreadsPerBlock)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
		}
		for _, l := range b.Libraries {
			fmt.Fprintf(w, "  library %s\n", l)
		}
	}
	return nil
}

// oneLine keeps a multi-line error (a list of tried paths) readable in the table.
func oneLine(s string) string {
	var parts []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.Join(strings.Fields(l), " "); l != "" {
			parts = append(parts, strings.TrimRight(l, ";:"))
		}
	}
	return strings.Join(parts, "; ")
}

func formatBytes(n uint64, unified bool) string {
	if n == 0 {
		if unified {
			return "host"
		}
		return "unknown"
	}
	return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
}
