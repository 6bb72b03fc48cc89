// Package sim is the embedded default device of lanes: a pure-Go model of a
// CUDA device, faithful enough that the lane core is specified against it.
//
// Buffers hold real bytes and every kernel runs its Go reference
// ([github.com/lanesched/lanes/cuda/kernels]), so results are checked with the
// same tests on both devices. Each stream executes in order on its own
// worker goroutine; streams run concurrently. Events, queries and
// synchronization behave as CUDA's, empty streams included. Stream capture
// records instead of executing and follows CUDA's rules: a synchronizing call
// on the capturing stream (synchronize, query, readback) invalidates the
// capture, and in global mode so does an allocation, a free or a device
// synchronize anywhere on the device; end-capture yields a graph, which is
// instantiated, uploaded and launched, and gives the same bytes as the same
// commands run eagerly.
//
// Time comes from a cost model measured on an H200, in one of three
// [ClockMode]s: real time, a [VirtualClock] the tests advance, or zero cost.
// Faults are injected by rule ([Fault]): launch failure, capture rejection,
// out of memory, a sticky error that poisons the device, and a hung kernel.
// Memory is not initialized, as on a GPU; reads of bytes never written are
// reported under [Config.InitCheck], as compute-sanitizer's initcheck
// reports them.
//
// # Virtual time
//
// Every command is scheduled when it is enqueued: it starts when its stream
// is free and the host has paid the launch's cost, and takes its modelled
// device time (longer while more streams are busy than the device runs at
// full speed). In the virtual mode a fence is complete once the clock has
// reached its finish time; a query first waits for the workers to execute
// everything due by then, so what it answers depends only on the calls made
// and the clock. A blocking call (synchronize, readback) advances the clock
// to the time the work finishes, as the host would have waited that long.
//
// The real-time mode keeps time the same way on the wall clock: a worker
// runs each item's bytes as soon as it can, and a fence, a wait and a
// poisoned device's error answer by the item's finish time, so a worker
// burns no CPU waiting for the modelled time to pass (it did, yielding in
// a loop, and on a small machine that CPU was what another process, a lane
// host's front, needed: issue 56).
//
// # Concurrency properties
//
// A [Device] is safe for concurrent use. Each of its streams (which the
// lane that made it drives) is used by one goroutine at a time.
package sim

import (
	"math"
	"math/rand"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/internal/backend"
	"github.com/lanesched/lanes/internal/codes"
)

// Config configures a simulated device. The zero value is a real-time H200
// model with 16 GiB of memory and the built-in kernels.
type Config struct {
	Clock   ClockMode
	Virtual *VirtualClock    // the clock of ClockVirtual; nil makes one (see Device.Clock)
	Memory  uint64           // bytes the device offers; 0 means 16 GiB. The simulator holds them in host memory: offer no more than the host has
	Kernels kernels.Registry // nil means kernels.Builtin()
	Modules []kernels.Module // one's own kernels, loaded at open as LoadModule loads them
	Seed    int64            // seeds the generator of rate-based faults
	Faults  []Fault          // fault rules, as InjectFault
	Ordinal int              // the ordinal the device reports
	Trace   bool             // record every scheduled operation (see Device.Trace)
	// MaxLaunchThreads is the most threads (grid times block) one launch
	// may run; 0 means DefaultMaxLaunchThreads. The simulator runs every
	// thread's reference work on the host, where a launch a GPU finishes
	// in seconds (tens of billions of threads) would take days; a larger
	// launch is refused with cuda.ErrLaunchConfig before it is enqueued.
	MaxLaunchThreads uint64
	// NoData runs no command's bytes: kernels, library calls, copies and
	// uploads keep their order, events, capture rules, replays and faults
	// (an injected sticky fault still poisons the device), but no buffer
	// changes. With ClockZeroCost it is the scheduler's own cost, measured
	// on any machine: nothing is computed and no device time modelled.
	NoData bool
	// InitCheck reports reads of device memory never written, as NVIDIA's
	// compute-sanitizer --tool initcheck does. A GPU itself never fails
	// such a read: a kernel or a copy reads whatever the memory holds (on
	// this device, Alloc's fill byte 0xA5). Initcheck tracks which bytes
	// were written and reports every read of one that was not, by a kernel
	// ("Uninitialized __global__ memory read") or by a host API call such
	// as cudaMemcpy's source, and lets the work run on.
	//
	// Written, per allocation since Alloc: an upload or a stage_in, a
	// memset (Zero), a copy's destination, and each region a kernel (by
	// its spec's parameter access) or a library call declares writable,
	// whole, once the command ran: region-level, so bytes such a region
	// holds that the work did not touch count as written too.
	//
	// Reported: a copy or a stage_out whose source holds a byte never
	// written, and a Readback of one, at the first such byte; a kernel or
	// a library call only when its result depends on such a byte of a
	// region it declares readable, at the first byte it depends on.
	// Declared regions over-approximate what work reads (an attention
	// kernel reads its KV cache only up to its position), so when they
	// hold unwritten bytes the reference runs again on scratch copies with
	// those bytes changed (every bit flipped; zeroed; and, where the
	// command also writes them, a value of their position), and a byte it
	// writes, or its error, that differs from the real run's is a
	// dependence. So, unlike initcheck: a read whose value affects no
	// output (or affects it alike under every pattern tried) is not
	// reported; bytes outside the declared regions, or read through a
	// region declared write-only, are not checked; and a reference may run
	// more than once, so it must be a pure function of its memory and
	// arguments (as kernels.Kernel.Body and cuda.LibraryCall.Reference
	// ask). When no readable region holds an unwritten byte (the common
	// case) nothing runs twice. Work is checked where it runs, in stream
	// order: eager, or a node of a replayed graph alike.
	//
	// A report is an *UninitializedReadError (errors.Is
	// ErrUninitializedRead) naming the work, the buffer and the byte. The
	// work runs as it would unchecked: the same bytes and the same faults
	// (a kernel that faults on garbage still poisons the device, its
	// error saying what it read). The read is the program's bug, not the
	// device's: nothing is poisoned, and it classifies as a stream's
	// error (cuda.BlameStream, not sticky, code uninitialized_read), so a
	// lane that meets one recovers as from any stream error, and what was
	// in flight on its stream with the work ends as the stream answers
	// (other tenants' work too, as a launch failure's would): a test aid,
	// as compute-sanitizer is, not a switch for serving. The work is
	// reported at its point in its stream, as a launch failure that is
	// not sticky would be: the submissions whose work is at or after it
	// on that stream end with it, until the lane has been told; then it
	// is reset, as CUDA resets a non-sticky error once reported. Device.Err
	// never reports it. Off, nothing is tracked and no command does any
	// work more; NoData turns it off.
	InitCheck bool

	cost costModel // zero fields take the H200 defaults (tests change it through internal/simhook)
}

// InitCheckEnv, set to 1 in a process's environment, turns
// Config.InitCheck on for every device the process opens: the project's
// own test command (scripts/test.sh) sets it, so that every test that
// drives a simulated device also proves its program reads no memory it
// never wrote. Any other value leaves Config alone.
const InitCheckEnv = "LANES_SIM_INITCHECK"

// DefaultMaxLaunchThreads is the launch size limit of a simulated device
// whose Config leaves it zero: about a quarter of a second of reference
// work on one core.
const DefaultMaxLaunchThreads = 1 << 28

// DefaultMemory is the memory of a device whose Config leaves it zero.
const DefaultMemory = 16 << 30

// Base of the simulated device address space.
const addressBase = 0x7f00_0000_0000

// Device is a simulated CUDA device: a [cuda.Device] that loads kernel
// modules ([kernels.Loader]), with what only a simulated device offers: its
// clock, fault injection, its kernel registry and a trace of what it
// scheduled. [New] makes one. A Device is safe for concurrent use.
type Device interface {
	cuda.Device
	kernels.Loader
	// ModuleNotes says what the device could not check of the modules it
	// loaded: one line per module whose image it cannot read.
	ModuleNotes() []string
	// Clock returns the device's virtual clock, or nil outside the
	// Virtual mode.
	Clock() *VirtualClock
	// Mode returns the device's clock mode.
	Mode() ClockMode
	// Now returns the device's current time since its origin.
	Now() time.Duration
	// Registry returns a copy of the device's kernel registry: changing
	// it changes nothing on the device (load a module to add kernels).
	Registry() kernels.Registry
	// InjectFault adds a fault rule (see [Fault]); ClearFaults removes
	// every rule.
	InjectFault(f Fault) error
	ClearFaults()
	// Trace returns the operations scheduled so far, in scheduling order
	// (with Config.Trace).
	Trace() []TraceEntry
}

// device is the simulated CUDA device: [Device], and the streams, graphs
// and executables a lane drives (internal/backend's Device).
type device struct {
	info  cuda.DeviceInfo
	clock clock
	cost  costModel
	// registry holds the kernels the device launches; LoadModule replaces
	// it whole (under loadMu), so launches read it without a lock.
	registry   atomic.Pointer[kernels.Registry]
	public     atomic.Pointer[kernels.Registry] // a clone of registry, for Kernels
	loadMu     sync.Mutex
	notes      []string // what LoadModule could not check (ModuleNotes), under loadMu
	maxThreads uint64   // Config.MaxLaunchThreads
	closed     chan struct{}

	// execMu serializes the bytes of work: workers executing commands and
	// host reads and writes of buffer memory. Device time is modelled, so
	// this costs no concurrency of the model, and it keeps the race
	// detector meaningful.
	execMu    sync.Mutex
	noData    bool // Config.NoData
	initCheck bool // Config.InitCheck, off under NoData
	// probeScratch is the copies an InitCheck probe runs a reference on
	// (execMu; see probe.go).
	probeScratch [3][]byte
	// memScratch and argScratch are a kernel run's memory views and its
	// copy of the arguments, reused (execMu).
	memScratch []kernels.Memory
	argScratch []cuda.Arg

	// fence orders frees against enqueues and launches (backend.FreeFence):
	// Free's wait covers every enqueue that found the buffer live.
	fence backend.FreeFence

	mu         sync.Mutex
	buffers    backend.Table[*allocation]
	nextBuffer uint64
	hosts      backend.Table[[]byte] // pinned host staging
	hostInUse  uint64
	pins       []pinnedRange // host memory pinned in place (PinHost)
	nextHost   uint64
	nextAddr   uint64
	streams    map[uint64]*stream
	nextStream uint64
	memory     cuda.MemoryStats
	faults     []*Fault
	rng        *rand.Rand
	poison     *poisoning
	isClosed   bool
	trace      []TraceEntry
	tracing    bool
}

var _ cuda.Device = (*device)(nil)

// poisoning records the sticky error that poisoned the device and the device
// time it struck.
type poisoning struct {
	at  time.Duration
	err *cuda.Error
}

// New creates a simulated device.
func New(cfg Config) (Device, error) {
	if cfg.Clock > ClockZeroCost {
		return nil, cuda.Contractf("sim new", cuda.ErrInvalidCommand, "unknown clock mode %d", cfg.Clock)
	}
	if cfg.Memory == 0 {
		cfg.Memory = DefaultMemory
	}
	if cfg.Kernels == nil {
		cfg.Kernels = kernels.Builtin()
	}
	if cfg.MaxLaunchThreads == 0 {
		cfg.MaxLaunchThreads = DefaultMaxLaunchThreads
	}
	if err := cfg.Kernels.Check(true); err != nil {
		return nil, err
	}
	cfg.Kernels = limitLaunches(cfg.Kernels, cfg.MaxLaunchThreads) // clones: the device's own
	d := &device{
		info: cuda.DeviceInfo{
			Instance: backend.NextInstance(), Ordinal: cfg.Ordinal, Name: "sim (H200 model)",
			Backend: "sim", TotalMemory: cfg.Memory,
		},
		clock:      clock{mode: cfg.Clock, origin: time.Now(), virtual: cfg.Virtual},
		cost:       cfg.cost.withDefaults(),
		maxThreads: cfg.MaxLaunchThreads,
		noData:     cfg.NoData,
		initCheck:  (cfg.InitCheck || os.Getenv(InitCheckEnv) == "1") && !cfg.NoData,
		closed:     make(chan struct{}),
		buffers:    backend.NewTable[*allocation](),
		hosts:      backend.NewTable[[]byte](),
		nextAddr:   addressBase,
		streams:    map[uint64]*stream{},
		memory:     cuda.MemoryStats{Total: cfg.Memory},
		rng:        rand.New(rand.NewSource(cfg.Seed)),
		tracing:    cfg.Trace,
	}
	if cfg.Clock == ClockVirtual && d.clock.virtual == nil {
		d.clock.virtual = &VirtualClock{}
	}
	if cfg.Clock == ClockZeroCost {
		d.cost = costModel{MemoryBandwidth: math.Inf(1), HostBandwidth: math.Inf(1), StreamParallelism: 1}
	}
	d.setRegistry(cfg.Kernels)
	for _, f := range cfg.Faults {
		if err := d.InjectFault(f); err != nil {
			return nil, err
		}
	}
	for _, m := range cfg.Modules {
		if err := d.LoadModule(m); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// Clock returns the device's virtual clock, or nil outside the Virtual mode.
func (d *device) Clock() *VirtualClock { return d.clock.virtual }

// Mode returns the device's clock mode.
func (d *device) Mode() ClockMode { return d.clock.mode }

// Now returns the device's current time since its origin.
func (d *device) Now() time.Duration { return d.clock.now() }

// BindThread locks the calling goroutine to its OS thread, as a lane does;
// the simulator has no context to make current.
func (d *device) BindThread() (func(), error) {
	runtime.LockOSThread()
	return runtime.UnlockOSThread, nil
}

// Info describes the device.
func (d *device) Info() cuda.DeviceInfo { return d.info }

// Kernels returns the kernels the device launches, as published: a copy
// of the device's own (what a caller changes in it changes nothing the
// device enforces). It also refuses, as a [backend.CallValidator], a library
// call without the Reference this device runs it through.
func (d *device) Kernels() cuda.Kernels { return kernelView{*d.public.Load()} }

// kernelView is the device's kernels as Kernels returns them.
type kernelView struct{ kernels.Registry }

// ValidateCall refuses a library call the device cannot run: one without
// a Reference.
func (kernelView) ValidateCall(op string, c *cuda.LibraryCall) error {
	if c.Reference == nil {
		return cuda.Contractf(op, cuda.ErrInvalidCommand, "library call %q has no Reference: the simulated device runs a call through its Go reference", c.Name)
	}
	return nil
}

// Registry returns a copy of the device's kernel registry: changing it
// changes nothing on the device (load a module to add kernels).
func (d *device) Registry() kernels.Registry { return d.kernels().Clone() }

// kernels is the current registry, the device's own.
func (d *device) kernels() kernels.Registry { return *d.registry.Load() }

// setRegistry makes r the device's registry, and a clone of it the one
// Kernels publishes.
func (d *device) setRegistry(r kernels.Registry) {
	pub := r.Clone()
	d.public.Store(&pub)
	d.registry.Store(&r)
}

// check returns the error every call gets once the device is closed or
// poisoned.
func (d *device) check(op string) error {
	if err := d.Err(); err != nil {
		return err
	}
	select {
	case <-d.closed:
		return cuda.Contractf(op, cuda.ErrDeviceClosed, "device %d is closed; open a new one", d.info.Instance)
	default:
		return nil
	}
}

// Err returns the sticky error that poisoned the device, once it has struck.
func (d *device) Err() error {
	if d.clock.mode == ClockVirtual {
		d.settle(d.clock.now())
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.poisonedLocked()
}

func (d *device) poisonedLocked() error {
	if d.poison == nil {
		return nil
	}
	if d.clock.timed() && d.poison.at > d.clock.now() {
		return nil
	}
	return d.poison.err
}

// poisonAt records a sticky error striking at device time at; the earliest
// strike wins.
func (d *device) poisonAt(at time.Duration, err *cuda.Error) {
	d.mu.Lock()
	if d.poison == nil || at < d.poison.at {
		d.poison = &poisoning{at: at, err: err}
	}
	d.mu.Unlock()
}

// streamList returns the device's streams.
func (d *device) streamList() []*stream {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]*stream, 0, len(d.streams))
	for _, s := range d.streams {
		out = append(out, s)
	}
	return out
}

// settle waits until every stream's worker has executed all work due by
// device time t, so that the state at t is fully known.
func (d *device) settle(t time.Duration) {
	streams := d.streamList()
	for _, s := range streams {
		s.settle(t)
	}
}

// checkExecHandles checks an executable's buffers before a launch (see
// backend.FreeFence.CheckExec).
func (d *device) checkExecHandles(op string, x *exec) error {
	return d.fence.CheckExec(op, &x.handles, &x.checked, func(id uint64, host bool) bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		if host {
			_, ok := d.hosts.Live(id)
			return ok
		}
		_, ok := d.buffers.Live(id)
		return ok
	})
}

// Synchronize waits for all work of every stream (cuCtxSynchronize).
func (d *device) Synchronize() error {
	const op = "device synchronize"
	if err := d.check(op); err != nil {
		return err
	}
	if err := d.unsafeDuringCapture(op); err != nil {
		return err
	}
	streams := d.streamList()
	for _, s := range streams {
		if err := s.wait(op); err != nil {
			return err
		}
	}
	return d.check(op)
}

// unsafeDuringCapture fails a potentially unsafe call while any stream of
// the device captures in global mode, and invalidates those captures, as
// CUDA does.
func (d *device) unsafeDuringCapture(op string) error {
	// The stream list is taken under d.mu and each stream is locked after
	// it is released: a recording stream holds its own lock and then takes
	// d.mu, so holding both here in the other order would deadlock.
	hit := false
	for _, s := range d.streamList() {
		if s.invalidateGlobalCapture() {
			hit = true
		}
	}
	if hit {
		return backend.DriverError(op, codes.StreamCaptureUnsupported,
			op+" is not allowed while a stream captures in global mode; the capture is invalidated. Do it before BeginCapture or capture in relaxed mode")
	}
	return nil
}

// NewStream creates a stream with its own worker.
func (d *device) NewStream() (backend.Stream, error) {
	if err := d.check("stream create"); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.nextStream++
	s := newStream(d, d.nextStream)
	d.streams[s.id] = s
	d.fence.AddStream(&s.use)
	return s, nil
}

// Close waits for the outstanding work that can finish, stops every worker
// (a hung stream is abandoned) and releases all memory.
func (d *device) Close() error {
	d.mu.Lock()
	if d.isClosed {
		d.mu.Unlock()
		return nil
	}
	d.isClosed = true
	d.mu.Unlock()
	streams := d.streamList()
	for _, s := range streams {
		if !s.hung() {
			_ = s.wait("close")
		}
	}
	close(d.closed)
	for _, s := range streams {
		s.stop()
	}
	d.mu.Lock()
	d.buffers.Take()
	d.hosts.Take()
	d.memory.InUse, d.memory.Allocations, d.hostInUse, d.pins = 0, 0, 0, nil
	d.mu.Unlock()
	return nil
}

// TraceEntry is one scheduled operation of a device with tracing on.
type TraceEntry struct {
	Stream uint64
	Seq    uint64
	Op     string
	Start  time.Duration
	Finish time.Duration // never-finishing work shows the largest Duration
	Fault  string        // the injected fault, if any
}

// Trace returns the operations scheduled so far, in scheduling order.
func (d *device) Trace() []TraceEntry {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]TraceEntry(nil), d.trace...)
}

var _ kernels.Loader = (*device)(nil)
