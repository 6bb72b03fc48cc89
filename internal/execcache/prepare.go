// Prepare: hits, remembered rejections and misses; misses captured,
// updated in place or deferred; residents evicted to make room.

package execcache

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/lanesched/lanes/internal/backend"
	discovery "github.com/lanesched/lanes/internal/discovery"

	cache "github.com/lanesched/lanes/cache"
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
func (c *Cache) Prepare(s backend.Stream, owner string, cands []discovery.Candidate, quiescent bool, enqueue func(i int) error) (discovery.PrepareReport, error) {
	return c.PrepareWith(s, owner, cands, quiescent, Encoder{Enqueue: enqueue})
}

// Encoder is how preparation reaches a batch's commands. Enqueue(i)
// enqueues command i on the stream. Command(i), when set, is that command
// as Enqueue would enqueue it: it lets a miss whose shape a resident has
// update that resident's parameters in place without a capture
// (backend.Exec.Rebind; a miss after preparation closed or while the stream
// is busy replays that way too, rebind.go), and the cache keeps its own
// copy with the executable, the recipe a rebuilt lane captures again
// (Recipes).
type Encoder struct {
	Enqueue func(i int) error
	Command func(i int) cuda.Command
}

// PrepareWith is Prepare with an Encoder.
func (c *Cache) PrepareWith(s backend.Stream, owner string, cands []discovery.Candidate, quiescent bool, enc Encoder) (discovery.PrepareReport, error) {
	r := discovery.PrepareReport{Dispositions: make([]discovery.Disposition, len(cands))}
	if len(cands) > 0 {
		c.batches++
	}
	misses := c.lookUp(&r, cands)
	if len(misses) == 0 {
		return r, nil
	}
	misses, err := c.share(&r, owner, cands, misses, quiescent, enc)
	if len(misses) == 0 || err != nil {
		return r, err
	}
	if c.prep.state != cache.PrepOpen || !quiescent {
		d := discovery.DispositionQuiescenceDeferred
		if c.prep.state != cache.PrepOpen {
			d = discovery.DispositionOutsidePreparation
		}
		c.markMisses(&r, cands, d, nil)
		return r, nil
	}
	err = c.placeMisses(&r, s, owner, cands, misses, enc)
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
func (c *Cache) placeMisses(r *discovery.PrepareReport, s backend.Stream, owner string, cands []discovery.Candidate, misses []discovery.SegmentKey, enc Encoder) error {
	p := preparing{c: c, owner: owner, cands: cands,
		captured: map[discovery.SegmentKey]*Executable{}, updated: map[discovery.SegmentKey]bool{}}
	var admitted []discovery.SegmentKey
	admitted, p.evictable, p.first = c.plan(owner, misses, cands)
	if err := p.captureAll(r, s, admitted, enc); err != nil {
		p.destroyCaptured()
		return err
	}
	p.makeRoom(r)
	p.shed(r)
	if err := p.install(r, s); err != nil {
		return err
	}
	return p.settle(r)
}

// lookUp gives hits and remembered rejections their dispositions and
// returns the other candidates' keys, each once, in order.
func (c *Cache) lookUp(r *discovery.PrepareReport, cands []discovery.Candidate) []discovery.SegmentKey {
	misses := c.misses[:0] // the cache's, reused: placeMisses and share keep no reference
	for i, cand := range cands {
		if e, ok := c.entries[cand.Key]; ok {
			c.use(e)
			r.Dispositions[i] = discovery.DispositionHit
			r.Hits++
			continue
		}
		if _, ok := c.rejected[cand.Key]; ok {
			r.Dispositions[i] = discovery.DispositionCachedRejection
			r.CachedRejections++
			continue
		}
		if !slices.Contains(misses, cand.Key) { // a batch's candidates are few
			misses = append(misses, cand.Key)
		}
	}
	c.misses = misses
	return misses
}

// preparing is one Prepare past its lookups: the misses it captures, and
// the residents it may evict or update in place to make room for them.
type preparing struct {
	c        *Cache
	owner    string
	cands    []discovery.Candidate
	captured map[discovery.SegmentKey]*Executable // nil: capture rejected, eager fallback safe
	updated  map[discovery.SegmentKey]bool        // captured into a resident in place
	order    []discovery.SegmentKey               // the newly instantiated, to install in order
	adding   int64                                // bytes of those, not yet resident
	addingD  int64                                // device bytes of those

	evictable []discovery.SegmentKey // residents the batch may evict, in the order they go (plan)
	first     int                    // the length of evictable's first group
}

// captureAll places every admitted miss: when the cache is full, into a
// resident of its shape in place (its parameters rebound without a
// capture, else captured and updated from the graph), else captured and
// instantiated. A rejection with eager fallback safe is remembered; any
// other error ends the preparation.
func (p *preparing) captureAll(r *discovery.PrepareReport, s backend.Stream, admitted []discovery.SegmentKey, enc Encoder) error {
	c := p.c
	for _, k := range admitted {
		cand := p.cands[indexOf(p.cands, k)]
		// Full by count, or by a byte bound this miss would cross: an
		// update in place changes neither.
		full := len(c.entries)+len(p.order) >= c.prep.capacity ||
			c.byteLimit > 0 && c.resident+p.adding+cand.Bytes > c.byteLimit ||
			c.devLimit > 0 && c.devBytes+p.addingD+c.estimate(cand.Len()) > c.devLimit
		var recipe []cuda.Command
		if enc.Command != nil {
			recipe = make([]cuda.Command, cand.Len())
			for i := range recipe {
				keepInto(&recipe[i], enc.Command(cand.Start+i))
			}
		}
		var done bool
		var err error
		if done, err = p.rebind(r, cand, recipe, full); done {
			continue
		}
		var graph backend.Graph
		var exe *Executable
		if err == nil {
			t := c.start()
			graph, exe, err = record(s, cand, enc.Enqueue)
			c.timed(r, cache.StageCapture, cand.Len(), t)
		}
		if err == nil {
			exe.Owner, exe.Bytes, exe.recipe = p.owner, cand.Bytes, recipe
			if done, p.evictable, p.first, err = c.update(r, graph, exe, p.evictable, p.first, full); done {
				p.captured[k], p.updated[k] = c.entries[k], true
				continue
			}
			if err == nil {
				t := c.start()
				exe, err = instantiate(graph, exe)
				c.timed(r, cache.StageInstantiate, cand.Len(), t)
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
		exe.Owner, exe.Bytes, exe.DeviceBytes = p.owner, cand.Bytes, exe.Exec.DeviceBytes()
		c.learn(exe)
		p.captured[k] = exe
		p.order = append(p.order, k)
		p.adding += exe.Bytes
		p.addingD += exe.DeviceBytes
	}
	return nil
}

// rebind gives a resident of the candidate's shape, one the batch does not
// need, the candidate's parameters in place without a capture, when the
// cache is full and every command is known (recipe). It reports whether
// it did; a refusal is recorded (rebindDonor) and leaves the candidate to
// be captured.
func (p *preparing) rebind(r *discovery.PrepareReport, cand discovery.Candidate, recipe []cuda.Command, full bool) (bool, error) {
	c := p.c
	di := c.donor(cand.Shape, p.evictable, p.first, full)
	if di < 0 || recipe == nil || c.rebindRefused(cand.Shape) {
		return false, nil
	}
	donor := c.entries[p.evictable[di]]
	ok, gone, err := c.rebindDonor(r, donor, recipe, cand.Shape, true) // placeMisses runs on a quiescent stream only
	if gone {
		p.evictable, p.first = withoutEvictable(p.evictable, p.first, di)
	}
	if err != nil {
		return false, err
	}
	if !ok {
		return false, nil
	}
	exe := &Executable{Key: cand.Key, Shape: cand.Shape, Commands: cand.Len(), GraphNodes: donor.GraphNodes, NodeCounts: donor.NodeCounts,
		Scope: cand.Scope, Owner: p.owner, Bytes: cand.Bytes, recipe: recipe}
	p.evictable, p.first = c.rekey(r, di, exe, p.evictable, p.first, discovery.UpdateByParameters)
	p.captured[cand.Key], p.updated[cand.Key] = c.entries[cand.Key], true
	return true, nil
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
func (p *preparing) makeRoom(r *discovery.PrepareReport) {
	c := p.c
	for len(p.evictable) > 0 && (len(c.entries)+len(p.order) > c.prep.capacity || c.byteLimit > 0 && c.residentBytes()+p.adding > c.byteLimit ||
		c.devLimit > 0 && c.devBytes+p.addingD > c.devLimit) {
		k := p.evictable[0]
		p.evictable = p.evictable[1:]
		c.evict(k, true) // placeMisses runs on a quiescent stream only
		r.Evicted = append(r.Evicted, k)
	}
}

// shed destroys the newest executables while the device-byte bound is
// still exceeded once every evictable resident is gone (a miss admitted
// on an estimate that proved low): they are capacity deferred, counted
// in DeviceDeferred.
func (p *preparing) shed(r *discovery.PrepareReport) {
	c := p.c
	for c.devLimit > 0 && len(p.order) > 0 && c.devBytes+p.addingD > c.devLimit {
		k := p.order[len(p.order)-1]
		p.order = p.order[:len(p.order)-1]
		e := p.captured[k]
		_ = e.Exec.Destroy()
		p.adding -= e.Bytes
		p.addingD -= e.DeviceBytes
		delete(p.captured, k)
		r.DeviceDeferred++
	}
}

// install makes the new executables resident and uploads them.
func (p *preparing) install(r *discovery.PrepareReport, s backend.Stream) error {
	c := p.c
	for _, k := range p.order {
		e := p.captured[k]
		e.lastUsed, e.lastBatch = c.tick(), c.batches
		c.put(e)
	}
	for _, k := range p.order {
		e := c.entries[k]
		t := c.start()
		if err := e.upload(s); err != nil {
			return err
		}
		c.timed(r, cache.StageUpload, e.GraphNodes, t)
		// The upload may take device memory of its own: charge it.
		if dev := e.Exec.DeviceBytes(); dev != e.DeviceBytes {
			c.chargeDevice(e, dev)
			c.learn(e)
		}
		r.Uploaded++
	}
	r.Captured = len(p.order)
	return nil
}

// settle gives every remaining candidate its disposition (captured,
// updated, capture rejected, or capacity deferred when it did not fit) and
// fails if one was left without.
func (p *preparing) settle(r *discovery.PrepareReport) error {
	c, cands := p.c, p.cands
	c.markMisses(r, cands, discovery.DispositionCapacityDeferred, p.captured)
	for i, d := range r.Dispositions {
		if d != 0 {
			continue
		}
		if exe, ok := p.captured[cands[i].Key]; ok {
			switch _, seen := c.entries[cands[i].Key]; {
			case exe == nil:
				r.Dispositions[i] = discovery.DispositionCaptureRejected
				r.CaptureRejections++
			case p.updated[cands[i].Key]:
				r.Dispositions[i] = discovery.DispositionUpdated
			case seen:
				r.Dispositions[i] = discovery.DispositionCaptured
			}
		}
	}
	for i, d := range r.Dispositions {
		if d == 0 {
			return fmt.Errorf("%w: candidate %d (%s)", cache.ErrNoDisposition, i, cands[i].Key.Short())
		}
	}
	return nil
}

// donor is the index in evictable of the resident an in-place update of
// a candidate of shape takes over, or -1: the least recently used of the
// shape in the first of the evictable list's groups (plan), the one
// evictions take from next, and only when the cache is full (otherwise the
// candidate gets an executable of its own and the resident stays).
func (c *Cache) donor(shape discovery.ShapeKey, evictable []discovery.SegmentKey, first int, full bool) int {
	if !full {
		return -1
	}
	return slices.IndexFunc(evictable[:first], func(k discovery.SegmentKey) bool { return c.entries[k].Shape == shape })
}

// update writes a recorded graph into the resident donor picks, in place,
// and re-keys it: when the cache is full, this replaces an eviction plus
// an instantiation and an upload with one cuGraphExecUpdate. It reports
// whether it did; a refusal by the device is recorded and leaves the graph
// for instantiation; other errors are returned.
func (c *Cache) update(r *discovery.PrepareReport, graph backend.Graph, exe *Executable, evictable []discovery.SegmentKey, first int, full bool) (bool, []discovery.SegmentKey, int, error) {
	di := c.donor(exe.Shape, evictable, first, full)
	if di < 0 {
		return false, evictable, first, nil
	}
	donor := c.entries[evictable[di]]
	t := c.start()
	err := donor.Exec.Update(graph)
	c.timed(r, cache.StageUpdate, exe.GraphNodes, t)
	if err != nil {
		if errors.Is(err, cuda.ErrUpdateRefused) {
			r.UpdateRefusals = append(r.UpdateRefusals, err)
			return false, evictable, first, nil
		}
		_ = graph.Destroy()
		return false, evictable, first, &ReplayError{Stage: "update", Detail: err.Error(), EagerFallbackSafe: !cuda.Classify(err).Sticky, Err: err}
	}
	_ = graph.Destroy()
	evictable, first = c.rekey(r, di, exe, evictable, first, discovery.UpdateByGraph)
	return true, evictable, first, nil
}

// rekey makes the resident evictable[di], just updated in place, replay
// exe's candidate: it takes exe's key, counts, scope, owner, bytes and
// recipe, and leaves the evictable list.
func (c *Cache) rekey(r *discovery.PrepareReport, di int, exe *Executable, evictable []discovery.SegmentKey, first int, how discovery.UpdateKind) ([]discovery.SegmentKey, int) {
	c.take(r, c.entries[evictable[di]], *exe, how)
	return withoutEvictable(evictable, first, di)
}

// withoutEvictable removes evictable[di], of the first group, from the
// evictable list (plan) and returns it with its first group's length.
func withoutEvictable(evictable []discovery.SegmentKey, first, di int) ([]discovery.SegmentKey, int) {
	evictable = append(evictable[:di:di], evictable[di+1:]...)
	if first--; first == 0 {
		first = len(evictable) // the first group is spent: the rest is one
	}
	return evictable, first
}

// start reads the cache's clock (0 without one).
func (c *Cache) start() time.Duration {
	if c.now == nil {
		return 0
	}
	return c.now()
}

// timed records a step that began at t, when the cache has a clock.
func (c *Cache) timed(r *discovery.PrepareReport, stage cache.Stage, nodes int, t time.Duration) {
	if c.now == nil {
		return
	}
	r.Timings = append(r.Timings, cache.Timing{Stage: stage, Nodes: nodes, Took: c.now() - t})
}

// estimate is the device bytes a miss of n nodes is expected to cost:
// the device's own figure when it gives one (SetSizer), else n times the
// most bytes per node an executable of this cache held.
func (c *Cache) estimate(n int) int64 {
	if c.sizer != nil {
		return c.sizer(n)
	}
	return int64(n) * c.perNode
}

// SetSizer gives the cache what its device charges an executable of n
// nodes (backend.Exec.DeviceBytes), for admitting misses against the
// device-byte bound; nil: the cache learns a figure per node from what it
// instantiated, which overestimates small segments' neighbours.
func (c *Cache) SetSizer(bytes func(nodes int) int64) { c.sizer = bytes }

// learn keeps the most device bytes per node an executable of this cache
// held, the estimate a miss is admitted on.
func (c *Cache) learn(e *Executable) {
	if n := int64(max(e.GraphNodes, 1)); e.DeviceBytes > 0 {
		c.perNode = max(c.perNode, (e.DeviceBytes+n-1)/n)
	}
}

// markMisses gives disposition d to every candidate still without one whose
// key is not in done.
func (c *Cache) markMisses(r *discovery.PrepareReport, cands []discovery.Candidate, d discovery.Disposition, done map[discovery.SegmentKey]*Executable) {
	for i := range r.Dispositions {
		if r.Dispositions[i] != 0 {
			continue
		}
		if _, ok := done[cands[i].Key]; ok {
			continue
		}
		r.Dispositions[i] = d
		switch d {
		case discovery.DispositionQuiescenceDeferred:
			r.QuiescenceDeferred++
		case discovery.DispositionOutsidePreparation:
			r.OutsidePreparation++
		case discovery.DispositionCapacityDeferred:
			r.CapacityDeferred++
		}
	}
}
