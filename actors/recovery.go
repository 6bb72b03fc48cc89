// Recovery: what a lane does when its stream fails, the one place where
// blame decides the consequence (the table is in doc.go).

package actors

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/lanesched/lanes/cuda"
	execcache "github.com/lanesched/lanes/internal/execcache"
	"github.com/lanesched/lanes/lanes"
)

// failed reacts to the lane's failure (the lane core is in
// lanecore.StateFailed, or was never opened): the lane leaves routing, ends what it had in flight (its
// stream drained within the hang timeout, unless it hung), the tenant whose
// submission failed it takes a strike, and the blame decides the rest: a
// device's error takes every lane of the device out for good; a stream's
// recovers the lane on a fresh stream after a backoff, unless it keeps
// failing (Config.Recovery). culprit is "" when no submission is to blame.
func (a *laneActor) failed(culprit string, cause error) { a.fail(culprit, cause, true) }

// fail is failed, saying whether the failure counts against the lane: a
// lane that stalled behind another lane's kernel recovers, but its stall is
// not its own and does not bring it nearer to being taken out.
func (a *laneActor) fail(culprit string, cause error, counts bool) {
	a.ref.setState(HealthRecovering, cause)
	a.disarm()
	if a.lane != nil {
		var rs []lanes.Receipt
		if errors.Is(cause, ErrHung) {
			a.hung = true
			rs = a.lane.PollInto(nil) // nothing waits on a hung stream again
		} else {
			var err error
			rs, _, err = a.lane.Synchronize()
			a.hung = errors.Is(err, ErrHung)
		}
		if c := a.deliver(rs); culprit == "" {
			culprit = c
		}
		a.endRemaining(cause)
	}
	a.s.traceQuarantine(a.ref, cause)
	if culprit != "" {
		a.s.strike(culprit)
	}
	if cuda.Classify(cause).Blame == cuda.BlameDevice {
		a.retired = true
		a.releasePins() // the device is lost: no copy runs again
		a.ref.setState(HealthQuarantined, cause)
		a.s.deviceFailed(a.ref, cause)
		a.s.lanesChanged()
		return
	}
	a.scheduleRebuild(culprit, cause, counts)
}

// abandon gives up on a stream whose oldest fence outlived HangTimeout (a
// kernel that never finishes): every waiting submission ends indeterminate
// now, nothing blocks on the stream again, and the lane recovers on a fresh
// stream like any stream failure.
func (a *laneActor) abandon() {
	cause := fmt.Errorf("%w: no submission of lane %d ended for %v; the stream is abandoned", ErrHung, a.ref.id, a.s.cfg.HangTimeout)
	// The tenant of the oldest stuck submission takes the strike. When a
	// kernel occupies the whole device, every busy lane hangs, one after
	// another, and which kernel stalled the device cannot be told from the
	// host: each stuck tenant takes one strike for the stall, and the
	// suspension's rate test tells the tenant whose every launch stalls the
	// device from a bystander stuck behind it now and then. Only the first
	// lane to hang in a stall counts the failure against itself.
	culprit := a.deliver(a.lane.Abandon(cause))
	behind := a.s.stalledBehind(a.ref)
	if !a.s.firstStrikeOfStall(a.ref.dev, behind, culprit) {
		culprit = ""
	}
	a.ref.hungAt.Store(time.Now().UnixNano())
	a.fail(culprit, cause, !behind)
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
	a.ref.setState(HealthQuarantined, cause)
	a.s.lanesChanged()
	a.disarm()
	if a.lane != nil {
		rs, _, _ := a.lane.Synchronize()
		a.deliver(rs)
		a.endRemaining(cause)
	}
	a.releasePins()
	a.s.traceQuarantine(a.ref, cause)
}

// failure is one failure of a lane's stream, and the tenant it is struck
// against ("" for none).
type failure struct {
	at      time.Time
	culprit string
}

// streak is how many of the lane's failures in a row count toward taking
// it out: one per tenant whose submissions failed it (its suspension deals
// with a tenant that keeps failing lanes), and each failure no tenant is
// struck for.
func streak(fs []failure) int {
	n := 0
	for i, f := range fs {
		if f.culprit == "" || !slices.ContainsFunc(fs[:i], func(g failure) bool { return g.culprit == f.culprit }) {
			n++
		}
	}
	return n
}

// scheduleRebuild counts a stream failure (when it counts) and arms the
// rebuild after the backoff, or takes the lane out for good when it keeps
// failing.
func (a *laneActor) scheduleRebuild(culprit string, cause error, counts bool) {
	rc := a.s.cfg.Recovery
	now := time.Now()
	keep := a.failures[:0]
	for _, f := range a.failures {
		if now.Sub(f.at) <= rc.Window {
			keep = append(keep, f)
		}
	}
	a.failures = keep
	if counts {
		a.failures = append(a.failures, failure{at: now, culprit: culprit})
	}
	if a.stopped {
		return
	}
	if n := streak(a.failures); rc.Disabled || n >= rc.MaxFailures {
		a.retired = true
		a.releasePins()
		a.ref.setState(HealthQuarantined, fmt.Errorf("%w: lane %d is out of routing for good after failing %d times in a row within %v: %w",
			lanes.ErrFailed, a.ref.id, n, rc.Window, cause))
		a.s.lanesChanged()
		return
	}
	self, root := a.self, a.s.system.Root
	a.s.timers.Add(1)
	a.rebuild = time.AfterFunc(rc.backoff(max(len(a.failures), 1)), func() {
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

// rebuildNow brings the lane back on a fresh stream once its device is
// healthy: it keeps its cache and catalog (lanecore.Lane.Recover), so its
// tenants keep their replays and programs and the operator's seal holds;
// after a hang it starts over with a fresh lane, since the hung stream's
// executables cannot be launched again. A failure to open counts as
// another failure.
func (a *laneActor) rebuildNow() {
	a.rebuild = nil
	if a.stopped || a.retired || a.ref.State() != HealthRecovering {
		return
	}
	if err := a.ref.dev.Err(); err != nil {
		a.retired = true
		a.releasePins()
		a.ref.setState(HealthQuarantined, err)
		a.s.lanesChanged()
		return
	}
	if a.hung && a.lane != nil {
		a.keepHungPins() // its pins wait behind the hung stream's last work
	}
	a.releaseHungPins()
	if a.ref.stream != nil {
		_ = a.ref.stream.Destroy() // never waits: a hung stream is left to its kernel
		a.ref.stream = nil
	}
	var err error
	if a.lane == nil || a.hung {
		var recipes []execcache.Recipe
		if a.lane != nil {
			recipes = a.lane.Recipes() // host data: what the hung lane replayed
		}
		a.lane = nil
		err = a.open(recipes...)
	} else {
		err = a.recoverLane()
	}
	if err != nil {
		a.scheduleRebuild("", fmt.Errorf("%w: rebuild lane %d: %w", lanes.ErrFailed, a.ref.id, err), true)
		return
	}
	a.hung = false
	a.ref.recoveries.Add(1)
	a.s.lanesChanged()
}

// recoverLane moves the failed lane onto a fresh stream.
func (a *laneActor) recoverLane() error {
	st, err := a.ref.dev.NewStream()
	if err != nil {
		return err
	}
	if a.s.deviceHung(a.ref.dev) {
		a.lane.ForgetLibraryState() // their teardown would wait for the hung work
	}
	if err := a.lane.Recover(st); err != nil {
		_ = st.Destroy()
		return err
	}
	a.ref.stream = st
	a.serve()
	return nil
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
		if h := r.State(); h == HealthServing || h == HealthRecovering || h == HealthStarting {
			r.setState(HealthQuarantined, cause)
			s.system.Root.Send(r.pid, failLane{cause: cause})
		}
	}
}
