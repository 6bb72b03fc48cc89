// How a lane actor sees its submissions end: polls paced by a timer,
// receipts delivered to their callers, and what ended indeterminate.

package actors

import (
	"fmt"
	"runtime"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	laneerr "github.com/lanesched/lanes/internal/laneerr"

	lanecore "github.com/lanesched/lanes/internal/lanecore"
	"github.com/lanesched/lanes/lanes"
)

// pollDirect is the dispatcher's timed poll: it runs on the lane's own
// goroutine between mailbox runs (the dispatcher runs nothing else, so the
// actor's state is this goroutine's alone), which saves a mailbox message
// per poll, and a spinning lane polls every few microseconds. A panic is
// not left to cross the goroutine: the lane fails through its mailbox.
func (a *laneActor) pollDirect(root *actor.RootContext, self *actor.PID) {
	defer func() {
		if p := recover(); p != nil {
			root.Send(self, failLane{cause: fmt.Errorf("%w: lane %d: fence poll panicked: %v", lanes.ErrFailed, a.ref.id, p)})
		}
	}()
	a.armed = false
	a.poll()
}

// poll delivers every ended submission and re-arms the next poll.
func (a *laneActor) poll() {
	a.releaseHungPins()
	if a.lane == nil || a.lane.State() == lanecore.StateFailed && len(a.calls) == 0 {
		return
	}
	culprit, ended := a.deliverEnded()
	if a.lane.State() == lanecore.StateFailed {
		a.failed(culprit, a.lane.Err())
		return
	}
	if a.wokeCallers > 0 {
		a.yieldToCallers()
	}
	now := time.Now()
	a.pacer.observe(a.progressAt, now, ended)
	if ended > 0 {
		a.progressAt = now
		a.ref.lastEnd.Store(now.UnixNano())
		a.dispatch(false)
		if len(a.calls) == 0 {
			a.publish() // settled: what a busy lane left stale
		}
	} else if len(a.calls) > 0 && a.s.cfg.HangTimeout > 0 && time.Since(a.progressAt) > a.s.cfg.HangTimeout {
		a.abandon()
		return
	}
	a.arm(ended > 0)
}

// deliverEnded delivers every submission the lane has seen end, and
// reports how many there were and the tenant of the first that ended
// indeterminate. The poll's slice is reused.
func (a *laneActor) deliverEnded() (culprit string, ended int) {
	rs := a.lane.PollInto(a.polled[:0])
	culprit = a.deliver(rs)
	clear(rs) // the callers have their receipts; keep only the array
	a.polled = rs
	return culprit, len(rs)
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
		if a.s.completeStaged(w.call, r, err, w.taken, w.enqueued) {
			a.wokeCallers++
		}
	}
	a.ref.inflightFences.Store(int64(len(a.calls)))
	return culprit
}

// indeterminate is the error of a submission whose effect is unknown: it
// keeps the cause's code and blame, and errors.Is finds both
// ErrIndeterminate and the cause's sentinels.
func indeterminate(op string, cause error) error {
	e := laneerr.Wrap(op, false, cause)
	e.Err = &indeterminateError{cause: cause}
	return e
}

// indeterminateError says that a submission's effect is unknown, and why;
// its message does not repeat the package prefix its cause carries.
type indeterminateError struct{ cause error }

func (e *indeterminateError) Error() string { return "submission indeterminate: " + e.cause.Error() }

func (e *indeterminateError) Unwrap() []error { return []error{ErrIndeterminate, e.cause} }

// arm schedules the next poll while fences are pending. Nothing is
// scheduled when nothing is in flight, so an idle lane costs nothing.
//
// With a spin window (Config.Spin above 0) and a fence ended or work begun
// within it, the next poll is due in spinPollEvery and the lane's thread
// spins until then, as a hand-written loop spins on its event. With Spin
// 0 (the default), the lane polls when its oldest fence is due, from what
// it has learned of its submissions (pacedPoll), and spins for it only
// from shortly before then, and only with a place among the process's
// spinning lanes. Otherwise, and past a fence's due time: first through
// the mailbox a few times, then on timers that back off from PollMin to
// PollMax while nothing completes.
func (a *laneActor) arm(progress bool) {
	if len(a.calls) == 0 || a.armed {
		if len(a.calls) == 0 {
			a.delay, a.quick = 0, a.s.cfg.QuickPolls
			a.releaseSpin()
		}
		return
	}
	if progress {
		a.delay, a.quick, a.steady = 0, a.s.cfg.QuickPolls, steadyPolls
	}
	a.armed = true
	spin := a.s.cfg.Spin
	if spin > 0 && time.Since(a.progressAt) < spin {
		// Spinning: poll again almost at once; the dispatcher spins
		// between polls and runs new work as it arrives.
		a.ref.disp.requestPoll(spinPollEvery, false)
		return
	}
	if spin == 0 && a.pacedPoll() {
		return
	}
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
	a.ref.disp.requestPoll(a.delay, false)
}

// pacedPoll requests the next poll for when the oldest fence is due: the
// lane's last progress plus the time one submission holds its stream, as
// the pacer learned it. A lane with a place among the spinning lanes
// spins, polling every spinPollEvery, from timerSlack and spinLead before
// the fence is due until it ends or spinGrace past its due time, and
// parks on a timer (no longer than PollMax) before that; a lane without
// one parks until the due time. It reports false when there is nothing to
// go by (nothing learned yet, or submissions shorter than a timer's
// resolution) or the fence is overdue: the back-off takes over.
func (a *laneActor) pacedPoll() bool {
	est := a.pacer.est
	if est < quickBelow {
		return false
	}
	left := time.Until(a.progressAt.Add(est))
	if spinBudget > 0 {
		if early := left - timerSlack - spinLead; early > 0 {
			a.releaseSpin()
			a.ref.disp.requestPoll(min(early, a.s.cfg.PollMax), false)
			return true
		}
		if left > -a.pacer.spinGrace() && a.holdSpin() {
			a.ref.disp.requestPoll(spinPollEvery, true)
			return true
		}
	}
	if left > 0 {
		a.ref.disp.requestPoll(min(left, a.s.cfg.PollMax), false)
		return true
	}
	a.releaseSpin()
	a.quick = 0 // overdue: polls through the mailbox would find nothing sooner
	return false
}

// holdSpin reports whether the lane holds a place among the spinning
// lanes, taking one if it is free.
func (a *laneActor) holdSpin() bool {
	if !a.spinHeld {
		a.spinHeld = takeSpin()
	}
	return a.spinHeld
}

// releaseSpin gives back the lane's place among the spinning lanes.
func (a *laneActor) releaseSpin() {
	if a.spinHeld {
		a.spinHeld = false
		giveSpin()
	}
}

// spinPollEvery is how often a spinning lane polls its oldest fence (a
// cuEventQuery on the GPU, well under a microsecond).
const spinPollEvery = 2 * time.Microsecond

// disarm drops the requested poll.
func (a *laneActor) disarm() {
	a.ref.disp.cancelPoll()
	a.armed = false
	a.releaseSpin()
	a.pacer.forget() // a rebuilt lane learns its new stream afresh
}

// yieldToCallers lets the callers this lane just woke run at once. A
// caller waiting on Pending.Done (Submit, say) is readied onto the
// processor of the goroutine that ended its step: this lane's, which the
// lane's thread keeps while it spins, so the caller would wait to be
// stolen. Yielding hands that processor to another thread, which runs
// the caller next, and the lane's thread takes one back (two thread
// wakes, a few µs of the lane's): with a goroutine per client waiting for
// each step's end, 8 lanes on the H200 served 36% more steps
// (docs/measurements/2026-12-01-serving-loop.txt), and 1 lane, whose
// caller runs while the GPU works, the same. A step ended through
// SubmitNotify's callback wakes no one and costs no yield.
func (a *laneActor) yieldToCallers() {
	a.wokeCallers = 0
	runtime.Gosched()
}
