// Hangs: pacing a lane's waits on the device and giving up after the hang
// timeout, and telling which tenant stalled a whole device.

package actors

import (
	"fmt"
	"time"

	"github.com/lanesched/lanes/cuda"
	lanecore "github.com/lanesched/lanes/internal/lanecore"
)

// stalledBehind reports whether a lane that hung stalled behind another
// lane's hang: one of its device was declared hung earlier and nothing of
// the device has ended since (a kernel that occupies the device stalls
// every stream of it, streams rebuilt meanwhile too).
func (s *Scheduler) stalledBehind(ref *laneRef) bool {
	for _, r := range s.lanes {
		if r == ref || r.dev != ref.dev {
			continue
		}
		if at := r.hungAt.Load(); at != 0 && !s.endedSince(ref.dev, at) {
			return true
		}
	}
	return false
}

// stall is one device-wide stall: the tenants struck for it.
type stall struct{ struck map[string]bool }

// firstStrikeOfStall reports whether a tenant stuck on a lane that hung is
// struck for the device's stall: a hang not behind another begins a new
// stall; within one, each tenant is struck once.
func (s *Scheduler) firstStrikeOfStall(dev cuda.Device, behind bool, tenant string) bool {
	s.stallMu.Lock()
	defer s.stallMu.Unlock()
	st := s.stalls[dev]
	if st == nil || !behind {
		st = &stall{struck: map[string]bool{}}
		s.stalls[dev] = st
	}
	if tenant == "" || st.struck[tenant] {
		return false
	}
	st.struck[tenant] = true
	return true
}

// endedSince reports whether a submission ended on any lane of the device
// after t (unix ns).
func (s *Scheduler) endedSince(dev cuda.Device, t int64) bool {
	for _, r := range s.lanes {
		if r.dev == dev && r.lastEnd.Load() > t {
			return true
		}
	}
	return false
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

var _ lanecore.Waiter = (*hangWaiter)(nil)
