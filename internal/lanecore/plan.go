// Planning a batch, the half of Submit that enqueues no batch work:
// validation, discovery, preparation, the path requirement and program
// registration.

package lanecore

import (
	"fmt"
	"slices"

	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	discovery "github.com/lanesched/lanes/internal/discovery"

	catalog "github.com/lanesched/lanes/internal/catalog"

	lanes "github.com/lanesched/lanes/lanes"

	execcache "github.com/lanesched/lanes/internal/execcache"
	"github.com/lanesched/lanes/programs"
)

// plan is a validated batch ready to enqueue.
type plan struct {
	batch    lanes.Batch // a copy, so the caller's batch does not escape per Submit
	prelude  []cuda.Command
	disc     discovery.Discovery
	rep      discovery.PrepareReport
	resident []int // per entry: index of its resident candidate, or -1
	program  *programs.ID
	resolved []catalog.Resolved // per entry: the resolved invocation
	memo     *memoStep          // the remembered step it was planned from, or nil
}

// plan runs everything that enqueues no batch work: validation, patch
// coalescing, discovery, preparation (capture, which executes nothing), the
// path requirement and program registration.
func (l *Lane) plan(b *lanes.Batch) (*plan, error) {
	const op = "submit"
	remembered := !l.steps.off && memoizable(b)
	var fp uint64
	if remembered {
		fp = fingerprint(b)
		if s := l.steps.lookup(b, fp); s != nil {
			return l.planRemembered(b, s)
		}
	}
	if err := l.validate(b); err != nil {
		return nil, rejected(op, err)
	}
	prelude, err := coalesce(b.Patches)
	if err != nil {
		return nil, rejected(op, err)
	}
	p := l.newPlan(b, prelude)
	cmds := l.discoveryView(p)
	defer clear(cmds) // drop references to the batch's buffers and bytes
	if p.disc, err = l.memo.Discover(cmds, b.EagerBoundaries); err != nil {
		return nil, rejected(op, fmt.Errorf("%w: %w", lanes.ErrInvalidBatch, err))
	}
	if remembered {
		l.steps.remember(b, fp, p.disc, l.liveFrees)
	}
	return l.finishPlan(p, cmds)
}

// planRemembered plans a batch equal to the remembered step s
// (stepmemo.go): its handles checked again only if the device freed
// something since, its discovery reused; then preparation and the path
// requirement as always.
func (l *Lane) planRemembered(b *lanes.Batch, s *memoStep) (*plan, error) {
	if frees := l.dev.Frees(); frees != s.frees {
		if err := l.checkHandles(b); err != nil {
			return nil, rejected("submit", err)
		}
		s.frees = l.liveFrees
	}
	l.counters.RememberedPlans++
	p := l.newPlan(b, nil)
	p.memo = s
	p.disc = s.disc // read only: the plan's Candidates may be dropped below, never written
	return l.finishPlan(p, nil)
}

// finishPlan is the part of planning every batch goes through: the path's
// candidates, preparation, the path requirement and program registration.
func (l *Lane) finishPlan(p *plan, cmds []discovery.Command) (*plan, error) {
	const op = "submit"
	b := &p.batch
	if b.Path == lanes.PathEagerOnly {
		p.disc.Candidates = nil
	}
	if err := l.setUpLibraries(b); err != nil {
		return nil, rejected(op, err)
	}
	if err := l.prepare(p); err != nil {
		return nil, rejected(op, err)
	}
	if err := p.checkPath(); err != nil {
		return nil, rejected(op, err)
	}
	if err := l.register(p, cmds); err != nil {
		return nil, rejected(op, err)
	}
	return p, nil
}

// newPlan starts the lane's one reused plan afresh for a batch: the plan
// lives only through this Submit.
func (l *Lane) newPlan(b *lanes.Batch, prelude []cuda.Command) *plan {
	resident := l.planned.resident
	if cap(resident) < len(b.Entries) {
		resident = make([]int, len(b.Entries))
	}
	l.planned = plan{batch: *b, prelude: prelude, resident: resident[:len(b.Entries)]}
	p := &l.planned
	for i := range p.resident {
		p.resident[i] = -1
	}
	return p
}

// discoveryView is the batch as the cache sees it, in the lane's one
// reused scratch slice (valid through this call): each entry's command,
// phase and node, and its replay key unless the path is eager only; an
// invocation is resolved against the catalog and splits discovery.
func (l *Lane) discoveryView(p *plan) []discovery.Command {
	b := &p.batch
	if cap(l.scratch) < len(b.Entries) {
		l.scratch = make([]discovery.Command, len(b.Entries))
	}
	cmds := l.scratch[:len(b.Entries)]
	for i, e := range b.Entries {
		cmds[i] = discovery.Command{Cmd: e.Command, Phase: e.Phase, Node: e.Node}
		if e.Invoke != nil {
			cmds[i].Phase = cache.PhaseReadout // a replay by reference splits discovery
			if p.resolved == nil {
				p.resolved = make([]catalog.Resolved, len(b.Entries))
			}
			p.resolved[i], _ = l.catalog.Resolve(*e.Invoke, b.Timing == lanes.TimingVerification)
		} else if e.Replay != nil && b.Path != lanes.PathEagerOnly {
			cmds[i].Key, cmds[i].HasKey, cmds[i].Scopes = e.Replay.Key, true, e.Replay.Scopes
		}
	}
	return cmds
}

// prepare has the cache capture (or find) the batch's candidates, counts
// what it did, drops evicted executables' programs and marks each entry of
// a resident candidate. An error fails the lane: the batch ran nothing,
// but the stream cannot be trusted.
func (l *Lane) prepare(p *plan) error {
	b := &p.batch
	enc := execcache.Encoder{
		Enqueue: func(i int) error { return l.s.Enqueue(l.bind(b.Entries[i].Command)) },
		Command: func(i int) cuda.Command { return b.Entries[i].Command }, // the cache keeps its own copy
	}
	var err error
	p.rep, err = l.cache.PrepareWith(l.s, b.Tenant, p.disc.Candidates, l.quiescent(), enc)
	l.observe(p.disc, p.rep)
	if p.rep.Captured+p.rep.Updated+p.rep.Uploaded > 0 {
		l.tailFence = 0 // graph uploads went onto the stream after the last fence
	}
	if err != nil {
		// Capture failed in a way that leaves eager fallback unsafe.
		l.fail(err)
		return fmt.Errorf("%w: %w", lanes.ErrCaptureFailed, err)
	}
	for _, k := range p.rep.Evicted {
		if _, err := l.catalog.Evict(k); err != nil {
			l.fail(err)
			return fmt.Errorf("%w: %w", lanes.ErrFailed, err)
		}
	}
	for ci, c := range p.disc.Candidates {
		if p.rep.Dispositions[ci].Resident() {
			for i := c.Start; i < c.End; i++ {
				p.resident[i] = ci
			}
		}
	}
	return nil
}

// register registers the program the batch declares, if any, and keeps
// its id for the attribution.
func (l *Lane) register(p *plan, cmds []discovery.Command) error {
	b := &p.batch
	if b.Program == nil {
		return nil
	}
	ok, err := l.catalog.Register(*b.Program, cmds, p.disc, p.rep)
	if err != nil {
		return err
	}
	if ok {
		id := b.Program.ID // the attribution keeps it: not the lane's plan
		p.program = &id
	}
	return nil
}

// observe adds a preparation's outcome to the counters.
func (l *Lane) observe(d discovery.Discovery, r discovery.PrepareReport) {
	c := &l.counters
	c.Candidates += uint64(len(d.Candidates))
	c.Captured += uint64(r.Captured)
	c.Updated += uint64(r.Updated)
	c.UpdateRefusals += uint64(len(r.UpdateRefusals))
	c.RebindRefusals += uint64(len(r.RebindRefusals))
	for _, u := range r.Updates {
		if u.InPlace == discovery.UpdateByParameters {
			c.Rebound++
		}
	}
	c.Uploaded += uint64(r.Uploaded)
	c.Hits += uint64(r.Hits)
	c.CaptureRejections += uint64(r.CaptureRejections)
	c.CachedRejections += uint64(r.CachedRejections)
	c.QuiescenceDeferred += uint64(r.QuiescenceDeferred)
	c.CapacityDeferred += uint64(r.CapacityDeferred)
	c.OutsidePreparation += uint64(r.OutsidePreparation)
	c.Evictions += uint64(len(r.Evicted) - r.Updated) // an update re-keys, it evicts nothing
}

// reason is why entry i is not replayed. A keyed compute entry of an
// eager-only batch runs eagerly because the batch chose it: its key never
// reached discovery.
func (p *plan) reason(i int) cache.Reason {
	if e := &p.batch.Entries[i]; p.batch.Path == lanes.PathEagerOnly && e.Replay != nil && e.Phase == cache.PhaseCompute && e.Invoke == nil {
		return cache.ReasonEagerPath
	}
	if r := p.disc.Reasons[i]; r != cache.ReasonNone {
		return r
	}
	for ci, c := range p.disc.Candidates {
		if c.Start <= i && i < c.End {
			return p.rep.Dispositions[ci].Reason()
		}
	}
	return cache.ReasonOutsidePreparation
}

// checkPath enforces the batch's compute-path requirement.
func (p *plan) checkPath() error {
	b := &p.batch
	if b.Path == lanes.PathAdaptive || b.Path == lanes.PathEagerOnly {
		return nil
	}
	var eagerNodes []int
	for i, e := range b.Entries {
		if e.Phase != cache.PhaseCompute || e.Invoke != nil || p.resident[i] >= 0 {
			continue
		}
		if b.Path == lanes.PathReplayedOnly {
			return fmt.Errorf("%w: path %v, but entry %d (node %d) would run eagerly: %v", lanes.ErrPathRequired, b.Path, i, e.Node, p.reason(i))
		}
		if !slices.Contains(b.EagerBoundaries, e.Node) {
			return fmt.Errorf("%w: path %v, but entry %d (node %d) is not a declared eager boundary and would run eagerly: %v", lanes.ErrPathRequired, b.Path, i, e.Node, p.reason(i))
		}
		if !slices.Contains(eagerNodes, e.Node) {
			eagerNodes = append(eagerNodes, e.Node)
		}
	}
	if b.Path == lanes.PathReplayedWithBoundaries {
		for _, n := range b.EagerBoundaries {
			if !slices.Contains(eagerNodes, n) {
				return fmt.Errorf("%w: path %v declares eager boundary node %d, but no compute entry runs there; the boundary shape must be exact", lanes.ErrPathRequired, b.Path, n)
			}
		}
	}
	return nil
}
