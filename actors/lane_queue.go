// How a lane actor feeds its stream: received batches wait in the fair
// queue until the stream has room for them, then are submitted.

package actors

import (
	"context"
	"time"

	"github.com/lanesched/lanes/cuda"
	laneerr "github.com/lanesched/lanes/internal/laneerr"

	lanecore "github.com/lanesched/lanes/internal/lanecore"
	"github.com/lanesched/lanes/lanes"
)

// receive takes a batch sent to the lane: it goes to the stream now when
// the stream has room and no batch waits, else into the fair queue.
func (a *laneActor) receive(m *submitRequest) {
	a.ref.received.Add(1)
	if !a.serving() {
		// Not submitted: the scheduler moves it with its tenant.
		a.s.reroute(m, a.ref)
		return
	}
	a.noteTenant(m.Tenant)
	if a.queue.len() == 0 && a.room() && a.mayEnqueue(m.Tenant) && !a.awaitsDrain(m.Tenant) {
		a.submit(m)
		return
	}
	a.hold(m)
}

// hold puts work in the fair queue.
func (a *laneActor) hold(w work) {
	a.queue.push(w)
	a.ref.queued.Store(int64(a.queue.len()))
}

// mayEnqueue reports whether a tenant may put another batch on the stream:
// it holds fewer than StreamDepth of the stream's submissions, or the lane
// serves it alone (no other tenant sent it work for sharedWindow, nor
// among the last sharedBatches it received), when a
// deeper stream costs no one anything and keeps the device busy.
func (a *laneActor) mayEnqueue(tenant string) bool {
	return a.s.cfg.StreamDepth < 0 || a.onStream[tenant] < a.s.cfg.StreamDepth || !a.shared()
}

// noteTenant records that a tenant sent the lane work: a tenant other than
// the last one makes the lane shared for sharedWindow and sharedBatches.
func (a *laneActor) noteTenant(tenant string) {
	if tenant != a.lastTenant {
		a.lastTenant = tenant
		a.sharedUntil = time.Now().Add(sharedWindow)
		a.sharedThrough = a.ref.received.Load() + sharedBatches
	}
}

// shared reports whether more than one tenant sent the lane work lately.
func (a *laneActor) shared() bool {
	return a.ref.received.Load() < a.sharedThrough || time.Now().Before(a.sharedUntil)
}

// receiveStaged takes a staged request: a preparation runs now (it is the
// operator's, after everything received before it); a replay takes its
// turn in the fair queue like a batch. A replay waits for its fence on the
// lane's thread, so the queue serves one and then lets the mailbox in
// (serveQueue): batches that arrived meanwhile queue beside the next
// replays instead of waiting behind all of them.
func (a *laneActor) receiveStaged(m *stagedRequest) {
	a.ref.received.Add(1)
	if m.Prepare || !a.serving() {
		a.dispatch(true)
		a.staged(m)
		return
	}
	a.noteTenant(m.tenant)
	a.hold(m)
	a.serveLater()
}

// serveLater asks the mailbox to serve the fair queue once the messages
// already in it are received.
func (a *laneActor) serveLater() {
	if !a.serveArmed {
		a.serveArmed = true
		a.s.system.Root.Send(a.self, serveQueue{})
	}
}

// room reports whether the stream takes another submission: unless it is
// empty, it holds fewer commands than one batch may have
// (MaxBatchEntries), so that a batch waits behind at most about one
// outsized batch there; each tenant holds at most StreamDepth of its
// submissions (mayEnqueue).
func (a *laneActor) room() bool {
	if len(a.calls) == 0 {
		return true
	}
	if a.draining() {
		return false
	}
	return a.s.cfg.StreamDepth < 0 || a.streamEntries < a.s.cfg.MaxBatchEntries
}

// dispatch moves waiting batches to the stream while it has room (all of
// them when all is set: before administration and at a drain, which wait
// for everything received before them).
func (a *laneActor) dispatch(all bool) {
	defer func() { a.ref.queued.Store(int64(a.queue.len())) }()
	for a.queue.len() > 0 && (all || a.room()) {
		var next work
		if all {
			next = a.queue.pop()
		} else if next = a.captureTurn(); next == nil {
			if next = a.queue.popFor(a.mayEnqueue); next == nil {
				break // every waiting tenant holds its depth of the stream
			}
		}
		switch m := next.(type) {
		case *submitRequest:
			if !a.serving() {
				a.s.reroute(m, a.ref)
			} else {
				a.submit(m)
			}
		case *stagedRequest:
			a.staged(m)
			if !all && a.queue.len() > 0 {
				a.serveLater() // one replay per turn of the mailbox
				return
			}
		}
	}
}

// requeue hands all waiting work back, not submitted: batches to the
// scheduler, which moves them with their tenants; staged replays to their
// callers, with why (a staged program lives on its lane).
func (a *laneActor) requeue() {
	for _, w := range a.queue.drain() {
		switch m := w.(type) {
		case *submitRequest:
			a.s.reroute(m, a.ref)
		case *stagedRequest:
			a.s.completeAdmin(m.Call, nil, a.unavailable("staged replay"))
		}
	}
	a.ref.queued.Store(0)
}

// withdraw ends a batch whose caller's context ended while it waits in
// the fair queue: not submitted, withdrawn. One the lane took already, or
// sent on to another lane, is not here: it ends as it runs (a batch still
// on its way is withdrawn when a lane takes it, by submit's own check).
func (a *laneActor) withdraw(call uint64) {
	w := a.queue.remove(func(w work) bool { m, ok := w.(*submitRequest); return ok && m.Call == call })
	if w == nil {
		return
	}
	a.ref.queued.Store(int64(a.queue.len()))
	m := w.(*submitRequest)
	err := context.Canceled
	if m.ctx != nil && m.ctx.Err() != nil {
		err = m.ctx.Err()
	}
	a.s.complete(m.Call, lanes.Receipt{}, laneerr.Wrap("submit", true, withdrawn(err)))
}

// submit puts a batch on the lane's stream.
func (a *laneActor) submit(m *submitRequest) {
	if m.ctx != nil && m.ctx.Err() != nil {
		// The caller gave up before the lane took the batch: never run it.
		a.s.complete(m.Call, lanes.Receipt{}, laneerr.Wrap("submit", true, withdrawn(m.ctx.Err())))
		return
	}
	var taken time.Time
	if a.s.cfg.Telemetry != nil {
		taken = time.Now()
	}
	sub, err := a.lane.Submit(m.Batch)
	a.publish()
	if err != nil && sub.Fence == 0 {
		// The lane leaves routing before its caller hears of the failure.
		if a.lane.State() == lanecore.StateFailed {
			a.failed(m.Tenant, a.lane.Err())
		}
		r := lanes.Receipt{}
		if !cuda.Classify(err).NotSubmitted {
			// Enqueue failed partway: some of the batch may have run.
			r.Outcome, err = lanes.OutcomeIndeterminate, indeterminate("submit", err)
		}
		var enqueued time.Time
		if !taken.IsZero() {
			enqueued = time.Now()
		}
		a.s.completeStaged(m.Call, r, err, taken, enqueued)
		return
	}
	// Accepted, or refused partway (the caller's error): it ends at its
	// fence either way.
	if len(a.calls) == 0 {
		a.progressAt = time.Now()
	}
	w := waiting{call: m.Call, tenant: m.Tenant, entries: m.cost(), taken: taken}
	if !taken.IsZero() {
		w.enqueued = time.Now()
	}
	a.calls[sub.Fence] = w
	a.noteCapture(m.Tenant, sub.Preparation)
	a.streamEntries += m.cost()
	a.onStream[m.Tenant]++
	a.arm(true)
}
