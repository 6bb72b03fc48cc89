// The front's actor: what its hosts say (hellos, heartbeats, receipts,
// operation results) and the remote's word that a host's address went
// away.

package front

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/internal/codes"
	"github.com/lanesched/lanes/internal/wirepb"
	"github.com/lanesched/lanes/lanes"

	dataplane "github.com/lanesched/lanes/remote/internal/dataplane"

	wire "github.com/lanesched/lanes/remote/internal/wire"
)

// FrontActor receives every message hosts send the front. Hosts send with
// their own actor as the sender, so the sender's address names the link.
type FrontActor struct{ f *Front }

// Receive dispatches one message.
func (a *FrontActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Terminated:
		if l := a.f.linkAt(m.Who.GetAddress()); l != nil {
			st := l.Status()
			l.lose(st.Epoch, "the remote's connection to its address ended (its process died, or the connection broke)")
		}
		return
	case *wirepb.Hello:
		a.hello(ctx, m)
		return
	}
	l := a.f.linkAt(ctx.Sender().GetAddress())
	if l == nil {
		return // not one of ours
	}
	switch m := ctx.Message().(type) {
	case *wirepb.Heartbeat:
		if p := l.pendingUnder(m.Epoch); p != nil && !a.firstBeat(ctx, l, m, p) {
			return
		}
		if m.Dropped != "" {
			l.droppedBy(m.Epoch, m.Dropped)
			return
		}
		if !l.heardFrom(m.Epoch) {
			return
		}
		if m.ProbeEcho > l.echoed.Load() && m.ProbeEcho <= l.probeSeq.Load() {
			l.echoed.Store(m.ProbeEcho)
		}
		if m.DeviceFault != "" {
			l.lose(m.Epoch, "its device is poisoned: "+m.DeviceFault)
		}
	default:
		a.fromHost(l, m)
	}
}

// fromHost takes a host's answer to the front, from the remote or the
// link's data plane: receipts, op results, that it is leaving or left.
func (a *FrontActor) fromHost(l *Link, msg any) {
	switch m := msg.(type) {
	case *wirepb.Receipts:
		a.receipts(l, m)
	case *wirepb.Leaving:
		if !l.heardFrom(m.Epoch) {
			return
		}
		if m.Drained {
			l.hasLeft(m.Epoch)
			return
		}
		l.leaving.Store(m.Epoch)
		a.f.cfg.Logf("host %s (epoch %d) is leaving: no new tenants or submissions; it finishes what it has", l.Name, m.Epoch)
	case *wirepb.OpResult:
		if !l.heardFrom(m.Epoch) {
			return
		}
		if p, ok := a.f.calls.Settle(l.Name, m.Epoch, m.Call); ok {
			err := opError(m)
			if cuda.Code(m.ErrorCode) == codes.HostLeaving { // an allocation sent before the front heard
				err = &wire.HostLeavingError{Tenant: p.tenant, Host: l.Name}
			}
			p.end(p.r, err, m)
		} else {
			l.stale.Add(1)
		}
	}
}

// hello checks a host's registration and answers it.
func (a *FrontActor) hello(ctx actor.Context, m *wirepb.Hello) {
	sender := ctx.Sender()
	l := a.f.linkAt(sender.GetAddress())
	if l == nil {
		return
	}
	if !l.joining(m.Attempt) {
		return // the answer to a join given up on, or a second answer
	}
	if w := l.welcomedUnder(m.Epoch); w != nil {
		a.f.tell(sender, w) // the same Hello again (its Welcome was lost, say): the same answer
		return
	}
	w := wire.CheckHello(m)
	w.Epoch = m.Epoch
	if beat := time.Duration(m.HeartbeatNanos); w.Accepted && beat > 0 && a.f.cfg.LostAfter < 2*beat {
		w.Accepted = false
		w.Refusal = fmt.Sprintf("it sends a heartbeat every %v, and this front's LostAfter %v would lose it between two: give LostAfter at least %v (a few heartbeats), or the host a shorter --heartbeat", beat, a.f.cfg.LostAfter, 3*beat)
	}
	if w.Accepted {
		w.Modules = a.f.modules
	}
	var plane *dataplane.DataPlane
	why := m.NoDataPlane // why the registration's traffic takes the remote
	if w.Accepted && m.DataPlane != nil {
		plane, w.DataPlaneRefusal = a.f.attach(l, m.DataPlane)
		w.DataPlane = plane != nil
		why = w.DataPlaneRefusal
	}
	a.f.tell(sender, w)
	if !w.Accepted {
		l.refused(w.Refusal, m.Refusal != "") // the host's own refusal (full, leaving) passes; others do not
		return
	}
	lanes := 0
	for _, d := range m.Devices {
		lanes += int(d.Lanes)
	}
	if old := l.awaitFirstBeat(w, pendingReg{host: m.Host, lanes: lanes, runtime: m.Runtime, noPlane: why, maxEntries: int64(m.MaxBatchEntries), maxBytes: m.MaxBatchBytes}); old != 0 {
		l.closePlane(old) // an earlier Hello of this join, since dropped by the host
	}
	if plane != nil {
		l.startPlane(a, m.Epoch, plane) // before it serves: the first submission goes through it
	}
}

// firstBeat takes the first heartbeat of a registration the front
// welcomed: the host holds it, and it serves from now on; or the host
// says it dropped it before it served (the connection from the front
// ended meanwhile, say), and the front joins again. A registration
// serves only once the host has shown it holds it, so no call goes to
// one the host no longer has.
func (a *FrontActor) firstBeat(ctx actor.Context, l *Link, m *wirepb.Heartbeat, p *pendingReg) (serving bool) {
	if m.Dropped != "" && m.Refused {
		if l.dropPending(m.Epoch) {
			l.closePlane(m.Epoch)
			l.refused("it will not serve this front: "+m.Dropped, false)
		}
		return false
	}
	if m.Dropped != "" {
		if l.dropPending(m.Epoch) {
			l.closePlane(m.Epoch)
			a.f.cfg.Logf("host %s dropped its registration %d before it served (%s): joining again", l.Name, m.Epoch, m.Dropped)
			l.event("dropped")
		}
		return false
	}
	if l.registered(m.Epoch, p) {
		ctx.Watch(ctx.Sender())
		return true
	}
	l.closePlane(m.Epoch)
	return false
}

// receipts ends each call its receipt answers; a receipt of another epoch,
// or of a call already ended (lost, say), is dropped.
func (a *FrontActor) receipts(l *Link, m *wirepb.Receipts) {
	for _, w := range m.Receipts {
		if w == nil {
			continue
		}
		if w.TemplateUnknown {
			a.resend(l, w)
			continue
		}
		epoch, call, r, _, err := wire.ReceiptFromWire(w)
		if err != nil {
			// Malformed: the call still ends, once, with what is known.
			if l.heardFrom(w.Epoch) {
				if p, ok := a.f.calls.Settle(l.Name, w.Epoch, w.Call); ok {
					p.end(lanes.Receipt{Outcome: lanes.OutcomeIndeterminate, Err: err, Tenant: p.tenant, Lane: -1}, err, nil)
				}
			}
			continue
		}
		if !l.heardFrom(epoch) {
			continue
		}
		a.TemplateRows(l, w, &r)
		p, ok := a.f.calls.Settle(l.Name, epoch, call)
		if !ok {
			l.stale.Add(1)
			continue
		}
		if sent := p.sentAt.Load(); sent != 0 {
			l.trips.note(sent, time.Now().UnixNano(), w.Timing)
		}
		if w.HostLeaving {
			e := &wire.HostLeavingError{Tenant: p.tenant, Host: l.Name}
			p.end(lanes.Receipt{Outcome: lanes.OutcomeRefused, Err: e, Tenant: p.tenant, Lane: -1}, e, nil)
			continue
		}
		if p.w != nil {
			withdrawnBy(p.w.ctx, r.Err)
		}
		p.end(r, r.Err, nil)
	}
}

// withdrawnBy lets the error of a submission its host withdrew (its
// caller's context ended while it waited for its lane) match that
// context's error too, as one process's does: errors.Is(err,
// context.DeadlineExceeded) or context.Canceled.
func withdrawnBy(ctx context.Context, err error) {
	pe, ok := err.(*wire.PeerError)
	if !ok || pe.Code != codes.Withdrawn {
		return
	}
	switch cause := ctx.Err(); {
	case errors.Is(cause, context.DeadlineExceeded):
		pe.Cause = context.DeadlineExceeded
	case errors.Is(cause, context.Canceled):
		pe.Cause = context.Canceled
	}
}

// TemplateRows fills in the rows a host left out as the same as the
// template's previous receipt's, and remembers a template's rows. The
// rows are then shared, read-only, with other receipts of the template,
// as one process's lanes share a steady step's rows (lanes.Attribution):
// a copy per receipt cost the front a tenth of its CPU on a 2-core
// machine (issue 56).
func (a *FrontActor) TemplateRows(l *Link, w *wirepb.Receipt, r *lanes.Receipt) {
	if w.Template == 0 {
		return
	}
	if l.rowsAt != w.Epoch || l.lastRows == nil {
		l.rowsAt, l.lastRows, l.lastSegs = w.Epoch, map[uint64][]lanes.Row{}, map[uint64][]lanes.SegmentRecord{}
	}
	if w.SegmentsAsBefore {
		r.Attribution.Segments = l.lastSegs[w.Template] // read-only, shared, as one process's lanes share them
	} else if len(l.lastSegs) < wire.MaxTemplates {
		l.lastSegs[w.Template] = r.Attribution.Segments
	}
	if w.RowsAsBefore {
		r.Attribution.Rows = l.lastRows[w.Template]
		return
	}
	if len(l.lastRows) < wire.MaxTemplates {
		l.lastRows[w.Template] = r.Attribution.Rows
	}
}

// resend sends a templated submission again, whole, to a host that did not
// hold its template (under the same call: it ends once either way).
func (a *FrontActor) resend(l *Link, w *wirepb.Receipt) {
	if !l.heardFrom(w.Epoch) {
		return
	}
	p, ok := a.f.calls.Get(l.Name, w.Epoch, w.Call)
	if !ok || p.enc == nil {
		return
	}
	l.forgetTemplate(w.Epoch, w.Template)
	s := &wirepb.Submit{Epoch: w.Epoch, Call: w.Call, Template: p.enc.id, Tenant: p.tenant, Batch: p.enc.wire, Withdrawable: p.w != nil}
	// From another goroutine: the actor must not send (and so wait) itself.
	go func() {
		l.enqueue(s)
		if p.w != nil && p.w.ctx.Err() != nil {
			l.withdraw(s.Epoch, s.Call, p) // the host ignored the one sent before (it had not taken the call)
		}
	}()
}

// linkAt is the link of the host at address, if any.
func (f *Front) linkAt(address string) *Link {
	for _, l := range f.AllLinks() {
		if at := l.at.Load(); at != nil && *at == address && address != "" {
			return l
		}
	}
	return nil
}
