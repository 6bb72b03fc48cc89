package actors

// Tenants: their names, their lifecycle, and their suspension when their
// submissions keep failing lanes.

import (
	"fmt"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/lanesched/lanes/lanes"
)

// MaxTenantName is the longest tenant name, in bytes.
const MaxTenantName = 256

// checkTenant validates a tenant name: non-empty, at most MaxTenantName
// bytes of UTF-8 without control characters.
func checkTenant(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: the name is empty; name every tenant", ErrInvalidTenant)
	case len(name) > MaxTenantName:
		return fmt.Errorf("%w: the name is %d bytes; use at most %d", ErrInvalidTenant, len(name), MaxTenantName)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: the name %q is not UTF-8", ErrInvalidTenant, name)
	}
	for _, r := range name {
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: the name %q holds control character %U", ErrInvalidTenant, name, r)
		}
	}
	return nil
}

// Forget releases what the scheduler keeps for a tenant: its routing and
// admission state, its suspension record and its buffers' ownership (they
// are no one's afterwards). It refuses ([ErrTenantBusy], retryable) while
// the tenant has submissions in flight. Programs the tenant registered stay
// reserved to its name: lanes still hold their executables until trimmed,
// and no other tenant may invoke them. A later submission under the name
// starts afresh.
func (s *Scheduler) Forget(tenant string) error {
	if err := checkTenant(tenant); err != nil {
		return lanes.Wrap("forget", true, err)
	}
	if v, ok := s.tenants.Load(tenant); ok {
		ts := v.(*tenantState)
		ts.mu.Lock()
		if n := ts.inflight.Load(); n > 0 {
			ts.mu.Unlock()
			return lanes.Wrap("forget", true, fmt.Errorf("%w: tenant %q has %d; wait for them to end", ErrTenantBusy, tenant, n))
		}
		ts.forgotten = true
		s.tenants.Delete(tenant)
		s.routeMu.Lock()
		if ts.lane != nil {
			ts.lane.pinned--
			ts.lane = nil
		}
		s.routeMu.Unlock()
		ts.mu.Unlock()
	}
	s.ownMu.Lock()
	for k, owner := range s.owners {
		if owner == tenant {
			delete(s.owners, k)
		}
	}
	s.ownMu.Unlock()
	return nil
}

// Tenants is the number of tenants the scheduler keeps state for.
func (s *Scheduler) Tenants() int {
	n := 0
	s.tenants.Range(func(any, any) bool { n++; return true })
	return n
}

// faultRecord is a tenant's recent faults, for its suspension.
type faultRecord struct {
	mu          sync.Mutex
	strikes     []strike
	suspensions int       // in a row, each inside the window of the last
	lastEnd     time.Time // when the last suspension ended
	lastFaults  int       // the faults that caused the last suspension
}

// strike is one fault attributed to a tenant, with the counters it is
// measured against: the tenant's and everyone's ended submissions, and
// everyone's faults, when it happened.
type strike struct {
	at                   time.Time
	ended, all, allFault uint64
}

// suspended refuses a suspended tenant with how long it has left.
func (ts *tenantState) suspended() error {
	until := ts.suspendedUntil.Load()
	if until == 0 {
		return nil
	}
	left := time.Until(time.Unix(0, until))
	if left <= 0 {
		return nil
	}
	ts.faults.mu.Lock()
	n := ts.faults.lastFaults
	ts.faults.mu.Unlock()
	return &SuspendedError{Tenant: ts.name, RetryAfter: left, Faults: n}
}

// strike attributes a lane failure to the tenant whose submission caused
// it, and suspends the tenant when its faults are both many and far more
// frequent than the other tenants' (Config.Suspension). A name the
// scheduler does not know is ignored.
func (s *Scheduler) strike(tenant string) {
	all := s.faults.Add(1)
	v, ok := s.tenants.Load(tenant)
	sp := s.cfg.Suspension
	if !ok || sp.Disabled {
		return
	}
	ts := v.(*tenantState)
	now := time.Now()
	f := &ts.faults
	f.mu.Lock()
	defer f.mu.Unlock()
	keep := f.strikes[:0]
	for _, st := range f.strikes {
		if now.Sub(st.at) <= sp.Window {
			keep = append(keep, st)
		}
	}
	f.strikes = append(keep, strike{at: now, ended: ts.ended.Load(), all: s.ended.Load(), allFault: all})
	if len(f.strikes) < sp.After {
		return
	}
	first := f.strikes[0]
	mine := float64(len(f.strikes))
	mySubs := float64(ts.ended.Load()-first.ended) + 1
	others := float64(all-first.allFault+1) - mine
	otherSubs := max(float64(s.ended.Load()-first.all)+1-mySubs, 1)
	if mine/mySubs < sp.Ratio*others/otherSubs {
		return // faults everywhere alike: the device, not this tenant
	}
	if now.Sub(f.lastEnd) > sp.Window {
		f.suspensions = 0
	}
	d := min(sp.For<<min(f.suspensions, 20), sp.Max)
	f.suspensions++
	f.lastEnd = now.Add(d)
	f.lastFaults = len(f.strikes)
	f.strikes = f.strikes[:0]
	ts.suspendedUntil.Store(now.Add(d).UnixNano())
}
