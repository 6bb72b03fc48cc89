// Stop: the scheduler stops admitting, drains every lane and stops the
// actors.

package actors

import (
	"context"
	"time"

	laneerr "github.com/lanesched/lanes/internal/laneerr"
)

// Stop stops admitting (every call from now on answers ErrStopped at once),
// drains every lane (each waits for its stream, ends every pending
// submission exactly once, trims and releases its stream), then stops the
// actors and their threads. A lane whose kernel hangs is abandoned after
// Config.HangTimeout, its submissions ending indeterminate, so Stop returns
// within about HangTimeout. If ctx ends first, Stop returns ctx.Err() and
// the drain goes on: call Stop again, or wait on Done, to see it finish.
func (s *Scheduler) Stop(ctx context.Context) error {
	if s.unstarted() {
		return errUnstarted
	}
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
		return laneerr.Wrap(op, true, ErrStopped)
	}
	return nil
}

// Done is closed once Stop has drained every lane and stopped the actors.
func (s *Scheduler) Done() <-chan struct{} {
	if s.unstarted() {
		return closedChan
	}
	return s.stopped
}

// closedChan is the Done of a Scheduler Start did not return: it serves
// nothing, so it is done.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

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
		// The lanes' last values, pushed before their gauges go.
		pctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = s.cfg.Telemetry.PushMetrics(pctx)
		cancel()
		if s.gauges != nil {
			_ = s.gauges.Unregister()
		}
		s.system.Shutdown()
		close(s.stopped)
	}()
}
