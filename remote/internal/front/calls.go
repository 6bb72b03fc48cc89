// A front's table of the submissions in flight on lane hosts: how each
// ends exactly once, by its host's receipt or by its host's loss.

package front

import (
	"sync"
	"sync/atomic"
)

// Calls is a front's table of submissions in flight on lane hosts, by the
// call id the front gave each. A call ends exactly once: by a receipt from
// its host under the epoch it was sent with (Settle), or, when that host
// is lost, by Lose, which hands back every call of the host's epoch for the
// front to end indeterminate and closes that epoch to new calls. A receipt
// that comes after (a stopped host that resumes, a duplicate, another
// epoch's) finds nothing and is dropped. Safe for concurrent use: the
// table is split in shards by id, so the callers submitting and the actor
// settling rarely wait for one another.
type CallTable[T any] struct {
	next   atomic.Uint64
	live   atomic.Int64 // calls in flight on every host
	shards [callShards]callShard[T]
}

// callShards is how many locks the table is split over: a front's
// submitting goroutines and its actor each take one per call, and one lock
// for all of them queued them up under load.
const callShards = 32

type callShard[T any] struct {
	mu     sync.Mutex
	calls  map[uint64]hostCall[T]
	byHost map[hostEpoch]map[uint64]struct{}
	closed map[hostEpoch]struct{} // epochs lost: no call is added under them
	_      [64]byte               // one shard's lock per cache line
}

type hostEpoch struct {
	host  string
	epoch uint64
}

type hostCall[T any] struct {
	at hostEpoch
	v  T
}

func (c *CallTable[T]) shard(id uint64) *callShard[T] { return &c.shards[id%callShards] }

// Add records a call sent to host under epoch, carrying v (the front's
// pending submission), and returns its id: the one the host echoes. It
// returns false, and records nothing, when that epoch of the host was
// lost already (Lose): the call must not be sent.
func (c *CallTable[T]) Add(host string, epoch uint64, v T) (uint64, bool) {
	id := c.next.Add(1)
	s := c.shard(id)
	at := hostEpoch{host, epoch}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, lost := s.closed[at]; lost {
		return 0, false
	}
	if s.calls == nil {
		s.calls, s.byHost = map[uint64]hostCall[T]{}, map[hostEpoch]map[uint64]struct{}{}
	}
	s.calls[id] = hostCall[T]{at: at, v: v}
	if s.byHost[at] == nil {
		s.byHost[at] = map[uint64]struct{}{}
	}
	s.byHost[at][id] = struct{}{}
	c.live.Add(1)
	return id, true
}

// Settle ends call id with its receipt from host under epoch: it returns
// the call's value and true once; a receipt of another host or epoch, of
// a call lost or settled already, or unknown, returns false (drop it).
func (c *CallTable[T]) Settle(host string, epoch, id uint64) (T, bool) {
	s := c.shard(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	hc, ok := s.find(host, epoch, id)
	if !ok {
		return hc.v, false
	}
	delete(s.calls, id)
	delete(s.byHost[hc.at], id)
	if len(s.byHost[hc.at]) == 0 {
		delete(s.byHost, hc.at)
	}
	c.live.Add(-1)
	return hc.v, true
}

// Get is call id's value while it is in flight on host under epoch.
func (c *CallTable[T]) Get(host string, epoch, id uint64) (T, bool) {
	s := c.shard(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	hc, ok := s.find(host, epoch, id)
	return hc.v, ok
}

// find is call id if it is in flight on host under epoch (s.mu held).
func (s *callShard[T]) find(host string, epoch, id uint64) (hostCall[T], bool) {
	hc, ok := s.calls[id]
	if !ok || hc.at != (hostEpoch{host, epoch}) {
		return hostCall[T]{}, false
	}
	return hc, true
}

// Lose ends every call in flight on host under epoch and returns their
// values, for the front to end indeterminate; each is returned once, by
// this call or by Settle, never both. From then on Add refuses that epoch
// of the host.
func (c *CallTable[T]) Lose(host string, epoch uint64) []T {
	at := hostEpoch{host, epoch}
	var out []T
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		if s.closed == nil {
			s.closed = map[hostEpoch]struct{}{}
		}
		s.closed[at] = struct{}{}
		for id := range s.byHost[at] {
			out = append(out, s.calls[id].v)
			delete(s.calls, id)
			c.live.Add(-1)
		}
		delete(s.byHost, at)
		s.mu.Unlock()
	}
	return out
}

// InFlight is the number of calls in flight on host under epoch.
func (c *CallTable[T]) InFlight(host string, epoch uint64) int {
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		n += len(s.byHost[hostEpoch{host, epoch}])
		s.mu.Unlock()
	}
	return n
}

// Len is the number of calls in flight on every host.
func (c *CallTable[T]) Len() int { return int(c.live.Load()) }
