// Supervision: a panic in a lane actor takes the lane out for good and ends
// its callers' calls.

package actors

import (
	"context"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	laneerr "github.com/lanesched/lanes/internal/laneerr"
	"github.com/lanesched/lanes/internal/recording"
	"github.com/lanesched/lanes/lanes"
)

// laneStrategy turns a panic in a lane actor (outside the lane core, which
// recovers its own) into a lane failure: the lane is quarantined for good
// and its waiting callers end; the actor is stopped, never restarted in
// place.
type laneStrategy struct{ s *Scheduler }

func (st laneStrategy) HandleFailure(_ *actor.ActorSystem, sup actor.Supervisor, child *actor.PID, _ *actor.RestartStatistics, reason any, _ any) {
	for _, ref := range st.s.lanes {
		if ref.name == child.GetId() {
			cause := fmt.Errorf("%w: lane %d's actor panicked: %v", lanes.ErrFailed, ref.id, reason)
			ref.dead.Store(true)
			ref.setState(HealthQuarantined, cause)
			st.s.endLaneCalls(ref, cause, false)
			st.s.traceQuarantine(ref, cause)
			ref.markOpened() // Start does not wait for a lane whose actor panicked while opening
		}
	}
	sup.StopChildren(child)
}

// traceQuarantine hands a lane's quarantine to the telemetry.
func (s *Scheduler) traceQuarantine(ref *laneRef, cause error) {
	s.rec.Quarantine(context.Background(), recording.Quarantine{At: time.Now(), Lane: ref.id, Device: ref.device,
		DeviceName: ref.dev.Info().Name, Cause: cause})
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
		s.complete(id, lanes.Receipt{}, laneerr.Wrap("submit", true, cause))
	default:
		s.complete(id, lanes.Receipt{Outcome: lanes.OutcomeIndeterminate}, indeterminate("fence", cause))
	}
}
