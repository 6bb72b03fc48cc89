package actors

import (
	"errors"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"golang.org/x/sys/unix"

	"github.com/lanesched/lanes/lanes"
)

// laneActor owns one lane: its stream, its lanes.Lane (with the cache and
// catalog inside), and the calls waiting on its fences. Every Receive runs
// on the lane's bound OS thread (threadDispatcher).
type laneActor struct {
	s      *Scheduler
	ref    *laneRef
	self   *actor.PID
	lane   *lanes.Lane
	calls  map[uint64]uint64 // fence -> call id
	polled []lanes.Receipt   // the poll's receipts, reused by the next poll

	delay   time.Duration // current poll back-off; 0 while polling by mailbox
	quick   int           // mailbox polls left before timers take over
	steady  int           // timer polls left at PollMin before backing off
	armed   bool          // a poll is requested from the dispatcher
	stopped bool

	progressAt time.Time // the last time a fence ended, or work began on an idle lane
	hung       bool      // a fence outlived HangTimeout: the stream is abandoned
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
		if err := a.open(); err != nil {
			a.quarantine(fmt.Errorf("open lane: %w", err))
		}
	case *SubmitRequest:
		a.submit(m)
	case pollFences:
		a.armed = false
		a.poll()
	case *AdminRequest:
		a.admin(m)
	case *StagedRequest:
		a.staged(m)
	case failLane:
		a.quarantine(fmt.Errorf("%w: %s", lanes.ErrFailed, m.Reason))
	case rebuildLane:
		a.rebuild()
	case *stopLane:
		a.drain()
		a.s.completeAdmin(m.Call, nil, nil)
		ctx.Stop(a.self)
	case *actor.Stopping:
		a.disarm()
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
		Now: func() time.Duration { return time.Since(epoch) }})
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
	a.lane, a.calls = l, map[uint64]uint64{}
	a.ref.stream = st
	a.ref.setState(Healthy, nil)
	return nil
}

func (a *laneActor) submit(m *SubmitRequest) {
	if a.lane == nil || a.lane.State() == lanes.Failed || a.stopped {
		// Not submitted: the scheduler sends it to a healthy lane, once.
		a.s.reroute(m, a.ref)
		return
	}
	sub, err := a.lane.Submit(m.Batch)
	if err != nil {
		a.ref.publish(a.lane.Counters())
		// The lane leaves routing before its caller hears of the failure.
		if a.lane.State() == lanes.Failed {
			a.quarantine(a.lane.Err())
		}
		a.s.complete(m.Call, lanes.Receipt{}, err)
		return
	}
	if len(a.calls) == 0 {
		a.progressAt = time.Now()
	}
	a.calls[sub.Fence] = m.Call
	a.ref.publish(a.lane.Counters())
	a.arm(true)
}

// poll delivers every ended submission and re-arms the next poll.
func (a *laneActor) poll() {
	if a.lane == nil {
		return
	}
	ended := a.deliverEnded()
	if a.lane.State() == lanes.Failed {
		a.quarantine(a.lane.Err())
		return
	}
	if ended {
		a.progressAt = time.Now()
	} else if len(a.calls) > 0 && a.s.cfg.HangTimeout > 0 && time.Since(a.progressAt) > a.s.cfg.HangTimeout {
		a.abandon()
		return
	}
	a.arm(ended)
}

// deliverEnded delivers every submission the lane has seen end and reports
// whether there was any. The poll's slice is reused.
func (a *laneActor) deliverEnded() bool {
	rs := a.lane.PollInto(a.polled[:0])
	a.deliver(rs)
	clear(rs) // the callers have their receipts; keep only the array
	a.polled = rs
	return len(rs) > 0
}

func (a *laneActor) deliver(rs []lanes.Receipt) {
	for _, r := range rs {
		call, ok := a.calls[r.Fence]
		if !ok {
			continue
		}
		delete(a.calls, r.Fence)
		var err error
		if r.Outcome != lanes.Succeeded {
			err = &lanes.Error{Op: "fence", Code: r.Report.Code, Sticky: r.Report.Sticky, Err: fmt.Errorf("%w: %v", ErrIndeterminate, r.Err)}
		}
		a.s.complete(call, r, err)
	}
	a.ref.inflightFences.Store(int64(len(a.calls)))
}

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
	case a.delay == 0:
		a.delay = a.s.cfg.PollMin
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

// quarantine takes the lane out of routing, ends what is in flight, and
// tells the scheduler (which quarantines the device's other lanes on a
// sticky error and decides about a rebuild).
func (a *laneActor) quarantine(cause error) {
	if a.hung || a.ref.State() == Quarantined && a.lane != nil && len(a.calls) == 0 {
		return
	}
	a.ref.setState(Quarantined, cause)
	if a.lane != nil {
		// Synchronize ends every pending submission: on a healthy device
		// they complete; on a poisoned one they end indeterminate.
		rs, _, _ := a.lane.Synchronize()
		a.deliver(rs)
		a.disarm()
	}
	a.s.laneQuarantined(a.ref, cause)
}

// abandon gives up on a stream whose oldest fence outlived HangTimeout (a
// kernel that never finishes): every waiting submission ends indeterminate
// now, the lane leaves routing, and nothing ever blocks on the stream again.
func (a *laneActor) abandon() {
	a.hung = true
	a.disarm()
	cause := fmt.Errorf("%w: no fence of lane %d ended for %v; the stream is abandoned", ErrHung, a.ref.id, a.s.cfg.HangTimeout)
	for fence, call := range a.calls {
		a.s.complete(call, lanes.Receipt{Fence: fence, Outcome: lanes.Indeterminate},
			&lanes.Error{Op: "fence", Code: "lane_hung", Err: fmt.Errorf("%w: %v", ErrIndeterminate, cause)})
	}
	a.calls = map[uint64]uint64{}
	a.ref.inflightFences.Store(0)
	a.ref.setState(Quarantined, cause)
	a.s.laneQuarantined(a.ref, cause)
}

// rebuild starts the lane over on a fresh stream and cache.
func (a *laneActor) rebuild() {
	if a.ref.State() != Quarantined || a.ref.dev.Err() != nil || a.stopped || a.hung {
		return
	}
	if a.ref.stream != nil {
		_ = a.ref.stream.Destroy()
	}
	if err := a.open(); err != nil {
		a.ref.setState(Quarantined, err)
		return
	}
}

// staged prepares or replays a staged program; the replay waits on the
// lane's thread for its fence (outputs are read back).
func (a *laneActor) staged(m *StagedRequest) {
	if a.lane == nil || a.lane.State() == lanes.Failed || a.hung {
		a.s.completeAdmin(m.Call, nil, fmt.Errorf("%w: lane %d cannot run a staged program", lanes.ErrFailed, a.ref.id))
		return
	}
	var res any
	var err error
	if m.Prepare {
		err = a.lane.Prepare(m.Program)
	} else {
		res, err = a.lane.Replay(m.Program, m.Inputs, m.Collect)
	}
	a.deliverEnded()
	a.ref.staged.Store(a.lane.StagedCounters())
	a.ref.publish(a.lane.Counters())
	a.s.completeAdmin(m.Call, res, err)
	if a.lane.State() == lanes.Failed {
		a.quarantine(a.lane.Err())
	}
}

func (a *laneActor) admin(m *AdminRequest) {
	if a.hung {
		a.s.completeAdmin(m.Call, nil, fmt.Errorf("%w: lane %d", ErrHung, a.ref.id))
		return
	}
	if a.lane == nil {
		a.s.completeAdmin(m.Call, nil, fmt.Errorf("%w: lane %d has no stream", lanes.ErrFailed, a.ref.id))
		return
	}
	var res any
	var err error
	switch m.Op {
	case OpConfigure:
		res, err = a.lane.Configure(m.Capacity)
	case OpSeal:
		res, err = a.lane.Seal()
	case OpTrim:
		res, err = a.lane.Trim()
	case OpCatalog:
		res, err = a.lane.Catalog()
	case OpPreparation:
		res, err = a.lane.Preparation()
	case OpSynchronize:
		var rs []lanes.Receipt
		rs, _, err = a.lane.Synchronize()
		a.deliver(rs)
	default:
		err = fmt.Errorf("%w: unknown admin op %d", lanes.ErrInvalidBatch, m.Op)
	}
	a.deliverEnded() // administration retires finished fences too
	a.s.completeAdmin(m.Call, res, err)
	if a.lane.State() == lanes.Failed {
		a.quarantine(a.lane.Err())
	}
}

// drain ends everything in flight, trims and releases the stream.
func (a *laneActor) drain() {
	a.stopped = true
	a.disarm()
	if a.lane == nil || a.hung {
		a.ref.setState(Stopped, nil)
		return
	}
	rs, _, err := a.lane.Synchronize()
	a.deliver(rs)
	for fence, call := range a.calls { // cannot happen: synchronize ends every fence
		a.s.complete(call, lanes.Receipt{Fence: fence, Outcome: lanes.Indeterminate}, errors.Join(ErrStopped, err))
	}
	a.calls = map[uint64]uint64{}
	if err == nil {
		_, _ = a.lane.Trim()
	}
	if a.ref.stream != nil {
		_ = a.ref.stream.Destroy()
		a.ref.stream = nil
	}
	a.ref.setState(Stopped, nil)
}
