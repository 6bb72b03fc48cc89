package actors

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/programs"
	"github.com/lanesched/lanes/telemetry"
)

// Errors of the scheduler.
var (
	ErrOverloaded    = errors.New("actors: overloaded")
	ErrStopped       = errors.New("actors: scheduler stopped")
	ErrNoHealthyLane = errors.New("actors: no healthy lane")
	ErrIndeterminate = errors.New("actors: submission indeterminate")
	ErrUnknownLane   = errors.New("actors: unknown lane")
	ErrHung          = errors.New("actors: lane hung")
	ErrNotYours      = errors.New("actors: tenant names what another tenant owns")
)

// Rebuild is the policy for quarantined lanes.
type Rebuild struct {
	// Enabled rebuilds a quarantined lane (new stream, fresh cache) once its
	// device is healthy; a sticky device error keeps it out for good.
	Enabled bool
	// After is how long a lane stays quarantined before the attempt.
	After time.Duration
}

// Config configures a scheduler. Devices is required; the zero value of
// every other field is a sensible default.
type Config struct {
	Devices        []cuda.Device
	LanesPerDevice int    // default 1
	CacheCapacity  int    // executables per lane; default 64; negative: never capture
	Runtime        string // runtime fingerprint of programs; default "lanes/<backend>"
	// Admission: submissions admitted and not yet ended. Beyond these, Submit
	// answers ErrOverloaded (retryable) instead of queueing without bound.
	MaxInFlightPerLane   int // default 256
	MaxInFlightPerTenant int // default 1024
	Rebuild              Rebuild
	// Fence polling: QuickPolls polls through the mailbox right after a
	// submission, then timers back off from PollMin to PollMax.
	QuickPolls       int           // default 4
	PollMin, PollMax time.Duration // default 20µs, 2ms
	Throughput       int           // messages per mailbox run; default 64
	// Spin is how long a lane's thread spins for work, rather than park,
	// while a fence poll is due within it, so that short GPU work ends
	// without a thread wake-up. Default 0: never. On the H200 with 4 lanes
	// per GPU, spinning lanes were not faster than parking ones (the
	// dispatcher's own poll timer already saves the wake-ups that
	// mattered), and spinning costs a core per busy lane; try it where
	// polls are frequent and cores plentiful.
	Spin time.Duration
	// HangTimeout is how long a lane's oldest fence may go without any
	// fence ending before the lane is declared hung (a kernel that never
	// finishes): its submissions end indeterminate and the stream is
	// abandoned. Default 10s; negative disables the watchdog.
	HangTimeout time.Duration
	// StrictOwnership rejects a batch that names a buffer no tenant owns
	// and that is not shared (Scheduler.Own, Scheduler.Share); without it
	// only buffers owned by another tenant are rejected.
	StrictOwnership bool
	// ThreadCheck records the OS thread of every Receive (LaneStatus.Threads).
	ThreadCheck bool
	// Logger receives protoactor's logs; nil discards them.
	Logger *slog.Logger
	// Telemetry receives every ended submission and quarantine; nil
	// records nothing.
	Telemetry *telemetry.Telemetry
}

func (c *Config) defaults() error {
	if len(c.Devices) == 0 {
		return fmt.Errorf("actors: Config.Devices is empty; give at least one device")
	}
	for i, d := range c.Devices {
		if d == nil {
			return fmt.Errorf("actors: Config.Devices[%d] is nil", i)
		}
	}
	def := func(p *int, v int) {
		if *p <= 0 {
			*p = v
		}
	}
	def(&c.LanesPerDevice, 1)
	def(&c.MaxInFlightPerLane, 256)
	def(&c.MaxInFlightPerTenant, 1024)
	def(&c.Throughput, 64)
	if c.CacheCapacity == 0 {
		c.CacheCapacity = 64
	}
	if c.QuickPolls == 0 {
		c.QuickPolls = 4
	}
	if c.PollMin <= 0 {
		c.PollMin = 20 * time.Microsecond
	}
	c.Spin = max(c.Spin, 0)
	if c.HangTimeout == 0 {
		c.HangTimeout = 10 * time.Second
	}
	if c.PollMax < c.PollMin {
		c.PollMax = max(2*time.Millisecond, c.PollMin)
	}
	if c.Runtime == "" {
		c.Runtime = "lanes/" + c.Devices[0].Info().Backend
	}
	return nil
}

// call is one waiting caller: a submission or an administrative request.
type call struct {
	id       uint64
	tenant   string
	ts       *tenantState // the tenant's admission state (nil for admin calls)
	lane     atomic.Pointer[laneRef]
	batch    lanes.Batch // kept for one reroute
	rerouted bool
	admin    bool

	start time.Time // host time the submission was admitted

	done    chan struct{}
	receipt lanes.Receipt
	result  any
	err     error
}

// Scheduler routes tenants' batches to lane actors. It is safe for
// concurrent use.
type Scheduler struct {
	cfg    Config
	system *actor.ActorSystem
	lanes  []*laneRef

	// stopping refuses admission. A call is registered only under its
	// registry shard's lock with stopping still false, and Stop, having set
	// it, passes every shard's lock once (callRegistry.barrier): a
	// submission is either refused or registered before Stop looks. Nothing
	// else on a submission's path locks but that shard.
	stopping atomic.Bool
	calls    callRegistry // every admitted, unended call
	tenants  sync.Map     // tenant -> *tenantState
	routeMu  sync.Mutex   // picking a new lane for a tenant (the slow path)

	ownMu    sync.RWMutex
	owners   map[[2]uint64]string          // (device instance, buffer id) -> tenant; "" shared
	programs map[programs.ProgramID]string // program -> the tenant that registered it

	nextCall atomic.Uint64
	timers   sync.WaitGroup
	epoch    time.Time // origin of the lanes' host clock
	gauges   metric.Registration
}

// Start spawns LanesPerDevice lane actors per device, each on its own
// bound OS thread with its own stream, cache and catalog.
func Start(ctx context.Context, cfg Config) (*Scheduler, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s := &Scheduler{cfg: cfg, epoch: time.Now(), owners: map[[2]uint64]string{}, programs: map[programs.ProgramID]string{}}
	s.system = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return logger }))
	root := s.system.Root.WithGuardian(laneStrategy{s})
	for di, dev := range cfg.Devices {
		for range cfg.LanesPerDevice {
			ref := &laneRef{id: len(s.lanes), device: di, dev: dev, instance: dev.Info().Instance}
			disp, err := newThreadDispatcher(dev, cfg.Throughput, cfg.Spin)
			if err != nil {
				s.abort()
				return nil, fmt.Errorf("actors: bind lane %d to device %d: %w", ref.id, di, err)
			}
			ref.disp = disp
			props := actor.PropsFromProducer(func() actor.Actor { return &laneActor{s: s, ref: ref} },
				actor.WithDispatcher(disp), actor.WithMailbox(actor.Unbounded()))
			ref.pid = root.Spawn(props)
			s.lanes = append(s.lanes, ref)
		}
	}
	if err := s.registerGauges(); err != nil {
		s.abort()
		return nil, err
	}
	// Wait until every lane has opened its stream (or failed to).
	for _, ref := range s.lanes {
		for ref.State() == Starting {
			if err := ctx.Err(); err != nil {
				s.abort()
				return nil, err
			}
			time.Sleep(50 * time.Microsecond)
		}
	}
	return s, nil
}

// abort tears down a half-started scheduler.
func (s *Scheduler) abort() {
	for _, ref := range s.lanes {
		_ = s.system.Root.StopFuture(ref.pid).Wait()
		ref.disp.stop()
	}
	s.system.Shutdown()
}

// laneStrategy turns a panic in a lane actor (outside the lane core, which
// recovers its own) into a lane failure: the lane is quarantined and its
// waiting callers end; the actor is stopped, never restarted in place.
type laneStrategy struct{ s *Scheduler }

func (st laneStrategy) HandleFailure(_ *actor.ActorSystem, sup actor.Supervisor, child *actor.PID, _ *actor.RestartStatistics, reason any, _ any) {
	for _, ref := range st.s.lanes {
		if ref.pid.Equal(child) {
			ref.dead.Store(true)
			ref.setState(Quarantined, fmt.Errorf("%w: lane actor panicked: %v", lanes.ErrFailed, reason))
			st.s.endLaneCalls(ref, fmt.Errorf("%w: lane %d panicked: %v", ErrIndeterminate, ref.id, reason))
			st.s.laneQuarantined(ref, fmt.Errorf("panic: %v", reason))
		}
	}
	sup.StopChildren(child)
}

// adminFor registers an administrative call to one lane.
func (s *Scheduler) adminFor(ref *laneRef) *call {
	c := &call{admin: true, id: s.nextCall.Add(1), done: make(chan struct{})}
	c.lane.Store(ref)
	s.calls.store(c)
	return c
}

// complete ends a submission exactly once: a second completion of the same
// call finds nothing and is ignored.
func (s *Scheduler) complete(id uint64, r lanes.Receipt, err error) {
	c := s.calls.take(id)
	if c == nil {
		return
	}
	c.receipt, c.err = r, err
	s.release(c)
	if t := s.cfg.Telemetry; t != nil {
		// The recorder runs later: hand it copies, not the caller's batch.
		nodes := make([]int, len(c.batch.Entries))
		for i, e := range c.batch.Entries {
			nodes[i] = e.Node
		}
		lane := c.lane.Load()
		t.Submission(context.Background(), telemetry.Submission{
			Tenant: c.tenant, Lane: lane.id, Device: lane.device, DeviceName: lane.dev.Info().Name,
			Entries: len(c.batch.Entries), Path: c.batch.Path, Timing: c.batch.Timing, Start: c.start, End: time.Now(),
			Anchor: s.epoch, Receipt: r, Err: err, Nodes: nodes})
	}
	close(c.done)
}

// registerGauges reports lane health and in-flight depth as gauges.
func (s *Scheduler) registerGauges() error {
	m := s.cfg.Telemetry.Meter()
	if m == nil {
		return nil
	}
	health, err := m.Int64ObservableGauge("lanes.lanes", metric.WithDescription("lanes by health"))
	if err != nil {
		return err
	}
	depth, err := m.Int64ObservableGauge("lanes.lane.in_flight", metric.WithDescription("admitted submissions per lane"))
	if err != nil {
		return err
	}
	moved := map[string]metric.Int64ObservableCounter{}
	for _, name := range []string{"lanes.transfer.h2d_bytes", "lanes.transfer.d2h_bytes", "lanes.transfer.uploads", "lanes.transfer.readbacks",
		"lanes.graph_launches", "lanes.output_cache.hits", "lanes.sync_points"} {
		if moved[name], err = m.Int64ObservableCounter(name); err != nil {
			return err
		}
	}
	observables := []metric.Observable{health, depth}
	for _, c := range moved {
		observables = append(observables, c)
	}
	s.gauges, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		byHealth := map[Health]int64{}
		for _, l := range s.Lanes() {
			byHealth[l.Health]++
			lane := metric.WithAttributes(attribute.Int("lanes.lane.id", l.ID))
			o.ObserveInt64(depth, int64(l.InFlight), lane)
			st := l.Staged
			for name, v := range map[string]uint64{"lanes.transfer.h2d_bytes": st.HostToDeviceBytes, "lanes.transfer.d2h_bytes": st.DeviceToHostBytes,
				"lanes.transfer.uploads": st.Uploads, "lanes.transfer.readbacks": st.Readbacks, "lanes.graph_launches": st.GraphLaunches + l.Counters.ReplayedSegments,
				"lanes.output_cache.hits": st.OutputCacheHits, "lanes.sync_points": l.Counters.SyncPoints} {
				o.ObserveInt64(moved[name], int64(v), lane)
			}
		}
		for h, n := range byHealth {
			o.ObserveInt64(health, n, metric.WithAttributes(attribute.String("lanes.health", h.String())))
		}
		return nil
	}, observables...)
	return err
}

func (s *Scheduler) completeAdmin(id uint64, res any, err error) {
	c := s.calls.take(id)
	if c == nil {
		return
	}
	c.result, c.err = res, err
	close(c.done)
}

// reroute sends a submission a failed lane did not take to a healthy lane,
// once; otherwise it ends, not submitted.
func (s *Scheduler) reroute(m *SubmitRequest, from *laneRef) {
	c, ok := s.calls.load(m.Call)
	if !ok {
		return // already ended
	}
	fail := func(err error) {
		s.complete(c.id, lanes.Receipt{}, &lanes.Error{Op: "submit", Code: "lane_unavailable", NotSubmitted: true, Retryable: true, Err: err})
	}
	if c.rerouted {
		fail(fmt.Errorf("%w: lane %d failed before taking the batch", lanes.ErrFailed, from.id))
		return
	}
	to, err := s.route(c.ts, batchDevice(&c.batch), from)
	if err != nil {
		fail(err)
		return
	}
	from.inflight.Add(-1)
	c.lane.Store(to)
	c.rerouted = true
	s.system.Root.Send(to.pid, m)
}

// endLaneCalls ends every call routed to a lane whose actor died.
func (s *Scheduler) endLaneCalls(ref *laneRef, err error) {
	for _, id := range s.calls.matching(func(c *call) bool { return c.lane.Load() == ref }) {
		s.complete(id, lanes.Receipt{Outcome: lanes.Indeterminate}, err)
	}
}

// laneQuarantined reacts to a lane failure: a sticky device error
// quarantines every lane of the device, and on the real GPU every lane of
// every GPU of the process: on the H200 with driver 580 an illegal address
// in one GPU's context made kernel launches in another GPU's context fail
// with the same error, so the CUDA state of the whole process is what a
// sticky error poisons (isolating GPUs takes a process per GPU). The rebuild
// policy may bring a lane back once its device is healthy.
func (s *Scheduler) laneQuarantined(ref *laneRef, cause error) {
	s.cfg.Telemetry.Quarantine(context.Background(), ref.id, cause)
	if cuda.IsSticky(cause) {
		processWide := ref.dev.Info().Backend == "driver"
		for _, r := range s.lanes {
			same := r.dev == ref.dev || processWide && r.dev.Info().Backend == "driver"
			if r != ref && same && r.State() == Healthy {
				r.setState(Quarantined, cause)
				s.system.Root.Send(r.pid, failLane{Reason: "device poisoned: " + cause.Error()})
			}
		}
		return
	}
	if s.cfg.Rebuild.Enabled {
		if s.stopping.Load() {
			return
		}
		s.timers.Add(1)
		time.AfterFunc(s.cfg.Rebuild.After, func() {
			defer s.timers.Done()
			s.system.Root.Send(ref.pid, rebuildLane{})
		})
	}
}

// Submit routes a batch to the tenant's lane and waits for its receipt. A
// submission that was accepted always ends exactly once, even if ctx ends
// first: Submit then returns ctx.Err() and the scheduler still accounts the
// submission until its fence is terminal. An indeterminate outcome is
// returned as an error wrapping ErrIndeterminate, with the receipt.
func (s *Scheduler) Submit(ctx context.Context, tenant string, b lanes.Batch) (lanes.Receipt, error) {
	p, err := s.SubmitAsync(tenant, b)
	if err != nil {
		return lanes.Receipt{}, err
	}
	select {
	case <-p.Done():
		return p.Result()
	case <-ctx.Done():
		return lanes.Receipt{}, ctx.Err()
	}
}

// Pending is a submission in flight.
type Pending struct{ c call } // the call itself: one allocation per submission

// Done is closed when the submission has ended.
func (p *Pending) Done() <-chan struct{} { return p.c.done }

// Result returns the receipt and error once Done is closed.
func (p *Pending) Result() (lanes.Receipt, error) {
	<-p.c.done
	return p.c.receipt, p.c.err
}

// Lane is the lane the submission was routed to (last, after a reroute).
func (p *Pending) Lane() int {
	return p.c.lane.Load().id
}

// SubmitAsync routes a batch and returns at once. Admission errors
// (ErrOverloaded, retryable; ErrStopped; ErrNoHealthyLane) come back here.
// The batch, with its entries and their slices, belongs to the scheduler
// until the submission ends: reuse it only after Done is closed.
func (s *Scheduler) SubmitAsync(tenant string, b lanes.Batch) (*Pending, error) {
	if err := s.checkOwnership(tenant, &b); err != nil {
		return nil, &lanes.Error{Op: "submit", Code: "not_yours", NotSubmitted: true, Err: err}
	}
	p := &Pending{c: call{tenant: tenant, batch: b, start: time.Now()}}
	lane, err := s.admit(tenant, &b, &p.c)
	if err != nil {
		return nil, err
	}
	s.system.Root.Send(lane.pid, &SubmitRequest{Call: p.c.id, Tenant: tenant, Batch: b})
	return p, nil
}

// adminCall sends an administrative request to one lane and waits.
func (s *Scheduler) adminCall(ctx context.Context, lane int, op AdminOp, capacity int) (any, error) {
	return s.ask(ctx, lane, func(id uint64) any { return &AdminRequest{Call: id, Op: op, Capacity: capacity} })
}

// ask sends one lane the request made for a registered administrative
// call and waits for the lane's answer.
func (s *Scheduler) ask(ctx context.Context, lane int, request func(call uint64) any) (any, error) {
	if lane < 0 || lane >= len(s.lanes) {
		return nil, fmt.Errorf("%w: %d (there are %d)", ErrUnknownLane, lane, len(s.lanes))
	}
	c := s.adminFor(s.lanes[lane])
	s.system.Root.Send(s.lanes[lane].pid, request(c.id))
	select {
	case <-c.done:
		return c.result, c.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Configure opens a lane's preparation with a capacity.
func (s *Scheduler) Configure(ctx context.Context, lane, capacity int) (cache.Preparation, error) {
	r, err := s.adminCall(ctx, lane, OpConfigure, capacity)
	p, _ := r.(cache.Preparation)
	return p, err
}

// Seal closes a lane's preparation.
func (s *Scheduler) Seal(ctx context.Context, lane int) (cache.Preparation, error) {
	r, err := s.adminCall(ctx, lane, OpSeal, 0)
	p, _ := r.(cache.Preparation)
	return p, err
}

// Trim releases a lane's executables and programs.
func (s *Scheduler) Trim(ctx context.Context, lane int) (cache.TrimReport, error) {
	r, err := s.adminCall(ctx, lane, OpTrim, 0)
	t, _ := r.(cache.TrimReport)
	return t, err
}

// Catalog returns a lane's sealed program catalog.
func (s *Scheduler) Catalog(ctx context.Context, lane int) ([]programs.Descriptor, error) {
	r, err := s.adminCall(ctx, lane, OpCatalog, 0)
	c, _ := r.([]programs.Descriptor)
	return c, err
}

// Synchronize waits for a lane's stream to drain.
func (s *Scheduler) Synchronize(ctx context.Context, lane int) error {
	_, err := s.adminCall(ctx, lane, OpSynchronize, 0)
	return err
}

// PrepareStaged captures a staged program's two variants on one lane (its
// preparation must be open).
func (s *Scheduler) PrepareStaged(ctx context.Context, lane int, st *lanes.Staged) error {
	_, err := s.stagedCall(ctx, lane, &StagedRequest{Prepare: true, Program: st})
	return err
}

// Replay runs a staged program on the lane it was prepared on, with inputs
// in logical order, and returns its outputs (when collect).
func (s *Scheduler) Replay(ctx context.Context, lane int, st *lanes.Staged, inputs [][]byte, collect bool) (lanes.StagedResult, error) {
	r, err := s.stagedCall(ctx, lane, &StagedRequest{Program: st, Inputs: inputs, Collect: collect})
	res, _ := r.(lanes.StagedResult)
	return res, err
}

func (s *Scheduler) stagedCall(ctx context.Context, lane int, m *StagedRequest) (any, error) {
	return s.ask(ctx, lane, func(id uint64) any { m.Call = id; return m })
}

// Lanes reports every lane's health and counters.
func (s *Scheduler) Lanes() []LaneStatus {
	out := make([]LaneStatus, len(s.lanes))
	for i, r := range s.lanes {
		out[i] = r.status()
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Stop stops admitting, drains every lane (each synchronizes its stream,
// ends every pending submission exactly once, trims and releases its
// stream), then stops the actors and their threads. If ctx ends first, the
// lanes still drain in the background and Stop returns ctx.Err().
func (s *Scheduler) Stop(ctx context.Context) error {
	if !s.stopping.CompareAndSwap(false, true) {
		return nil
	}
	s.calls.barrier()
	var waits []*call
	for _, ref := range s.lanes {
		c := s.adminFor(ref)
		waits = append(waits, c)
		if ref.dead.Load() {
			s.completeAdmin(c.id, nil, nil) // nothing left to drain
			continue
		}
		s.system.Root.Send(ref.pid, &stopLane{Call: c.id})
	}
	done := make(chan struct{})
	go func() {
		for i, c := range waits {
			ref := s.lanes[i]
			select {
			case <-c.done:
			case <-time.After(time.Minute): // the actor died; nothing drains it
			}
			_ = s.system.Root.StopFuture(ref.pid).Wait()
			s.endLaneCalls(ref, ErrStopped)
			ref.disp.stop()
		}
		s.timers.Wait()
		if s.gauges != nil {
			_ = s.gauges.Unregister()
		}
		s.system.Shutdown()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
