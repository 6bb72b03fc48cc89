// The lane actor: the goroutine on a bound thread that alone owns one lane
// (its stream, cache and catalog); its mailbox loop, administration,
// staged replays and drain.

package actors

import (
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	laneerr "github.com/lanesched/lanes/internal/laneerr"

	lanecore "github.com/lanesched/lanes/internal/lanecore"

	execcache "github.com/lanesched/lanes/internal/execcache"
	"github.com/lanesched/lanes/lanes"
	"golang.org/x/sys/unix"
)

// laneActor owns one lane: its stream, its lanecore.Lane (with the cache and
// catalog inside), and the calls waiting on its fences. Every Receive runs
// on the lane's goroutine, its thread bound to the device for the run
// (threadDispatcher).
type laneActor struct {
	s             *Scheduler
	ref           *laneRef
	self          *actor.PID
	lane          *lanecore.Lane
	calls         map[uint64]waiting // fence -> the call waiting on it
	queue         fairQueue          // received batches waiting for room on the stream
	streamEntries int                // entries of the batches on the stream (in calls)
	onStream      map[string]int     // each tenant's submissions on the stream
	wantCapture   map[string]bool    // tenants whose last batch found the stream busy for its capture (capture.go)
	lastTenant    string             // the tenant that last sent work
	sharedUntil   time.Time          // until when the lane counts as shared (noteTenant)
	sharedThrough uint64             // and until it has received this many batches
	polled        []lanes.Receipt    // the poll's receipts, reused by the next poll
	waiter        hangWaiter         // paces the lane's waits on the device

	delay      time.Duration // current poll back-off; 0 while polling by mailbox
	quick      int           // mailbox polls left before timers take over
	steady     int           // timer polls left at PollMin before backing off
	armed      bool          // a poll is requested from the dispatcher
	pacer      fencePacer    // when the oldest fence is due (pacer.go)
	spinHeld   bool          // the lane holds a place among the spinning lanes
	serveArmed bool          // a serveQueue message is on its way
	stopped    bool

	progressAt  time.Time // the last time a fence ended, or work began on an idle lane
	wokeCallers int       // callers waiting on Done readied since the last poll (yieldToCallers)

	// Recovery (recovery.go).
	failures []failure   // stream failures in a row, inside Recovery.Window
	rebuild  *time.Timer // the armed rebuild, if any
	retired  bool        // out for good: the device failed
	hung     bool        // the stream hung: its executables are abandoned with it
	// Lanes abandoned after a hang whose pinned input buffers wait for
	// their streams to drain (pins.go).
	hungLanes []hungPins
}

// waiting is a call waiting on a fence, with its tenant (the suspect if
// the fence fails).
type waiting struct {
	call    uint64
	tenant  string
	entries int // the batch's entries, while it holds its place on the stream
	// taken and enqueued are when the lane took the batch and when it had
	// enqueued it (with telemetry on; else zero).
	taken, enqueued time.Time
}

func (a *laneActor) Receive(ctx actor.Context) {
	if a.s.cfg.ThreadCheck {
		a.ref.noteThread(unix.Gettid())
	}
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.self = ctx.Self()
		self, root := a.self, a.s.system.Root
		a.ref.disp.poll = func() { a.pollDirect(root, self) }
		a.waiter = hangWaiter{lane: a.ref.id, timeout: a.s.cfg.HangTimeout}
		if err := a.open(); err != nil {
			a.failed("", fmt.Errorf("%w: open lane %d: %w", lanes.ErrFailed, a.ref.id, err))
		}
		a.ref.markOpened() // after a panic in open, the supervisor marks it (laneStrategy)
	case *submitRequest:
		a.receive(m)
	case withdrawRequest:
		a.withdraw(m.call)
	case pollFences:
		a.armed = false
		a.poll()
	case serveQueue:
		a.serveArmed = false
		a.dispatch(false)
	case forgetTenant:
		delete(a.wantCapture, m.tenant)
		if a.lane != nil {
			a.lane.ForgetTenant(m.tenant, m.programs)
			a.ref.tenantBytesStale = true // its executables left, or are no one's now: publish at once
			a.ref.publish(a.lane.Counters(), a.lane.DeviceBytesByTenant, true)
		}
	case *adminRequest:
		a.admin(m)
	case *stagedRequest:
		a.receiveStaged(m)
	case failLane:
		a.retire(m.cause)
	case rebuildLane:
		a.rebuildNow()
	case *stopLane:
		a.drain()
		a.s.completeAdmin(m.Call, nil, nil)
		ctx.Stop(a.self)
	case *actor.Stopping:
		// Normally drain released the stream; when Start gave up (its
		// context ended) the lane stops without a drain: release it here.
		a.disarm()
		a.cancelRebuild()
		a.releasePins()
		if a.ref.stream != nil {
			_ = a.ref.stream.Destroy()
			a.ref.stream = nil
		}
	}
}

// open makes a stream and a fresh lane, opens preparation, and captures
// recipes again (a predecessor's, most replayed first) within
// Config.WarmRebuild before the lane takes traffic.
func (a *laneActor) open(recipes ...execcache.Recipe) error {
	st, err := a.ref.dev.NewStream()
	if err != nil {
		return err
	}
	epoch := a.s.epoch
	l, err := lanecore.New(lanecore.Config{ID: a.ref.id, Device: a.ref.dev, Stream: st, Runtime: a.s.cfg.Runtime,
		Now: func() time.Duration { return time.Since(epoch) }, Waiter: &a.waiter, CacheBytes: a.s.cfg.CacheBytes, CacheDeviceBytes: a.s.cfg.CacheDeviceBytes, PinBytes: a.s.cfg.PinBytes, Libraries: a.s.cfg.Libraries, OnWorkspace: a.s.ownWorkspace})
	if err != nil {
		_ = st.Destroy()
		return err
	}
	if a.s.cfg.CacheCapacity > 0 {
		if _, err := l.Configure(a.s.cfg.CacheCapacity); err != nil {
			_ = st.Destroy()
			return err
		}
	}
	a.lane = l
	a.ref.stream = st
	if len(recipes) > 0 && a.s.cfg.WarmRebuild > 0 && a.s.cfg.CacheCapacity > 0 {
		if _, err := l.Warm(recipes, a.s.cfg.WarmRebuild); err != nil {
			a.lane, a.ref.stream = nil, nil
			_ = st.Destroy()
			return err
		}
	}
	a.serve()
	return nil
}

// serve puts the lane (back) in routing, its last failure still visible.
func (a *laneActor) serve() {
	if a.calls == nil {
		a.calls = map[uint64]waiting{}
		a.onStream = map[string]int{}
		a.wantCapture = map[string]bool{}
	}
	a.publish()
	a.ref.mu.Lock()
	cause := a.ref.cause
	a.ref.mu.Unlock()
	a.ref.setState(HealthServing, cause)
}

// serving reports whether the lane takes work.
func (a *laneActor) serving() bool {
	return a.lane != nil && a.lane.State() != lanecore.StateFailed && !a.stopped && a.ref.State() == HealthServing
}

// sharedWindow is how long after another tenant's last work a lane counts
// as shared, and sharedBatches for how many batches it receives after it:
// both must pass. The count keeps a lane that a flood's batches reach
// slowly (a loaded machine, a virtual clock) shared as the clock alone
// would not: a tenant beside the flood waits behind its StreamDepth, not
// behind a stream the flood filled once the window ran out.
const (
	sharedWindow  = 50 * time.Millisecond
	sharedBatches = 64
)

// steadyPolls is how many timer polls stay at PollMin before backing off:
// work of a few hundred microseconds is polled at full rate.
const steadyPolls = 4

// unavailable is an administrative call's answer from a lane out of
// routing.
func (a *laneActor) unavailable(op string) error {
	a.ref.mu.Lock()
	cause := a.ref.cause
	a.ref.mu.Unlock()
	err := fmt.Errorf("%w: lane %d is %v", lanes.ErrFailed, a.ref.id, a.ref.State())
	if cause != nil {
		err = fmt.Errorf("%w: lane %d is %v: %w", lanes.ErrFailed, a.ref.id, a.ref.State(), cause)
	}
	return laneerr.Wrap(op, true, err)
}

// staged prepares or replays a staged program; the replay waits on the
// lane's thread for its fence (outputs are read back), within the hang
// timeout.
func (a *laneActor) staged(m *stagedRequest) {
	op := "staged replay"
	if m.Prepare {
		op = "prepare staged"
	}
	if !m.Prepare && !m.take() {
		a.s.completeAdmin(m.Call, nil, m.abandoned())
		return
	}
	a.releaseHungPins() // the buffers a drained hung stream held are free to pin again
	if !a.serving() {
		a.s.completeAdmin(m.Call, nil, a.unavailable(op))
		return
	}
	var res any
	var err error
	switch {
	case m.Prepare:
		err = a.lane.Prepare(m.Program)
	case m.Repeat:
		res, err = a.lane.Repeat(m.Program, m.Outputs)
	case m.Into:
		res, err = a.lane.ReplayInto(m.Program, m.Inputs, m.Outputs)
	default:
		res, err = a.lane.Replay(m.Program, m.Inputs, m.Collect)
	}
	culprit, _ := a.deliverEnded()
	a.ref.staged.Store(a.lane.StagedCounters())
	a.publish()
	if a.lane.State() == lanecore.StateFailed {
		a.failed(culprit, a.lane.Err())
	}
	a.s.completeAdmin(m.Call, res, err)
}

func (a *laneActor) admin(m *adminRequest) {
	op := m.Op.String()
	if !a.serving() {
		a.s.completeAdmin(m.Call, nil, a.unavailable(op))
		return
	}
	a.dispatch(true) // it sees everything the lane received before it
	var res any
	var err error
	var culprit string
	switch m.Op {
	case opConfigure:
		res, err = a.lane.Configure(m.Capacity)
	case opSeal:
		res, err = a.lane.Seal()
	case opTrim:
		res, err = a.lane.Trim()
	case opCatalog:
		res, err = a.lane.Catalog()
	case opPreparation:
		res, err = a.lane.Preparation()
	case opSynchronize:
		var rs []lanes.Receipt
		rs, _, err = a.lane.Synchronize()
		culprit = a.deliver(rs)
	default:
		err = laneerr.Wrap(op, true, fmt.Errorf("%w: unknown admin op %d", lanes.ErrInvalidBatch, m.Op))
	}
	if c, _ := a.deliverEnded(); culprit == "" { // administration retires finished fences too
		culprit = c
	}
	a.publish() // what a trim or seal released, in the status before the caller hears back
	if a.lane.State() == lanecore.StateFailed {
		a.failed(culprit, a.lane.Err())
	}
	a.s.completeAdmin(m.Call, res, err)
}

// drain ends everything in flight (waiting for the stream within the hang
// timeout), trims and releases the stream.
func (a *laneActor) drain() {
	a.disarm()
	a.cancelRebuild()
	if a.lane != nil && a.lane.State() != lanecore.StateFailed {
		a.dispatch(true) // what it received before the stop runs
	}
	a.stopped = true
	if a.lane != nil && a.lane.State() != lanecore.StateFailed {
		rs, _, err := a.lane.Synchronize()
		a.deliver(rs)
		if err == nil {
			_, _ = a.lane.Trim()
		}
	}
	a.releasePins()
	a.endRemaining(ErrStopped)
	if a.ref.stream != nil {
		_ = a.ref.stream.Destroy()
		a.ref.stream = nil
	}
	a.ref.setState(HealthStopped, nil)
}

// endRemaining ends every call still waiting on a fence, indeterminate: the
// lane will not see their fences again.
func (a *laneActor) endRemaining(cause error) {
	a.requeue()
	for fence, w := range a.calls {
		a.s.complete(w.call, lanes.Receipt{Fence: fence, Outcome: lanes.OutcomeIndeterminate}, indeterminate("fence", cause))
	}
	clear(a.calls)
	clear(a.onStream)
	a.streamEntries = 0
	a.ref.inflightFences.Store(0)
}

// publish makes the lane's counters visible to status.
func (a *laneActor) publish() {
	a.ref.publish(a.lane.Counters(), a.lane.DeviceBytesByTenant, len(a.calls) == 0)
}
