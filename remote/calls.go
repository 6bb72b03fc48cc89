// A front's table of the submissions in flight on lane hosts: how each
// ends exactly once, by its host's receipt or by its host's loss.

package remote

import "sync"

// Calls is a front's table of submissions in flight on lane hosts, by the
// call id the front gave each. A call ends exactly once: by a receipt from
// its host under the epoch it was sent with (Settle), or, when that host
// is lost, by Lose, which hands back every call of the host's epoch for the
// front to end indeterminate. A receipt that comes after (a stopped host
// that resumes, a duplicate, another epoch's) finds nothing and is
// dropped. Safe for concurrent use.
type Calls[T any] struct {
	mu     sync.Mutex
	next   uint64
	calls  map[uint64]hostCall[T]
	byHost map[hostEpoch]map[uint64]struct{}
}

type hostEpoch struct {
	host  string
	epoch uint64
}

type hostCall[T any] struct {
	at hostEpoch
	v  T
}

// Add records a call sent to host under epoch, carrying v (the front's
// pending submission), and returns its id: the one the host echoes.
func (c *Calls[T]) Add(host string, epoch uint64, v T) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.calls == nil {
		c.calls, c.byHost = map[uint64]hostCall[T]{}, map[hostEpoch]map[uint64]struct{}{}
	}
	c.next++
	at := hostEpoch{host, epoch}
	c.calls[c.next] = hostCall[T]{at: at, v: v}
	if c.byHost[at] == nil {
		c.byHost[at] = map[uint64]struct{}{}
	}
	c.byHost[at][c.next] = struct{}{}
	return c.next
}

// Settle ends call id with its receipt from host under epoch: it returns
// the call's value and true once; a receipt of another host or epoch, of
// a call lost or settled already, or unknown, returns false (drop it).
func (c *Calls[T]) Settle(host string, epoch, id uint64) (T, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	hc, ok := c.find(host, epoch, id)
	if !ok {
		return hc.v, false
	}
	delete(c.calls, id)
	delete(c.byHost[hc.at], id)
	if len(c.byHost[hc.at]) == 0 {
		delete(c.byHost, hc.at)
	}
	return hc.v, true
}

// Get is call id's value while it is in flight on host under epoch.
func (c *Calls[T]) Get(host string, epoch, id uint64) (T, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	hc, ok := c.find(host, epoch, id)
	return hc.v, ok
}

// find is call id if it is in flight on host under epoch (c.mu held).
func (c *Calls[T]) find(host string, epoch, id uint64) (hostCall[T], bool) {
	hc, ok := c.calls[id]
	if !ok || hc.at != (hostEpoch{host, epoch}) {
		return hostCall[T]{}, false
	}
	return hc, true
}

// Lose ends every call in flight on host under epoch and returns their
// values, for the front to end indeterminate; each is returned once, by
// this call or by Settle, never both.
func (c *Calls[T]) Lose(host string, epoch uint64) []T {
	c.mu.Lock()
	defer c.mu.Unlock()
	at := hostEpoch{host, epoch}
	ids := c.byHost[at]
	out := make([]T, 0, len(ids))
	for id := range ids {
		out = append(out, c.calls[id].v)
		delete(c.calls, id)
	}
	delete(c.byHost, at)
	return out
}

// InFlight is the number of calls in flight on host under epoch.
func (c *Calls[T]) InFlight(host string, epoch uint64) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.byHost[hostEpoch{host, epoch}])
}

// Len is the number of calls in flight on every host.
func (c *Calls[T]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.calls)
}
