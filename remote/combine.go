// A combining sender: whoever queues a message while no one is sending
// sends it, with everything others queued meanwhile, as one remote
// message. Under load many ride in one message; alone, a message goes at
// once, with no hand-off to a sender goroutine. Queuing takes no lock (a
// compare-and-swap onto a list), so many callers queuing at once do not
// wait on each other.

package remote

import "sync/atomic"

// combiner queues items and has one caller at a time send them in
// batches, in the order they were queued.
type combiner[T any] struct {
	queued  atomic.Pointer[queuedItem[T]] // newest first
	sending atomic.Bool
	most    int             // items per batch
	send    func(batch []T) // called by one caller at a time
}

type queuedItem[T any] struct {
	v    T
	next *queuedItem[T]
}

// add queues item; if no one is sending, the caller sends until the
// queue is empty.
func (c *combiner[T]) add(item T) {
	q := &queuedItem[T]{v: item}
	for {
		q.next = c.queued.Load()
		if c.queued.CompareAndSwap(q.next, q) {
			break
		}
	}
	// A caller that finds another sending leaves its item to that sender,
	// which looks again after it stops sending: nothing is left behind.
	for c.sending.CompareAndSwap(false, true) {
		for list := c.queued.Swap(nil); list != nil; list = c.queued.Swap(nil) {
			c.sendList(list)
		}
		c.sending.Store(false)
		if c.queued.Load() == nil {
			return
		}
	}
}

// sendList sends a list taken off the queue (newest first) oldest first,
// in batches of at most c.most.
func (c *combiner[T]) sendList(list *queuedItem[T]) {
	var items []T
	for q := list; q != nil; q = q.next {
		items = append(items, q.v)
	}
	for i, j := 0, len(items)-1; i < j; i, j = i+1, j-1 {
		items[i], items[j] = items[j], items[i]
	}
	for len(items) > 0 {
		n := min(len(items), c.most)
		c.send(items[:n:n])
		items = items[n:]
	}
}
