// CPU, heap and blocking profiles and an execution trace of a lanedemo run
// (--cpuprofile and friends).

package main

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
)

// profiles are the Go profiles a run writes: where the host's time goes,
// which is what bounds a lane's throughput once replay has removed launch
// overhead.
type profiles struct {
	cpu, mutex, block, allocs, exec string
}

// start begins the requested profiles; finish stops them and writes every
// file. Nothing is written when no profile was asked for.
func (p profiles) start() (finish func() error, err error) {
	var cpu *os.File
	if p.cpu != "" {
		if cpu, err = os.Create(p.cpu); err != nil {
			return nil, fmt.Errorf("lanedemo: --cpuprofile: %w", err)
		}
		if err := pprof.StartCPUProfile(cpu); err != nil {
			_ = cpu.Close()
			return nil, fmt.Errorf("lanedemo: --cpuprofile: %w", err)
		}
	}
	var exec *os.File
	if p.exec != "" {
		if exec, err = os.Create(p.exec); err == nil {
			if err = trace.Start(exec); err != nil {
				_ = exec.Close()
			}
		}
		if err != nil {
			if cpu != nil {
				pprof.StopCPUProfile()
				_ = cpu.Close()
			}
			return nil, fmt.Errorf("lanedemo: --exectrace: %w", err)
		}
	}
	if p.mutex != "" {
		runtime.SetMutexProfileFraction(5)
	}
	if p.block != "" {
		runtime.SetBlockProfileRate(10_000) // one sample per 10µs blocked
	}
	return func() error {
		var errs []error
		if cpu != nil {
			pprof.StopCPUProfile()
			errs = append(errs, cpu.Close())
		}
		if exec != nil {
			trace.Stop()
			errs = append(errs, exec.Close())
		}
		for _, w := range []struct{ flag, name, path string }{
			{"mutexprofile", "mutex", p.mutex}, {"blockprofile", "block", p.block}, {"memprofile", "allocs", p.allocs}} {
			if w.path != "" {
				errs = append(errs, writeProfile(w.flag, w.name, w.path))
			}
		}
		return errors.Join(errs...)
	}, nil
}

// writeProfile writes the named runtime profile, asked for by flag, to
// path.
func writeProfile(flag, name, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("lanedemo: --%s: %w", flag, err)
	}
	if err := pprof.Lookup(name).WriteTo(f, 0); err != nil {
		_ = f.Close()
		return fmt.Errorf("lanedemo: --%s: %w", flag, err)
	}
	return f.Close()
}
