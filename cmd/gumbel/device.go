package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/gumbel-go/gumbel"
	"github.com/gumbel-go/gumbel/runtime"
)

// deviceFlags are the flags that choose a device, shared by every command that opens one.
type deviceFlags struct {
	backend string
	ordinal int
}

func (d *deviceFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&d.backend, "backend", "", "cpu, cuda, hip, metal or auto (default $"+runtime.EnvBackend+", else auto: a GPU if one opens, else the CPU)")
	fs.IntVar(&d.ordinal, "device", 0, "device number within the backend")
}

func (d deviceFlags) validate() error {
	if d.ordinal < 0 {
		return usagef("--device %d: must be >= 0", d.ordinal)
	}
	return nil
}

// open opens the chosen device.
func (d deviceFlags) open() (*runtime.Opened, error) {
	return gumbel.Open(runtime.OpenOptions{Backend: d.backend, Ordinal: d.ordinal})
}

// choice says which device was opened and why: who named its backend, or for "auto"
// why each backend before it did not open.
func (d deviceFlags) choice(o *runtime.Opened) string {
	info := o.Info()
	var b strings.Builder
	fmt.Fprintf(&b, "device: %s %d: %s (arch %s)", info.Backend, d.ordinal, info.Name, info.Arch)
	source, name := "--backend", strings.TrimSpace(d.backend)
	if name == "" {
		source, name = "$"+runtime.EnvBackend, strings.TrimSpace(os.Getenv(runtime.EnvBackend))
	}
	if name != "" && !strings.EqualFold(name, "auto") {
		fmt.Fprintf(&b, ", chosen by %s", source)
		return b.String()
	}
	b.WriteString(", chosen by auto (GPU backends first)")
	for _, err := range o.Skipped {
		fmt.Fprintf(&b, "\n  skipped %v", err)
	}
	return b.String()
}
