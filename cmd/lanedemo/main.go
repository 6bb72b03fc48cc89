// Command lanedemo is the multi-tenant load generator of lanes: tenants
// submit decode-like steps to a scheduler of lanes, and lanedemo reports
// what the scheduler did (replayed or eager, and why) and how well (steps
// per second, latency percentiles per lane).
//
//	go run ./cmd/lanedemo                 # the embedded simulated H200, about seven seconds
//	lanedemo --device cuda --lanes 8      # the real GPU (build with scripts/build-cuda.sh)
//	lanedemo --device cuda --kernels-from examples/customkernels   # your own module
//
// Exit codes: 0 ok, 1 the run failed its own checks (a submission that
// never ended), 2 bad flags, 3 telemetry not delivered (spans dropped or
// exports failed; the report says which).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"

	"github.com/lanesched/lanes/internal/demo"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// flags is what the command line says.
type flags struct {
	cfg      demo.Config
	jsonPath string
	quiet    bool
	help     bool
	profiles profiles
}

// parseFlags parses and validates the command line.
func parseFlags(args []string, stdout io.Writer) (flags, error) {
	f := flags{cfg: demo.Defaults()}
	cfg := &f.cfg
	fs := flag.NewFlagSet("lanedemo", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&cfg.Device, "device", cfg.Device, "device backend: sim (the embedded simulated H200) or cuda (the real GPU; needs a build with the cuda tag)")
	fs.StringVar(&cfg.Clock, "clock", cfg.Clock, "sim clock: real (the cost model in wall-clock time, feels like a GPU), zero (no device cost; kernels still compute their bytes on the CPU) or none (no device cost and no bytes computed: the scheduler's own cost, as the report's process CPU per step)")
	fs.IntVar(&cfg.Devices, "devices", cfg.Devices, "devices to spread tenants over (sim devices, or GPUs 0..N-1 with --device cuda)")
	fs.IntVar(&cfg.Lanes, "lanes", cfg.Lanes, "lanes (streams) per device")
	fs.IntVar(&cfg.Tenants, "tenants", cfg.Tenants, "tenants, each with its own buffers and sizes")
	fs.IntVar(&cfg.EagerTenants, "eager-tenants", cfg.EagerTenants, "tenants that submit without replay keys, to show eager fallback and typed gaps")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "length of the measured phase (when --steps is 0)")
	fs.IntVar(&cfg.Steps, "steps", cfg.Steps, "steps per tenant instead of a duration (0: use --duration)")
	fs.IntVar(&cfg.Warmup, "warmup", cfg.Warmup, "warm-up steps per tenant while preparation is open (captures), before every lane is sealed")
	fs.StringVar(&cfg.Mode, "mode", cfg.Mode, "load shape: closed (--concurrency steps in flight per tenant) or open (--rate Poisson arrivals)")
	fs.IntVar(&cfg.Concurrency, "concurrency", cfg.Concurrency, "closed loop: steps in flight per tenant")
	fs.Float64Var(&cfg.Rate, "rate", cfg.Rate, "open loop: steps per second, all tenants together")
	fs.IntVar(&cfg.Kernels, "kernels", cfg.Kernels, "kernels per step (the compute chain that is captured and replayed)")
	fs.IntVar(&cfg.Capacity, "capacity", cfg.Capacity, "executables each lane's cache may hold (0: never capture)")
	fs.StringVar(&cfg.Transfers, "transfers", cfg.Transfers, "where a replaying tenant's staged input copy and readout copy run: graph (nodes of its replayed graph: one graph launch per step) or eager (their own driver calls around the graph launch, as a hand-written loop makes them)")
	fs.StringVar(&cfg.Timing, "timing", cfg.Timing, "device timing: off, completion, replay, kernel or verification")
	fs.Float64Var(&cfg.Faults.Launch, "fault-launch", 0, "sim: probability a launch fails synchronously (the lane is quarantined)")
	fs.Float64Var(&cfg.Faults.Capture, "fault-capture", 0, "sim: probability a command is rejected during capture (eager fallback)")
	fs.Float64Var(&cfg.Faults.OOM, "fault-oom", 0, "sim: probability an allocation or instantiation runs out of memory")
	fs.Float64Var(&cfg.Faults.Sticky, "fault-sticky", 0, "sim: probability a launch poisons the whole device")
	fs.Float64Var(&cfg.Faults.Hang, "fault-hang", 0, "sim: probability a kernel never finishes")
	fs.StringVar(&f.jsonPath, "json", "", "also write the report as JSON to this file (- for stdout)")
	fs.Int64Var(&cfg.Seed, "seed", cfg.Seed, "seed of inputs, arrivals and faults")
	fs.BoolVar(&f.quiet, "quiet", false, "no progress line")
	fs.StringVar(&cfg.Telemetry.OTLPEndpoint, "otlp-endpoint", "", "send traces (and, with --metrics otlp, metrics) to this OTLP collector: host:port (plain text on loopback, TLS elsewhere) or http(s)://host:port (Jaeger: 127.0.0.1:4317); without it the OTEL_EXPORTER_OTLP_* and OTEL_*_EXPORTER variables are honoured")
	fs.StringVar(&cfg.Telemetry.OTLPProtocol, "otlp-protocol", cfg.Telemetry.OTLPProtocol, "OTLP protocol: grpc (port 4317) or http (port 4318)")
	fs.StringVar(&cfg.Telemetry.TraceFile, "trace-file", "", "write spans as OTLP JSON (one export request per line) to this file; Jaeger's UI and the Collector load it")
	fs.StringVar(&cfg.Telemetry.Metrics, "metrics", "", "metrics: prometheus (served on --ops-addr's /metrics), otlp (to --otlp-endpoint) or none; default OTEL_METRICS_EXPORTER, else prometheus when --ops-addr is given, else otlp when an OTEL_EXPORTER_OTLP_*ENDPOINT variable is set, else none")
	fs.StringVar(&cfg.Telemetry.OpsAddr, "ops-addr", "", "serve /metrics, /healthz, /readyz and /debug/pprof/ here during the run: host:port, or :port for loopback (off by default)")
	fs.Float64Var(&cfg.Telemetry.SuccessRatio, "trace-successes", cfg.Telemetry.SuccessRatio, "fraction of plain successes traced (every error, refusal, quarantine, eager fallback and cache event is traced, and every sampled-out one counted)")
	fs.StringVar(&cfg.Telemetry.ServiceName, "service-name", "", "OpenTelemetry service name (default OTEL_SERVICE_NAME, else lanedemo)")
	fs.StringVar(&cfg.Telemetry.Resource, "resource", "", "extra OpenTelemetry resource attributes, k=v,k=v (after OTEL_RESOURCE_ATTRIBUTES)")
	fs.DurationVar(&cfg.Spin, "spin", 0, "how long a lane's thread keeps polling its fences and spinning for work after a fence ended, instead of parking between timed polls (a core per busy lane; 0: never); default "+demo.GPUSpin.String()+" with --device cuda, 0 on the sim")
	fs.StringVar(&f.profiles.cpu, "cpuprofile", "", "write a Go CPU profile of the run to this file (go tool pprof)")
	fs.StringVar(&f.profiles.mutex, "mutexprofile", "", "write a Go mutex-contention profile of the run to this file")
	fs.StringVar(&f.profiles.allocs, "memprofile", "", "write a Go allocation profile of the run to this file")
	fs.StringVar(&f.profiles.block, "blockprofile", "", "write a Go blocking profile of the run to this file")
	fs.IntVar(&cfg.StreamDepth, "stream-depth", 0, "submissions each lane keeps on its stream before the rest wait in its fair queue (0: the scheduler's default; -1: no bound, first come first served)")
	fs.StringVar(&cfg.Hostile, "hostile", "", "add a hostile tenant, on the first device, beside the others: flood (keeps its admission full), churn (a new replay key every step, preparation left open) or huge (one 100000-entry batch, refused as too large, then batches of the most commands admitted, 1024); the report lists every tenant's lane, p50/p99 and replay share")
	fs.StringVar(&cfg.KernelsFrom, "kernels-from", "", "serve steps of your own module instead of the built-in kernels: a directory holding "+demo.ManifestFile+" (the module file, its kernels' parameters, the tenants' buffers, the step's launches; see examples/customkernels) and the module; runs with --device cuda (the simulated device needs Go references, which a manifest cannot carry)")
	fs.DurationVar(&cfg.Soak, "soak", 0, "soak: run this long, sampling goroutines, heap and device memory, and fail unless they stay flat and every submission ends once")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			fmt.Fprintln(stdout, "usage: lanedemo [flags]\n\nDrives a scheduler of lanes with multi-tenant decode steps and reports replay, latency and failures.\n\nflags:")
			fs.PrintDefaults()
			fmt.Fprintln(stdout, "\nexit status: 0 ok, 1 the run failed its own checks (a submission that never ended), 2 bad flags, 3 telemetry not delivered (spans dropped or exports failed)")
			f.help = true
			return f, nil
		}
		return f, fmt.Errorf("lanedemo: %v (see --help)", err)
	}
	kernelsSet, spinSet := false, false
	fs.Visit(func(fl *flag.Flag) {
		kernelsSet = kernelsSet || fl.Name == "kernels"
		spinSet = spinSet || fl.Name == "spin"
	})
	if !spinSet && cfg.Device == "cuda" {
		cfg.Spin = demo.GPUSpin
	}
	if kernelsSet && cfg.KernelsFrom != "" {
		return f, fmt.Errorf("lanedemo: give --kernels or --kernels-from, not both: the manifest's step says how many kernels run (see --help)")
	}
	if fs.NArg() > 0 {
		return f, fmt.Errorf("lanedemo: unexpected argument %q (see --help)", fs.Arg(0))
	}
	if err := cfg.Validate(); err != nil {
		return f, fmt.Errorf("%v (see --help)", err)
	}
	return f, nil
}

func run(args []string, stdout, stderr io.Writer) int {
	f, err := parseFlags(args, stdout)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	if f.help {
		return 0
	}
	cfg, jsonPath, quiet := f.cfg, f.jsonPath, f.quiet
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	finish, err := f.profiles.start()
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	defer func() {
		if err := finish(); err != nil {
			fmt.Fprintln(stderr, err)
		}
	}()
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
			return 1
		}
	}
	rep.WriteTable(stdout)
	if jsonPath != "" {
		if err := writeJSON(jsonPath, stdout, rep); err != nil {
			fmt.Fprintf(stderr, "lanedemo: write %s: %v\n", jsonPath, err)
			return 1
		}
	}
	if !rep.OK() || (err != nil && !errors.Is(err, demo.ErrTelemetry)) {
		return 1
	}
	if err != nil {
		return 3
	}
	return 0
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
