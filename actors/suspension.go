// Suspension: a tenant whose submissions keep failing lanes, far more often
// per launch than others', is suspended alone.

package actors

import (
	"math"
	"sync"
	"time"
)

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
