package actors

// Tenants: their names, their lifecycle, and their suspension when their
// submissions keep failing lanes.

import (
	"fmt"
	"math"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/programs"
)

// MaxTenantName is the longest tenant name, in bytes.
const MaxTenantName = 256

// checkTenant validates a tenant name: non-empty, at most MaxTenantName
// bytes of printable UTF-8 (unicode.IsPrint: letters, marks, numbers,
// punctuation, symbols and the ASCII space; no control, format or
// invisible characters), not beginning or ending with a space.
func checkTenant(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: the name is empty; name every tenant", ErrInvalidTenant)
	case len(name) > MaxTenantName:
		return fmt.Errorf("%w: the name is %d bytes; use at most %d", ErrInvalidTenant, len(name), MaxTenantName)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: the name %q is not UTF-8", ErrInvalidTenant, name)
	case name[0] == ' ' || name[len(name)-1] == ' ':
		return fmt.Errorf("%w: the name %q begins or ends with a space", ErrInvalidTenant, name)
	}
	for _, r := range name {
		if !unicode.IsPrint(r) {
			return fmt.Errorf("%w: the name %q holds %U, which is not printable", ErrInvalidTenant, name, r)
		}
	}
	return nil
}

// Forget releases what the scheduler keeps for a tenant: its routing and
// admission state, its fault record and its buffers' ownership (they are
// no one's afterwards). It refuses ([ErrTenantBusy], retryable) while the
// tenant has submissions in flight, and a suspended tenant until its
// suspension ends. The programs the tenant registered are forgotten too:
// every lane drops them and evicts their executables before their names
// are free for any tenant to register. A later submission under the name
// starts afresh.
func (s *Scheduler) Forget(tenant string) error {
	if err := s.refuseStopped("forget"); err != nil {
		return err
	}
	if err := checkTenant(tenant); err != nil {
		return lanes.Wrap("forget", true, err)
	}
	if v, ok := s.tenants.Load(tenant); ok {
		ts := v.(*tenantState)
		if err := ts.suspended(); err != nil {
			return lanes.Wrap("forget", true, err) // forgetting must not lift a suspension
		}
		ts.mu.Lock()
		if n := ts.inflight.Load(); n > 0 {
			ts.mu.Unlock()
			return lanes.Wrap("forget", true, fmt.Errorf("%w: tenant %q has %d; wait for them to end", ErrTenantBusy, tenant, n))
		}
		s.dropLocked(ts)
		ts.mu.Unlock()
	}
	s.ownMu.Lock()
	for k := range s.owned[tenant] {
		if s.owners[k] == tenant {
			delete(s.owners, k)
		}
	}
	delete(s.owned, tenant)
	s.ownMu.Unlock()
	return nil
}

// dropLocked removes a tenant's routing and admission state (ts.mu held,
// nothing in flight): a later admission makes a new one. The lanes forget
// its programs and executables, and its program names are released (see
// releaseLanes).
func (s *Scheduler) dropLocked(ts *tenantState) {
	if ts.lastActive.Load() != 0 { // it ran something: lanes may hold its executables
		s.releaseLanes(ts.name)
	}
	ts.forgotten = true
	s.tenants.Delete(ts.name)
	s.forgottenLaunches.Add(ts.launches.Load())
	s.routeMu.Lock()
	if ts.lane != nil {
		ts.lane.pinned--
		ts.lane = nil
	}
	s.routeMu.Unlock()
}

// releaseLanes tells every lane to forget a forgotten tenant's programs
// and executables, and then releases its program names: a batch that
// registers one of them anew reaches each lane after that lane forgot the
// old program.
func (s *Scheduler) releaseLanes(tenant string) {
	s.ownMu.Lock()
	defer s.ownMu.Unlock()
	var ids []programs.ID
	if s.programCount[tenant] > 0 {
		for id, c := range s.programs {
			if c.owner == tenant && c.pending == 0 {
				ids = append(ids, id)
			}
		}
	}
	for _, ref := range s.lanes {
		s.system.Root.Send(ref.pid, forgetTenant{tenant: tenant, programs: ids})
	}
	for _, id := range ids {
		delete(s.programs, id)
	}
	if s.programCount[tenant] -= len(ids); s.programCount[tenant] <= 0 {
		delete(s.programCount, tenant)
	}
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
// measured against when it happened: the launches of the tenant's and of
// everyone's ended submissions, and everyone's faults.
type strike struct {
	at                              time.Time
	launches, allLaunches, allFault uint64
}

// allLaunches is the launches of every tenant's ended submissions, summed
// when a fault needs it (a counter that every lane bumps at every
// completion would be one cache line all lane threads fight over).
func (s *Scheduler) allLaunches() uint64 {
	n := s.forgottenLaunches.Load()
	s.tenants.Range(func(_, v any) bool {
		n += v.(*tenantState).launches.Load()
		return true
	})
	return n
}

// suspicion is how unlikely a tenant's faults must be, at the other
// tenants' fault rate, before it is suspended: chance alone clusters a
// few faults now and then on a flaky device, and must not suspend anyone.
const suspicion = 1e-6

// poissonTail is P(X >= k) for X Poisson with mean lambda: how likely k or
// more faults are where lambda are expected.
func poissonTail(k int, lambda float64) float64 {
	switch {
	case k <= 0:
		return 1
	case lambda <= 0:
		return 0
	case lambda >= float64(k):
		return 1 // at least about even odds: nothing unusual
	}
	lg, _ := math.Lgamma(float64(k) + 1)
	term := math.Exp(-lambda + float64(k)*math.Log(lambda) - lg)
	sum := 0.0
	for i := k; i < k+10000 && term > sum*1e-12; i++ {
		sum += term
		term *= lambda / float64(i+1)
	}
	return min(sum, 1)
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
	allLaunches := s.allLaunches()
	f.strikes = append(keep, strike{at: now, launches: ts.launches.Load(), allLaunches: allLaunches, allFault: all})
	if len(f.strikes) < sp.After {
		return
	}
	// Fault rates per launch since the tenant's first fault in the window:
	// the tenant's against everyone else's.
	first := f.strikes[0]
	mine := float64(len(f.strikes))
	myLaunches := float64(ts.launches.Load()-first.launches) + 1
	others := float64(all-first.allFault+1) - mine
	otherRate := others / max(float64(allLaunches)-float64(first.allLaunches)+1-myLaunches, 1)
	if mine/myLaunches < sp.Ratio*otherRate {
		return // faults everywhere alike: the device, not this tenant
	}
	if poissonTail(len(f.strikes), otherRate*myLaunches) > suspicion {
		return // a few faults close together, as chance makes them
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
