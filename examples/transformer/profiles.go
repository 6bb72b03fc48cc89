package main

import (
	"fmt"
	"os"
	"runtime/pprof"
	"runtime/trace"
)

// startProfiles starts a CPU profile and an execution trace into the
// files named (either may be empty) and returns what stops them.
func startProfiles(cpu, exec string) (stop func(), err error) {
	var stops []func()
	stop = func() {
		for _, s := range stops {
			s()
		}
	}
	for _, p := range []struct {
		path  string
		start func(f *os.File) error
		end   func()
	}{{cpu, func(f *os.File) error { return pprof.StartCPUProfile(f) }, pprof.StopCPUProfile}, {exec, func(f *os.File) error { return trace.Start(f) }, trace.Stop}} {
		if p.path == "" {
			continue
		}
		f, err := os.Create(p.path)
		if err != nil {
			stop()
			return nil, fmt.Errorf("profile: %w", err)
		}
		if err := p.start(f); err != nil {
			_ = f.Close()
			stop()
			return nil, fmt.Errorf("profile %s: %w", p.path, err)
		}
		stops = append(stops, func() { p.end(); _ = f.Close() })
	}
	return stop, nil
}
