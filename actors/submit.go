// Submit and SubmitAsync: a tenant's batch from the caller to its lane,
// and the Pending that sees it end.

package actors

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lanesched/lanes/cuda"
	laneerr "github.com/lanesched/lanes/internal/laneerr"
	"github.com/lanesched/lanes/internal/recording"
	"github.com/lanesched/lanes/internal/schedhook"
	"github.com/lanesched/lanes/lanes"
	"go.opentelemetry.io/otel/trace"
)

// Submit routes a batch to the tenant's lane and waits for its receipt.
//
// An error before admission is a *lanes.Error that says nothing was
// submitted (cuda.Classify(err).NotSubmitted): a context already done, an
// invalid tenant, a batch naming what is not the tenant's, a suspended
// tenant, overload, no healthy lane, a stopped scheduler. Once admitted, a
// submission ends exactly once. If ctx ends first, Submit returns a
// [*DetachedError] whose Pending observes that end; a batch its lane has
// not taken yet is then not run at all. A submission that did not succeed
// returns its receipt with an error that wraps the cause: errors.Is reaches
// the lane's and the device's sentinels (cuda.ErrIllegalAddress,
// ErrIndeterminate, ErrHung, ...).
func (s *Scheduler) Submit(ctx context.Context, tenant string, b lanes.Batch) (lanes.Receipt, error) {
	if s.unstarted() {
		return lanes.Receipt{}, errUnstarted
	}
	p, err := s.SubmitAsync(ctx, tenant, b)
	if err != nil {
		return lanes.Receipt{Outcome: lanes.OutcomeRefused, Err: err, Tenant: tenant, Lane: -1}, err
	}
	// SubmitAsync refused a nil ctx: it is a real one here.
	select {
	case <-p.Done():
		return p.Result()
	case <-ctx.Done():
		select {
		case <-p.Done(): // ended too: the end is the answer, unless ctx's end caused it
			if _, err := p.Result(); !errors.Is(err, ErrWithdrawn) {
				return p.Result()
			}
		default:
		}
		// Withdrawn or not (ctx's end withdraws a batch still waiting for
		// its lane), the caller learns it from the Pending, as through a
		// front, where the withdrawal takes the host's answer.
		return lanes.Receipt{Tenant: tenant, Lane: -1}, &DetachedError{Pending: p, Err: ctx.Err()}
	}
}

// pending is a submission in flight: a lanes.Pending.
type pending struct{ c call } // the call itself: one allocation per submission

// Done is closed when the submission has ended.
func (p *pending) Done() <-chan struct{} { return p.c.done }

// Result returns the receipt and error once Done is closed (it waits).
func (p *pending) Result() (lanes.Receipt, error) {
	<-p.c.done
	return p.c.receipt, p.c.err
}

// Lane is the lane the submission was routed to (last, after a move), or
// -1 while it waits to move.
func (p *pending) Lane() int {
	if l := p.c.lane.Load(); l != nil {
		return l.id
	}
	return -1
}

// SubmitAsync admits a batch for a tenant and returns at once; Pending
// observes its end. Admission errors come back here and mean nothing was
// submitted (see Submit). While the batch waits for its lane, ctx still
// matters: a lane does not start a batch whose context has ended, and ends
// it not submitted with the context's error instead.
//
// The batch, with its entries and their slices, belongs to the scheduler
// until the submission ends: reuse it only after Done is closed.
func (s *Scheduler) SubmitAsync(ctx context.Context, tenant string, b lanes.Batch) (lanes.Pending, error) {
	if s.unstarted() {
		return nil, errUnstarted
	}
	return s.SubmitNotify(ctx, tenant, b, nil)
}

// SubmitNotify is SubmitAsync that also calls ended once when a submission
// it admitted ends (after Done is closed), on the goroutine that ended it:
// often a lane's own thread, so ended must return at once (hand the
// Pending to a goroutine of yours; a channel send that may block is too
// much). It spares a caller with many submissions in flight a goroutine
// waiting on each one's Done. A refused submission is not notified: its
// error comes back here. nil ended is SubmitAsync.
//
// ended may submit the tenant's next step (SubmitNotify again): on the
// lane's thread that is taken in the same mailbox run, with no goroutine
// woken, the loop a hand-written driver program runs (see "A serving loop
// without hand-offs" in the package doc, which says where ended runs).
// ended can run before SubmitNotify returns, and must not block.
func (s *Scheduler) SubmitNotify(ctx context.Context, tenant string, b lanes.Batch, ended func(lanes.Pending)) (lanes.Pending, error) {
	if s.unstarted() {
		return nil, errUnstarted
	}
	return s.submitNotifyMemo(ctx, tenant, b, nil, ended)
}

// submitNotifyMemo is SubmitNotify for a batch submitted again and again,
// unchanged (a step encoded once, say): memo keeps what the ownership
// check of the batch concluded, and the next submission of the same batch
// (the same Entries, Retain and Patches slices) by the same tenant skips
// that check while ownership changed nowhere in the scheduler. A batch
// changed in place is not seen: see schedhook.OwnershipMemo for what that costs. A
// batch that declares a program is checked every time (its claim is
// counted). A nil memo is SubmitNotify.
func (s *Scheduler) submitNotifyMemo(ctx context.Context, tenant string, b lanes.Batch, memo *schedhook.OwnershipMemo, ended func(lanes.Pending)) (lanes.Pending, error) {
	if s.unstarted() {
		return nil, errUnstarted
	}
	p, err := s.admitSubmission(ctx, tenant, b, memo, ended)
	if err != nil {
		s.traceRefusal(ctx, tenant, &b, err)
		return nil, err
	}
	return p, nil
}

// admitSubmission is SubmitNotify but for the refusal's trace.
func (s *Scheduler) admitSubmission(ctx context.Context, tenant string, b lanes.Batch, memo *schedhook.OwnershipMemo, ended func(lanes.Pending)) (*pending, error) {
	if err := s.refuseStopped("submit"); err != nil {
		return nil, err
	}
	if ctx == nil {
		return nil, laneerr.Wrap("submit", true, errNilContext)
	}
	if err := ctx.Err(); err != nil {
		return nil, laneerr.Wrap("submit", true, err)
	}
	ts, err := s.tenant(tenant)
	if err != nil {
		return nil, laneerr.Wrap("submit", true, err)
	}
	p, err := s.submitAsync(ctx, ts, b, memo, ended)
	if err != nil {
		s.dropIfFresh(ts) // a name only ever refused leaves nothing behind
		return nil, err
	}
	return p, nil
}

// traceRefusal hands a submission refused at admission to the telemetry.
func (s *Scheduler) traceRefusal(ctx context.Context, tenant string, b *lanes.Batch, err error) {
	if s.cfg.Telemetry != nil {
		var parent trace.SpanContext
		if ctx != nil {
			parent = trace.SpanContextFromContext(ctx)
		}
		now := time.Now()
		s.rec.Submission(context.Background(), recording.Submission{Tenant: tenant, Lane: -1, Device: -1, Entries: len(b.Entries), Path: b.Path, Timing: b.Timing,
			Parent: parent, Start: now, End: now, Receipt: lanes.Receipt{Outcome: lanes.OutcomeRefused, Err: err, Lane: -1}, Err: err})
	}
}

// submitAsync is SubmitAsync once the tenant's state is found.
func (s *Scheduler) submitAsync(ctx context.Context, ts *tenantState, b lanes.Batch, memo *schedhook.OwnershipMemo, ended func(lanes.Pending)) (*pending, error) {
	tenant := ts.name
	cost, err := s.checkSize(&b)
	if err != nil {
		return nil, laneerr.Wrap("submit", true, err)
	}
	device := batchDevice(&b)
	if err := s.checkDevice(device); err != nil {
		return nil, laneerr.Wrap("submit", true, err)
	}
	claimed, err := s.checkOwnership(tenant, &b, memo)
	if err != nil {
		return nil, laneerr.Wrap("submit", true, err)
	}
	p := &pending{c: call{tenant: tenant, batch: b, ctx: ctx, start: time.Now(), cost: cost}}
	if ended != nil {
		p.c.ended = func() { ended(p) }
	}
	if s.cfg.Telemetry != nil {
		p.c.parent = trace.SpanContextFromContext(ctx)
	}
	if claimed {
		id := b.Program.ID
		p.c.claim = &id
	}
	s.watch(ctx, &p.c)
	if err := s.admit(ts, device, &p.c); err != nil {
		if p.c.unwatch != nil {
			p.c.unwatch()
		}
		if claimed {
			s.settleClaim(*p.c.claim, false)
		}
		return nil, laneerr.Wrap("submit", true, err)
	}
	return p, nil
}

// watch withdraws a submission whose context ends while its batch waits
// in its lane's fair queue, at once: its Pending ends not submitted
// (ErrWithdrawn) without waiting for the lane to reach it, and its place
// in the queue and its admission go to others. A context that cannot end
// costs nothing; one that ends after the lane took the batch changes
// nothing. (A batch parked or on its way to a lane meanwhile is withdrawn
// when a lane takes it.)
func (s *Scheduler) watch(ctx context.Context, c *call) {
	if ctx.Done() == nil {
		return
	}
	c.unwatch = context.AfterFunc(ctx, func() {
		if lane := c.lane.Load(); lane != nil { // sent: its id is set
			s.system.Root.Send(lane.pid, withdrawRequest{call: c.id})
		}
	})
}

// checkDevice refuses a batch whose buffers live on a device no lane of the
// scheduler serves: the caller's mistake, not an absence of healthy lanes.
func (s *Scheduler) checkDevice(device uint64) error {
	if device == 0 || s.device(device) != nil {
		return nil
	}
	return fmt.Errorf("%w: %w: the batch names buffers of device instance %d, which no lane of this scheduler serves; allocate them on a device it serves (Config.Devices; through a front, with Alloc on the tenant's own host)",
		lanes.ErrInvalidBatch, cuda.ErrForeignHandle, device)
}
