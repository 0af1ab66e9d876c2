//go:build unix

package gokernel

import (
	"syscall"
	"time"
)

// processCPUTime is the user+system time of the whole process: on a shared, busy machine
// it measures the work, where wall time measures the queue for the cores.
func processCPUTime() (time.Duration, bool) {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
