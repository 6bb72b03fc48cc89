package lanes

import (
	"fmt"
	"slices"
	"time"

	"github.com/lanesched/lanes/cuda"
)

// Outcome is how a submission ended.
type Outcome uint8

// Outcomes. Every accepted submission ends with exactly one.
const (
	Succeeded     Outcome = iota + 1 // the fence completed
	Indeterminate                    // the device failed with the work in flight: its effect is unknown
)

// String names the outcome.
func (o Outcome) String() string {
	switch o {
	case Succeeded:
		return "succeeded"
	case Indeterminate:
		return "indeterminate"
	}
	return "unknown"
}

// SpanTiming is the device time of one replayed segment or eager command.
type SpanTiming struct {
	Index    int           // segment index in the attribution, or entry index for an eager command
	Segment  bool          // a replayed segment (else an eager command)
	Offset   time.Duration // from the submission's start event to the span's start
	Duration time.Duration
}

// Receipt is the terminal report of one submission.
type Receipt struct {
	Fence      uint64
	Outcome    Outcome
	Err        error         // for Indeterminate
	Report     Report        // Err described
	DeviceTime time.Duration // from the start event to the fence; 0 without timing
	Spans      []SpanTiming
	// HostStart is the host time (on Config.Now's clock) at which the
	// submission's start event was recorded: the anchor that places device
	// times on the host timeline. HostTimed is false without Config.Now or
	// without timing.
	HostStart   time.Duration
	HostTimed   bool
	Attribution Attribution
	// Released are the batch's retained buffers, now free to reuse. An
	// indeterminate submission releases nothing: its buffers stay
	// quarantined until the stream is synchronized.
	Released []cuda.Buffer
}

type span struct {
	index      int
	segment    bool
	start, end cuda.Event
}

// pending is an accepted submission whose fence is not terminal.
type pending struct {
	fence      uint64
	start, end cuda.Event
	spans      []span
	timing     TimingMode
	hostStart  time.Duration
	hostTimed  bool
	retain     []cuda.Buffer
	att        Attribution
}

// collect retires every pending submission whose fence is terminal, in
// order, into the ready receipts. A failed fence fails the lane and ends
// every pending submission indeterminate.
func (l *Lane) collect() {
	for len(l.pending) > 0 {
		p := l.pending[0]
		q := p.end.Query()
		if q.State == cuda.FencePending && q.Err == nil {
			break
		}
		if q.State != cuda.FenceComplete {
			err := q.Err
			if err == nil {
				err = fmt.Errorf("%w: fence %d answered %v", ErrFailed, p.fence, q.State)
			}
			l.fail(err)
			l.endIndeterminate(err)
			return
		}
		l.pending[0] = nil
		l.pending = l.pending[1:]
		l.ready = append(l.ready, l.receipt(p))
		p.release()
		l.recycle(p)
	}
	if l.state == Submitted && len(l.pending) == 0 {
		l.state = Ready
	}
}

// release hands a completed submission's events back to the stream for
// reuse. Events of a submission that did not complete are left to the
// collector: a failed device's events are never recorded again.
func (p *pending) release() {
	for _, s := range p.spans {
		s.start.Release()
		s.end.Release()
	}
	if p.start != nil {
		p.start.Release()
	}
	p.end.Release()
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
// completed one: a failed submission's record stays in quarantine. Its
// receipt has copied what it needs (the attribution's slices are the
// receipt's now; the span slice's array is the only thing reused).
func (l *Lane) recycle(p *pending) {
	if len(l.spare) >= maxSpare {
		return
	}
	spans := p.spans[:0]
	clear(p.spans) // drop the released events
	*p = pending{spans: spans}
	l.spare = append(l.spare, p)
}

// endIndeterminate ends every pending submission with an indeterminate
// receipt; their buffers move to quarantine.
func (l *Lane) endIndeterminate(err error) {
	for _, p := range l.pending {
		r := Receipt{Fence: p.fence, Outcome: Indeterminate, Err: err, Attribution: p.att}
		r.Report = Describe(failed("fence", err))
		l.ready = append(l.ready, r)
		l.quarantine = append(l.quarantine, p)
	}
	l.pending = nil
}

// receipt builds the receipt of a completed submission.
func (l *Lane) receipt(p *pending) Receipt {
	r := Receipt{Fence: p.fence, Outcome: Succeeded, Attribution: p.att, Released: p.retain, Report: Describe(nil)}
	if p.start != nil {
		r.DeviceTime, _ = p.end.Elapsed(p.start)
		r.HostStart, r.HostTimed = p.hostStart, p.hostTimed
	}
	for _, s := range p.spans {
		d, _ := s.end.Elapsed(s.start)
		st := SpanTiming{Index: s.index, Segment: s.segment, Duration: d}
		if p.start != nil {
			st.Offset, _ = s.start.Elapsed(p.start)
		}
		r.Spans = append(r.Spans, st)
	}
	return r
}

// Poll queries the pending fences without blocking and returns the
// receipts of every submission that ended since the last Poll, in fence
// order. Each accepted submission appears in exactly one receipt, once.
func (l *Lane) Poll() []Receipt {
	return l.PollInto(nil)
}

// PollInto is Poll appending the receipts to dst: a caller that polls in a
// loop reuses one slice instead of a new one per poll.
func (l *Lane) PollInto(dst []Receipt) []Receipt {
	l.collect()
	return l.drain(dst)
}

// drain appends the ready receipts to dst and empties the list; the lane
// keeps its array, not the receipts.
func (l *Lane) drain(dst []Receipt) []Receipt {
	dst = append(dst, l.ready...)
	clear(l.ready)
	l.ready = l.ready[:0]
	return dst
}

// takeReady removes the ready receipt of a fence, if there is one.
func (l *Lane) takeReady(fence uint64) (Receipt, bool) {
	for i, r := range l.ready {
		if r.Fence == fence {
			l.ready = slices.Delete(l.ready, i, i+1) // zeroes the freed slot
			return r, true
		}
	}
	return Receipt{}, false
}

// Wait blocks until one fence is terminal and returns its receipt. Receipts
// of other submissions that ended meanwhile are kept for the next Poll.
func (l *Lane) Wait(fence uint64) (Receipt, error) {
	if r, ok := l.takeReady(fence); ok {
		return r, nil
	}
	var target *pending
	for _, p := range l.pending {
		if p.fence == fence {
			target = p
		}
	}
	if target == nil {
		return Receipt{}, rejected("wait", fmt.Errorf("%w: fence %d is not pending (already received, or never issued)", ErrUnknownFence, fence))
	}
	// One speculative non-blocking query first: a finished fence needs no
	// blocking call. No spin loop.
	if q := target.end.Query(); q.State == cuda.FenceComplete {
		l.counters.SpeculativeHits++
	} else {
		l.counters.SyncPoints++
		if err := target.end.Synchronize(); err != nil {
			l.fail(err)
		}
	}
	l.collect()
	if r, ok := l.takeReady(fence); ok {
		return r, nil
	}
	return Receipt{}, rejected("wait", fmt.Errorf("%w: fence %d did not end", ErrUnknownFence, fence))
}

// Synchronize blocks until the stream is idle. On success every pending
// submission ends and the quarantine is released: the returned buffers are
// free to reuse. On failure the lane fails and every pending submission
// ends indeterminate; the quarantine stays.
func (l *Lane) Synchronize() ([]Receipt, []cuda.Buffer, error) {
	var err error
	if q := l.s.Query(); q.State == cuda.FenceComplete && q.Err == nil {
		l.counters.SpeculativeHits++
	} else {
		l.counters.SyncPoints++
		err = l.s.Synchronize()
	}
	if err != nil {
		l.fail(err)
		l.endIndeterminate(err)
		return l.drain(nil), nil, failed("synchronize", err)
	}
	l.collect()
	var released []cuda.Buffer
	for _, p := range l.quarantine {
		released = append(released, p.retain...)
	}
	l.quarantine = nil
	return l.drain(nil), released, nil
}
