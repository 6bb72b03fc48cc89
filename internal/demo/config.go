// Package demo is lanedemo's engine: a multi-tenant load generator that
// drives an [actors.Scheduler] with decode-like steps and reports what the
// scheduler did and how well. cmd/lanedemo is its command line.
package demo

import (
	"errors"
	"fmt"
	"time"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/lanes"
)

// Config is one run. The zero value is not runnable; Defaults gives the
// values lanedemo starts from.
type Config struct {
	Device       string        // "sim" or "cuda"
	Clock        string        // sim clock: "real" or "zero"
	Devices      int           // sim devices
	Lanes        int           // lanes per device
	Tenants      int           // tenants, spread over the devices
	EagerTenants int           // tenants that submit without replay keys
	Duration     time.Duration // measured phase (when Steps is 0)
	Steps        int           // steps per tenant instead of a duration
	Warmup       int           // warm-up steps per tenant before sealing
	Mode         string        // "closed" or "open"
	Concurrency  int           // closed loop: steps in flight per tenant
	// NextStep is who submits a closed-loop client's next step:
	// NextStepLane (the default: the previous step's end, on the lane's
	// thread) or NextStepCaller (a goroutine that waited for that end).
	NextStep string
	Rate     float64 // open loop: steps per second in all, Poisson arrivals
	Kernels  int     // kernels per step
	Capacity int     // executables per lane
	Timing   string  // off, completion, replay, kernel, verification
	// Transfers is where a replaying tenant's staged input copy and readout
	// copy run: "graph" (nodes of its replayed graph, so a step is one
	// graph launch) or "eager" (their own driver calls around the graph
	// launch, as a hand-written loop makes them).
	Transfers string
	Faults    FaultRates // sim fault injection
	Seed      int64
	Telemetry TelemetryConfig
	// Soak, when set, runs the load this long instead of Duration, samples
	// goroutines, heap and device memory, and fails the run unless they
	// stay flat.
	Soak time.Duration
	// Spin is the lanes' spin window (actors.Config.Spin): 0 spins only
	// while a fence is due, negative never.
	Spin time.Duration
	// StreamDepth is the lanes' stream depth (actors.Config.StreamDepth);
	// 0 takes the scheduler's default, negative leaves it unbounded.
	StreamDepth int
	// Hostile adds a tenant that tries to take the others' share: "flood",
	// "churn" or "huge" (hostile.go); "" adds none.
	Hostile string
	// HangTimeout is how long a lane may go without a submission ending
	// before it is declared hung (actors.Config.HangTimeout; 0: its
	// default), and Recovery the lanes' rebuild policy after failures
	// (actors.Config.Recovery; zero fields: its defaults).
	HangTimeout time.Duration
	Recovery    actors.Recovery
	// WarmupTimeout bounds the warm-up (0: a minute); a warm-up that does
	// not finish in time ends the run early.
	WarmupTimeout time.Duration
	// KernelsFrom, when set, is a directory whose lanedemo.json names a
	// module of one's own and the step to build from its kernels
	// (manifest.go); Kernels is then the step's launches.
	KernelsFrom string
	// Hosts is the --host-per-gpu mode (hosts.go): a lane host process per
	// device behind a front, or the same loop in process.
	Hosts HostsConfig
	// Ordinals are the GPU ordinals of the devices, one per device (with
	// --device cuda); nil: 0 .. Devices-1. Two devices on one ordinal share
	// its GPU (and, in one process, its context).
	Ordinals []int
}

// Ordinal is the GPU ordinal of device i.
func (c Config) Ordinal(i int) int {
	if i < len(c.Ordinals) {
		return c.Ordinals[i]
	}
	return i
}

// FaultRates are per-operation probabilities of each injected fault.
type FaultRates struct {
	Launch  float64 `json:"launch"`
	Capture float64 `json:"capture"`
	OOM     float64 `json:"oom"`
	Sticky  float64 `json:"sticky"`
	Hang    float64 `json:"hang"`
}

func (f FaultRates) any() bool { return f.Launch+f.Capture+f.OOM+f.Sticky+f.Hang > 0 }

// Defaults is a run that shows the scheduler in about seven seconds (six of
// load) on the simulated device.
func Defaults() Config {
	return Config{Device: "sim", Clock: "real", Devices: 1, Lanes: 4, Tenants: 8, EagerTenants: 2,
		Duration: 6 * time.Second, Warmup: 4, Mode: "closed", NextStep: NextStepLane, Concurrency: 2, Rate: 2000, Kernels: 16,
		Capacity: 64, Timing: "replay", Transfers: "graph", Seed: 1, Telemetry: TelemetryConfig{OTLPProtocol: "grpc", SuccessRatio: 0.1}}
}

// maxWarmup bounds the warm-up steps per tenant, and maxClients the
// closed loop's clients (tenants times concurrency), each of which has
// pinned staging of its own.
const (
	maxWarmup  = 1000
	maxClients = 65536
)

// warmupTimeout is the warm-up's bound.
func (c Config) warmupTimeout() time.Duration {
	if c.WarmupTimeout <= 0 {
		return time.Minute
	}
	return c.WarmupTimeout
}

// ErrConfig marks a bad configuration (lanedemo exits 2 on it).
var ErrConfig = errors.New("lanedemo: bad configuration")

var timings = map[string]lanes.TimingMode{"off": lanes.TimingOff, "completion": lanes.TimingCompletion,
	"replay": lanes.TimingReplay, "kernel": lanes.TimingKernel, "verification": lanes.TimingVerification}

// Validate checks the configuration and says what to fix.
func (c Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...)
	}
	switch {
	case c.Device != "sim" && c.Device != "cuda":
		return bad("--device %q: use sim or cuda", c.Device)
	case c.Clock != "real" && c.Clock != "zero" && c.Clock != "none":
		return bad("--clock %q: use real, zero or none", c.Clock)
	case c.Devices < 1 || c.Devices > 64:
		return bad("--devices %d: use 1 to 64", c.Devices)
	case c.Lanes < 1 || c.Lanes > 256:
		return bad("--lanes %d: use 1 to 256", c.Lanes)
	case c.Tenants < 1 || c.Tenants > 10000:
		return bad("--tenants %d: use 1 to 10000", c.Tenants)
	case c.EagerTenants < 0 || c.EagerTenants > c.Tenants:
		return bad("--eager-tenants %d: use 0 to --tenants (%d)", c.EagerTenants, c.Tenants)
	case c.Steps < 0 || (c.Steps == 0 && c.Duration <= 0):
		return bad("give a positive --duration or --steps")
	case c.Warmup < 0 || c.Warmup > maxWarmup:
		return bad("--warmup %d: use 0 to %d steps per tenant", c.Warmup, maxWarmup)
	case c.Mode == "closed" && c.Tenants*c.Concurrency > maxClients:
		return bad("--tenants %d with --concurrency %d is %d closed-loop clients, each with pinned staging of its own; use at most %d in all", c.Tenants, c.Concurrency, c.Tenants*c.Concurrency, maxClients)
	case c.Duration < 0:
		return bad("--duration %v: give a positive duration", c.Duration)
	case c.WarmupTimeout < 0:
		return bad("--warmup-timeout %v: give 0 (a minute) or a positive duration", c.WarmupTimeout)
	case c.StreamDepth < -1:
		return bad("--stream-depth %d: give -1 (no bound), 0 (the default) or more", c.StreamDepth)
	case c.Recovery.Backoff > 0 && c.Recovery.MaxBackoff > 0 && c.Recovery.Backoff > c.Recovery.MaxBackoff:
		return bad("--rebuild-backoff %v is above --rebuild-max-backoff %v", c.Recovery.Backoff, c.Recovery.MaxBackoff)
	case c.HangTimeout < 0:
		return bad("--hang-timeout %v: give 0 (the scheduler's default, 10s) or a positive duration", c.HangTimeout)
	case c.Recovery.MaxFailures < 0 || c.Recovery.Window < 0 || c.Recovery.Backoff < 0 || c.Recovery.MaxBackoff < 0:
		return bad("--rebuild-max-failures, --rebuild-window, --rebuild-backoff and --rebuild-max-backoff take 0 (the default) or positive values")
	case c.NextStep != "" && c.NextStep != NextStepLane && c.NextStep != NextStepCaller:
		return bad("--next-step %q: use lane (the lane submits a client's next step as its last one ends) or caller (a goroutine per client waits for each end)", c.NextStep)
	case c.Mode != "closed" && c.Mode != "open":
		return bad("--mode %q: use closed or open", c.Mode)
	case c.Mode == "closed" && (c.Concurrency < 1 || c.Concurrency > 1024):
		return bad("--concurrency %d: use 1 to 1024", c.Concurrency)
	case !(c.Rate > 0 && c.Rate <= 1e7): // NaN too, whatever the mode (the report records it)
		return bad("--rate %v: give a positive rate of steps per second, at most 1e7", c.Rate)
	case c.Kernels < 1 || c.Kernels > 4096:
		return bad("--kernels %d: use 1 to 4096", c.Kernels)
	case c.Spin > time.Second:
		return bad("--spin %v: give 0 (spin only while a fence is due), a negative duration (never spin) or a window up to 1s; a spinning lane holds a core while it is busy", c.Spin)
	case c.Soak < 0:
		return bad("--soak %v: give a positive duration", c.Soak)
	case c.Capacity < 0:
		return bad("--capacity %d: use 0 (never capture) or more", c.Capacity)
	}
	if err := checkHostile(c.Hostile); err != nil {
		return err
	}
	if c.KernelsFrom != "" {
		if _, err := loadWorkload(c.KernelsFrom); err != nil {
			return err
		}
	}
	if c.Transfers != "graph" && c.Transfers != "eager" {
		return bad("--transfers %q: use graph or eager", c.Transfers)
	}
	if _, ok := timings[c.Timing]; !ok {
		return bad("--timing %q: use off, completion, replay, kernel or verification", c.Timing)
	}
	for name, r := range map[string]float64{"launch": c.Faults.Launch, "capture": c.Faults.Capture, "oom": c.Faults.OOM, "sticky": c.Faults.Sticky, "hang": c.Faults.Hang} {
		if !(r >= 0 && r <= 1) { // NaN too
			return bad("--fault-%s %v: a rate is between 0 and 1", name, r)
		}
	}
	if err := c.Telemetry.validate(); err != nil {
		return err
	}
	if c.Device == "cuda" && c.Faults.any() {
		return bad("fault injection needs --device sim; the GPU's own faults are in the conformance suite")
	}
	return nil
}

// Backend opens the devices of a non-sim backend ("cuda" when built with
// the cuda tag).
type Backend func(cfg Config) ([]cuda.Device, error)

var backends = map[string]Backend{}

// RegisterBackend makes a device backend available to --device.
func RegisterBackend(name string, b Backend) { backends[name] = b }
