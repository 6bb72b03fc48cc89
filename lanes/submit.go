package lanes

import (
	"fmt"
	"slices"

	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/programs"
)

// Row attributes one entry of a submitted batch. The one-byte fields sit
// together, so a row packs into 88 bytes (96 with them apart).
type Row struct {
	Index      int
	Node       int
	Op         string // portable operation id: "launch:gemv_f32", "upload", "copy", "zero", "invoke"
	Work       Work
	Dispatches int // kernel launches the entry stands for
	Transfers  int // copies and memsets
	GraphNodes int // graph nodes it replayed as; 0 when eager or unknown
	Phase      cache.Phase
	Replayed   bool
	Reason     cache.Reason // why the entry was not replayed (ReasonNone when it was)
}

// SegmentRecord attributes one replayed segment.
type SegmentRecord struct {
	Start, End  int          // entries [Start, End)
	Fingerprint string       // the executable's segment key
	Program     *programs.ID // set when the segment belongs to a registered program
	Ordinal     int          // its segment ordinal in that program, or -1
	Commands    int
	GraphNodes  int
	Logical     []programs.LogicalCommand
}

// Attribution is what a submission did, row by row. Its slices are
// read-only: a lane hands receipts that attribute identically (a tenant's
// steady steps) one shared copy of their rows and logical commands.
type Attribution struct {
	Rows     []Row
	Segments []SegmentRecord
	Prelude  int          // binding-patch commands enqueued before the entries
	Events   []CacheEvent // what preparation did to the cache for this batch
	// Launches is how many launches the submission enqueued: graph
	// launches and eager kernel launches (a fault rate per launch compares
	// tenants whose batches differ in size and shape).
	Launches int
}

// CacheEvent is a cache event of a submission's preparation.
type CacheEvent struct {
	Kind   string // "captured", "updated", "update_refused", "capture_rejected" or "evicted"
	Key    string // the segment fingerprint
	Detail string // for capture_rejected: the device's answer
}

// Submission is an accepted batch: its fence and what it did.
type Submission struct {
	Fence       uint64
	Attribution Attribution
	Preparation cache.PrepareReport
}

// plan is a validated batch ready to enqueue.
type plan struct {
	batch    Batch // a copy, so the caller's batch does not escape per Submit
	prelude  []cuda.Command
	disc     cache.Discovery
	rep      cache.PrepareReport
	resident []int // per entry: index of its resident candidate, or -1
	program  *programs.ID
	resolved []programs.Resolved // per entry: the resolved invocation
}

// Submit validates, prepares and enqueues a batch and records its fence.
// An error before anything was enqueued is NotSubmitted and leaves the lane
// as it was. A device error after enqueue began fails the lane and
// quarantines the batch. A panic in a provider is recovered and fails the
// lane.
//
// One case is neither: the caller's error found after part of the batch was
// enqueued (a handle that was valid when the batch was checked, freed by the
// time its command was enqueued). The stream is fine, so the lane stays
// healthy: it fences what was enqueued and returns that fence with the
// error; the submission then ends at the fence with a [OutcomeRefused] receipt.
func (l *Lane) Submit(b Batch) (sub Submission, err error) {
	defer func() {
		if p := recover(); p != nil {
			perr := fmt.Errorf("%w: %v", ErrProviderPanic, p)
			l.fail(perr)
			sub, err = Submission{}, failed("submit", perr)
		}
	}()
	if l.state == StateFailed {
		l.counters.Rejected++
		return Submission{}, rejected("submit", fmt.Errorf("%w: %w", ErrFailed, l.failure))
	}
	t := l.stamp()
	l.collect()
	p, err := l.plan(&b)
	if err != nil {
		l.counters.Rejected++
		return Submission{}, err
	}
	l.stage(StageValidatePrepare, t)
	sub, err = l.enqueue(p)
	l.planned.batch = Batch{} // hold no reference to the caller's entries past the call
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
	l.rowScratch, l.logicalScratch = nil, nil
	l.memo.Release()
}

// plan runs everything that enqueues no batch work: validation, patch
// coalescing, discovery, preparation (capture, which executes nothing), the
// path requirement and program registration.
func (l *Lane) plan(b *Batch) (*plan, error) {
	const op = "submit"
	if err := l.validate(b); err != nil {
		return nil, rejected(op, err)
	}
	prelude, err := coalesce(b.Patches)
	if err != nil {
		return nil, rejected(op, err)
	}
	// The plan lives only through this Submit: the lane reuses one.
	resident := l.planned.resident
	if cap(resident) < len(b.Entries) {
		resident = make([]int, len(b.Entries))
	}
	l.planned = plan{batch: *b, prelude: prelude, resident: resident[:len(b.Entries)]}
	p := &l.planned
	for i := range p.resident {
		p.resident[i] = -1
	}
	// The cache's view of the batch lives only through this call: the lane
	// reuses one scratch slice for it (the lane has one owner).
	if cap(l.scratch) < len(b.Entries) {
		l.scratch = make([]cache.Command, len(b.Entries))
	}
	cmds := l.scratch[:len(b.Entries)]
	defer clear(cmds) // drop references to the batch's buffers and bytes
	for i, e := range b.Entries {
		cmds[i] = cache.Command{Cmd: e.Command, Phase: e.Phase, Node: e.Node}
		if e.Invoke != nil {
			cmds[i].Phase = cache.PhaseReadout // a replay by reference splits discovery
			if p.resolved == nil {
				p.resolved = make([]programs.Resolved, len(b.Entries))
			}
			p.resolved[i], _ = l.catalog.Resolve(*e.Invoke, b.Timing == TimingVerification)
		} else if e.Replay != nil && b.Path != PathEagerOnly {
			cmds[i].Key, cmds[i].HasKey, cmds[i].Scopes = e.Replay.Key, true, e.Replay.Scopes
		}
	}
	if p.disc, err = l.memo.Discover(cmds, b.EagerBoundaries); err != nil {
		return nil, rejected(op, fmt.Errorf("%w: %w", ErrInvalidBatch, err))
	}
	if b.Path == PathEagerOnly {
		p.disc.Candidates = nil
	}
	enqueue := func(i int) error { return l.s.Enqueue(b.Entries[i].Command) }
	p.rep, err = l.cache.Prepare(l.s, b.Tenant, p.disc.Candidates, l.quiescent(), enqueue)
	l.observe(p.disc, p.rep)
	if err != nil {
		// Capture failed in a way that leaves eager fallback unsafe: the
		// batch ran nothing, but the stream cannot be trusted.
		l.fail(err)
		return nil, rejected(op, fmt.Errorf("%w: %w", ErrCaptureFailed, err))
	}
	for _, k := range p.rep.Evicted {
		if _, err := l.catalog.Evict(k); err != nil {
			l.fail(err)
			return nil, rejected(op, fmt.Errorf("%w: %w", ErrFailed, err))
		}
	}
	for ci, c := range p.disc.Candidates {
		if p.rep.Dispositions[ci].Resident() {
			for i := c.Start; i < c.End; i++ {
				p.resident[i] = ci
			}
		}
	}
	if err := p.checkPath(); err != nil {
		return nil, rejected(op, err)
	}
	if b.Program != nil {
		ok, err := l.catalog.Register(*b.Program, cmds, p.disc, p.rep)
		if err != nil {
			return nil, rejected(op, err)
		}
		if ok {
			id := b.Program.ID // the attribution keeps it: not the lane's plan
			p.program = &id
		}
	}
	return p, nil
}

// events lists what preparation did to the cache.
func (p *plan) events() []CacheEvent {
	var out []CacheEvent
	rej := 0
	for ci, d := range p.rep.Dispositions {
		key := p.disc.Candidates[ci].Key
		var ev CacheEvent
		switch d {
		case cache.DispositionCaptured:
			ev.Kind = "captured"
		case cache.DispositionUpdated:
			ev.Kind = "updated"
			for _, u := range p.rep.Updates {
				if u.To == key {
					ev.Detail = "in place of " + u.From.String()
				}
			}
		case cache.DispositionCaptureRejected:
			ev.Kind = "capture_rejected"
			if rej < len(p.rep.Rejections) {
				ev.Detail = p.rep.Rejections[rej].Error()
				rej++
			}
		default:
			continue // a hit or a deferral: nothing happened to the cache
		}
		ev.Key = key.String()
		out = append(out, ev)
	}
	updated := map[cache.SegmentKey]bool{}
	for _, u := range p.rep.Updates {
		updated[u.From] = true
	}
	for _, k := range p.rep.Evicted {
		if !updated[k] {
			out = append(out, CacheEvent{Kind: "evicted", Key: k.String()})
		}
	}
	for _, err := range p.rep.UpdateRefusals {
		out = append(out, CacheEvent{Kind: "update_refused", Detail: err.Error()})
	}
	return out
}

// observe adds a preparation's outcome to the counters.
func (l *Lane) observe(d cache.Discovery, r cache.PrepareReport) {
	c := &l.counters
	c.Candidates += uint64(len(d.Candidates))
	c.Captured += uint64(r.Captured)
	c.Updated += uint64(r.Updated)
	c.UpdateRefusals += uint64(len(r.UpdateRefusals))
	c.Uploaded += uint64(r.Uploaded)
	c.Hits += uint64(r.Hits)
	c.CaptureRejections += uint64(r.CaptureRejections)
	c.CachedRejections += uint64(r.CachedRejections)
	c.QuiescenceDeferred += uint64(r.QuiescenceDeferred)
	c.CapacityDeferred += uint64(r.CapacityDeferred)
	c.OutsidePreparation += uint64(r.OutsidePreparation)
	c.Evictions += uint64(len(r.Evicted))
}

// reason is why entry i is not replayed.
func (p *plan) reason(i int) cache.Reason {
	if r := p.disc.Reasons[i]; r != cache.ReasonNone {
		return r
	}
	for ci, c := range p.disc.Candidates {
		if c.Start <= i && i < c.End {
			return p.rep.Dispositions[ci].Reason()
		}
	}
	return cache.ReasonOutsidePreparation // the path asked for eager execution
}

// checkPath enforces the batch's compute-path requirement.
func (p *plan) checkPath() error {
	b := &p.batch
	if b.Path == PathAdaptive || b.Path == PathEagerOnly {
		return nil
	}
	var eagerNodes []int
	for i, e := range b.Entries {
		if e.Phase != cache.PhaseCompute || e.Invoke != nil || p.resident[i] >= 0 {
			continue
		}
		if b.Path == PathReplayedOnly {
			return fmt.Errorf("%w: path %v, but entry %d (node %d) would run eagerly: %v", ErrPathRequired, b.Path, i, e.Node, p.reason(i))
		}
		if !slices.Contains(b.EagerBoundaries, e.Node) {
			return fmt.Errorf("%w: path %v, but entry %d (node %d) is not a declared eager boundary and would run eagerly: %v", ErrPathRequired, b.Path, i, e.Node, p.reason(i))
		}
		if !slices.Contains(eagerNodes, e.Node) {
			eagerNodes = append(eagerNodes, e.Node)
		}
	}
	if b.Path == PathReplayedWithBoundaries {
		for _, n := range b.EagerBoundaries {
			if !slices.Contains(eagerNodes, n) {
				return fmt.Errorf("%w: path %v declares eager boundary node %d, but no compute entry runs there; the boundary shape must be exact", ErrPathRequired, b.Path, n)
			}
		}
	}
	return nil
}

// enqueue enqueues a planned batch: timing start, prelude, entries (resident
// candidates replayed, invocations replayed by reference, the rest eager),
// and the fence.
func (l *Lane) enqueue(p *plan) (Submission, error) {
	const op = "submit"
	b := &p.batch
	l.nextFence++
	pd := l.newPending()
	pd.fence, pd.retain, pd.timing = l.nextFence, b.Retain, b.Timing
	att := Attribution{Prelude: len(p.prelude), Events: p.events()}
	rows := l.rowScratch[:0]
	fail := func(err error) (Submission, error) {
		if cuda.Classify(err).Blame == cuda.BlameCaller && l.s.Capture() == cuda.CaptureNone {
			if sub, ok := l.refuseMidway(pd, att, rows, err); ok {
				return sub, failed(op, err)
			}
		}
		l.fail(err)
		l.quarantine = append(l.quarantine, pd)
		return Submission{}, failed(op, err)
	}
	var err error
	t := l.stamp()
	if b.Timing >= TimingCompletion {
		if l.now != nil {
			pd.hostStart, pd.hostTimed = l.now(), true
		}
		if pd.start, err = l.s.Record(); err != nil {
			return fail(err)
		}
	}
	t = l.stage(StageBeginTiming, t)
	for _, c := range p.prelude {
		if err := l.s.Enqueue(c); err != nil {
			return fail(err)
		}
	}
	segOrdinal := 0
	for i := 0; i < len(b.Entries); {
		e := b.Entries[i]
		switch {
		case p.resident[i] >= 0:
			cand := p.disc.Candidates[p.resident[i]]
			rec := SegmentRecord{Start: cand.Start, End: cand.End, Ordinal: -1, Commands: cand.Len()}
			if p.program != nil {
				rec.Program, rec.Ordinal = p.program, segOrdinal
			}
			segOrdinal++
			exe, err := l.timed(pd, b.Timing >= TimingReplay, len(att.Segments), true, func() (*cache.Executable, error) {
				return l.cache.Launch(l.s, cand.Key)
			})
			if err != nil {
				return fail(err)
			}
			rec.Fingerprint, rec.GraphNodes = exe.Fingerprint(), exe.GraphNodes
			logical := l.logicalScratch[:0]
			for k := cand.Start; k < cand.End; k++ {
				row := l.row(k, b.Entries[k], true, cache.ReasonNone)
				if exe.NodeCounts != nil {
					row.GraphNodes = exe.NodeCounts[k-cand.Start]
					logical = append(logical, programs.LogicalCommand{Ordinal: k - cand.Start, Node: b.Entries[k].Node, GraphNodes: row.GraphNodes})
				}
				rows = append(rows, row)
			}
			if exe.NodeCounts != nil {
				rec.Logical = l.logicalSeen.intern(l.attrHash.logical(logical), logical)
			}
			l.logicalScratch = logical
			att.Segments = append(att.Segments, rec)
			att.Launches++
			l.counters.ReplayedSegments++
			i = cand.End
		case e.Invoke != nil:
			res := p.resolved[i]
			exe, err := l.timed(pd, b.Timing >= TimingReplay, len(att.Segments), true, func() (*cache.Executable, error) {
				return l.cache.Launch(l.s, res.Key)
			})
			if err != nil {
				return fail(err)
			}
			id := e.Invoke.Program
			att.Launches++
			att.Segments = append(att.Segments, SegmentRecord{Start: i, End: i + 1, Fingerprint: exe.Fingerprint(), Program: &id,
				Ordinal: e.Invoke.Segment.Ordinal, Commands: e.Invoke.Segment.Commands, GraphNodes: exe.GraphNodes, Logical: res.Logical})
			row := l.row(i, e, true, cache.ReasonNone)
			row.GraphNodes = exe.GraphNodes
			rows = append(rows, row)
			l.counters.ReplayedSegments++
			l.counters.Invocations++
			i++
		default:
			if _, err := l.timed(pd, b.Timing >= TimingKernel, i, false, func() (*cache.Executable, error) {
				return nil, l.s.Enqueue(e.Command)
			}); err != nil {
				return fail(err)
			}
			rows = append(rows, l.row(i, e, false, p.reason(i)))
			l.counters.EagerCommands++
			if e.Command.Kind == cuda.KindLaunch {
				att.Launches++
			}
			i++
		}
	}
	l.rowScratch = rows
	att.Rows = l.rowsSeen.intern(l.attrHash.rows(rows), rows)
	t = l.stage(StageEnqueue, t)
	// The fence times the submission only when a start event was recorded;
	// otherwise it is the cheaper event without timing.
	if pd.start != nil {
		pd.end, err = l.s.Record()
	} else {
		pd.end, err = l.s.RecordFence()
	}
	if err != nil {
		return fail(err)
	}
	l.stage(StageRecordFence, t)
	pd.att = att
	l.pending = append(l.pending, pd)
	l.state = StateSubmitted
	l.counters.Submissions++
	return Submission{Fence: pd.fence, Attribution: att, Preparation: p.rep}, nil
}

// refuseMidway ends a batch the caller got wrong after part of it was
// enqueued: the stream is healthy, so the lane fences what was enqueued and
// keeps going; the submission ends at that fence as Refused, with the
// caller's error. It reports false if even the fence cannot be recorded.
func (l *Lane) refuseMidway(pd *pending, att Attribution, rows []Row, cause error) (Submission, bool) {
	end, err := l.s.RecordFence()
	if err != nil {
		return Submission{}, false
	}
	if pd.start != nil { // the start event's pair: the fence is untimed
		pd.start.Release()
		pd.start = nil
	}
	l.rowScratch = rows
	att.Rows = append([]Row(nil), rows...)
	pd.end, pd.att, pd.refused = end, att, failed("submit", cause)
	l.pending = append(l.pending, pd)
	l.state = StateSubmitted
	l.counters.Rejected++
	return Submission{Fence: pd.fence, Attribution: att}, true
}

// timed runs one enqueue, bracketed by an event pair when on.
func (l *Lane) timed(pd *pending, on bool, index int, segment bool, run func() (*cache.Executable, error)) (*cache.Executable, error) {
	if !on {
		return run()
	}
	start, err := l.s.Record()
	if err != nil {
		return nil, err
	}
	exe, err := run()
	if err != nil {
		return nil, err
	}
	end, err := l.s.Record()
	if err != nil {
		return nil, err
	}
	pd.spans = append(pd.spans, span{index: index, segment: segment, start: start, end: end})
	return exe, nil
}

// launchOp is a launch's operation id, built once per kernel name.
func (l *Lane) launchOp(kernel string) string {
	op, ok := l.ops[kernel]
	if !ok {
		if l.ops == nil || len(l.ops) >= keyMemoLimit {
			l.ops = map[string]string{}
		}
		op = "launch:" + kernel
		l.ops[kernel] = op
	}
	return op
}

// row attributes entry i.
func (l *Lane) row(i int, e Entry, replayed bool, reason cache.Reason) Row {
	r := Row{Index: i, Node: e.Node, Phase: e.Phase, Replayed: replayed, Reason: reason, Work: e.Work}
	switch {
	case e.Invoke != nil:
		r.Op, r.Dispatches = "invoke", e.Invoke.Segment.Commands
	case e.Command.Kind == cuda.KindLaunch:
		r.Op, r.Dispatches = l.launchOp(e.Command.Kernel), 1
	default:
		r.Op, r.Transfers = e.Command.Kind.String(), 1
	}
	return r
}
