package actors

// Recovery: what a lane does when its stream fails, the one place where
// blame decides the consequence (the table is in doc.go).

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/lanes"
)

// failed reacts to the lane's failure (the lane core is Failed, or was
// never opened): the lane leaves routing, ends what it had in flight (its
// stream drained within the hang timeout, unless it hung), the tenant whose
// submission failed it takes a strike, and the blame decides the rest: a
// device's error takes every lane of the device out for good; a stream's
// recovers the lane on a fresh stream after a backoff, unless it keeps
// failing (Config.Recovery). culprit is "" when no submission is to blame.
func (a *laneActor) failed(culprit string, cause error) {
	a.ref.setState(Recovering, cause)
	a.disarm()
	if a.lane != nil {
		var rs []lanes.Receipt
		if errors.Is(cause, ErrHung) {
			rs = a.lane.PollInto(nil) // nothing waits on a hung stream again
		} else {
			rs, _, _ = a.lane.Synchronize()
		}
		if c := a.deliver(rs); culprit == "" {
			culprit = c
		}
		a.endRemaining(cause)
	}
	a.s.cfg.Telemetry.Quarantine(context.Background(), a.ref.id, cause)
	if culprit != "" {
		a.s.strike(culprit)
	}
	if cuda.Classify(cause).Blame == cuda.BlameDevice {
		a.retired = true
		a.ref.setState(Quarantined, cause)
		a.s.deviceFailed(a.ref, cause)
		a.s.lanesChanged()
		return
	}
	a.scheduleRebuild(cause)
}

// abandon gives up on a stream whose oldest fence outlived HangTimeout (a
// kernel that never finishes): every waiting submission ends indeterminate
// now, nothing blocks on the stream again, and the lane recovers on a fresh
// stream like any stream failure.
func (a *laneActor) abandon() {
	cause := fmt.Errorf("%w: no submission of lane %d ended for %v; the stream is abandoned", ErrHung, a.ref.id, a.s.cfg.HangTimeout)
	culprit := a.deliver(a.lane.Abandon(cause))
	a.failed(culprit, cause)
}

// retire takes the lane out for good because its device failed elsewhere
// (another lane saw the sticky error): what it had in flight ends, failed
// or indeterminate, as the device answers.
func (a *laneActor) retire(cause error) {
	if a.retired || a.stopped {
		return
	}
	a.retired = true
	a.cancelRebuild()
	a.ref.setState(Quarantined, cause)
	a.s.lanesChanged()
	a.disarm()
	if a.lane != nil {
		rs, _, _ := a.lane.Synchronize()
		a.deliver(rs)
		a.endRemaining(cause)
	}
	a.s.cfg.Telemetry.Quarantine(context.Background(), a.ref.id, cause)
}

// scheduleRebuild counts a stream failure and arms the rebuild after the
// backoff, or takes the lane out for good when it keeps failing.
func (a *laneActor) scheduleRebuild(cause error) {
	rc := a.s.cfg.Recovery
	now := time.Now()
	keep := a.failures[:0]
	for _, at := range a.failures {
		if now.Sub(at) <= rc.Window {
			keep = append(keep, at)
		}
	}
	a.failures = append(keep, now)
	if a.stopped {
		return
	}
	if rc.Disabled || len(a.failures) >= rc.MaxFailures {
		a.retired = true
		a.ref.setState(Quarantined, fmt.Errorf("%w: lane %d is out of routing for good after %d failures in a row within %v: %w",
			lanes.ErrFailed, a.ref.id, len(a.failures), rc.Window, cause))
		a.s.lanesChanged()
		return
	}
	self, root := a.self, a.s.system.Root
	a.s.timers.Add(1)
	a.rebuild = time.AfterFunc(rc.backoff(len(a.failures)), func() {
		defer a.s.timers.Done()
		root.Send(self, rebuildLane{})
	})
}

// cancelRebuild disarms a pending rebuild.
func (a *laneActor) cancelRebuild() {
	if a.rebuild != nil && a.rebuild.Stop() {
		a.s.timers.Done()
	}
	a.rebuild = nil
}

// rebuildNow starts the lane over on a fresh stream and cache, once its
// device is healthy; a failure to open counts as another failure.
func (a *laneActor) rebuildNow() {
	a.rebuild = nil
	if a.stopped || a.retired || a.ref.State() != Recovering {
		return
	}
	if err := a.ref.dev.Err(); err != nil {
		a.retired = true
		a.ref.setState(Quarantined, err)
		a.s.lanesChanged()
		return
	}
	if a.ref.stream != nil {
		_ = a.ref.stream.Destroy() // never waits: a hung stream is left to its kernel
		a.ref.stream = nil
	}
	a.lane = nil
	if err := a.open(); err != nil {
		a.scheduleRebuild(fmt.Errorf("%w: rebuild lane %d: %w", lanes.ErrFailed, a.ref.id, err))
		return
	}
	a.ref.recoveries.Add(1)
	a.s.lanesChanged()
}

// deviceFailed takes every other lane of a poisoned device out for good,
// and on the real GPU every lane of every GPU of the process: on the H200
// with driver 580 an illegal address in one GPU's context made kernel
// launches in another GPU's context fail with the same error, so the CUDA
// state of the whole process is what a sticky error poisons (isolating
// GPUs takes a process per GPU).
func (s *Scheduler) deviceFailed(ref *laneRef, cause error) {
	processWide := ref.dev.Info().Backend == "driver"
	for _, r := range s.lanes {
		same := r.dev == ref.dev || processWide && r.dev.Info().Backend == "driver"
		if r == ref || !same {
			continue
		}
		if h := r.State(); h == Healthy || h == Recovering || h == Starting {
			r.setState(Quarantined, cause)
			s.system.Root.Send(r.pid, failLane{cause: cause})
		}
	}
}

// hangWaiter paces a lane's waits on the device: it sleeps between
// queries, backing off from waitMin to waitMax, and gives up with ErrHung
// once no submission of the lane has ended for the hang timeout (zero or
// negative: never).
type hangWaiter struct {
	lane    int
	timeout time.Duration
	since   time.Time
	delay   time.Duration
}

const (
	waitMin = 20 * time.Microsecond
	waitMax = time.Millisecond
)

var _ lanes.Waiter = (*hangWaiter)(nil)

// Begin starts a wait.
func (w *hangWaiter) Begin() {
	w.since, w.delay = time.Now(), waitMin
}

// Pause sleeps, or gives up once the lane made no progress for the
// timeout.
func (w *hangWaiter) Pause(progressed bool) error {
	now := time.Now()
	if progressed {
		w.since, w.delay = now, waitMin
	}
	if w.timeout > 0 && now.Sub(w.since) > w.timeout {
		return fmt.Errorf("%w: no submission of lane %d ended for %v while waiting on its stream; the stream is abandoned", ErrHung, w.lane, w.timeout)
	}
	time.Sleep(w.delay)
	w.delay = min(2*w.delay, waitMax)
	return nil
}
