package lanes

import (
	"context"
	"fmt"

	"github.com/lanesched/lanes/actors"
	laneerr "github.com/lanesched/lanes/internal/laneerr"
	"github.com/lanesched/lanes/lanes"
)

// An Upload or a Free whose context ends while it waits goes on to its
// end: the write or the free was the tenant's once its first piece was
// accepted, and a tenant told that its memory is going away must not find
// it still allocated. The caller gets an *actors.DetachedError whose
// Pending ends with the operation; the tenant's later calls through the
// server wait for it first (bounded by their own contexts), so that they
// see its write (or its free), in the order the tenant made them; a later
// Upload or Free queues behind it instead, and detaches in turn.

// detachedOp is a tenant's Upload or Free going on after its caller
// stopped waiting: the Pending of its DetachedError.
type detachedOp struct {
	done chan struct{}
	err  error
}

// Done is closed when the operation ended.
func (d *detachedOp) Done() <-chan struct{} { return d.done }

// Result waits for the end and returns the operation's error; its receipt
// is empty (an Upload of several pieces has several).
func (d *detachedOp) Result() (Receipt, error) {
	<-d.done
	r := Receipt{Lane: -1}
	if d.err != nil {
		r.Outcome, r.Err = lanes.OutcomeIndeterminate, d.err
	}
	return r, d.err
}

// detach lets rest finish the tenant's operation after ctx ended: the
// tenant's later calls wait for it (awaitDetached).
func (s *Server) detach(ctx context.Context, tenant string, rest func() error) error {
	return &actors.DetachedError{Pending: s.chain(tenant, rest), Err: ctx.Err()}
}

// behindDetached runs an Upload's or a Free's work after the tenant's
// detached operation still going on, if it has one (its order holds), and
// waits for it within ctx: past ctx it detaches in turn. queued is false when
// the tenant has none: the caller runs the work itself.
func (s *Server) behindDetached(ctx context.Context, tenant string, work func() error) (queued bool, err error) {
	if s.detachedN.Load() == 0 {
		return false, nil
	}
	s.mu.RLock()
	busy := s.detached[tenant] != nil
	s.mu.RUnlock()
	if !busy {
		return false, nil
	}
	op := s.chain(tenant, work)
	select {
	case <-op.done:
		return true, op.err
	case <-ctx.Done():
		return true, &actors.DetachedError{Pending: op, Err: ctx.Err()}
	}
}

// chain makes work the tenant's operation going on, run once the one
// before it (if any) ended.
func (s *Server) chain(tenant string, work func() error) *detachedOp {
	op := &detachedOp{done: make(chan struct{})}
	s.mu.Lock()
	prev := s.detached[tenant]
	s.detached[tenant] = op
	s.mu.Unlock()
	s.detachedN.Add(1)
	go func() {
		if prev != nil {
			<-prev.done // one tenant's detached operations end in order
		}
		op.err = work()
		s.mu.Lock()
		if s.detached[tenant] == op {
			delete(s.detached, tenant)
		}
		s.mu.Unlock()
		s.detachedN.Add(-1)
		close(op.done)
	}()
	return op
}

// awaitDetached waits, within ctx, for the tenant's detached operation, if
// it has one going on; Forget is refused meanwhile (actors.ErrTenantBusy),
// as it is while any of the tenant's work is in flight.
func (s *Server) awaitDetached(op string, ctx context.Context, tenant string) error {
	s.mu.RLock()
	d := s.detached[tenant]
	s.mu.RUnlock()
	if d == nil {
		return nil
	}
	if op == "forget" {
		// As with any work in flight: refused, not waited for.
		return laneerr.Wrap(op, true, fmt.Errorf("%w: tenant %q has a detached Upload or Free going on; wait for it to end (its DetachedError's Pending)", actors.ErrTenantBusy, tenant))
	}
	select {
	case <-d.done:
		return nil
	case <-ctx.Done():
		return laneerr.Wrap(op, true, ctx.Err())
	}
}
