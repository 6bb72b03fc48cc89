// The indexes kept beside the residents map, so that no step's work grows
// with the residents or the owners: each owner's use of the cache, and
// each shape's residents from least to most recently used.

package execcache

import discovery "github.com/lanesched/lanes/internal/discovery"

// ownerUse is what one owner's residents hold: their count, host bytes
// and device bytes.
type ownerUse struct {
	n     int
	bytes int64
	dev   int64
}

// shapeRing lists the residents of one shape, least recently used first,
// through their shapePrev and shapeNext links.
type shapeRing struct{ oldest, newest *Executable }

// put makes e resident under its key and indexes it.
func (c *Cache) put(e *Executable) {
	c.entries[e.Key] = e
	c.resident += e.Bytes
	c.devBytes += e.DeviceBytes
	c.link(e)
}

// remove takes the resident of key k out of the map and the indexes and
// returns it.
func (c *Cache) remove(k discovery.SegmentKey) *Executable {
	e := c.entries[k]
	delete(c.entries, k)
	c.resident -= e.Bytes
	c.devBytes -= e.DeviceBytes
	c.unlink(e)
	return e
}

// link adds e to its owner's use and as the newest of its shape.
func (c *Cache) link(e *Executable) {
	u := c.owners[e.Owner]
	if u == nil {
		u = &ownerUse{}
		c.owners[e.Owner] = u
	}
	u.n++
	u.bytes += e.Bytes
	u.dev += e.DeviceBytes
	ring := c.shapes[e.Shape]
	if ring == nil {
		ring = &shapeRing{}
		c.shapes[e.Shape] = ring
	}
	e.shapePrev, e.shapeNext = ring.newest, nil
	if ring.newest != nil {
		ring.newest.shapeNext = e
	} else {
		ring.oldest = e
	}
	ring.newest = e
}

// unlink takes e out of its owner's use and its shape's list.
func (c *Cache) unlink(e *Executable) {
	if u := c.owners[e.Owner]; u != nil {
		u.n--
		u.bytes -= e.Bytes
		u.dev -= e.DeviceBytes
		if u.n == 0 {
			delete(c.owners, e.Owner)
		}
	}
	ring := c.shapes[e.Shape]
	if ring == nil {
		return
	}
	if e.shapePrev != nil {
		e.shapePrev.shapeNext = e.shapeNext
	} else {
		ring.oldest = e.shapeNext
	}
	if e.shapeNext != nil {
		e.shapeNext.shapePrev = e.shapePrev
	} else {
		ring.newest = e.shapePrev
	}
	e.shapePrev, e.shapeNext = nil, nil
	if ring.oldest == nil {
		delete(c.shapes, e.Shape)
	}
}

// use marks a resident used now: most recently used, of the cache and of
// its shape.
func (c *Cache) use(e *Executable) {
	e.lastUsed, e.lastBatch = c.tick(), c.batches
	ring := c.shapes[e.Shape]
	if ring == nil || ring.newest == e {
		return
	}
	if e.shapePrev != nil {
		e.shapePrev.shapeNext = e.shapeNext
	} else {
		ring.oldest = e.shapeNext
	}
	e.shapeNext.shapePrev = e.shapePrev
	e.shapePrev, e.shapeNext = ring.newest, nil
	ring.newest.shapeNext = e
	ring.newest = e
}

// chargeDevice changes a resident's device bytes to dev (an upload took
// memory of its own).
func (c *Cache) chargeDevice(e *Executable, dev int64) {
	c.devBytes += dev - e.DeviceBytes
	if u := c.owners[e.Owner]; u != nil {
		u.dev += dev - e.DeviceBytes
	}
	e.DeviceBytes = dev
}

// shares are the equal shares of the count, host-byte and device-byte
// bounds among the owners with residents and the batch's owner.
func (c *Cache) shares(batchOwner string) (n int, bytes, dev int64) {
	owners := len(c.owners)
	if _, ok := c.owners[""]; ok {
		owners-- // no one's (Disown)
	}
	if _, ok := c.owners[batchOwner]; !ok || batchOwner == "" {
		owners++
	}
	return c.prep.capacity / owners, c.byteLimit / int64(owners), c.devLimit / int64(owners)
}

// overShare reports whether owner holds more than its equal share of the
// count, the host-byte or the device-byte bound (shares).
func (c *Cache) overShare(owner, batchOwner string) bool {
	u := c.owners[owner]
	if u == nil {
		return false
	}
	n, bytes, dev := c.shares(batchOwner)
	return u.n > n || c.byteLimit > 0 && u.bytes > bytes || c.devLimit > 0 && u.dev > dev
}

// atShare reports whether the batch's owner holds at least its equal
// share of one of the bounds: a new executable of its own would take
// another's.
func (c *Cache) atShare(owner string) bool {
	u := c.owners[owner]
	if u == nil {
		return false
	}
	n, bytes, dev := c.shares(owner)
	return u.n >= n || c.byteLimit > 0 && u.bytes >= bytes || c.devLimit > 0 && u.dev >= dev
}

// Disown makes every resident of owner no one's, and returns how many
// there were: a tenant forgotten while preparation is closed leaves its
// executables for any tenant's miss of their shape to rebind (they count
// toward no one's share), since nothing could be captured in their place.
func (c *Cache) Disown(owner string) int {
	u := c.owners[owner]
	if u == nil || owner == "" {
		return 0
	}
	var mine []*Executable
	for _, e := range c.entries {
		if e.Owner == owner {
			mine = append(mine, e)
		}
	}
	for _, e := range mine {
		c.unlink(e)
		e.Owner = ""
		c.link(e)
	}
	return len(mine)
}
