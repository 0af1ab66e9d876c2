package runtime

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
)

// Opener opens device number ordinal of one backend. It returns an error wrapping
// ErrUnavailable when the backend cannot run on this machine.
type Opener func(ordinal int) (Device, error)

// Probe reports what a backend finds on this machine without keeping a device open: the
// devices and libraries, or why there are none.
type Probe func() ProbeResult

// ProbeResult is what [Probe] found.
type ProbeResult struct {
	Backend   Backend
	Devices   []DeviceInfo
	Libraries []string
	// Err says why the backend is unavailable; nil when it has devices.
	Err error
}

type registration struct {
	name  Backend
	open  Opener
	probe Probe
	// rank orders "auto": lower first.
	rank int
}

var (
	registryMu sync.Mutex
	registry   []registration
)

// Register adds a backend. Backends call it from init; rank orders the "auto" choice
// (GPU backends before the CPU device).
func Register(name Backend, rank int, open Opener, probe Probe) {
	registryMu.Lock()
	defer registryMu.Unlock()
	for i, r := range registry {
		if r.name == name {
			registry[i] = registration{name, open, probe, rank}
			return
		}
	}
	registry = append(registry, registration{name, open, probe, rank})
	for i := len(registry) - 1; i > 0 && registry[i].rank < registry[i-1].rank; i-- {
		registry[i], registry[i-1] = registry[i-1], registry[i]
	}
}

// Backends returns the registered backends in "auto" order.
func Backends() []Backend {
	registryMu.Lock()
	defer registryMu.Unlock()
	out := make([]Backend, len(registry))
	for i, r := range registry {
		out[i] = r.name
	}
	return out
}

// ProbeAll probes every registered backend.
func ProbeAll() []ProbeResult {
	registryMu.Lock()
	regs := append([]registration(nil), registry...)
	registryMu.Unlock()
	out := make([]ProbeResult, 0, len(regs))
	for _, r := range regs {
		if r.probe == nil {
			out = append(out, ProbeResult{Backend: r.name, Err: fmt.Errorf("%s: no probe", r.name)})
			continue
		}
		res := r.probe()
		res.Backend = r.name
		out = append(out, res)
	}
	return out
}

// EnvBackend is the environment variable that picks a backend: cpu, cuda, hip, metal or
// auto (the default).
const EnvBackend = "GUMBEL_BACKEND"

// OpenOptions choose a device.
type OpenOptions struct {
	// Backend is a backend name or "auto"; empty means $GUMBEL_BACKEND, then "auto".
	Backend string
	// Ordinal is the device number within the backend.
	Ordinal int
}

// Opened is a device with the story of how it was chosen.
type Opened struct {
	Device
	// Skipped records, for "auto", each backend tried before this one and why it did
	// not open.
	Skipped []error
}

// Open opens a device. With "auto" it tries each registered backend in order (GPU
// backends first) and falls back to the CPU device, recording the reasons in Skipped.
func Open(opts OpenOptions) (*Opened, error) {
	name := strings.ToLower(strings.TrimSpace(opts.Backend))
	if name == "" {
		name = strings.ToLower(strings.TrimSpace(os.Getenv(EnvBackend)))
	}
	if name == "" {
		name = "auto"
	}
	registryMu.Lock()
	regs := append([]registration(nil), registry...)
	registryMu.Unlock()
	if name != "auto" {
		for _, r := range regs {
			if string(r.name) == name {
				d, err := r.open(opts.Ordinal)
				if err != nil {
					return nil, fmt.Errorf("gumbel/runtime: open %s device %d: %w", name, opts.Ordinal, err)
				}
				return &Opened{Device: d}, nil
			}
		}
		return nil, fmt.Errorf("%w: %q (registered: %v)", ErrUnknownBackend, name, Backends())
	}
	var skipped []error
	for _, r := range regs {
		d, err := r.open(opts.Ordinal)
		if err == nil {
			return &Opened{Device: d, Skipped: skipped}, nil
		}
		skipped = append(skipped, fmt.Errorf("%s: %w", r.name, err))
	}
	if len(regs) == 0 {
		return nil, fmt.Errorf("%w: no backend registered (import github.com/gumbel-go/gumbel)", ErrUnavailable)
	}
	return nil, fmt.Errorf("%w: every backend failed: %w", ErrUnavailable, errors.Join(skipped...))
}
