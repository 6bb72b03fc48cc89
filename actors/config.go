// Config: every knob of a scheduler, and the defaults that fill in the
// zero value.

package actors

import (
	"fmt"
	"log/slog"
	"math"
	"runtime"
	"time"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/internal/backend"
	laneerr "github.com/lanesched/lanes/internal/laneerr"

	lanecore "github.com/lanesched/lanes/internal/lanecore"
	"github.com/lanesched/lanes/telemetry"
)

// Config configures a scheduler. Devices is required; the zero value of
// every other field is a sensible default.
type Config struct {
	Devices        []cuda.Device
	LanesPerDevice int    // default 1
	CacheCapacity  int    // executables per lane; default 64; negative: never capture
	Runtime        string // runtime fingerprint of programs; default "lanes/<backend>"
	// Admission and fair shares (see the package documentation, "Fair
	// shares"): submissions admitted and not yet ended. Beyond these,
	// Submit answers ErrOverloaded (retryable) instead of queueing without
	// bound. A lane admits anyone below MaxInFlightPerLane; beyond it, up
	// to twice that, only tenants under their fair share of the lane (its
	// limit split by weight among the tenants with work on it), and up to
	// three times that a tenant with nothing in flight: so it is the most
	// one tenant fills a lane with, not a cap on the lane, which holds up
	// to 3 x MaxInFlightPerLane submissions from many tenants. A tenant
	// stays on its lane while it has work in flight (that is how its order
	// holds), so MaxInFlightPerTenant is at most MaxInFlightPerLane.
	MaxInFlightPerLane   int // default 256
	MaxInFlightPerTenant int // default and most: MaxInFlightPerLane
	// StreamDepth is how many of one tenant's submissions a lane keeps
	// enqueued on its stream while other tenants use the lane too (and the
	// stream, unless empty, less than one batch's worth of commands,
	// MaxBatchEntries); the batches it receives beyond them wait in its
	// fair queue, served by deficit round robin over its tenants. So a
	// light tenant's batch waits behind at most StreamDepth of a flooding
	// tenant's, while many tenants with a batch or two each keep the
	// stream as full as they like, and a tenant alone on its lane (no other
	// tenant's work for 50 ms, nor among the last 64 batches the lane
	// received) is not held back. Default 4; negative: no bound (first
	// come, first served). A deeper stream lets a flooding tenant's batches
	// sit ahead of a light tenant's; a shallower one can leave the GPU idle
	// between a lone tenant's steps (docs/tuning.md; figures in
	// docs/measurements/2026-12-01-fair-shares.txt).
	StreamDepth int
	// Quantum is the credit, in batch entries, each round of a lane's fair
	// queue gives a tenant per unit of weight. Default 16.
	Quantum int
	// Weight is a tenant's weight (1 to MaxWeight; what it returns is
	// clamped to that range) in admission shares and fair queues, asked
	// once when the scheduler first sees the tenant (and again after it is
	// forgotten). Nil: every tenant weighs 1.
	Weight func(tenant string) int
	// MaxBatchEntries and MaxBatchBytes bound one batch: its entries, and
	// the host bytes its uploads carry. A larger batch is refused, not
	// submitted, with a *BatchTooLargeError that says how to split it.
	// Entries count commands: a program invocation counts its segment's,
	// a patch counts one (and its bytes). A lane enqueues a batch whole, so
	// the entries bound is also what one tenant's batch can make another
	// tenant of its lane wait: one such batch, up to its host enqueue
	// time plus its device time. Staged replays' inputs count
	// against MaxBatchBytes. Defaults (also for zero or negative values)
	// 1024 commands and 64 MiB.
	MaxBatchEntries int
	MaxBatchBytes   int64
	// MaxProgramsPerTenant and MaxPrograms bound the program names
	// (lanes.Batch.Program) the scheduler keeps reserved: per tenant, and in
	// all (a forgotten tenant's names stay reserved while lanes may hold
	// their executables). A batch declaring a new name beyond them is
	// refused with ErrProgramLimit. Defaults 64 and 16384.
	MaxProgramsPerTenant int
	MaxPrograms          int
	// TenantIdle is how long a tenant with nothing in flight, no owned
	// buffers, no registered programs (unless reserved program names reach
	// nine tenths of MaxPrograms), no suspension and no recent faults is
	// kept before the scheduler forgets it on its own (as Forget does).
	// Default 1m; negative: never. The scheduler sweeps every TenantIdle/2
	// (10 ms to 10 s; every 10 s when negative, for the ownership of freed
	// buffers), so a tenant goes between TenantIdle and 1.5 x TenantIdle
	// (TenantIdle and 10 ms, below 20 ms) after its last work ended, and a freed buffer's ownership row at the
	// first sweep after the free.
	TenantIdle time.Duration
	// CacheBytes bounds each lane's executable cache by the host memory
	// its executables hold (the uploads they captured), as CacheCapacity
	// bounds their number. Default 256 MiB.
	CacheBytes int64
	// CacheDeviceBytes bounds each lane's executable cache by the device
	// memory its executables hold (as the device measures it), with the same
	// equal shares per tenant as CacheCapacity and CacheBytes. Default
	// (0 or negative) 256 MiB; LaneStatus.Counters.ExecutableDeviceBytes and
	// LaneStatus.TenantDeviceBytes report it.
	CacheDeviceBytes int64
	// WarmRebuild bounds the time a lane rebuilt after a hang spends
	// capturing again, most replayed first, what the lane it replaces
	// replayed, before it takes traffic (docs/replays.md, "A lane that
	// comes back warm"). Default 250 ms; negative: a rebuilt lane starts
	// cold.
	WarmRebuild time.Duration
	// PinBytes bounds the bytes of callers' input buffers each lane keeps
	// pinned where they are, for staged replays that pass the same buffers
	// again: 0, 256 MiB; negative, none (every input is copied into its
	// staging).
	PinBytes int64
	// Libraries are set up on every lane when it starts and after each
	// rebuild: a cuBLAS handle and workspace per lane, say. A call of a
	// library not listed here is set up on a lane before the first
	// submission that names it.
	Libraries []*cuda.Library
	// Recovery is what happens to a lane whose stream failed.
	Recovery Recovery
	// Suspension is what happens to a tenant whose submissions keep
	// failing lanes.
	Suspension Suspension
	// Fence polling, when nothing learned says when a fence is due (see
	// Spin): QuickPolls polls through the mailbox right after a
	// submission, then timers back off from PollMin to PollMax. PollMax
	// also bounds a parked lane's wait for a fence that is due later.
	QuickPolls       int           // default 4
	PollMin, PollMax time.Duration // default 20µs, 2ms
	// Throughput is how many messages a lane's mailbox run takes before
	// it yields (runtime.Gosched). Default 1<<30: in practice never. A
	// lane's run holds its thread locked, so a yield hands the thread's P
	// to another thread and takes it back (two thread wakes,
	// a quarter of a chained serving loop's CPU per step on 2 cores),
	// while Go's preemption keeps other goroutines running without it.
	Throughput int
	// Spin is how a lane's thread waits for its fences and its next work.
	//
	// 0, the default: the lane learns how long its submissions hold the
	// stream and looks at its oldest fence when it is due, parked on a
	// timer until then; from a millisecond and 50 µs before it (a parked
	// Go timer under a millisecond may fire a millisecond late), it spins
	// (polling the fence every couple of microseconds and running new work
	// as it arrives) until the fence ends or half a step past its due
	// time, so a step's end is seen within microseconds. Spinning takes a
	// place among the process's spinning lanes, a quarter of its CPUs (none
	// on fewer than 4: there a lane polls at the due time on its timer); a
	// lane with no place polls on its timer. An idle lane, or one whose
	// fence is due more than a millisecond later, costs no core.
	//
	// Above 0: a fixed window. The thread keeps spinning for Spin after a
	// fence ended (or work began on an idle lane), and after each batch of
	// messages it ran, whatever is due: a short step's end is seen within
	// microseconds and the next step needs no thread hand-off to start
	// (a lane host's data plane brings the next step within half a
	// millisecond), at the cost of a core per busy lane, and of the window
	// after the lane goes idle. GPUSpin suits a GPU serving loop on a host
	// of 8 CPUs or more. Start refuses more than a second.
	//
	// Below 0: never spin; timed polls only (QuickPolls, then PollMin to
	// PollMax), the least CPU and the latest ends.
	Spin time.Duration
	// HangTimeout is how long a lane may go without any of its submissions
	// ending, while it has some in flight or waits on its stream, before
	// it is declared hung (a kernel that never finishes): its submissions
	// end indeterminate, the stream is abandoned and the lane recovers on
	// a fresh one. Every wait on the device honours it: polls,
	// Synchronize, staged replays and Stop's drain. Default 10s; negative
	// disables the watchdog.
	HangTimeout time.Duration
	// StrictOwnership rejects a batch that names a buffer no tenant owns
	// and that is not shared (Scheduler.Own, Scheduler.Share); without it
	// only buffers owned by another tenant are rejected.
	StrictOwnership bool
	// Scope, when set, parts tenants into scopes that never learn of each
	// other's buffers (a lane host gives each front's tenants a scope of
	// their own): a handle that is neither the tenant's, nor shared, nor
	// another tenant's of its scope is refused as a buffer this device
	// never handed out (errors.Is cuda.ErrStaleHandle), whoever holds it,
	// so that probing handles tells nothing of another scope.
	Scope func(tenant string) string
	// ThreadCheck records the OS thread of every Receive
	// (LaneStatus.Threads).
	ThreadCheck bool
	// Logger receives protoactor's logs and the scheduler's own warnings; nil
	// discards them.
	Logger *slog.Logger
	// Telemetry receives every ended submission and quarantine; nil
	// records nothing.
	Telemetry *telemetry.Recorder
}

// MaxWeight is the largest tenant weight (Config.Weight).
const MaxWeight = 1000

// weight is a tenant's weight by Config.Weight, within 1 to MaxWeight.
// A Weight that panics gives weight 1 (the panic is logged, and does not
// reach Submit).
func (s *Scheduler) weight(tenant string) (w int) {
	if s.cfg.Weight == nil {
		return 1
	}
	defer func() {
		if p := recover(); p != nil {
			w = 1
			if s.cfg.Logger != nil {
				s.cfg.Logger.Error("actors: Config.Weight panicked; the tenant weighs 1", "tenant", tenant, "panic", fmt.Sprint(p))
			}
		}
	}()
	return min(max(s.cfg.Weight(tenant), 1), MaxWeight)
}

// Recovery is the policy for a lane whose stream failed (a non-sticky
// device error, a provider panic, a hung kernel): the lane leaves routing,
// ends what it had in flight, and starts over on a fresh stream after a
// backoff that doubles with each failure in a row. Only a lane that
// keeps failing is taken out for good: MaxFailures failures inside Window
// with no submission succeeding between them, where the failures one
// tenant's submissions caused count once (that tenant is the one to stop:
// see Suspension). A sticky error is the device's, not the lane's: a
// poisoned device's lanes never come back. The lane keeps its cache,
// programs, preparation and counters across a recovery, except after a
// hang: a hung stream's executables cannot be launched again, so the lane
// starts with a fresh cache, open for preparation as at Start (an earlier
// Seal does not carry over: seal it again if capture must stay closed).
// The zero value recovers with the defaults.
type Recovery struct {
	Disabled    bool          // take a failed lane out for good at once
	Backoff     time.Duration // before the first rebuild; default 1ms
	MaxBackoff  time.Duration // the longest wait; default 1s
	Window      time.Duration // default 1m
	MaxFailures int           // default 5
}

// backoff is the wait before rebuilding after n failures in a row.
func (r Recovery) backoff(n int) time.Duration {
	d := r.Backoff << min(n-1, 30)
	if d <= 0 || d > r.MaxBackoff {
		return r.MaxBackoff
	}
	return d
}

// Suspension is the policy for a tenant whose submissions keep failing
// lanes (stream or device faults attributed to its submissions, see the
// package documentation). A tenant is suspended when, inside Window, After
// of its submissions failed lanes, its fault rate (faults per launch: graph
// launches and eager kernel launches) is at least Ratio times the
// other tenants' over the same time, and that many faults would be
// vanishingly unlikely (under one in a million) at the others' rate. So
// faults spread over tenants alike (a flaky device) suspend no one, even
// when chance clusters a few, and a tenant whose work faults the device is
// stopped before it costs others their lanes. Suspensions last For, doubling with each repeat inside
// Window up to Max; only the suspended tenant is refused. The zero value
// suspends with the defaults.
type Suspension struct {
	Disabled bool
	After    int           // default 3
	Window   time.Duration // default 1m
	Ratio    float64       // default 10
	For      time.Duration // default 1s
	Max      time.Duration // default 1m
}

func (c *Config) defaults() error {
	if len(c.Devices) == 0 {
		return laneerr.Wrap("start", true, fmt.Errorf("%w: Config.Devices is empty; give at least one device", ErrInvalidArgument))
	}
	for i, d := range c.Devices {
		if d == nil {
			return laneerr.Wrap("start", true, fmt.Errorf("%w: Config.Devices[%d] is nil", ErrInvalidArgument, i))
		}
		if _, err := backend.Of(d); err != nil {
			return laneerr.Wrap("start", true, fmt.Errorf("%w: Config.Devices[%d] is %v", ErrInvalidArgument, i, err))
		}
	}
	if err := checkLibraries(c.Libraries); err != nil {
		return laneerr.Wrap("start", true, err)
	}
	if c.LanesPerDevice > MaxLanesPerDevice {
		// Each lane is a goroutine that locks an OS thread while it runs
		// and a stream: thousands of them exhaust the device's streams
		// and, spinning or blocked in the driver, the runtime's threads.
		return laneerr.Wrap("start", true, fmt.Errorf("%w: Config.LanesPerDevice %d: give 1 to %d (MaxLanesPerDevice: each lane holds an OS thread and a stream; a device gains little past a few dozen streams)", ErrInvalidArgument, c.LanesPerDevice, MaxLanesPerDevice))
	}
	if c.Spin > maxSpin {
		return laneerr.Wrap("start", true, fmt.Errorf("%w: Config.Spin %v: a spinning lane holds a core while it is busy; use 0 (the default: spin only while a fence is due), NeverSpin, or a window up to %v (GPUSpin, 500 µs, suits GPU serving steps)", ErrInvalidArgument, c.Spin, maxSpin))
	}
	c.admissionDefaults()
	c.laneDefaults()
	c.Recovery.defaults()
	c.Suspension.defaults()
	return nil
}

// MaxLanesPerDevice is the most lanes a device may have
// (Config.LanesPerDevice; lanehost's --lanes).
const MaxLanesPerDevice = 64

// GPUSpin is a spin window (Config.Spin) for lanes that serve short GPU
// steps: lanedemo's and lanehost's default on a GPU. A lane whose steps
// come and go through a lane host's data plane sees its next step within
// half a millisecond of its last, so a lane that spins this long takes it
// without parking, and parking costs a thread wake per step
// (docs/measurements/2026-12-02-same-host-data-plane.txt).
const GPUSpin = 500 * time.Microsecond

// NeverSpin is a Config.Spin that never spins: timed polls only.
const NeverSpin time.Duration = -1

// DefaultGPUSpin is the spin window a GPU process's lanes get when none is
// given (lanedemo's and lanehost's): GPUSpin on a machine of 8 CPUs or
// more, 0 on fewer (spin only while a fence is due, within a quarter of
// the CPUs), where a window would take a core the rest of the process
// needs.
func DefaultGPUSpin() time.Duration {
	if runtime.NumCPU() >= 8 {
		return GPUSpin
	}
	return 0
}

// maxSpin is the longest spin window Start accepts.
const maxSpin = time.Second

// orInt sets *p to v when it is zero or negative.
func orInt(p *int, v int) {
	if *p <= 0 {
		*p = v
	}
}

// orDuration sets *p to v when it is zero or negative.
func orDuration(p *time.Duration, v time.Duration) {
	if *p <= 0 {
		*p = v
	}
}

// admissionDefaults fills in the admission and fair-share limits.
func (c *Config) admissionDefaults() {
	orInt(&c.MaxInFlightPerLane, 256)
	orInt(&c.MaxInFlightPerTenant, c.MaxInFlightPerLane)
	c.MaxInFlightPerTenant = min(c.MaxInFlightPerTenant, c.MaxInFlightPerLane)
	if c.StreamDepth == 0 {
		c.StreamDepth = 4
	}
	orInt(&c.Quantum, 16)
	orInt(&c.MaxProgramsPerTenant, 64)
	orInt(&c.MaxPrograms, 16384)
	orInt(&c.MaxBatchEntries, 1024)
	if c.MaxBatchBytes <= 0 {
		c.MaxBatchBytes = 64 << 20
	}
	if c.TenantIdle == 0 {
		c.TenantIdle = time.Minute
	}
}

// laneDefaults fills in the lanes' shape, cache and polling.
func (c *Config) laneDefaults() {
	orInt(&c.LanesPerDevice, 1)
	if c.CacheBytes <= 0 {
		c.CacheBytes = 256 << 20
	}
	if c.CacheDeviceBytes <= 0 {
		c.CacheDeviceBytes = 256 << 20
	}
	if c.WarmRebuild == 0 {
		c.WarmRebuild = 250 * time.Millisecond
	}
	orInt(&c.Throughput, 1<<30)
	if c.CacheCapacity == 0 {
		c.CacheCapacity = 64
	}
	if c.QuickPolls == 0 {
		c.QuickPolls = 4
	}
	orDuration(&c.PollMin, 20*time.Microsecond)
	if c.HangTimeout == 0 {
		c.HangTimeout = 10 * time.Second
	}
	if c.PollMax < c.PollMin {
		c.PollMax = max(2*time.Millisecond, c.PollMin)
	}
	if c.Runtime == "" {
		c.Runtime = "lanes/" + c.Devices[0].Info().Backend
	}
}

// defaults fills in the recovery policy.
func (r *Recovery) defaults() {
	orDuration(&r.Backoff, time.Millisecond)
	orDuration(&r.MaxBackoff, time.Second)
	r.MaxBackoff = max(r.MaxBackoff, r.Backoff)
	orDuration(&r.Window, time.Minute)
	orInt(&r.MaxFailures, 5)
}

// defaults fills in the suspension policy.
func (sp *Suspension) defaults() {
	orInt(&sp.After, 3)
	orDuration(&sp.Window, time.Minute)
	if !(sp.Ratio > 0) || math.IsInf(sp.Ratio, 0) {
		sp.Ratio = 10
	}
	orDuration(&sp.For, time.Second)
	orDuration(&sp.Max, time.Minute)
	sp.Max = max(sp.Max, sp.For)
}

// checkLibraries refuses Config.Libraries a lane could not hold: a nil or
// invalid one, two of one name, more than a lane holds.
func checkLibraries(libs []*cuda.Library) error {
	if len(libs) > lanecore.MaxLibraries {
		return fmt.Errorf("%w: Config.Libraries has %d; a lane holds at most %d", ErrInvalidArgument, len(libs), lanecore.MaxLibraries)
	}
	for i, lib := range libs {
		if lib == nil {
			return fmt.Errorf("%w: Config.Libraries[%d] is nil", ErrInvalidArgument, i)
		}
		if err := lib.Validate(); err != nil {
			return fmt.Errorf("%w: Config.Libraries[%d]: %w", ErrInvalidArgument, i, err)
		}
		for _, other := range libs[:i] {
			if other.Name == lib.Name {
				return fmt.Errorf("%w: Config.Libraries has two libraries named %q; declare each once", ErrInvalidArgument, lib.Name)
			}
		}
	}
	return nil
}
