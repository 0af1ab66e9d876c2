//go:build !unix

package gokernel

import "time"

func processCPUTime() (time.Duration, bool) { return 0, false }
