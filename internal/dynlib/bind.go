package dynlib

import (
	"fmt"
	"strings"

	"github.com/gumbel-go/gumbel/runtime"
)

// Func is one C function to bind: the first of Names that the library exports goes to
// Dst, and its name to Bound when that is not nil. An Optional function may be missing;
// Dst then stays 0.
type Func struct {
	Names    []string
	Dst      *uintptr
	Bound    *string
	Optional bool
}

// Required is a function the library must export, under one of names.
func Required(dst *uintptr, names ...string) Func { return Func{Names: names, Dst: dst} }

// Optional is a function that only refines what the caller can do.
func Optional(dst *uintptr, names ...string) Func {
	return Func{Names: names, Dst: dst, Optional: true}
}

// Bind fills every function's pointer through lookup (0: not exported). A missing
// required function is an error wrapping runtime.ErrUnavailable that names all that are
// missing and the library, what.
func Bind(what string, lookup func(name string) uintptr, funcs []Func) error {
	var missing []string
	for _, f := range funcs {
		*f.Dst = 0
		for _, n := range f.Names {
			if p := lookup(n); p != 0 {
				*f.Dst = p
				if f.Bound != nil {
					*f.Bound = n
				}
				break
			}
		}
		if *f.Dst == 0 && !f.Optional {
			missing = append(missing, strings.Join(f.Names, " or "))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s lacks %s (too old, or not the right library)", runtime.ErrUnavailable, what, strings.Join(missing, ", "))
	}
	return nil
}
