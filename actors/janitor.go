// The janitor: what the scheduler forgets on its own, so that nothing it
// keeps grows with its history. A tenant idle for Config.TenantIdle, with
// nothing in flight, no owned buffers, no registered programs (unless
// reserved names reach nine tenths of Config.MaxPrograms), no suspension
// and no fault inside the suspension window, is forgotten as Forget would; an ownership row whose
// buffer was freed is dropped (the buffer is no one's, and its id may be
// handed out again).

package actors

import (
	"time"
)

// janitorPeriod is how often the janitor looks: half the idle time, within
// 10 ms and 10 s.
func (s *Scheduler) janitorPeriod() time.Duration {
	if s.cfg.TenantIdle < 0 {
		return 10 * time.Second
	}
	return min(max(s.cfg.TenantIdle/2, 10*time.Millisecond), 10*time.Second)
}

// janitor sweeps until the scheduler stops.
func (s *Scheduler) janitor() {
	t := time.NewTicker(s.janitorPeriod())
	defer t.Stop()
	for {
		select {
		case <-s.stopped:
			return
		case <-t.C:
			if s.stopping.Load() {
				return
			}
			s.sweepOwnership()
			s.sweepTenants(time.Now())
		}
	}
}

// sweepTenants forgets the tenants idle since before TenantIdle.
func (s *Scheduler) sweepTenants(now time.Time) {
	if s.cfg.TenantIdle < 0 {
		return
	}
	s.tenants.Range(func(_, v any) bool {
		ts := v.(*tenantState)
		if ts.inflight.Load() == 0 && now.Sub(time.Unix(0, ts.lastActive.Load())) >= s.cfg.TenantIdle {
			s.forgetIdle(ts, now)
		}
		return true
	})
}

// forgetIdle forgets a tenant if it is still idle and keeps nothing worth
// remembering: no owned buffers, no suspension, no recent faults.
func (s *Scheduler) forgetIdle(ts *tenantState, now time.Time) {
	if !ts.quiet(now, s.cfg.Suspension.Window) {
		return
	}
	s.ownMu.RLock()
	// Its buffers keep it, and its programs (which lanes would drop) while
	// reserved names are not scarce: at nine tenths of MaxPrograms, idle
	// tenants give theirs back, so that idle names cannot lock others out.
	scarce := len(s.programs) >= s.cfg.MaxPrograms-s.cfg.MaxPrograms/10
	owns := len(s.owned[ts.name]) > 0 || s.programCount[ts.name] > 0 && !scarce
	s.ownMu.RUnlock()
	if owns {
		return
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.forgotten || ts.inflight.Load() != 0 || len(ts.parked) > 0 || now.Sub(time.Unix(0, ts.lastActive.Load())) < s.cfg.TenantIdle {
		return
	}
	s.dropLocked(ts)
}

// dropIfFresh forgets a tenant that was never admitted (its first
// submission was refused), so that names only ever refused leave nothing
// behind.
func (s *Scheduler) dropIfFresh(ts *tenantState) {
	if ts.lastActive.Load() != 0 {
		return
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if !ts.forgotten && ts.lastActive.Load() == 0 && ts.inflight.Load() == 0 && len(ts.parked) == 0 && ts.quiet(time.Now(), s.cfg.Suspension.Window) {
		s.dropLocked(ts)
	}
}

// quiet reports whether a tenant has no suspension and no fault it must
// be remembered for (inside window, or a suspension that ended inside it,
// which a repeat would double).
func (ts *tenantState) quiet(now time.Time, window time.Duration) bool {
	if ts.suspendedUntil.Load() > now.UnixNano() {
		return false
	}
	f := &ts.faults
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, st := range f.strikes {
		if now.Sub(st.at) <= window {
			return false
		}
	}
	return f.lastEnd.IsZero() || now.Sub(f.lastEnd) > window
}

// sweepOwnership drops the ownership rows of freed buffers, once a device
// freed something since the last sweep. Rows are checked under the shared
// lock, and the dead ones checked again under the exclusive one (an id the
// device handed out again meanwhile may be owned anew).
func (s *Scheduler) sweepOwnership() {
	var frees uint64
	for _, d := range s.devs {
		frees += d.Frees()
	}
	if frees == s.sweptFrees {
		return
	}
	s.sweptFrees = frees
	type row struct {
		owner string
		key   handleKey
	}
	var dead []row
	s.ownMu.RLock()
	for owner, rows := range s.owned {
		for k, check := range rows {
			if check() != nil {
				dead = append(dead, row{owner, k})
			}
		}
	}
	s.ownMu.RUnlock()
	if len(dead) == 0 {
		return
	}
	s.lockOwnership()
	defer s.ownMu.Unlock()
	shrunk := map[string]bool{}
	for _, r := range dead {
		rows := s.owned[r.owner]
		check, ok := rows[r.key]
		if !ok || check() == nil {
			continue
		}
		delete(rows, r.key)
		shrunk[r.owner] = true
		if len(rows) == 0 {
			delete(s.owned, r.owner)
		}
		if s.owners[r.key] == r.owner {
			delete(s.owners, r.key)
		}
	}
	// A Go map keeps its peak size: copy what shrank, so its memory goes
	// with the rows.
	if len(dead) > len(s.owners) {
		s.owners = compact(s.owners)
	}
	for owner := range shrunk {
		if rows, ok := s.owned[owner]; ok {
			s.owned[owner] = compact(rows)
		}
	}
}

// compact copies a map into one sized for what it holds (maps.Clone keeps
// the original's size).
func compact[K comparable, V any](m map[K]V) map[K]V {
	out := make(map[K]V, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
