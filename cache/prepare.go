// Prepare: hits, remembered rejections and misses; misses captured,
// updated in place or deferred; residents evicted to make room.

package cache

import (
	"errors"
	"fmt"
	"slices"

	"github.com/lanesched/lanes/cuda"
)

// Prepare gives every candidate of owner's batch a disposition: residents
// are hits (and become most recently used); misses are captured on s, when
// preparation is open and the stream quiescent, as far as capacity and the
// byte bound allow after evicting least-recently-used residents this batch
// does not need, among the owner's own and other owners' beyond their
// share: each owner with residents, and the batch's owner, has an equal
// share of the capacity and of the byte bound (the integer part: three
// owners of a cache of two have a share of none each, and a newcomer then
// takes only what the others left idle). enqueue(i) must enqueue batch
// command i on s. A capture failure that leaves eager fallback
// safe is remembered (bounded by capacity, oldest forgotten first) and
// reported; any other failure is returned.
func (c *Cache) Prepare(s cuda.Stream, owner string, cands []Candidate, quiescent bool, enqueue func(i int) error) (PrepareReport, error) {
	r := PrepareReport{Dispositions: make([]Disposition, len(cands))}
	if len(cands) > 0 {
		c.batches++
	}
	misses := c.lookUp(&r, cands)
	if len(misses) == 0 {
		return r, nil
	}
	if c.prep.state != PrepOpen || !quiescent {
		d := DispositionQuiescenceDeferred
		if c.prep.state != PrepOpen {
			d = DispositionOutsidePreparation
		}
		c.markMisses(&r, cands, d, nil)
		return r, nil
	}
	err := c.placeMisses(&r, s, owner, cands, misses, enqueue)
	if err == nil {
		c.prep.record(r)
	}
	return r, err
}

// placeMisses captures the misses that fit (updating residents in place
// or evicting them to make room), installs and uploads them, and gives
// every remaining candidate its disposition. The stream, the report and
// enqueue are passed along rather than kept in the preparing state, so
// that a Prepare of hits alone allocates nothing for them.
func (c *Cache) placeMisses(r *PrepareReport, s cuda.Stream, owner string, cands []Candidate, misses []SegmentKey, enqueue func(i int) error) error {
	p := preparing{c: c, owner: owner, cands: cands,
		captured: map[SegmentKey]*Executable{}, updated: map[SegmentKey]bool{}}
	var admitted []SegmentKey
	admitted, p.evictable, p.first = c.plan(owner, misses, cands)
	if err := p.captureAll(r, s, admitted, enqueue); err != nil {
		p.destroyCaptured()
		return err
	}
	p.makeRoom(r)
	if err := p.install(r, s); err != nil {
		return err
	}
	return p.settle(r)
}

// lookUp gives hits and remembered rejections their dispositions and
// returns the other candidates' keys, each once, in order.
func (c *Cache) lookUp(r *PrepareReport, cands []Candidate) []SegmentKey {
	var misses []SegmentKey
	var missed map[SegmentKey]bool
	for i, cand := range cands {
		if e, ok := c.entries[cand.Key]; ok {
			e.lastUsed, e.lastBatch = c.tick(), c.batches
			r.Dispositions[i] = DispositionHit
			r.Hits++
			continue
		}
		if _, ok := c.rejected[cand.Key]; ok {
			r.Dispositions[i] = DispositionCachedRejection
			r.CachedRejections++
			continue
		}
		if missed == nil {
			missed = map[SegmentKey]bool{}
		}
		if !missed[cand.Key] {
			missed[cand.Key] = true
			misses = append(misses, cand.Key)
		}
	}
	return misses
}

// preparing is one Prepare past its lookups: the misses it captures, and
// the residents it may evict or update in place to make room for them.
type preparing struct {
	c        *Cache
	owner    string
	cands    []Candidate
	captured map[SegmentKey]*Executable // nil: capture rejected, eager fallback safe
	updated  map[SegmentKey]bool        // captured into a resident in place
	order    []SegmentKey               // the newly instantiated, to install in order
	adding   int64                      // bytes of those, not yet resident

	evictable []SegmentKey // residents the batch may evict, in the order they go (plan)
	first     int          // the length of evictable's first group
}

// captureAll records every admitted miss and writes it into a resident of
// its shape in place when the cache is full, else instantiates it. A
// rejection with eager fallback safe is remembered; any other error ends
// the preparation.
func (p *preparing) captureAll(r *PrepareReport, s cuda.Stream, admitted []SegmentKey, enqueue func(i int) error) error {
	c := p.c
	for _, k := range admitted {
		cand := p.cands[indexOf(p.cands, k)]
		graph, exe, err := record(s, cand, enqueue)
		if err == nil {
			var done bool
			full := len(c.entries)+len(p.order) >= c.prep.capacity
			exe.Owner, exe.Bytes = p.owner, cand.Bytes
			if done, p.evictable, p.first, err = c.update(r, graph, exe, p.evictable, p.first, full); done {
				p.captured[k], p.updated[k] = c.entries[k], true
				continue
			}
			if err == nil {
				exe, err = instantiate(graph, exe)
			}
		}
		if err != nil {
			if re, ok := err.(*ReplayError); ok && re.EagerFallbackSafe {
				c.remember(k)
				r.Rejections = append(r.Rejections, err)
				p.captured[k] = nil
				continue
			}
			return err
		}
		exe.lastUsed, exe.lastBatch = c.tick(), c.batches
		exe.Owner, exe.Bytes = p.owner, cand.Bytes
		p.captured[k] = exe
		p.order = append(p.order, k)
		p.adding += exe.Bytes
	}
	return nil
}

// destroyCaptured destroys what an aborted preparation instantiated (an
// executable updated in place is a resident's, and stays).
func (p *preparing) destroyCaptured() {
	for _, e := range p.captured {
		if e != nil && !p.updated[e.Key] {
			_ = e.Exec.Destroy()
		}
	}
}

// makeRoom evicts evictable residents, in order, until the new executables
// fit the capacity and the byte bound (or nothing is left to evict).
func (p *preparing) makeRoom(r *PrepareReport) {
	c := p.c
	for len(p.evictable) > 0 && (len(c.entries)+len(p.order) > c.prep.capacity || c.byteLimit > 0 && c.residentBytes()+p.adding > c.byteLimit) {
		k := p.evictable[0]
		p.evictable = p.evictable[1:]
		c.evict(k, true) // placeMisses runs on a quiescent stream only
		r.Evicted = append(r.Evicted, k)
	}
}

// install makes the new executables resident and uploads them.
func (p *preparing) install(r *PrepareReport, s cuda.Stream) error {
	c := p.c
	for _, k := range p.order {
		c.entries[k] = p.captured[k]
		c.resident += p.captured[k].Bytes
	}
	for _, k := range p.order {
		if err := c.entries[k].upload(s); err != nil {
			return err
		}
		r.Uploaded++
	}
	r.Captured = len(p.order)
	return nil
}

// settle gives every remaining candidate its disposition (captured,
// updated, capture rejected, or capacity deferred when it did not fit) and
// fails if one was left without.
func (p *preparing) settle(r *PrepareReport) error {
	c, cands := p.c, p.cands
	c.markMisses(r, cands, DispositionCapacityDeferred, p.captured)
	for i, d := range r.Dispositions {
		if d != 0 {
			continue
		}
		if exe, ok := p.captured[cands[i].Key]; ok {
			switch _, seen := c.entries[cands[i].Key]; {
			case exe == nil:
				r.Dispositions[i] = DispositionCaptureRejected
				r.CaptureRejections++
			case p.updated[cands[i].Key]:
				r.Dispositions[i] = DispositionUpdated
			case seen:
				r.Dispositions[i] = DispositionCaptured
			}
		}
	}
	for i, d := range r.Dispositions {
		if d == 0 {
			return fmt.Errorf("%w: candidate %d (%s)", ErrNoDisposition, i, cands[i].Key.Short())
		}
	}
	return nil
}

// update writes a recorded graph into a resident executable of the same
// shape that the batch does not need (the least recently used such), in
// place, and re-keys it: when the cache is full, this replaces an eviction
// plus an instantiation and an upload with one cuGraphExecUpdate. It reports
// whether it did; a refusal by the device is recorded and leaves the graph
// for instantiation; other errors are returned. The donor comes from the
// first of the evictable list's groups (plan), the one evictions take
// from next, and leaves the list.
func (c *Cache) update(r *PrepareReport, graph cuda.Graph, exe *Executable, evictable []SegmentKey, first int, full bool) (bool, []SegmentKey, int, error) {
	di := slices.IndexFunc(evictable[:first], func(k SegmentKey) bool { return c.entries[k].Shape == exe.Shape })
	if di < 0 || !full {
		return false, evictable, first, nil
	}
	donor := c.entries[evictable[di]]
	if err := donor.Exec.Update(graph); err != nil {
		if errors.Is(err, cuda.ErrUpdateRefused) {
			r.UpdateRefusals = append(r.UpdateRefusals, err)
			return false, evictable, first, nil
		}
		_ = graph.Destroy()
		return false, evictable, first, &ReplayError{Stage: "update", Detail: err.Error(), EagerFallbackSafe: !cuda.Classify(err).Sticky, Err: err}
	}
	_ = graph.Destroy()
	from := donor.Key
	delete(c.entries, from)
	donor.Key, donor.Commands, donor.GraphNodes, donor.NodeCounts, donor.Scope = exe.Key, exe.Commands, exe.GraphNodes, exe.NodeCounts, exe.Scope
	c.resident += exe.Bytes - donor.Bytes
	donor.Owner, donor.Bytes = exe.Owner, exe.Bytes
	donor.lastUsed, donor.lastBatch = c.tick(), c.batches
	c.entries[exe.Key] = donor
	r.Updates = append(r.Updates, Update{From: from, To: exe.Key})
	r.Evicted = append(r.Evicted, from)
	r.Updated++
	evictable = append(evictable[:di:di], evictable[di+1:]...)
	if first--; first == 0 {
		first = len(evictable) // the first group is spent: the rest is one
	}
	return true, evictable, first, nil
}

// markMisses gives disposition d to every candidate still without one whose
// key is not in done.
func (c *Cache) markMisses(r *PrepareReport, cands []Candidate, d Disposition, done map[SegmentKey]*Executable) {
	for i := range r.Dispositions {
		if r.Dispositions[i] != 0 {
			continue
		}
		if _, ok := done[cands[i].Key]; ok {
			continue
		}
		r.Dispositions[i] = d
		switch d {
		case DispositionQuiescenceDeferred:
			r.QuiescenceDeferred++
		case DispositionOutsidePreparation:
			r.OutsidePreparation++
		case DispositionCapacityDeferred:
			r.CapacityDeferred++
		}
	}
}
