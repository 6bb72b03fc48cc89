// Command lanedemo is the multi-tenant load generator of lanes: tenants
// submit decode-like steps to a scheduler of lanes, and lanedemo reports
// what the scheduler did (replayed or eager, and why) and how well (steps
// per second, latency percentiles per lane).
//
//	go run ./cmd/lanedemo                 # the embedded simulated H200, about seven seconds (six of load)
//	lanedemo --device cuda --lanes 8      # the real GPU (build with scripts/build-cuda.sh)
//	lanedemo --device cuda --kernels-from examples/customkernels   # your own module
//
// Exit codes (--help lists them): 0 ok, 1 the run failed its own checks
// or could not run, 2 bad flags (nothing ran), 3 telemetry not delivered,
// 4 the run ended early (the report says why), 128+N after signal N
// (SIGINT, SIGTERM: the run stops and reports; a second signal exits at
// once).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"sync/atomic"
	"syscall"

	"github.com/lanesched/lanes/internal/demo"
	"github.com/lanesched/lanes/internal/procs"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) (code int) {
	f, err := parseFlags(args, stdout)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	if f.help {
		return 0
	}
	cfg, jsonPath, quiet := f.cfg, f.jsonPath, f.quiet
	ctx, signalled, stop := notifySignals(stderr)
	defer stop()
	finish, err := f.profiles.start()
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	defer func() {
		if err := finish(); err != nil { // a profile that could not be written fails the run
			fmt.Fprintln(stderr, err)
			if code == 0 {
				code = 1
			}
		}
	}()
	if cfg.Hosts.PerGPU {
		return runHosts(ctx, cfg, jsonPath, stdout, stderr, signalled)
	}
	opt := demo.Options{Errors: stderr}
	if !quiet {
		opt.Progress, opt.Terminal = stderr, isTerminal(stderr)
	}
	rep, err := demo.Run(ctx, cfg, opt)
	if err != nil {
		fmt.Fprintf(stderr, "%v\n", err)
		if errors.Is(err, demo.ErrConfig) {
			return 2
		}
		if rep == nil {
			if sig := signalled(); sig != 0 {
				return 128 + sig
			}
			return 1
		}
	}
	table := stdout
	if jsonPath == "-" {
		table = stderr // stdout carries the JSON alone
	}
	rep.WriteTable(table)
	if jsonPath != "" {
		if err := writeJSON(jsonPath, stdout, rep); err != nil {
			fmt.Fprintf(stderr, "lanedemo: --json %s: %v\n", jsonPath, err)
			return 1
		}
	}
	code = exitCode(rep, err, signalled())
	return code
}

// exitCode is the run's exit status (see usageTail): a failed check first,
// then a signal, an early end, undelivered telemetry.
func exitCode(rep *demo.Report, err error, sig int) int {
	switch {
	case !rep.OK():
		return 1
	case sig != 0:
		return 128 + sig
	case err == nil:
		return 0
	case errors.Is(err, demo.ErrEndedEarly):
		return 4
	case errors.Is(err, demo.ErrTelemetry):
		return 3
	}
	return 1
}

// notifySignals returns a context that SIGINT or SIGTERM cancels, with
// the signal as its cause, and the number of the signal that did (0:
// none). A second signal exits at once, with that signal's status.
func notifySignals(stderr io.Writer) (ctx context.Context, signalled func() int, stop func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	var got atomic.Int32
	done := make(chan struct{})
	go func() {
		for {
			select {
			case sig := <-ch:
				n := int32(sig.(syscall.Signal))
				if !got.CompareAndSwap(0, n) {
					fmt.Fprintf(stderr, "\nlanedemo: %s again: exiting now, without a report\n", signalName(sig))
					os.Exit(128 + int(n))
				}
				fmt.Fprintf(stderr, "\nlanedemo: %s: stopping; the report follows (send it again to exit at once)\n", signalName(sig))
				cancel(fmt.Errorf("interrupted by %v", signalName(sig)))
			case <-done:
				return
			}
		}
	}()
	return ctx, func() int { return int(got.Load()) }, func() {
		signal.Stop(ch)
		close(done)
		cancel(nil)
	}
}

// signalName is the signal's conventional name.
func signalName(sig os.Signal) string {
	switch sig {
	case os.Interrupt:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return sig.String()
}

func writeJSON(path string, stdout io.Writer, rep *demo.Report) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if path == "-" {
		_, err = stdout.Write(b)
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// runHosts runs the --host-per-gpu mode and prints its report. On a small
// machine, a front whose lane hosts run beside it takes half the CPUs, as
// each host it launches does (internal/procs); one process (--in-process)
// keeps them all.
func runHosts(ctx context.Context, cfg demo.Config, jsonPath string, stdout, stderr io.Writer, signalled func() int) int {
	if n, ok := procs.Shared(); ok && !cfg.Hosts.InProcess {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(n))
	}
	rep, err := demo.RunHosts(ctx, cfg)
	if err != nil {
		fmt.Fprintln(stderr, err)
		if errors.Is(err, demo.ErrConfig) {
			return 2
		}
		if sig := signalled(); sig != 0 {
			return 128 + sig
		}
		return 1
	}
	sig := signalled()
	if sig != 0 {
		rep.EndedEarly = fmt.Sprintf("stopped by signal %d after %.1fs of the %v asked", sig, rep.Seconds, cfg.Duration)
		rep.Hosts.EndedEarly = rep.EndedEarly
	}
	table := stdout
	if jsonPath == "-" {
		table = stderr
	}
	rep.Hosts.WriteTable(table)
	if jsonPath != "" {
		if err := writeJSON(jsonPath, stdout, rep); err != nil {
			fmt.Fprintf(stderr, "lanedemo: --json %s: %v\n", jsonPath, err)
			return 1
		}
	}
	if !rep.ExactlyOnce {
		fmt.Fprintln(stderr, "lanedemo: a submission did not end exactly once")
		return 1
	}
	if sig != 0 {
		return 128 + sig
	}
	return 0
}
