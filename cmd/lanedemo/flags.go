// The command line: every flag, validated before anything runs.

package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/internal/demo"
)

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
	f, fs, err := parseArgs(args, stdout)
	if err != nil || f.help {
		return f, err
	}
	cfg := &f.cfg
	kernelsSet, spinSet, nextStepSet := false, false, false
	fs.Visit(func(fl *flag.Flag) {
		kernelsSet = kernelsSet || fl.Name == "kernels"
		nextStepSet = nextStepSet || fl.Name == "next-step"
		spinSet = spinSet || fl.Name == "spin"
	})
	if !spinSet && cfg.Device == "cuda" {
		cfg.Spin = actors.DefaultGPUSpin()
	}
	if nextStepSet && cfg.Mode != "closed" {
		return f, fmt.Errorf("lanedemo: --next-step applies to the closed loop (--mode closed) alone: an open loop's steps arrive on their own (see --help)")
	}
	if kernelsSet && cfg.KernelsFrom != "" {
		return f, fmt.Errorf("lanedemo: give --kernels or --kernels-from, not both: the manifest's step says how many kernels run (see --help)")
	}
	if err := cfg.Validate(); err != nil {
		return f, fmt.Errorf("%v (see --help)", err)
	}
	if err := checkHostMode(fs, cfg); err != nil {
		return f, err
	}
	seen := map[string]string{}
	for _, out := range []struct{ flag, path string }{{"json", f.jsonPath}, {"trace-file", cfg.Telemetry.TraceFile},
		{"cpuprofile", f.profiles.cpu}, {"memprofile", f.profiles.allocs}, {"mutexprofile", f.profiles.mutex}, {"blockprofile", f.profiles.block}, {"exectrace", f.profiles.exec}} {
		if out.path == "-" && out.flag != "json" {
			return f, fmt.Errorf("lanedemo: --%s -: only --json writes to stdout; name a file (see --help)", out.flag)
		}
		if err := writable(out.path); err != nil {
			return f, fmt.Errorf("lanedemo: --%s %s: %v (see --help)", out.flag, out.path, err)
		}
		if out.path != "" && out.path != "-" {
			abs, _ := filepath.Abs(out.path)
			if other, dup := seen[abs]; dup {
				return f, fmt.Errorf("lanedemo: --%s and --%s both write %s; give each its own file (see --help)", other, out.flag, out.path)
			}
			seen[abs] = out.flag
		}
	}
	return f, nil
}

// parseArgs parses the command line's syntax (every flag known, every
// value of its type, no stray argument) and prints --help; parseFlags
// checks what the values mean.
func parseArgs(args []string, stdout io.Writer) (flags, *flag.FlagSet, error) {
	f := flags{cfg: demo.Defaults()}
	cfg := &f.cfg
	fs := flag.NewFlagSet("lanedemo", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&cfg.Device, "device", cfg.Device, "device backend: sim (the embedded simulated H200) or cuda (the real GPU; needs a build with the cuda tag)")
	fs.StringVar(&cfg.Clock, "clock", cfg.Clock, "sim clock: real (the cost model in wall-clock time, feels like a GPU), zero (no device cost; kernels still compute their bytes on the CPU) or none (no device cost and no bytes computed: the scheduler's own cost, as the report's process CPU per step)")
	fs.IntVar(&cfg.Devices, "devices", cfg.Devices, "devices to spread tenants over (sim devices, or GPUs 0..N-1 with --device cuda)")
	fs.IntVar(&cfg.Lanes, "lanes", cfg.Lanes, "lanes (streams) per device")
	fs.IntVar(&cfg.Tenants, "tenants", cfg.Tenants, "tenants, each with its own buffers and sizes; beyond what the lanes' caches hold (--capacity), tenants of one shape share executables by rebinding them")
	fs.IntVar(&cfg.EagerTenants, "eager-tenants", cfg.EagerTenants, "tenants that submit without replay keys, to show eager fallback and typed gaps")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "length of the measured phase (when --steps is 0)")
	fs.IntVar(&cfg.Steps, "steps", cfg.Steps, "steps per tenant instead of a duration (0: use --duration)")
	fs.IntVar(&cfg.Warmup, "warmup", cfg.Warmup, "warm-up steps per tenant while preparation is open (captures), before every lane is sealed")
	fs.StringVar(&cfg.Mode, "mode", cfg.Mode, "load shape: closed (--concurrency steps in flight per tenant) or open (--rate Poisson arrivals)")
	fs.IntVar(&cfg.Concurrency, "concurrency", cfg.Concurrency, "closed loop: steps in flight per tenant (the scheduler admits them all: MaxInFlightPerLane is raised to fit)")
	fs.StringVar(&cfg.NextStep, "next-step", cfg.NextStep, "closed loop: who submits a client's next step: lane (its last step's end does, on the lane's thread, through actors' SubmitNotify: the loop a hand-written driver program runs) or caller (a goroutine per client waits for each step's end, as a caller blocked on its receipt does)")
	fs.Float64Var(&cfg.Rate, "rate", cfg.Rate, "open loop: steps per second, all tenants together")
	fs.IntVar(&cfg.Kernels, "kernels", cfg.Kernels, "kernels per step (the compute chain that is captured and replayed)")
	fs.IntVar(&cfg.Capacity, "capacity", cfg.Capacity, "executables each lane's cache may hold (0: never capture)")
	fs.StringVar(&cfg.Transfers, "transfers", cfg.Transfers, "where a replaying tenant's staged input copy and readout copy run: graph (nodes of its replayed graph: one graph launch per step) or eager (their own driver calls around the graph launch, as a hand-written loop makes them)")
	fs.StringVar(&cfg.Timing, "timing", cfg.Timing, "device timing of each step: off (a fence without timing: the least work), completion (the step's device time), replay (plus each replayed segment's; the default), kernel (plus each eager command's) or verification (replay, and every replayed segment must carry its logical attribution)")
	fs.Float64Var(&cfg.Faults.Launch, "fault-launch", 0, "sim: probability a launch fails synchronously (the lane is quarantined)")
	fs.Float64Var(&cfg.Faults.Capture, "fault-capture", 0, "sim: probability a command is rejected during capture (eager fallback)")
	fs.Float64Var(&cfg.Faults.OOM, "fault-oom", 0, "sim: probability an allocation or instantiation runs out of memory")
	fs.Float64Var(&cfg.Faults.Sticky, "fault-sticky", 0, "sim: probability a launch poisons the whole device")
	fs.Float64Var(&cfg.Faults.Hang, "fault-hang", 0, "sim: probability a kernel never finishes")
	fs.StringVar(&f.jsonPath, "json", "", "also write the report as JSON ("+demo.ReportSchema+", docs/lanedemo-report.schema.json) to this file; - writes it alone to stdout, the table to stderr")
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
	fs.DurationVar(&cfg.Spin, "spin", 0, "how a lane waits for its fences (actors.Config.Spin): 0 spins only while a fence is due, from what the lane measured of its steps, within a quarter of the CPUs; a window such as 500us keeps polling and spinning for work that long after a fence ended or a run of its messages (a core per busy lane); negative (-1ns) never spins; default "+actors.GPUSpin.String()+" with --device cuda on 8 CPUs or more, else 0")
	fs.StringVar(&f.profiles.cpu, "cpuprofile", "", "write a Go CPU profile of the run to this file (go tool pprof)")
	fs.StringVar(&f.profiles.mutex, "mutexprofile", "", "write a Go mutex-contention profile of the run to this file")
	fs.StringVar(&f.profiles.allocs, "memprofile", "", "write a Go allocation profile of the run to this file")
	fs.StringVar(&f.profiles.block, "blockprofile", "", "write a Go blocking profile of the run to this file")
	fs.StringVar(&f.profiles.exec, "exectrace", "", "write a Go execution trace of the run to this file (go tool trace: which goroutine waits on which)")
	fs.IntVar(&cfg.StreamDepth, "stream-depth", 0, "submissions each lane keeps on its stream before the rest wait in its fair queue (0: the scheduler's default; -1: no bound, first come first served)")
	fs.StringVar(&cfg.Hostile, "hostile", "", "add a hostile tenant, on the first device, beside the others: flood (keeps its admission full), churn (a new replay key every step, preparation left open) or huge (one 100000-entry batch, refused as too large, then batches of the most commands admitted, 1024); the report lists every tenant's lane, p50/p99 and replay share")
	fs.StringVar(&cfg.KernelsFrom, "kernels-from", "", "serve steps of your own module instead of the built-in kernels: a directory holding "+demo.ManifestFile+" (the module file, its kernels' parameters, the tenants' buffers, the step's launches; see examples/customkernels) and the module; runs with --device cuda (the simulated device needs Go references, which a manifest cannot carry)")
	fs.DurationVar(&cfg.HangTimeout, "hang-timeout", 0, "how long a lane may go with submissions in flight and none ending before it is declared hung: they end indeterminate and the lane rebuilds (0: the scheduler's default, 10s)")
	fs.IntVar(&cfg.Recovery.MaxFailures, "rebuild-max-failures", 0, "failures within --rebuild-window after which a lane is out for good instead of rebuilt (0: the default, 5)")
	fs.DurationVar(&cfg.Recovery.Window, "rebuild-window", 0, "the window --rebuild-max-failures counts in (0: the default, 1m)")
	fs.DurationVar(&cfg.Recovery.Backoff, "rebuild-backoff", 0, "the wait before a failed lane's first rebuild, doubling after each failure in a row (0: the default, 1ms)")
	fs.DurationVar(&cfg.Recovery.MaxBackoff, "rebuild-max-backoff", 0, "the longest wait between rebuilds (0: the default, 1s)")
	fs.DurationVar(&cfg.WarmupTimeout, "warmup-timeout", 0, "the longest the warm-up may take; a warm-up that does not finish in time ends the run early, with its report (0: a minute)")
	noRebuild := fs.Bool("no-rebuild", false, "take a failed lane out for good at once instead of rebuilding it")
	fs.DurationVar(&cfg.Soak, "soak", 0, "soak: run this long, sampling goroutines, heap and device memory, and fail unless they stay flat and every submission ends once")
	hostFlags(fs, cfg)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			fmt.Fprintln(stdout, usageHead)
			fs.PrintDefaults()
			fmt.Fprintln(stdout, usageTail)
			f.help = true
			return f, fs, nil
		}
		// The flag package names flags with one dash; lanedemo's help and
		// README use two.
		msg := strings.NewReplacer("flag -", "flag --", "defined: -", "defined: --").Replace(err.Error())
		return f, fs, fmt.Errorf("lanedemo: %s (see --help)", msg)
	}
	if fs.NArg() > 0 {
		return f, fs, fmt.Errorf("lanedemo: unexpected argument %q (see --help)", fs.Arg(0))
	}
	cfg.Recovery.Disabled = *noRebuild
	return f, fs, nil
}

// writable checks, before anything runs, that the run will be able to
// write path (an output file), without creating it: an existing file must
// be writable and no directory, a new one's directory must exist and be
// writable. "" and "-" (stdout) need nothing.
func writable(path string) error {
	if path == "" || path == "-" {
		return nil
	}
	if fi, err := os.Stat(path); err == nil {
		if fi.IsDir() {
			return errors.New("is a directory; name a file")
		}
		if unix.Access(path, unix.W_OK) != nil {
			return errors.New("the file is not writable")
		}
		return nil
	}
	dir := filepath.Dir(path)
	fi, err := os.Stat(dir)
	switch {
	case err != nil:
		return fmt.Errorf("its directory %s does not exist", dir)
	case !fi.IsDir():
		return fmt.Errorf("%s is not a directory", dir)
	case unix.Access(dir, unix.W_OK) != nil:
		return fmt.Errorf("its directory %s is not writable", dir)
	}
	return nil
}

const usageHead = `usage: lanedemo [flags]

Drives a scheduler of lanes with multi-tenant decode steps and reports replay,
latency and failures. A run warms up (preparation open: the first steps are
captured), seals every lane, runs the measured phase (--duration or --steps),
then drains what is still in flight; rates cover the measured phase alone.
Draining waits for every submission in flight to end (a hung one ends at
--hang-timeout, indeterminate). SIGINT or SIGTERM stops the run and still
reports (after the draining); a second one exits at once, without a report.

Clocks of the simulated device (--clock): real models each command's cost in
wall-clock time (it feels like a GPU); zero costs nothing but still computes
every byte on the CPU; none computes no byte either, so the report's process
CPU per step is the scheduler's own cost.

flags:`

const usageTail = `
exit status:
  0  the run completed and passed its checks
  1  the run failed its own checks (a submission that never ended, a soak
     that did not stay flat) or could not start or finish (the error says)
  2  bad flags (the message names the flag); nothing ran
  3  telemetry not delivered (spans dropped or exports failed)
  4  the run ended early: every lane out for good, or the warm-up failed
     (the report says why)
  130, 143  stopped by SIGINT or SIGTERM (after the report)`

// hostFlags are the --host-per-gpu mode's flags.
func hostFlags(fs *flag.FlagSet, cfg *demo.Config) {
	fs.BoolVar(&cfg.Hosts.PerGPU, "host-per-gpu", false, "run a lane host process per device (cmd/lanehost) behind a front, so a GPU's sticky fault costs only its own process; each tenant's step is --kernels replayed launches on its own buffer, --concurrency in flight, and the report is per host (its --json is that report: mode, hosts, total, round_trip_us; not "+demo.ReportSchema+"); the profile flags cover the front's process; on a machine of 4 CPUs or fewer the front and each host take half the CPUs each (GOMAXPROCS, unless set in the environment; not with --in-process)")
	fs.BoolVar(&cfg.Hosts.InProcess, "in-process", false, "with --host-per-gpu: run the very same loop on one in-process scheduler over every device instead (the same work, for the ratio)")
	fs.Func("data-plane", "with --host-per-gpu: true (default): a host on this machine and the front exchange steps, receipts, uploads and read-backs through shared memory (the same-host data plane); false: all through protoactor-go's remote (gRPC), to compare", func(v string) error {
		on, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("%q: give true or false", v)
		}
		cfg.Hosts.NoDataPlane = !on
		return nil
	})
	fs.StringVar(&cfg.Hosts.Lanehost, "lanehost", "", "with --host-per-gpu: the lanehost binary (default: next to this executable, then $PATH)")
	fs.Func("lanehost-args", "with --host-per-gpu: more flags for every lanehost, space-separated (e.g. \"--heartbeat 50ms --cpuprofile /tmp/host-%p.prof\")", func(v string) error {
		cfg.Hosts.Args = strings.Fields(v)
		return nil
	})
	fs.Func("ordinals", "with --device cuda: the GPU ordinals of the devices, comma-separated, one per --devices (default 0,1,...); a repeated ordinal puts two devices on one GPU", func(v string) error {
		cfg.Ordinals = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 0 || n > 1024 {
				return fmt.Errorf("%q is not a GPU ordinal (0 to 1024)", f)
			}
			cfg.Ordinals = append(cfg.Ordinals, n)
		}
		return nil
	})
	fs.BoolVar(&cfg.Hosts.Cluster, "cluster", false, "the --host-per-gpu loop with its lane hosts (one per --devices) members of a cluster on loopback (the automanaged provider), which the front finds there rather than launching them; with --join-at, --leave-at and --kill-at the fleet changes under load, and the report says when the front saw each change (implies --host-per-gpu)")
	fs.DurationVar(&cfg.Hosts.JoinAt, "join-at", 0, "with --cluster: start one more lane host this far into the measured phase; it joins the cluster and takes new tenants (the ones that move)")
	fs.DurationVar(&cfg.Hosts.LeaveAt, "leave-at", 0, "with --cluster: ask host0 to leave well (SIGTERM) this far into the measured phase: it finishes what it has, its tenants move")
	fs.DurationVar(&cfg.Hosts.KillAt, "kill-at", 0, "with --cluster: kill host1 (host0 with --devices 1) this far into the measured phase: its steps in flight end indeterminate, its tenants move")
	fs.IntVar(&cfg.Hosts.StepUpload, "step-upload", 0, "with --host-per-gpu: each step first uploads this many bytes (up to 64 MiB) into a buffer of the tenant's, sent with every step as the encoded step's input (remote.Input; a lane host on this machine takes 4 KiB or more through its data plane's upload area; see lanehost --upload-area); 0: none")
	fs.DurationVar(&cfg.Hosts.FaultAt, "fault-host-at", 0, "with --host-per-gpu: submit an out-of-bounds kernel as the first tenant this far into the measured phase: its device is poisoned (0: none)")
}

// hostModeFlags are the flags --host-per-gpu reads.
var hostModeFlags = map[string]bool{"device": true, "ordinals": true, "devices": true, "lanes": true, "tenants": true, "kernels": true, "duration": true,
	"concurrency": true, "warmup": true, "spin": true, "clock": true, "seed": true, "json": true, "quiet": true,
	"host-per-gpu": true, "in-process": true, "data-plane": true, "lanehost": true, "fault-host-at": true, "lanehost-args": true, "step-upload": true, "cpuprofile": true, "exectrace": true,
	"memprofile": true, "mutexprofile": true, "blockprofile": true, "cluster": true, "join-at": true, "leave-at": true, "kill-at": true}

// clusterOnlyFlags need --cluster.
var clusterOnlyFlags = map[string]bool{"join-at": true, "leave-at": true, "kill-at": true}

// checkHostMode refuses a flag --host-per-gpu does not read, and its own
// flags without it.
func checkHostMode(fs *flag.FlagSet, cfg *demo.Config) error {
	if cfg.Hosts.Cluster {
		cfg.Hosts.PerGPU = true
	}
	var err error
	fs.Visit(func(fl *flag.Flag) {
		switch {
		case err != nil:
		case cfg.Hosts.PerGPU && !hostModeFlags[fl.Name]:
			err = fmt.Errorf("lanedemo: --%s does not apply with --host-per-gpu, which reads only --device, --devices, --ordinals, --lanes, --tenants, --kernels, --duration, --concurrency, --warmup, --spin, --clock, --seed, --json, --quiet, --in-process, --data-plane, --lanehost, --fault-host-at, --lanehost-args, --step-upload, --cluster, --join-at, --leave-at, --kill-at and the profiles (--cpuprofile, --memprofile, --mutexprofile, --blockprofile, --exectrace; see --help)", fl.Name)
		case !cfg.Hosts.Cluster && clusterOnlyFlags[fl.Name]:
			err = fmt.Errorf("lanedemo: --%s needs --cluster (see --help)", fl.Name)
		case cfg.Hosts.Cluster && fl.Name == "in-process":
			err = fmt.Errorf("lanedemo: --in-process runs no hosts: give it without --cluster, with --host-per-gpu (see --help)")
		case !cfg.Hosts.PerGPU && (fl.Name == "in-process" || fl.Name == "data-plane" || fl.Name == "lanehost" || fl.Name == "fault-host-at" || fl.Name == "lanehost-args" || fl.Name == "step-upload"):
			err = fmt.Errorf("lanedemo: --%s needs --host-per-gpu (see --help)", fl.Name)
		}
	})
	if err != nil {
		return err
	}
	h := cfg.Hosts
	switch {
	case cfg.Ordinals != nil && len(cfg.Ordinals) != cfg.Devices:
		return fmt.Errorf("lanedemo: --ordinals names %d GPUs for --devices %d; give one per device (see --help)", len(cfg.Ordinals), cfg.Devices)
	case h.StepUpload < 0 || h.StepUpload > 64<<20:
		return fmt.Errorf("lanedemo: --step-upload %d: give 0 to %d bytes (see --help)", h.StepUpload, 64<<20)
	case h.FaultAt < 0 || h.PerGPU && h.FaultAt >= cfg.Duration:
		return fmt.Errorf("lanedemo: --fault-host-at %v: give a time within --duration %v (see --help)", h.FaultAt, cfg.Duration)
	case h.JoinAt < 0 || h.JoinAt >= cfg.Duration && h.JoinAt > 0, h.LeaveAt < 0 || h.LeaveAt >= cfg.Duration && h.LeaveAt > 0, h.KillAt < 0 || h.KillAt >= cfg.Duration && h.KillAt > 0:
		return fmt.Errorf("lanedemo: --join-at %v, --leave-at %v, --kill-at %v: give each a time within --duration %v, or 0 for none (see --help)", h.JoinAt, h.LeaveAt, h.KillAt, cfg.Duration)
	case h.Cluster && h.LeaveAt > 0 && h.KillAt > 0 && cfg.Devices < 2:
		return fmt.Errorf("lanedemo: --leave-at and --kill-at with --devices 1 would take the one host twice: give --devices 2 or more (see --help)")
	case h.PerGPU && !h.InProcess && h.Lanehost != "" && !isExecutable(h.Lanehost):
		return fmt.Errorf("lanedemo: --lanehost %s: not an executable file (build it: go build -o bin/lanehost ./cmd/lanehost) (see --help)", h.Lanehost)
	case h.PerGPU && cfg.Devices > 16:
		return fmt.Errorf("lanedemo: --devices %d with --host-per-gpu: at most 16 host processes (see --help)", cfg.Devices)
	}
	return nil
}

// isExecutable reports whether path is a regular file the process may run.
func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && unix.Access(path, unix.X_OK) == nil
}
