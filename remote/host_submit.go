// A lane host's submissions: from the wire to the scheduler by shard, and
// their receipts back to the front of their epoch.

package remote

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/remote/wirepb"
)

// submits hands each submission of the current epoch to the scheduler; a
// receipt answers each, now for one refused, at its end for one accepted.
func (h *Host) submits(m *wirepb.Submits) {
	var r *registration
	for _, s := range m.Submits {
		if s == nil {
			continue
		}
		if r == nil || s.Epoch != r.epoch {
			var ok bool
			if r, ok = h.serving(s.Epoch); !ok {
				r = nil
				continue // sent to a registration since dropped: the front's calls end with its loss
			}
		}
		h.submit(r, s)
	}
}

func (h *Host) submit(r *registration, s *wirepb.Submit) {
	epoch := r.epoch
	if h.leaving {
		w := refusedReceipt(epoch, s.Call, tenantOf(s), errLeaving)
		w.HostLeaving = true
		h.send(outgoing{receipt: w})
		return
	}
	var timing *wirepb.Timing
	if s.SentUnixNano != 0 {
		timing = &wirepb.Timing{Received: time.Now().UnixNano()}
	}
	b, ok := h.batchOf(r, s)
	if !ok {
		return
	}
	h.inFlight.Add(1)
	select {
	case h.shards[shardOf(b.Tenant)] <- hostJob{epoch: epoch, call: s.Call, template: s.Template, b: b, timing: timing}:
	case <-h.quit:
		h.inFlight.Add(-1)
	}
}

// shardOf is the shard of a tenant (FNV-1a of its name).
func shardOf(tenant string) int {
	h := uint32(2166136261)
	for i := 0; i < len(tenant); i++ {
		h = (h ^ uint32(tenant[i])) * 16777619
	}
	return int(h % hostShards)
}

// shardLoop hands its tenants' submissions to the scheduler in order, and
// answers each at its end.
func (h *Host) shardLoop(jobs chan hostJob) {
	defer h.wg.Done()
	for {
		var j hostJob
		select {
		case j = <-jobs:
		case <-h.quit:
			return
		}
		p, err := h.sched.SubmitAsync(context.Background(), j.b.Tenant, j.b)
		if err != nil {
			h.refuse(j.epoch, j.call, j.b.Tenant, err)
			h.inFlight.Add(-1)
			continue
		}
		if j.timing != nil {
			j.timing.Admitted = time.Now().UnixNano()
		}
		go func() {
			<-p.Done()
			if j.timing != nil {
				j.timing.Ended = time.Now().UnixNano()
			}
			r, _ := p.Result()
			rows := r.Attribution.Rows
			r.Attribution.Rows = nil
			w := ReceiptToWire(j.epoch, j.call, r, nil)
			w.Timing = j.timing
			h.send(outgoing{receipt: w, rows: rows, template: j.template})
			h.inFlight.Add(-1)
		}()
	}
}

// batchOf is the submission's batch: inline, or its template (kept from
// an earlier Submit that carried it). A template the host does not hold is
// answered with TemplateUnknown (the front sends it again, whole).
func (h *Host) batchOf(r *registration, s *wirepb.Submit) (lanes.Batch, bool) {
	epoch := r.epoch
	if s.Template == 0 {
		b, err := BatchFromWire(s.Batch)
		if err != nil {
			h.refuse(epoch, s.Call, tenantOf(s), err)
			return b, false
		}
		return b, true
	}
	b, ok := r.templates[s.Template]
	if s.Batch != nil {
		var err error
		if b, err = BatchFromWire(s.Batch); err != nil {
			h.refuse(epoch, s.Call, s.Tenant, err)
			return b, false
		}
		if len(r.templates) < h.cfg.MaxTemplates {
			r.templates[s.Template] = b
		}
	} else if !ok {
		w := refusedReceipt(epoch, s.Call, s.Tenant, errTemplate)
		w.Template, w.TemplateUnknown = s.Template, true
		h.send(outgoing{receipt: w})
		return b, false
	}
	b.Tenant = s.Tenant // the entries are shared, read-only, by every submission of the template
	return b, true
}

// errTemplate is a templated submission the host does not hold.
var errTemplate = fmt.Errorf("%w: the host does not hold this submission's template", ErrWire)

func tenantOf(s *wirepb.Submit) string {
	if s.Batch == nil || s.Tenant != "" {
		return s.Tenant
	}
	return s.Batch.Tenant
}

// refuse answers a submission the host turned away before any device work.
func (h *Host) refuse(epoch, call uint64, tenant string, err error) {
	h.send(outgoing{receipt: refusedReceipt(epoch, call, tenant, err)})
}

// send sends a message to the front of its epoch, with any others queued
// meanwhile; after Stop, or for a registration dropped, it is dropped.
func (h *Host) send(o outgoing) {
	select {
	case <-h.quit:
		return
	default:
	}
	epoch := o.result.GetEpoch()
	switch {
	case o.receipt != nil:
		epoch = o.receipt.Epoch
	case o.leaving != nil:
		epoch = o.leaving.Epoch
	}
	h.mu.Lock()
	r, ok := h.regs[epoch]
	if !ok {
		// Answers of a registration its front replaced (it lost the host
		// and joined again) still go to it: the front drops them by epoch,
		// the check that keeps every call ending once.
		r, ok = h.replaced[epoch]
	}
	h.mu.Unlock()
	if ok {
		r.out.add(o)
	}
}

// maxReplaced bounds the replaced registrations a host still answers for.
const maxReplaced = 16

// sendBatch sends a registration's queued receipts as one message, and op
// results each on its own (one sender at a time: it owns the rows the
// front holds).
func (h *Host) sendBatch(r *registration, batch []outgoing) {
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
		h.tell(r.front, &wirepb.Receipts{Receipts: rs})
		rs = nil
	}
	for _, o := range batch {
		switch {
		case o.receipt != nil:
			if r.lastRows == nil {
				r.lastRows = map[uint64][]lanes.Row{}
			}
			encodeRows(o, r.lastRows)
			rs = append(rs, o.receipt)
		case o.leaving != nil:
			flush() // the receipts before it arrive first
			h.tell(r.front, o.leaving)
		default:
			h.tell(r.front, o.result)
		}
	}
	flush()
}

// encodeRows puts a receipt's rows on it, or, for a template whose
// previous receipt had the same rows, says so instead.
func encodeRows(o outgoing, last map[uint64][]lanes.Row) {
	if o.template == 0 {
		o.receipt.Rows = RowsToWire(o.rows)
		return
	}
	o.receipt.Template = o.template
	if prev, ok := last[o.template]; ok && slices.Equal(prev, o.rows) {
		o.receipt.RowsAsBefore = true
		return
	}
	o.receipt.Rows = RowsToWire(o.rows)
	if len(last) < MaxTemplates {
		last[o.template] = o.rows
	}
}
