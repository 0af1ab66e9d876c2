package cpu

import "syscall"

// osYield gives the CPU to another thread that waits for it, if one does: a polling
// participant must not hold up the one it waits for when the OS has put both on one CPU.
func osYield() { _, _, _ = syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }
