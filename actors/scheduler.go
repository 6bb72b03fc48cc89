// The Scheduler: Start, the calls every submission and administrative
// request becomes, and how each ends exactly once.

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
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/internal/backend"
	laneerr "github.com/lanesched/lanes/internal/laneerr"
	"github.com/lanesched/lanes/internal/notstarted"
	"github.com/lanesched/lanes/internal/recording"
	"github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/programs"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
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
	unwatch  func() bool  // stops watching ctx (watch), when it can end

	start  time.Time         // host time the submission was admitted
	parent trace.SpanContext // the caller's span, for the telemetry

	done    chan struct{}
	ended   func() // SubmitNotify's, after done is closed
	receipt lanes.Receipt
	result  any
	err     error
}

// Scheduler routes tenants' batches to lane actors. It is safe for
// concurrent use. Use the *Scheduler that Start returns: a nil or zero
// Scheduler serves nothing (its calls answer ErrStopped, its reports are
// zero, Done is closed).
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
	// lanesFull is route's refusal when every healthy lane holds three
	// times MaxInFlightPerLane: made once, since thousands of tenants
	// beyond what the lanes admit meet it at every try.
	lanesFull error
	stallMu   sync.Mutex
	stalls    map[cuda.Device]*stall // the last device-wide stall of each device
	waitMu    sync.Mutex
	waiting   map[*tenantState]struct{} // tenants whose parked batches wait for a lane to recover

	ownMu        sync.RWMutex
	ownGen       uint64                                // bumped by every change under ownMu (see OwnershipMemo)
	owners       map[handleKey]string                  // buffer or host buffer -> its tenant, or shared
	anyShared    bool                                  // something was shared once (ownMu)
	owned        map[string]map[handleKey]func() error // tenant -> what it owns, with its liveness check (for Forget and sweeps)
	programs     map[programs.ID]*programClaim         // program -> its owner and registration
	programCount map[string]int                        // tenant -> its program names in programs

	sweptFrees        uint64        // the devices' free counts at the last ownership sweep (janitor)
	faults            atomic.Uint64 // lane failures attributed to a tenant
	forgottenLaunches atomic.Uint64 // launches of forgotten tenants' ended submissions
	fills             atomic.Uint64 // FillShared calls made, naming each one's tenant

	nextCall atomic.Uint64
	timers   sync.WaitGroup                // rebuild timers armed
	epoch    time.Time                     // origin of the lanes' host clock
	freers   map[backend.Device]*hostFreer // each device's freer of Read's staging (made at start, read-only)
	devs     []backend.Device              // cfg.Devices as the lanes drive them (Config.defaults checked each is one)
	rec      recording.Sink                // cfg.Telemetry as the scheduler hands it work (nil-safe)
	gauges   metric.Registration
}

// Start spawns LanesPerDevice lane actors per device, each a goroutine
// bound to its device for every run, with its own stream, cache and
// catalog, and returns once
// every lane has opened its stream (or failed to, and is recovering).
func Start(ctx context.Context, cfg Config) (*Scheduler, error) {
	if ctx == nil {
		return nil, laneerr.Wrap("start", true, errNilContext)
	}
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s := &Scheduler{cfg: cfg, epoch: time.Now(), stopped: make(chan struct{}), waiting: map[*tenantState]struct{}{}, stalls: map[cuda.Device]*stall{}, owners: map[handleKey]string{}, owned: map[string]map[handleKey]func() error{}, programs: map[programs.ID]*programClaim{}, programCount: map[string]int{}}
	s.lanesFull = fmt.Errorf("%w: every healthy lane has three times its %d submissions in flight; retry later (or raise Config.MaxInFlightPerLane)", ErrOverloaded, cfg.MaxInFlightPerLane)
	s.system = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return logger }))
	root := s.system.Root.WithGuardian(laneStrategy{s})
	// Every lane is made before any actor starts: the supervisor (a panic
	// while a lane opens) reads s.lanes, and finds a lane by its actor's
	// name, set before the actor runs.
	s.freers = map[backend.Device]*hostFreer{}
	for _, d := range cfg.Devices {
		dev := backend.Must(d) // Config.defaults checked it is one
		s.devs = append(s.devs, dev)
		s.freers[dev] = &hostFreer{dev: dev}
	}
	s.rec = recording.Of(cfg.Telemetry)
	for di, dev := range s.devs {
		for range cfg.LanesPerDevice {
			id := len(s.lanes)
			ref := &laneRef{id: id, name: fmt.Sprintf("lane-%d", id), device: di, dev: dev, instance: dev.Info().Instance, opened: make(chan struct{})}
			disp, err := newThreadDispatcher(dev, cfg.Throughput, max(cfg.Spin, 0))
			if err != nil {
				s.abort()
				return nil, laneerr.Wrap("start", true, fmt.Errorf("%w: bind lane %d to device %d: %w", lanes.ErrFailed, ref.id, di, err))
			}
			ref.disp = disp
			s.lanes = append(s.lanes, ref)
		}
	}
	for _, ref := range s.lanes {
		props := actor.PropsFromProducer(func() actor.Actor { return &laneActor{s: s, ref: ref, queue: fairQueue{quantum: s.cfg.Quantum}} },
			actor.WithDispatcher(ref.disp), actor.WithMailbox(actor.Unbounded()))
		pid, err := root.SpawnNamed(props, ref.name)
		if err != nil {
			s.abort()
			return nil, laneerr.Wrap("start", true, fmt.Errorf("%w: spawn lane %d: %w", lanes.ErrFailed, ref.id, err))
		}
		ref.pid = pid
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
			return nil, laneerr.Wrap("start", true, ctx.Err())
		}
	}
	go s.janitor()
	return s, nil
}

// abort tears down a half-started scheduler.
func (s *Scheduler) abort() {
	for _, ref := range s.lanes {
		if ref.pid != nil {
			_ = s.system.Root.StopFuture(ref.pid).Wait()
		}
		ref.disp.stop()
	}
	s.system.Shutdown()
}

// complete ends a call exactly once: a second completion of the same call
// finds nothing and is ignored. The receipt learns its tenant and lane.
func (s *Scheduler) complete(id uint64, r lanes.Receipt, err error) {
	s.completeStaged(id, r, err, time.Time{}, time.Time{})
}

// completeStaged is complete for a submission a lane took at taken and had
// enqueued at enqueued (the telemetry's stages). It reports whether it woke
// a caller that waits on Done (no ended callback): see yieldToCallers.
func (s *Scheduler) completeStaged(id uint64, r lanes.Receipt, err error, taken, enqueued time.Time) (woke bool) {
	c := s.calls.take(id)
	if c == nil {
		return false
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
	if c.unwatch != nil {
		c.unwatch()
	}
	s.release(c, r.Attribution.Launches)
	if c.claim != nil {
		s.settleClaim(*c.claim, err == nil)
	}
	if s.cfg.Telemetry != nil && !c.admin {
		// The recorder runs later: hand it copies, not the caller's batch.
		sub := recording.Submission{Tenant: c.tenant, Lane: r.Lane, Device: -1, Entries: len(c.batch.Entries), Path: c.batch.Path,
			Timing: c.batch.Timing, Parent: c.parent, Start: c.start, Taken: taken, Enqueued: enqueued, End: time.Now(),
			Anchor: s.epoch, Receipt: r, Err: err, SegmentNodes: segmentNodes(c.batch.Entries, r.Attribution.Segments)}
		if lane != nil {
			sub.Device, sub.DeviceName = lane.device, lane.dev.Info().Name
		}
		s.rec.Submission(context.Background(), sub)
	}
	close(c.done)
	if c.ended != nil {
		c.ended()
		return false
	}
	return true
}

// segmentNodes is each replayed segment's plan-node range, [first, one
// past the last), or {-1, -1} where its entries carry none.
func segmentNodes(entries []lanes.Entry, segs []lanes.SegmentRecord) [][2]int {
	if len(segs) == 0 {
		return nil
	}
	out := make([][2]int, len(segs))
	for i, seg := range segs {
		out[i] = [2]int{-1, -1}
		if seg.Start < seg.End && seg.End <= len(entries) {
			if lo, hi := entries[seg.Start].Node, entries[seg.End-1].Node; lo >= 0 && hi >= lo {
				out[i] = [2]int{lo, hi + 1}
			}
		}
	}
	return out
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

// ClockOrigin is when the lanes' host clock started: a receipt's
// HostStart is a duration on that clock, so ClockOrigin().Add(HostStart)
// is when its start event was recorded.
func (s *Scheduler) ClockOrigin() time.Time {
	if s.unstarted() {
		return time.Time{}
	}
	return s.epoch
}

// Runtime is the runtime fingerprint of the lanes' programs
// (Config.Runtime, defaulted): a program's id must carry it
// (programs.ID.Runtime), or the lane refuses it as another runtime's.
func (s *Scheduler) Runtime() string {
	if s.unstarted() {
		return ""
	}
	return s.cfg.Runtime
}

// batchBounds are the most commands and upload bytes one batch may carry
// (Config.MaxBatchEntries and MaxBatchBytes, defaulted): a lane host
// tells its fronts, which refuse a larger batch as the scheduler does.
func (s *Scheduler) batchBounds() (entries int, bytes int64) {
	if s.unstarted() {
		return 0, 0
	}
	return s.cfg.MaxBatchEntries, s.cfg.MaxBatchBytes
}

// Lanes reports every lane's health and counters.
func (s *Scheduler) Lanes() []LaneStatus {
	if s.unstarted() {
		return nil
	}
	out := make([]LaneStatus, len(s.lanes))
	for i, r := range s.lanes {
		out[i] = r.status()
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
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

// errUnstarted answers every call on a Scheduler that Start did not
// return (nil or zero): errors.Is ErrStopped, saying what to use.
var errUnstarted error = &notstarted.Error{Msg: "actors: this Scheduler was not started: use the *Scheduler that actors.Start returns", Stopped: ErrStopped}

// unstarted reports whether s is nil or zero: Start made neither.
func (s *Scheduler) unstarted() bool { return s == nil || s.system == nil }
