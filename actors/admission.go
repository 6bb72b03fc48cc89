// Admission: whether a tenant's batch may enter, on which lane, within its
// in-flight limit and its weighted share of the lane.

package actors

import (
	"fmt"

	"github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/programs"
)

// admit admits a batch for a tenant, registers its call, and sends it to the
// tenant's lane, or parks it until the tenant may move (router.go's file
// comment says why order needs it). It takes the tenant's lock, and a lane's admission count is an
// atomic, so tenants admit in parallel.
func (s *Scheduler) admit(ts *tenantState, device uint64, c *call) error {
	ts, err := s.lock(ts)
	if err != nil {
		return err
	}
	defer s.unlock(ts)
	tenant := ts.name
	if s.stopping.Load() {
		return ErrStopped
	}
	if n := ts.inflight.Add(1); n > int64(s.cfg.MaxInFlightPerTenant) {
		ts.inflight.Add(-1)
		return fmt.Errorf("%w: tenant %q has %d submissions in flight (limit %d); retry later", ErrOverloaded, tenant, n-1, s.cfg.MaxInFlightPerTenant)
	}
	lane, park, err := s.place(ts, device)
	if err != nil {
		ts.inflight.Add(-1)
		return err
	}
	ts.lastActive.Store(c.start.UnixNano())
	c.ts, c.id, c.done = ts, s.nextCall.Add(1), make(chan struct{})
	if !s.calls.storeUnless(c, &s.stopping) {
		if lane != nil {
			lane.inflight.Add(-1)
		}
		ts.inflight.Add(-1)
		return ErrStopped
	}
	if park {
		ts.parked = append(ts.parked, c)
		ts.moving.Store(true)
		s.flushLocked(ts) // the work it waited for may have ended meanwhile
		return nil
	}
	s.send(ts, lane, c)
	return nil
}

// place decides where a tenant's next batch goes (ts.mu held): the lane
// it is on, while that lane admits it; a new lane, routed, when it has
// nothing in flight; or parked (park), while batches ahead of it wait to
// move, its lane recovers, or its work on a lane that left routing ends.
// A tenant with work in flight on a full lane is refused, not moved, so
// that its batches keep their order.
func (s *Scheduler) place(ts *tenantState, device uint64) (lane *laneRef, park bool, err error) {
	if len(ts.parked) > 0 {
		return nil, true, nil // batches ahead of this one wait to move
	}
	cur := ts.lane
	busy := ts.active.Load() > 0
	switch {
	case s.reserve(ts, cur, device):
		return cur, false, nil
	case busy && eligible(cur, device):
		return nil, false, fmt.Errorf("%w: tenant %q has %d submissions in flight on lane %d, its fair share is %d of the lane's %d while %d of weight share it, and the lane is past that limit (%d in flight; past it, only tenants under their share are admitted, up to 3x); the tenant stays on it while it has work in flight, so that its batches keep their order; retry later",
			ErrOverloaded, ts.name, ts.active.Load(), cur.id, s.share(ts, cur), s.cfg.MaxInFlightPerLane, cur.activeWeight.Load(), cur.inflight.Load())
	case recovering(cur, device):
		// Its lane comes back within milliseconds, with the tenant's
		// executables and programs: wait for it rather than move.
		return nil, true, nil
	case busy:
		return nil, true, nil // its lane left routing; it moves once its work there ended
	}
	lane, err = s.route(ts, device, false)
	if err == errRecovering {
		return nil, true, nil // every lane of its device is recovering: wait for one
	}
	return lane, false, err
}

// reserve counts one more submission of a tenant against an eligible
// lane, if the lane has room for it: below MaxInFlightPerLane anyone is
// admitted; beyond it, up to twice the limit, only a tenant under its fair
// share (see share), and up to three times the limit, a tenant with
// nothing in flight. A flooding tenant fills a lane at most to its limit,
// the shares of the others, which sum to at most the limit, still fit, and
// a tenant that arrives after others took the shares of fewer tenants
// still gets a batch in, which the lane's fair queue runs within a round.
func (s *Scheduler) reserve(ts *tenantState, r *laneRef, device uint64) bool {
	if !eligible(r, device) {
		return false
	}
	_, ok := s.claimSlot(r, ts.active.Load()+ts.staged.Load(), func() int64 { return s.share(ts, r) })
	return ok
}

// claimSlot counts one more submission against a lane for a tenant that
// holds mine of its submissions, if the lane has room for it (see
// reserve); share is the tenant's fair share of the lane, asked only when
// the lane is past its limit. It returns the lane's count it saw.
func (s *Scheduler) claimSlot(r *laneRef, mine int64, share func() int64) (int64, bool) {
	limit := int64(s.cfg.MaxInFlightPerLane)
	for {
		n := r.inflight.Load()
		if n >= limit && (mine > 0 && (n >= 2*limit || mine >= share()) || n >= 3*limit) {
			return n, false
		}
		if r.inflight.CompareAndSwap(n, n+1) {
			return n, true
		}
	}
}

// share is a tenant's fair share of a lane's admission slots: the lane's
// limit split by weight among the tenants with work on it, the tenant
// counted (at least one slot).
func (s *Scheduler) share(ts *tenantState, r *laneRef) int64 {
	total := r.activeWeight.Load()
	if ts.active.Load() == 0 || ts.lane != r {
		total += int64(ts.weight)
	}
	return s.fairShare(ts.weight, total)
}

// fairShare is the slots of a lane's limit that weight earns among users
// of total weight (at least one).
func (s *Scheduler) fairShare(weight int, total int64) int64 {
	return max(1, int64(s.cfg.MaxInFlightPerLane)*int64(weight)/max(total, 1))
}

// release undoes admit's counts for a call taken from the registry (that
// enqueued launches launches), and moves the tenant's waiting batches once its last one in flight ended.
func (s *Scheduler) release(c *call, launches int) {
	if c.admin {
		return
	}
	ts := c.ts
	ts.launches.Add(uint64(max(launches, 1))) // the tenant's own line: no counter all lanes share
	if c.sent.Load() {
		if ts.ended(c.lane.Load()) == 0 && ts.moving.Load() {
			s.flush(ts)
		}
	}
	ts.inflight.Add(-1)
}

// checkSize refuses a batch beyond the configured bounds and returns its
// size in commands: an entry that invokes a program segment counts the
// segment's commands (a lane refuses an invocation whose segment is not
// the one it holds), patches count as entries (each is a command of the
// batch's prelude) and their bytes as upload bytes.
func (s *Scheduler) checkSize(b *lanes.Batch) (int, error) {
	commands, bytes, largest := measureBatch(b)
	if commands > s.cfg.MaxBatchEntries || bytes > s.cfg.MaxBatchBytes {
		return 0, &BatchTooLargeError{Entries: commands, MaxEntries: s.cfg.MaxBatchEntries, Bytes: bytes, MaxBytes: s.cfg.MaxBatchBytes, Largest: largest}
	}
	return commands, nil
}

// measureBatch is what Config.MaxBatchEntries and MaxBatchBytes bound of
// a batch: its commands (an invocation counts its segment's commands, a
// patch one), the host bytes its uploads and patches carry, and the
// largest of them. A front to lane hosts measures a batch so against its
// host's bounds, to refuse it as one process does.
func measureBatch(b *lanes.Batch) (commands int, bytes, largest int64) {
	commands = len(b.Patches)
	for i := range b.Entries {
		e := &b.Entries[i]
		n := int64(len(e.Command.Host))
		bytes += n
		largest = max(largest, n)
		if e.Invoke != nil {
			commands += min(max(e.Invoke.Segment.Commands, 1), programs.MaxNodes)
		} else {
			commands++
		}
	}
	for i := range b.Patches {
		n := int64(len(b.Patches[i].Bytes))
		bytes += n
		largest = max(largest, n)
	}
	return commands, bytes, largest
}
