// Tenants: their names, their state (tenantState) and their lifecycle
// (Forget); suspension is in suspension.go.

package actors

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"unicode"
	"unicode/utf8"

	laneerr "github.com/lanesched/lanes/internal/laneerr"
	"github.com/lanesched/lanes/programs"
)

// MaxTenantName is the longest tenant name, in bytes.
const MaxTenantName = 256

// checkTenant validates a tenant name: non-empty, at most MaxTenantName
// bytes of printable UTF-8 (unicode.IsPrint: letters, marks, numbers,
// punctuation, symbols and the ASCII space; no control, format or
// invisible characters), not beginning or ending with a space, not
// beginning with "lanes:" (the scheduler's own work's names).
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
	case strings.HasPrefix(name, reservedTenantPrefix):
		return fmt.Errorf("%w: the name %q begins with %q, which names the scheduler's own work (FillShared); choose another", ErrInvalidTenant, name, reservedTenantPrefix)
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
	if s.unstarted() {
		return errUnstarted
	}
	if err := s.refuseStopped("forget"); err != nil {
		return err
	}
	if err := checkTenant(tenant); err != nil {
		return laneerr.Wrap("forget", true, err)
	}
	if v, ok := s.tenants.Load(tenant); ok {
		ts := v.(*tenantState)
		if err := ts.suspended(); err != nil {
			return laneerr.Wrap("forget", true, err) // forgetting must not lift a suspension
		}
		ts.mu.Lock()
		if n := ts.inflight.Load(); n > 0 {
			ts.mu.Unlock()
			return laneerr.Wrap("forget", true, fmt.Errorf("%w: tenant %q has %d; wait for them to end", ErrTenantBusy, tenant, n))
		}
		s.dropLocked(ts)
		ts.mu.Unlock()
	}
	s.lockOwnership()
	s.disownLocked(tenant)
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
	s.lockOwnership()
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
	if s.unstarted() {
		return 0
	}
	n := 0
	s.tenants.Range(func(any, any) bool { n++; return true })
	return n
}

// suspicion is how unlikely a tenant's faults must be, at the other
// tenants' fault rate, before it is suspended: chance alone clusters a
// few faults now and then on a flaky device, and must not suspend anyone.
const suspicion = 1e-6

// tenantState is one tenant's admission and routing state.
type tenantState struct {
	name   string
	weight int // its share of lanes (Config.Weight)

	// mu orders the tenant's admissions and moves: everything a batch
	// needs to be sent to a lane happens under it.
	mu     sync.Mutex
	lane   *laneRef // the lane the tenant is pinned to (mu)
	parked []*call  // admitted, waiting to move to a new lane, in admission order (mu)
	// unsent are admitted calls refused while mu was held (no lane took
	// them): unlock ends them once mu is released, because ending runs
	// the submitter's ended callback, which may submit again and take mu.
	unsent    []unsent
	forgotten bool // Forget removed the tenant; admission looks it up again (mu)

	moving   atomic.Bool      // parked is not empty
	inflight atomic.Int64     // admitted and not ended, parked included
	active   atomic.Int64     // sent to a lane and not ended or bounced back
	staged   atomic.Int64     // staged replays admitted and not ended
	stagedOn map[*laneRef]int // staged replays admitted and not ended, per lane (mu)

	lastActive     atomic.Int64  // unix ns of its last admission (janitor)
	launches       atomic.Uint64 // launches of its ended submissions, for its fault rate
	suspendedUntil atomic.Int64  // unix nanoseconds; 0 when not suspended
	faults         faultRecord
}

// lock locks a tenant's state, or the state that replaced it if Forget
// removed it meanwhile, and refuses a suspended tenant.
func (s *Scheduler) lock(ts *tenantState) (*tenantState, error) {
	for {
		if err := ts.suspended(); err != nil {
			return nil, err
		}
		ts.mu.Lock()
		if !ts.forgotten {
			return ts, nil
		}
		ts.mu.Unlock() // forgotten meanwhile: a new state takes its place
		var err error
		if ts, err = s.tenant(ts.name); err != nil {
			return nil, err
		}
	}
}

// tenant returns a tenant's state, creating it on first use. Only a valid
// name is ever stored, so a known name needs no check.
func (s *Scheduler) tenant(name string) (*tenantState, error) {
	if v, ok := s.tenants.Load(name); ok {
		return v.(*tenantState), nil
	}
	if err := checkTenant(name); err != nil {
		return nil, err
	}
	v, _ := s.tenants.LoadOrStore(name, &tenantState{name: name, weight: s.weight(name)})
	return v.(*tenantState), nil
}

// TenantLane is the lane a tenant's batches run on (Receipt.Lane): the
// lane it is pinned to, and false for a tenant not yet routed to one (it
// has submitted nothing since it was last forgotten). A tenant moves only
// while it has nothing in flight (see Submit), so the answer holds until
// the tenant is idle again.
func (s *Scheduler) TenantLane(tenant string) (int, bool) {
	if s.unstarted() {
		return -1, false
	}
	v, ok := s.tenants.Load(tenant)
	if !ok {
		return 0, false
	}
	ts := v.(*tenantState)
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.lane == nil || ts.forgotten {
		return 0, false
	}
	return ts.lane.id, true
}
