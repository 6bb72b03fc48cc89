// The Cache: its residents and retired executables, lookups, eviction,
// launch, trim and the invariants tests check after every operation.

package execcache

import (
	"fmt"
	"time"

	"github.com/lanesched/lanes/internal/backend"
	discovery "github.com/lanesched/lanes/internal/discovery"

	cache "github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
)

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
	devLimit  int64 // most device bytes the residents hold; 0: no bound
	devBytes  int64 // device bytes the residents hold
	devRetire int64 // device bytes the retired executables hold
	perNode   int64 // the most device bytes per node an executable of this cache held: the estimate for a miss
	now       func() time.Duration
	sizer     func(nodes int) int64 // the device's charge for an executable (SetSizer)
	entries   map[discovery.SegmentKey]*Executable
	owners    map[string]*ownerUse              // each owner's residents (residents.go)
	shapes    map[discovery.ShapeKey]*shapeRing // each shape's residents, least recently used first
	noRebind  map[discovery.ShapeKey]refusal    // shapes not rebound: their nodes refuse it, or the device did, often (rebind.go)
	// refusedInARow counts each shape's rebinds the device refused since
	// its last that succeeded (rebind.go).
	refusedInARow map[discovery.ShapeKey]int
	spare         []cuda.Command         // a recipe's storage, reused by the next rebind (rebind.go)
	misses        []discovery.SegmentKey // lookUp's, reused
	rejected      map[discovery.SegmentKey]uint64
	retired       []*Executable
	prep          tracker
	clock         uint64
	batches       uint64 // batches prepared (with candidates): the clock of "in use"
}

// New returns an empty, unconfigured cache.
func New() *Cache {
	c := &Cache{rejected: map[discovery.SegmentKey]uint64{}, noRebind: map[discovery.ShapeKey]refusal{}, refusedInARow: map[discovery.ShapeKey]int{}}
	c.clear()
	return c
}

// clear empties the residents and their indexes.
func (c *Cache) clear() {
	c.entries, c.resident, c.devBytes = map[discovery.SegmentKey]*Executable{}, 0, 0
	c.owners, c.shapes = map[string]*ownerUse{}, map[discovery.ShapeKey]*shapeRing{}
}

func (c *Cache) tick() uint64 {
	c.clock++
	return c.clock
}

// Configure opens preparation with a capacity of resident executables.
func (c *Cache) Configure(capacity int) (cache.Preparation, error) {
	err := c.prep.configure(capacity, len(c.entries))
	return c.Preparation(), err
}

// LimitBytes bounds the host memory the resident executables retain (the
// uploads they captured); 0 or less removes the bound. Residents already
// over it stay until evicted.
func (c *Cache) LimitBytes(n int64) { c.byteLimit = max(n, 0) }

// Bytes is the host memory the resident and retired executables retain.
func (c *Cache) Bytes() int64 { return c.resident + c.retiredB }

// LimitDeviceBytes bounds the device memory the resident executables hold
// (backend.Exec.DeviceBytes), with the same equal shares per owner as the
// count and the host-byte bound; 0 or less removes the bound. A miss is
// admitted on an estimate (its node count times the most bytes per node
// an executable of this cache held) and checked again once instantiated.
func (c *Cache) LimitDeviceBytes(n int64) { c.devLimit = max(n, 0) }

// DeviceBytes is the device memory the resident and retired executables
// hold, as their device measured it when they were made.
func (c *Cache) DeviceBytes() int64 { return c.devBytes + c.devRetire }

// DeviceBytesByOwner is the device memory each owner's resident
// executables hold; no one's (Disown) are left out.
func (c *Cache) DeviceBytesByOwner() map[string]int64 {
	out := make(map[string]int64, len(c.owners))
	for o, u := range c.owners {
		if o != "" {
			out[o] = u.dev
		}
	}
	return out
}

// SetClock gives the cache a clock to time its captures, instantiations,
// uploads, updates and rebinds with (PrepareReport.Timings); nil: none
// are timed.
func (c *Cache) SetClock(now func() time.Duration) { c.now = now }

// Seal closes preparation: from now on misses run eagerly.
func (c *Cache) Seal() (cache.Preparation, error) {
	err := c.prep.seal()
	return c.Preparation(), err
}

// Preparation snapshots the lifecycle.
func (c *Cache) Preparation() cache.Preparation {
	return c.prep.snapshot(len(c.entries), len(c.rejected))
}

// Lookup returns a resident executable without touching its recency.
func (c *Cache) Lookup(k discovery.SegmentKey) (*Executable, bool) {
	e, ok := c.entries[k]
	return e, ok
}

// Len is the number of resident executables.
func (c *Cache) Len() int { return len(c.entries) }

// Retired is the number of evicted executables awaiting a quiescent stream.
func (c *Cache) Retired() int { return len(c.retired) }

// residentBytes is the host memory the residents retain.
func (c *Cache) residentBytes() int64 { return c.resident }

// remember records a capture rejection, forgetting the oldest beyond
// capacity.
func (c *Cache) remember(k discovery.SegmentKey) {
	if len(c.rejected) >= c.prep.capacity {
		var oldest discovery.SegmentKey
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
func (c *Cache) evict(k discovery.SegmentKey, quiescent bool) {
	e := c.remove(k)
	if quiescent {
		_ = e.Exec.Destroy()
	} else {
		c.retired = append(c.retired, e)
		c.retiredB += e.Bytes
		c.devRetire += e.DeviceBytes
	}
}

// EvictOwner removes every resident executable of an owner (a tenant the
// scheduler forgot) and returns their keys.
func (c *Cache) EvictOwner(owner string, quiescent bool) []discovery.SegmentKey {
	if c.owners[owner] == nil {
		return nil
	}
	var keys []discovery.SegmentKey
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
func (c *Cache) Evict(k discovery.SegmentKey, quiescent bool) bool {
	if _, ok := c.entries[k]; !ok {
		return false
	}
	c.evict(k, quiescent)
	return true
}

// Launch replays a resident executable on s and marks it most recently used.
func (c *Cache) Launch(s backend.Stream, k discovery.SegmentKey) (*Executable, error) {
	e, ok := c.entries[k]
	if !ok {
		return nil, &ReplayError{Stage: "launch", Detail: "executable " + k.Short() + " is not resident", EagerFallbackSafe: true}
	}
	if err := e.launch(s); err != nil {
		return nil, err
	}
	c.use(e)
	e.Hits++
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
	c.retired, c.retiredB, c.devRetire = nil, 0, 0
	return n
}

// Trim destroys every executable and forgets every rejection. It refuses
// while the stream has work in flight. Preparation stays in its state.
func (c *Cache) Trim(quiescent bool) (cache.TrimReport, error) {
	if !quiescent {
		return cache.TrimReport{}, fmt.Errorf("%w: trim waits for a quiescent stream", cache.ErrNotQuiescent)
	}
	t := cache.TrimReport{Executables: len(c.entries), Rejections: len(c.rejected)}
	for _, e := range c.entries {
		_ = e.Exec.Destroy()
	}
	t.Retired = c.ReleaseRetired(true)
	c.clear()
	c.rejected, c.noRebind, c.refusedInARow = map[discovery.SegmentKey]uint64{}, map[discovery.ShapeKey]refusal{}, map[discovery.ShapeKey]int{}
	return t, nil
}

// CheckInvariants verifies the cache's internal consistency; tests call it
// after every operation.
func (c *Cache) CheckInvariants() error {
	if c.prep.state != cache.PrepUnconfigured && len(c.entries) > c.prep.capacity {
		return fmt.Errorf("cache: %d residents exceed capacity %d", len(c.entries), c.prep.capacity)
	}
	if c.prep.state != cache.PrepUnconfigured && len(c.rejected) > c.prep.capacity {
		return fmt.Errorf("cache: %d remembered rejections exceed capacity %d", len(c.rejected), c.prep.capacity)
	}
	seen := map[uint64]bool{}
	var bytes, dev int64
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
		dev += e.DeviceBytes
	}
	if bytes != c.resident {
		return fmt.Errorf("cache: residents retain %d bytes, counted %d", bytes, c.resident)
	}
	if dev != c.devBytes {
		return fmt.Errorf("cache: residents hold %d device bytes, counted %d", dev, c.devBytes)
	}
	return c.checkIndexes()
}

// checkIndexes verifies the owners' uses and the shapes' lists against
// the residents.
func (c *Cache) checkIndexes() error {
	uses := map[string]ownerUse{}
	for _, e := range c.entries {
		u := uses[e.Owner]
		u.n, u.bytes, u.dev = u.n+1, u.bytes+e.Bytes, u.dev+e.DeviceBytes
		uses[e.Owner] = u
	}
	if len(uses) != len(c.owners) {
		return fmt.Errorf("cache: %d owners hold residents, %d indexed", len(uses), len(c.owners))
	}
	for o, u := range uses {
		if got := c.owners[o]; got == nil || *got != u {
			return fmt.Errorf("cache: owner %q holds %+v, indexed %+v", o, u, got)
		}
	}
	linked := 0
	for shape, ring := range c.shapes {
		var prev *Executable
		for e := ring.oldest; e != nil; prev, e = e, e.shapeNext {
			if e.Shape != shape || e.shapePrev != prev || c.entries[e.Key] != e {
				return fmt.Errorf("cache: shape list of %x holds %s out of place", shape[:4], e.Key.Short())
			}
			if prev != nil && prev.lastUsed > e.lastUsed {
				return fmt.Errorf("cache: shape list of %x is out of recency order at %s", shape[:4], e.Key.Short())
			}
			linked++
		}
		if ring.newest != prev {
			return fmt.Errorf("cache: shape list of %x ends at the wrong resident", shape[:4])
		}
	}
	if linked != len(c.entries) {
		return fmt.Errorf("cache: %d residents, %d in shape lists", len(c.entries), linked)
	}
	return nil
}

func indexOf(cands []discovery.Candidate, k discovery.SegmentKey) int {
	for i, c := range cands {
		if c.Key == k {
			return i
		}
	}
	return -1
}
