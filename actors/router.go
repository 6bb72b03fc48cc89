// Routing: which lane takes a tenant's batch, and the order guarantee.
//
// A tenant is pinned to one lane. Its batches are admitted, registered and
// sent to that lane's mailbox under the tenant's lock, so the lane receives
// them in the order Submit accepted them, and a lane runs what it receives
// in order on its one stream. While its lane recovers from a stream failure
// (milliseconds, keeping the tenant's executables and programs), the
// tenant's new batches wait for it, in order. A tenant moves to another
// lane only while it has nothing in flight: when its lane is full and it
// has work in flight it is answered ErrOverloaded (it stays); when its lane
// left routing for good and it has work in flight, its new batches wait, in
// order, until that work has ended (a failed lane ends it only once its
// stream is drained or abandoned), and then move together. So every batch
// starts after the tenant's previous batches have ended or are ahead of it
// on the same stream, and sees their writes.

package actors

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/internal/backend"
	laneerr "github.com/lanesched/lanes/internal/laneerr"
	"github.com/lanesched/lanes/lanes"
)

// maxReroutes bounds how often one batch may bounce off lanes that failed
// before taking it; then it ends not submitted.
const maxReroutes = 3

// batchDevice is the device instance a batch's buffers live on, or 0 when
// it names none (a batch of invocations only).
func batchDevice(b *lanes.Batch) uint64 {
	for _, e := range b.Entries {
		var inst uint64
		_ = backend.ForRegions(e.Command, func(r cuda.Region) error {
			if inst == 0 {
				inst = r.Buffer.Device
			}
			return nil
		})
		if inst != 0 {
			return inst
		}
	}
	return 0
}

// send hands an admitted call to a lane that counted it (ts.mu held, so
// the lane's mailbox gets the tenant's calls in admission order).
func (s *Scheduler) send(ts *tenantState, lane *laneRef, c *call) {
	c.lane.Store(lane)
	c.sent.Store(true)
	if ts.active.Add(1) == 1 {
		lane.activeWeight.Add(int64(ts.weight))
	}
	c.batch.Tenant = ts.name // the lane's cache shares its room by it
	s.system.Root.Send(lane.pid, &submitRequest{Call: c.id, Tenant: ts.name, Batch: c.batch, ctx: c.ctx, weight: ts.weight, commands: c.cost})
}

// ended undoes send's counts for a call that ended or came back from lane.
func (ts *tenantState) ended(lane *laneRef) int64 {
	lane.inflight.Add(-1)
	n := ts.active.Add(-1)
	if n == 0 {
		lane.activeWeight.Add(-int64(ts.weight))
	}
	return n
}

// flushLocked moves a tenant's parked calls once nothing of it is in
// flight (ts.mu held): the run of them for one device goes, in order, to
// the tenant's own lane when it serves (they wait while it recovers), else
// to the lane route picks, past its admission limit if need be (they were
// admitted already). With no lane to take them, they end not submitted.
func (s *Scheduler) flushLocked(ts *tenantState) {
	if ts.active.Load() != 0 || len(ts.parked) == 0 {
		return
	}
	device := batchDevice(&ts.parked[0].batch)
	n := 1
	for n < len(ts.parked) && batchDevice(&ts.parked[n].batch) == device {
		n++
	}
	var err error
	var lane *laneRef
	cur := ts.lane
	if recovering(cur, device) {
		// Wait for the tenant's own lane (see admit), woken by lanesChanged.
		s.waitForLanes(ts)
		if recovering(cur, device) {
			return
		}
	}
	switch {
	case s.stopping.Load():
		err = ErrStopped
	case eligible(cur, device):
		lane = cur
		lane.inflight.Add(1)
	default:
		lane, err = s.route(ts, device, true)
	}
	if err == errRecovering {
		// Every lane of its device is recovering: wait for one to come
		// back (or to be taken out for good), then try again.
		s.waitForLanes(ts)
		if !s.anyServing(device) {
			return
		}
		lane, err = s.route(ts, device, true)
	}
	if err == errRecovering {
		return // it came back and left again meanwhile; the next change wakes us
	}
	if err != nil {
		for _, c := range ts.parked { // never sent: they end once mu is released (unlock)
			ts.unsent = append(ts.unsent, unsent{c.id, laneerr.Wrap("submit", true, err)})
		}
		ts.parked = nil
		ts.moving.Store(false)
		return
	}
	lane.inflight.Add(int64(n - 1)) // route counted the first
	for _, c := range ts.parked[:n] {
		s.send(ts, lane, c)
	}
	ts.parked = slices.Delete(ts.parked, 0, n)
	ts.moving.Store(len(ts.parked) > 0)
}

// flush is flushLocked for a caller that does not hold the tenant's lock.
func (s *Scheduler) flush(ts *tenantState) {
	ts.mu.Lock()
	s.flushLocked(ts)
	s.unlock(ts)
}

// unsent is an admitted call that ends not submitted, with why.
type unsent struct {
	id  uint64
	err error
}

// unlock releases the tenant's lock, then ends the calls refused while it
// was held (ts.unsent). Ending one runs its submitter's ended callback
// (SubmitNotify), which may submit the tenant's next step and so take the
// lock again: under it, that would deadlock the goroutine, often a lane's
// thread.
func (s *Scheduler) unlock(ts *tenantState) {
	refused := ts.unsent
	ts.unsent = nil
	ts.mu.Unlock()
	for _, u := range refused {
		s.complete(u.id, lanes.Receipt{}, u.err)
	}
}

// reroute takes back a submission that a lane which left routing did not
// take, and moves it with the tenant's other waiting batches, in admission
// order. A batch that bounced too often ends not submitted.
func (s *Scheduler) reroute(m *submitRequest, from *laneRef) {
	c, ok := s.calls.load(m.Call)
	if !ok {
		return // already ended
	}
	ts := c.ts
	ts.mu.Lock()
	defer s.unlock(ts)
	c.sent.Store(false)
	ts.ended(from)
	c.reroutes++
	if c.reroutes > maxReroutes {
		ts.unsent = append(ts.unsent, unsent{c.id, laneerr.Wrap("submit", true,
			fmt.Errorf("%w: lane %d left routing before taking the batch, the %d-th lane to do so", ErrLaneUnavailable, from.id, c.reroutes))})
	} else {
		at, _ := slices.BinarySearchFunc(ts.parked, c.id, func(p *call, id uint64) int { return cmp.Compare(p.id, id) })
		ts.parked = slices.Insert(ts.parked, at, c)
		ts.moving.Store(true)
	}
	s.flushLocked(ts)
}

// recovering reports whether a lane of the device is recovering (or still
// opening): it will take work again soon.
func recovering(r *laneRef, device uint64) bool {
	if r == nil || device != 0 && r.instance != device {
		return false
	}
	h := r.State()
	return h == HealthRecovering || h == HealthStarting
}

// eligible reports whether a lane may take a batch of the device.
func eligible(r *laneRef, device uint64) bool {
	return r != nil && r.State() == HealthServing && (device == 0 || r.instance == device)
}

// errRecovering is route's answer when no lane of the device is healthy but
// some are recovering: the batch waits for one (never returned to callers).
var errRecovering = fmt.Errorf("%w: every lane of the device is recovering", ErrNoHealthyLane)

// route picks a lane for a tenant that may move (ts.mu held): the least
// loaded eligible lane (among equals, the one with fewest tenants pinned),
// counts one submission against it and pins the tenant there. Unless
// force, a lane at its admission limit is not taken. With no healthy lane
// for the device, it answers errRecovering while some lane of the device is
// recovering, else ErrNoHealthyLane.
func (s *Scheduler) route(ts *tenantState, device uint64, force bool) (*laneRef, error) {
	s.routeMu.Lock()
	defer s.routeMu.Unlock()
	for {
		var best *laneRef
		var bestLoad int64
		healthy := false
		for _, r := range s.lanes {
			if !eligible(r, device) {
				continue
			}
			healthy = true
			load := r.inflight.Load()
			if !force && load >= 3*int64(s.cfg.MaxInFlightPerLane) {
				continue
			}
			if best == nil || load < bestLoad || load == bestLoad && r.pinned < best.pinned {
				best, bestLoad = r, load
			}
		}
		if best == nil {
			if !healthy {
				if s.anyRecovering(device) {
					return nil, errRecovering
				}
				if cause := s.poisoned(device); cause != nil {
					// No retry helps: the device's error, as its other
					// calls answer it, until the tenant starts over
					// elsewhere (Forget).
					return nil, fmt.Errorf("every lane of device instance %d is out for good, its context poisoned: %w", device, cause)
				}
				return nil, fmt.Errorf("%w: every lane of device instance %d is out of routing for good", ErrNoHealthyLane, device)
			}
			return nil, s.lanesFull
		}
		if force {
			best.inflight.Add(1)
		} else if !s.reserve(ts, best, device) {
			continue // filled up or left routing meanwhile: look again
		}
		if ts.lane != best {
			if ts.lane != nil {
				ts.lane.pinned--
			}
			ts.lane = best
			best.pinned++
		}
		return best, nil
	}
}

// poisoned is the sticky error that took a lane of the device out for
// good, or nil (device 0: the batch names no device).
func (s *Scheduler) poisoned(device uint64) error {
	if device == 0 {
		return nil
	}
	for _, r := range s.lanes {
		if r.instance != device {
			continue
		}
		r.mu.Lock()
		cause := r.cause
		r.mu.Unlock()
		if cause != nil && cuda.Classify(cause).Sticky {
			return cause
		}
	}
	return nil
}

// anyRecovering reports whether a lane of the device is recovering.
func (s *Scheduler) anyRecovering(device uint64) bool {
	for _, r := range s.lanes {
		if recovering(r, device) {
			return true
		}
	}
	return false
}

// anyServing reports whether a lane of the device is healthy, or none will
// be again (so a waiting tenant should be answered now either way).
func (s *Scheduler) anyServing(device uint64) bool {
	for _, r := range s.lanes {
		if eligible(r, device) {
			return true
		}
	}
	return !s.anyRecovering(device)
}

// waitForLanes records a tenant whose parked batches wait for a lane of
// their device to come back.
func (s *Scheduler) waitForLanes(ts *tenantState) {
	s.waitMu.Lock()
	s.waiting[ts] = struct{}{}
	s.waitMu.Unlock()
}

// lanesChanged wakes the tenants waiting for lanes after a lane left
// Recovering (back in routing, or out for good); called once its health
// is stored, so a tenant that starts waiting after this sees it.
func (s *Scheduler) lanesChanged() {
	s.waitMu.Lock()
	waiting := s.waiting
	s.waiting = map[*tenantState]struct{}{}
	s.waitMu.Unlock()
	for ts := range waiting {
		s.flush(ts)
	}
}
