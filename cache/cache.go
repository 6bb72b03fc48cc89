package cache

import (
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/lanesched/lanes/cuda"
)

// Disposition is what preparation did with one candidate.
type Disposition uint8

// Dispositions. Every candidate of a batch gets exactly one.
const (
	DispositionHit                Disposition = iota + 1 // already resident
	DispositionCaptured                                  // captured, instantiated and uploaded now
	DispositionUpdated                                   // captured and written into a resident executable of the same shape, in place
	DispositionCaptureRejected                           // capture failed; eager fallback was safe
	DispositionCachedRejection                           // capture failed before; not tried again
	DispositionQuiescenceDeferred                        // a miss, but the stream had work in flight
	DispositionCapacityDeferred                          // a miss, but the cache is full of executables this batch needs
	DispositionOutsidePreparation                        // a miss, and the cache is not open for preparation
)

var dispositionNames = [...]string{"", "hit", "captured", "updated", "capture_rejected", "cached_rejection", "quiescence_deferred", "capacity_deferred", "outside_preparation"}

// String is the disposition's snake_case name.
func (d Disposition) String() string {
	if int(d) < len(dispositionNames) && d != 0 {
		return dispositionNames[d]
	}
	return "none"
}

// Resident reports whether the candidate is resident after preparation.
func (d Disposition) Resident() bool {
	return d == DispositionHit || d == DispositionCaptured || d == DispositionUpdated
}

// Reason is the gap reason of a non-resident disposition.
func (d Disposition) Reason() Reason {
	switch d {
	case DispositionCaptureRejected:
		return ReasonCaptureRejected
	case DispositionCachedRejection:
		return ReasonCachedRejection
	case DispositionQuiescenceDeferred:
		return ReasonQuiescenceDeferred
	case DispositionCapacityDeferred:
		return ReasonCapacityDeferred
	case DispositionOutsidePreparation:
		return ReasonOutsidePreparation
	}
	return ReasonNone
}

// PrepareReport is what one Prepare did.
type PrepareReport struct {
	Dispositions []Disposition // one per candidate, in order
	Rejections   []error       // the capture errors behind CaptureRejected, in order
	Evicted      []SegmentKey  // residents evicted to make room, or re-keyed by an update
	// Updates are the in-place updates made: each resident executable of
	// the candidate's shape that now replays the candidate instead.
	Updates []Update
	// UpdateRefusals are the device's answers when an in-place update was
	// refused and the candidate was instantiated instead.
	UpdateRefusals []error

	Hits, Captured, Updated, Uploaded, CaptureRejections, CachedRejections int
	QuiescenceDeferred, CapacityDeferred, OutsidePreparation               int
}

// Update is one in-place update: the executable that replayed From replays
// To now. The key changes with it: an updated executable is re-keyed,
// never shared between the two.
type Update struct{ From, To SegmentKey }

// Cache is the bounded executable cache of one lane's stream. It is not safe
// for concurrent use: the lane that owns the stream owns it. Its clock is
// logical (one tick per use), so its behaviour is deterministic.
//
// The in-flight rule: an executable evicted while its stream has work in
// flight is not destroyed but retired, and destroyed at the next quiescent
// point (ReleaseRetired, Trim). CUDA itself would free an in-flight
// executable asynchronously; retiring keeps the rule the same on every
// backend and never leaks: nothing is destroyed under running work, and
// everything retired is destroyed once the stream drains.
type Cache struct {
	byteLimit int64 // most bytes the residents retain; 0: no bound
	resident  int64 // bytes the residents retain
	retiredB  int64 // bytes the retired executables retain
	entries   map[SegmentKey]*Executable
	rejected  map[SegmentKey]uint64
	retired   []*Executable
	prep      tracker
	clock     uint64
	batches   uint64 // batches prepared (with candidates): the clock of "in use"
}

// New returns an empty, unconfigured cache.
func New() *Cache {
	return &Cache{entries: map[SegmentKey]*Executable{}, rejected: map[SegmentKey]uint64{}}
}

func (c *Cache) tick() uint64 {
	c.clock++
	return c.clock
}

// Configure opens preparation with a capacity of resident executables.
func (c *Cache) Configure(capacity int) (Preparation, error) {
	err := c.prep.configure(capacity, len(c.entries))
	return c.Preparation(), err
}

// LimitBytes bounds the host memory the resident executables retain (the
// uploads they captured); 0 or less removes the bound. Residents already
// over it stay until evicted.
func (c *Cache) LimitBytes(n int64) { c.byteLimit = max(n, 0) }

// Bytes is the host memory the resident and retired executables retain.
func (c *Cache) Bytes() int64 { return c.resident + c.retiredB }

// Seal closes preparation: from now on misses run eagerly.
func (c *Cache) Seal() (Preparation, error) {
	err := c.prep.seal()
	return c.Preparation(), err
}

// Preparation snapshots the lifecycle.
func (c *Cache) Preparation() Preparation {
	return c.prep.snapshot(len(c.entries), len(c.rejected))
}

// Lookup returns a resident executable without touching its recency.
func (c *Cache) Lookup(k SegmentKey) (*Executable, bool) {
	e, ok := c.entries[k]
	return e, ok
}

// Len is the number of resident executables.
func (c *Cache) Len() int { return len(c.entries) }

// Retired is the number of evicted executables awaiting a quiescent stream.
func (c *Cache) Retired() int { return len(c.retired) }

// Prepare gives every candidate of owner's batch a disposition: residents
// are hits (and become most recently used); misses are captured on s, when
// preparation is open and the stream quiescent, as far as capacity and the
// byte bound allow after evicting least-recently-used residents this batch
// does not need, among the owner's own and other owners' beyond their
// share (see plan). enqueue(i) must
// enqueue batch command i on s. A capture failure that leaves eager fallback
// safe is remembered (bounded by capacity, oldest forgotten first) and
// reported; any other failure is returned.
func (c *Cache) Prepare(s cuda.Stream, owner string, cands []Candidate, quiescent bool, enqueue func(i int) error) (PrepareReport, error) {
	r := PrepareReport{Dispositions: make([]Disposition, len(cands))}
	if len(cands) > 0 {
		c.batches++
	}
	var misses []SegmentKey
	missed := map[SegmentKey]bool{}
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
		if !missed[cand.Key] {
			missed[cand.Key] = true
			misses = append(misses, cand.Key)
		}
	}
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

	admitted, evictable, first := c.plan(owner, misses, cands)
	captured := map[SegmentKey]*Executable{}
	updated := map[SegmentKey]bool{}
	var order []SegmentKey
	var adding int64 // bytes of the captured executables not yet resident
	abort := func(err error) (PrepareReport, error) {
		for _, e := range captured {
			if e != nil && !updated[e.Key] {
				_ = e.Exec.Destroy()
			}
		}
		return r, err
	}
	for _, k := range admitted {
		cand := cands[indexOf(cands, k)]
		graph, exe, err := record(s, cand, enqueue)
		if err == nil {
			var done bool
			full := len(c.entries)+len(order) >= c.prep.capacity
			exe.Owner, exe.Bytes = owner, cand.Bytes
			if done, evictable, first, err = c.update(&r, graph, exe, evictable, first, full); done {
				captured[k], updated[k] = c.entries[k], true
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
				captured[k] = nil
				continue
			}
			return abort(err)
		}
		exe.lastUsed, exe.lastBatch = c.tick(), c.batches
		exe.Owner, exe.Bytes = owner, cand.Bytes
		captured[k] = exe
		order = append(order, k)
		adding += exe.Bytes
	}
	for len(evictable) > 0 && (len(c.entries)+len(order) > c.prep.capacity || c.byteLimit > 0 && c.residentBytes()+adding > c.byteLimit) {
		k := evictable[0]
		evictable = evictable[1:]
		c.evict(k, quiescent)
		r.Evicted = append(r.Evicted, k)
	}
	for _, k := range order {
		c.entries[k] = captured[k]
		c.resident += captured[k].Bytes
	}
	for _, k := range order {
		if err := c.entries[k].upload(s); err != nil {
			return r, err
		}
		r.Uploaded++
	}
	r.Captured = len(order)
	c.markMisses(&r, cands, DispositionCapacityDeferred, captured)
	for i, d := range r.Dispositions {
		if d != 0 {
			continue
		}
		if exe, ok := captured[cands[i].Key]; ok {
			switch _, seen := c.entries[cands[i].Key]; {
			case exe == nil:
				r.Dispositions[i] = DispositionCaptureRejected
				r.CaptureRejections++
			case updated[cands[i].Key]:
				r.Dispositions[i] = DispositionUpdated
			case seen:
				r.Dispositions[i] = DispositionCaptured
			}
		}
	}
	for i, d := range r.Dispositions {
		if d == 0 {
			return r, fmt.Errorf("%w: candidate %d (%s)", ErrNoDisposition, i, cands[i].Key.Short())
		}
	}
	c.prep.record(r)
	return r, nil
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

// plan admits the misses that fit, by count and by bytes, once every
// evictable resident is evicted, and lists the evictable residents in the
// order they go, in two groups (first is the length of the first).
// Residents this batch needs are never evictable.
//
// Each owner with residents, and the batch's owner, has an equal share of
// the capacity and of the byte bound. The batch may evict its own owner's
// residents, and another owner's beyond that owner's share (the least
// recently used first): while its owner is under its own share, any of
// those; once its owner has its share, only those not in use (not used
// within the last two capacities' worth of prepared batches). Others'
// excess goes first while the batch's owner is within its share, its own
// residents first once it is beyond it. So a tenant that churns keys evicts
// its own executables, never a neighbour's within its share; owners that
// all need more than their share (or outnumber the capacity) keep what
// they use instead of trading executables round robin (which would leave
// every owner capturing and none replaying); and the residents of owners
// gone idle make room for newcomers.
func (c *Cache) plan(owner string, misses []SegmentKey, cands []Candidate) (admitted, evictable []SegmentKey, first int) {
	needed := map[SegmentKey]bool{}
	for _, cand := range cands {
		needed[cand.Key] = true
	}
	type use struct {
		n     int
		bytes int64
		keys  []SegmentKey // its residents this batch does not need
	}
	uses := map[string]*use{owner: {}}
	for k, e := range c.entries {
		u := uses[e.Owner]
		if u == nil {
			u = &use{}
			uses[e.Owner] = u
		}
		u.n++
		u.bytes += e.Bytes
		if !needed[k] {
			u.keys = append(u.keys, k)
		}
	}
	byUse := func(keys []SegmentKey) {
		sort.Slice(keys, func(i, j int) bool { return c.entries[keys[i]].lastUsed < c.entries[keys[j]].lastUsed })
	}
	countShare := c.prep.capacity / len(uses)
	byteShare := c.byteLimit / int64(len(uses))
	within := func(u *use) bool { return u.n <= countShare && (c.byteLimit == 0 || u.bytes <= byteShare) }
	mine := uses[owner]
	ownFirst := !within(mine)
	// A batch whose tenant is under its share may take from others' excess
	// what they use; one at or over its share only what they left idle.
	under := mine.n < countShare && (c.byteLimit == 0 || mine.bytes < byteShare)
	var others []SegmentKey
	for o, u := range uses {
		if o == owner {
			continue
		}
		byUse(u.keys)
		for _, k := range u.keys {
			if within(u) {
				break // within its share: the rest of its residents stay
			}
			if !under && c.batches-c.entries[k].lastBatch <= 2*uint64(c.prep.capacity) {
				continue // in use, and the batch's tenant has its share
			}
			others = append(others, k)
			u.n--
			u.bytes -= c.entries[k].Bytes
		}
	}
	byUse(others)
	byUse(mine.keys)
	if ownFirst {
		evictable, first = append(mine.keys, others...), len(mine.keys)
	} else {
		evictable, first = append(others, mine.keys...), len(others)
	}
	if first == 0 {
		first = len(evictable)
	}
	rooms := c.prep.capacity - len(c.entries) + len(evictable)
	bytes := c.byteLimit - c.residentBytes()
	for _, k := range evictable {
		bytes += c.entries[k].Bytes
	}
	for _, k := range misses {
		need := cands[indexOf(cands, k)].Bytes
		if rooms < 1 || c.byteLimit > 0 && need > bytes {
			continue // capacity deferred
		}
		admitted = append(admitted, k)
		rooms--
		bytes -= need
	}
	return admitted, evictable, first
}

// residentBytes is the host memory the residents retain.
func (c *Cache) residentBytes() int64 { return c.resident }

// remember records a capture rejection, forgetting the oldest beyond
// capacity.
func (c *Cache) remember(k SegmentKey) {
	if len(c.rejected) >= c.prep.capacity {
		var oldest SegmentKey
		first := true
		for rk, t := range c.rejected {
			if first || t < c.rejected[oldest] {
				oldest, first = rk, false
			}
		}
		delete(c.rejected, oldest)
	}
	c.rejected[k] = c.tick()
}

// evict removes a resident; it is destroyed now if the stream is quiescent,
// retired otherwise.
func (c *Cache) evict(k SegmentKey, quiescent bool) {
	e := c.entries[k]
	delete(c.entries, k)
	c.resident -= e.Bytes
	if quiescent {
		_ = e.Exec.Destroy()
	} else {
		c.retired = append(c.retired, e)
		c.retiredB += e.Bytes
	}
}

// EvictOwner removes every resident executable of an owner (a tenant the
// scheduler forgot) and returns their keys.
func (c *Cache) EvictOwner(owner string, quiescent bool) []SegmentKey {
	var keys []SegmentKey
	for k, e := range c.entries {
		if e.Owner == owner {
			keys = append(keys, k)
		}
	}
	for _, k := range keys {
		c.evict(k, quiescent)
	}
	return keys
}

// Evict removes one resident executable. It reports whether it was resident.
func (c *Cache) Evict(k SegmentKey, quiescent bool) bool {
	if _, ok := c.entries[k]; !ok {
		return false
	}
	c.evict(k, quiescent)
	return true
}

// Launch replays a resident executable on s and marks it most recently used.
func (c *Cache) Launch(s cuda.Stream, k SegmentKey) (*Executable, error) {
	e, ok := c.entries[k]
	if !ok {
		return nil, &ReplayError{Stage: "launch", Detail: "executable " + k.Short() + " is not resident", EagerFallbackSafe: true}
	}
	if err := e.launch(s); err != nil {
		return nil, err
	}
	e.lastUsed, e.lastBatch = c.tick(), c.batches
	return e, nil
}

// ReleaseRetired destroys the retired executables once the stream is
// quiescent and returns how many it destroyed.
func (c *Cache) ReleaseRetired(quiescent bool) int {
	if !quiescent {
		return 0
	}
	n := len(c.retired)
	for _, e := range c.retired {
		_ = e.Exec.Destroy()
	}
	c.retired, c.retiredB = nil, 0
	return n
}

// TrimReport says what a trim released.
type TrimReport struct{ Executables, Rejections, Retired int }

// Trim destroys every executable and forgets every rejection. It refuses
// while the stream has work in flight. Preparation stays in its state.
func (c *Cache) Trim(quiescent bool) (TrimReport, error) {
	if !quiescent {
		return TrimReport{}, fmt.Errorf("%w: trim waits for a quiescent stream", ErrNotQuiescent)
	}
	t := TrimReport{Executables: len(c.entries), Rejections: len(c.rejected)}
	for _, e := range c.entries {
		_ = e.Exec.Destroy()
	}
	t.Retired = c.ReleaseRetired(true)
	c.entries, c.resident = map[SegmentKey]*Executable{}, 0
	c.rejected = map[SegmentKey]uint64{}
	return t, nil
}

// CheckInvariants verifies the cache's internal consistency; tests call it
// after every operation.
func (c *Cache) CheckInvariants() error {
	if c.prep.state != PrepUnconfigured && len(c.entries) > c.prep.capacity {
		return fmt.Errorf("cache: %d residents exceed capacity %d", len(c.entries), c.prep.capacity)
	}
	if c.prep.state != PrepUnconfigured && len(c.rejected) > c.prep.capacity {
		return fmt.Errorf("cache: %d remembered rejections exceed capacity %d", len(c.rejected), c.prep.capacity)
	}
	seen := map[uint64]bool{}
	var bytes int64
	for k, e := range c.entries {
		if e.Key != k {
			return fmt.Errorf("cache: entry %s holds executable %s", k.Short(), e.Key.Short())
		}
		if !e.uploaded {
			return fmt.Errorf("cache: resident %s was never uploaded", k.Short())
		}
		if e.lastUsed == 0 || e.lastUsed > c.clock || seen[e.lastUsed] {
			return fmt.Errorf("cache: resident %s has recency %d (clock %d)", k.Short(), e.lastUsed, c.clock)
		}
		seen[e.lastUsed] = true
		if _, ok := c.rejected[k]; ok {
			return fmt.Errorf("cache: %s is both resident and rejected", k.Short())
		}
		bytes += e.Bytes
	}
	if bytes != c.resident {
		return fmt.Errorf("cache: residents retain %d bytes, counted %d", bytes, c.resident)
	}
	return nil
}

func indexOf(cands []Candidate, k SegmentKey) int {
	for i, c := range cands {
		if c.Key == k {
			return i
		}
	}
	return -1
}
