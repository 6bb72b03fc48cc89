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
// Time comes from a [CostModel] measured on an H200, in one of three
// [ClockMode]s: real time, a [VirtualClock] the tests advance, or zero cost.
// Faults are injected by rule ([Fault]): launch failure, capture rejection,
// out of memory, a sticky error that poisons the device, and a hung kernel.
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
// # Concurrency properties
//
// A [Device] is safe for concurrent use. Each stream is owned by one
// goroutine at a time, as in the [cuda.Stream] contract.
package sim

import (
	"fmt"
	"math"
	"math/rand"
	"runtime"
	"sync"
	"time"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
)

// Config configures a simulated device. The zero value is a real-time H200
// model with 16 GiB of memory and the built-in kernels.
type Config struct {
	Clock   ClockMode
	Virtual *VirtualClock    // the clock of the Virtual mode; nil makes one (see Device.Clock)
	Cost    CostModel        // zero fields take the H200 defaults
	Memory  uint64           // bytes the device offers; 0 means 16 GiB. The simulator holds them in host memory: offer no more than the host has
	Kernels kernels.Registry // nil means kernels.Builtin()
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
}

// DefaultMaxLaunchThreads is the launch size limit of a simulated device
// whose Config leaves it zero: about a quarter of a second of reference
// work on one core.
const DefaultMaxLaunchThreads = 1 << 28

// DefaultMemory is the memory of a device whose Config leaves it zero.
const DefaultMemory = 16 << 30

// Base of the simulated device address space.
const addressBase = 0x7f00_0000_0000

// Device is a simulated CUDA device. It implements [cuda.Device].
type Device struct {
	info    cuda.DeviceInfo
	clock   clock
	cost    CostModel
	kernels kernels.Registry
	closed  chan struct{}

	// execMu serializes the bytes of work: workers executing commands and
	// host reads and writes of buffer memory. Device time is modelled, so
	// this costs no concurrency of the model, and it keeps the race
	// detector meaningful.
	execMu sync.Mutex

	// fence orders frees against enqueues and launches (cuda.FreeFence):
	// Free's wait covers every enqueue that found the buffer live.
	fence cuda.FreeFence

	mu         sync.Mutex
	buffers    map[uint64]*allocation
	freeing    map[uint64]bool // buffers and host buffers being freed
	hostsGoing map[uint64]bool
	nextBuffer uint64
	hosts      map[uint64][]byte // pinned host staging
	hostInUse  uint64
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

var _ cuda.Device = (*Device)(nil)

type allocation struct {
	buf   cuda.Buffer
	bytes []byte
}

// poisoning records the sticky error that poisoned the device and the device
// time it struck.
type poisoning struct {
	at  time.Duration
	err *cuda.Error
}

// New creates a simulated device.
func New(cfg Config) (*Device, error) {
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
	cfg.Kernels = limitLaunches(cfg.Kernels, cfg.MaxLaunchThreads)
	d := &Device{
		info: cuda.DeviceInfo{
			Instance: cuda.NextInstance(), Ordinal: cfg.Ordinal, Name: "sim (H200 model)",
			Backend: "sim", TotalMemory: cfg.Memory,
		},
		clock:   clock{mode: cfg.Clock, origin: time.Now(), virtual: cfg.Virtual},
		cost:    cfg.Cost.withDefaults(),
		kernels: cfg.Kernels,
		closed:  make(chan struct{}),
		buffers: map[uint64]*allocation{},
		freeing: map[uint64]bool{}, hostsGoing: map[uint64]bool{},
		hosts:    map[uint64][]byte{},
		nextAddr: addressBase,
		streams:  map[uint64]*stream{},
		memory:   cuda.MemoryStats{Total: cfg.Memory},
		rng:      rand.New(rand.NewSource(cfg.Seed)),
		tracing:  cfg.Trace,
	}
	if cfg.Clock == ClockVirtual && d.clock.virtual == nil {
		d.clock.virtual = &VirtualClock{}
	}
	if cfg.Clock == ClockZeroCost {
		d.cost = CostModel{MemoryBandwidth: math.Inf(1), HostBandwidth: math.Inf(1), StreamParallelism: 1}
	}
	for _, f := range cfg.Faults {
		if err := d.InjectFault(f); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// Clock returns the device's virtual clock, or nil outside the Virtual mode.
func (d *Device) Clock() *VirtualClock { return d.clock.virtual }

// Mode returns the device's clock mode.
func (d *Device) Mode() ClockMode { return d.clock.mode }

// Now returns the device's current time since its origin.
func (d *Device) Now() time.Duration { return d.clock.now() }

// BindThread locks the calling goroutine to its OS thread, as a lane does;
// the simulator has no context to make current.
func (d *Device) BindThread() (func(), error) {
	runtime.LockOSThread()
	return runtime.UnlockOSThread, nil
}

// Info describes the device.
func (d *Device) Info() cuda.DeviceInfo { return d.info }

// Kernels returns the kernels the device launches.
func (d *Device) Kernels() cuda.Kernels { return d.kernels }

// Registry returns the device's kernel registry.
func (d *Device) Registry() kernels.Registry { return d.kernels }

// check returns the error every call gets once the device is closed or
// poisoned.
func (d *Device) check(op string) error {
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
func (d *Device) Err() error {
	if d.clock.mode == ClockVirtual {
		d.settle(d.clock.now())
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.poisonedLocked()
}

func (d *Device) poisonedLocked() error {
	if d.poison == nil {
		return nil
	}
	if d.clock.mode == ClockVirtual && d.poison.at > d.clock.now() {
		return nil
	}
	return d.poison.err
}

// poisonAt records a sticky error striking at device time at; the earliest
// strike wins.
func (d *Device) poisonAt(at time.Duration, err *cuda.Error) {
	d.mu.Lock()
	if d.poison == nil || at < d.poison.at {
		d.poison = &poisoning{at: at, err: err}
	}
	d.mu.Unlock()
}

// streamList returns the device's streams.
func (d *Device) streamList() []*stream {
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
func (d *Device) settle(t time.Duration) {
	streams := d.streamList()
	for _, s := range streams {
		s.settle(t)
	}
}

// Alloc allocates a buffer. Like cuMemAlloc's, its memory is not
// initialized: it holds the byte 0xA5 throughout, so code that forgets to
// zero or upload before reading fails here as it would on a GPU. Any size
// beyond the free memory is a typed out-of-memory error.
func (d *Device) Alloc(spec cuda.BufferSpec) (cuda.Buffer, error) {
	const op = "alloc"
	spec, err := spec.Normalize()
	if err != nil {
		return cuda.Buffer{}, err
	}
	if err := d.check(op); err != nil {
		return cuda.Buffer{}, err
	}
	if err := d.unsafeDuringCapture(op); err != nil {
		return cuda.Buffer{}, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.fire(FaultOutOfMemory, nil) {
		return cuda.Buffer{}, cuda.DriverError(op, cuda.CodeOutOfMemory, "injected out-of-memory fault")
	}
	// Compare before rounding too: a size near 2^64 would round up past
	// zero.
	footprint := roundUp(spec.Size, spec.Align)
	if spec.Size > d.memory.Total || footprint < spec.Size || footprint > d.memory.Free() {
		return cuda.Buffer{}, cuda.DriverError(op, cuda.CodeOutOfMemory,
			fmt.Sprintf("cannot allocate %d bytes: %d of %d free; free buffers or wait for other work", spec.Size, d.memory.Free(), d.memory.Total))
	}
	bytes, err := hostBytes(op, spec.Size, 0xA5)
	if err != nil {
		return cuda.Buffer{}, err
	}
	d.nextBuffer++
	addr := roundUp(d.nextAddr, spec.Align)
	d.nextAddr = addr + footprint
	b := cuda.Buffer{Device: d.info.Instance, ID: d.nextBuffer, Size: spec.Size, Align: spec.Align, Elem: spec.Elem, Addr: addr}
	d.buffers[b.ID] = &allocation{buf: b, bytes: bytes}
	d.memory.InUse += footprint
	d.memory.Allocations++
	d.memory.Peak = max(d.memory.Peak, d.memory.InUse)
	return b, nil
}

// Free releases a buffer after the device's outstanding work, as cuMemFree.
// From the moment it begins, enqueues that name the buffer are refused
// (ErrStaleHandle); work enqueued before it finishes first. Like cuMemFree
// it waits for the whole device: with a kernel that never finishes, it
// never returns.
func (d *Device) Free(b cuda.Buffer) error {
	const op = "free"
	if _, err := d.lookup(op, b); err != nil {
		return err
	}
	if err := d.unsafeDuringCapture(op); err != nil {
		return err
	}
	if err := d.fence.MarkGoing(op, &d.mu, d.freeing, func() bool { _, ok := d.buffers[b.ID]; return ok }, b.ID); err != nil {
		return err
	}
	err := d.Synchronize()
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.freeing, b.ID)
	if err != nil {
		return err
	}
	delete(d.buffers, b.ID)
	d.memory.InUse -= roundUp(b.Size, b.Align)
	d.memory.Allocations--
	return nil
}

// Frees counts the frees (Free and FreeHost) begun on the device: a handle
// CheckBuffer or CheckHost found live stays live while it is unchanged.
func (d *Device) Frees() uint64 { return d.fence.Frees() }

// checkExecHandles checks an executable's buffers before a launch (see
// cuda.FreeFence.CheckExec).
func (d *Device) checkExecHandles(op string, x *exec) error {
	return d.fence.CheckExec(op, &x.handles, &x.checked, func(id uint64, host bool) bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		if host {
			_, ok := d.hosts[id]
			return ok && !d.hostsGoing[id]
		}
		_, ok := d.buffers[id]
		return ok && !d.freeing[id]
	})
}

// lookup checks that b is a live buffer of this device, exactly as it was
// handed out and not being freed, and returns its allocation.
func (d *Device) lookup(op string, b cuda.Buffer) (*allocation, error) {
	d.mu.Lock()
	a, ok := d.buffers[b.ID]
	if d.freeing[b.ID] {
		ok = false
	}
	d.mu.Unlock()
	var have cuda.Buffer
	if ok {
		have = a.buf
	}
	if err := cuda.CheckBuffer(op, d.info.Instance, b, have, ok); err != nil {
		return nil, err
	}
	return a, nil
}

// CheckBuffer reports whether b is a live buffer of this device, exactly as
// Alloc returned it.
func (d *Device) CheckBuffer(b cuda.Buffer) error {
	_, err := d.lookup("check buffer", b)
	return err
}

// Memory reports the device's memory accounting.
func (d *Device) Memory() cuda.MemoryStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.memory
}

// Synchronize waits for all work of every stream (cuCtxSynchronize).
func (d *Device) Synchronize() error {
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
func (d *Device) unsafeDuringCapture(op string) error {
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
		return cuda.DriverError(op, cuda.CodeStreamCaptureUnsupported,
			op+" is not allowed while a stream captures in global mode; the capture is invalidated. Do it before BeginCapture or capture in relaxed mode")
	}
	return nil
}

// NewStream creates a stream with its own worker.
func (d *Device) NewStream() (cuda.Stream, error) {
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
func (d *Device) Close() error {
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
	d.buffers, d.hosts = map[uint64]*allocation{}, map[uint64][]byte{}
	d.memory.InUse, d.memory.Allocations, d.hostInUse = 0, 0, 0
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
func (d *Device) Trace() []TraceEntry {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]TraceEntry(nil), d.trace...)
}

func roundUp(n, align uint64) uint64 { return (n + align - 1) / align * align }

// limitLaunches is a copy of a registry whose kernels refuse launches of
// more than max threads.
func limitLaunches(r kernels.Registry, max uint64) kernels.Registry {
	out := make(kernels.Registry, len(r))
	for name, k := range r {
		c := *k
		if c.Spec.MaxThreads == 0 || c.Spec.MaxThreads > max {
			c.Spec.MaxThreads = max
		}
		out[name] = &c
	}
	return out
}

// hostBytes returns n bytes of the pattern, the simulated memory of an
// allocation, or an out-of-memory error when the host cannot hold them (a
// size the Go runtime refuses panics in make; that panic never leaves here).
func hostBytes(op string, n uint64, pattern byte) (b []byte, err error) {
	defer func() {
		if recover() != nil {
			b, err = nil, cuda.DriverError(op, cuda.CodeOutOfMemory, fmt.Sprintf("the simulator cannot hold %d bytes in host memory; configure less Memory or allocate less", n))
		}
	}()
	if n > math.MaxInt {
		panic("size")
	}
	b = make([]byte, n)
	if pattern != 0 {
		for i := range b {
			b[i] = pattern
		}
	}
	return b, nil
}
