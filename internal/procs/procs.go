// Package procs sizes the Go runtime's processors (GOMAXPROCS) of a front
// and the lane hosts it launches when they share a small machine.
//
// Each Go process takes a P per CPU by default. A front and a lane host on
// one 2-core machine then run four Ps on two cores: a thread the runtime
// wakes to run a readied goroutine waits for a core the other process
// holds, and a lane host served 0.65-0.73 of one process's steps at 2 in
// flight. Each with half the CPUs, the host served 0.9-0.97
// (docs/measurements/2026-12-07-fast-by-default.txt; issue 56).
package procs

import (
	"os"
	"runtime"
	"strconv"
	"strings"
)

// SmallMachine is the most CPUs of a machine whose front and lane hosts
// split it: on the H100's 16 a lane host served 0.98-1.00 of one process
// with every process at its default.
const SmallMachine = 4

// Shared reports the GOMAXPROCS for each process sharing this machine (half
// its CPUs, at least one) and whether to set it: only on a small machine,
// and never over a GOMAXPROCS the environment sets.
func Shared() (n int, ok bool) {
	if _, set := os.LookupEnv("GOMAXPROCS"); set || runtime.NumCPU() > SmallMachine {
		return 0, false
	}
	return max(1, runtime.NumCPU()/2), true
}

// Env is the environment entry that gives a launched process its share,
// or "" when Shared says not to set one.
func Env(extra []string) string {
	for _, e := range extra {
		if strings.HasPrefix(e, "GOMAXPROCS=") {
			return ""
		}
	}
	n, ok := Shared()
	if !ok {
		return ""
	}
	return "GOMAXPROCS=" + strconv.Itoa(n)
}
