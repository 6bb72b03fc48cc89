// A combining sender: whoever queues a message while no one is sending
// sends it, with everything others queued meanwhile, as one remote
// message. Under load many ride in one message; alone, a message goes at
// once, with no hand-off to a sender goroutine.

package remote

import "sync"

// combiner queues items and has one caller at a time send them in batches.
type combiner[T any] struct {
	mu      sync.Mutex
	queued  []T
	sending bool
	most    int             // items per batch
	send    func(batch []T) // called by one caller at a time, never under mu
}

// add queues item; if no one is sending, the caller sends until the
// queue is empty.
func (c *combiner[T]) add(item T) {
	c.mu.Lock()
	c.queued = append(c.queued, item)
	if c.sending {
		c.mu.Unlock()
		return
	}
	c.sending = true
	for len(c.queued) > 0 {
		n := min(len(c.queued), c.most)
		batch := make([]T, n)
		copy(batch, c.queued)
		c.queued = append(c.queued[:0], c.queued[n:]...)
		c.mu.Unlock()
		c.send(batch)
		c.mu.Lock()
	}
	c.sending = false
	c.mu.Unlock()
}
