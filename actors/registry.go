// The call registry: every admitted, unended call by id, so that a lane
// ends each exactly once.

package actors

import (
	"sync"
	"sync/atomic"
	"unsafe"
)

// registryShards spreads the call registry over this many locks: clients
// registering calls and lane threads ending them seldom meet on one.
const registryShards = 64

// callRegistry holds every admitted, unended call by id. Each shard is a
// plain map under its own lock, so a steady load allocates nothing here
// (a sync.Map allocates an entry and a boxed key per call).
type callRegistry struct {
	shards [registryShards]registryShard
}

type registryShard struct {
	mu    sync.Mutex
	calls map[uint64]*call
	_     [64 - unsafe.Sizeof(sync.Mutex{}) - unsafe.Sizeof(map[uint64]*call(nil))]byte // one shard per 64-byte cache line
}

func (r *callRegistry) shard(id uint64) *registryShard { return &r.shards[id%registryShards] }

// store registers a call under its id.
func (r *callRegistry) store(c *call) { r.storeUnless(c, nil) }

// storeUnless registers a call unless closed is set (checked under the
// shard's lock), and reports whether it did.
func (r *callRegistry) storeUnless(c *call, closed *atomic.Bool) bool {
	sh := r.shard(c.id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if closed != nil && closed.Load() {
		return false
	}
	if sh.calls == nil {
		sh.calls = map[uint64]*call{}
	}
	sh.calls[c.id] = c
	return true
}

// barrier returns once every store that began before it has finished: a
// store after it sees whatever the caller set before calling it.
func (r *callRegistry) barrier() {
	for i := range r.shards {
		r.shards[i].mu.Lock()
		//lint:ignore SA2001 the empty critical section is the barrier
		r.shards[i].mu.Unlock()
	}
}

// load returns the registered call of an id.
func (r *callRegistry) load(id uint64) (*call, bool) {
	sh := r.shard(id)
	sh.mu.Lock()
	c, ok := sh.calls[id]
	sh.mu.Unlock()
	return c, ok
}

// take removes and returns the call of an id; of concurrent takers only
// one finds it.
func (r *callRegistry) take(id uint64) *call {
	sh := r.shard(id)
	sh.mu.Lock()
	c, ok := sh.calls[id]
	if ok {
		delete(sh.calls, id)
	}
	sh.mu.Unlock()
	return c
}

// matching returns the ids of the registered calls for which keep is true,
// shard by shard (a call registered meanwhile may or may not be seen).
func (r *callRegistry) matching(keep func(*call) bool) []uint64 {
	var ids []uint64
	for i := range r.shards {
		sh := &r.shards[i]
		sh.mu.Lock()
		for id, c := range sh.calls {
			if keep(c) {
				ids = append(ids, id)
			}
		}
		sh.mu.Unlock()
	}
	return ids
}
