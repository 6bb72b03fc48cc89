// A lane host's submissions: from the wire to the scheduler by shard, and
// their receipts back to the front of their epoch.

package host

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/internal/schedhook"
	"github.com/lanesched/lanes/internal/wirepb"
	"github.com/lanesched/lanes/lanes"

	dataplane "github.com/lanesched/lanes/remote/internal/dataplane"

	system "github.com/lanesched/lanes/remote/internal/system"

	wire "github.com/lanesched/lanes/remote/internal/wire"
)

// submits hands each submission of the current epoch to the scheduler; a
// receipt answers each, now for one refused, at its end for one accepted.
// Each must come from the front of its registration (sender), as sentBy
// says, and through the registration's data plane when it has one
// (viaPlane): its templates are then the plane reader's alone.
func (h *Host) submits(m *wirepb.Submits, sender *actor.PID, viaPlane bool) {
	var r *registration
	told := uint64(0) // the dropped registration this message's sender was told of
	for _, s := range m.Submits {
		if s == nil {
			continue
		}
		if r == nil || s.Epoch != r.epoch {
			var ok bool
			if r, ok = h.serving(s.Epoch); !ok {
				r = nil
				if s.Epoch != told { // the front's calls end with its loss, which the host's word brings now
					told = s.Epoch
					h.tellDropped(sender, s.Epoch)
				}
				continue
			}
			if sender == nil || sender.Address != r.front.Address || viaPlane != (r.PlaneFor() != nil) {
				h.sys.Guard.Dropped.Add(1) // another front's registration, or around its data plane
				r = nil
				continue
			}
			r.heard()
		}
		h.submit(r, s, viaPlane)
	}
}

func (h *Host) submit(r *registration, s *wirepb.Submit, viaPlane bool) {
	epoch := r.epoch
	if h.Leaving.Load() {
		w := wire.RefusedReceipt(epoch, s.Call, tenantOf(s), errLeaving)
		w.HostLeaving = true
		h.send(Outgoing{Receipt: w})
		return
	}
	var timing *wirepb.Timing
	if s.SentUnixNano != 0 {
		timing = &wirepb.Timing{Received: time.Now().UnixNano()}
	}
	b, area, memo, ok := h.batchOf(r, s)
	if !ok {
		return
	}
	tenant := b.Tenant
	b.Tenant = scoped(epoch, tenant)
	h.inFlight.Add(1)
	j := hostJob{epoch: epoch, call: s.Call, template: s.Template, b: b, memo: memo, tenant: tenant, timing: timing, viaPlane: viaPlane, area: area}
	if s.Withdrawable {
		j.watch = r
	}
	shard := shardOf(b.Tenant)
	if viaPlane {
		// The plane's reader admits them itself, in order: one hand-off
		// less for every step.
		h.admit(j, shard)
		return
	}
	select {
	case h.shards[shard] <- j:
	case <-h.quit:
		j.ended()
		h.inFlight.Add(-1)
	}
}

// scoped is a tenant's name in the host's scheduler: the front's name of
// it, in the namespace of the registration (epoch) that set it up. Tenants
// belong to the front that set them up: another front that names the same
// tenant has one of its own, with its own buffers, admission share and
// faults, and a front's Forget frees its own alone. The host's errors and
// logs show a tenant as NAME@EPOCH (base 36).
func scoped(epoch uint64, tenant string) string { return tenant + wire.RegistrationScope(epoch) }

// scopeOf is the registration a scoped tenant name belongs to.
func scopeOf(tenant string) string {
	if i := strings.LastIndexByte(tenant, '@'); i >= 0 {
		return tenant[i+1:]
	}
	return ""
}

// shardOf is the shard of a tenant (FNV-1a of its name).
func shardOf(tenant string) int {
	h := uint32(2166136261)
	for i := 0; i < len(tenant); i++ {
		h = (h ^ uint32(tenant[i])) * 16777619
	}
	return int(h % hostShards)
}

// tenantOp is an operation of a registration's tenant: an Alloc, Free,
// Read, Forget, LaneAdmin or a staged program's, from the remote or a
// data plane.
type tenantOp interface {
	GetEpoch() uint64
	GetCall() uint64
	GetTenant() string
}

// takeOp takes a tenant's operation: an allocation is refused while the
// host leaves; the rest run after the tenant's submissions that arrived
// before it, through the tenant's shard, which admits them in order (a
// Read sees what the steps before it wrote).
func (h *Host) takeOp(op tenantOp) {
	epoch, call := op.GetEpoch(), op.GetCall()
	if m, ok := op.(*wirepb.StagedReplay); ok {
		// Not in the tenant's order: a staged replay runs on the lane it
		// was prepared on, as in one process, and waits for its fence
		// there. Its inputs are taken here, where the message was read.
		inputs, release, err := h.stagedInputs(epoch, m)
		go h.replayStaged(epoch, call, m, inputs, release, err)
		return
	}
	_, prepare := op.(*wirepb.StagedPrepare)
	if _, alloc := op.(*wirepb.Alloc); (alloc || prepare) && h.Leaving.Load() {
		res := &wirepb.OpResult{Epoch: epoch, Call: call}
		wire.ErrorToResult(res, errLeaving)
		h.send(Outgoing{result: res})
		return
	}
	select {
	case h.shards[shardOf(scoped(epoch, op.GetTenant()))] <- hostJob{epoch: epoch, call: call, op: op}:
	case <-h.quit:
	}
}

// shardLoop hands its tenants' submissions to the scheduler in order.
func (h *Host) shardLoop(shard int, jobs chan hostJob) {
	defer h.wg.Done()
	for {
		select {
		case j := <-jobs:
			if w, ok := j.op.(*wirepb.Withdraw); ok {
				h.withdraw(w) // after its submission, admitted before it
				continue
			}
			if j.op != nil {
				h.ops.enqueue(j.epoch, j.call, j.op) // after the tenant's submissions admitted before it
				continue
			}
			h.admit(j, shard)
		case <-h.quit:
			return
		}
	}
}

// admit hands one submission to the scheduler: refused, it is answered
// now; admitted, its shard's replier answers it at its end.
func (h *Host) admit(j hostJob, shard int) {
	q := h.replies[shard]
	ended := func(p lanes.Pending) { q.push(hostReply{j: j, p: p}) }
	if j.viaPlane {
		// Through a data plane the answer never waits (a full ring's
		// backlog takes it): the goroutine that ended the step answers it,
		// a hand-off less (measured: up to a fifth more steps at 2 in
		// flight on 2 cores).
		ended = func(p lanes.Pending) { h.reply(j, p) }
	}
	if j.timing != nil {
		// Stamped before admission, not after: once admitted, the step may
		// end and its reply (which reads the timing) go out before
		// SubmitNotifyMemo returns here.
		j.timing.Admitted = time.Now().UnixNano()
	}
	ctx := context.Background() // the serving loop's: one that cannot end costs the scheduler nothing
	if j.watch != nil {
		ctx = j.watch.watched.watch(j.call)
	}
	_, err := schedhook.SubmitNotifyMemo(h.sched, ctx, j.b.Tenant, j.b, j.memo, ended)
	if err != nil {
		j.ended()
		h.refuse(j.epoch, j.call, j.tenant, err)
		h.inFlight.Add(-1)
	}
}

// reply answers one ended submission.
func (h *Host) reply(j hostJob, p lanes.Pending) {
	if j.timing != nil {
		j.timing.Ended = time.Now().UnixNano()
	}
	r, err := p.Result()
	if err != nil {
		r.Err = err // what a caller in one process gets back (an indeterminate end says so)
	}
	j.ended() // the step ended: no copy reads its uploads any more
	rows, segs := r.Attribution.Rows, r.Attribution.Segments
	r.Attribution.Rows, r.Attribution.Segments = nil, nil
	w := h.receiptToFront(j.epoch, j.call, r, j.b.Tenant, j.tenant)
	w.Timing = j.timing
	h.send(Outgoing{Receipt: w, Rows: rows, Segments: segs, Template: j.template})
	h.inFlight.Add(-1)
}

// batchOf is the submission's batch: inline, or its template (kept from
// an earlier Submit that carried it). A template the host does not hold is
// answered with TemplateUnknown (the front sends it again, whole).
//
// A submission's uploads in the upload area are copied out of it, unless
// the area is pinned: then they are read in place by the step's copies,
// and area (returned) is held until the step ends (hostJob.ended).
func (h *Host) batchOf(r *registration, s *wirepb.Submit) (b lanes.Batch, area *dataplane.DataPlane, memo *schedhook.OwnershipMemo, ok bool) {
	epoch := r.epoch
	if s.Template == 0 {
		p := r.PlaneFor()
		inPlace := p != nil && namesArea(s.Batch) && p.HoldArea()
		if inPlace {
			area = p
		}
		b, err := wire.BatchFromWire(s.Batch, wire.Decoding{Area: r.uploadArea(), InPlace: inPlace, Calls: h.cfg.Calls, Host: h.cfg.Name, Scope: wire.RegistrationScope(epoch)})
		if err != nil {
			if area != nil {
				area.ReleaseArea()
			}
			h.refuse(epoch, s.Call, tenantOf(s), err)
			return b, nil, nil, false
		}
		return b, area, nil, true
	}
	t := r.templates[s.Template]
	if s.Batch != nil {
		b, err := wire.BatchFromWire(s.Batch, wire.Decoding{Area: r.uploadArea(), Calls: h.cfg.Calls, Host: h.cfg.Name, Scope: wire.RegistrationScope(epoch)})
		if err != nil {
			h.refuse(epoch, s.Call, s.Tenant, err)
			return b, nil, nil, false
		}
		t = &hostTemplate{b: b}
		if len(r.templates) < h.cfg.MaxTemplates {
			r.templates[s.Template] = t
		}
	} else if t == nil {
		w := wire.RefusedReceipt(epoch, s.Call, s.Tenant, errTemplate)
		w.Template, w.TemplateUnknown = s.Template, true
		h.send(Outgoing{Receipt: w})
		return b, nil, nil, false
	}
	b = t.b
	b.Tenant = s.Tenant // the entries are shared, read-only, by every submission of the template
	if len(s.Inputs) > 0 {
		// Its own entries, with its bytes: another batch to the memo,
		// which would only churn; checked each time.
		b, area, ok = h.withInputs(r, s, b)
		return b, area, nil, ok
	}
	return b, nil, &t.memo, true
}

// withInputs is a template's batch with a submission's own bytes for
// some of its uploads (Front.SubmitEncoded's inputs), each checked
// against the upload it replaces; the template's entries stay as they
// were.
func (h *Host) withInputs(r *registration, s *wirepb.Submit, b lanes.Batch) (lanes.Batch, *dataplane.DataPlane, bool) {
	var area *dataplane.DataPlane
	if p := r.PlaneFor(); p != nil && inputsNameArea(s.Inputs) && p.HoldArea() {
		area = p
	}
	fail := func(err error) (lanes.Batch, *dataplane.DataPlane, bool) {
		if area != nil {
			area.ReleaseArea()
		}
		h.refuse(r.epoch, s.Call, s.Tenant, err)
		return lanes.Batch{}, nil, false
	}
	if len(s.Inputs) > len(b.Entries) {
		return fail(wire.WireErr("%d inputs for a template of %d entries", len(s.Inputs), len(b.Entries)))
	}
	entries := slices.Clone(b.Entries)
	for i, in := range s.Inputs {
		if in == nil || int(in.Entry) >= len(entries) || entries[in.Entry].Command.Kind != cuda.KindUpload {
			return fail(wire.WireErr("input %d names no upload of its template", i))
		}
		c := &entries[in.Entry].Command
		bytes := in.Host // the message's own
		if in.Area != nil {
			var err error
			if len(in.Host) > 0 {
				return fail(wire.WireErr("input %d both in its message and in the upload area", i))
			}
			if bytes, err = wire.FromArea(r.uploadArea(), in.Area, area != nil); err != nil {
				return fail(err)
			}
		}
		if len(bytes) != len(c.Host) {
			return fail(wire.WireErr("input %d: %d bytes for an upload of %d", i, len(bytes), len(c.Host)))
		}
		c.Host = bytes
	}
	b.Entries = entries
	return b, area, true
}

// inputsNameArea reports whether a submission has an input in the upload
// area.
func inputsNameArea(inputs []*wirepb.Input) bool {
	for _, in := range inputs {
		if in.GetArea() != nil {
			return true
		}
	}
	return false
}

// namesArea reports whether a batch has an upload in the upload area.
func namesArea(w *wirepb.Batch) bool {
	for _, e := range w.GetEntries() {
		if e.GetCommand().GetArea() != nil {
			return true
		}
	}
	return false
}

// errTemplate is a templated submission the host does not hold.
var errTemplate = fmt.Errorf("%w: the host does not hold this submission's template", wire.ErrWire)

func tenantOf(s *wirepb.Submit) string {
	if s.Batch == nil || s.Tenant != "" {
		return s.Tenant
	}
	return s.Batch.Tenant
}

// refuse answers a submission the host turned away before any device work.
func (h *Host) refuse(epoch, call uint64, tenant string, err error) {
	w := wire.RefusedReceipt(epoch, call, tenant, err)
	w.Error = wire.Unscoped(w.Error, epoch)
	h.send(Outgoing{Receipt: w})
}

// send sends a message to the front of its epoch, with any others queued
// meanwhile; after Stop, or for a registration dropped, it is dropped.
func (h *Host) send(o Outgoing) {
	select {
	case <-h.quit:
		return
	default:
	}
	epoch := o.result.GetEpoch()
	switch {
	case o.Receipt != nil:
		epoch = o.Receipt.Epoch
	case o.leaving != nil:
		epoch = o.leaving.Epoch
	}
	h.Mu.Lock()
	r, ok := h.Regs[epoch]
	if !ok {
		// Answers of a registration its front replaced (it lost the host
		// and joined again) still go to it: the front drops them by epoch,
		// the check that keeps every call ending once.
		r, ok = h.replaced[epoch]
	}
	h.Mu.Unlock()
	if ok {
		r.out.Add(o)
	}
}

// maxReplaced bounds the replaced registrations a host still answers for.
const maxReplaced = 16

// sendBatch sends a registration's queued receipts as one message, and op
// results each on its own (one sender at a time: it owns the rows the
// front holds).
func (h *Host) sendBatch(r *registration, batch []Outgoing) {
	var rs []*wirepb.Receipt
	flush := func() {
		if len(rs) == 0 {
			return
		}
		now := time.Now().UnixNano()
		for _, w := range rs {
			if w.Timing != nil {
				w.Timing.Sent = now
			}
		}
		h.toFront(r, dataplane.PlaneReceipts, &wirepb.Receipts{Receipts: rs})
		rs = nil
	}
	for _, o := range batch {
		switch {
		case o.Receipt != nil:
			if r.lastRows == nil {
				r.lastRows, r.lastSegs = map[uint64][]lanes.Row{}, map[uint64][]lanes.SegmentRecord{}
			}
			EncodeAttribution(o, r.lastRows, r.lastSegs)
			rs = append(rs, o.Receipt)
		case o.leaving != nil:
			flush() // the receipts before it arrive first
			h.toFront(r, dataplane.PlaneLeaving, o.leaving)
		default:
			h.toFront(r, dataplane.PlaneResult, o.result)
		}
	}
	flush()
}

// EncodeAttribution puts a receipt's rows and segments on it, or, for a template
// whose previous receipt had the same, says so instead (the front keeps
// what it was sent as the host does: both keep at most MaxTemplates).
func EncodeAttribution(o Outgoing, last map[uint64][]lanes.Row, lastSegs map[uint64][]lanes.SegmentRecord) {
	if o.Template == 0 {
		o.Receipt.Rows, o.Receipt.Segments = wire.RowsToWire(o.Rows), wire.SegmentsToWire(o.Segments)
		wire.UnscopeSegments(o.Receipt.Segments, o.Receipt.Epoch)
		return
	}
	o.Receipt.Template = o.Template
	if prev, ok := lastSegs[o.Template]; ok && wire.SameSegments(prev, o.Segments) {
		o.Receipt.SegmentsAsBefore = true
	} else {
		o.Receipt.Segments = wire.SegmentsToWire(o.Segments)
		wire.UnscopeSegments(o.Receipt.Segments, o.Receipt.Epoch)
		if len(lastSegs) < wire.MaxTemplates {
			lastSegs[o.Template] = o.Segments
		}
	}
	if prev, ok := last[o.Template]; ok && slices.Equal(prev, o.Rows) {
		o.Receipt.RowsAsBefore = true
		return
	}
	o.Receipt.Rows = wire.RowsToWire(o.Rows)
	if len(last) < wire.MaxTemplates {
		last[o.Template] = o.Rows
	}
}

// hostReply is a submission that ended, to answer.
type hostReply struct {
	j hostJob
	p lanes.Pending
}

// replyQueue takes ended submissions from whatever goroutine ended them
// (a lane's thread: it must not wait) to a replier, which answers them in
// batches: one wake for all that ended meanwhile.
type replyQueue struct {
	queued system.Stack[hostReply]
	wake   chan struct{}
}

func newReplyQueue() *replyQueue { return &replyQueue{wake: make(chan struct{}, 1)} }

// push queues r and wakes the replier; it never waits.
func (q *replyQueue) push(r hostReply) {
	q.queued.Push(r)
	select {
	case q.wake <- struct{}{}:
	default: // awake already: it looks again before it sleeps
	}
}

// replyLoop answers q's submissions as they end, oldest first, until the
// host stops (what ends after goes unanswered: h.send drops it then).
func (h *Host) replyLoop(q *replyQueue) {
	defer h.wg.Done()
	var batch []hostReply
	for {
		select {
		case <-q.wake:
		case <-h.quit:
			return
		}
		for batch = q.queued.Take(batch[:0]); len(batch) > 0; batch = q.queued.Take(batch[:0]) {
			for i, r := range batch {
				h.reply(r.j, r.p)
				batch[i] = hostReply{}
			}
		}
	}
}

// receiptToFront encodes a receipt of the host's scheduler for the front
// of the registration: its tenant (tenant in the scheduler) as the front
// named it, and its host start on the Unix clock.
func (h *Host) receiptToFront(epoch, call uint64, r lanes.Receipt, tenant, named string) *wirepb.Receipt {
	r.Tenant = named
	w := wire.ReceiptToWire(epoch, call, r, nil)
	w.Error = wire.Unscoped(w.Error, epoch)
	if r.HostTimed {
		w.HostStartUnixNano, w.HostTimed = h.sched.ClockOrigin().Add(r.HostStart).UnixNano(), true
	}
	return w
}
