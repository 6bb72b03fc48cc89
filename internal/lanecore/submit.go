// Submit, the non-blocking half of a lane's work: a planned batch is
// enqueued (replayed, invoked or eager, entry by entry) and fenced.

package lanecore

import (
	"fmt"
	"slices"

	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/internal/backend"
	discovery "github.com/lanesched/lanes/internal/discovery"

	lanes "github.com/lanesched/lanes/lanes"

	execcache "github.com/lanesched/lanes/internal/execcache"
	"github.com/lanesched/lanes/programs"
)

// Submit validates, prepares and enqueues a batch and records its fence.
// An error before anything was enqueued is NotSubmitted and leaves the lane
// as it was. A device error after enqueue began fails the lane and
// holds the batch (Lane.Held) until Synchronize. A panic in a provider is recovered and fails the
// lane.
//
// One case is neither: the caller's error found after part of the batch was
// enqueued (a handle that was valid when the batch was checked, freed by the
// time its command was enqueued). The stream is fine, so the lane stays
// healthy: it fences what was enqueued and returns that fence with the
// error; the submission then ends at the fence with a [OutcomeRefused] receipt.
func (l *Lane) Submit(b lanes.Batch) (sub Submission, err error) {
	defer func() {
		if p := recover(); p != nil {
			perr := fmt.Errorf("%w: %v", lanes.ErrProviderPanic, p)
			l.fail(perr)
			sub, err = Submission{}, failed("submit", perr)
		}
	}()
	if l.state == StateFailed {
		l.counters.Refused++
		return Submission{}, rejected("submit", fmt.Errorf("%w: %w", lanes.ErrFailed, l.failure))
	}
	t := l.stamp()
	l.collect()
	p, err := l.plan(&b)
	if err != nil {
		l.counters.Refused++
		return Submission{}, err
	}
	l.stage(SectionValidatePrepare, t)
	sub, err = l.enqueue(p)
	l.planned.batch = lanes.Batch{} // hold no reference to the caller's entries past the call
	if len(b.Entries) > keepScratch {
		l.shrink()
	}
	return sub, err
}

// keepScratch is the most entries a lane keeps its reused slices sized for:
// after a larger batch they are dropped, so one outsized batch does not
// leave the lane larger for good.
const keepScratch = 1024

// shrink drops the lane's reused slices after an outsized batch.
func (l *Lane) shrink() {
	l.scratch, l.planned = nil, plan{}
	l.rowScratch, l.logicalScratch, l.exeScratch = nil, nil, nil
	l.memo.Release()
}

// enqueue enqueues a planned batch: timing start, prelude, entries (resident
// candidates replayed, invocations replayed by reference, the rest eager),
// and the fence.
func (l *Lane) enqueue(p *plan) (Submission, error) {
	b := &p.batch
	l.nextFence++
	pd := l.newPending()
	pd.fence, pd.retain, pd.timing = l.nextFence, b.Retain, b.Timing
	q := enqueuing{l: l, p: p, pd: pd, att: lanes.Attribution{Prelude: len(p.prelude), Events: p.events(), Preparation: p.rep.Timings}, rows: l.rowScratch[:0], exes: l.exeScratch[:0], replayedAll: true}
	q.startReuse()
	t := l.stamp()
	if err := q.beginTiming(); err != nil {
		return q.fail(err)
	}
	t = l.stage(SectionBeginTiming, t)
	if err := q.entries(); err != nil {
		return q.fail(err)
	}
	q.attribute()
	t = l.stage(SectionEnqueue, t)
	if err := q.recordFence(); err != nil {
		return q.fail(err)
	}
	l.stage(SectionRecordFence, t)
	pd.att = q.att
	l.tailFence = 0
	if pd.start != nil {
		l.tailFence = pd.fence // its timed fence is the stream's last event
	}
	l.pending = append(l.pending, pd)
	l.state = StateSubmitted
	l.counters.Submissions++
	return Submission{Fence: pd.fence, Attribution: q.att, Preparation: p.rep}, nil
}

// enqueuing is one planned batch on its way onto the stream: the pending
// submission it becomes and the attribution built as its entries go.
type enqueuing struct {
	l          *Lane
	p          *plan
	pd         *pending
	att        lanes.Attribution
	rows       []lanes.Row
	segOrdinal int // the next replayed segment's ordinal in the batch's program
	enqueued   int // commands and launches enqueued since the start event
	segments   int // replayed segments launched so far
	// What a remembered step's attribution needs (memoatt.go): the one
	// being reused (every entry resident, so no rows are built while
	// launching; attribute checks the executables at the end), the
	// executables launched, and whether every entry was replayed.
	reuse       *memoAttribution
	exes        []memoExecutable
	replayedAll bool
}

// fail ends an enqueue that went wrong: the caller's error with the stream
// still outside capture is refused midway (the lane stays healthy);
// anything else fails the lane and holds the batch (Lane.Held) until Synchronize.
func (q *enqueuing) fail(err error) (Submission, error) {
	l := q.l
	q.stopReuse()
	if cuda.Classify(err).Blame == cuda.BlameCaller && l.s.Capture() == backend.CaptureNone {
		if sub, ok := l.refuseMidway(q.pd, q.att, q.rows, err); ok {
			return sub, failed("submit", err)
		}
	}
	l.fail(err)
	l.held = append(l.held, q.pd)
	return Submission{}, failed("submit", err)
}

// beginTiming records the start event of a timed submission.
func (q *enqueuing) beginTiming() error {
	if q.p.batch.Timing < lanes.TimingCompletion {
		return nil
	}
	if q.l.now != nil {
		q.pd.hostStart, q.pd.hostTimed = q.l.now(), true
	}
	if q.l.borrowStart(q.pd) {
		return nil
	}
	var err error
	q.pd.start, err = q.l.s.Record()
	return err
}

// borrowStart makes the previous submission's timed fence pd's start event
// when it is the last thing on the stream and still pending: pd's work
// then begins exactly where that event completes, so one timed event (a
// cuEventRecord with timing costs several times one without) serves both.
// A fence that already completed is not borrowed: the stream may have
// idled since.
func (l *Lane) borrowStart(pd *pending) bool {
	n := len(l.pending)
	if n == 0 || l.tailFence == 0 {
		return false
	}
	prev := l.pending[n-1]
	if prev.fence != l.tailFence || prev.start == nil || prev.endLent {
		return false
	}
	if q := prev.end.Query(); q.State != backend.FencePending || q.Err != nil {
		return false
	}
	prev.endLent = true
	pd.start, pd.lender, pd.lenderFence = prev.end, prev, prev.fence
	return true
}

// returnStart undoes borrowStart for a submission that will not use its
// start event: back to its lender while that still waits for it, else
// released.
func (l *Lane) returnStart(pd *pending) {
	if pd.lender != nil && pd.lender.fence == pd.lenderFence && pd.lender.endLent && slices.Contains(l.pending, pd.lender) {
		pd.lender.endLent = false
	} else {
		pd.start.Release()
	}
	pd.start, pd.lender = nil, nil
}

// entries enqueues the prelude, then every entry: a resident candidate's
// entries as one graph launch, an invocation as its program segment's,
// the rest one eager command each.
func (q *enqueuing) entries() error {
	for _, c := range q.p.prelude {
		q.enqueued++
		if err := q.l.s.Enqueue(c); err != nil {
			return err
		}
	}
	entries := q.p.batch.Entries
	for i := 0; i < len(entries); {
		var err error
		switch {
		case q.p.resident[i] >= 0:
			i, err = q.replay(i)
		case entries[i].Invoke != nil:
			q.replayedAll = false
			i, err = q.invoke(i)
		default:
			q.replayedAll = false
			i, err = q.eager(i)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// replay launches the resident executable of the candidate that starts at
// entry i and attributes its entries (unless a remembered attribution is
// being reused); it returns the entry after it.
func (q *enqueuing) replay(i int) (int, error) {
	l, p := q.l, q.p
	ci := p.resident[i]
	cand := p.disc.Candidates[ci]
	exe, err := q.timed(p.batch.Timing >= lanes.TimingReplay, q.segments, cand.End, true, func() (*execcache.Executable, error) {
		return l.cache.Launch(l.s, cand.Key)
	})
	if err != nil {
		return i, err
	}
	q.segments++
	q.att.Launches++
	l.counters.ReplayedSegments++
	if p.memo != nil {
		q.exes = append(q.exes, memoExecutable{exe, exe.Key, ci})
	}
	if q.reuse == nil {
		q.attributeSegment(cand, exe)
	}
	return cand.End, nil
}

// attributeSegment adds the rows and the segment record of a replayed
// candidate.
func (q *enqueuing) attributeSegment(cand discovery.Candidate, exe *execcache.Executable) {
	l, p, entries := q.l, q.p, q.p.batch.Entries
	rec := lanes.SegmentRecord{Start: cand.Start, End: cand.End, Ordinal: -1, Commands: cand.Len()}
	if p.program != nil {
		rec.Program, rec.Ordinal = p.program, q.segOrdinal
	}
	q.segOrdinal++
	rec.Fingerprint, rec.GraphNodes = exe.Fingerprint(), exe.GraphNodes
	logical := l.logicalScratch[:0]
	for k := cand.Start; k < cand.End; k++ {
		row := l.row(k, entries[k], true, cache.ReasonNone)
		if exe.NodeCounts != nil {
			row.GraphNodes = exe.NodeCounts[k-cand.Start]
			logical = append(logical, programs.LogicalCommand{Ordinal: k - cand.Start, Node: entries[k].Node, GraphNodes: row.GraphNodes})
		}
		q.rows = append(q.rows, row)
	}
	if exe.NodeCounts != nil {
		rec.Logical = l.logicalSeen.intern(l.attrHash.logical(logical), logical)
	}
	l.logicalScratch = logical
	q.att.Segments = append(q.att.Segments, rec)
}

// invoke launches the program segment entry i invokes by reference.
func (q *enqueuing) invoke(i int) (int, error) {
	l, e, res := q.l, q.p.batch.Entries[i], q.p.resolved[i]
	exe, err := q.timed(q.p.batch.Timing >= lanes.TimingReplay, q.segments, i+1, true, func() (*execcache.Executable, error) {
		return l.cache.Launch(l.s, res.Key)
	})
	if err != nil {
		return i, err
	}
	q.segments++
	id := e.Invoke.Program
	q.att.Launches++
	q.att.Segments = append(q.att.Segments, lanes.SegmentRecord{Start: i, End: i + 1, Fingerprint: exe.Fingerprint(), Program: &id,
		Ordinal: e.Invoke.Segment.Ordinal, Commands: e.Invoke.Segment.Commands, GraphNodes: exe.GraphNodes, Logical: res.Logical})
	row := l.row(i, e, true, cache.ReasonNone)
	row.GraphNodes = exe.GraphNodes
	q.rows = append(q.rows, row)
	l.counters.ReplayedSegments++
	l.counters.Invocations++
	return i + 1, nil
}

// eager enqueues entry i's command as it is, attributed with the reason it
// was not replayed.
func (q *enqueuing) eager(i int) (int, error) {
	l, e := q.l, q.p.batch.Entries[i]
	if _, err := q.timed(q.p.batch.Timing >= lanes.TimingKernel, i, i+1, false, func() (*execcache.Executable, error) {
		return nil, l.s.Enqueue(l.bind(e.Command))
	}); err != nil {
		return i, err
	}
	q.rows = append(q.rows, l.row(i, e, false, q.p.reason(i)))
	l.counters.EagerCommands++
	if e.Command.Kind == cuda.KindLaunch || e.Command.Kind == cuda.KindCall {
		q.att.Launches++
	}
	return i + 1, nil
}

// recordFence records the submission's fence: a timed one when a start
// event was recorded, else the cheaper event without timing.
func (q *enqueuing) recordFence() error {
	var err error
	if q.pd.start != nil {
		q.pd.end, err = q.l.s.Record()
	} else {
		q.pd.end, err = q.l.s.RecordFence()
	}
	return err
}

// refuseMidway ends a batch the caller got wrong after part of it was
// enqueued: the stream is healthy, so the lane fences what was enqueued and
// keeps going; the submission ends at that fence as Refused, with the
// caller's error. It reports false if even the fence cannot be recorded.
func (l *Lane) refuseMidway(pd *pending, att lanes.Attribution, rows []lanes.Row, cause error) (Submission, bool) {
	end, err := l.s.RecordFence()
	if err != nil {
		return Submission{}, false
	}
	if pd.start != nil { // the start event's pair: the fence is untimed
		l.returnStart(pd)
	}
	l.tailFence = 0
	l.rowScratch = rows
	att.Rows = append([]lanes.Row(nil), rows...)
	pd.end, pd.att, pd.refused = end, att, failed("submit", cause)
	l.pending = append(l.pending, pd)
	l.state = StateSubmitted
	l.counters.Refused++
	return Submission{Fence: pd.fence, Attribution: att}, true
}

// timed runs one enqueue, entries [index, next) of the batch, bracketed by
// an event pair when on: the submission's start event when nothing was
// enqueued since it, and its timed fence when the batch ends with this
// enqueue (see span).
func (q *enqueuing) timed(on bool, index, next int, segment bool, run func() (*execcache.Executable, error)) (*execcache.Executable, error) {
	if !on {
		q.enqueued++
		return run()
	}
	l, pd := q.l, q.pd
	sp := span{index: index, segment: segment}
	sp.startShared = pd.start != nil && q.enqueued == 0
	if !sp.startShared {
		var err error
		if sp.start, err = l.s.Record(); err != nil {
			return nil, err
		}
	}
	q.enqueued++
	exe, err := run()
	if err != nil {
		return nil, err
	}
	sp.endAtFence = pd.start != nil && next == len(q.p.batch.Entries)
	if !sp.endAtFence {
		if sp.end, err = l.s.Record(); err != nil {
			return nil, err
		}
	}
	pd.spans = append(pd.spans, sp)
	return exe, nil
}
