package actors

import (
	"fmt"
	"sync/atomic"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/lanes"
)

// tenantState is one tenant's admission state, shared lock-free by its
// submitting goroutines and the lanes that end its submissions.
type tenantState struct {
	inflight atomic.Int64            // admitted, not ended
	lane     atomic.Pointer[laneRef] // the lane the tenant is pinned to
}

// tenant returns a tenant's state, creating it on first use.
func (s *Scheduler) tenant(name string) *tenantState {
	if v, ok := s.tenants.Load(name); ok {
		return v.(*tenantState)
	}
	v, _ := s.tenants.LoadOrStore(name, &tenantState{})
	return v.(*tenantState)
}

// batchDevice is the device instance a batch's buffers live on, or 0 when
// it names none (a batch of invocations only).
func batchDevice(b *lanes.Batch) uint64 {
	for _, e := range b.Entries {
		var inst uint64
		_ = e.Command.ForRegions(func(r cuda.Region) error {
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

// admit picks a lane for a tenant, on the device the batch's buffers live
// on, counts the submission against both, and registers the call.
//
// The common case, a tenant whose pinned lane has room, takes no lock but
// its registry shard's: the counts are atomics. The registry refuses the
// call once Stop has begun (see Scheduler.stopping), so Stop always finds,
// and ends, every accepted submission.
func (s *Scheduler) admit(tenant string, b *lanes.Batch, c *call) (*laneRef, error) {
	device := batchDevice(b)
	if s.stopping.Load() {
		return nil, ErrStopped
	}
	ts := s.tenant(tenant)
	if n := ts.inflight.Add(1); n > int64(s.cfg.MaxInFlightPerTenant) {
		ts.inflight.Add(-1)
		return nil, fmt.Errorf("%w: tenant %q has %d submissions in flight (limit %d); retry later", ErrOverloaded, tenant, n-1, s.cfg.MaxInFlightPerTenant)
	}
	lane := ts.lane.Load()
	if !s.reserve(lane, device, nil) {
		var err error
		if lane, err = s.route(ts, device, nil); err != nil {
			ts.inflight.Add(-1)
			return nil, err
		}
	}
	c.ts, c.id, c.done = ts, s.nextCall.Add(1), make(chan struct{})
	c.lane.Store(lane)
	if !s.calls.storeUnless(c, &s.stopping) {
		s.release(c)
		return nil, ErrStopped
	}
	return lane, nil
}

// eligible reports whether a lane may take a batch of the device.
func eligible(r, exclude *laneRef, device uint64) bool {
	return r != nil && r != exclude && r.State() == Healthy && (device == 0 || r.instance == device)
}

// reserve counts one more submission against an eligible lane with room.
func (s *Scheduler) reserve(r *laneRef, device uint64, exclude *laneRef) bool {
	if !eligible(r, exclude, device) {
		return false
	}
	limit := int64(s.cfg.MaxInFlightPerLane)
	for {
		n := r.inflight.Load()
		if n >= limit {
			return false
		}
		if r.inflight.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// route is the slow path: the tenant's lane is full or out of routing.
// It reserves the least loaded eligible lane (among equals, the one with
// fewest tenants pinned) and pins a tenant whose lane left routing there.
// A tenant is never pinned away from a healthy lane that is only full.
func (s *Scheduler) route(ts *tenantState, device uint64, exclude *laneRef) (*laneRef, error) {
	s.routeMu.Lock()
	defer s.routeMu.Unlock()
	for {
		var best *laneRef
		var bestLoad int64
		healthy := false
		for _, r := range s.lanes {
			if !eligible(r, exclude, device) {
				continue
			}
			healthy = true
			load := r.inflight.Load()
			if load >= int64(s.cfg.MaxInFlightPerLane) {
				continue
			}
			if best == nil || load < bestLoad || load == bestLoad && r.pinned < best.pinned {
				best, bestLoad = r, load
			}
		}
		if best == nil {
			if !healthy {
				return nil, ErrNoHealthyLane
			}
			return nil, fmt.Errorf("%w: every healthy lane has %d submissions in flight; retry later", ErrOverloaded, s.cfg.MaxInFlightPerLane)
		}
		if !s.reserve(best, device, exclude) {
			continue // filled up or left routing meanwhile: look again
		}
		if cur := ts.lane.Load(); !eligible(cur, nil, device) {
			// A new tenant, or one whose lane left routing: pin it to the
			// chosen lane.
			if cur != nil {
				cur.pinned--
			}
			ts.lane.Store(best)
			best.pinned++
		}
		return best, nil
	}
}

// release undoes admit's counts for a call already taken from the registry.
func (s *Scheduler) release(c *call) {
	if c.admin {
		return
	}
	c.lane.Load().inflight.Add(-1)
	c.ts.inflight.Add(-1)
}
