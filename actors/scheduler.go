package actors

import (
	"context"
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

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/programs"
	"github.com/lanesched/lanes/telemetry"
)

// call is one waiting caller: a submission or an administrative request.
type call struct {
	id       uint64
	tenant   string
	ts       *tenantState // the tenant's state (nil for admin calls)
	lane     atomic.Pointer[laneRef]
	batch    lanes.Batch
	ctx      context.Context // the submitter's: a lane does not start a batch whose context ended
	sent     atomic.Bool     // a lane counts it (and may run it); false while parked
	reroutes int             // lanes it bounced off (ts.mu)
	admin    bool
	claim    *programs.ID // the program the batch declares, claimed for its tenant
	cost     int          // the batch's commands (checkSize): its fair queue's cost
	release  func()       // an administrative call's admission to undo when it ends

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
	// submission or administrative call is either refused or registered
	// before Stop looks.
	stopping atomic.Bool
	stopOnce sync.Once
	stopped  chan struct{} // closed when Stop's drain has finished
	calls    callRegistry  // every admitted, unended call
	tenants  sync.Map      // tenant -> *tenantState
	routeMu  sync.Mutex    // picking a new lane for a tenant (the slow path)
	stallMu  sync.Mutex
	stalls   map[cuda.Device]*stall // the last device-wide stall of each device
	waitMu   sync.Mutex
	waiting  map[*tenantState]struct{} // tenants whose parked batches wait for a lane to recover

	ownMu        sync.RWMutex
	owners       map[handleKey]string                  // buffer or host buffer -> its tenant, or shared
	owned        map[string]map[handleKey]func() error // tenant -> what it owns, with its liveness check (for Forget and sweeps)
	programs     map[programs.ID]*programClaim         // program -> its owner and registration
	programCount map[string]int                        // tenant -> its program names in programs

	sweptFrees        uint64        // the devices' free counts at the last ownership sweep (janitor)
	faults            atomic.Uint64 // lane failures attributed to a tenant
	forgottenLaunches atomic.Uint64 // launches of forgotten tenants' ended submissions

	nextCall atomic.Uint64
	timers   sync.WaitGroup // rebuild timers armed
	epoch    time.Time      // origin of the lanes' host clock
	gauges   metric.Registration
}

// Start spawns LanesPerDevice lane actors per device, each on its own
// bound OS thread with its own stream, cache and catalog, and returns once
// every lane has opened its stream (or failed to, and is recovering).
func Start(ctx context.Context, cfg Config) (*Scheduler, error) {
	if ctx == nil {
		return nil, lanes.Wrap("start", true, errNilContext)
	}
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s := &Scheduler{cfg: cfg, epoch: time.Now(), stopped: make(chan struct{}), waiting: map[*tenantState]struct{}{}, stalls: map[cuda.Device]*stall{}, owners: map[handleKey]string{}, owned: map[string]map[handleKey]func() error{}, programs: map[programs.ID]*programClaim{}, programCount: map[string]int{}}
	s.system = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return logger }))
	root := s.system.Root.WithGuardian(laneStrategy{s})
	for di, dev := range cfg.Devices {
		for range cfg.LanesPerDevice {
			ref := &laneRef{id: len(s.lanes), device: di, dev: dev, instance: dev.Info().Instance, opened: make(chan struct{})}
			disp, err := newThreadDispatcher(dev, cfg.Throughput, cfg.Spin)
			if err != nil {
				s.abort()
				return nil, lanes.Wrap("start", true, fmt.Errorf("%w: bind lane %d to device %d: %w", lanes.ErrFailed, ref.id, di, err))
			}
			ref.disp = disp
			props := actor.PropsFromProducer(func() actor.Actor { return &laneActor{s: s, ref: ref, queue: fairQueue{quantum: s.cfg.Quantum}} },
				actor.WithDispatcher(disp), actor.WithMailbox(actor.Unbounded()))
			ref.pid = root.Spawn(props)
			s.lanes = append(s.lanes, ref)
		}
	}
	if err := s.registerGauges(); err != nil {
		s.abort()
		return nil, err
	}
	for _, ref := range s.lanes {
		select {
		case <-ref.opened:
		case <-ctx.Done():
			s.abort()
			return nil, lanes.Wrap("start", true, ctx.Err())
		}
	}
	go s.janitor()
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
// recovers its own) into a lane failure: the lane is quarantined for good
// and its waiting callers end; the actor is stopped, never restarted in
// place.
type laneStrategy struct{ s *Scheduler }

func (st laneStrategy) HandleFailure(_ *actor.ActorSystem, sup actor.Supervisor, child *actor.PID, _ *actor.RestartStatistics, reason any, _ any) {
	for _, ref := range st.s.lanes {
		if ref.pid.Equal(child) {
			cause := fmt.Errorf("%w: lane %d's actor panicked: %v", lanes.ErrFailed, ref.id, reason)
			ref.dead.Store(true)
			ref.setState(HealthQuarantined, cause)
			st.s.endLaneCalls(ref, cause, false)
			st.s.cfg.Telemetry.Quarantine(context.Background(), ref.id, cause)
		}
	}
	sup.StopChildren(child)
}

// complete ends a call exactly once: a second completion of the same call
// finds nothing and is ignored. The receipt learns its tenant and lane.
func (s *Scheduler) complete(id uint64, r lanes.Receipt, err error) {
	c := s.calls.take(id)
	if c == nil {
		return
	}
	lane := c.lane.Load()
	r.Tenant, r.Lane = c.tenant, -1
	if lane != nil {
		r.Lane = lane.id
	}
	if err != nil {
		// Every ended submission has an outcome and says why it did not
		// succeed, in its receipt as in its error.
		if r.Err == nil {
			r.Err = err
		}
		if r.Outcome == 0 {
			r.Outcome = lanes.OutcomeIndeterminate
			if cuda.Classify(err).NotSubmitted {
				r.Outcome = lanes.OutcomeRefused
			}
		}
	}
	c.receipt, c.err = r, err
	s.release(c, r.Attribution.Launches)
	if c.claim != nil {
		s.settleClaim(*c.claim, err == nil)
	}
	if t := s.cfg.Telemetry; t != nil && !c.admin {
		// The recorder runs later: hand it copies, not the caller's batch.
		nodes := make([]int, len(c.batch.Entries))
		for i, e := range c.batch.Entries {
			nodes[i] = e.Node
		}
		sub := telemetry.Submission{Tenant: c.tenant, Lane: r.Lane, Device: -1, Entries: len(c.batch.Entries), Path: c.batch.Path,
			Timing: c.batch.Timing, Start: c.start, End: time.Now(), Anchor: s.epoch, Receipt: r, Err: err, Nodes: nodes}
		if lane != nil {
			sub.Device, sub.DeviceName = lane.device, lane.dev.Info().Name
		}
		t.Submission(context.Background(), sub)
	}
	close(c.done)
}

// completeAdmin answers an administrative call exactly once.
func (s *Scheduler) completeAdmin(id uint64, res any, err error) {
	c := s.calls.take(id)
	if c == nil {
		return
	}
	if c.release != nil {
		c.release()
	}
	c.result, c.err = res, err
	close(c.done)
}

// endLaneCalls ends every call routed to a lane that will not end them
// itself (its actor died, or stopped before their messages arrived):
// submissions that never reached the lane end not submitted, the others
// indeterminate.
func (s *Scheduler) endLaneCalls(ref *laneRef, cause error, neverRan bool) {
	for _, id := range s.calls.matching(func(c *call) bool { return c.lane.Load() == ref }) {
		s.endCall(id, cause, neverRan)
	}
}

// endCall ends one call with cause: an administrative call with the cause,
// a submission not submitted when it cannot have run, else indeterminate.
func (s *Scheduler) endCall(id uint64, cause error, neverRan bool) {
	c, ok := s.calls.load(id)
	if !ok {
		return
	}
	switch {
	case c.admin:
		s.completeAdmin(id, nil, cause)
	case neverRan || !c.sent.Load():
		s.complete(id, lanes.Receipt{}, lanes.Wrap("submit", true, cause))
	default:
		s.complete(id, lanes.Receipt{Outcome: lanes.OutcomeIndeterminate}, indeterminate("fence", cause))
	}
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
	queued, err := m.Int64ObservableGauge("lanes.lane.queued", metric.WithDescription("batches waiting in a lane's fair queue for room on its stream"))
	if err != nil {
		return err
	}
	cacheBytes, err := m.Int64ObservableGauge("lanes.cache.bytes", metric.WithUnit("By"), metric.WithDescription("host memory a lane's executables retain (the uploads they captured)"))
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
	observables := []metric.Observable{health, depth, queued, cacheBytes}
	for _, c := range moved {
		observables = append(observables, c)
	}
	s.gauges, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		byHealth := map[Health]int64{}
		for _, l := range s.Lanes() {
			byHealth[l.Health]++
			lane := metric.WithAttributes(attribute.Int("lanes.lane.id", l.ID))
			o.ObserveInt64(depth, int64(l.InFlight), lane)
			o.ObserveInt64(queued, int64(l.Queued), lane)
			o.ObserveInt64(cacheBytes, l.Counters.CacheBytes, lane)
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

// Lanes reports every lane's health and counters.
func (s *Scheduler) Lanes() []LaneStatus {
	out := make([]LaneStatus, len(s.lanes))
	for i, r := range s.lanes {
		out[i] = r.status()
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Stop stops admitting (every call from now on answers ErrStopped at once),
// drains every lane (each waits for its stream, ends every pending
// submission exactly once, trims and releases its stream), then stops the
// actors and their threads. A lane whose kernel hangs is abandoned after
// Config.HangTimeout, its submissions ending indeterminate, so Stop returns
// within about HangTimeout. If ctx ends first, Stop returns ctx.Err() and
// the drain goes on: call Stop again, or wait on Done, to see it finish.
func (s *Scheduler) Stop(ctx context.Context) error {
	s.stopOnce.Do(s.beginStop)
	if ctx == nil {
		ctx = context.Background() // a nil context waits for the drain, as Background would
	}
	select {
	case <-s.stopped:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// refuseStopped answers ErrStopped once Stop has begun: the first check of
// every public call.
func (s *Scheduler) refuseStopped(op string) error {
	if s.stopping.Load() {
		return lanes.Wrap(op, true, ErrStopped)
	}
	return nil
}

// Done is closed once Stop has drained every lane and stopped the actors.
func (s *Scheduler) Done() <-chan struct{} { return s.stopped }

func (s *Scheduler) beginStop() {
	s.stopping.Store(true)
	s.calls.barrier()
	var waits []*call
	for _, ref := range s.lanes {
		c := s.adminFor(ref, nil)
		waits = append(waits, c)
		if ref.dead.Load() {
			s.completeAdmin(c.id, nil, nil) // nothing left to drain
			continue
		}
		s.system.Root.Send(ref.pid, &stopLane{Call: c.id})
	}
	// A lane that cannot answer (its actor stuck outside the lane core)
	// is given up after its hang timeout and a margin.
	giveUp := time.Minute
	if h := s.cfg.HangTimeout; h > 0 {
		giveUp = 2*h + 5*time.Second
	}
	go func() {
		for i, c := range waits {
			ref := s.lanes[i]
			drained := true
			select {
			case <-c.done:
			case <-time.After(giveUp):
				drained = false
			}
			_ = s.system.Root.StopFuture(ref.pid).Wait()
			// A drained lane ended everything it received: what is left
			// never reached it.
			s.endLaneCalls(ref, ErrStopped, drained)
			ref.disp.stop()
		}
		// Batches parked for a move, and anything else still registered.
		for _, id := range s.calls.matching(func(*call) bool { return true }) {
			s.endCall(id, ErrStopped, true)
		}
		s.timers.Wait()
		if s.gauges != nil {
			_ = s.gauges.Unregister()
		}
		s.system.Shutdown()
		close(s.stopped)
	}()
}

// adminFor registers an administrative call to one lane, unless closed is
// set (then it returns nil).
func (s *Scheduler) adminFor(ref *laneRef, closed *atomic.Bool) *call {
	c := &call{admin: true, id: s.nextCall.Add(1), done: make(chan struct{})}
	c.lane.Store(ref)
	if !s.calls.storeUnless(c, closed) {
		return nil
	}
	return c
}
