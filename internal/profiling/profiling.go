// Package profiling starts the CPU profile and the execution trace the
// project's commands write on request (lanehost's and the transformer
// example's --cpuprofile and --exectrace).
package profiling

import (
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"strings"
)

// Start starts a CPU profile and an execution trace (runtime/trace) into
// their paths (%p: the process id), each only if its path is not empty;
// the returned function stops them and closes their files. An error names
// the flag (--cpuprofile, --exectrace) and the path.
func Start(cpuPath, tracePath string) (func(), error) {
	var stops []func()
	stopAll := func() {
		for _, s := range stops {
			s()
		}
	}
	for _, p := range []struct {
		flag, path string
		start      func(io.Writer) error
		stop       func()
	}{
		{"--cpuprofile", cpuPath, pprof.StartCPUProfile, pprof.StopCPUProfile},
		{"--exectrace", tracePath, trace.Start, trace.Stop},
	} {
		if p.path == "" {
			continue
		}
		f, err := os.Create(strings.ReplaceAll(p.path, "%p", strconv.Itoa(os.Getpid())))
		if err == nil {
			if err = p.start(f); err != nil {
				_ = f.Close()
			}
		}
		if err != nil {
			stopAll()
			return nil, fmt.Errorf("%s %s: %v", p.flag, p.path, err)
		}
		stops = append(stops, func() { p.stop(); _ = f.Close() })
	}
	return stopAll, nil
}
