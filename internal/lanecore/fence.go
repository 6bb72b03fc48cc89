// How submissions end without blocking: fences, pending submissions,
// receipts, Poll and Abandon.

package lanecore

import (
	"fmt"
	"slices"
	"time"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/internal/backend"

	lanes "github.com/lanesched/lanes/lanes"
)

// span is an event pair around one timed enqueue. Where nothing was
// enqueued between the submission's start event and the span's start, the
// span starts at that event (startShared); where the span's enqueue is the
// batch's last, it ends at the submission's timed fence (endAtFence): a
// one-segment step is timed by two events, not four.
type span struct {
	index       int
	segment     bool
	start, end  backend.Event
	startShared bool
	endAtFence  bool
}

// events are the span's start and end: its own, or the submission's it
// shares (nil when the submission's start was dropped, by a refusal).
func (s *span) events(p *pending) (start, end backend.Event) {
	start, end = s.start, s.end
	if s.startShared {
		start = p.start
	}
	if s.endAtFence {
		end = p.end
	}
	return start, end
}

// pending is an accepted submission whose fence is not terminal.
type pending struct {
	fence      uint64
	start, end backend.Event
	// endLent: the next submission's start is this one's end event (see
	// Lane.borrowStart), so the next one releases it. lender is whom start
	// was borrowed from (its fence in lenderFence, records being reused).
	endLent     bool
	lender      *pending
	lenderFence uint64
	spans       []span
	timing      lanes.TimingMode
	hostStart   time.Duration
	hostTimed   bool
	retain      []cuda.Buffer
	att         lanes.Attribution
	refused     *lanes.Error // set when the caller's error stopped the batch partway
}

// collect retires every pending submission whose fence is terminal, in
// order, into the ready receipts. A failed fence fails the lane and ends
// every pending submission indeterminate; collect then reports the fence's
// error.
func (l *Lane) collect() error {
	for len(l.pending) > 0 {
		p := l.pending[0]
		q := p.end.Query()
		if q.State == backend.FencePending && q.Err == nil {
			break
		}
		if q.State != backend.FenceComplete {
			err := q.Err
			if err == nil {
				err = fmt.Errorf("%w: fence %d answered %v", lanes.ErrFailed, p.fence, q.State)
			}
			l.fail(err)
			l.endIndeterminate(err)
			return err
		}
		l.pending[0] = nil
		l.pending = l.pending[1:]
		l.ready = append(l.ready, l.receipt(p))
		p.release()
		l.recycle(p)
	}
	if l.state == StateSubmitted && len(l.pending) == 0 {
		l.state = StateReady
	}
	if l.cache.Retired() > 0 && l.quiescent() {
		// Executables evicted while work was in flight: nothing runs them
		// any more, so their device memory goes now.
		l.cache.ReleaseRetired(true)
	}
	return nil
}

// release hands a completed submission's events back to the stream for
// reuse. Events of a submission that did not complete are left to the
// collector: a failed device's events are never recorded again.
func (p *pending) release() {
	for _, s := range p.spans {
		if !s.startShared {
			s.start.Release()
		}
		if !s.endAtFence {
			s.end.Release()
		}
	}
	if p.start != nil {
		p.start.Release() // its own, or borrowed: then its lender let it go
	}
	if !p.endLent {
		p.end.Release()
	}
}

// maxSpare bounds the completed submissions' records a lane keeps for
// reuse: more than the submissions a lane usually has in flight.
const maxSpare = 64

// newPending returns an empty record for a submission, reused when one is
// spare.
func (l *Lane) newPending() *pending {
	if n := len(l.spare); n > 0 {
		p := l.spare[n-1]
		l.spare[n-1] = nil
		l.spare = l.spare[:n-1]
		return p
	}
	return &pending{}
}

// recycle keeps a completed submission's record for the next one. Only a
// completed one: a failed submission's record stays held. Its
// receipt has copied what it needs (the attribution's slices are the
// receipt's now; the span slice's array is the only thing reused).
func (l *Lane) recycle(p *pending) {
	if len(l.spare) >= maxSpare {
		return
	}
	spans := p.spans[:0]
	clear(p.spans) // drop the released events
	if cap(spans) > keepScratch {
		spans = nil // an outsized batch's array is not kept
	}
	*p = pending{spans: spans}
	l.spare = append(l.spare, p)
}

// endIndeterminate ends every pending submission with an indeterminate
// receipt; their buffers are held with it.
func (l *Lane) endIndeterminate(err error) {
	for _, p := range l.pending {
		r := lanes.Receipt{Fence: p.fence, Outcome: lanes.OutcomeIndeterminate, Err: failed("fence", err), Lane: l.id, Attribution: p.att}
		l.ready = append(l.ready, r)
		l.held = append(l.held, p)
	}
	l.pending = nil
}

// receipt builds the receipt of a completed submission.
func (l *Lane) receipt(p *pending) lanes.Receipt {
	r := lanes.Receipt{Fence: p.fence, Outcome: lanes.OutcomeSucceeded, Lane: l.id, Attribution: p.att, Released: p.retain}
	if p.refused != nil {
		r.Outcome, r.Err = lanes.OutcomeRefused, p.refused
	}
	if p.start != nil {
		r.DeviceTime, _ = p.end.Elapsed(p.start)
		r.HostStart, r.HostTimed = p.hostStart, p.hostTimed
	}
	for i := range p.spans {
		s := &p.spans[i]
		start, end := s.events(p)
		st := lanes.SpanTiming{Index: s.index, Segment: s.segment}
		switch {
		case s.startShared && s.endAtFence && p.start != nil:
			st.Duration = r.DeviceTime // the submission's own pair: measured once
		case start != nil && end != nil:
			st.Duration, _ = end.Elapsed(start)
		}
		if p.start != nil && start != nil && !s.startShared {
			st.Offset, _ = start.Elapsed(p.start)
		}
		r.Spans = append(r.Spans, st)
	}
	return r
}

// Poll queries the pending fences without blocking and returns the
// receipts of every submission that ended since the last Poll, in fence
// order. Each accepted submission appears in exactly one receipt, once.
func (l *Lane) Poll() []lanes.Receipt {
	return l.PollInto(nil)
}

// PollInto is Poll appending the receipts to dst: a caller that polls in a
// loop reuses one slice instead of a new one per poll.
func (l *Lane) PollInto(dst []lanes.Receipt) []lanes.Receipt {
	l.collect()
	return l.drain(dst)
}

// drain appends the ready receipts to dst and empties the list; the lane
// keeps its array, not the receipts.
func (l *Lane) drain(dst []lanes.Receipt) []lanes.Receipt {
	dst = append(dst, l.ready...)
	clear(l.ready)
	l.ready = l.ready[:0]
	return dst
}

// takeReady removes the ready receipt of a fence, if there is one.
func (l *Lane) takeReady(fence uint64) (lanes.Receipt, bool) {
	for i, r := range l.ready {
		if r.Fence == fence {
			l.ready = slices.Delete(l.ready, i, i+1) // zeroes the freed slot
			return r, true
		}
	}
	return lanes.Receipt{}, false
}

// Abandon gives up on the stream without waiting for it (its kernel never
// finishes, say): the lane fails with cause, every pending submission ends
// Indeterminate, and their receipts are returned with any already ended.
// Nothing blocks on the stream again; the lane accepts no more work.
func (l *Lane) Abandon(cause error) []lanes.Receipt {
	l.fail(cause)
	l.endIndeterminate(cause)
	return l.drain(nil)
}
