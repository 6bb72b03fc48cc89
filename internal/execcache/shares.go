// Shares: which residents a batch may evict, so that each owner keeps an
// equal share of the capacity and byte bound, and which misses fit.

package execcache

import (
	"sort"

	discovery "github.com/lanesched/lanes/internal/discovery"
)

// plan admits the misses that fit, by count and by bytes, once every
// evictable resident is evicted, and lists the evictable residents in the
// order they go, in two groups (first is the length of the first).
// Residents this batch needs are never evictable.
//
// Each owner with residents, and the batch's owner, has an equal share of
// the capacity, of the host-byte bound and of the device-byte bound. The batch may evict its own owner's
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
func (c *Cache) plan(owner string, misses []discovery.SegmentKey, cands []discovery.Candidate) (admitted, evictable []discovery.SegmentKey, first int) {
	uses := c.uses(owner, cands)
	evictable, first = c.evictionOrder(owner, uses)
	return c.admit(misses, cands, evictable), evictable, first
}

// use is what one owner holds in the cache: its residents' count and bytes,
// and those of its residents the batch being prepared does not need.
type use struct {
	n     int
	bytes int64
	dev   int64 // device bytes
	keys  []discovery.SegmentKey
}

// uses is every owner's use of the cache, the batch's owner's included.
func (c *Cache) uses(owner string, cands []discovery.Candidate) map[string]*use {
	needed := map[discovery.SegmentKey]bool{}
	for _, cand := range cands {
		needed[cand.Key] = true
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
		u.dev += e.DeviceBytes
		if !needed[k] {
			u.keys = append(u.keys, k)
		}
	}
	return uses
}

// byUse sorts residents least recently used first.
func (c *Cache) byUse(keys []discovery.SegmentKey) {
	sort.Slice(keys, func(i, j int) bool { return c.entries[keys[i]].lastUsed < c.entries[keys[j]].lastUsed })
}

// evictionOrder lists the residents the owner's batch may evict, in the
// order they go, in two groups: others' excess beyond their share and the
// owner's own, the owner's first once it is beyond its share.
func (c *Cache) evictionOrder(owner string, uses map[string]*use) (evictable []discovery.SegmentKey, first int) {
	countShare := c.prep.capacity / len(uses)
	byteShare := c.byteLimit / int64(len(uses))
	devShare := c.devLimit / int64(len(uses))
	within := func(u *use) bool {
		return u.n <= countShare && (c.byteLimit == 0 || u.bytes <= byteShare) && (c.devLimit == 0 || u.dev <= devShare)
	}
	mine := uses[owner]
	ownFirst := !within(mine)
	// A batch whose tenant is under its share may take from others' excess
	// what they use; one at or over its share only what they left idle.
	under := mine.n < countShare && (c.byteLimit == 0 || mine.bytes < byteShare) && (c.devLimit == 0 || mine.dev < devShare)
	var others []discovery.SegmentKey
	for o, u := range uses {
		if o == owner {
			continue
		}
		c.byUse(u.keys)
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
			u.dev -= c.entries[k].DeviceBytes
		}
	}
	c.byUse(others)
	c.byUse(mine.keys)
	if ownFirst {
		evictable, first = append(mine.keys, others...), len(mine.keys)
	} else {
		evictable, first = append(others, mine.keys...), len(others)
	}
	if first == 0 {
		first = len(evictable)
	}
	return evictable, first
}

// admit lists the misses that fit by count and by bytes once every
// evictable resident is gone; the others are capacity deferred.
func (c *Cache) admit(misses []discovery.SegmentKey, cands []discovery.Candidate, evictable []discovery.SegmentKey) []discovery.SegmentKey {
	var admitted []discovery.SegmentKey
	rooms := c.prep.capacity - len(c.entries) + len(evictable)
	bytes, dev := c.byteLimit-c.residentBytes(), c.devLimit-c.devBytes
	for _, k := range evictable {
		bytes += c.entries[k].Bytes
		dev += c.entries[k].DeviceBytes
	}
	for _, k := range misses {
		cand := cands[indexOf(cands, k)]
		need, needDev := cand.Bytes, c.estimate(cand.Len())
		if rooms < 1 || c.byteLimit > 0 && need > bytes || c.devLimit > 0 && needDev > dev {
			continue // capacity deferred
		}
		admitted = append(admitted, k)
		rooms--
		bytes -= need
		dev -= needDev
	}
	return admitted
}
