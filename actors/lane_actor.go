package actors

import (
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"golang.org/x/sys/unix"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/lanes"
)

// laneActor owns one lane: its stream, its lanes.Lane (with the cache and
// catalog inside), and the calls waiting on its fences. Every Receive runs
// on the lane's bound OS thread (threadDispatcher).
type laneActor struct {
	s             *Scheduler
	ref           *laneRef
	self          *actor.PID
	lane          *lanes.Lane
	calls         map[uint64]waiting // fence -> the call waiting on it
	queue         fairQueue          // received batches waiting for room on the stream
	streamEntries int                // entries of the batches on the stream (in calls)
	onStream      map[string]int     // each tenant's submissions on the stream
	lastTenant    string             // the tenant that last sent work
	sharedUntil   time.Time          // until when the lane counts as shared (noteTenant)
	polled        []lanes.Receipt    // the poll's receipts, reused by the next poll
	waiter        hangWaiter         // paces the lane's waits on the device

	delay      time.Duration // current poll back-off; 0 while polling by mailbox
	quick      int           // mailbox polls left before timers take over
	steady     int           // timer polls left at PollMin before backing off
	armed      bool          // a poll is requested from the dispatcher
	serveArmed bool          // a serveQueue message is on its way
	stopped    bool

	progressAt time.Time // the last time a fence ended, or work began on an idle lane

	// Recovery (recovery.go).
	failures []failure   // stream failures in a row, inside Recovery.Window
	rebuild  *time.Timer // the armed rebuild, if any
	retired  bool        // out for good: the device failed
	hung     bool        // the stream hung: its executables are abandoned with it
}

// waiting is a call waiting on a fence, with its tenant (the suspect if
// the fence fails).
type waiting struct {
	call    uint64
	tenant  string
	entries int // the batch's entries, while it holds its place on the stream
}

func (a *laneActor) Receive(ctx actor.Context) {
	if a.s.cfg.ThreadCheck {
		a.ref.noteThread(unix.Gettid())
	}
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.self = ctx.Self()
		self, root := a.self, a.s.system.Root
		a.ref.disp.poll = func() { root.Send(self, pollFences{}) }
		a.waiter = hangWaiter{lane: a.ref.id, timeout: a.s.cfg.HangTimeout}
		if err := a.open(); err != nil {
			a.failed("", fmt.Errorf("%w: open lane %d: %w", lanes.ErrFailed, a.ref.id, err))
		}
		close(a.ref.opened)
	case *submitRequest:
		a.receive(m)
	case pollFences:
		a.armed = false
		a.poll()
	case serveQueue:
		a.serveArmed = false
		a.dispatch(false)
	case forgetTenant:
		if a.lane != nil {
			a.lane.ForgetTenant(m.tenant, m.programs)
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
		if a.ref.stream != nil {
			_ = a.ref.stream.Destroy()
			a.ref.stream = nil
		}
	}
}

// open makes a stream and a fresh lane, and opens preparation.
func (a *laneActor) open() error {
	st, err := a.ref.dev.NewStream()
	if err != nil {
		return err
	}
	epoch := a.s.epoch
	l, err := lanes.New(lanes.Config{ID: uint64(a.ref.id), Device: a.ref.dev, Stream: st, Runtime: a.s.cfg.Runtime,
		Now: func() time.Duration { return time.Since(epoch) }, Waiter: &a.waiter, CacheBytes: a.s.cfg.CacheBytes})
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
	a.serve()
	return nil
}

// serve puts the lane (back) in routing, its last failure still visible.
func (a *laneActor) serve() {
	if a.calls == nil {
		a.calls = map[uint64]waiting{}
		a.onStream = map[string]int{}
	}
	a.ref.publish(a.lane.Counters())
	a.ref.mu.Lock()
	cause := a.ref.cause
	a.ref.mu.Unlock()
	a.ref.setState(HealthHealthy, cause)
}

// serving reports whether the lane takes work.
func (a *laneActor) serving() bool {
	return a.lane != nil && a.lane.State() != lanes.StateFailed && !a.stopped && a.ref.State() == HealthHealthy
}

// receive takes a batch sent to the lane: it goes to the stream now when
// the stream has room and no batch waits, else into the fair queue.
func (a *laneActor) receive(m *submitRequest) {
	if !a.serving() {
		// Not submitted: the scheduler moves it with its tenant.
		a.s.reroute(m, a.ref)
		return
	}
	a.noteTenant(m.Tenant)
	if a.queue.len() == 0 && a.room() && a.mayEnqueue(m.Tenant) {
		a.submit(m)
		return
	}
	a.hold(m)
}

// hold puts work in the fair queue.
func (a *laneActor) hold(w work) {
	a.queue.push(w)
	a.ref.queued.Store(int64(a.queue.len()))
}

// mayEnqueue reports whether a tenant may put another batch on the stream:
// it holds fewer than StreamDepth of the stream's submissions, or the lane
// serves it alone (no other tenant sent it work for sharedWindow), when a
// deeper stream costs no one anything and keeps the device busy.
func (a *laneActor) mayEnqueue(tenant string) bool {
	return a.s.cfg.StreamDepth < 0 || a.onStream[tenant] < a.s.cfg.StreamDepth || !a.shared()
}

// sharedWindow is how long after another tenant's last work a lane counts
// as shared.
const sharedWindow = 50 * time.Millisecond

// noteTenant records that a tenant sent the lane work: a tenant other than
// the last one makes the lane shared for sharedWindow.
func (a *laneActor) noteTenant(tenant string) {
	if tenant != a.lastTenant {
		a.lastTenant = tenant
		a.sharedUntil = time.Now().Add(sharedWindow)
	}
}

// shared reports whether more than one tenant sent the lane work lately.
func (a *laneActor) shared() bool { return time.Now().Before(a.sharedUntil) }

// receiveStaged takes a staged request: a preparation runs now (it is the
// operator's, after everything received before it); a replay takes its
// turn in the fair queue like a batch. A replay waits for its fence on the
// lane's thread, so the queue serves one and then lets the mailbox in
// (serveQueue): batches that arrived meanwhile queue beside the next
// replays instead of waiting behind all of them.
func (a *laneActor) receiveStaged(m *stagedRequest) {
	if m.Prepare || !a.serving() {
		a.dispatch(true)
		a.staged(m)
		return
	}
	a.noteTenant(m.tenant)
	a.hold(m)
	a.serveLater()
}

// serveLater asks the mailbox to serve the fair queue once the messages
// already in it are received.
func (a *laneActor) serveLater() {
	if !a.serveArmed {
		a.serveArmed = true
		a.s.system.Root.Send(a.self, serveQueue{})
	}
}

// room reports whether the stream takes another submission: unless it is
// empty, it holds fewer commands than one batch may have
// (MaxBatchEntries), so that a batch waits behind at most about one
// outsized batch there; each tenant holds at most StreamDepth of its
// submissions (mayEnqueue).
func (a *laneActor) room() bool {
	if a.s.cfg.StreamDepth < 0 || len(a.calls) == 0 {
		return true
	}
	return a.streamEntries < a.s.cfg.MaxBatchEntries
}

// dispatch moves waiting batches to the stream while it has room (all of
// them when all is set: before administration and at a drain, which wait
// for everything received before them).
func (a *laneActor) dispatch(all bool) {
	defer func() { a.ref.queued.Store(int64(a.queue.len())) }()
	for a.queue.len() > 0 && (all || a.room()) {
		var next work
		if all {
			next = a.queue.pop()
		} else if next = a.queue.popFor(a.mayEnqueue); next == nil {
			break // every waiting tenant holds its depth of the stream
		}
		switch m := next.(type) {
		case *submitRequest:
			if !a.serving() {
				a.s.reroute(m, a.ref)
			} else {
				a.submit(m)
			}
		case *stagedRequest:
			a.staged(m)
			if !all && a.queue.len() > 0 {
				a.serveLater() // one replay per turn of the mailbox
				return
			}
		}
	}
}

// requeue hands all waiting work back, not submitted: batches to the
// scheduler, which moves them with their tenants; staged replays to their
// callers, with why (a staged program lives on its lane).
func (a *laneActor) requeue() {
	for _, w := range a.queue.drain() {
		switch m := w.(type) {
		case *submitRequest:
			a.s.reroute(m, a.ref)
		case *stagedRequest:
			a.s.completeAdmin(m.Call, nil, a.unavailable("staged replay"))
		}
	}
	a.ref.queued.Store(0)
}

// submit puts a batch on the lane's stream.
func (a *laneActor) submit(m *submitRequest) {
	if m.ctx != nil && m.ctx.Err() != nil {
		// The caller gave up before the lane took the batch: never run it.
		a.s.complete(m.Call, lanes.Receipt{}, lanes.Wrap("submit", true, m.ctx.Err()))
		return
	}
	sub, err := a.lane.Submit(m.Batch)
	a.ref.publish(a.lane.Counters())
	if err != nil && sub.Fence == 0 {
		// The lane leaves routing before its caller hears of the failure.
		if a.lane.State() == lanes.StateFailed {
			a.failed(m.Tenant, a.lane.Err())
		}
		r := lanes.Receipt{}
		if !cuda.Classify(err).NotSubmitted {
			// Enqueue failed partway: some of the batch may have run.
			r.Outcome, err = lanes.OutcomeIndeterminate, indeterminate("submit", err)
		}
		a.s.complete(m.Call, r, err)
		return
	}
	// Accepted, or refused partway (the caller's error): it ends at its
	// fence either way.
	if len(a.calls) == 0 {
		a.progressAt = time.Now()
	}
	a.calls[sub.Fence] = waiting{call: m.Call, tenant: m.Tenant, entries: m.cost()}
	a.streamEntries += m.cost()
	a.onStream[m.Tenant]++
	a.arm(true)
}

// poll delivers every ended submission and re-arms the next poll.
func (a *laneActor) poll() {
	if a.lane == nil || a.lane.State() == lanes.StateFailed && len(a.calls) == 0 {
		return
	}
	culprit, ended := a.deliverEnded()
	if a.lane.State() == lanes.StateFailed {
		a.failed(culprit, a.lane.Err())
		return
	}
	if ended {
		now := time.Now()
		a.progressAt = now
		a.ref.lastEnd.Store(now.UnixNano())
		a.dispatch(false)
	} else if len(a.calls) > 0 && a.s.cfg.HangTimeout > 0 && time.Since(a.progressAt) > a.s.cfg.HangTimeout {
		a.abandon()
		return
	}
	a.arm(ended)
}

// deliverEnded delivers every submission the lane has seen end, and
// reports whether there was any and the tenant of the first that ended
// indeterminate. The poll's slice is reused.
func (a *laneActor) deliverEnded() (culprit string, ended bool) {
	rs := a.lane.PollInto(a.polled[:0])
	culprit = a.deliver(rs)
	clear(rs) // the callers have their receipts; keep only the array
	a.polled = rs
	return culprit, len(rs) > 0
}

// deliver ends the calls of ended submissions and returns the tenant of
// the first that ended indeterminate: on one stream, the submission whose
// work failed (the ones before it completed).
func (a *laneActor) deliver(rs []lanes.Receipt) (culprit string) {
	for _, r := range rs {
		w, ok := a.calls[r.Fence]
		if !ok {
			continue
		}
		delete(a.calls, r.Fence)
		a.streamEntries -= w.entries
		if a.onStream[w.tenant]--; a.onStream[w.tenant] <= 0 {
			delete(a.onStream, w.tenant)
		}
		var err error
		switch r.Outcome {
		case lanes.OutcomeSucceeded:
			a.failures = a.failures[:0] // the lane works: the failure streak ends
		case lanes.OutcomeRefused:
			err = r.Err
		default:
			if culprit == "" {
				culprit = w.tenant
			}
			err = indeterminate("fence", r.Err)
		}
		a.s.complete(w.call, r, err)
	}
	a.ref.inflightFences.Store(int64(len(a.calls)))
	return culprit
}

// indeterminate is the error of a submission whose effect is unknown: it
// keeps the cause's code and blame, and errors.Is finds both
// ErrIndeterminate and the cause's sentinels.
func indeterminate(op string, cause error) error {
	e := lanes.Wrap(op, false, cause)
	e.Err = &indeterminateError{cause: cause}
	return e
}

// indeterminateError says that a submission's effect is unknown, and why;
// its message does not repeat the package prefix its cause carries.
type indeterminateError struct{ cause error }

func (e *indeterminateError) Error() string   { return "submission indeterminate: " + e.cause.Error() }
func (e *indeterminateError) Unwrap() []error { return []error{ErrIndeterminate, e.cause} }

// steadyPolls is how many timer polls stay at PollMin before backing off:
// work of a few hundred microseconds is polled at full rate.
const steadyPolls = 4

// arm schedules the next poll while fences are pending: first through the
// mailbox a few times (the lowest latency a fence can have), then on timers
// that back off from PollMin to PollMax while nothing completes. Nothing is
// scheduled when nothing is in flight, so an idle lane costs nothing.
func (a *laneActor) arm(progress bool) {
	if len(a.calls) == 0 || a.armed {
		if len(a.calls) == 0 {
			a.delay, a.quick = 0, a.s.cfg.QuickPolls
		}
		return
	}
	if progress {
		a.delay, a.quick, a.steady = 0, a.s.cfg.QuickPolls, steadyPolls
	}
	a.armed = true
	if a.quick > 0 {
		a.quick--
		a.s.system.Root.Send(a.self, pollFences{})
		return
	}
	switch {
	case a.delay == 0 || a.queue.len() > 0:
		a.delay = a.s.cfg.PollMin // work waits for room on the stream: no back-off
	case a.steady > 0:
		a.steady--
	case a.delay < a.s.cfg.PollMax:
		a.delay = min(2*a.delay, a.s.cfg.PollMax)
	}
	a.ref.disp.requestPoll(a.delay)
}

// disarm drops the requested poll.
func (a *laneActor) disarm() {
	a.ref.disp.cancelPoll()
	a.armed = false
}

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
	return lanes.Wrap(op, true, err)
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
	if !a.serving() {
		a.s.completeAdmin(m.Call, nil, a.unavailable(op))
		return
	}
	var res any
	var err error
	if m.Prepare {
		err = a.lane.Prepare(m.Program)
	} else {
		res, err = a.lane.Replay(m.Program, m.Inputs, m.Collect)
	}
	culprit, _ := a.deliverEnded()
	a.ref.staged.Store(a.lane.StagedCounters())
	a.ref.publish(a.lane.Counters())
	if a.lane.State() == lanes.StateFailed {
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
		err = lanes.Wrap(op, true, fmt.Errorf("%w: unknown admin op %d", lanes.ErrInvalidBatch, m.Op))
	}
	if c, _ := a.deliverEnded(); culprit == "" { // administration retires finished fences too
		culprit = c
	}
	if a.lane.State() == lanes.StateFailed {
		a.failed(culprit, a.lane.Err())
	}
	a.s.completeAdmin(m.Call, res, err)
}

// drain ends everything in flight (waiting for the stream within the hang
// timeout), trims and releases the stream.
func (a *laneActor) drain() {
	a.disarm()
	a.cancelRebuild()
	if a.lane != nil && a.lane.State() != lanes.StateFailed {
		a.dispatch(true) // what it received before the stop runs
	}
	a.stopped = true
	if a.lane != nil && a.lane.State() != lanes.StateFailed {
		rs, _, err := a.lane.Synchronize()
		a.deliver(rs)
		if err == nil {
			_, _ = a.lane.Trim()
		}
	}
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
